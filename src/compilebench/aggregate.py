"""Stage aggregate: eager vs compiled per (model, batch size, variant, device, torch version), set against the doc.

    python -m compilebench.aggregate              # reads params.yaml; writes summary, verdicts, versions, metrics
    python -m compilebench.aggregate --from-mlflow [--out FILE]   # the summary table from every run in the store

1. summary: this invocation's raw results (JSON lines) as one table; with --from-mlflow, every measurement run of
   the MLflow store instead (any machine, any version).
2. verdicts: each compiled run against the published numbers (paths.reference), rules in `reference`.
3. versions: every ok run in the MLflow store, per (model, batch size, variant, device) across torch/transformers
   versions, each compared with the previous version; a change larger than the runs' measured noise is flagged.
The tables and metrics are logged to the pipeline's parent MLflow run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from compilebench import reference, tracking
from compilebench.config import ConfigError, load_config
from compilebench.files import write_atomic, write_json

LOGGER = logging.getLogger(__name__)

KEYS = ["model_id", "label", "task", "batch_size", "device", "device_name", "machine", "torch_version",
        "transformers_version"]  # fmt: skip
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
    "eager_latency_ms_mean",
    "eager_latency_ms_median",
    "latency_ms_mean",
    "latency_ms_median",
    "latency_ms_p90",
    "latency_ms_std",
    "iterations",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "speedup_verdict",
    "improvement_pct",
    "cv",
    "eager_cv",
    "compile_s",
    "compile_s_warm",
    "inductor_cache",
    "break_even_calls",
    "peak_mem_mib",
    "eager_peak_mem_mib",
    "max_rel_diff",
    "task_agreement",
    "graph_count",
    "graph_break_count",
    "recompile_count",
    "error",
]


def read_results(path: Path) -> pd.DataFrame:
    """The benchmark's JSON lines as a DataFrame (raw sample lists kept as objects)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(rows)


def from_mlflow_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """MLflow search results (params.*, metrics.*, tags.* columns) as result rows."""
    frame = pd.DataFrame(index=runs.index)
    for column in runs.columns:
        for prefix in ("params.", "metrics."):
            if column.startswith(prefix):
                frame[column.removeprefix(prefix)] = runs[column]
    frame["status"] = runs.get("tags.status")
    frame["speedup_verdict"] = runs.get("tags.speedup_verdict")
    frame["batch_size"] = pd.to_numeric(frame["batch_size"])
    frame["compile"] = frame["compile"].astype(str).str.lower() == "true"
    return frame


def with_keys(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """`frame` with every key column present and no NaN in them (pandas drops NaN keys when grouping or merging)."""
    frame = frame.copy()
    for key in keys:
        frame[key] = frame[key].fillna("") if key in frame else ""
    return frame


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Compiled rows beside their eager baseline: latencies, speedup with CI, improvement %, compile cost."""
    frame = with_keys(results, KEYS)
    for column in COLUMNS:
        if column not in frame:
            frame[column] = None
    eager = frame[~frame["compile"].astype(bool)][[*KEYS, "latency_ms_mean", "latency_ms_median", "peak_mem_mib"]]
    eager = eager.rename(
        columns={
            "latency_ms_mean": "eager_only_latency_ms_mean",
            "latency_ms_median": "eager_only_latency_ms_median",
            "peak_mem_mib": "eager_peak_mem_mib",
        }
    ).drop_duplicates(KEYS, keep="last")
    compiled = frame[frame["compile"].astype(bool)].drop(columns=["eager_peak_mem_mib"])
    table = compiled.merge(eager, on=KEYS, how="left")
    # A compiled row's eager latencies are its paired (interleaved) ones; an eager-only suite has none.
    for stat in ("mean", "median"):
        paired = f"eager_latency_ms_{stat}"
        table[paired] = table[paired].fillna(table[f"eager_only_latency_ms_{stat}"])
    table = table[COLUMNS].sort_values(["task", "label", "batch_size", "device_name", "torch_version", "variant"])
    return table.reset_index(drop=True)


def headline_metrics(table: pd.DataFrame) -> dict[str, Any]:
    """A few numbers for `dvc metrics show`: per variant, geometric-mean speedup over ok cells, and counts."""
    ok = table[table["status"] == "ok"].dropna(subset=["speedup"])
    metrics: dict[str, Any] = {"runs_ok": len(ok), "runs_not_ok": int((table["status"] != "ok").sum())}
    for variant, group in ok.groupby("variant"):
        speedups = group["speedup"].astype(float)
        metrics[f"{variant}_speedup_geomean"] = float(speedups.prod() ** (1 / len(speedups)))
        metrics[f"{variant}_speedup_min"] = float(speedups.min())
        metrics[f"{variant}_speedup_max"] = float(speedups.max())
        metrics[f"{variant}_compile_s_median"] = float(group["compile_s"].astype(float).median())
    return metrics


def best_variants(table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, batch size, device, torch): the fastest ok compiled variant, if any beat eager significantly."""
    ok = table[(table["status"] == "ok") & (table["speedup_ci_low"].astype(float) > 1.0)]
    if ok.empty:
        return ok
    return ok.loc[ok.groupby(KEYS)["speedup"].idxmax(), [*KEYS, "variant", "speedup"]]


VERSION_KEYS = ["model_id", "label", "batch_size", "variant", "device_name", "machine"]
ENVIRONMENT_KEYS = ["torch_version", "transformers_version"]


def _version_key(text: str) -> tuple:
    """Sortable form of a version string ('2.13.0+cpu' < '2.14.1')."""
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(str(text)))
    except InvalidVersion:
        return (1, str(text))


