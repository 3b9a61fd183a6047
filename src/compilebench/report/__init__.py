"""The run's report in Markdown: what ran where, the doc-layout tables, environments compared, verdicts, failures.

Pure rendering: `render(...)` takes the tables the stages wrote and returns the text of `report.md`, section by
section, one function each, in the order they are read; the tables they show are in `report.tables`.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from compilebench.analysis import compare, stats, suite
from compilebench.analysis.differences import beside_the_question, step_changes, unset
from compilebench.analysis.run_record import RunRecord
from compilebench.records.formats import UNSUPPORTED, times_own_level
from compilebench.reference import TOLERANCE
from compilebench.report.tables import (
    answer_table,
    build_of,
    comparison_table,
    doc_layout,
    dynamic_batch_table,
    environment_order,
    environment_table,
    markdown,
    precision_table,
    read_comparisons,
    series_steps_table,
    series_table,
    speedup_answer_table,
    startup_table,
    verdict_table,
    what_changed_table,
)
from compilebench.run_info import RunInfo


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
    environments = list(dict.fromkeys(r.env.environment for r in results))
    lines = [
        *_header_section(results, run_info),
        *_series_section(compared, list(run_info.labels or environments), results),
        *_answer_section(compared, summary, results),
        *_what_changed_section(compared, results),
        *_environment_section(results, run_info),
        *_measured_section(summary, not compared.empty),
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


VERDICT_METRICS = ("compiled_latency", "speedup", "eager_latency", "compile_cold", "compile_warm", "inductor_startup")


def verdict_lines(compared: pd.DataFrame) -> list[str]:
    """The answer in a few lines, per comparison against the baseline: how many cells' headlines got a direction
    (the first few named with their B/A), then the suite's word per metric, compile beside latency."""
    if compared.empty:
        return []
    read = read_comparisons(compared)
    rows = [row for row in read if row.reference == compare.FIRST]
    over = suite.summary(read)
    lines = []
    for candidate, baseline in dict.fromkeys((row.candidate, row.baseline) for row in rows):
        mine = [row for row in rows if row.candidate == candidate]
        moved = [row for row in mine if row.verdict in suite.DIRECTIONS]
        named = [
            f"{row.label} bs{row.batch_size} {row.variant} {row.headline.replace('_', ' ')} {row.verdict} "
            f"{row.judged[row.headline].ratio.value:.2f}"
            for row in moved[:3]
        ]
        cells = f"{len(moved)} of {len(mine)} cells changed" + (f" ({'; '.join(named)}" if named else "")
        cells += ("; …)" if len(moved) > 3 else ")") if named else ""
        words = {entry["metric"]: entry for entry in over if entry["candidate"] == candidate}
        suite_words = [
            f"{name.replace('_', ' ')} {words[name]['verdict']} {words[name]['geomean']:.2f}"
            for name in VERDICT_METRICS
            if name in words and math.isfinite(words[name]["geomean"])
        ]
        lines.append(f"**{candidate} against {baseline}**: {cells}. Over the suite: {', '.join(suite_words)}.")
    return [*lines, ""]


def description(compared: pd.DataFrame, summary: pd.DataFrame, results: list[RunRecord], run_info: RunInfo) -> str:
    """The parent run's description in the MLflow UI (its Overview): a failed invocation says so first, then the
    answer per model, what changed over the suite (cut to fit MLflow's limit), and last how to list this invocation's
    runs alone and where the whole report is."""
    invocation = run_info.invocation_id
    failed = (
        [
            f"**{len(run_info.failed_runs)} of {len(results)} runs did not end ok**: "
            + "; ".join(run_info.failed_runs[:10])
            + ("; …" if len(run_info.failed_runs) > 10 else "")
            + ".",
            "",
        ]
        if run_info.failed_runs
        else []
    )
    name = run_info.parent.get("name", "")
    head = "\n".join([f"**compilebench** {name}, invocation `{invocation}`.", "", *failed, *verdict_lines(compared)])
    tail = (
        "This invocation's runs alone: ``tags.`compilebench.invocation` = "
        f"'{invocation}'`` in the runs table's search box. On each candidate run, the tags `vs_first/verdict` and "
        "`vs_first/<metric>` give the word and B/A with its 95% CI, and `vs_first/against` names the A it was "
        "compared with. The whole report: this run's artifact `report/report.md`."
    )
    body = [*_answer_section(compared, summary, results, verdicts=False), *_what_changed_section(compared, results)]
    body = "\n".join(body)
    room = DESCRIPTION_CHARS - len(head) - len(tail) - 4
    if len(body) > room:
        body = body[: max(0, room - 40)] + "\n\n… (cut: see report/report.md)"
    return "\n".join([head, body, "", tail])


