"""Where it changed: a bisect over releases, each round a short release series measured as a DVC experiment.

    python -m compilebench.bisect --torch 2.0.1 2.15.0        # the ends; the minor releases between from the index
    python -m compilebench.bisect --torch 2.0.1 2.3.1 2.6.0   # more than two: exactly these, in this order
    python -m compilebench.bisect --transformers 4.57.6 5.24.0 [--aa] [--compile] [--seed 1] [--budget-min 60]
    python -m compilebench.bisect --environments a b c d     # environments of params.yaml, in this order
    make bisect TORCH="2.0.1 2.15.0" [SEED=1] [AA=1]          # the same, under the project's pipeline lock

Pinpoint's way, with compilebench's verdicts: the first round measures the two ends on the whole suite (with `--aa`
the newer end twice: an A/A step inside the round, which must never change). Every headline (cell x eager latency,
compiled latency, speedup; cold and warm compile with `--compile`) whose ends got a direction word is a *search*
over the releases between. Each next round measures the ends of a search's span and the release in its middle, on
that search's cells only (searches that need the same releases share a round): a step with a direction narrows the
span to it, two such steps split it (the change came in two steps), a step still `inconclusive` beside no changed
one is measured again once with twice the blocks; equivalent steps on both sides say the change is spread thinner
than the margin. A search ends *pinned* to a step between adjacent releases, *spread*, *unresolved* (its narrowest
span said) or *out of time* (the rounds it still needs priced at this bisect's own). Headlines whose ends are
`equivalent` or `inconclusive` cost nothing more. A round runs exactly its planned blocks (`budget_min` 0: the
adaptive loop only measures a disturbed block again), so it costs what it was priced at; more blocks go only to a
step still `inconclusive`, as the bisect's retry.

Each round is `dvc exp run` of the pipeline with `compare` set to its releases and the chosen suite narrowed to its
cells, so every round is a DVC experiment and an MLflow parent run of its own, its releases environments built once
(`environments --remove-unused` frees them). The journal (`paths.bisect`/NAME/journal.json) holds every round
finished; state is replayed from it, so a killed bisect resumes with the round it was in (whose benchmark resumes from
its own journal). params.yaml is put back as it was when the bisect ends.

Why it changed: right after a round that pinned a compiled headline (compiled latency, speedup, compile time) to a
step, explain.py profiles that step's changed compiled cells on the round's runs and warm caches (one process a side),
kept in NAME/explain/OLDER-NEWER/; the report names the categories that moved, and the time counts against the budget
(`--no-explain`: not).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from compilebench.analysis import bisection, compare
from compilebench.analysis.bisection import COMPILE_HEADLINES, HEADLINES, Journal, RoundPlan, RoundResult, Search, Spec
from compilebench.config import Config, ConfigError, at_home, guard, load_config, releases, stage_config
from compilebench.environments import package_index
from compilebench.records.formats import EAGER
from compilebench.records.reading import read_json, read_jsonl
from compilebench.records.writing import write_atomic, write_json
from compilebench.report.bisection import figure, report
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)


class BisectError(RuntimeError):
    """A bisect that cannot start or go on; the message says why and what to do."""


def round_overrides(spec: Spec, plan: RoundPlan, config: Config) -> list[str]:
    """The `dvc exp run -S` values of a round: its releases, the suite narrowed to its cells, the seed, blocks."""
    names = [spec.releases[position] for position in plan.positions]
    # budget_min 0: a round runs its planned blocks (a disturbed one again), no more; a retry is the bisect's own
    found = [f"compare=[{','.join(names)}]", f"benchmark.seed={spec.seed}", "budget_min=0"]
    if plan.cells:
        chosen = config.suites[spec.suite]
        models = [m for m in chosen.models if any(cell[0] == m for cell in plan.cells)]
        batches = [b for b in chosen.batch_sizes if any(cell[1] == b for cell in plan.cells)]
        variants = [v for v in chosen.variants if v == EAGER or any(cell[2] == v for cell in plan.cells)]
        quoted = ",".join(f'"{model}"' for model in models)
        found += [
            f"++suites.{spec.suite}.models=[{quoted}]",
            f"++suites.{spec.suite}.batch_sizes=[{','.join(map(str, batches))}]",
            f"++suites.{spec.suite}.variants=[{','.join(variants)}]",
        ]
    if not set(spec.metrics) & set(COMPILE_HEADLINES):
        found.append("++benchmark.cold_replicates=0")  # no cold block: nothing it measures is searched
    if plan.replicates != config.benchmark.replicates:
        most = max(config.benchmark.max_replicates, plan.replicates)
        found += [f"++benchmark.replicates={plan.replicates}", f"++benchmark.max_replicates={most}"]
    return found


def run_to_end(command: list[str]) -> int:
    """Run `command` to its end and return its exit status. A SIGTERM or SIGHUP to the bisect goes to it first (a
    `dvc exp run` ends its stages, which end their trials), and the bisect ends by the signal once it has ended, so a
    stopped bisect leaves no round running behind it; run again, it resumes with that round."""
    child, stopped = subprocess.Popen(command), []

    def forward(signum: int, _frame: object) -> None:  # only passes it on: the wait below sees the child end
        stopped.append(signum)
        child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        returncode = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if stopped:
        os.kill(os.getpid(), stopped[0])  # the handler before it (the default: the bisect ends by the signal)
    return returncode


def run_round(spec: Spec, plan: RoundPlan, number: int, config: Config, folder: Path) -> RoundResult:
    """One round as a DVC experiment; its comparison judged step by step, its files kept in the bisect's folder."""
    import pandas as pd

    name = f"{spec.name}-r{number}-{time.strftime('%m%d-%H%M%S')}"
    command = ["dvc", "exp", "run", "-n", name]
    for value in round_overrides(spec, plan, config):
        command += ["-S", value]
    releases_named = " ".join(spec.releases[p] for p in plan.positions)
    LOGGER.info(
        "bisect round %d: %s on %s",
        number,
        releases_named,
        ", ".join(f"{m} bs{b} {v}" for m, b, v in plan.cells) or "the whole suite",
    )
    began = time.monotonic()
    returncode = guard.after(name, run_to_end(command))  # a plain `dvc exp run` beside it: params put back, round saved
    wall_s = time.monotonic() - began
    if returncode != 0:
        raise BisectError(
            f"round {number} ({' '.join(command)}) exited {returncode}: fix what it said, then "
            f"run the bisect again (it resumes with this round)"
        )
    paths = config.paths
    info = RunInfo.read(paths.run_info)
    labels = list(info.labels)
    kept = folder / f"round-{number}"
    kept.mkdir(parents=True, exist_ok=True)
    for source in (paths.comparison, paths.run_info, paths.summary):
        shutil.copy(source, kept / Path(source).name)
    table = pd.read_csv(paths.comparison)
    compared = [compare.Comparison.read(row) for row in table.to_dict("records")]
    steps = [
        (headline, replace(step, round=number))
        for headline, step in bisection.steps_of(compared, labels, plan.positions, spec.metrics)
    ]
    values = bisection.values_of(read_jsonl(paths.results), labels, plan.positions, spec.metrics)
    return RoundResult(plan, name, wall_s, tuple(steps), tuple(values), info.processes or 0)


