"""The run's report in Markdown: environment, suite, the doc-layout tables, verdicts, anomalies, failures, figures.

Pure rendering: `render(...)` takes the tables the stages wrote and returns the text of `report.md`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from compilebench.models import DOC_TASK_TITLES
from compilebench.reference import GPUS

ENVIRONMENT_FIELDS = (
    "device", "device_name", "torch_version", "transformers_version", "python_version", "cuda_version", "platform",
    "num_threads", "git_commit", "image_source", "image_sha256",
)  # fmt: skip


def _table(frame: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table (no extra dependency)."""
    if frame.empty:
        return "_none_\n"
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join(":---:" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body]) + "\n"


def _fmt(value: Any, digits: int = 2, suffix: str = "") -> str:
    return "" if value is None or pd.isna(value) else f"{float(value):.{digits}f}{suffix}"


def doc_layout(summary: pd.DataFrame, device: str, batch: int) -> pd.DataFrame:
    """The doc's table: "Task/Model | no compile | compile <variant> ..." in mean ms (the doc reports means)."""
    rows = summary[(summary["device_name"] == device) & (summary["batch_size"] == batch)]
    table = []
    for (task, label), group in rows.groupby(["task", "label"], sort=False):
        ok = group[group["status"] == "ok"]
        entry = {
            "Task/Model": f"{DOC_TASK_TITLES.get(task, task)}/{label}",
            "no compile (ms)": _fmt(group["eager_latency_ms_mean"].iloc[0], 3),
        }
        for _, row in group.iterrows():
            value = _fmt(row["latency_ms_mean"], 3) if row["variant"] in set(ok["variant"]) else row["status"]
            entry[f"compile {row['variant']} (ms)"] = value
        table.append(entry)
    return pd.DataFrame(table)


def verdict_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Measured speedup with CI beside the published one on each GPU, and the verdict."""
    rows = []
    for _, row in verdicts.iterrows():
        entry = {
            "model": row["label"],
            "batch": row["batch_size"],
            "variant": row["variant"],
            "device": row["device_name"],
            "measured speedup [95% CI]": (
                f"{_fmt(row['speedup'])} [{_fmt(row['speedup_ci_low'])}, {_fmt(row['speedup_ci_high'])}]"
                if pd.notna(row.get("speedup"))
                else ""
            ),
        }
        for gpu in GPUS:
            entry[f"published {gpu}"] = _fmt(row.get(f"published_speedup_{gpu}"))
        entry["verdict"] = row["verdict"]
        entry["why"] = row["reason"]
        rows.append(entry)
    return pd.DataFrame(rows)


def render(
    config: Any,
    results: list[dict[str, Any]],
    summary: pd.DataFrame,
    verdicts: pd.DataFrame,
    versions: pd.DataFrame,
    published: pd.DataFrame,
    figures: list[Path],
    report_dir: Path,
    run_info: dict[str, Any],
) -> str:
    """The whole report."""
    suite = config.selected
    first = results[0] if results else {}
    lines = [
        "# compilebench report",
        "",
        f"Suite `{config.suite}` ({suite.scale} scale): {len(suite.models)} models × batch sizes "
        f"{suite.batch_sizes} × variants {suite.variants}. MLflow experiment `{run_info.get('experiment')}`, "
        f"invocation `{run_info.get('invocation_id')}` (tag `compilebench.invocation` of the parent run).",
        "",
        "## Environment",
        "",
        _table(pd.DataFrame([{"field": key, "value": first.get(key)} for key in ENVIRONMENT_FIELDS])),
        "Weights: "
        + ", ".join(sorted({f"{r['label']} {r['weights_source']}" for r in results if "weights_source" in r}))
        + ". Random-init weights have the published architecture and input shapes; latency does not depend on "
        "weight values.",
        "",
        "## Measured, in the doc's layout (mean ms per batch)",
        "",
    ]
    for (device, batch), _ in summary.groupby(["device_name", "batch_size"]):
        lines += [f"### {device} (batch size: {batch})", "", _table(doc_layout(summary, device, int(batch)))]
    ok = verdicts[verdicts["status"] == "ok"]
    lines += [
        "## Against the published numbers",
        "",
        "Speedup = median(eager) / median(compiled) of interleaved runs; published speedup = the doc's eager / "
        "compiled ms (torch 2.0.1 for `default`, the nightly tables for `reduce-overhead`). A verdict compares "
        "ratios; absolute ms are compared only on the same GPU model. A CI that contains 1.0 means no significant "
        "difference between eager and compiled.",
        "",
        _table(verdict_table(verdicts)),
        "Verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts["verdict"].value_counts().items()) + ".",
        "",
    ]
    if not ok.empty:
        best = ok.sort_values("speedup", ascending=False).drop_duplicates(["label", "batch_size", "device_name"])
        best = best[best["speedup_ci_low"] > 1.0]
        lines += [
            "## Best variant per model (significantly faster than eager)",
            "",
            _table(best[["label", "batch_size", "device_name", "variant", "speedup"]].round(2)),
        ]
    flagged = published[published["anomaly"] != ""]
    lines += [
        "## Anomalies in the published data (excluded from verdicts)",
        "",
        _table(flagged[["scenario", "gpu", "batch_size", "label", "eager_ms", "compiled_ms", "anomaly"]]),
    ]
    not_ok = summary[summary["status"] != "ok"]
    eager_not_ok = [r for r in results if r.get("variant") == "eager" and r.get("status") != "ok"]
    failed = pd.concat(
        [
            not_ok[["label", "batch_size", "variant", "status", "error"]],
            pd.DataFrame(
                [{k: r.get(k) for k in ("label", "batch_size", "variant", "status", "error")} for r in eager_not_ok]
            ),
        ]
    )
    lines += ["## Failed or invalid runs", "", _table(failed)]
    if not versions.empty and versions[["torch_version", "transformers_version"]].drop_duplicates().shape[0] > 1:
        columns = ["label", "batch_size", "variant", "device_name", "torch_version", "transformers_version",
                   "latency_ms_median", "speedup", "regression"]  # fmt: skip
        lines += ["## Across versions in the MLflow store", "", _table(versions[columns].round(3))]
    lines += ["## Figures", ""]
    for figure in figures:
        lines += [f"![{figure.stem}]({os.path.relpath(figure, report_dir)})", ""]
    return "\n".join(lines)