def _span(values: set[int]) -> str:
    return str(min(values)) if min(values) == max(values) else f"{min(values)}–{max(values)}"


def _processes_phrase(results: list[RunRecord]) -> str:
    """How many fresh processes timed each run (its own latency and speedup; a cold process's rounds are a block of
    B/A only), and how many compiled each compiled variant on an empty cache (a run's `replicates` counts both, and an
    eager run lists the cold processes of its model's variants)."""
    timed, cold = set(), set()
    for record in results:
        processes = record.process_results
        timed.add(
            sum(times_own_level(process.kind) for process in processes) if processes else record.identity.replicates
        )
        if processes and record.cell.compile:
            cold.add(sum(process.cold_compile for process in processes))
    phrase = f"each run timed in {_span(timed)} fresh processes" if timed else "no run timed"
    if cold and max(cold):
        phrase += f", each compiled variant's cold compile in {_span(cold)} (on an empty inductor cache)"
    return phrase


def _header_section(results: list[RunRecord], run_info: RunInfo) -> list[str]:
    """What ran (suite, models, batch sizes, variants, environments), where it is logged, and the environments."""
    suite, scale = (results[0].identity.suite, results[0].identity.scale) if results else (None, None)
    labels = list(dict.fromkeys(r.cell.label for r in results))
    batches = sorted({r.cell.batch_size for r in results})
    variants = list(dict.fromkeys(r.cell.variant for r in results))
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
                f"**Ended early:** {run_info.processes_not_run} of the plan's processes did not run "
                "(`runner.pyz --end`): each run has the processes counted above.",
                "",
            ]
            if run_info.processes_not_run
            else []
        ),
    ]


def _environment_section(results: list[RunRecord], run_info: RunInfo) -> list[str]:
    """What each environment ran on and with, one column each (a field empty in every one named after the table,
    not a row of blanks: a CPU run's GPU fields), and the weights."""
    table = environment_table(results, run_info.labels)
    values = table.drop(columns="field")
    empty = values.map(unset).all(axis=1) & (len(values.columns) > 0)
    blank = table.loc[empty, "field"].tolist()
    return [
        "## Environment",
        "",
        markdown(table.loc[~empty]),
        *([f"None in every environment: {', '.join(blank)}.", ""] if blank else []),
        "Weights: "
        + ", ".join(sorted({f"{r.cell.label} {r.cell.weights_source}" for r in results}))
        + ". Random-init weights have the published architecture and input shapes; latency does not depend on "
        "weight values.",
        "",
    ]


def _answer_section(
    compared: pd.DataFrame, summary: pd.DataFrame, results: list[RunRecord], verdicts: bool = True
) -> list[str]:
    """The answer first: the answer in a few lines (`verdicts`; the description has them above), then per compared
    environment each model's cells with each metric's word and B/A [95% CI], and what B ran with beside the question;
    with one environment, each compiled variant's speedup."""
    if compared.empty:
        if summary.empty:
            return []
        return [
            "## The answer, per model",
            "",
            "Each compiled variant's speedup over eager (eager latency / compiled latency, paired in every timing "
            "process) with its 95% CI and word, its latency (median ms per batch), and its compile time on an empty "
            "inductor cache (cold) and on the cache it left (warm).",
            "",
            markdown(speedup_answer_table(summary)),
        ]
    rows = [row for row in read_comparisons(compared) if row.reference == compare.FIRST]
    pairs = list(dict.fromkeys((row.baseline, row.candidate) for row in rows))
    margin = float(compared["margin"].iloc[0]) if "margin" in compared else math.nan
    lines = [
        "## The answer, per model",
        "",
        *(verdict_lines(compared) if verdicts else []),
        "B / A per cell from paired blocks, the word first: `equivalent` (the 90% CI within "
        f"±{margin:.0%}), a direction (slower / faster, higher / lower, more / less: significant at 5%) or "
        "`inconclusive`, then B/A [95% CI]. Latency below 1 is faster, speedup above 1 is more; how it is judged: "
        "[Environments compared](#environments-compared-interleaved-in-this-invocation).",
        "",
    ]
    for baseline, candidate in pairs:
        beside = beside_the_question(results, baseline, candidate)
        lines += [
            f"`{candidate}` against `{baseline}`."
            + (
                " **Beside the question**, B differs from A in: " + "; ".join(beside) + " — a change may come "
                "from these too."
                if beside
                else ""
            ),
            "",
        ]
    return [*lines, markdown(answer_table(compared))]


