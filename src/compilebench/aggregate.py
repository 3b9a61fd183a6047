"""Stage aggregate: this invocation's runs as tables: eager vs compiled, environments compared, against the doc.

    python -m compilebench.aggregate                 # writes summary, verdicts, comparison, metrics, cells (DVC)
    python -m compilebench.aggregate --check         # exit 3 if any run did not end ok, 4 if a headline changed
    python -m compilebench.aggregate --from-mlflow   # every run of the MLflow store: paths.store/runs.csv, its
                                                     # verdicts.csv and versions.csv (across invocations: not
                                                     # interleaved)

1. summary: compiled runs beside their eager baseline, per environment.
2. verdicts: each compiled run against the published numbers (rules in `reference`).
3. comparison: with two or more environments, each against the first (and, in a series, the one before it),
   paired by block in this invocation (`compare`), judged against `margin` with this machine's noise record
   (paths.calibration), to which every comparison, an A/A run (compare: [current, current]) included, adds its
   blocks.
The DVC pipeline's tables come from this invocation only. The MLflow store (other machines, other invocations) is
read by --from-mlflow, whose output DVC does not track, since the store changes without DVC seeing it.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from compilebench import reference, tracking
from compilebench.analysis import compare, keys, noise_record, suite
from compilebench.analysis.differences import beside_the_question
from compilebench.analysis.run_record import RunRecord
from compilebench.config import Config, stage_config
from compilebench.records.formats import STATUS_OK, UNSUPPORTED, RecordError
from compilebench.records.reading import read_jsonl
from compilebench.records.writing import locked, write_atomic, write_json
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)
QUIET_VERDICTS = ("equivalent", "inconclusive")  # a headline that says nothing changed

KEYS = [
    "environment",
    "model_id",
    "label",
    "task",
    "batch_size",
    "device",
    "device_name",
    "machine",
    "torch_version",
    "transformers_version",
]
COLUMNS = [
    *KEYS,
    "variant",
    "compile_mode",
    "inductor_options",
    "variant_dtype",
    "channels_last",
    "status",
    "weights_source",
    "image_source",
    "processes",
    "replicates",
    "eager_latency_ms_mean",
    "eager_latency_ms_median",
    "latency_ms_mean",
    "latency_ms_median",
    "latency_ms_median_ci_low",
    "latency_ms_median_ci_high",
    "latency_ms_p90",
    "latency_ms_std",
    "count",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "speedup_ci_method",
    "speedup_verdict",
    "improvement_pct",
    "cv",
    "process_cv",
    "eager_cv",
    "compile_s",
    "compile_s_warm",
    "break_even_calls",
    "break_even_calls_warm",
    "deploy",
    "first_inference_s",
    "first_inference_s_warm",
    "eager_first_inference_s",
    "startup_s",
    "load_s",
    "peak_mem_mib",
    "eager_peak_mem_mib",
    "reserved_mem_mib",
    "max_rel_diff",
    "task_agreement",
    "graph_count",
    "graph_break_count",
    "recompile_count",
    "serve_batch_sizes",
    "serve_graphs",
    "serve_recompiles",
    "machine_fingerprint",
    "environment_key",
    "error",
]


def with_keys(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """`frame` with every key column present and no NaN in them (pandas drops NaN keys when grouping or merging)."""
    frame = frame.copy()
    for key in keys:
        frame[key] = frame[key].fillna("") if key in frame else ""
    return frame


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Compiled runs beside their eager baseline: latencies, speedup with CI, improvement %, compile cost."""
    frame = with_keys(results, KEYS)
    for column in COLUMNS:
        if column not in frame:
            frame[column] = None
    eager = frame[~frame["compile"].astype(bool)][[*KEYS, "latency_ms_mean", "latency_ms_median", "peak_mem_mib"]]
    eager = eager.rename(
        columns={
            "latency_ms_mean": "eager_only_latency_ms_mean",
            "latency_ms_median": "eager_only_latency_ms_median",
            "peak_mem_mib": "eager_run_peak_mem_mib",
        }
    ).drop_duplicates(KEYS, keep="last")
    compiled = frame[frame["compile"].astype(bool)]
    table = compiled.merge(eager, on=KEYS, how="left")
    table["eager_peak_mem_mib"] = table["eager_run_peak_mem_mib"]
    # A compiled row's eager latencies are its paired (interleaved) ones; an eager-only suite has none.
    for stat in ("mean", "median"):
        paired = f"eager_latency_ms_{stat}"
        table[paired] = table[paired].fillna(table[f"eager_only_latency_ms_{stat}"])
    table = table[COLUMNS].sort_values(["task", "label", "batch_size", "device_name", "environment", "variant"])
    return table.reset_index(drop=True)


