"""Do cold blocks measure what timing blocks do? Per record, cell and metric, each block's log B/A paired by turn
(compare's own per-block statistic), the cold block's beside the timing blocks'; then, pooled over cells, the sd of the
timing blocks around their cell's mean and the cold block's offset from that mean (a bias would show as offsets of one
sign, larger than the timing blocks' spread; with no bias a cold block's offset from the mean of n timing blocks has
an sd of sd * sqrt(1 + 1/n), 1.15 sd at n = 3). In an A/A, where B/A is 1, also every block's distance from it.

    python benchmarks/results/2026-11-29-xeon-torch-2.14.1-cold-blocks/cold_vs_timing.py RECORD [RECORD ...]
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from compilebench.analysis import compare
from compilebench.analysis.runs import RunRecord


def block_differences(a: compare.ComparedRun, b: compare.ComparedRun, metric: str) -> dict[str, float]:
    """Per block both sides timed, B's log value less A's by turn (by_turn_differences, one block at a time)."""
    found = {}
    for block in a.values.get(metric, {}):
        if block not in b.values.get(metric, {}):
            continue
        one = {m: {block: v[block]} for m, v in a.values.items() if block in v}
        two = {m: {block: v[block]} for m, v in b.values.items() if block in v}
        diff = compare.by_turn_differences(replace(a, values=one), replace(b, values=two), metric)
        if diff:
            found[block] = diff[0]
    return found


def main() -> None:
    for folder in map(Path, sys.argv[1:]):
        runs = [compare.ComparedRun.of(RunRecord.from_dict(json.loads(line)))
                for line in (folder / "results" / "runs.jsonl").read_text().splitlines() if line.strip()]  # fmt: skip
        table = (folder / "results" / "comparison.csv").read_text().splitlines()
        header = table[0].split(",")
        first = dict(zip(header, table[1].split(","), strict=False))
        labels = [first["baseline"], first["candidate"]]
        by_cell = {}
        for run in runs:
            by_cell.setdefault((run.model_id, run.variant), {})[run.environment] = run
        print(f"{folder.name}: B = {labels[1]}, A = {labels[0]}")
        for metric in ("eager_latency", "compiled_latency", "speedup"):
            spread, offsets, dof, raw_timing, raw_cold = [], [], 0, [], []
            for (model, variant), pair in sorted(by_cell.items()):
                if (variant == "eager") != (metric == "eager_latency"):
                    continue
                found = block_differences(pair[labels[0]], pair[labels[1]], metric)
                timing = {k: v for k, v in found.items() if k.endswith(("/r0", "/r1", "/r2", "/r3", "/r4", "/r5"))}
                cold = {k: v for k, v in found.items() if k not in timing}
                if len(timing) < 2:
                    continue
                mean = statistics.mean(timing.values())
                spread += [v - mean for v in timing.values()]
                dof += len(timing) - 1
                raw_timing += list(timing.values())
                raw_cold += list(cold.values())
                offsets += [v - mean for v in cold.values()]
                print(
                    f"  {metric:16s} {model[:24]:24s} {variant:8s} timing "
                    + " ".join(f"{v:+.3f}" for v in timing.values())
                    + "  cold "
                    + " ".join(f"{k.split('/')[0]} {v:+.3f}" for k, v in cold.items())
                )
            sd = math.sqrt(sum(x * x for x in spread) / max(1, dof)) if spread else float("nan")
            print(
                f"  {metric}: timing blocks' sd around their cell mean {sd:.3f} ({dof} df); cold offsets mean "
                f"{statistics.mean(offsets) if offsets else float('nan'):+.3f}, rms "
                f"{math.sqrt(statistics.mean([o * o for o in offsets])) if offsets else float('nan'):.3f} "
                f"({len(offsets)} cold blocks)"
            )
            if "#" in labels[1] and raw_cold:  # an A/A: the truth is 0, and every block's distance from it is its error
                rms_timing, rms_cold = (
                    math.sqrt(statistics.mean([v * v for v in raw])) for raw in (raw_timing, raw_cold)
                )
                print(f"    A/A, rms around 0: timing blocks {rms_timing:.3f}, cold blocks {rms_cold:.3f}")


if __name__ == "__main__":
    main()
