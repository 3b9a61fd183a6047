"""Environments compared: B against A per (model, batch size, variant) and metric, from paired blocks; noise learnt.

For each metric a run's processes each give one value (a median latency, a speedup, a compile time, a peak memory).
Inside one invocation A and B of a cell run in every block (a timing block's processes together, taking turns; a cold
block's one after the other, in a balanced order), so B / A is the
mean of the per-block log differences, with a t-interval whose variance pools the cell's blocks with the cell's noise
record on this machine (`machine_noise`: what every earlier comparison and A/A run of that cell on this machine and
device measured, as a sum of squares with its degrees of freedom, never a maximum). Per cell, not per machine: on a
2-core VM the spread of SegFormer's speedup was six times ResNet-50's, and one pooled variance would make the one
too sure and the other too shy. A cell an F-test finds much noisier than its record stands on its own blocks and is
flagged. Rows of separate invocations cannot be paired: Welch's t, labelled so.

Each (cell, metric) gets two answers: did it change (`{metric}_change`, a t-test at 5%) and does it matter
(`{metric}_relevance` against the user's margin: `equivalent`, `beyond margin`, `undecided`), and one word
(`{metric}_verdict`). The headline per row (`verdict`) uses Holm-adjusted p-values across the invocation's rows, so a
comparison of many cells does not flag one by chance. With three or more stacks (a series, e.g. successive torch
releases) each is compared with the first and with the previous one, and `series_steps` names the first step whose
change is significant and beyond the margin. Changes of compile health (a status that differs, graph breaks gained or
lost, a fall-back to eager, recompiles) are listed first: they matter more than a few percent.
Pure functions over result rows (RunRecord dicts).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compilebench.analysis.runs import ProcessRecord
from compilebench.harness import stats
from compilebench.harness.records import EAGER, STATUS_OK, RecordError

CALIBRATION_VERSION = 2  # 1 held a margin (the largest A/A deviation): not used any more
CellNoise = dict[str, dict[str, stats.Noise]]  # cell_key -> metric -> noise of its paired differences
FIRST, PREVIOUS = "first", "previous"  # what a row compares B with: the baseline, or the stack before it in a series


@dataclass(frozen=True)
class Metric:
    """One compared quantity: its name, the words for B above / below A, and which width target applies."""

    name: str
    above: str
    below: str
    target: str | None  # key of benchmark.target (latency | speedup | compile), None: no target
    compiled_only: bool = False


METRICS = (
    Metric("eager_latency", "slower", "faster", "latency"),
    Metric("compiled_latency", "slower", "faster", "latency", compiled_only=True),
    Metric("speedup", "higher", "lower", "speedup", compiled_only=True),
    Metric("compile_cold", "slower", "faster", "compile", compiled_only=True),
    Metric("compile_warm", "slower", "faster", "compile", compiled_only=True),
    Metric("inductor_startup", "slower", "faster", None, compiled_only=True),  # a timing process's, before its arms
    Metric("peak_memory", "more", "less", None),
)
METRIC_BY_NAME = {metric.name: metric for metric in METRICS}
CELL = ("model_id", "label", "task", "batch_size", "variant")


def process_values(row: dict[str, Any], metric: str) -> dict[str, float]:
    """One value per measured, undisturbed process of a run for `metric`, by block (empty where there is none), from
    its `process_results` (runs.ProcessRecord, which also reads older rows). A row read back from MLflow carries them
    as `process_values` (older stores: a list, which cannot be paired)."""
    if metric not in METRIC_BY_NAME:
        raise ValueError(f"unknown metric {metric!r}; known: {list(METRIC_BY_NAME)}")
    if row.get("process_values"):
        stored = row["process_values"].get(metric, {})
        return dict(stored) if isinstance(stored, dict) else {f"p{i}": v for i, v in enumerate(stored)}
    processes = [ProcessRecord.from_dict(p, i) for i, p in enumerate(row.get("process_results") or ())]
    if metric in ("compile_cold", "compile_warm"):  # left out when the machine was busy while it compiled
        cold = metric == "compile_cold"
        return {p.block: p.compile_s for p in processes if p.compile_s and p.cold_compile is cold
                and not p.compile_disturbed}  # fmt: skip
    clean = [p for p in processes if not p.disturbed]  # ... while it timed
    field_of = {"eager_latency": "eager_ms_median", "compiled_latency": "compiled_ms_median", "speedup": "speedup",
                "peak_memory": "peak_mem_mib", "inductor_startup": "inductor_startup_s"}  # fmt: skip
    values = {p.block: getattr(p, field_of[metric]) for p in clean}
    return {block: value for block, value in values.items() if value}


def health_changes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What changed in how the model compiles, B against A (empty when nothing did)."""
    changes = []
    if a["status"] != b["status"]:
        changes.append(f"status {a['status']} -> {b['status']}")
    if not b.get("compile"):
        return changes
    if a.get("fullgraph") and (a["status"] == STATUS_OK) != (b["status"] == STATUS_OK):
        changes.append(f"fullgraph {'passes' if b['status'] == STATUS_OK else 'fails'} now")
    for key, what in (("graph_break_count", "graph breaks"), ("recompile_count", "recompiles"),
                      ("graph_count", "graphs")):  # fmt: skip
        before, after = a.get(key), b.get(key)
        if before is not None and after is not None and before == before and after == after and before != after:
            changes.append(f"{what} {int(before)} -> {int(after)}")
    if bool(a.get("fell_back_to_eager")) != bool(b.get("fell_back_to_eager")):
        changes.append("falls back to eager" if b.get("fell_back_to_eager") else "no longer falls back to eager")
    return changes