SUITE_METRICS = suite.ANSWERED  # the suite's words, ratios and counts in the metrics file


def headline_metrics(table: pd.DataFrame, compared: list[compare.Comparison]) -> dict[str, Any]:
    """A few numbers for `dvc metrics show` and `dvc exp show`: per variant and environment, geometric-mean speedup,
    and counts; per compared environment, its verdicts counted over every (cell, metric) and the suite's geometric-mean
    B/A with its CI for the headline metrics (suite.summary)."""
    ok = table[table["status"] == STATUS_OK].dropna(subset=["speedup"])
    unsupported = int((table["status"] == UNSUPPORTED).sum())
    not_ok = int((table["status"] != STATUS_OK).sum()) - unsupported
    metrics: dict[str, Any] = {"runs_ok": len(ok), "runs_not_ok": not_ok, "runs_unsupported": unsupported}
    several = table["environment"].nunique() > 1
    for (environment, variant), group in ok.groupby(["environment", "variant"]):
        prefix = keys.variant_prefix(environment, variant, several)
        speedups = group["speedup"].astype(float)
        metrics[keys.metric_key(prefix, "speedup_geomean")] = float(speedups.prod() ** (1 / len(speedups)))
        metrics[keys.metric_key(prefix, "speedup_min")] = float(speedups.min())
        metrics[keys.metric_key(prefix, "speedup_max")] = float(speedups.max())
        metrics[keys.metric_key(prefix, "compile_s_median")] = float(group["compile_s"].astype(float).median())
    if compared:
        metrics["compared_cells"] = len(compared)
        metrics["compared_cells_flagged"] = len(compare.flagged(compared))
        metrics["compared_cells_health_changed"] = sum(bool(row.health_change) for row in compared)
    for entry in suite.summary(compared):  # per compared environment: what changed over the suite
        stack = keys.compared_pair(entry["candidate"], entry["baseline"])
        for word in ("changed", "equivalent", "inconclusive"):
            metrics[keys.metric_key(stack, word)] = metrics.get(keys.metric_key(stack, word), 0) + entry[word]
        if entry["metric"] in SUITE_METRICS:  # the suite's word (as its code), B/A [95% CI], cells changed of counted
            metric = entry["metric"]
            for key in ("geomean", "ci_low", "ci_high"):
                if math.isfinite(entry[key]):  # JSON has no NaN: a missing interval is no key
                    metrics[keys.metric_key(stack, keys.column(metric, key))] = entry[key]
            code = tracking.verdict_code(entry["verdict"], compare.METRIC_BY_NAME[metric])
            metrics[keys.metric_key(stack, keys.column(metric, "verdict_code"))] = code
            metrics[keys.metric_key(stack, keys.column(metric, "cells"))] = entry["cells"]
            metrics[keys.metric_key(stack, keys.column(metric, "cells_changed"))] = entry["changed"]
    return metrics


def best_variants(table: pd.DataFrame) -> pd.DataFrame:
    """Per (environment, model, batch size, device, torch): the fastest ok compiled variant that beat eager."""
    ok = table[(table["status"] == STATUS_OK) & (table["speedup_ci_low"].astype(float) > 1.0)]
    if ok.empty:
        return ok
    return ok.loc[ok.groupby(KEYS)["speedup"].idxmax(), [*KEYS, "variant", "speedup"]]


def write_csv(frame: pd.DataFrame, path: str | Path) -> None:
    """A table as CSV, atomically."""
    write_atomic(path, frame.to_csv(index=False))


