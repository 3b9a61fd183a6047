"""A run as MLflow holds it: the params, metrics, tags and artifacts a run record is flattened into (`run_payload`, the
one place), read back (`store_rows`, `stored_run`), and a comparison's B/A logged on its candidate run (`vs_first/`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from compilebench.analysis import compare, keys, suite
from compilebench.analysis.keys import COMPILED_VS_EAGER_TAG
from compilebench.analysis.per_process import ProcessRecord
from compilebench.analysis.run_record import RunRecord
from compilebench.harness import fingerprint
from compilebench.records.formats import MEASURED_NOTHING, UNSUPPORTED

PARAM_KEYS = (
    "model_id",
    "label",
    "task",
    "batch_size",
    "variant",
    "compile",
    "compile_mode",
    "inductor_options",
    "dynamic",
    "fullgraph",
    "deploy",
    "serve_batch_sizes",
    "dtype",
    "variant_dtype",
    "channels_last",
    "scale",
    "suite",
    "environment",
    "environment_name",
    "environment_key",
    "environment_pins",
    "environment_settings",
    "weights_source",
    "config_origin",
    "resolved_revision",
    "image_source",
    "image_sha256",
    "text_source",
    "input_shapes",
    "num_threads",
    "replicates",
    "machine",
    "git_commit",
    "runner_sha256",
    "invocation_id",
    "run_uid",
    "task_check",
    "fell_back_to_eager",
    "latency_ci_method",
    "speedup_ci_method",
    *fingerprint.RUN_FIELDS,
)


TAG_KEYS = (
    "status",
    "label",
    "variant",
    "task",
    "device_name",
    "machine",
    "machine_fingerprint",
    "environment",
    "torch_version",
    "transformers_version",
    "suite",
    "weights_source",
)


RAW_KEYS = (
    "process_results",
    "graph_break_reasons",
    "inductor_counters",
    "environment_freeze",
    "error",
    "recompile_reasons",
    "serve_first_call_s",
)


HEALTH_KEYS = (
    "graph_count",
    "graph_break_count",
    "graph_break_reasons",
    "recompile_count",
    "fell_back_to_eager",
    "inductor_counters",
    "recompile_reasons",
    "serve_batch_sizes",
    "serve_first_call_s",
    "serve_graphs",
    "serve_recompiles",
)


# MLflow's FAILED is for runs that produced no measurement; `invalid` and `accuracy_fail` measured (FINISHED, the
# status as a tag and as `status_code`, so charts and searches can tell them apart)
CRASHED = tuple(status for status in MEASURED_NOTHING if status != UNSUPPORTED)  # unsupported: an answer


STATUS_CODES = {
    "ok": 0,
    "invalid": 1,
    "accuracy_fail": 2,
    "compile_error": 3,
    "error": 4,
    "oom": 5,
    "killed": 6,
    "timeout": 7,
    "crashed": 8,
    "unsupported": 9,
}


REFUSED_IN_KEY = re.compile(r"[^/\w.\- :]")  # characters MLflow refuses in a metric key (on Linux)


def run_payload(record: RunRecord) -> dict[str, Any]:
    """A run as an MLflow run (the one place a run is flattened for MLflow; `store_rows` and `stored_run` read it
    back): name, params, metrics, tags, artifacts, failed flag, uid, its processes' table and window."""
    row, processes = record.to_dict(), list(record.process_results)
    params = {key: row.get(key) for key in PARAM_KEYS}
    params["runner_sha256"] = params["runner_sha256"] or None  # the pipeline's own runs name no runner
    params["process_values"] = json.dumps(compare.process_values(processes))
    metrics = {
        key: value
        for key, value in row.items()
        if key not in PARAM_KEYS
        and key not in RAW_KEYS
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    }
    metrics["status_code"] = STATUS_CODES.get(row["status"], len(STATUS_CODES))
    tags = {key: row.get(key) for key in TAG_KEYS}
    tags["compiled"] = str(row["compile"]).lower()
    tags[COMPILED_VS_EAGER_TAG] = row.get("speedup_verdict")
    artifacts: dict[str, Any] = {"samples.json": row.get("process_results")}
    if row["compile"]:
        artifacts["compile_health.json"] = {key: row.get(key) for key in HEALTH_KEYS}
    if row.get("error"):
        artifacts["error.json"] = {"status": row["status"], "error": row["error"]}
    if row.get("environment_freeze"):
        artifacts["environment/pip-freeze.txt"] = "\n".join(row["environment_freeze"]) + "\n"
    return {
        "name": run_name(row["label"], row["batch_size"], row["variant"], row["environment"]),
        "table": process_table(row, processes),
        "image": {
            "name": f"{row.get('image_source')} image",
            "digest": str(row.get("image_sha256") or "")[:36],
            "source": json.dumps({"image_source": row.get("image_source"), "sha256": row.get("image_sha256")}),
        },
        "params": params,
        "metrics": metrics,
        "tags": tags,
        "artifacts": artifacts,
        "failed": row["status"] in CRASHED,
        "uid": row["run_uid"],
        "window_ms": measured_window_ms(processes),
    }