def cell_key(row: dict[str, Any]) -> str:
    """A cell in a noise record: model, batch size and variant (what one row of a comparison is about)."""
    return f"{row['model_id']}|bs{row['batch_size']}|{row['variant']}"


def ratio_of(a: dict[str, Any], b: dict[str, Any], metric: str, noise: stats.Noise | None) -> stats.Ratio:
    """B / A for one metric: paired by block inside one invocation, Welch's t across invocations."""
    va, vb = process_values(a, metric), process_values(b, metric)
    common = [block for block in va if block in vb]
    if a.get("invocation_id") == b.get("invocation_id") and common:
        return stats.paired_ratio([va[k] for k in common], [vb[k] for k in common], noise)
    return stats.welch_ratio(list(va.values()), list(vb.values()))


def compare_pair(
    a: dict[str, Any], b: dict[str, Any], noise: CellNoise | None, margin: float, reference: str = FIRST
) -> dict[str, Any]:
    """One row: B against A for each metric (ratio, 95% and 90% CIs, p, both answers, one word), health changes;
    `noise`: the machine's record (the cell's own entry is used)."""
    known = (noise or {}).get(cell_key(a), {})
    row: dict[str, Any] = {key: a.get(key) for key in CELL}
    row.update(
        baseline=a["environment"],
        candidate=b["environment"],
        baseline_run_uid=a.get("run_uid"),
        candidate_run_uid=b.get("run_uid"),
        reference=reference,
        baseline_versions=f"torch {a.get('torch_version')} / transformers {a.get('transformers_version')}",
        candidate_versions=f"torch {b.get('torch_version')} / transformers {b.get('transformers_version')}",
        baseline_status=a["status"],
        candidate_status=b["status"],
        health_change="; ".join(health_changes(a, b)),
        interleaved=a.get("invocation_id") == b.get("invocation_id"),
        calibrated=bool(known),
        margin=margin,
    )
    for metric in METRICS:
        if metric.compiled_only and not a.get("compile"):
            continue
        ratio = ratio_of(a, b, metric.name, known.get(metric.name))
        changed, relevant = stats.change(ratio, metric.above, metric.below), stats.relevance(ratio, margin)
        row.update(
            {
                f"{metric.name}_ratio": ratio.value,
                f"{metric.name}_ci_low": ratio.low,
                f"{metric.name}_ci_high": ratio.high,
                f"{metric.name}_ci90_low": ratio.low90,
                f"{metric.name}_ci90_high": ratio.high90,
                f"{metric.name}_halfwidth": ratio.halfwidth,
                f"{metric.name}_detectable": ratio.detectable,
                f"{metric.name}_p": ratio.p_value,
                f"{metric.name}_blocks": ratio.blocks,
                f"{metric.name}_dof": ratio.dof,
                f"{metric.name}_method": ratio.method,
                f"{metric.name}_noise": ratio.noise,
                f"{metric.name}_noisy": ratio.noisy,
                f"{metric.name}_cell_ss": ratio.cell_noise.ss,
                f"{metric.name}_cell_dof": ratio.cell_noise.dof,
                f"{metric.name}_change": changed,
                f"{metric.name}_relevance": relevant,
                f"{metric.name}_verdict": stats.verdict_of(changed, relevant),
            }
        )
    row["headline"] = headline_metric(row)
    row["verdict"] = row[f"{row['headline']}_verdict"]
    return row


