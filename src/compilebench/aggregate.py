"""Stage aggregate: one table of eager vs compiled per (model, batch size, variant, device, torch version).

    python -m compilebench.aggregate              # reads params.yaml; writes paths.summary and paths.metrics
    python -m compilebench.aggregate --from-mlflow [--out FILE]   # the same table from every run in the store

Reads this invocation's raw results (JSON lines) by default, or, with --from-mlflow, all measurement runs of the
store (any machine, any torch version), so that versions and machines compare side by side. The summary table and
metrics are logged to the pipeline's parent MLflow run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from compilebench import tracking
from compilebench.config import ConfigError, load_config

LOGGER = logging.getLogger(__name__)

KEYS = ["model_id", "label", "task", "batch_size", "device", "device_name", "torch_version", "transformers_version"]
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


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Compiled rows beside their eager baseline: latencies, speedup with CI, improvement %, compile cost."""
    frame = results.copy()
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


def write_csv_atomic(frame: pd.DataFrame, path: Path) -> None:
    """CSV to a temporary file, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-mlflow", action="store_true", help="read every measurement run of the MLflow store")
    parser.add_argument("--out", default=None, help="where to write the table (default: paths.summary)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config()
    except ConfigError as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    if args.from_mlflow:
        results = from_mlflow_frame(tracking.search_children(config.paths.tracking_uri, "compilebench"))
    else:
        results = read_results(Path(config.paths.results))
    table = summarize(results)
    out = Path(args.out or config.paths.summary)
    write_csv_atomic(table, out)
    LOGGER.info("wrote %s (%d rows)", out, len(table))
    best = best_variants(table)
    if not best.empty:
        LOGGER.info("best significant variant per cell:\n%s", best.to_string(index=False))
    if args.from_mlflow:
        return
    metrics = headline_metrics(table)
    Path(config.paths.metrics).write_text(json.dumps(metrics, indent=2))
    run_info = json.loads(Path(config.paths.run_info).read_text())
    client = tracking.client(config.paths.tracking_uri)
    tracking.log_files(client, run_info["parent_run_id"], [out, Path(config.paths.metrics)], "summary")
    tracking.log_metrics(client, run_info["parent_run_id"], metrics)


if __name__ == "__main__":
    main()