def compare_environments(previous: pd.Series, current: pd.Series) -> dict[str, Any]:
    """Current run vs the same cell in the previous environment: changes, and a regression beyond measured noise."""
    change = current["latency_ms_median"] / previous["latency_ms_median"] - 1
    noise = max(current["cv"], previous["cv"])
    flags = []
    if change > noise:
        flags.append(f"latency +{change * 100:.1f}% > noise {noise * 100:.1f}%")
    compared: dict[str, Any] = {
        "previous_environment": f"torch {previous['torch_version']} / transformers {previous['transformers_version']}",
        "latency_change_pct": change * 100,
    }
    if pd.notna(current["speedup"]) and pd.notna(previous["speedup"]):
        compared["speedup_change"] = current["speedup"] - previous["speedup"]
        if current["speedup_ci_high"] < previous["speedup_ci_low"]:
            previous_ci = f"[{previous['speedup_ci_low']:.2f}, {previous['speedup_ci_high']:.2f}]"
            flags.append(f"speedup {current['speedup']:.2f}x below the previous CI {previous_ci}")
    compared["regression"] = "; ".join(flags)
    return compared


def version_table(results: pd.DataFrame) -> pd.DataFrame:
    """Ok runs per (model, batch size, variant, device) and environment, each compared with the previous environment.

    A regression is flagged when the speedup's CI lies wholly below the previous one's, or the median latency grew
    by more than the larger coefficient of variation of the two runs (their measured noise).
    """
    numeric = ("latency_ms_median", "cv", "speedup", "speedup_ci_low", "speedup_ci_high")
    ok = with_keys(results[results["status"] == "ok"], [*VERSION_KEYS, *ENVIRONMENT_KEYS])
    if ok.empty:
        return pd.DataFrame(columns=[*VERSION_KEYS, *ENVIRONMENT_KEYS, *numeric, "regression"])
    for column in numeric:
        ok[column] = pd.to_numeric(ok[column], errors="coerce") if column in ok else float("nan")
    if "start_time" in ok:
        ok = ok.sort_values("start_time")
    latest = ok.drop_duplicates([*VERSION_KEYS, *ENVIRONMENT_KEYS], keep="last")  # reruns: the newest counts
    latest = latest.assign(
        _order=[
            (_version_key(a), _version_key(b))
            for a, b in zip(latest["torch_version"], latest["transformers_version"], strict=True)
        ]
    )
    rows = []
    for _, group in latest.groupby(VERSION_KEYS, sort=True):
        previous = None
        for _, row in group.sort_values("_order").iterrows():
            entry = {key: row[key] for key in [*VERSION_KEYS, *ENVIRONMENT_KEYS, *numeric]}
            entry.update(compare_environments(previous, row) if previous is not None else {"regression": ""})
            rows.append(entry)
            previous = row
    return pd.DataFrame(rows)


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """A table as CSV, atomically."""
    write_atomic(path, frame.to_csv(index=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-mlflow", action="store_true", help="read every measurement run of the MLflow store")
    parser.add_argument("--out", default=None, help="where to write the table (default: paths.summary)")
    parser.add_argument("--check", action="store_true", help="exit 3 if any run of paths.results did not end ok")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config()
    except ConfigError as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    if args.check:
        failed = [
            f"{r['cell']}: {r['status']} {r.get('error') or ''}"
            for _, r in read_results(Path(config.paths.results)).iterrows()
            if r["status"] != "ok"
        ]
        for line in failed:
            LOGGER.error("not ok: %s", line[:300])
        sys.exit(3 if failed else 0)
    if args.from_mlflow:
        results = from_mlflow_frame(tracking.search_children(config.paths.tracking_uri, tracking.EXPERIMENT))
    else:
        results = read_results(Path(config.paths.results))
    table = summarize(results)
    out = Path(args.out or config.paths.summary)
    write_csv(table, out)
    LOGGER.info("wrote %s (%d rows)", out, len(table))
    best = best_variants(table)
    if not best.empty:
        LOGGER.info("best significant variant per cell:\n%s", best.to_string(index=False))
    if args.from_mlflow:
        return
    judged = reference.verdicts(table, reference.read_published(config.paths.reference))
    write_csv(judged, Path(config.paths.verdicts))
    LOGGER.info("verdicts against the published numbers: %s", judged["verdict"].value_counts().to_dict())
    try:
        store = from_mlflow_frame(tracking.search_children(config.paths.tracking_uri, tracking.EXPERIMENT))
        versions = version_table(store)
    except Exception as error:  # the store is an outside input: its failure must not lose this run's tables
        LOGGER.warning("MLflow store unreadable, versions table left empty: %s", tracking.redact(str(error)))
        versions = version_table(results.assign(status="none"))
    write_csv(versions, Path(config.paths.versions))
    regressions = versions[versions["regression"].astype(bool)] if not versions.empty else versions
    if not regressions.empty:
        LOGGER.warning("regressions against the previous environment:\n%s", regressions.to_string(index=False))
    metrics = headline_metrics(table)
    metrics.update({f"verdict_{key}": int(value) for key, value in judged["verdict"].value_counts().items()})
    metrics["version_regressions"] = len(regressions)
    write_json(config.paths.metrics, metrics)
    run_info = json.loads(Path(config.paths.run_info).read_text())
    tracker = tracking.Tracker(config.paths.tracking_uri, run_info["invocation_id"])
    files = [out, Path(config.paths.verdicts), Path(config.paths.versions), Path(config.paths.metrics)]
    if not tracker.log_parent(files, "summary", metrics=metrics):
        LOGGER.warning("tables are in %s; `python -m compilebench.sync` attaches them to MLflow later", out.parent)


if __name__ == "__main__":
    main()
