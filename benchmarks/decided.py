"""How many of a comparison's verdicts decided something: per metric, of its (cell, metric) verdicts, how many say a
direction or `equivalent`, how many are `inconclusive`, and how many of those rest on one process a side (no
interval can be made, whatever the noise). What issue 51's target counts, from the comparison table a run wrote.

    python benchmarks/decided.py benchmarks/results/2026-11-28-epyc-aa [more records or projects' data/ ...]

Each argument is a record folder (its `results/comparison.csv`) or a project's `data/` folder. Counted as the
report's what-changed section counts them (analysis/compare.py `suite_summary`): eager latency in the eager cells
only, since a compiled cell's eager samples are the same processes'; a metric a cell has no value for is not a
verdict. Only B against the first environment (`reference` first).
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from pathlib import Path

from compilebench.analysis.compare import FIRST, METRICS
from compilebench.analysis.stats import EQUIVALENT, INCONCLUSIVE, SINGLE

HEADLINES = ("eager_latency", "compiled_latency", "speedup", "compile_cold")  # what issue 51's targets name


@dataclass(frozen=True)
class Count:
    """One metric's verdicts in one comparison."""

    metric: str
    verdicts: int
    directions: int  # faster, slower, more, less
    equivalent: int
    inconclusive: int
    single: int  # inconclusive with one process a side: no interval at all

    @property
    def decided(self) -> int:
        return self.directions + self.equivalent


def count(rows: list[dict[str, str]]) -> list[Count]:
    """Per metric (in the comparison's order), its verdicts counted over the cells that have it."""
    rows = [row for row in rows if row.get("reference", FIRST) == FIRST]
    counts = []
    for metric in (metric.name for metric in METRICS):
        judged = [row for row in rows if row.get(f"{metric}_ratio") not in (None, "")]
        if metric == "eager_latency" and any(row["variant"] == "eager" for row in judged):
            judged = [row for row in judged if row["variant"] == "eager"]
        if not judged:
            continue
        words = [row[f"{metric}_verdict"] for row in judged]
        single = sum(row[f"{metric}_method"] == SINGLE and row[f"{metric}_verdict"] == INCONCLUSIVE for row in judged)
        equivalent, inconclusive = words.count(EQUIVALENT), words.count(INCONCLUSIVE)
        counts.append(Count(metric, len(words), len(words) - equivalent - inconclusive, equivalent, inconclusive,
                            single))  # fmt: skip
    return counts


def table_path(folder: Path) -> Path:
    """A record's or a project data folder's comparison table; a clear error where there is none."""
    for path in (folder / "results" / "comparison.csv", folder / "data" / "results" / "comparison.csv"):
        if path.exists():
            return path
    raise SystemExit(f"{folder}: no results/comparison.csv (a record folder or a project's data/ is expected)")


def lines(name: str, counts: list[Count]) -> list[str]:
    """The table of one comparison, with the totals over all metrics and over the headline ones."""
    out = [f"{name}", f"  {'metric':18s} {'verdicts':>8s} {'decided':>7s} {'direction':>9s} {'equiv':>5s} "
           f"{'inconcl':>7s} {'one process':>11s}"]  # fmt: skip
    for item in counts:
        out.append(f"  {item.metric:18s} {item.verdicts:8d} {item.decided:7d} {item.directions:9d} "
                   f"{item.equivalent:5d} {item.inconclusive:7d} {item.single:11d}")  # fmt: skip
    for label, chosen in (("all", counts), ("headline", [c for c in counts if c.metric in HEADLINES])):
        verdicts, decided = sum(c.verdicts for c in chosen), sum(c.decided for c in chosen)
        single = sum(c.single for c in chosen)
        share = f"{100 * decided / verdicts:.0f}%" if verdicts else "n/a"
        out.append(f"  {label}: {decided} of {verdicts} decided ({share}); {single} with one process a side")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    paths = [table_path(folder) for folder in args.folders]  # every argument checked before any output
    for folder, path in zip(args.folders, paths, strict=True):
        with path.open(newline="") as handle:
            print("\n".join(lines(str(folder), count(list(csv.DictReader(handle))))))


if __name__ == "__main__":
    main()