def store_rows(frame: Any) -> list[dict[str, Any]]:
    """Runs read back from the store (`search_children`: params.*, metrics.*, tags.* columns) as flat rows, typed as
    `run_payload` wrote them where a table needs it: batch size, compile and fullgraph, each process's values."""
    rows = []
    for _, run in frame.iterrows():
        row: dict[str, Any] = {}
        for column, value in run.items():
            for prefix in ("params.", "metrics."):
                if column.startswith(prefix) and not (isinstance(value, float) and value != value):
                    row[column.removeprefix(prefix)] = value
        row["status"] = run.get("tags.status")
        row["start_time"] = run.get("start_time")
        row["batch_size"] = int(row["batch_size"])
        row["compile"] = str(row.get("compile")).lower() == "true"
        row["fullgraph"] = str(row.get("fullgraph")).lower() == "true"
        row["process_values"] = json.loads(row.get("process_values") or "{}")
        rows.append(row)
    return rows


def stored_run(row: dict[str, Any]) -> compare.ComparedRun:
    """A run read back from the store (a `store_rows` row) as a comparison reads it: its processes are there as their
    values by block (an older store's lists, by position: they cannot be paired)."""
    stored = row.get("process_values") or {}
    values = {
        metric.name: dict(found) if isinstance(found, dict) else {f"p{i}": v for i, v in enumerate(found)}
        for metric in compare.METRICS
        for found in [stored.get(metric.name, {})]
    }
    fell_back = row.get("fell_back_to_eager")  # a param: MLflow keeps its text
    return compare.ComparedRun(
        model_id=row["model_id"],
        label=row.get("label", ""),
        task=row.get("task", ""),
        batch_size=row["batch_size"],
        variant=row["variant"],
        environment=row["environment"],
        environment_key=row.get("environment_key", ""),
        run_uid=row.get("run_uid"),
        invocation_id=row.get("invocation_id"),
        status=row["status"],
        compile=row["compile"],
        values=values,
        fullgraph=row["fullgraph"],
        graph_count=row.get("graph_count"),
        graph_break_count=row.get("graph_break_count"),
        recompile_count=row.get("recompile_count"),
        fell_back_to_eager=None if fell_back in (None, "None") else str(fell_back).lower() == "true",
        torch_version=row.get("torch_version"),
        transformers_version=row.get("transformers_version"),
        machine_fingerprint=row.get("machine_fingerprint"),
        device=row.get("device"),
        device_name=row.get("device_name"),
        machine=row.get("machine"),
    )


