"""Per-block sd of log B/A per metric, pooled over a comparison's cells, judged with either per-block statistic."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/, for decided.py
import decided

from compilebench.analysis import compare, stats

table = Path(sys.argv[1]) / "results" / "comparison.csv"
for statistic in ("medians", "turns"):
    total: dict[str, stats.Noise] = {}
    for row in decided.rejudged(table, statistic):
        if row.reference != compare.FIRST:
            continue
        for name, judged in row.judged.items():
            if name in compare.BY_TURN_METRICS:
                total[name] = total.get(name, stats.Noise()) + judged.ratio.cell_noise
    print(statistic, {name: f"{noise.variance**0.5:.3f} ({noise.dof} df)" for name, noise in total.items()})