def headline_metric(row: dict[str, Any]) -> str:
    """What a row's one-word answer is about: compiled latency for a compiled variant, eager latency for eager."""
    return "compiled_latency" if "compiled_latency_ratio" in row else "eager_latency"


def adjust_headlines(compared: list[dict[str, Any]]) -> None:
    """Holm-adjust the headline p-values across `compared` (in place): each row's `verdict` then says "changed"
    only where it holds for the family, so the headline flags nothing by chance in more than 5% of invocations."""
    adjusted = stats.holm([row[f"{row['headline']}_p"] for row in compared])
    for row, p_value in zip(compared, adjusted, strict=True):
        metric = METRIC_BY_NAME[row["headline"]]
        changed = stats.change_word(row[f"{metric.name}_ratio"], p_value, metric.above, metric.below)
        row.update(p_adjusted=p_value, verdict=stats.verdict_of(changed, row[f"{metric.name}_relevance"]))


def comparison_rows(
    rows: list[dict[str, Any]],
    noise: CellNoise | None,
    labels: list[str] | None = None,
    margin: float = 0.05,
) -> list[dict[str, Any]]:
    """Every environment against the first of `labels` (the baseline: `compare`'s first) and, in a series of three
    or more, against the one before it; per (model, batch size, variant), compile-health changes first."""
    labels = labels or list(dict.fromkeys(row["environment"] for row in rows))
    if len(labels) < 2:
        return []
    pairs = [(labels[0], label, FIRST) for label in labels[1:]]
    pairs += [(before, after, PREVIOUS) for before, after in itertools.pairwise(labels[1:])]
    by_cell: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_cell.setdefault(tuple(row[key] for key in CELL), {})[row["environment"]] = row
    compared = [
        compare_pair(cell[a], cell[b], noise, margin, reference)
        for cell in by_cell.values()
        for a, b, reference in pairs
        if a in cell and b in cell
    ]
    adjust_headlines(compared)
    compared.sort(
        key=lambda row: (row["health_change"] == "", row["reference"] != FIRST, row["variant"] == EAGER, row["label"],
                         row["batch_size"])
    )  # fmt: skip
    return compared


def series_steps(compared: list[dict[str, Any]], labels: list[str]) -> list[dict[str, Any]]:
    """In a series of stacks, per cell: the first step (a stack against the one before it) whose headline change is
    significant and beyond the margin, the way one bisects a regression over releases; none when no step is."""
    steps = list(itertools.pairwise(labels))
    by_step = {(row["baseline"], row["candidate"], *(row[k] for k in CELL)): row for row in compared
               if row["reference"] == PREVIOUS or row["baseline"] == labels[0]}  # fmt: skip
    found = []
    for cell in dict.fromkeys(tuple(row[k] for k in CELL) for row in compared):
        for before, after in steps:
            row = by_step.get((before, after, *cell))
            if row is None:
                continue
            headline = row["headline"]
            if row["verdict"] not in (stats.EQUIVALENT, stats.INCONCLUSIVE) and (
                row[f"{headline}_relevance"] == stats.BEYOND_MARGIN
            ):
                found.append({**dict(zip(CELL, cell, strict=True)), "step": f"{before} -> {after}",
                              "metric": headline, "ratio": row[f"{headline}_ratio"],
                              "ci_low": row[f"{headline}_ci_low"], "ci_high": row[f"{headline}_ci_high"],
                              "verdict": row["verdict"]})  # fmt: skip
                break
    return found