def comparison(
    runs: list[compare.ComparedRun], labels: list[str], calibration_path: str | Path, margin: float
) -> tuple[list[compare.Comparison], dict[str, Any] | None]:
    """This invocation's environments compared, in `compare`'s order, judged with this machine's noise record (every
    earlier invocation's contribution, not this one's), and the machine's record with this invocation's blocks
    added (None when nothing was compared)."""
    if not runs:
        return [], None
    invocation = runs[0].invocation_id
    key = runs[0].calibration_key
    record = noise_record.load_calibrations(calibration_path).get(key)
    noise = noise_record.machine_noise(record, leave_out=invocation)
    compared = compare.comparison_rows(runs, noise, labels, margin)
    measured = compare.noise_measured(compared)
    if not measured:
        return compared, None
    about = {
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "aa": compare.is_aa(runs),
        "cells": len(compared),
        "machine": runs[0].machine,
        "device_name": runs[0].device_name,
    }
    return compared, noise_record.record_noise(record, invocation, measured, about)


def comparison_frame(compared: list[compare.Comparison]) -> pd.DataFrame:
    """The comparisons as a table, a line each (an empty one, with its key columns, when nothing was compared)."""
    if not compared:
        return pd.DataFrame(columns=[*compare.CELL, "baseline", "candidate", "verdict", "health_change"])
    return pd.DataFrame([row.row() for row in compared])


def version_rows(
    runs: list[compare.ComparedRun], calibrations: dict[str, Any], margin: float
) -> list[compare.Comparison]:
    """Across invocations in the store (`runs` oldest first: of reruns, the newest counts): per (model, batch,
    variant, machine, device), each software stack against the previous one (ordered by torch, then transformers
    version); labelled not interleaved."""
    from packaging.version import InvalidVersion, Version

    def version(text: Any) -> tuple:
        try:
            return (0, Version(str(text)))
        except InvalidVersion:
            return (1, str(text))

    latest: dict[tuple, compare.ComparedRun] = {}
    for run in runs:
        stack = (run.torch_version, run.transformers_version, run.environment_key)
        latest[(*run.cell, run.device_name, run.machine_fingerprint, *stack)] = run
    groups: dict[tuple, list[compare.ComparedRun]] = {}
    for key, run in latest.items():
        groups.setdefault(key[:-3], []).append(run)
    compared = []
    for group in groups.values():
        ordered = sorted(group, key=lambda r: (version(r.torch_version), version(r.transformers_version)))
        for a, b in itertools.pairwise(ordered):
            noise = noise_record.machine_noise(calibrations.get(b.calibration_key))
            row = compare.compare_pair(a, b, noise, margin)
            row.extra.update(
                device_name=b.device_name,
                machine=b.machine,
                baseline_invocation=a.invocation_id,
                candidate_invocation=b.invocation_id,
            )
            compared.append(row)
    return compared


REPEAT_KEYS = ("model_id", "label", "batch_size", "variant", "machine_fingerprint", "device_name")


@dataclass(frozen=True)
class Repeat:
    """One comparison of two stacks (by environment key) in one cell, machine, device and metric, made in several
    invocations: what each said, oldest first."""

    cell: tuple[Any, ...]  # REPEAT_KEYS' values
    metric: str
    baseline: str  # the stacks as the newest invocation named them
    candidate: str
    baseline_key: str | None
    candidate_key: str | None
    ratios: tuple[float, ...]  # B/A per invocation
    codes: tuple[int, ...]  # tracking.verdict_code per invocation

    @property
    def contradict(self) -> bool:
        """One invocation said B above A, another below."""
        return {-1, 1} <= set(self.codes)

    def row(self) -> dict[str, Any]:
        metric = compare.METRIC_BY_NAME[self.metric]
        return {
            **dict(zip(REPEAT_KEYS, self.cell, strict=True)),
            "metric": self.metric,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "baseline_key": self.baseline_key,
            "candidate_key": self.candidate_key,
            "invocations": len(self.codes),
            "ratios": "; ".join(
                f"{r:.3f}" if isinstance(r, float) and math.isfinite(r) else "nan" for r in self.ratios
            ),
            "verdicts": "; ".join(tracking.verdict_word(code, metric) for code in self.codes),
            "contradict": self.contradict,
        }


REPEAT_COLUMNS = [
    *REPEAT_KEYS,
    "metric",
    "baseline",
    "candidate",
    "baseline_key",
    "candidate_key",
    "invocations",
    "ratios",
    "verdicts",
    "contradict",
]


