"""The run's report in Markdown: what ran where, the doc-layout tables, environments compared, verdicts, failures.

Pure rendering: `render(...)` takes the tables the stages wrote and returns the text of `report.md`. One module on
purpose (over 500 lines): its sections are read in order, one function each, sharing the table and interval helpers.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from compilebench.analysis import compare, stats
from compilebench.analysis.runs import RunRecord
from compilebench.harness import fingerprint
from compilebench.harness.models import DOC_TASK_TITLES
from compilebench.harness.records import times_own_level
from compilebench.reference import GPUS, TOLERANCE
from compilebench.run_info import RunInfo

ENVIRONMENT_FIELDS = ("environment_name", "environment_pins", "environment_settings", *fingerprint.RUN_FIELDS,
                      "machine", "num_threads", "git_commit", "image_source", "image_sha256")  # fmt: skip


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
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return ""
    return f"{float(value):.{digits}f}{suffix}"


def _interval(value: Any, low: Any, high: Any, digits: int = 2) -> str:
    if not _fmt(value):
        return ""
    ci = f" [{_fmt(low, digits)}, {_fmt(high, digits)}]" if _fmt(low) and _fmt(high) else " [no CI]"
    return _fmt(value, digits) + ci


def _median_and_mean(median: Any, mean: Any) -> str:
    """`101.234 (mean 104.512)`: the median over processes first (one slow process moves a mean, not a median)."""
    return f"{_fmt(median, 3)} (mean {_fmt(mean, 3)})" if _fmt(median) and _fmt(mean) else _fmt(mean, 3)


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
            "no compile (ms)": _median_and_mean(
                group["eager_latency_ms_median"].iloc[0], group["eager_latency_ms_mean"].iloc[0]
            ),
        }
        for _, row in group.iterrows():
            ok = row["status"] == "ok"
            value = _median_and_mean(row["latency_ms_median"], row["latency_ms_mean"]) if ok else row["status"]
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
            "measured speedup [95% CI]": _interval(
                row.get("speedup"), row.get("speedup_ci_low"), row.get("speedup_ci_high")
            ),
        }
        for gpu in GPUS:
            entry[f"published {gpu}"] = _fmt(row.get(f"published_speedup_{gpu}"))
        entry["reference"] = _fmt(row.get("reference_speedup"))
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
            if not _fmt(ratio.value):
                continue
            text = _interval(ratio.value, ratio.low, ratio.high, 3)
            if text.endswith("[no CI]") and ratio.blocks <= 1:  # one process a side
                text = text.replace("[no CI]", "[one block: no CI]")
            noisy = " (noisy cell)" if ratio.noisy else ""
            sees = (f", sees ±{ratio.detectable:.0%}" if judged.verdict == stats.INCONCLUSIVE
                    and math.isfinite(ratio.detectable) else "")  # fmt: skip
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
    present = list(dict.fromkeys(record.environment for record in results))
    return [label for label in labels if label in present] + [label for label in present if label not in labels]


def environment_table(results: list[RunRecord], labels: tuple[str, ...] = ()) -> pd.DataFrame:
    """One column per environment of the invocation, in its order (environment_order): what it ran on."""
    first = {}
    for record in results:
        first.setdefault(record.environment, record.to_dict())
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
        rows.append({"environment": environment, "device": device, "batch": batch, "model": label,
                     "variant": "eager", "deploy": "none", "first inference s (cold)":
                     _fmt(first.get("eager_first_inference_s"), 1), "first inference s (warm)": "",
                     "latency ms": _fmt(first.get("eager_latency_ms_median"), 2), "speedup": "",
                     "break-even calls (cold / warm)": "", "status": "ok"})  # fmt: skip
        for _, row in group.iterrows():
            ok = row["status"] == "ok"
            rows.append({"environment": environment, "device": device, "batch": batch, "model": label,
                         "variant": row["variant"], "deploy": row.get("deploy") or "jit",
                         "first inference s (cold)": _fmt(row.get("first_inference_s"), 1),
                         "first inference s (warm)": _fmt(row.get("first_inference_s_warm"), 1),
                         "latency ms": _fmt(row["latency_ms_median"], 2) if ok else "",
                         "speedup": _interval(row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"]) if ok
                         else "", "break-even calls (cold / warm)": " / ".join(
                             _fmt(row.get(key), 0) or "never" for key in ("break_even_calls", "break_even_calls_warm")
                         ) if ok else "", "status": row["status"] if ok else f"{row['status']}: "
                         f"{str(row.get('error') or '')[:160]}"})  # fmt: skip
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
        row = {"environment": environment, "device": device, "model": label, "variant": variant,
               "one process serves": serves}  # fmt: skip
        for size in sizes:
            at = runs_[runs_["batch_size"] == size]
            if at.empty:
                row[f"batch {size}: ms (speedup)"] = ""
                continue
            run = at.iloc[0]
            row[f"batch {size}: ms (speedup)"] = (
                f"{_fmt(run['latency_ms_median'])} ({_fmt(run['speedup'])}x)"
                if run["status"] == "ok"
                else run["status"]
            )
        compile_s = runs_["compile_s"].dropna()
        if compile_s.empty:  # no process compiled: nothing to count
            row.update({"graphs": "", "recompiles": "", "compile s in all (cold)": ""})
        else:
            row["graphs"] = _fmt(runs_["serve_graphs"].max(), 0) if serve else _fmt(runs_["graph_count"].sum(), 0)
            row["recompiles"] = _fmt(runs_["serve_recompiles"].max(), 0) if serve else "0"
            row["compile s in all (cold)"] = _fmt(compile_s.median() if serve else compile_s.sum(), 1)
        errors = runs_.loc[runs_["status"] != "ok", "error"].dropna()
        row["status"] = "ok" if errors.empty else str(errors.iloc[0])[:160]
        rows.append(row)
    return pd.DataFrame(rows)


def series_table(steps: list[dict[str, Any]]) -> pd.DataFrame:
    """Per cell of a series of stacks, the first step that changed (compare.series_steps)."""
    return pd.DataFrame(
        [
            {
                "model": step["label"],
                "batch": step["batch_size"],
                "variant": step["variant"],
                "first step that changed": step["step"],
                "metric": step["metric"],
                "B / A": _interval(step["ratio"], step["ci_low"], step["ci_high"], 3),
                "verdict": step["verdict"],
            }
            for step in steps
        ]
    )


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


def render(
    results: list[RunRecord],
    summary: pd.DataFrame,
    verdicts: pd.DataFrame,
    compared: pd.DataFrame,
    published: pd.DataFrame,
    figures: list[Path],
    report_dir: Path,
    run_info: RunInfo,
) -> str:
    """The whole report, section by section (a section with nothing to show is left out)."""
    environments = list(dict.fromkeys(r.environment for r in results))
    lines = [
        *_header_section(results, run_info),
        *_what_changed_section(compared, results),
        *_measured_section(summary),
        *_comparison_section(compared, list(run_info.labels or environments)),
        *_precision_section(list(run_info.targets)),
        *_startup_section(summary),
        *_dynamic_batch_section(summary),
        *_published_section(verdicts),
        *_best_variant_section(verdicts),
        *_anomalies_section(published),
        *_failures_section(results),
        "## Figures",
        "",
    ]
    for figure in figures:
        lines += [f"![{figure.stem}]({os.path.relpath(figure, report_dir)})", ""]
    return "\n".join(lines)


DESCRIPTION_CHARS = 7900  # under MLflow's 8000 for a tag's value


def description(compared: pd.DataFrame, results: list[RunRecord], run_info: RunInfo) -> str:
    """The parent run's description in the MLflow UI (its Overview): what changed, how to list this invocation's
    runs alone in the runs table, and where the whole report is."""
    invocation = run_info.invocation_id
    lines = [
        f"**compilebench** {run_info.parent.get('name', '')}, invocation `{invocation}`.",
        "",
        "This invocation's runs alone: type in the runs table's search box "
        f"``tags.`compilebench.invocation` = '{invocation}'``. On each candidate run, the tags `vs_first/verdict`, "
        "`vs_first/<metric>` say B/A with its 95% CI and the word, and `vs_first/against` names the A it was compared "
        "with. The whole report: this run's artifact `report/report.md`.",
        "",
        *_what_changed_section(compared, results),
    ]
    text = "\n".join(lines)
    return text if len(text) <= DESCRIPTION_CHARS else text[:DESCRIPTION_CHARS] + "\n\n… (cut: see report/report.md)"


def _span(values: set[int]) -> str:
    return str(min(values)) if min(values) == max(values) else f"{min(values)}–{max(values)}"


def _processes_phrase(results: list[RunRecord]) -> str:
    """How many fresh processes timed each run (its own latency and speedup; a cold process's rounds are a block of
    B/A only), and how many compiled each compiled variant on an empty cache (a run's `replicates` counts both, and an
    eager run lists the cold processes of its model's variants)."""
    timed, cold = set(), set()
    for record in results:
        processes = record.process_results
        timed.add(sum(times_own_level(process.kind) for process in processes) if processes else record.replicates)
        if processes and record.compile:
            cold.add(sum(process.cold_compile for process in processes))
    phrase = f"each run timed in {_span(timed)} fresh processes" if timed else "no run timed"
    if cold and max(cold):
        phrase += f", each compiled variant's cold compile in {_span(cold)} (on an empty inductor cache)"
    return phrase


def _header_section(results: list[RunRecord], run_info: RunInfo) -> list[str]:
    """What ran (suite, models, batch sizes, variants, environments), where it is logged, and the environments."""
    suite, scale = (results[0].suite, results[0].scale) if results else (None, None)
    labels = list(dict.fromkeys(r.label for r in results))
    batches = sorted({r.batch_size for r in results})
    variants = list(dict.fromkeys(r.variant for r in results))
    environments = environment_order(results, run_info.labels)
    return [
        "# compilebench report",
        "",
        f"Suite `{suite}` ({scale} scale): {len(labels)} models × batch sizes {batches} "
        f"× variants {variants} in environment(s) {environments}; {_processes_phrase(results)}. MLflow experiment "
        f"`{run_info.experiment}`, "
        f"invocation `{run_info.invocation_id}` (tag `compilebench.invocation` of the parent run).",
        "",
        *([f"**Not logged to MLflow:** {run_info.not_logged}.", ""] if run_info.not_logged else []),
        *(
            [
                f"**Ended early:** {run_info.processes_not_run} of the plan's processes did not run (`window end`): "
                "each run has the processes counted above.",
                "",
            ]
            if run_info.processes_not_run
            else []
        ),
        "## Environment",
        "",
        _table(environment_table(results, run_info.labels)),
        "Weights: "
        + ", ".join(sorted({f"{r.label} {r.weights_source}" for r in results}))
        + ". Random-init weights have the published architecture and input shapes; latency does not depend on "
        "weight values.",
        "",
    ]


def build_of(results: list[RunRecord], label: str) -> str:
    """How an environment's torch was built, as its runs recorded it: `CPU build` or `CUDA 12.8 build`."""
    mine = next((record.environment_fields for record in results if record.environment == label), {})
    cuda = mine.get("cuda_version")
    kind = f"CUDA {cuda} build" if str(cuda).lower() not in ("none", "nan", "") else "CPU build"
    return f"torch {mine.get('torch_version')} ({kind}), transformers {mine.get('transformers_version')}"


def what_changed_table(summary: list[dict[str, Any]]) -> pd.DataFrame:
    """Per compared stack and metric: the suite's verdicts counted, its geometric-mean B/A [95% CI], the cells left
    out of it, and how many flags chance alone would give (compare.suite_summary)."""
    rows = []
    for entry in summary:
        rows.append({
            "B vs A": f"{entry['candidate']} vs {entry['baseline']}",
            "metric": entry["metric"].replace("_", " "),
            "cells": entry["cells"],
            "changed": entry["changed"],
            "equivalent": entry["equivalent"],
            "inconclusive": entry["inconclusive"],
            "suite geomean B/A [95% CI]": _interval(entry["geomean"], entry["ci_low"], entry["ci_high"], 3),
            "over the suite": entry["verdict"],
            "left out": ", ".join(entry["left_out"]) or "none",
            "flags by chance": f"{entry['chance_flags']:.1f}",
        })  # fmt: skip
    return pd.DataFrame(rows)


def _what_changed_section(compared: pd.DataFrame, results: list[RunRecord]) -> list[str]:
    """The answer first: per compared stack, what changed over the suite."""
    if compared.empty:
        return []
    summary = compare.suite_summary(read_comparisons(compared))
    stacks = dict.fromkeys(entry["baseline"] for entry in summary) | dict.fromkeys(e["candidate"] for e in summary)
    return [
        "## What changed",
        "",
        "Per compared stack and metric, over every cell: how many got a direction (`changed`: slower / faster, "
        "higher / lower, more / less), `equivalent` (within the margin) or `inconclusive`; the geometric mean of B/A "
        "over the cells with a ratio on both sides, with its 95% CI and the one word the cells' rule gives it (*over "
        "the suite*: a change of a few percent no single cell resolves can be resolved here), and the cells left out "
        "of it (a cell that failed on one side); and how many `changed` words chance alone would give on equal "
        "stacks (5% of the verdicts with an interval). Eager latency counts the eager cells only, inductor start-up "
        "one cell per model and batch size (every arm of a timing process has its value). Cold compile, where cells "
        "have one cold process a stack and so no interval, gets the suite's interval from the spread of the cells' "
        "B/A (it counts how the cells truly differ as noise too: it errs wide). The stacks: "
        + "; ".join(f"`{label}`: {build_of(results, label)}" for label in stacks)
        + ".",
        "",
        _table(what_changed_table(summary)),
    ]


def _measured_section(summary: pd.DataFrame) -> list[str]:
    """Median ms per batch in the doc's layout (the mean beside it), a table per (environment, device, batch
    size)."""
    lines = ["## Measured, in the doc's layout (median ms per batch; the doc's mean beside it)", ""]
    for (environment, device, batch), _ in summary.groupby(["environment", "device_name", "batch_size"], sort=False):
        lines += [
            f"### {device} (batch size: {batch}), environment `{environment}`",
            "",
            _table(doc_layout(summary, environment, device, int(batch))),
        ]
    return lines


def _comparison_section(compared: pd.DataFrame, series: list[str]) -> list[str]:
    """B against A per cell and metric, and for a series (`compare`'s order, the baseline first) each step."""
    if compared.empty:
        return []
    margin = float(compared["margin"].iloc[0]) if "margin" in compared else math.nan
    calibrated = bool(compared["calibrated"].all()) if "calibrated" in compared else False
    noise = (
        "Intervals pool each cell's blocks with this machine's noise record (paths.calibration: every earlier "
        "comparison and A/A run on it); a cell much noisier than the machine stands alone and is flagged."
        if calibrated
        else "**No noise record of this machine yet**: each cell's interval rests on its own blocks only (wide "
        "with few). Every comparison adds its blocks to the record; `dvc exp run -S 'compare=[current,current]'` "
        "(an A/A run) is a quick start."
    )
    lines = [
        "## Environments compared (interleaved in this invocation)",
        "",
        "B / A per cell from paired blocks (A and B of a cell ran in every block: a block's processes together, "
        "taking turns, where `benchmark.together` is on; a cold block's processes time after their compile): the "
        "mean of the per-block log differences "
        "with its 95% CI; a block run together gives latency's and speedup's difference from its rounds paired by "
        "turn (method `paired blocks, rounds by turn`), each process's median otherwise. Two answers per metric: "
        "*did it change?* (a t-test "
        f"at 5%: slower / faster, higher / lower, more / less) and *does it matter?* against a margin of "
        f"±{margin:.0%} (`equivalent` when the 90% CI lies inside it; `beyond margin` when wholly outside). "
        "The word shown is `equivalent` when it does not matter, the direction when the change is significant, "
        "`inconclusive` otherwise; the headline (`verdict`) is Holm-adjusted across all cells, so an A/A run "
        f"flags a headline in at most 5% of invocations. {noise} An `inconclusive` word says what its blocks "
        "could see: the smallest change (either way) a t-test at 5% finds with 80% power from that interval "
        "(`sees ±12%`); more blocks, or a quieter machine, see less. Compile cold: the first call of a process on "
        "an empty inductor cache, warm: on the cache it left. Changes of compile health come first.",
        "",
        _table(comparison_table(compared)),
    ]
    if len(series) > 2:
        steps = compare.series_steps(read_comparisons(compared), series)
        lines += [
            "### The series, step by step",
            "",
            "Each stack is compared with the one before it too; per cell, the first step whose headline change is "
            "significant and beyond the margin:",
            "",
            _table(series_table(steps)),
        ]
    return lines


def _section(title: str, prose: str, table: pd.DataFrame) -> list[str]:
    """A report section: its heading, what it shows and how to read it, its table."""
    return [f"## {title}", "", prose, "", _table(table)]


def _precision_section(reached: list[dict[str, Any]]) -> list[str]:
    """Per run, the widest interval it reached and the blocks it would still need."""
    if not reached:
        return []
    return _section(
        "Precision reached",
        "Each run got `benchmark.replicates` blocks, then more (widest intervals first) until its 95% CIs met "
        "`benchmark.target`, or `benchmark.budget_min` or `benchmark.max_replicates` ran out. Per run, each "
        "targeted interval's half-width (B/A when stacks are compared; the target in the column's head), the "
        "blocks behind it and, where short, about how many more blocks it needs. Cold compile time gets an "
        "interval from two cold blocks on (`benchmark.cold_replicates`).",
        precision_table(reached),
    )


def _startup_section(summary: pd.DataFrame) -> list[str]:
    """Time to first inference in a fresh process, where a run measured it."""
    if "first_inference_s" not in summary or not summary["first_inference_s"].notna().any():
        return []
    return _section(
        "Start-up: time to first inference in a fresh process",
        "What a restarted or scaled-out service waits before its first answer: interpreter and imports, loading "
        "the checkpoint, then eager's first call, or compiling (building or loading a package) and the first "
        "compiled call. Cold: on an empty inductor cache. Warm: `jit` and `regional` on the local cache a cold "
        "process left; `artifacts` on an empty cache plus the cold process's portable cache artifacts; `aoti` "
        "loading the package the cold process built. Medians over processes; break-even: calls until the "
        "compile time is saved back (never: compiled is not faster).",
        startup_table(summary),
    )


def _dynamic_batch_section(summary: pd.DataFrame) -> list[str]:
    """One compiled model serving every batch size, where a suite has `serve` variants."""
    dynamic = dynamic_batch_table(summary)
    if dynamic.empty:
        return []
    return _section(
        "Dynamic batch: one compiled model serving every batch size",
        "A `serve` variant's every process first calls its one compiled model at each batch size of the suite, "
        "smallest first, as a server meets them, then times its own batch size: graphs and recompiles are "
        "dynamo's own count after serving them all, compile time is the time to the first answer at every size. "
        "`serve-static`: static shapes; `serve-auto`: torch's default (a size that changes becomes dynamic at "
        "the recompile); `serve-dynamic`: the batch dim marked dynamic (sizes 0 and 1 still specialise); "
        "`serve-unbacked`: marked unbacked (no specialisation). Beside them, `default` compiles one static "
        "graph per batch size, in a process per size. Latency: median ms; speedup against eager at that size.",
        dynamic,
    )


def _published_section(verdicts: pd.DataFrame) -> list[str]:
    """Each compiled run against the doc's published speedup, and the count of each verdict."""
    return [
        "## Against the published numbers",
        "",
        "Speedup = median(eager) / median(compiled), pooled over fresh processes, each interleaving eager and "
        "compiled calls; its 95% CI comes from the spread between processes. Published speedup = the doc's eager / "
        "compiled ms (torch 2.0.1 for `default`, the nightly tables for `reduce-overhead`). On the same GPU model the "
        "reference is that GPU's speedup (and absolute ms are compared); on another GPU the median of the published "
        f"GPUs (cross-GPU); `reproduced` when the CI overlaps the reference ±{TOLERANCE:.0%} and is no wider than "
        "that band (`inconclusive` when wider), `better` / `worse` when it lies wholly above / below. A CPU run is "
        "`informational`: the doc measured GPUs only.",
        "",
        _table(verdict_table(verdicts)),
        "Verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts["verdict"].value_counts().items()) + ".",
        "",
    ]


def _best_variant_section(verdicts: pd.DataFrame) -> list[str]:
    """Per model, batch size and device, the fastest variant whose speedup's interval lies above 1."""
    ok = verdicts[verdicts["status"] == "ok"]
    if ok.empty:
        return []
    best = ok.sort_values("speedup", ascending=False).drop_duplicates(["environment", "label", "batch_size",
                                                                       "device_name"])  # fmt: skip
    best = best[best["speedup_ci_low"] > 1.0]
    return [
        "## Best variant per model (significantly faster than eager)",
        "",
        _table(best[["environment", "label", "batch_size", "device_name", "variant", "speedup"]].round(2)),
    ]


def _anomalies_section(published: pd.DataFrame) -> list[str]:
    """The published rows left out of every verdict, and why."""
    flagged = published[published["anomaly"] != ""]
    return [
        "## Anomalies in the published data (excluded from verdicts)",
        "",
        _table(flagged[["scenario", "gpu", "batch_size", "label", "eager_ms", "compiled_ms", "anomaly"]]),
    ]


def _failures_section(results: list[RunRecord]) -> list[str]:
    """Every run that did not end ok, with its status and error."""
    failed = pd.DataFrame(
        [
            {k: getattr(r, k) for k in ("environment", "label", "batch_size", "variant", "status", "error")}
            for r in results
            if r.status != "ok"
        ]
    )
    return ["## Failed or invalid runs", "", _table(failed)]
