"""How many of a comparison's verdicts decided something: per metric, of its (cell, metric) verdicts, how many say a
direction or `equivalent`, how many are `inconclusive`, and how many of those rest on one process a side (no
interval can be made, whatever the noise). What issue 51's target counts, from the comparison table a run wrote.

    python benchmarks/decided.py benchmarks/results/2026-11-29-xeon-huge-pages [more records or projects' data/ ...]

    python benchmarks/decided.py --rejudge medians RECORD   # its runs judged again, each process's median a block
    python benchmarks/decided.py --rejudge timing-blocks RECORD   # as if its cold processes had not timed
    python benchmarks/decided.py --rejudge turns --margin 0.10 RECORD   # its runs judged again against another margin
    python benchmarks/decided.py --series RECORD   # a release series' runs.jsonl: its steps counted by word

Each argument is a record folder (its `results/comparison.csv`) or a project's `data/` folder. `--rejudge` judges the
folder's `runs.jsonl` again instead, as aggregate does (its `calibration.json` less this invocation's entry): `turns` as
this version does (a block run together: latency and speedup from rounds paired by turn), `medians` with every block's
difference from each process's median, as before turns were recorded: the two statistics on the same blocks;
`timing-blocks` as `turns` with the cold blocks' latency and speedup left out, as before cold processes timed after
their compile: the two designs on the same processes. `--margin` judges them against another margin than the table's
(what `equivalent` would say of the same blocks at, say, ±10%). Each cell counts once per metric, as the report's
what-changed section counts (`suite.counted_cells`: eager latency in the eager cells, inductor start-up once per model
and batch size); B against the first environment only. The suite's own verdict per metric (the geometric mean over the
cells) is printed beside the counts. `--series` counts a series' steps instead (issue 85's target), judged as its
report judges them (`suite.series_steps`, no noise record, params.yaml's margin): per cell the headlines the report
answers per cell (`suite.CELL_SERIES_METRICS`), over the suite every one; and, as counted before 2026-12-05, every
headline per cell."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from compilebench.aggregate import comparison
from compilebench.analysis import compare, stats, suite
from compilebench.analysis.run_record import RunRecord
from compilebench.records.formats import TrialSpec
from compilebench.report import read_comparisons

HEADLINES = ("eager_latency", "compiled_latency", "speedup", "compile_cold")  # what issue 51's targets name


@dataclass(frozen=True)
class Count:
    """One metric's verdicts in one comparison of B against A."""

    candidate: str
    metric: str
    verdicts: int
    directions: int  # faster, slower, higher, lower, more, less
    equivalent: int
    inconclusive: int
    single: int  # inconclusive with one process a side: no interval at all
    suite: str  # the suite's verdict (suite.summary)

    @property
    def decided(self) -> int:
        return self.directions + self.equivalent


def count(compared: list[compare.Comparison]) -> list[Count]:
    """Per compared stack and metric (in the comparison's order), its verdicts as the suite summary counts them, and
    how many of its cells have one process a side."""
    rows = [row for row in compared if row.reference == compare.FIRST]
    counts = []
    for entry in suite.summary(rows):
        metric = compare.METRIC_BY_NAME[entry["metric"]]
        cells = suite.counted_cells([row for row in rows if row.candidate == entry["candidate"]], metric)
        single = sum(
            row.judged[metric.name].ratio.method == stats.SINGLE
            and row.judged[metric.name].verdict == stats.INCONCLUSIVE
            for row in cells
        )
        counts.append(
            Count(
                entry["candidate"],
                metric.name,
                entry["cells"],
                entry["changed"],
                entry["equivalent"],
                entry["inconclusive"],
                single,
                entry["verdict"],
            )
        )
    return counts


def table_path(folder: Path) -> Path:
    """A record's or a project data folder's comparison table; a clear error where there is none."""
    for path in (folder / "results" / "comparison.csv", folder / "data" / "results" / "comparison.csv"):
        if path.exists():
            return path
    raise SystemExit(f"{folder}: no results/comparison.csv (a record folder or a project's data/ is expected)")


def without_cold_timing(run: compare.ComparedRun) -> compare.ComparedRun:
    """A run as it was before cold processes timed: its cold blocks (`variant/cN`) give no latency or speedup."""

    def timing_only(by_block: dict) -> dict:
        return {block: value for block, value in by_block.items() if not TrialSpec.is_cold_block(block)}

    timed = compare.BY_TURN_METRICS
    return replace(
        run,
        values={m: timing_only(v) if m in timed else v for m, v in run.values.items()},
        turns={m: timing_only(v) for m, v in run.turns.items()},
    )


def rejudged(table: Path, statistic: str, margin: float | None = None) -> list[compare.Comparison]:
    """The comparison of the runs beside `table` (its `runs.jsonl`), judged again with the per-block `statistic`
    (`turns`: as compare does now; `medians`: each process's median; `timing-blocks`: `turns` without the cold
    blocks' latency and speedup), against the noise record beside them (`calibration.json`, the record's or the
    project's) less this invocation's own entry, at `margin` (the table's where None)."""
    frame = pd.read_csv(table)
    runs = [
        compare.ComparedRun.of(RunRecord.from_dict(json.loads(line)))
        for line in (table.parent / "runs.jsonl").read_text().splitlines()
        if line.strip()
    ]
    if statistic == "medians":
        runs = [replace(run, turns={}) for run in runs]
    elif statistic == "timing-blocks":
        runs = [without_cold_timing(run) for run in runs]
    first = frame[frame["reference"] == compare.FIRST]
    labels = [str(first["baseline"].iloc[0]), *dict.fromkeys(str(label) for label in first["candidate"])]
    calibration = table.parent.parent / "calibration.json"  # a record's, or a project's data/calibration.json
    return comparison(runs, labels, calibration, float(first["margin"].iloc[0]) if margin is None else margin)[0]