def repeats(rows: list[dict[str, Any]]) -> list[Repeat]:
    """The same two stacks compared again in separate invocations, from the store's runs (`tracking.store_rows`): per
    cell, machine, device, pair of stacks (by environment key: the same recipe and pins; an A/A pairs a stack with
    itself) and metric, what each invocation said, oldest first (the B/A and word its report gave, logged on its
    candidate run as `vs_first/...`). Two invocations of one comparison should never contradict each other; the
    words of a machine too noisy for its verdicts' error rates would. Only pairs compared in two invocations or more;
    a series' later stacks against its first. `rows` oldest first."""
    by_cell: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for row in rows:
        side = "candidate" if keys.compared_key(compare.FIRST, "verdict_code") in row else "baseline"
        cell = (row.get("invocation_id"), *(row.get(key) for key in REPEAT_KEYS))
        by_cell.setdefault(cell, {"baseline": [], "candidate": []})[side].append(row)
    pairs: dict[Any, list[tuple[tuple, dict[str, Any], dict[str, Any]]]] = {}  # invocation -> (cell, A, B)
    for (invocation, *cell), sides in by_cell.items():
        if len(sides["baseline"]) == 1:  # else no comparison here (one stack), or a cell logged twice: not judged
            pairs.setdefault(invocation, []).extend((tuple(cell), sides["baseline"][0], b) for b in sides["candidate"])
    found: dict[tuple, list[tuple[str, str, float, int]]] = {}
    variant, model, batch = (REPEAT_KEYS.index(key) for key in ("variant", "model_id", "batch_size"))

    def variant_of(entry: tuple) -> str:
        return str(entry[0][variant])

    def timing_process(entry: tuple) -> tuple:  # B's processes of one model and batch size
        return entry[0][model], entry[0][batch], entry[2].get("environment_key")

    for compared in pairs.values():
        by_variant = sorted(compared, key=variant_of)  # inductor start-up: the same cell in every invocation
        for metric in compare.METRICS:
            ordered = by_variant if metric.per_timing_process else compared
            code = keys.compared_key(compare.FIRST, keys.column(metric.name, "verdict_code"))
            judged = [entry for entry in ordered if code in entry[2]]
            for cell, baseline, candidate in suite.counted_once(judged, metric, variant_of, timing_process):
                key = (*cell, baseline.get("environment_key"), candidate.get("environment_key"), metric.name)
                ratio = candidate.get(keys.compared_key(compare.FIRST, keys.column(metric.name, "ratio")))
                said = (_stack(baseline), _stack(candidate), ratio, candidate[code])
                found.setdefault(key, []).append(said)
    return [
        Repeat(
            tuple(cell),
            metric,
            said[-1][0],
            said[-1][1],
            baseline_key,
            candidate_key,
            tuple(ratio for _, _, ratio, _ in said),
            tuple(int(code) for *_, code in said),
        )
        for (*cell, baseline_key, candidate_key, metric), said in found.items()
        if len(said) >= 2
    ]


def _stack(row: dict[str, Any]) -> str:
    return (
        f"{row.get('environment')} ({compare.versions_text(row.get('torch_version'), row.get('transformers_version'))})"
    )


def from_mlflow(config) -> None:
    """Every measurement run of the store as a summary table, each of its compiled runs against the published
    numbers (so that plans run in separate invocations, such as a suite split into GPU windows, are judged in one
    table), and the versions table across invocations."""
    runs = tracking.search_children(config.paths.tracking_uri, tracking.EXPERIMENT)
    if runs.empty:
        uri = tracking.redact(tracking.tracking_uri(config.paths.tracking_uri))
        raise tracking.StoreError(f"no measurement runs in the MLflow store {uri}: run the pipeline or `make ingest`")
    rows = tracking.store_rows(runs)
    out = Path(config.paths.store)
    table = summarize(pd.DataFrame(rows))
    write_csv(table, out / "runs.csv")
    judged = reference.verdicts(table, reference.read_published(config.paths.reference))
    write_csv(judged, out / "verdicts.csv")
    oldest_first = sorted(rows, key=lambda row: row.get("start_time") or 0)
    versions = version_rows(
        [tracking.stored_run(row) for row in oldest_first],
        noise_record.load_calibrations(config.paths.calibration),
        config.margin,
    )
    write_csv(comparison_frame(versions), out / "versions.csv")
    repeated = repeats(oldest_first)
    write_csv(pd.DataFrame([repeat.row() for repeat in repeated], columns=REPEAT_COLUMNS), out / "repeats.csv")
    counts = judged.get("verdict", pd.Series()).value_counts().to_dict()  # eager runs only: no verdict column
    LOGGER.info(
        "wrote %s (%d runs), %s (%s), %s (%d comparisons across invocations, not interleaved) and %s (%d "
        "(cell, metric) comparisons repeated in separate invocations, %d of them contradicting)",
        out / "runs.csv",
        len(table),
        out / "verdicts.csv",
        counts,
        out / "versions.csv",
        len(versions),
        out / "repeats.csv",
        len(repeated),
        sum(repeat.contradict for repeat in repeated),
    )


