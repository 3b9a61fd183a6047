"""Does the forecast's count of cells `equivalent` at no change hold on real A/As? Each A/A on this VM ran right after
a comparison in the same clone, so the noise record before it is that comparison's `calibration.json`. Per headline
metric, the forecast's sum of stats.equivalence_chance over the A/A's cells (that record, each cell's real blocks) is
set beside how many of those cells the A/A, judged again at the margin, called `equivalent` (its truth: nothing
changed).

    python benchmarks/results/2026-11-29-xeon-margin-10/forecast_check.py [MARGIN: 0.10]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import decided  # noqa: E402

from compilebench.analysis import compare, noise_record, stats  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PAIRS = (("torch-2.14.1-startnet", "aa-startnet"), ("torch-2.14.1-by-turn", "aa-by-turn"),
         ("torch-2.14.1-cold-blocks", "aa-cold-blocks"))  # fmt: skip
METRICS = ("eager_latency", "compiled_latency", "speedup")  # cold compile: one block a side, no interval to forecast


def main() -> None:
    margin = float(sys.argv[1]) if len(sys.argv) > 1 else 0.10
    totals = [0.0, 0]
    print(f"margin +-{100 * margin:.0f}%")
    print(f"{'A/A':16s} {'metric':17s} {'cells':>5s} {'forecast':>8s} {'actual':>6s}")
    for before, aa in PAIRS:
        [record] = noise_record.load_calibrations(RESULTS / f"2026-11-29-xeon-{before}" / "calibration.json").values()
        noise = noise_record.machine_noise(record)
        table = RESULTS / f"2026-11-29-xeon-{aa}" / "results" / "comparison.csv"
        rows = [row for row in decided.rejudged(table, "turns", margin) if row.reference == compare.FIRST]
        for name in METRICS:
            cells = compare.suite_cells(rows, compare.METRIC_BY_NAME[name])
            expected, actual = 0.0, 0
            for row in cells:
                ratio = row.judged[name].ratio
                key = noise_record.cell_key(row.model_id, row.batch_size, row.variant)
                prior = noise.get(key, {}).get(noise_record.noise_name(name, ratio.method), stats.Noise())
                halfwidth = stats.expected_halfwidth(prior, ratio.blocks)
                expected += stats.equivalence_chance(halfwidth, prior.dof + ratio.blocks - 1, margin)
                actual += row.judged[name].verdict == stats.EQUIVALENT
            totals[0] += expected
            totals[1] += actual
            print(f"{aa:16s} {name:17s} {len(cells):5d} {expected:8.1f} {actual:6d}")
    print(f"{'all':16s} {'':17s} {'':5s} {totals[0]:8.1f} {totals[1]:6d}")


if __name__ == "__main__":
    main()
