"""How long a process should time: each comparison's blocks judged again as if its processes had timed only their
first T seconds of rounds, and what that would have cost and found.

    python benchmarks/window_noise.py benchmarks/results/2026-11-29-xeon-torch-2.14.1-margin-10 [RECORD ...] \
        [--window-s 10 7 5 3] [--min-iters 10] [--per-cell]

Each record is a comparison's folder (its `results/runs.jsonl`, blocks run together, rounds paired by turn). A process
that timed for its window stopped at the first round that reached both `--min-iters` rounds and T seconds of calls
(every arm's, as the timing loop counts them: benchmark.min_iters, min_time_s), so its first rounds are what it would
have timed: each process's samples and their turns are cut there, its runs made again from them (`RunRecord.from_dict`,
its values derived afresh) and compared as aggregate compares them (`compare.by_turn_differences`), with no noise
record: a first comparison. Per metric of latency and speedup it prints the per-block sd of log B/A pooled over the
records' cells (each cell's spread around its own mean, summed with its degrees of freedom), the seconds a block's
process would have taken (its own time less the seconds it did not time), and what each T buys: the variance of a
cell's mean over a fixed budget, sd² times seconds a block, relative to the longest window (below 1: more found per
minute). Kalibera and Jones's optimum window follows from the fit of sd² = s_p² + a / T over the windows:
d* = sqrt(a·o / s_p²), o the seconds a process spends not timing.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from compilebench.analysis import compare, stats
from compilebench.analysis.run_record import RunRecord

METRICS = compare.BY_TURN_METRICS
SAMPLED = ("eager_ms", "compiled_ms", "round_turns")  # what a cut keeps the first rounds of


def round_ms(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per process (its id), the milliseconds of each timed round: eager's call and every arm's (a timing process's
    compiled runs each list its own arm beside the same eager samples; a cold or paired process has one arm)."""
    eager: dict[str, list[float]] = {}
    arms: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for row in rows:
        for process in row["process_results"]:
            key = process_key(row, process)
            if process.get("eager_ms"):
                eager[key] = list(process["eager_ms"])
            if process.get("compiled_ms"):
                arms[key][row["variant"]] = list(process["compiled_ms"])
    found = {}
    for key, eager_ms in eager.items():
        columns = [eager_ms, *(ms for ms in arms[key].values() if len(ms) == len(eager_ms))]
        found[key] = [sum(values) for values in zip(*columns, strict=True)]
    return found


def process_key(row: dict[str, Any], process: dict[str, Any]) -> str:
    """What names one process across the runs that list it: its timing process id, or its trial id."""
    return f"{row['environment']}|{process.get('process_id') or process['trial_id']}"


def rounds_within(round_ms_: list[float], window_s: float, min_iters: int) -> int:
    """How many rounds a process timing for `window_s` seconds would have timed: the first at which both
    `min_iters` rounds and `window_s` seconds of calls were reached (all of them where it never got there)."""
    spent = 0.0
    for count, milliseconds in enumerate(round_ms_, start=1):
        spent += milliseconds / 1000
        if count >= min_iters and spent >= window_s:
            return count
    return len(round_ms_)


def cut(rows: list[dict[str, Any]], window_s: float, min_iters: int) -> tuple[list[RunRecord], dict[str, float]]:
    """The runs as if each process had timed `window_s` seconds, and per process the seconds it would not have
    timed (its full timed seconds less the cut's)."""
    rounds = round_ms(rows)
    keep = {key: rounds_within(ms, window_s, min_iters) for key, ms in rounds.items()}
    saved = {key: (sum(ms) - sum(ms[: keep[key]])) / 1000 for key, ms in rounds.items()}
    records = []
    for row in rows:
        processes = []
        for process in row["process_results"]:
            count = keep.get(process_key(row, process))
            shorter = {name: process[name][:count] for name in SAMPLED if count is not None and process.get(name)}
            processes.append({**process, **shorter})
        records.append(RunRecord.from_dict({**row, "process_results": processes}))
    return records, saved


def cell_noise(records: list[RunRecord]) -> dict[tuple[str, int, str, str], stats.Noise]:
    """Per (model, batch size, variant, metric), the spread of the per-block log B/A by turn around the cell's mean
    (B against the first environment); eager latency from the eager cells, as the suite counts it
    (suite.counted_cells)."""
    runs = [compare.ComparedRun.of(record) for record in records if record.identity.status == "ok"]
    labels = list(dict.fromkeys(run.environment for run in runs))
    by_cell: dict[tuple, dict[str, compare.ComparedRun]] = defaultdict(dict)
    for run in runs:
        by_cell[(run.model_id, run.batch_size, run.variant)][run.environment] = run
    found = {}
    for cell, pair in by_cell.items():
        if len(labels) < 2 or labels[0] not in pair or labels[1] not in pair:
            continue
        compiled = pair[labels[0]].compile
        for metric in METRICS if compiled else ("eager_latency",):  # eager latency once: in the eager cells
            if compiled and metric == "eager_latency":
                continue
            differences = compare.by_turn_differences(pair[labels[0]], pair[labels[1]], metric)
            if differences:
                found[(*cell, metric)] = stats.noise_of(differences)
    return found


