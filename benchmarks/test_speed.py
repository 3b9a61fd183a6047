"""How much faster is `make test` than at an earlier commit, measured as the issue measured it: a fresh clone's
`make test`, set-up included, here and now, interleaved so that this machine's drift falls on both sides.

    python benchmarks/test_speed.py [--baseline de73ddf] [--candidate HEAD] [--order ABBA] [--workdir DIR]

Each run clones this repository into a new folder, checks out the commit and runs `make test` there (the venv,
the installs and the tests), with an empty temp folder and inductor cache of its own: de73ddf's tests (the
issue's baseline, 230 tests) compile into the user's inductor cache, which on a machine that ran them before is
warm, so a fresh machine is what both sides get. Each clone's venv is removed after its run. The runs go in
`--order` (A the baseline, B the candidate; A B B A by default), one at a time; nothing else should run meanwhile.
Prints each run (wall seconds, of which pytest's own, and the machine's CPU seconds from /proc/stat), the ratio A/B
of each adjacent A-B pair and the medians, and writes them as JSON to `--out` where given. Exit 0 whatever the
ratios say, 1 when a run failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from compilebench.harness import launcher

ROOT = Path(__file__).resolve().parents[1]
ISSUE_BASELINE = "de73ddf"  # main when the test-speed issue was filed: about 760 s with set-up, 230 tests
PYTEST_SUMMARY = re.compile(r"^=*\s*\d+ (?:passed|failed|error|skipped)\b.* in (?P<seconds>[0-9.]+)s\b", re.MULTILINE)


@dataclass(frozen=True)
class Run:
    label: str  # "A" or "B"
    commit: str
    returncode: int
    wall_s: float
    pytest_s: float | None  # pytest's own "in N s"; None where it printed none
    machine_cpu_s: float  # all cores, from /proc/stat: how busy the machine was meanwhile
    log: str


def pytest_seconds(output: str) -> float | None:
    """The seconds of pytest's last summary line ("370 passed, 3 skipped in 388.06s"), or None."""
    found = PYTEST_SUMMARY.findall(output)
    return float(found[-1]) if found else None


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent (user, nice, system, irq, softirq), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def pair_ratios(runs: list[Run]) -> list[float]:
    """Baseline seconds over candidate seconds, for each run next to a run of the other side (A B B A: two pairs)."""
    ratios, pending = [], None
    for run in runs:
        if pending is not None and pending.label != run.label:
            baseline, candidate = (pending, run) if pending.label == "A" else (run, pending)
            ratios.append(baseline.wall_s / candidate.wall_s)
            pending = None
        else:
            pending = run
    return ratios


def resolve(commit: str, repo: Path = ROOT) -> str | None:
    """The full hash of `commit` in `repo` (this one), or None where it names no commit."""
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else None


def run_make_test(label: str, commit: str, workdir: Path) -> Run:
    """One fresh clone's `make test` at `commit`, with its own empty temp folder and inductor cache."""
    clone, scratch = workdir / f"{label}-{commit[:8]}-{time.time_ns()}", Path(tempfile.mkdtemp(dir=workdir))
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
    env = {**os.environ, **launcher.cache_variables(scratch)}  # its temp folder and compile caches, all empty
    log = workdir / f"{clone.name}.log"
    cpu_before, started = machine_cpu_s(), time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(["make", "test"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
        try:
            returncode = process.wait()
        except BaseException:
            launcher.end_group(process)  # the session this started, by its leader's PID
            raise
    wall_s, cpu_s = time.perf_counter() - started, machine_cpu_s() - cpu_before
    shutil.rmtree(clone / ".venv", ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return Run(label, commit, returncode, wall_s, pytest_seconds(log.read_text(errors="replace")), cpu_s, str(log))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=ISSUE_BASELINE, help="commit A (default: the issue's, de73ddf)")
    parser.add_argument("--candidate", default="HEAD", help="commit B (default: HEAD, as committed)")
    parser.add_argument("--order", default="ABBA", help="the runs, A and B in order (default ABBA)")
    parser.add_argument("--workdir", type=Path, default=None, help="where clones and logs go (default: a new temp)")
    parser.add_argument("--out", type=Path, default=None, help="write the runs and ratios here as JSON")
    args = parser.parse_args()
    if not args.order or set(args.order) - {"A", "B"}:
        parser.error(f"--order {args.order!r}: a sequence of A (baseline) and B (candidate), e.g. ABBA")
    commits = {"A": resolve(args.baseline), "B": resolve(args.candidate)}
    for label, given in (("A", args.baseline), ("B", args.candidate)):
        if commits[label] is None:
            parser.error(f"{given!r} is not a commit of {ROOT} (give a hash, tag or branch)")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="compilebench-test-speed-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs = []
    for label in args.order:
        run = run_make_test(label, commits[label], workdir)
        runs.append(run)
        pytest_s = "?" if run.pytest_s is None else f"{run.pytest_s:.0f}"
        print(f"{label} {run.commit[:8]} rc={run.returncode} {run.wall_s:.0f} s (pytest {pytest_s} s), machine CPU "
              f"{run.machine_cpu_s:.0f} s, log {run.log}", flush=True)  # fmt: skip
    ratios = pair_ratios(runs)
    medians = {side: statistics.median(r.wall_s for r in runs if r.label == side) for side in set(args.order)}
    if ratios:
        print("A/B per pair: " + ", ".join(f"{ratio:.2f}x" for ratio in ratios))
    if len(medians) == 2:
        print(f"medians: A {medians['A']:.0f} s, B {medians['B']:.0f} s, A/B {medians['A'] / medians['B']:.2f}x")
    if args.out:
        args.out.write_text(json.dumps({"runs": [asdict(run) for run in runs], "pair_ratios": ratios,
                                        "median_s": medians}, indent=1) + "\n")  # fmt: skip
    sys.exit(1 if any(run.returncode != 0 for run in runs) else 0)


if __name__ == "__main__":
    main()