def is_aa(rows: list[dict[str, Any]]) -> bool:
    """Whether the environments compared are one and the same stack (an A/A calibration)."""
    keys = {row["environment_key"] for row in rows}
    return len({row["environment"] for row in rows}) >= 2 and len(keys) == 1


def noise_measured(compared: list[dict[str, Any]]) -> CellNoise:
    """What this invocation adds to the machine's noise record, per cell and metric: its paired blocks against the
    baseline (their spread around the cell's own mean, so a real difference adds nothing), leaving out cells with a
    run that is not ok (an `invalid` one included) and metrics the F-test found noisier than the cell's record."""
    measured: CellNoise = {}
    for row in compared:
        if row["reference"] != FIRST or row["baseline_status"] != STATUS_OK or row["candidate_status"] != STATUS_OK:
            continue
        for metric in METRICS:
            if row.get(f"{metric.name}_method") != stats.PAIRED or row.get(f"{metric.name}_noisy"):
                continue
            cell = stats.Noise(float(row[f"{metric.name}_cell_ss"]), int(row[f"{metric.name}_cell_dof"]))
            if cell.dof:
                per_cell = measured.setdefault(cell_key(row), {})
                per_cell[metric.name] = per_cell.get(metric.name, stats.Noise()) + cell
    return measured


def load_calibrations(path: str | Path) -> dict[str, Any]:
    """Every machine's noise record in paths.calibration, by machine fingerprint and device ({} before the first).
    A file that is not such a record (cut short, edited, another file) raises RecordError naming it and what is wrong:
    it is never read as empty, which would write a fresh record over it."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordError(f"{path}: the noise record is not JSON ({error}); mend or delete it (paths.calibration)"
                          ) from None  # fmt: skip
    problem = None
    if not isinstance(found, dict):
        problem = f"a JSON object by machine is expected, got {type(found).__name__}"
    else:
        for key, record in found.items():
            if not isinstance(record, dict) or not isinstance(record.get("invocations", {}), dict):
                problem = f"the record of {key!r} is not an object with `invocations`"
                break
            bad = [name for name, entry in record.get("invocations", {}).items()
                   if not isinstance(entry, dict) or not isinstance(entry.get("noise", {}), dict)]  # fmt: skip
            if bad:
                problem = f"the record of {key!r} has invocations without a `noise` object: {bad[:3]}"
                break
    if problem:
        raise RecordError(f"{path}: not a noise record: {problem}; mend or delete it (paths.calibration)")
    return found


def calibration_key(row: dict[str, Any]) -> str:
    """Noise records hold per machine (its fingerprint) and device."""
    return f"{row.get('machine_fingerprint')}|{row.get('device')}"


def machine_noise(record: dict[str, Any] | None, leave_out: str | None = None) -> CellNoise:
    """A machine's noise per cell and metric from its record in paths.calibration: the sum over every invocation
    that measured the cell, except `leave_out` (the invocation being judged, which must not count its blocks twice).
    An older record (version 1, a margin) holds no variance and gives nothing."""
    if not record or record.get("version") != CALIBRATION_VERSION:
        return {}
    total: CellNoise = {}
    for invocation, entry in record.get("invocations", {}).items():
        if invocation == leave_out:
            continue
        for cell, metrics in entry["noise"].items():
            per_cell = total.setdefault(cell, {})
            for metric, (ss, dof) in metrics.items():
                per_cell[metric] = per_cell.get(metric, stats.Noise()) + stats.Noise(float(ss), int(dof))
    return total


def record_noise(record: dict[str, Any] | None, invocation: str, measured: CellNoise, about: dict) -> dict[str, Any]:
    """The machine's record with this invocation's contribution set (replacing an earlier one of the same
    invocation: judging it again adds nothing twice); older records are started afresh."""
    if not record or record.get("version") != CALIBRATION_VERSION:
        record = {"version": CALIBRATION_VERSION, "invocations": {}}
    invocations = dict(record["invocations"])
    noise = {cell: {m: [n.ss, n.dof] for m, n in metrics.items()} for cell, metrics in measured.items()}
    invocations[invocation] = {**about, "noise": noise}
    return {**record, "invocations": invocations}


def pooled_by_metric(noise: CellNoise) -> dict[str, stats.Noise]:
    """A record summed over its cells, per metric (what a log line or a power estimate reports)."""
    total: dict[str, stats.Noise] = {}
    for metrics in noise.values():
        for metric, value in metrics.items():
            total[metric] = total.get(metric, stats.Noise()) + value
    return total


def flagged(compared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with a verdict of a difference (not equivalent or inconclusive) in any metric."""
    quiet = (stats.EQUIVALENT, stats.INCONCLUSIVE)
    return [row for row in compared if any(row.get(f"{m.name}_verdict") not in (None, *quiet) for m in METRICS)]