def _what_changed_section(compared: pd.DataFrame, results: list[RunRecord]) -> list[str]:
    """The answer first: per compared environment, what changed over the suite."""
    if compared.empty:
        return []
    summary = suite.summary(read_comparisons(compared))
    stacks = dict.fromkeys(entry["baseline"] for entry in summary) | dict.fromkeys(e["candidate"] for e in summary)
    return [
        "## What changed",
        "",
        "Per compared environment and metric, over every cell: how many got a direction (`changed`: slower / faster, "
        "higher / lower, more / less), `equivalent` (within the margin) or `inconclusive`; the geometric mean of B/A "
        "over the cells with a ratio on both sides, with its 95% CI and the one word the cells' rule gives it (*over "
        "the suite*: a change of a few percent no single cell resolves can be resolved here), and the cells left out "
        "of it (a cell that failed on one side); and how many `changed` words chance alone would give on equal "
        "stacks (5% of the verdicts with an interval). Eager latency counts the eager cells only, inductor start-up "
        "one cell per model and batch size (every arm of a timing process has its value). Cold compile, where cells "
        "have one cold process an environment and so no interval, gets the suite's interval from the spread of the "
        "cells' B/A (it counts how the cells truly differ as noise too: it errs wide). The environments: "
        + "; ".join(f"`{label}`: {build_of(results, label)}" for label in stacks)
        + ".",
        "",
        markdown(what_changed_table(summary)),
    ]


def _measured_section(summary: pd.DataFrame, compared: bool = False) -> list[str]:
    """Median ms per batch in the doc's layout (the mean beside it), a table per (environment, device, batch
    size); where environments were compared, a warning that two tables side by side are not their comparison."""
    lines = ["## Measured, in the doc's layout (median ms per batch; the doc's mean beside it)", ""]
    if compared:
        lines += [
            "Two environments' medians side by side are not their comparison: each holds its own processes' "
            "noise, and a 10% gap between them can be `inconclusive` or `equivalent` when paired. The paired B/A "
            "decides: [The answer, per model](#the-answer-per-model).",
            "",
        ]
    for (environment, device, batch), _ in summary.groupby(["environment", "device_name", "batch_size"], sort=False):
        lines += [
            f"### {device} (batch size: {batch}), environment `{environment}`",
            "",
            markdown(doc_layout(summary, environment, device, int(batch))),
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
        markdown(comparison_table(compared)),
    ]
    return lines