def measured_window_ms(processes: list[ProcessRecord]) -> tuple[int, int] | None:
    """When a run measured, as MLflow's start and end times (ms): from its first process's start to its last
    process's end (the launcher's clock), so that the UI's Duration is the measurement's, not the moment of logging;
    None for a run without timed processes."""
    spans = [(p.started_at, p.started_at + p.wall_s) for p in processes if p.started_at > 0]
    if not spans:
        return None
    return int(min(start for start, _ in spans) * 1000), int(max(end for _, end in spans) * 1000)


PROCESS_TABLE = "processes.json"  # every process of a run, one row each: mlflow.load_table(PROCESS_TABLE, ...)


TABLE_COLUMNS = (
    "trial_id",
    "block",
    "kind",
    "replicate",
    "cache",
    "cold_compile",
    "status",
    "disturbed",
    "compile_disturbed",
    "wall_s",
    "compile_s",
    "compile_position",
    "eager_ms_median",
    "compiled_ms_median",
    "speedup",
    "speedup_of_means",
    "pair_cv",
    "halves_ratio",
    "peak_mem_mib",
    "warmup_s",
    "slot",
    "machine_fingerprint",
    "omp_num_threads",
)


def process_table(row: dict[str, Any], processes: list[ProcessRecord]) -> dict[str, list]:
    """A run's processes as an MLflow table (columns of equal length), with the run's identity on every row, so that
    the tables of every run of the experiment read back as one (`mlflow.load_table(..., extra_columns=["run_id"])`)."""
    identity = {key: [row.get(key)] * len(processes) for key in ("environment", "model_id", "batch_size", "variant")}
    return {**identity, **{column: [getattr(p, column) for p in processes] for column in TABLE_COLUMNS}}


VERDICT_CODES = {"equivalent": 0, "inconclusive": 2}  # the direction of a change: -1 below (B less), +1 above


def verdict_code(word: str, metric: compare.Metric) -> int:
    """A (cell, metric) verdict as a number MLflow's charts can plot: -1 B below A, 0 equivalent, +1 above, 2
    inconclusive."""
    if word in VERDICT_CODES:
        return VERDICT_CODES[word]
    return 1 if word == metric.above else -1


def verdict_word(code: int, metric: compare.Metric) -> str:
    """A verdict code (`verdict_code`) as its word again."""
    words = {value: word for word, value in VERDICT_CODES.items()}
    return words.get(code) or (metric.above if code == 1 else metric.below if code == -1 else str(code))


def compared_metrics(row: compare.Comparison) -> dict[str, dict[str, Any]]:
    """The metrics a comparison judged (not an eager cell's speedup), each with its B/A and 95% CI bounds (NaN
    where missing), its verdict word and code."""
    found = {}
    for name, judged in row.judged.items():
        code = verdict_code(judged.verdict, compare.METRIC_BY_NAME[name])
        found[name] = {
            "ratio": judged.ratio.value,
            "ci_low": judged.ratio.low,
            "ci_high": judged.ratio.high,
            "verdict": judged.verdict,
            "verdict_code": code,
        }
    return found


def comparison_metrics(row: compare.Comparison) -> dict[str, float]:
    """A comparison's B/A results as metrics of the candidate run: `vs_first/` (or `vs_previous/` in a series) the
    ratio, its 95% CI bounds and the verdict code per metric, the headline's verdict code."""
    metrics: dict[str, float] = {}
    for name, values in compared_metrics(row).items():
        for key in (*keys.RATIO_FIELDS, "verdict_code"):
            metrics[keys.compared_key(row.reference, keys.column(name, key))] = values[key]
    metrics[keys.compared_key(row.reference, "verdict_code")] = verdict_code(
        row.verdict, compare.METRIC_BY_NAME[row.headline]
    )
    return metrics


def ratio_text(row: compare.Comparison, metric: str) -> str:
    """A metric's B/A and its 95% CI as a person reads it: 'B/A 1.053 [1.010, 1.098]' (no CI: '[no CI]')."""
    judged = row.judged.get(metric)
    if judged is None or not math.isfinite(judged.ratio.value):
        return "B/A unmeasured"
    ratio, low, high = judged.ratio.value, judged.ratio.low, judged.ratio.high
    finite = all(math.isfinite(v) for v in (low, high))
    return f"B/A {ratio:.3f} " + (f"[{low:.3f}, {high:.3f}]" if finite else "[no CI]")