DIRECTIONS = {word for metric in METRICS for word in (metric.above, metric.below)}


def suite_summary(compared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What changed, per compared stack (against the baseline) and metric, over the whole suite: how many cells got a
    direction, `equivalent` or `inconclusive`; the geometric mean of B/A over the cells with a ratio on both sides,
    with its 95% CI (the cells' mean log ratios are independent: the variance of their mean is the sum of theirs over
    n², its degrees of freedom by Welch-Satterthwaite) and the one word the cells' rule gives it against the margin
    (`verdict`); the cells left out by name (the suite's geomean moves when a cell fails on one side, so they are
    said); and how many of its verdicts would flag a change by chance alone on equal stacks (5% of those with an
    interval, the measured per-verdict rate's target). Eager latency counts the eager cells only: a compiled cell's
    eager samples are the same processes'."""
    found = []
    rows = [row for row in compared if row["reference"] == FIRST]
    for candidate in dict.fromkeys(row["candidate"] for row in rows):
        mine = [row for row in rows if row["candidate"] == candidate]
        for metric in METRICS:
            judged = [row for row in mine if isinstance(row.get(f"{metric.name}_verdict"), str)]  # a CSV's: NaN
            if metric.name == "eager_latency" and any(row["variant"] == EAGER for row in judged):
                judged = [row for row in judged if row["variant"] == EAGER]
            if not judged:
                continue
            words = [str(row[f"{metric.name}_verdict"]) for row in judged]
            usable = [row for row in judged if _finite(row.get(f"{metric.name}_ratio"))]
            left_out = [f"{row['label']} bs{row['batch_size']} {row['variant']}" for row in judged if row not in usable]
            ratio = _suite_ratio(usable, metric.name)
            margin = float(judged[0].get("margin") or 0.05)
            entry = {"candidate": candidate, "baseline": mine[0]["baseline"], "metric": metric.name,
                     "cells": len(judged), "changed": sum(word in DIRECTIONS for word in words),
                     "equivalent": words.count(stats.EQUIVALENT), "inconclusive": words.count(stats.INCONCLUSIVE),
                     "left_out": left_out,
                     "chance_flags": 0.05 * sum(_finite(row.get(f"{metric.name}_ci_low")) for row in judged),
                     "geomean": ratio.value, "ci_low": ratio.low, "ci_high": ratio.high,
                     "verdict": stats.verdict_of(stats.change(ratio, metric.above, metric.below),
                                                 stats.relevance(ratio, margin))}  # fmt: skip
            found.append(entry)
    return found


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _suite_ratio(rows: list[dict[str, Any]], metric: str) -> stats.Ratio:
    """The geometric mean of the rows' B/A with its intervals (no interval unless every row has one)."""
    if not rows:
        return stats.Ratio(*(math.nan,) * 6, 0, 0, stats.SINGLE)
    logs = [math.log(row[f"{metric}_ratio"]) for row in rows]
    center = sum(logs) / len(logs)
    parts = []  # (variance of each row's mean log, its degrees of freedom)
    for row in rows:
        dof, halfwidth = row.get(f"{metric}_dof"), row.get(f"{metric}_halfwidth")
        if not (_finite(dof) and dof > 0 and _finite(halfwidth)):
            return stats.Ratio(math.exp(center), *(math.nan,) * 5, len(rows), 0, stats.SINGLE)
        parts.append(((halfwidth / stats.t_quantile(0.975, dof)) ** 2, dof))
    variance = sum(part for part, _ in parts) / len(rows) ** 2
    dof = sum(part for part, _ in parts) ** 2 / sum(part**2 / dof for part, dof in parts) if variance > 0 else 1.0
    return stats.log_mean_ratio(center, math.sqrt(variance), dof, len(rows))
