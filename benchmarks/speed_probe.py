"""Does a stack-independent speed probe, timed in a process, predict how fast that process runs the model? (Issue 51:
a covariate for a block's B/A, adopted only if it predicts a process's own latency on real data.)

    python benchmarks/speed_probe.py --processes 30 --out RECORD/sequential.jsonl   # measure, then summarize
    python benchmarks/speed_probe.py --pairs 18 --out RECORD/together.jsonl         # pairs alive together
    python benchmarks/speed_probe.py --summarize RECORD/together.jsonl

Fresh processes one after the other, on one inductor cache (a first, unrecorded process fills it). Each loads
ResNet-50 (the published architecture, random weights, batch 1), compiles it (`default`), and then runs `--rounds`
rounds: the probes, then 3 eager calls, then 3 compiled calls. The probes use the standard library only, so they time
the same code in any stack on one interpreter: `copy` (a 64 MiB copy into a buffer that exists: memory bandwidth),
`fault` (a fresh 64 MiB buffer written: page faults), `sha` (SHA-256 of 32 MiB: a core's arithmetic), `loop` (a
Python loop: the interpreter). `matmul` (torch, 512×512 float32 products) is timed as well, for comparison, though it
is not stack-independent. Every round's values go to `--out`, a JSON line per process. With `--pairs`, two such
processes are alive together and take turns a round each, as a block of `benchmark.together` runs.

The summary says, per probe and metric (process medians, logs): the correlation across processes, and the sd of log
latency before and after removing the probe's fitted share (a regression through the processes), and the same within
processes (rounds around their process's median), where the machine's state over time lives. For pairs, the same
of log B/A across pairs, and how much of it the rounds make (see rounds_share).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PROBES = ("copy", "fault", "sha", "loop", "matmul")
METRICS = ("eager_ms", "compiled_ms")
BUFFER_BYTES = 64 << 20


def probe_seconds(source: bytearray, target: bytearray, matmul) -> dict[str, float]:
    """One round of the probes, each timed on the host clock (seconds)."""
    timed = {}
    started = time.perf_counter()
    memoryview(target)[:] = source
    timed["copy"] = time.perf_counter() - started
    started = time.perf_counter()
    fresh = bytearray(BUFFER_BYTES)
    memoryview(fresh)[:] = source
    timed["fault"] = time.perf_counter() - started
    del fresh
    started = time.perf_counter()
    hashlib.sha256(memoryview(source)[: 32 << 20]).digest()
    timed["sha"] = time.perf_counter() - started
    started = time.perf_counter()
    total = 0
    for value in range(1_000_000):
        total += value
    timed["loop"] = time.perf_counter() - started
    started = time.perf_counter()
    matmul()
    timed["matmul"] = time.perf_counter() - started
    return timed


def child(rounds: int, serve: bool = False) -> dict:
    """One fresh process's rounds (run with --child); with `serve`, one round each time a line comes on stdin, its
    values printed as a JSON line, until stdin ends (two such processes alive together take turns)."""
    import torch

    from compilebench.harness import models

    card = models.get_card("microsoft/resnet-50")
    model = models.random_model(card, "full", 0).eval()
    pixels = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    left, right = torch.randn(512, 512), torch.randn(512, 512)

    def matmul():
        for _ in range(20):
            torch.mm(left, right)

    source, target = bytearray(os.urandom(1 << 20) * 64), bytearray(BUFFER_BYTES)
    with torch.inference_mode():
        compiled = torch.compile(model)
        compiled(pixel_values=pixels)
        for _ in range(2):  # warm-up
            model(pixel_values=pixels)
            compiled(pixel_values=pixels)

        def one_round() -> dict[str, float]:
            row = probe_seconds(source, target, matmul)
            for name, module in (("eager_ms", model), ("compiled_ms", compiled)):
                calls = []
                for _ in range(3):
                    started = time.perf_counter()
                    module(pixel_values=pixels)
                    calls.append((time.perf_counter() - started) * 1e3)
                row[name] = statistics.median(calls)
            return row

        if serve:
            print("ready", flush=True)
            for _ in sys.stdin:
                print(json.dumps(one_round()), flush=True)
            return {}
        found = [one_round() for _ in range(rounds)]
    return {"pid": os.getpid(), "torch": torch.__version__, "rounds": found}


def filled_cache() -> dict[str, str]:
    """The children's environment: one inductor cache of their own, filled by a first child that is not recorded."""
    cache = Path(tempfile.mkdtemp(prefix="speed-probe-"))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, __file__, "--child", "--rounds", "1"], env=env, check=True, capture_output=True)
    return env