def check(config) -> None:
    """Exit 3 when some run of the last benchmark did not end ok (they are in the tables and the report); else exit 4
    when a compared environment changed a headline (Holm-adjusted across cells: an A/A run exits 4 in at most 5% of
    invocations), so a script can gate on "did it change?". A run its environment cannot run at all (`unsupported`:
    an old stack) is said, and is no failure."""
    records = [RunRecord.from_dict(row) for row in read_jsonl(config.paths.results)]
    for r in records:
        if r.identity.status == UNSUPPORTED:
            LOGGER.info(
                "unsupported: %s bs%s %s [%s]: %s",
                r.cell.model_id,
                r.cell.batch_size,
                r.cell.variant,
                r.env.environment,
                (r.identity.error or "")[:300],
            )
    failed = [
        f"{r.cell.model_id} bs{r.cell.batch_size} {r.cell.variant} [{r.env.environment}]: "
        f"{r.identity.status} {r.identity.error or ''}"
        for r in records
        if r.identity.status not in (STATUS_OK, UNSUPPORTED)
    ]
    for line in failed:
        LOGGER.error("not ok: %s", line[:300])
    if failed:
        sys.exit(3)
    comparison_path = Path(config.paths.comparison)
    table = pd.read_csv(comparison_path) if comparison_path.exists() and comparison_path.stat().st_size else None
    changed = (
        []
        if table is None or "verdict" not in table
        else [row for _, row in table.iterrows() if row["verdict"] not in QUIET_VERDICTS]
    )
    for row in changed:
        LOGGER.error(
            "changed: %s bs%s %s: %s vs %s %s",
            row["label"],
            row["batch_size"],
            row["variant"],
            row["candidate"],
            row["baseline"],
            row["verdict"],
        )
    sys.exit(4 if changed else 0)


def add_to_calibration(path: str, key: str, record: dict[str, Any]) -> None:
    """Merge this invocation's blocks into the machine's noise record at `path` (others' invocations kept: experiments
    queued side by side add to one record), and say what the record now holds."""
    with locked(f"{path}.lock"):
        calibrations = noise_record.load_calibrations(path)
        latest = calibrations.get(key) or record
        invocations = {**latest.get("invocations", {}), **record["invocations"]}  # theirs and ours, ours kept
        calibrations[key] = {**record, "invocations": invocations}
        write_json(path, calibrations)
    noise = noise_record.machine_noise(record)
    pooled = noise_record.pooled_by_metric(noise)
    LOGGER.info(
        "this machine's noise record (%s): %d cell(s) from %d invocation(s); over all cells %s",
        path,
        len(noise),
        len(record["invocations"]),
        {m: f"sd {n.variance**0.5:.3f} ({n.dof} df)" for m, n in pooled.items()},
    )


def log_series(compared: list[compare.Comparison], labels: list[str]) -> None:
    """For three environments or more: per cell and headline, the first step of the series that changed it."""
    for entry in suite.series_steps(compared, labels, over_suite=True) if len(labels) > 2 else []:
        if entry["first_step"]:
            LOGGER.info(
                "series: %s bs%s %s %s %s at %s: %.3f [%.3f, %.3f]",
                entry["label"],
                entry["batch_size"],
                entry["variant"],
                entry["metric"],
                entry["verdict"],
                entry["first_step"],
                entry["ratio"],
                entry["ci_low"],
                entry["ci_high"],
            )