def run_name(label: str, batch_size: int, variant: str, environment: str, verdict: str | None = None) -> str:
    """A run's name in the MLflow UI: on a candidate run its comparison's headline word first, then what (model,
    variant, batch size) and where (environment): `equivalent · ResNet default · bs1 · torch-2.14.1`. MLflow's Run
    Name column shows about 24 characters at its default width: the word and the model stay in view (ordered by name,
    a comparison's B runs group by word)."""
    return (f"{verdict} · " if verdict else "") + f"{label} {variant} · bs{batch_size} · {environment}"


RAW_MEDIANS = {"compiled_latency": "latency_ms_median", "eager_latency": "eager_latency_ms_median"}  # a run's metrics


def candidate_note(row: compare.Comparison, a_metrics: dict[str, float], b_metrics: dict[str, float]) -> str:
    """A B run's description (markdown the UI shows on its page): its row of the comparison in words, each judged
    metric's word and B/A; and, where a latency's raw medians (A's run against B's) moved beyond the margin while its
    paired word is not a direction, a line saying so: MLflow's Compare lays those medians side by side."""
    headline = row.headline.replace("_", " ")
    lines = [
        f"**{row.verdict}**: {row.label} bs{row.batch_size} {row.variant}, {row.candidate} against {row.baseline} "
        f"({headline} {ratio_text(row, row.headline)}; margin ±{row.margin:.0%}).",
        "",
        "| metric | word | B/A [95% CI] |",
        "|---|---|---|",
    ]
    lines += [
        f"| {name.replace('_', ' ')} | {judged.verdict} | {ratio_text(row, name).removeprefix('B/A ')} |"
        for name, judged in row.judged.items()
    ]
    for name, median in RAW_MEDIANS.items():
        judged, a, b = row.judged.get(name), a_metrics.get(median), b_metrics.get(median)
        if judged is None or not a or not b or not all(map(math.isfinite, (a, b))):
            continue
        if abs(b / a - 1) > row.margin and judged.verdict not in suite.DIRECTIONS:
            lines += [
                "",
                f"The raw medians of {name.replace('_', ' ')} moved {b / a - 1:+.1%} ({a:.2f} → {b:.2f} ms), beyond "
                f"the margin, but the paired B/A says `{judged.verdict}`: each median pools processes that ran fast "
                "or slow as a whole, and A's and B's ran apart; the paired B/A compares them block by block. Read "
                "the word, not the medians.",
            ]
    return "\n".join(lines)


def comparison_tags(row: compare.Comparison) -> dict[str, str]:
    """A comparison's words as tags of the candidate run, beside comparison_metrics' codes: per metric
    `vs_first/<metric>` 'slower B/A 1.053 [1.010, 1.098]' (the word first: a narrow column still shows it),
    `vs_first/verdict` the headline's word with its B/A, and
    `vs_first/against` the stack and run it was compared with (the A of this comparison, not of another one), and
    `vs_first/beside_the_question` what B ran with that no pin or setting asked for, where it differs."""
    key = lambda name: keys.compared_key(row.reference, name)  # noqa: E731
    tags = {key(name): f"{judged.verdict} {ratio_text(row, name)}" for name, judged in row.judged.items()}
    tags[key("verdict")] = f"{row.verdict} ({row.headline.replace('_', ' ')} {ratio_text(row, row.headline)})"
    tags[key("against")] = f"{row.baseline} ({row.baseline_versions}), run {row.baseline_run_uid}"
    beside = row.extra.get("beside_the_question")
    if isinstance(beside, str) and beside:  # what B differs in that no pin or setting asked for
        tags[key("beside_the_question")] = beside
    return tags