def measure_pairs(pairs: int, rounds: int, out: Path) -> None:
    """Pairs of fresh processes alive together, taking turns a round each (who goes first alternates by round)."""
    env = filled_cache()
    with out.open("w") as sink:
        for index in range(pairs):
            started = time.time()
            pair = [subprocess.Popen([sys.executable, __file__, "--child", "--serve"], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
            for process in pair:
                assert process.stdout.readline().strip() == "ready"
            found = [[], []]
            for turn in range(rounds):
                for side in (0, 1) if turn % 2 == 0 else (1, 0):
                    pair[side].stdin.write("go\n")
                    pair[side].stdin.flush()
                    found[side].append(json.loads(pair[side].stdout.readline()))
            for process in pair:
                process.stdin.close()
                process.wait(timeout=60)
            for side in (0, 1):
                record = {"process": f"{index}{'ab'[side]}", "pair": index, "side": side, "started": started,
                          "wall_s": time.time() - started, "torch": "", "rounds": found[side]}  # fmt: skip
                sink.write(json.dumps(record) + "\n")
            sink.flush()
            eager = [statistics.median(r["eager_ms"] for r in found[side]) for side in (0, 1)]
            print(f"pair {index}: eager {eager[0]:.1f} / {eager[1]:.1f} ms, {time.time() - started:.0f} s", flush=True)


def summarize_pairs(records: list[dict]) -> None:
    """Per pair, log B/A of each probe and metric (process medians); their correlation across pairs, and the sd of
    log B/A before and after removing the probe's fitted share."""
    by_pair: dict[int, dict[int, dict]] = {}
    for record in records:
        by_pair.setdefault(record["pair"], {})[record["side"]] = record
    every = slice(None)
    ratios = {key: [side_median(sides[1], key, every) - side_median(sides[0], key, every) for sides in by_pair.values()]
              for key in (*PROBES, *METRICS)}  # fmt: skip
    print(f"{len(by_pair)} pairs alive together, {len(records[0]['rounds'])} rounds each a process")
    print("| probe | metric | across pairs: r of log B/A | sd log B/A | sd log B/A, probe removed |")
    print("|---|---|---|---|---|")
    for metric in METRICS:
        for probe in PROBES:
            r, sd, left = fit(ratios[probe], ratios[metric])
            print(f"| {probe} | {metric} | {r:+.2f} | {sd:.3f} | {left:.3f} |")
    rounds_share(list(by_pair.values()))


def side_median(record: dict, key: str, rounds: slice) -> float:
    """The log of a process's median of a probe or metric over the chosen rounds."""
    return statistics.median(math.log(r[key]) for r in record["rounds"][rounds])


def rounds_share(pairs: list[dict[int, dict]]) -> None:
    """How much of a pair's log B/A comes from its processes' rounds (falls with more of them) and how much is the
    processes' own (does not): the sd of log B/A from half the rounds (first, last, odd, even) and from all, and
    var(n rounds) = own + per_round / n solved from the two."""
    n = len(pairs[0][0]["rounds"])
    subsets = {"first half": slice(0, n // 2), "last half": slice(n // 2, n), "odd rounds": slice(0, n, 2),
               "even rounds": slice(1, n, 2), "all": slice(0, n)}  # fmt: skip
    print(
        f"\n| metric | {' | '.join(subsets)} | r odd/even | own sd | per-round sd | sd at 2n rounds | sd at 4n rounds |"
    )
    print(f"|---|{'---|' * len(subsets)}---|---|---|---|---|")
    for metric in METRICS:
        ratios = {name: [side_median(sides[1], metric, rounds) - side_median(sides[0], metric, rounds)
                         for sides in pairs] for name, rounds in subsets.items()}  # fmt: skip
        sds = {name: statistics.stdev(values) for name, values in ratios.items()}
        r_halves, _, _ = fit(ratios["odd rounds"], ratios["even rounds"])
        half = statistics.fmean(sds[name] ** 2 for name in list(subsets)[:4])
        per_round = max(half - sds["all"] ** 2, 0.0) * n  # var(n/2) - var(n) = per_round / n
        own = max(sds["all"] ** 2 - per_round / n, 0.0)
        at = [math.sqrt(own + per_round / (k * n)) for k in (2, 4)]
        cells = " | ".join(f"{value:.3f}" for value in [*sds.values()])
        split = " | ".join(f"{value:.3f}" for value in (math.sqrt(own), math.sqrt(per_round), *at))
        print(f"| {metric} | {cells} | {r_halves:+.2f} | {split} |")


def measure(processes: int, rounds: int, out: Path) -> None:
    """Fresh processes one after the other."""
    env = filled_cache()
    command = [sys.executable, __file__, "--child", "--rounds"]
    with out.open("w") as sink:
        for index in range(processes):
            started = time.time()
            done = subprocess.run([*command, str(rounds)], env=env, check=True, capture_output=True, text=True)
            record = {"process": index, "started": started, "wall_s": time.time() - started,
                      **json.loads(done.stdout.strip().splitlines()[-1])}  # fmt: skip
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            medians = {key: statistics.median(r[key] for r in record["rounds"]) for key in METRICS}
            print(f"process {index}: eager {medians['eager_ms']:.1f} ms, compiled {medians['compiled_ms']:.1f} ms, "
                  f"{record['wall_s']:.0f} s", flush=True)  # fmt: skip


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """(correlation, sd of ys, sd of ys less the least-squares line through xs: its residuals on n - 2 df)."""
    r, sd, n = statistics.correlation(xs, ys), statistics.stdev(ys), len(ys)
    return r, sd, sd * math.sqrt((1 - r * r) * (n - 1) / (n - 2))


def summarize(paths: list[Path]) -> None:
    records = [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
    units = len({record["pair"] for record in records}) if "pair" in records[0] else len(records)
    if units < 3:
        raise SystemExit(f"{units} process(es) or pair(s): a fit through them needs 3 or more")
    if "pair" in records[0]:
        summarize_pairs(records)
        return
    log_median = {key: [] for key in (*PROBES, *METRICS)}
    within = {key: [] for key in (*PROBES, *METRICS)}
    for record in records:
        for key in log_median:
            values = [math.log(r[key]) for r in record["rounds"]]
            centre = statistics.median(values)
            log_median[key].append(centre)
            within[key].append([value - centre for value in values])
    print(f"{len(records)} processes, {len(records[0]['rounds'])} rounds each, torch {records[0]['torch']}")
    print("| probe | metric | across processes: r | sd log | sd log, probe removed | r, each less its neighbours' "
          "mean | within processes: r |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for metric in METRICS:
        for probe in PROBES:
            r, sd, left = fit(log_median[probe], log_median[metric])
            r_local, _, _ = fit(less_neighbours(log_median[probe]), less_neighbours(log_median[metric]))
            flat_x = [v for rows in within[probe] for v in rows]
            flat_y = [v for rows in within[metric] for v in rows]
            r_within, _, _ = fit(flat_x, flat_y)
            print(f"| {probe} | {metric} | {r:+.2f} | {sd:.3f} | {left:.3f} | {r_local:+.2f} | {r_within:+.2f} |")


def less_neighbours(values: list[float]) -> list[float]:
    """Each value but the first and last less the mean of the processes before and after it: what is a process's own
    rather than the machine's slow drift."""
    return [values[i] - (values[i - 1] + values[i + 1]) / 2 for i in range(1, len(values) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--pairs", type=int, default=0, help="pairs of processes alive together (instead of one by one)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--summarize", nargs="+", type=Path, metavar="JSONL")
    args = parser.parse_args()
    if args.child:
        found = child(args.rounds, args.serve)
        if found:
            print(json.dumps(found))
    elif args.summarize:
        summarize(args.summarize)
    elif args.out and args.pairs:
        measure_pairs(args.pairs, args.rounds, args.out)
        summarize([args.out])
    elif args.out:
        measure(args.processes, args.rounds, args.out)
        summarize([args.out])
    else:
        parser.error("give --out RECORD/probe.jsonl to measure, or --summarize JSONL...")


if __name__ == "__main__":
    main()