def explain_folder(spec: Spec, step: tuple[int, int], folder: Path) -> Path:
    """Where a pinned step's explain is kept: `explain/OLDER-NEWER/` in the bisect's folder."""
    return folder / "explain" / f"{spec.releases[step[0]]}-{spec.releases[step[1]]}"


def explain_steps(
    spec: Spec, steps: list[tuple[int, int]], config: Config, folder: Path
) -> tuple[tuple[tuple[int, int], ...], float]:
    """Why each step the round just run pinned changed: `python -m compilebench.explain --b NEWER` on the round's
    comparison, runs and warm caches (the workspace's until the next round), its paths.explain kept per step. A
    failed explain is said and skipped: the bisect's answer stands without it. Returns the steps explained and the
    wall time it took (params.yaml as the round ran it: explain plans the round's own trials)."""
    began, done = time.monotonic(), []
    out = Path(config.paths.explain)
    for step in steps:
        newer = spec.releases[step[1]]
        shutil.rmtree(out, ignore_errors=True)  # the last explain's, of another comparison
        LOGGER.info("bisect: explaining %s → %s", spec.releases[step[0]], newer)
        returncode = run_to_end([sys.executable, "-m", "compilebench.explain", "--b", newer])
        if returncode != 0 or not (out / "explain.json").exists():
            LOGGER.warning("bisect: explain of the step to %s exited %d; the bisect goes on", newer, returncode)
            continue
        kept = explain_folder(spec, step, folder)
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(out, kept)
        done.append(step)
    return tuple(done), time.monotonic() - began


