"""Does the forecast's count of cells `equivalent` at no change hold on real A/As? Each A/A on this VM ran right after
a comparison in the same clone, so the noise record before it is that comparison's `calibration.json`. Per headline
metric, the forecast's sum of stats.equivalence_chance over the A/A's cells (each cell's record, from
adaptive.FORECAST_MIN_DOF degrees of freedom on, as the forecast reads it; with --pooled the alternative tried, the
machine's variance over every cell on the cell's own degrees of freedom; each cell's real blocks) is
set beside how many of those cells the A/A, judged again at the margin, called `equivalent` (its truth: nothing
changed).

    python benchmarks/results/2026-11-29-xeon-margin-10/forecast_check.py [MARGIN: 0.10] [--pooled]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

import decided  # noqa: E402

from compilebench.analysis import adaptive, compare, noise_record, stats  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PAIRS = (("torch-2.14.1-startnet", "aa-startnet"), ("torch-2.14.1-by-turn", "aa-by-turn"),
         ("torch-2.14.1-cold-blocks", "aa-cold-blocks"))  # fmt: skip
METRICS = ("eager_latency", "compiled_latency", "speedup")  # cold compile: one block a side, no interval to forecast


def main() -> None:
    margin = float(sys.argv[1]) if len(sys.argv) > 1 else 0.10
    pooled = "--pooled" in sys.argv
    totals = [0.0, 0]
    way = "the machine's variance over every cell" if pooled else "each cell its own record"
    print(f"margin +-{100 * margin:.0f}%, {way}")
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
                noise_name = noise_record.noise_name(name, ratio.method)
                prior = noise.get(key, {}).get(noise_name, stats.Noise())
                if prior.dof < adaptive.FORECAST_MIN_DOF:
                    prior = stats.Noise()  # the forecast leaves such a cell out: counted as never `equivalent`
                elif pooled:  # tried, not adopted: the machine's variance over every cell, on the cell's own dof
                    prior = stats.Noise(
                        noise_record.pooled_by_metric(noise)[noise_name].variance * prior.dof, prior.dof
                    )
                halfwidth = stats.expected_halfwidth(prior, ratio.blocks)
                expected += stats.equivalence_chance(halfwidth, prior.dof + ratio.blocks - 1, margin)
                actual += row.judged[name].verdict == stats.EQUIVALENT
            totals[0] += expected
            totals[1] += actual
            print(f"{aa:16s} {name:17s} {len(cells):5d} {expected:8.1f} {actual:6d}")
    print(f"{'all':16s} {'':17s} {'':5s} {totals[0]:8.1f} {totals[1]:6d}")


if __name__ == "__main__":
    main()
