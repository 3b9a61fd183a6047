"""Over the suite and the series: what changed per compared environment and metric over every cell (`summary`: the
verdicts counted, the geometric mean of B/A with its 95% CI and its one word), the cells that count once each
(`counted_cells`, `counted_once`), and in a series of stacks the first step that changed per cell (`series_steps`). Pure
functions over `compare.Comparison` rows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from compilebench.analysis import stats
from compilebench.analysis.compare import CELL, FIRST, METRICS, PREVIOUS, Comparison, Metric
from compilebench.records.formats import EAGER, MEASURED_NOTHING, UNSUPPORTED

MIN_ACROSS_CELLS = 3  # cells a suite's interval from their spread needs (2 degrees of freedom)
T = TypeVar("T")  # a compared cell, of whatever kind a caller holds (counted_once)
DIRECTIONS = {word for metric in METRICS for word in (metric.above, metric.below)}
# What a comparison's answer gives per cell and over the suite, in its order: the report's answer table, the metrics
# file and `make experiments` (inductor start-up and compile beside latency).
ANSWERED = (
    "eager_latency",
    "compiled_latency",
    "speedup",
    "compile_cold",
    "compile_warm",
    "inductor_startup",
    "peak_memory",
)


def summary(compared: list[Comparison]) -> list[dict[str, Any]]:
    """What changed, per compared environment (against the baseline) and metric, over the whole suite: how many cells
    got a direction, `equivalent` or `inconclusive`; the geometric mean of B/A over the cells with a ratio on both
    sides, with its 95% CI (the cells' mean log ratios are independent: the variance of their mean is the sum of theirs
    over n², its degrees of freedom by Welch-Satterthwaite; for cold compile, where a cell has one cold process an
    environment and no interval, from the spread of the cells' ratios: `_ratio`) and the one word the cells' rule gives
    it against the margin (`verdict`); the cells left out by name (the suite's geomean moves when a cell fails on one
    side, so they are said); and how many of its verdicts would flag a change by chance alone on equal environments (5%
    of those with an interval, the measured per-verdict rate's target). Each cell counts once (`counted_cells`)."""
    found = []
    rows = [row for row in compared if row.reference == FIRST]
    for candidate in dict.fromkeys(row.candidate for row in rows):
        mine = [row for row in rows if row.candidate == candidate]
        for metric in METRICS:
            judged = counted_cells(mine, metric)
            if not judged:
                continue
            words = [row.judged[metric.name].verdict for row in judged]
            ratio, left_out = _over_cells(judged, metric)
            margin = float(judged[0].margin or 0.05)
            entry = {
                "candidate": candidate,
                "baseline": mine[0].baseline,
                "metric": metric.name,
                "cells": len(judged),
                "changed": sum(word in DIRECTIONS for word in words),
                "equivalent": words.count(stats.EQUIVALENT),
                "inconclusive": words.count(stats.INCONCLUSIVE),
                "left_out": left_out,
                "chance_flags": 0.05 * sum(_finite(row.judged[metric.name].ratio.low) for row in judged),
                "geomean": ratio.value,
                "ci_low": ratio.low,
                "ci_high": ratio.high,
                "verdict": stats.verdict_of(
                    stats.change(ratio, metric.above, metric.below), stats.relevance(ratio, margin)
                ),
            }
            found.append(entry)
    return found


def counted_cells(compared: list[Comparison], metric: Metric) -> list[Comparison]:
    """The rows of one compared environment that count once each for `metric` over the suite (`counted_once`)."""
    judged = [row for row in compared if metric.name in row.judged]
    return counted_once(judged, metric, lambda row: row.variant, lambda row: (row.model_id, row.batch_size))


def counted_once(
    judged: Sequence[T], metric: Metric, variant: Callable[[T], str], timing_process: Callable[[T], Hashable]
) -> list[T]:
    """Of one compared environment's cells that judged `metric` (rows of any kind: `variant` and `timing_process` read
    them), those that count once each: eager latency's eager cells (a compiled cell's eager samples are the same
    processes'), inductor start-up's first compiled cell of each timing process (model and batch size: every arm of
    a timing process has its value), every cell otherwise."""
    if metric.name == "eager_latency" and any(variant(cell) == EAGER for cell in judged):
        return [cell for cell in judged if variant(cell) == EAGER]
    if metric.per_timing_process:
        first: dict[Hashable, T] = {}
        for cell in judged:
            first.setdefault(timing_process(cell), cell)
        return list(first.values())
    return list(judged)


SERIES_METRICS = ("eager_latency", "compiled_latency", "speedup", "compile_warm", "compile_cold")  # a series' headlines
# What a series answers per cell; compile time it answers over the suite (a cell's cold compile has one process a
# stack, no interval; its warm compile's steps rarely reach one that decides), a cell's steps of it in the comparison
# table and `make bisect COMPILE=1`.
CELL_SERIES_METRICS = ("eager_latency", "compiled_latency", "speedup")
QUIET = (stats.EQUIVALENT, stats.INCONCLUSIVE)


SUITE_LABEL = "over the suite"  # a series history of the whole suite: the geometric mean over its cells


def series_steps(compared: list[Comparison], labels: list[str], over_suite: bool = False) -> list[dict[str, Any]]:
    """In a series of stacks (`labels`, in order), per cell and headline metric (SERIES_METRICS): every step (a stack
    against the one before it) judged, and the first step whose change is significant and beyond the margin, the way
    one bisects a regression over releases. With `over_suite`, after the cells' histories one per metric over the
    suite (label SUITE_LABEL, `over_suite` true): each step's geometric mean of B/A over the cells both stacks
    measured (`_ratio`, as `summary` makes it; cold compile's from the cells' spread where a cell has one cold process
    a stack). Each metric's steps are Holm-adjusted across all its cells and steps, the suite's across its steps (a
    family of its own, as `summary`'s word stands beside the cells' in a comparison): a series of equal stacks names a
    step for a metric in at most 5% of invocations among its cells, and in at most 5% over the suite. Where no step
    changed: `across` is `equivalent` when every step was, `inconclusive` otherwise; a step with a side whose run
    measured nothing (`unsupported`, `compile_error`, ...) is said with that status, and the rest of the series goes
    on. Eager latency counts on eager cells (a compiled cell's eager is the same process's)."""
    steps = list(itertools.pairwise(labels))
    position = {step: index for index, step in enumerate(steps)}
    by_step = {
        (row.baseline, row.candidate, *row.cell.values()): row
        for row in compared
        if row.reference == PREVIOUS or row.baseline == labels[0]
    }
    cells = list(dict.fromkeys(tuple(row.cell.values()) for row in compared))
    found, over = [], []
    for metric in (m for m in METRICS if m.name in SERIES_METRICS):
        judged_steps = []  # (cell, step, row) for this metric
        for cell in cells:
            variant = dict(zip(CELL, cell, strict=True))["variant"]
            if (
                metric.name == "eager_latency"
                and variant != EAGER
                and any(dict(zip(CELL, other, strict=True))["variant"] == EAGER for other in cells)
            ):
                continue
            for step in steps:
                row = by_step.get((*step, *cell))
                if row is not None and (metric.name in row.judged or _not_measured(row, step)):
                    judged_steps.append((cell, step, row))
        suite_steps = [(step, _suite_step(judged_steps, metric, step)) for step in steps]
        suite_steps = [(step, entry) for step, entry in suite_steps if entry is not None]
        adjusted = stats.holm(
            [
                row.judged[metric.name].ratio.p_value if metric.name in row.judged else math.nan
                for _, _, row in judged_steps
            ]
        )
        per_cell: dict[tuple, list[dict[str, Any]]] = {}
        for (cell, step, row), p_value in zip(judged_steps, adjusted, strict=True):
            per_cell.setdefault(cell, []).append(_step_entry(row, metric, step, p_value))
        for cell, entries in per_cell.items():
            entries.sort(key=lambda entry: position[tuple(entry["step"].split(" -> "))])
            found.append(_history(dict(zip(CELL, cell, strict=True)), metric.name, entries, len(steps)))
        if suite_steps:
            suite_adjusted = stats.holm([ratio.p_value for _, (ratio, _, _) in suite_steps])
            entries = [
                _suite_step_entry(metric, step, ratio, margin, left_out, p_value)
                for (step, (ratio, margin, left_out)), p_value in zip(suite_steps, suite_adjusted, strict=True)
            ]
            suite_cell = {"model_id": "", "label": SUITE_LABEL, "task": "", "batch_size": "", "variant": "geomean"}
            over.append({**_history(suite_cell, metric.name, entries, len(steps)), "over_suite": True})
    return found + over if over_suite else found


def _suite_step(
    judged_steps: list[tuple[tuple, tuple[str, str], Comparison]], metric: Metric, step: tuple[str, str]
) -> tuple[stats.Ratio, float, list[str]] | None:
    """One step over the suite: the geometric mean of B/A over the cells both stacks measured (each counted once,
    `counted_cells`), the margin, and the cells left out by name; None where no cell has a ratio."""
    rows = counted_cells([row for _, at, row in judged_steps if at == step], metric)
    usable = [row for row in rows if _finite(row.judged[metric.name].ratio.value)]
    if not usable:
        return None
    ratio, left_out = _over_cells(rows, metric)
    return ratio, float(usable[0].margin or 0.05), left_out


def _over_cells(rows: list[Comparison], metric: Metric) -> tuple[stats.Ratio, list[str]]:
    """The geometric mean of `rows`' B/A of `metric` over the cells with a ratio on both sides (`_ratio`), and the
    cells left out by name (the mean moves when a cell fails on one side, so they are said)."""
    usable = [row for row in rows if _finite(row.judged[metric.name].ratio.value)]
    left_out = [f"{row.label} bs{row.batch_size} {row.variant}" for row in rows if row not in usable]
    return _ratio([row.judged[metric.name].ratio for row in usable], metric.own_processes), left_out


def _suite_step_entry(
    metric: Metric, step: tuple[str, str], ratio: stats.Ratio, margin: float, left_out: list[str], p_value: float
) -> dict[str, Any]:
    """One step of the suite's history: its geometric mean B/A, interval and word after the series' Holm adjustment;
    the cells it leaves out (a side measured nothing) under `left_out`."""
    relevance = stats.relevance(ratio, margin)
    changed = stats.change(ratio, metric.above, metric.below)
    if _finite(p_value):
        changed = stats.change_word(ratio.value, p_value, metric.above, metric.below)
    verdict = stats.verdict_of(changed, relevance)
    return {
        "step": " -> ".join(step),
        "ratio": ratio.value,
        "ci_low": ratio.low,
        "ci_high": ratio.high,
        "verdict": verdict,
        "unsupported": [],
        "not_measured": {},
        "left_out": left_out,
        "changed": verdict not in QUIET and relevance == stats.BEYOND_MARGIN,
    }


def _not_measured(row: Comparison, step: tuple[str, str]) -> dict[str, str]:
    """The step's stacks whose run of this cell measured nothing, with its status (`unsupported`, `compile_error`)."""
    statuses = (row.baseline_status, row.candidate_status)
    return {label: status for label, status in zip(step, statuses, strict=True) if status in MEASURED_NOTHING}


def _step_entry(row: Comparison, metric: Metric, step: tuple[str, str], p_value: float) -> dict[str, Any]:
    """One step of one cell and metric: B/A, its interval, the word after the series' Holm adjustment."""
    not_measured = _not_measured(row, step)
    unsupported = [label for label, status in not_measured.items() if status == UNSUPPORTED]
    entry = {
        "step": " -> ".join(step),
        "ratio": math.nan,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "verdict": stats.INCONCLUSIVE,
        "unsupported": unsupported,
        "not_measured": not_measured,
        "changed": False,
    }
    if not_measured:  # unsupported first: what a stack cannot run is said before what failed
        return {**entry, "verdict": UNSUPPORTED if unsupported else next(iter(not_measured.values()))}
    if metric.name not in row.judged:
        return entry
    judged = row.judged[metric.name]
    changed = judged.change
    if _finite(p_value):
        changed = stats.change_word(judged.ratio.value, p_value, metric.above, metric.below)
    verdict = stats.verdict_of(changed, judged.relevance)
    beyond = verdict not in QUIET and judged.relevance == stats.BEYOND_MARGIN
    return {
        **entry,
        "ratio": judged.ratio.value,
        "ci_low": judged.ratio.low,
        "ci_high": judged.ratio.high,
        "verdict": verdict,
        "changed": beyond,
    }


def _history(cell: dict[str, Any], metric: str, entries: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """A cell's metric over the series: its first changed step (or none) and the word across the whole series."""
    first = next((entry for entry in entries if entry["changed"]), None)
    words = [entry["verdict"] for entry in entries]
    if first is not None:
        across = first["verdict"]
    elif words and len(words) == steps and all(word == stats.EQUIVALENT for word in words):
        across = stats.EQUIVALENT
    else:
        across = stats.INCONCLUSIVE
    chosen = first or {"step": "", "ratio": math.nan, "ci_low": math.nan, "ci_high": math.nan, "verdict": across}
    unsupported = sorted({label for entry in entries for label in entry["unsupported"]})
    not_measured = dict(
        sorted({label: status for entry in entries for label, status in entry["not_measured"].items()}.items())
    )
    return {
        **cell,
        "metric": metric,
        "first_step": chosen["step"],
        "ratio": chosen["ratio"],
        "ci_low": chosen["ci_low"],
        "ci_high": chosen["ci_high"],
        "verdict": chosen["verdict"],
        "across": across,
        "unsupported_in": unsupported,
        "not_measured_in": not_measured,
        "steps": entries,
    }


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _ratio(ratios: list[stats.Ratio], own_processes: bool = False) -> stats.Ratio:
    """The geometric mean of the cells' B/A with its intervals: pooled from the cells' own where every cell has one;
    else, for a metric whose cells have processes of their own (cold compile: one cold process a stack leaves a cell
    without an interval) and MIN_ACROSS_CELLS cells, from the spread of the cells' ratios
    (`stats.across_cells_ratio`); else none."""
    if not ratios:
        return stats.Ratio(*(math.nan,) * 6, 0, 0, stats.SINGLE)
    logs = [math.log(ratio.value) for ratio in ratios]
    center = sum(logs) / len(logs)
    if not all(_finite(ratio.dof) and ratio.dof > 0 and _finite(ratio.halfwidth) for ratio in ratios):
        if own_processes and len(ratios) >= MIN_ACROSS_CELLS:
            return stats.across_cells_ratio(logs)
        return stats.Ratio(math.exp(center), *(math.nan,) * 5, len(ratios), 0, stats.SINGLE)
    parts = []  # (variance of each cell's mean log, its degrees of freedom)
    for ratio in ratios:
        dof, halfwidth = ratio.dof, ratio.halfwidth
        parts.append(((halfwidth / stats.t_quantile(0.975, dof)) ** 2, dof))
    variance = sum(part for part, _ in parts) / len(ratios) ** 2
    dof = sum(part for part, _ in parts) ** 2 / sum(part**2 / dof for part, dof in parts) if variance > 0 else 1.0
    return stats.log_mean_ratio(center, math.sqrt(variance), dof, len(ratios))