def why_of(spec: Spec, rounds: list[RoundResult], folder: Path) -> dict[tuple[int, int], list[dict]]:
    """Each explained step's explain.json (its cells, whether both sides were profiled, the categories that
    moved), read from the bisect's folder."""
    found = {}
    for result in rounds:
        for step in result.explained:
            path = explain_folder(spec, step, folder) / "explain.json"
            if path.exists():
                found[step] = read_json(path)
    return found


def fixed_companions(spec: Spec, config: Config) -> dict[str, releases.Release]:
    """The releases whose companions a round alone would choose otherwise: resolved once over the whole bisect (the
    oldest release decides, as in a series of all of them), so a release is one stack in every round."""
    import platform
    from importlib import metadata

    try:
        resolved = releases.resolve_series(
            list(spec.releases), set(config.environments), metadata.version("transformers"), platform.python_version()
        )
    except releases.ReleaseError as error:
        raise BisectError(str(error)) from None
    return {name: release for name, release in resolved.items() if set(release.pins) != {"torch"} or release.python}


def with_definitions(params_text: str, fixed: dict[str, releases.Release]) -> str:
    """params.yaml with each fixed release defined under `environments` (flow style, a line each), comments kept."""
    if not fixed:
        return params_text
    lines = params_text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.rstrip().split("#")[0].strip() == "environments:"), None)
    if at is None:
        raise BisectError(
            "params.yaml: no block `environments:` line to define the bisect's releases under (write "
            "`environments:` as a block, one environment a line)"
        )
    added = []
    for name, release in fixed.items():
        pins = ", ".join(f"{package}: '{version}'" for package, version in release.pins.items())
        python = f", python: '{release.python}'" if release.python else ""
        added.append(f"  {name}: {{pins: {{{pins}}}{python}}}  # the bisect's: companions fixed for all its rounds\n")
    return "".join([*lines[: at + 1], *added, *lines[at + 1 :]])


def index_versions(package: str) -> list[str]:
    """The releases of `package` on the package index pip is set up with; BisectError where it cannot be read."""
    found = package_index.index_versions(package)
    if found is None:
        raise BisectError(
            f"the package index's releases of {package} could not be read (`pip index versions {package}`); "
            f"name every release to step through instead, oldest first"
        )
    return found


def release_names(package: str, versions: list[str], index: list[str] | None) -> list[str]:
    """The environments a bisect of `package` steps through: two ends, the minor releases between from the index;
    more, exactly those. Each must be a release the index has; oldest first."""
    for version in versions:
        if index is not None and version not in index:
            known = [v for v in index if releases.version_tuple(v)[:1] == releases.version_tuple(version)[:1]]
            raise BisectError(
                f"{package} {version} is not a release on the package index; its releases of that "
                f"major: {', '.join(known[:40]) or 'none'}"
            )
    tuples = [releases.version_tuple(version) for version in versions]
    if tuples != sorted(tuples) or len(set(tuples)) != len(tuples):
        raise BisectError(f"{package} releases {' '.join(versions)}: name them oldest first, each once")
    try:
        chosen = releases.minor_releases(index or [], versions[0], versions[1]) if len(versions) == 2 else versions
    except releases.ReleaseError as error:
        raise BisectError(str(error)) from None
    return [f"{package}-{version}" for version in chosen]