def series_counts(folder: Path, margin: float) -> list[str]:
    """A series' steps by word (see the module docstring), from `folder`'s runs.jsonl, stacks in `make series` order."""
    from series_agreement import series_order  # benchmarks/ is on the path when this runs as a script

    records = [
        RunRecord.from_dict(json.loads(line)) for line in (folder / "runs.jsonl").read_text().splitlines() if line
    ]
    labels = series_order(records)
    compared = compare.comparison_rows([compare.ComparedRun.of(record) for record in records], None, labels, margin)
    histories = suite.series_steps(compared, labels, over_suite=True)
    out = [f"{folder}: {' -> '.join(labels)}; margin +-{margin:.0%}"]
    totals: dict[str, list[str]] = {"answered": [], "every headline per cell": []}
    for where in ("cell", "suite"):
        for metric in suite.SERIES_METRICS:
            words = [
                step["verdict"]
                for entry in histories
                if entry["metric"] == metric and bool(entry.get("over_suite")) == (where == "suite")
                for step in entry["steps"]
            ]
            if not words:
                continue
            inconclusive = words.count(stats.INCONCLUSIVE)
            out.append(f"  {where:5s} {metric:17s} {len(words):4d} steps, {inconclusive:3d} inconclusive")
            if where == "cell":
                totals["every headline per cell"] += words
            if where == "suite" or metric in suite.CELL_SERIES_METRICS:
                totals["answered"] += words
    for name, words in totals.items():
        share = words.count(stats.INCONCLUSIVE) / len(words) if words else float("nan")
        out.append(f"  {name}: {words.count(stats.INCONCLUSIVE)} of {len(words)} steps inconclusive ({share:.0%})")
    return out


def lines(name: str, counts: list[Count]) -> list[str]:
    """The table of one comparison, with the totals over all metrics and over the headline ones."""
    out = [
        f"{name}",
        f"  {'B':14s} {'metric':17s} {'verdicts':>8s} {'decided':>7s} {'direction':>9s} {'equiv':>5s} "
        f"{'inconcl':>7s} {'one process':>11s}  over the suite",
    ]
    for item in counts:
        out.append(
            f"  {item.candidate[:14]:14s} {item.metric:17s} {item.verdicts:8d} {item.decided:7d} "
            f"{item.directions:9d} {item.equivalent:5d} {item.inconclusive:7d} {item.single:11d}  "
            f"{item.suite}"
        )
    for label, chosen in (("all", counts), ("headline", [c for c in counts if c.metric in HEADLINES])):
        verdicts, decided = sum(c.verdicts for c in chosen), sum(c.decided for c in chosen)
        single = sum(c.single for c in chosen)
        share = f"{100 * decided / verdicts:.0f}%" if verdicts else "n/a"
        out.append(f"  {label}: {decided} of {verdicts} decided ({share}); {single} with one process a side")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument(
        "--rejudge", choices=("turns", "medians", "timing-blocks"), help="judge the runs.jsonl beside the table again"
    )
    parser.add_argument("--margin", type=float, help="with --rejudge: judge against this margin (0.10 = +-10%%)")
    parser.add_argument("--series", action="store_true", help="count a release series' steps (its runs.jsonl)")
    args = parser.parse_args()
    if args.series:
        from compilebench.config import stage_config

        for folder in args.folders:
            if not (folder / "runs.jsonl").is_file():
                raise SystemExit(f"{folder}: no runs.jsonl (a series record, or a project's data/results)")
        for folder in args.folders:
            print("\n".join(series_counts(folder, stage_config().margin)))
        return
    if args.margin is not None and not (args.rejudge and 0 < args.margin < 1):
        parser.error(f"--margin {args.margin}: a fraction between 0 and 1 (0.10 = +-10%), with --rejudge")
    paths = [table_path(folder) for folder in args.folders]  # every argument checked before any output
    lacking = [
        str(folder)
        for folder, path in zip(args.folders, paths, strict=True)
        if args.rejudge and not (path.parent / "runs.jsonl").exists()
    ]
    if lacking:
        raise SystemExit(
            f"--rejudge needs the runs beside the comparison table (results/runs.jsonl); not in: {', '.join(lacking)}"
        )
    for folder, path in zip(args.folders, paths, strict=True):
        compared = rejudged(path, args.rejudge, args.margin) if args.rejudge else read_comparisons(pd.read_csv(path))
        again = f" (judged again: {args.rejudge}" + (f", margin ±{args.margin:.0%})" if args.margin else ")")
        print("\n".join(lines(f"{folder}" + (again if args.rejudge else ""), count(compared))))


if __name__ == "__main__":
    main()