def _series_section(compared: pd.DataFrame, series: list[str], results: list[RunRecord]) -> list[str]:
    """A series of three stacks or more (`compare`'s order): what each step changes beside torch, then per cell and
    headline the first step that changed it, or the word across the whole series."""
    if compared.empty or len(series) < 3:
        return []
    history = [
        entry
        for entry in suite.series_steps(read_comparisons(compared), series, over_suite=True)
        if entry.get("over_suite") or entry["metric"] in suite.CELL_SERIES_METRICS
    ]
    words = [step["verdict"] for entry in history for step in entry["steps"]]
    versions = {}
    for record in results:
        versions.setdefault(record.env.environment, str(record.to_dict().get("torch_version", "")))
    changes = {(before, after): step_changes(results, before, after) for before, after in itertools.pairwise(series)}
    changed = [entry for entry in history if entry["first_step"]]
    unsupported = sorted({label for entry in history for label in entry["unsupported_in"]})
    failed = sorted(
        {label for entry in history for label, status in entry["not_measured_in"].items() if status != UNSUPPORTED}
    )
    margin = float(compared["margin"].iloc[0]) if "margin" in compared else math.nan
    lines = [
        "## The series, step by step",
        "",
        f"{len(series)} stacks in order, each against the one before it. {len(changed)} of {len(history)} "
        "(cell, headline) histories changed at some step; of their "
        f"{len(words)} steps {sum(word in suite.DIRECTIONS for word in words)} have a direction, "
        f"{words.count(stats.EQUIVALENT)} are `equivalent`, {words.count(stats.INCONCLUSIVE)} `inconclusive`"
        + (f"; {', '.join(f'`{label}`' for label in unsupported)} cannot run some of them" if unsupported else "")
        + (f"; {', '.join(f'`{label}`' for label in failed)} failed some of them" if failed else "")
        + (
            " (the reasons under *Failed, invalid or unsupported runs*; a step with such a side is not judged, its "
            "word the status)"
            if unsupported or failed
            else ""
        )
        + ". A step changed a headline when its B / A is significant at 5% after Holm's adjustment across all "
        f"cells and steps of that metric, and beyond ±{margin:.0%} (its 95% CI wholly outside); `equivalent` "
        "across the series means every step's 90% CI lay within the margin. Per cell the series answers latency "
        f"and speedup; over the suite (`{suite.SUITE_LABEL}`: each step's geometric mean over the cells both stacks "
        "measured, Holm-adjusted across its steps) every headline, compile time among them: a cell's cold compile "
        "has one process a stack, so its steps are in the comparison table, without an interval. The figure "
        "*series* draws what each stack measured per headline (median, 95% CI), the changed steps ringed, an x where "
        "a stack measured nothing.",
        "",
        markdown(series_steps_table(series, changes, versions)),
        markdown(series_table(history)),
    ]
    return lines


def _section(title: str, prose: str, table: pd.DataFrame) -> list[str]:
    """A report section: its heading, what it shows and how to read it, its table."""
    return [f"## {title}", "", prose, "", markdown(table)]


def _precision_section(reached: list[dict[str, Any]]) -> list[str]:
    """Per run, the widest interval it reached and the blocks it would still need."""
    if not reached:
        return []
    return _section(
        "Precision reached",
        "Each run got `benchmark.replicates` blocks, then more (widest intervals first) until its 95% CIs met "
        "`benchmark.target`, or `budget_min` or `benchmark.max_replicates` ran out. Per run, each "
        "targeted interval's half-width (B/A when environments are compared; the target in the column's head), the "
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
        markdown(verdict_table(verdicts)),
        "Verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts["verdict"].value_counts().items()) + ".",
        "",
    ]


def _best_variant_section(verdicts: pd.DataFrame) -> list[str]:
    """Per model, batch size and device, the fastest variant whose speedup's interval lies above 1."""
    ok = verdicts[verdicts["status"] == "ok"]
    if ok.empty:
        return []
    best = ok.sort_values("speedup", ascending=False).drop_duplicates(
        ["environment", "label", "batch_size", "device_name"]
    )
    best = best[best["speedup_ci_low"] > 1.0]
    return [
        "## Best variant per model (significantly faster than eager)",
        "",
        markdown(best[["environment", "label", "batch_size", "device_name", "variant", "speedup"]].round(2)),
    ]


def _anomalies_section(published: pd.DataFrame) -> list[str]:
    """The published rows left out of every verdict, and why."""
    flagged = published[published["anomaly"] != ""]
    return [
        "## Anomalies in the published data (excluded from verdicts)",
        "",
        markdown(flagged[["scenario", "gpu", "batch_size", "label", "eager_ms", "compiled_ms", "anomaly"]]),
    ]


def _failures_section(results: list[RunRecord]) -> list[str]:
    """Every run that did not end ok, with its status and error (`unsupported`: what its stack cannot run)."""
    failed = pd.DataFrame(
        [
            {
                "environment": r.env.environment,
                "label": r.cell.label,
                "batch_size": r.cell.batch_size,
                "variant": r.cell.variant,
                "status": r.identity.status,
                "error": r.identity.error,
            }
            for r in results
            if r.identity.status != "ok"
        ]
    )
    return ["## Failed, invalid or unsupported runs", "", markdown(failed)]
