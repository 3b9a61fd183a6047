"""Warm compile of the A/A records: per cell (model, variant) the per-block log B/A of its warm compile, each cell's
mean, and how far the cells' means spread against what their blocks' own spread predicts (a cell-level share of
the noise that the paired blocks of one invocation cannot see), per compiled variant.

    python components.py ../2026-11-28-epyc-aa-10s ../2026-11-28-xeon-aa-10s ../2026-11-29-xeon-aa-by-turn
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path


def block_logs(record: Path, variant: str) -> dict[str, list[float]]:
    """Model label -> per block, log of `current#2`'s warm compile over `current`'s."""
    found: dict[str, dict[int, dict[str, float]]] = {}
    for text in (record / "results" / "runs.jsonl").read_text().splitlines():
        run = json.loads(text)
        if run["variant"] != variant:
            continue
        for process in run["process_results"]:
            if process["kind"] == "arm" and process.get("compile_s"):
                found.setdefault(run["label"], {}).setdefault(process["replicate"], {})[run["environment"]] = (
                    process["compile_s"])  # fmt: skip
    return {label: [math.log(pair["current#2"] / pair["current"]) for _, pair in sorted(blocks.items())
                    if len(pair) == 2] for label, blocks in found.items()}  # fmt: skip


def main() -> None:
    records = [Path(arg) for arg in sys.argv[1:]]
    for variant in ("default", "freezing"):
        means, deviations, dof, sizes = [], [], 0, []
        print(f"## {variant}: per-block log B/A of warm compile (B = current#2)")
        for record in records:
            for label, logs in sorted(block_logs(record, variant).items()):
                mean = statistics.mean(logs)
                means.append(mean)
                sizes.append(len(logs))
                deviations += [value - mean for value in logs]
                dof += len(logs) - 1
                print(f"  {record.name} {label}: " + " ".join(f"{v:+.2f}" for v in logs) + f"  mean {mean:+.3f}")
        within = math.sqrt(sum(d * d for d in deviations) / dof)
        expected = within / math.sqrt(statistics.mean(sizes))
        spread = statistics.stdev(means)
        cell_sd = math.sqrt(max(spread**2 - expected**2, 0.0))
        print(
            f"  within a cell, per block: sd {within:.3f} ({dof} df); the cells' means: sd {spread:.3f} "
            f"({len(means) - 1} df) where the blocks alone predict {expected:.3f}; variance ratio "
            f"{(spread / expected) ** 2:.2f}; a cell's own share: sd {cell_sd:.3f}; mean of the means "
            f"{statistics.mean(means):+.3f}"
        )


if __name__ == "__main__":
    main()
