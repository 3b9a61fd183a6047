"""Every (cell, headline metric) of a comparison judged twice, with the cold blocks' latency and speedup and without
them (decided.py's `turns` and `timing-blocks`): B/A, its 95% CI, the verdict and the blocks.

    python benchmarks/results/2026-11-29-xeon-torch-2.14.1-cold-blocks/cells.py RECORD
"""

import sys
from pathlib import Path

sys.path.insert(0, "benchmarks")
import decided

from compilebench.analysis import compare


def shown(judged) -> str:
    ratio = judged.ratio
    return f"{ratio.value:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] {judged.verdict} ({ratio.blocks:.0f} blocks)"


def main() -> None:
    table = Path(sys.argv[1]) / "results" / "comparison.csv"
    now, before = (decided.rejudged(table, statistic) for statistic in ("turns", "timing-blocks"))
    for a, b in zip(now, before, strict=True):
        if a.reference != compare.FIRST:
            continue
        for metric in ("eager_latency", "compiled_latency", "speedup"):
            if metric in a.judged and (a.variant == "eager") == (metric == "eager_latency"):
                print(f"{a.model_id[:22]:22s} {a.variant:8s} {metric:16s} with cold: {shown(a.judged[metric]):52s} "
                      f"without: {shown(b.judged[metric])}")  # fmt: skip


if __name__ == "__main__":
    main()