def log_tables(config: Config, run_info: RunInfo, compared: list[compare.Comparison], metrics: dict) -> None:
    """The comparison on each candidate run, the tables and headline metrics on the parent run; nothing where the
    invocation is not to be logged yet (an exported plan not finished)."""
    if run_info.not_logged:
        LOGGER.info("tables written, not logged to MLflow: %s", run_info.not_logged)
        return
    tracker = tracking.Tracker.of_invocation(config.paths.tracking_uri, run_info)
    tracker.log_comparison(compared)
    if not tracker.log_parent(config.paths.tables(), "summary", metrics=metrics) or tracker.failures:
        LOGGER.warning("tables are on disk; `python -m compilebench.sync` attaches them to MLflow later")


def cell_metrics(compared: list[compare.Comparison]) -> dict[str, Any]:
    """Per compared environment, cell and metric, B/A with its 95% CI and verdict code (tracking.verdict_code: -1 below,
    0 equivalent, +1 above, 2 inconclusive), for `dvc metrics diff` between experiments: `{B}_vs_{A}` → `{label}
    bs{batch} {variant}` → metric. Against the baseline only (a series' steps are in comparison.csv); JSON has no NaN,
    so a missing bound is no key."""
    cells: dict[str, Any] = {}
    for row in compared:
        if row.reference != compare.FIRST:
            continue
        stack = keys.compared_pair(row.candidate, row.baseline)
        entry = cells.setdefault(stack, {}).setdefault(f"{row.label} bs{row.batch_size} {row.variant}", {})
        for name, values in tracking.compared_metrics(row).items():
            entry[name] = {key: float(values[key]) for key in keys.RATIO_FIELDS if math.isfinite(values[key])}
            entry[name]["verdict_code"] = values["verdict_code"]
    return cells


def aggregate(config: Config, records: list[RunRecord], run_info: RunInfo) -> None:
    """The summary, the verdicts against the doc, the comparison of environments and the headline metrics, written
    and logged; the machine's noise record updated."""
    table = summarize(pd.DataFrame([record.to_dict() for record in records]))
    write_csv(table, config.paths.summary)
    best = best_variants(table)
    if not best.empty:
        LOGGER.info("best significant variant per cell:\n%s", best.to_string(index=False))
    judged = reference.verdicts(table, reference.read_published(config.paths.reference))
    write_csv(judged, config.paths.verdicts)
    LOGGER.info("verdicts against the published numbers: %s", judged["verdict"].value_counts().to_dict())
    labels = list(run_info.labels)
    runs = [compare.ComparedRun.of(record) for record in records]
    compared, machine_record = comparison(runs, labels, config.paths.calibration, config.margin)
    pairs = {(row.baseline, row.candidate) for row in compared}  # what B ran with beside the question, once a pair:
    beside = {pair: "; ".join(beside_the_question(records, *pair)) for pair in pairs}  # a tag, a comparison column
    for row in compared:
        row.extra["beside_the_question"] = beside[(row.baseline, row.candidate)]
    write_csv(comparison_frame(compared), config.paths.comparison)
    if machine_record is not None:
        add_to_calibration(config.paths.calibration, runs[0].calibration_key, machine_record)
    log_series(compared, labels)
    metrics = headline_metrics(table, compared)
    metrics.update(
        {f"verdict_{key.replace(' ', '_')}": int(value) for key, value in judged["verdict"].value_counts().items()}
    )
    write_json(config.paths.metrics, metrics)
    write_json(config.paths.cells, cell_metrics(compared))
    log_tables(config, run_info, compared, metrics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-mlflow", action="store_true", help="read every measurement run of the MLflow store")
    parser.add_argument("--check", action="store_true", help="exit 3 if any run of paths.results did not end ok")
    args = parser.parse_args()
    config = stage_config()
    try:
        if args.check:
            check(config)
        noise_record.load_calibrations(config.paths.calibration)  # one that cannot be read: no table written, nor it
        if args.from_mlflow:
            from_mlflow(config)
            return
        records = [RunRecord.from_dict(row) for row in read_jsonl(config.paths.results)]
        run_info = RunInfo.read(config.paths.run_info)
    except (OSError, ValueError, tracking.StoreError, RecordError) as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    aggregate(config, records, run_info)


if __name__ == "__main__":
    main()
