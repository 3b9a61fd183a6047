"""Environments compared: B against A per (model, batch size, variant), from per-process values; A/A calibration.

For each metric a run's processes each give one value (a median latency, a speedup, a compile time, a peak memory);
the B/A ratio and its 95% interval come from those values (`stats.ratio_estimate`). A verdict needs the interval to
clear a margin delta: the largest B/A deviation an A/A calibration (the same environment compared with itself,
interleaved, on this machine) showed for that metric. Changes of compile health (a status that differs, graph
breaks gained or lost, a fall-back to eager, recompiles) are listed first: they matter more than a few percent.
Pure functions over result rows (RunRecord dicts).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from compilebench import stats
from compilebench.records import CACHE_COLD, CACHE_SHARED, EAGER, STATUS_OK

CALIBRATION_VERSION = 1


@dataclass(frozen=True)
class Metric:
    """One compared quantity: its name, how a process gives it, and the words for B above / below A."""

    name: str
    above: str
    below: str
    compiled_only: bool = False


METRICS = (
    Metric("eager_latency", "slower", "faster"),
    Metric("compiled_latency", "slower", "faster", compiled_only=True),
    Metric("speedup", "higher", "lower", compiled_only=True),
    Metric("compile_cold", "slower", "faster", compiled_only=True),
    Metric("compile_warm", "slower", "faster", compiled_only=True),
    Metric("peak_memory", "more", "less"),
)
CELL = ("model_id", "label", "task", "batch_size", "variant")


def process_values(row: dict[str, Any], metric: str) -> list[float]:
    """One value per measured process of a run for `metric` (empty where the run has none); a row read back
    from MLflow carries them as `process_values`."""
    if row.get("process_values"):
        return list(row["process_values"].get(metric, []))
    processes = [p for p in row.get("process_results") or () if p.get("eager_ms")]
    compiled = [p for p in processes if p.get("compiled_ms")]
    if metric == "eager_latency":
        return [statistics.median(p["eager_ms"]) for p in processes]
    if metric == "compiled_latency":
        return [statistics.median(p["compiled_ms"]) for p in compiled]
    if metric == "speedup":
        return [statistics.median(p["eager_ms"]) / statistics.median(p["compiled_ms"]) for p in compiled]
    if metric in ("compile_cold", "compile_warm"):
        cold = metric == "compile_cold"
        return [p["compile_s"] for p in compiled if _cold_compile(p) is cold and p.get("compile_s")]
    if metric == "peak_memory":
        return [p["peak_mem_mib"] for p in processes if p.get("peak_mem_mib")]
    raise ValueError(f"unknown metric {metric!r}; known: {[m.name for m in METRICS]}")


def _cold_compile(process: dict[str, Any]) -> bool:
    """runs.compiled_cold as the process row recorded it; rows written before it was recorded go by their cache."""
    return process.get("cold_compile", process["cache"] in (CACHE_COLD, CACHE_SHARED))


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


def compare_pair(a: dict[str, Any], b: dict[str, Any], deltas: dict[str, float] | None) -> dict[str, Any]:
    """One row: B against A for each metric, with intervals and verdicts, and the compile-health changes."""
    row: dict[str, Any] = {key: a.get(key) for key in CELL}
    row.update(
        baseline=a["environment"],
        candidate=b["environment"],
        baseline_versions=f"torch {a.get('torch_version')} / transformers {a.get('transformers_version')}",
        candidate_versions=f"torch {b.get('torch_version')} / transformers {b.get('transformers_version')}",
        baseline_status=a["status"],
        candidate_status=b["status"],
        health_change="; ".join(health_changes(a, b)),
        interleaved=a.get("invocation_id") == b.get("invocation_id"),
        calibrated=deltas is not None,
    )
    for metric in METRICS:
        if metric.compiled_only and not a.get("compile"):
            continue
        estimate = stats.ratio_estimate(process_values(a, metric.name), process_values(b, metric.name))
        delta = deltas.get(metric.name) if deltas else None
        row.update(
            {
                f"{metric.name}_ratio": estimate.value,
                f"{metric.name}_ci_low": estimate.low,
                f"{metric.name}_ci_high": estimate.high,
                f"{metric.name}_processes": estimate.processes,
                f"{metric.name}_delta": delta,
                f"{metric.name}_verdict": stats.calibrated_verdict(estimate, delta, metric.above, metric.below),
            }
        )
    headline = "compiled_latency" if a.get("compile") else "eager_latency"
    row["verdict"] = row[f"{headline}_verdict"]
    return row


def comparison_rows(
    rows: list[dict[str, Any]], deltas: dict[str, float] | None, labels: list[str] | None = None
) -> list[dict[str, Any]]:
    """Every environment against the first of `labels` (the baseline: `compare`'s first), per (model, batch size,
    variant), compile-health changes first."""
    labels = labels or list(dict.fromkeys(row["environment"] for row in rows))
    if len(labels) < 2:
        return []
    baseline, by_cell = labels[0], {}
    for row in rows:
        by_cell.setdefault(tuple(row[key] for key in CELL), {})[row["environment"]] = row
    compared = []
    for cell in by_cell.values():
        if baseline not in cell:
            continue
        for label in labels[1:]:
            if label in cell:
                compared.append(compare_pair(cell[baseline], cell[label], deltas))
    compared.sort(
        key=lambda row: (row["health_change"] == "", row["variant"] == EAGER, row["label"], row["batch_size"])
    )
    return compared


def is_aa(rows: list[dict[str, Any]]) -> bool:
    """Whether the environments compared are one and the same stack (an A/A calibration)."""
    keys = {row["environment_key"] for row in rows}
    return len({row["environment"] for row in rows}) >= 2 and len(keys) == 1


def calibration(compared: list[dict[str, Any]]) -> dict[str, float]:
    """The margins an A/A comparison sets, per metric: the largest |log ratio| any of its cells showed."""
    return {
        metric.name: stats.calibration_delta([row.get(f"{metric.name}_ratio") for row in compared])
        for metric in METRICS
        if any(row.get(f"{metric.name}_ratio") is not None for row in compared)
    }


def calibration_key(row: dict[str, Any]) -> str:
    """Calibrations hold per machine (its fingerprint) and device."""
    return f"{row.get('machine_fingerprint')}|{row.get('device')}"


def flagged(compared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with a verdict of a difference (not equivalent or inconclusive) in any metric."""
    quiet = (stats.EQUIVALENT, stats.INCONCLUSIVE)
    return [row for row in compared if any(row.get(f"{m.name}_verdict") not in (None, *quiet) for m in METRICS)]