def run(spec: Spec, config: Config, fresh: bool, max_rounds: int | None, explain: bool = True) -> list[Search]:
    """The bisect: rounds until every search has ended (or the budget, or `max_rounds` this call); after a round that
    pinned a compiled headline, that step explained (unless not `explain`); the journal after each round and each
    explain, the report at the end; params.yaml as it was before."""
    folder = Path(config.paths.bisect) / spec.name
    path = folder / "journal.json"
    params = Path("params.yaml")
    if fresh and folder.exists():
        shutil.rmtree(folder)
    if path.exists():
        journal = Journal.from_dict(read_json(path))
        write_atomic(params, journal.params_before)  # a killed bisect left its last round's values in it
        config = at_home(load_config())
        spec = replace(spec, replicates=config.benchmark.replicates, suite=config.suite)
        if replace(journal.spec, budget_min=spec.budget_min) != spec:  # a new budget may finish it: not its identity
            raise BisectError(
                f"{path} is a bisect of {journal.spec.releases[0]} → {journal.spec.releases[-1]} with other settings "
                f"({journal.spec}); add --fresh to start this one over"
            )
        journal.spec = spec
        LOGGER.info("resuming bisect %s after %d round(s)", spec.name, len(journal.rounds))
    else:
        journal = Journal(spec, params.read_text())
    fixed = fixed_companions(spec, config)
    units = len(config.suites[spec.suite].models) * len(config.suites[spec.suite].batch_sizes)
    ran = 0
    try:
        while True:
            plan, searches = bisection.next_plan(spec, journal.rounds, units)
            if plan is None or (max_rounds is not None and ran >= max_rounds):
                break
            write_atomic(params, with_definitions(journal.params_before, fixed))
            result = run_round(spec, plan, len(journal.rounds), config, folder)
            journal.rounds.append(result)
            write_json(path, journal.to_dict())
            ran += 1
            steps = bisection.to_explain(spec, journal.rounds) if explain else []
            if steps:
                explained, explain_s = explain_steps(spec, steps, config, folder)
                journal.rounds[-1] = replace(result, explained=explained, explain_s=explain_s)
                write_json(path, journal.to_dict())
    finally:
        write_atomic(params, journal.params_before)
    folder.mkdir(parents=True, exist_ok=True)
    if searches:
        drawn = figure(spec, journal.rounds, searches, config.plot.width_in)
        drawn.savefig(folder / "bisect.png", dpi=config.plot.dpi)
    why = why_of(spec, journal.rounds, folder)
    write_atomic(folder / "report.md", report(spec, journal.rounds, searches, finished=plan is None, why=why))
    if plan is None:
        write_json(folder / "bisect.json", {"spec": asdict(spec), "searches": [asdict(s) for s in searches]})
    return searches


def spec_of(args: argparse.Namespace, config: Config) -> Spec:
    """What the command line asks for, its releases resolved (the package index read for two ends)."""
    if args.environments:
        names = list(args.environments)
        if len(names) < 2:
            raise BisectError("--environments: name at least two environments, oldest first")
        kind = "environments"
    else:
        package = "torch" if args.torch else "transformers"
        versions = args.torch or args.transformers
        if len(versions) < 2:
            raise BisectError(f"--{package}: name two releases (the ends), or every release to step through")
        names = release_names(package, versions, index_versions(package) if len(versions) == 2 else None)
        kind = package
    metrics = (*HEADLINES, *COMPILE_HEADLINES) if args.compile else HEADLINES
    name = f"{kind}-{names[0].removeprefix(kind + '-')}-{names[-1].removeprefix(kind + '-')}"
    name += f"-seed{args.seed}" if args.seed else ""
    budget = args.budget_min
    return Spec(name, tuple(names), metrics, args.seed, args.aa, config.benchmark.replicates, budget, config.suite)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--torch", nargs="+", metavar="X.Y.Z", help="torch releases: two ends, or every one, oldest first"
    )
    which.add_argument("--transformers", nargs="+", metavar="X.Y.Z", help="transformers releases, as --torch")
    which.add_argument("--environments", nargs="+", metavar="NAME", help="environments of params.yaml, in order")
    parser.add_argument("--seed", type=int, default=0, help="the run order's seed (benchmark.seed) of every round")
    parser.add_argument("--aa", action="store_true", help="the first round measures the newer end twice: an A/A step")
    parser.add_argument("--compile", action="store_true", help="search cold and warm compile time too (cold blocks)")
    parser.add_argument(
        "--budget-min",
        type=float,
        default=60.0,
        metavar="M",
        help="wall minutes of rounds at most (60); each round is priced before it starts, the first always runs",
    )
    parser.add_argument("--max-rounds", type=int, metavar="N", help="stop after N rounds now; run again to resume")
    parser.add_argument("--fresh", action="store_true", help="forget this bisect's journal and start over")
    parser.add_argument(
        "--no-explain", action="store_true", help="do not profile the steps it pins (explain.py: why they changed)"
    )
    args = parser.parse_args()
    config = stage_config()
    try:
        spec = spec_of(args, config)
        load_config(overrides=[f"compare=[{','.join(spec.releases)}]"])  # every name resolves: before any round
        searches = run(spec, config, args.fresh, args.max_rounds, not args.no_explain)
    except (BisectError, ConfigError, OSError) as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    for search in searches:
        names = spec.releases
        LOGGER.info(
            "bisect: %s %s: %s → %s, %s",
            search.headline.text(),
            search.direction,
            names[search.low],
            names[search.high],
            search.state + (f" ({search.note})" if search.note else ""),
        )
    LOGGER.info("bisect %s: %s", spec.name, Path(config.paths.bisect) / spec.name / "report.md")


if __name__ == "__main__":
    main()