def block_noise(records: list[RunRecord]) -> dict[str, stats.Noise]:
    """Per metric, cell_noise summed over the cells."""
    pooled = {metric: stats.Noise() for metric in METRICS}
    for (*_, metric), noise in cell_noise(records).items():
        pooled[metric] = pooled[metric] + noise
    return pooled


def per_cell_lines(every: list[list[dict[str, Any]]]) -> list[str]:
    """Per cell and metric, the per-block sd of log B/A by turn summed over the records (what they timed)."""
    summed: dict[tuple, stats.Noise] = defaultdict(stats.Noise)
    for rows in every:
        for key, noise in cell_noise([RunRecord.from_dict(row) for row in rows]).items():
            summed[key] = summed[key] + noise
    lines = ["per cell, as timed: per-block sd of log B/A by turn (degrees of freedom)"]
    for (model, batch, variant, metric), noise in sorted(summed.items()):
        sd = math.sqrt(noise.variance)
        lines.append(f"{model:40s} bs{batch:<3d} {variant:12s} {metric:16s} {sd:.3f} ({noise.dof})")
    return lines


def own_seconds(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per process, its own seconds (wall time less its waits for turns), once."""
    found = {}
    for row in rows:
        for process in row["process_results"]:
            found[process_key(row, process)] = process["wall_s"] - (process.get("turn_wait_s") or 0.0)
    return found


def read_rows(record: Path) -> list[dict[str, Any]]:
    path = record / "results" / "runs.jsonl"
    if not path.exists():
        sys.exit(f"window_noise: {path} does not exist; a record is a comparison's folder with results/runs.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def optimum_s(windows: list[float], variances: list[float], overhead_s: float) -> float | None:
    """Kalibera and Jones's best timed window from a least-squares fit of variance = s_p² + a / T (None where the fit
    gives no positive s_p² and a)."""
    xs = [1 / window for window in windows]
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mean_x, mean_y = statistics.mean(xs), statistics.mean(variances)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, variances, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    intercept = mean_y - slope * mean_x
    if slope <= 0 or intercept <= 0:
        return None
    return math.sqrt(slope * overhead_s / intercept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", type=Path, help="comparison folders with results/runs.jsonl")
    parser.add_argument("--window-s", nargs="+", type=float, default=[10.0, 7.0, 5.0, 3.0, 2.0])
    parser.add_argument("--min-iters", type=int, default=10, help="rounds a process times at least")
    parser.add_argument("--per-cell", action="store_true", help="print each cell's sd as timed, and stop")
    args = parser.parse_args()
    bad = [window for window in args.window_s if not (window > 0 and math.isfinite(window))]
    if bad or args.min_iters < 1:
        parser.error(
            f"--window-s takes positive seconds and --min-iters a positive count, got {args.window_s}, {args.min_iters}"
        )
    every = [read_rows(record) for record in args.records]
    if args.per_cell:
        print("\n".join(per_cell_lines(every)))
        return
    windows = sorted(set(args.window_s), reverse=True)
    found: dict[float, dict[str, Any]] = {}
    for window in windows:
        noise = {metric: stats.Noise() for metric in METRICS}
        costs = []
        for rows in every:
            records, saved = cut(rows, window, args.min_iters)
            for metric, value in block_noise(records).items():
                noise[metric] = noise[metric] + value
            own = own_seconds(rows)
            costs += [own[key] - saved.get(key, 0.0) for key in own]
        found[window] = {"noise": noise, "cost_s": statistics.median(costs)}
    longest = found[windows[0]]
    print(f"{len(args.records)} record(s); per-block sd of log B/A by turn, pooled over cells (degrees of freedom)")
    print(
        f"{'window s':>8s} {'process s':>9s} "
        + " ".join(f"{metric:>22s}" for metric in METRICS)
        + "  variance x seconds, relative"
    )
    for window in windows:
        entry = found[window]
        cells = []
        relative = []
        for metric in METRICS:
            noise = entry["noise"][metric]
            sd = math.sqrt(noise.ss / noise.dof) if noise.dof else math.nan
            cells.append(f"{sd:14.4f} ({noise.dof:3d} df)")
            base = longest["noise"][metric]
            if noise.dof and base.dof:
                relative.append((noise.ss / noise.dof * entry["cost_s"]) / (base.ss / base.dof * longest["cost_s"]))
        print(
            f"{window:8.1f} {entry['cost_s']:9.1f} "
            + " ".join(cells)
            + "  "
            + " ".join(f"{value:.2f}" for value in relative)
        )
    overhead_s = longest["cost_s"] - windows[0]
    for metric in METRICS:
        variances = [
            found[w]["noise"][metric].ss / found[w]["noise"][metric].dof
            for w in windows
            if found[w]["noise"][metric].dof
        ]
        best = optimum_s(windows[: len(variances)], variances, overhead_s)
        text = f"{best:.1f} s" if best is not None else "no fit (the variance does not fall as 1/T over these windows)"
        print(f"Kalibera-Jones optimum for {metric}: {text} (overhead {overhead_s:.1f} s a process)")


if __name__ == "__main__":
    main()
