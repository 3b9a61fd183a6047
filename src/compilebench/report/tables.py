"""The report's tables: each a DataFrame built from the stages' tables, and the cell formats they share
(`fmt`, `interval`, `markdown`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pandas as pd

from compilebench.analysis import compare, stats, suite
from compilebench.analysis.differences import build_word
from compilebench.analysis.run_record import RunRecord
from compilebench.harness import fingerprint
from compilebench.harness.models import DOC_TASK_TITLES
from compilebench.reference import GPUS

ENVIRONMENT_FIELDS = (
    "environment_name",
    "environment_pins",
    "environment_settings",
    *fingerprint.RUN_FIELDS,
    "machine",
    "num_threads",
    "git_commit",
    "image_source",
    "image_sha256",
)


def markdown(frame: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table (no extra dependency)."""
    if frame.empty:
        return "_none_\n"
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join(":---:" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body]) + "\n"


def fmt(value: Any, digits: int = 2, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return ""
    return f"{float(value):.{digits}f}{suffix}"


def interval(value: Any, low: Any, high: Any, digits: int = 2) -> str:
    if not fmt(value):
        return ""
    ci = f" [{fmt(low, digits)}, {fmt(high, digits)}]" if fmt(low) and fmt(high) else " [no CI]"
    return fmt(value, digits) + ci


def median_and_mean(median: Any, mean: Any) -> str:
    """`101.234 (mean 104.512)`: the median over processes first (one slow process moves a mean, not a median)."""
    return f"{fmt(median, 3)} (mean {fmt(mean, 3)})" if fmt(median) and fmt(mean) else fmt(mean, 3)


def doc_layout(summary: pd.DataFrame, environment: str, device: str, batch: int) -> pd.DataFrame:
    """The doc's table: "Task/Model | no compile | compile <variant> ..." in median ms, the mean beside it (the doc
    reports means)."""
    rows = summary[
        (summary["environment"] == environment) & (summary["device_name"] == device) & (summary["batch_size"] == batch)
    ]
    table = []
    for (task, label), group in rows.groupby(["task", "label"], sort=False):
        entry = {
            "Task/Model": f"{DOC_TASK_TITLES.get(task, task)}/{label}",
            "no compile (ms)": median_and_mean(
                group["eager_latency_ms_median"].iloc[0], group["eager_latency_ms_mean"].iloc[0]
            ),
        }
        for _, row in group.iterrows():
            ok = row["status"] == "ok"
            value = median_and_mean(row["latency_ms_median"], row["latency_ms_mean"]) if ok else row["status"]
            entry[f"compile {row['variant']} (ms)"] = value
        table.append(entry)
    return pd.DataFrame(table)


def verdict_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Measured speedup with CI beside the published one on each GPU, the reference used, and the verdict."""
    rows = []
    for _, row in verdicts.iterrows():
        entry = {
            "model": row["label"],
            "batch": row["batch_size"],
            "variant": row["variant"],
            "environment": row.get("environment"),
            "device": row["device_name"],
            "measured speedup [95% CI]": interval(
                row.get("speedup"), row.get("speedup_ci_low"), row.get("speedup_ci_high")
            ),
        }
        for gpu in GPUS:
            entry[f"published {gpu}"] = fmt(row.get(f"published_speedup_{gpu}"))
        entry["reference"] = fmt(row.get("reference_speedup"))
        entry["compared as"] = row.get("comparison")
        entry["verdict"] = row["verdict"]
        rows.append(entry)
    return pd.DataFrame(rows)


def comparison_table(compared: pd.DataFrame) -> pd.DataFrame:
    """B against A per cell: each metric's ratio [95% CI] and verdict, compile-health changes first."""
    rows = []
    for row in read_comparisons(compared):
        entry = {
            "model": row.label,
            "batch": row.batch_size,
            "variant": row.variant,
            "B vs A": f"{row.candidate} vs {row.baseline}",
            "health change": row.health_change,
        }
        for name, judged in row.judged.items():
            ratio = judged.ratio
            if not fmt(ratio.value):
                continue
            text = interval(ratio.value, ratio.low, ratio.high, 3)
            if text.endswith("[no CI]") and ratio.blocks <= 1:  # one process a side
                text = text.replace("[no CI]", "[one block: no CI]")
            noisy = " (noisy cell)" if ratio.noisy else ""
            sees = (
                f", sees ±{ratio.detectable:.0%}"
                if judged.verdict == stats.INCONCLUSIVE and math.isfinite(ratio.detectable)
                else ""
            )
            entry[name.replace("_", " ")] = f"{text} {judged.verdict}{noisy}{sees}"
        entry["verdict"] = row.verdict
        entry["blocks"] = row.judged[row.headline].ratio.blocks
        rows.append(entry)
    return pd.DataFrame(rows)


def read_comparisons(compared: pd.DataFrame) -> list[compare.Comparison]:
    """comparison.csv's lines as comparisons."""
    return [compare.Comparison.read(row) for row in compared.to_dict("records")]


def environment_order(results: list[RunRecord], labels: tuple[str, ...] = ()) -> list[str]:
    """The environments the results hold, in the invocation's order (`labels`: the baseline first), then any other."""
    present = list(dict.fromkeys(record.env.environment for record in results))
    return [label for label in labels if label in present] + [label for label in present if label not in labels]


def environment_table(results: list[RunRecord], labels: tuple[str, ...] = ()) -> pd.DataFrame:
    """One column per environment of the invocation, in its order (environment_order): what it ran on."""
    first = {}
    for record in results:
        first.setdefault(record.env.environment, record.to_dict())
    firsts = {label: first[label] for label in environment_order(results, labels)}
    return pd.DataFrame(
        [{"field": key, **{label: row.get(key) for label, row in firsts.items()}} for key in ENVIRONMENT_FIELDS]
    )


def startup_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per model and way of deploying: time to first inference in a fresh process (cold, warm) against the
    steady-state latency, and the calls after which compiling has paid for itself, eager first."""
    rows = []
    for (environment, device, batch, label), group in summary.groupby(
        ["environment", "device_name", "batch_size", "label"], sort=False
    ):
        first = group.iloc[0]
        rows.append(
            {
                "environment": environment,
                "device": device,
                "batch": batch,
                "model": label,
                "variant": "eager",
                "deploy": "none",
                "first inference s (cold)": fmt(first.get("eager_first_inference_s"), 1),
                "first inference s (warm)": "",
                "latency ms": fmt(first.get("eager_latency_ms_median"), 2),
                "speedup": "",
                "break-even calls (cold / warm)": "",
                "status": "ok",
            }
        )
        for _, row in group.iterrows():
            ok = row["status"] == "ok"
            rows.append(
                {
                    "environment": environment,
                    "device": device,
                    "batch": batch,
                    "model": label,
                    "variant": row["variant"],
                    "deploy": row.get("deploy") or "jit",
                    "first inference s (cold)": fmt(row.get("first_inference_s"), 1),
                    "first inference s (warm)": fmt(row.get("first_inference_s_warm"), 1),
                    "latency ms": fmt(row["latency_ms_median"], 2) if ok else "",
                    "speedup": interval(row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"]) if ok else "",
                    "break-even calls (cold / warm)": " / ".join(
                        fmt(row.get(key), 0) or "never" for key in ("break_even_calls", "break_even_calls_warm")
                    )
                    if ok
                    else "",
                    "status": row["status"] if ok else f"{row['status']}: {str(row.get('error') or '')[:160]}",
                }
            )
    return pd.DataFrame(rows)


def dynamic_batch_table(summary: pd.DataFrame) -> pd.DataFrame:
    """For models with a `serve` variant: each compiled variant's latency and speedup at every batch size, its graphs,
    recompiles and cold compile time in all. A variant without `serve` compiles a graph per size, in a process per
    size: its compile time is their sum."""
    if "serve_batch_sizes" not in summary or summary["serve_batch_sizes"].isna().all():
        return pd.DataFrame()
    sizes = sorted(summary["batch_size"].unique())
    served_labels = set(summary.loc[summary["serve_batch_sizes"].notna(), "label"])
    rows = []
    keys = ["environment", "device_name", "label", "variant"]
    for (environment, device, label, variant), runs_ in summary[summary["label"].isin(served_labels)].groupby(
        keys, sort=False
    ):
        serve = runs_["serve_batch_sizes"].notna().any()
        serves = runs_["serve_batch_sizes"].dropna().iloc[0] if serve else "its batch size"
        row = {
            "environment": environment,
            "device": device,
            "model": label,
            "variant": variant,
            "one process serves": serves,
        }
        for size in sizes:
            at = runs_[runs_["batch_size"] == size]
            if at.empty:
                row[f"batch {size}: ms (speedup)"] = ""
                continue
            run = at.iloc[0]
            row[f"batch {size}: ms (speedup)"] = (
                f"{fmt(run['latency_ms_median'])} ({fmt(run['speedup'])}x)" if run["status"] == "ok" else run["status"]
            )
        compile_s = runs_["compile_s"].dropna()
        if compile_s.empty:  # no process compiled: nothing to count
            row.update({"graphs": "", "recompiles": "", "compile s in all (cold)": ""})
        else:
            row["graphs"] = fmt(runs_["serve_graphs"].max(), 0) if serve else fmt(runs_["graph_count"].sum(), 0)
            row["recompiles"] = fmt(runs_["serve_recompiles"].max(), 0) if serve else "0"
            row["compile s in all (cold)"] = fmt(compile_s.median() if serve else compile_s.sum(), 1)
        errors = runs_.loc[runs_["status"] != "ok", "error"].dropna()
        row["status"] = "ok" if errors.empty else str(errors.iloc[0])[:160]
        rows.append(row)
    return pd.DataFrame(rows)


SERIES_METRIC_NAMES = {
    "eager_latency": "eager latency",
    "compiled_latency": "compiled latency",
    "speedup": "speedup",
    "compile_warm": "compile, warm",
    "compile_cold": "compile, cold",
}


def series_table(history: list[dict[str, Any]]) -> pd.DataFrame:
    """Per cell and headline of a series, the first step that changed it, by how much, or the word across the whole
    series where none did; its steps counted by word; the stacks whose run of it measured nothing, with their status
    (suite.series_steps)."""
    rows = []
    for entry in history:
        steps = entry["steps"]
        if entry["first_step"]:
            found = interval(entry["ratio"], entry["ci_low"], entry["ci_high"], 3)
            answer = f"{entry['verdict']} at {entry['first_step']}: {found}"
        else:
            answer = f"no step changed: {entry['across']} across the series"
        counts = (
            sum(step["verdict"] == stats.EQUIVALENT for step in steps),
            sum(step["changed"] for step in steps),
            sum(step["verdict"] == stats.INCONCLUSIVE for step in steps),
        )
        rows.append(
            {
                "model": entry["label"],
                "batch": entry["batch_size"],
                "variant": entry["variant"],
                "metric": SERIES_METRIC_NAMES.get(entry["metric"], entry["metric"]),
                "first step that changed (B / A [95% CI])": answer,
                "steps equivalent / changed / inconclusive": " / ".join(map(str, counts)),
                "not measured in": ", ".join(
                    f"{label} ({status})" for label, status in entry["not_measured_in"].items()
                ),
            }
        )
    return pd.DataFrame(rows)


def series_steps_table(
    labels: list[str], changes: dict[tuple[str, str], list[str]], versions: dict[str, str]
) -> pd.DataFrame:
    """Each step of a series: the torch it goes between and what else it changes (differences.step_changes)."""
    rows = []
    for before, after in itertools.pairwise(labels):
        torch = f"{versions.get(before, '')} → {versions.get(after, '')}"
        rows.append(
            {
                "step": f"{before} -> {after}",
                "torch": torch,
                "also changed": "; ".join(changes.get((before, after), [])) or "nothing else",
            }
        )
    return pd.DataFrame(rows)


def _precision_cell(row: dict[str, Any]) -> str:
    """One interval against its target: half-width, the blocks behind it, and where short, the blocks it needs."""
    blocks = f"{row['blocks']} block{'s' if row['blocks'] != 1 else ''}"
    if row["halfwidth_pct"] is None:
        return f"no CI ({blocks})"
    text = f"±{row['halfwidth_pct']:.1f}% ({blocks})"
    if row["met"]:
        return text
    return f"{text}: ~{row['more_blocks']} more" if row["more_blocks"] else f"{text}: short"


def precision_table(reached: list[dict[str, Any]]) -> pd.DataFrame:
    """Per run, each targeted interval (adaptive.shortfalls) in a column headed by its metric and target, and whether
    the run reached every target."""
    runs: dict[tuple[str, int, str], dict[str, Any]] = {}
    heads = {}
    for row in reached:
        head = f"{row['metric'].replace('_', ' ')} (±{row['target_pct']:.3g}%)"
        heads.setdefault(row["metric"], head)
        entry = runs.setdefault(
            (row["model_id"], row["batch_size"], row["variant"]),
            {"model": row["model_id"], "batch": row["batch_size"], "variant": row["variant"], "reached": "yes"},
        )
        entry[heads[row["metric"]]] = _precision_cell(row)
        if not row["met"]:
            entry["reached"] = "no"
    order = [heads[metric.name] for metric in compare.METRICS if metric.name in heads]
    return pd.DataFrame(list(runs.values()), columns=["model", "batch", "variant", *order, "reached"])


def build_of(results: list[RunRecord], label: str) -> str:
    """How an environment's torch was built, as its runs recorded it: `CPU build` or `CUDA 12.8 build`."""
    mine = next((record.env.environment_fields for record in results if record.env.environment == label), {})
    kind = build_word(mine.get("cuda_version"))
    return f"torch {mine.get('torch_version')} ({kind}), transformers {mine.get('transformers_version')}"


def what_changed_table(summary: list[dict[str, Any]]) -> pd.DataFrame:
    """Per compared environment and metric: the suite's verdicts counted, its geometric-mean B/A [95% CI], the cells
    left out of it, and how many flags chance alone would give (suite.summary)."""
    rows = []
    for entry in summary:
        rows.append(
            {
                "B vs A": f"{entry['candidate']} vs {entry['baseline']}",
                "metric": entry["metric"].replace("_", " "),
                "cells": entry["cells"],
                "changed": entry["changed"],
                "equivalent": entry["equivalent"],
                "inconclusive": entry["inconclusive"],
                "suite geomean B/A [95% CI]": interval(entry["geomean"], entry["ci_low"], entry["ci_high"], 3),
                "over the suite": entry["verdict"],
                "left out": ", ".join(entry["left_out"]) or "none",
                "flags by chance": f"{entry['chance_flags']:.1f}",
            }
        )
    return pd.DataFrame(rows)


ANSWER_METRICS = suite.ANSWERED
SUITE_ROW = "**over the suite**"  # the answer table's last row per comparison: suite.summary's geomean and word


def _answer_cell(judged: compare.Judged | None) -> str:
    """A metric of one cell as the answer table shows it: the word first, then B/A [95% CI]."""
    if judged is None or not fmt(judged.ratio.value):
        return ""
    ratio = judged.ratio
    text = interval(ratio.value, ratio.low, ratio.high, 2)
    if text.endswith("[no CI]") and ratio.blocks <= 1:
        text = text.replace("[no CI]", "(one process)")
    return f"{judged.verdict} {text}"


def _suite_row(summary: list[dict[str, Any]], candidate: str, baseline: str, several: bool) -> dict[str, str]:
    """A comparison's row over the suite (suite.summary): each metric's word, then its geomean B/A [95% CI]."""
    entry = {
        **({"B vs A": f"{candidate} vs {baseline}"} if several else {}),
        "model": SUITE_ROW,
        "batch": "",
        "variant": "geomean",
    }
    for found in summary:
        if found["candidate"] == candidate and found["metric"] in ANSWER_METRICS:
            ratio = interval(found["geomean"], found["ci_low"], found["ci_high"], 2)
            entry[found["metric"].replace("_", " ")] = f"{found['verdict']} {ratio}" if fmt(found["geomean"]) else ""
    return entry


def answer_table(compared: pd.DataFrame) -> pd.DataFrame:
    """The answer per model: per compared environment (against the baseline), one row per (model, batch size,
    variant), a model's rows together and its eager row first, then the suite's row; in each metric's column the
    word, then B/A [95% CI] (compile cold, warm and inductor start-up beside latency)."""
    comparisons = read_comparisons(compared)
    summary = suite.summary(comparisons)
    rows = [row for row in comparisons if row.reference == compare.FIRST]
    candidates = list(dict.fromkeys(row.candidate for row in rows))
    labels = list(dict.fromkeys(row.label for row in rows))
    variants = sorted(dict.fromkeys(row.variant for row in rows), key=lambda variant: variant != "eager")
    ordered = sorted(
        rows,
        key=lambda r: (candidates.index(r.candidate), labels.index(r.label), r.batch_size, variants.index(r.variant)),
    )
    found, previous = [], None
    for at, row in enumerate(ordered):
        group = (row.candidate, row.label, row.batch_size)
        entry = {
            **({"B vs A": f"{row.candidate} vs {row.baseline}"} if len(candidates) > 1 else {}),
            "model": "" if group == previous else row.label,
            "batch": "" if group == previous else row.batch_size,
            "variant": row.variant + (f" ({row.health_change})" if row.health_change else ""),
        }
        previous = group
        for name in ANSWER_METRICS:
            entry[name.replace("_", " ")] = _answer_cell(row.judged.get(name))
        found.append(entry)
        if at + 1 == len(ordered) or ordered[at + 1].candidate != row.candidate:
            found.append(_suite_row(summary, row.candidate, row.baseline, len(candidates) > 1))
    frame = pd.DataFrame(found).fillna("")
    return frame.loc[:, (frame != "").any()] if not frame.empty else frame  # a metric no cell has: no column


def _word(value: Any) -> str:
    return f"{value} " if isinstance(value, str) and value else ""


def speedup_answer_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The answer per model for one environment: each compiled variant's speedup over eager with its 95% CI and word,
    its latency and eager's (median ms per batch), and its compile time cold and warm (s)."""
    rows = []
    for environment, mine in summary.groupby("environment", sort=False):
        previous = None
        for _, row in mine.iterrows():
            group = (environment, row["label"], row["batch_size"])
            speedup = interval(row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"])
            latency = interval(
                row["latency_ms_median"], row["latency_ms_median_ci_low"], row["latency_ms_median_ci_high"], 1
            )
            rows.append(
                {
                    **({"environment": environment} if summary["environment"].nunique() > 1 else {}),
                    "model": "" if group == previous else row["label"],
                    "batch": "" if group == previous else row["batch_size"],
                    "variant": row["variant"],
                    "speedup [95% CI]": f"{_word(row['speedup_verdict'])}{speedup}",
                    "eager ms": fmt(row["eager_latency_ms_median"], 1),
                    "compiled ms [95% CI]": latency,
                    "compile cold s": fmt(row["compile_s"], 1),
                    "compile warm s": fmt(row["compile_s_warm"], 1),
                }
            )
            previous = group
    return pd.DataFrame(rows)
