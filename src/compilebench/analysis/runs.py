"""From trial results to runs: one `RunRecord` per (environment, model, batch size, variant), its processes pooled.

A compiled run's processes are its trials: cold ones (cold compile time, compile health, peak memory, then steady-state
samples), and timing processes' arms or paired trials (steady-state samples paired with eager's from the same rounds,
warm compile time). The eager run of (environment, model, batch size) pools each process's eager samples once: a timing
process's eager arm and every paired trial (a cold process's rounds are a block of B/A only). Each process becomes a
`ProcessRecord` (per_process.py: what it measured and what follows from its samples, derived once), held in its run and
read there by compare (`ComparedRun.of`), tracking and the report. A run is flattened only by `to_dict` (a line of
runs.jsonl) and read back by `from_dict`. Statistics come from `stats` (a process's own from harness/sample_stats.py):
latencies and speedup with a between-process interval, compile time cold and warm, memory as the median over processes.
A run is `ok` only when every one of its processes is; otherwise it carries the worst failure's status and says which
process. Pure functions over typed records; the tests feed them hand-made results. The run's schema (`RunRecord`,
its reader and writer) is in run_record.py.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from compilebench.analysis import stats
from compilebench.analysis.per_process import compiled_cold, first_inference_s, process_record
from compilebench.analysis.run_record import EnvironmentInfo, ModelInfo, RunRecord
from compilebench.analysis.validity import (
    compile_disturbed,
    is_disturbed,
    machine_problems,
    median_of,
    process_cv,
    undisturbed,
    validity_problems,
)
from compilebench.harness import fingerprint, sample_stats
from compilebench.records.formats import (
    EAGER,
    ENDED_FROM_OUTSIDE,
    KIND_ARM,
    KIND_COLD,
    STATUS_OK,
    CompileHealth,
    TrialResult,
    TrialSpec,
    memory_before_timing,
    times_own_level,
)
from compilebench.records.invocation import Context

FAILURE_ORDER = ("crashed", "killed", "oom", "timeout", "compile_error", "error", "accuracy_fail")


def run_uid(invocation_id: str, spec: TrialSpec, variant: str) -> str:
    """The id of a run in its invocation: the same on every resume and sync, so it is logged once."""
    return f"{invocation_id}/{spec.environment}/{spec.model.model_id}/bs{spec.batch_size}/{variant}"


def _failures(results: list[TrialResult]) -> list[TrialResult]:
    """The processes whose failure is the run's: every one not ok, except those ended from outside where another
    process of the run was not (their block ran again)."""
    others = any(result.status not in ENDED_FROM_OUTSIDE for result in results)
    return [
        result
        for result in results
        if result.status != STATUS_OK and not (result.status in ENDED_FROM_OUTSIDE and others)
    ]


def _run_status(results: list[TrialResult]) -> tuple[str, str | None]:
    """ok only when every process is (see _failures); else the worst failure, naming the process."""
    failed = _failures(results)
    if not failed:
        return STATUS_OK, None
    worst = min(failed, key=lambda r: FAILURE_ORDER.index(r.status) if r.status in FAILURE_ORDER else 99)
    others = f" (and {len(failed) - 1} more process(es) not ok)" if len(failed) > 1 else ""
    return worst.status, f"{worst.trial_id}: {worst.error}{others}"


def _identity(spec: TrialSpec, environment: EnvironmentInfo, model: ModelInfo, context: Context) -> dict[str, Any]:
    variant = spec.variant
    return {
        "invocation_id": context.invocation_id,
        "suite": context.suite,
        "scale": context.scale,
        "environment": environment.label,
        "environment_name": environment.name,
        "environment_key": environment.key,
        "environment_pins": json.dumps(environment.pins, sort_keys=True),
        "environment_settings": json.dumps(environment.settings, sort_keys=True),
        "environment_freeze": environment.freeze,
        "model_id": spec.model.model_id,
        "label": spec.model.label,
        "task": spec.model.task,
        "batch_size": spec.batch_size,
        "dtype": spec.timing.dtype,
        "weights_source": model.weights_source,
        "config_origin": model.config_origin,
        "param_count": model.param_count,
        "resolved_revision": model.resolved_revision,
        "image_source": context.image_source,
        "image_sha256": context.image_sha256,
        "machine": context.machine,
        "git_commit": context.git_commit,
        "runner_sha256": context.runner_sha256,
        "compile": variant.compile,
        "compile_mode": variant.mode if variant.compile else "none",
        "inductor_options": json.dumps(variant.inductor, sort_keys=True),
        "dynamic": variant.dynamic,
        "fullgraph": variant.fullgraph,
        "channels_last": variant.channels_last,
        "deploy": variant.deploy if variant.compile else "none",
    }


def _measured_facts(results: list[TrialResult]) -> dict[str, Any]:
    """What every process of a run saw alike (the environment, threads, inputs), and its start-up and load times."""
    measured = [result for result in results if result.environment]
    if not measured:
        return {}
    first = measured[0]
    return {
        "environment_fields": {key: first.environment.get(key, "") for key in fingerprint.RUN_FIELDS},
        "num_threads": first.num_threads,
        "text_source": first.text_source,
        "input_shapes": json.dumps(first.input_shapes),
        "startup_s": median_of([result.startup_s for result in measured]),
        "load_s": median_of([result.load_s for result in measured]),
    }


def _latency_fields(samples: list[list[float]], batch_size: int) -> dict[str, Any]:
    pooled = [value for process in samples for value in process]
    summary = sample_stats.summarize_ms(pooled)
    median = stats.median_estimate(samples)
    summary.pop("count")
    return {
        **summary,
        "count": len(pooled),
        "process_cv": median_of([sample_stats.summarize_ms(s).get("robust_cv") for s in samples]),
        "latency_ms_median_ci_low": median.low,
        "latency_ms_median_ci_high": median.high,
        "latency_ci_method": median.method,
        "throughput_img_s": sample_stats.throughput_img_s(summary["latency_ms_median"], batch_size),
    }


def compiled_run(
    trials: list[tuple[TrialSpec, TrialResult]], environment: EnvironmentInfo, model: ModelInfo, context: Context
) -> RunRecord:
    """One compiled run from its processes: latency and speedup from those that timed it (paired with eager's samples
    of the same rounds), compile time cold and warm, memory where the variant was the only compiled model loaded (a
    cold process, a paired trial), compile health first from a cold process (which ran inductor's
    passes, not the cache)."""
    trials = sorted(trials, key=lambda t: (t[0].kind != KIND_COLD, t[0].replicate))
    spec = trials[0][0]
    results = [result for _, result in trials]
    status, error = _run_status(results)
    variant_dtype = spec.variant.dtype or spec.timing.dtype
    timed = [
        (s, r)
        for s, r in trials
        if times_own_level(s.kind) and r.compiled_ms and r.eager_ms and len(r.compiled_ms) == len(r.eager_ms)
    ]
    measured, disturbed_problems = undisturbed(timed, context.validity)
    clean = [
        (s, r)
        for s, r in trials
        if memory_before_timing(s.kind) or not is_disturbed(r, context.validity.disturbed_cores)
    ]
    machines, mixed_problems = machine_problems(results)
    compiled = [
        (s, r)
        for s, r in trials
        if r.compile_s is not None
        and r.status in (STATUS_OK, "accuracy_fail")
        and not compile_disturbed(r, context.validity.disturbed_cores)
    ]
    record: dict[str, Any] = {
        **_identity(spec, environment, model, context),
        **_measured_facts(results),
        "run_uid": run_uid(context.invocation_id, spec, spec.variant.name),
        "variant": spec.variant.name,
        "variant_dtype": next((r.variant_dtype for r in results if r.variant_dtype), variant_dtype),
        "status": status,
        "error": error,
        "replicates": len(trials),
        "processes": len(measured),
        "disturbed_processes": sum(is_disturbed(r, context.validity.disturbed_cores) for _, r in trials),
        "machines": machines,
        "process_results": tuple(process_record(s, r, context) for s, r in trials),
        **_compile_and_memory_fields(compiled, clean),
        **_correctness_fields([r for _, r in compiled if r.max_abs_diff is not None]),
    }
    if measured:
        record.update(_speedup_fields(spec, measured, record))
        if status == STATUS_OK:
            spread = validity_problems([r for _, r in measured], context.validity, compiled=True)
            problems = mixed_problems + disturbed_problems + spread
            record["pair_cv"] = median_of([process_cv(r, compiled=True) for _, r in measured])
            if problems:
                record.update(status="invalid", error="; ".join(problems))
    elif status == STATUS_OK and not timed:
        record.update(status="error", error="no process timed this variant: every timing trial failed or was left out")
    record.update(_health_fields([r.health for r in results if r.health is not None]))
    record.update(_serve_fields(spec, trials))
    return RunRecord.of(record)


def _compile_and_memory_fields(
    compiled: list[tuple[TrialSpec, TrialResult]], clean: list[tuple[TrialSpec, TrialResult]]
) -> dict[str, Any]:
    """Compile time and first inference, cold and warm, from the processes whose compile was not disturbed; memory
    from the undisturbed ones."""
    cold_results = [r for s, r in compiled if compiled_cold(s, r)]
    warm_results = [r for s, r in compiled if not compiled_cold(s, r)]
    return {
        "compile_s": median_of([r.compile_s for r in cold_results]),
        "compile_s_warm": median_of([r.compile_s for r in warm_results]),
        "first_inference_s": median_of([first_inference_s(r, r.compile_s) for r in cold_results]),
        "first_inference_s_warm": median_of(
            [first_inference_s(r, r.compile_s + (r.inductor_startup_s or 0.0)) for r in warm_results]
        ),
        "peak_mem_mib": median_of([r.peak_mem_mib for _, r in clean]),
        "mem_delta_mib": median_of([r.mem_delta_mib for _, r in clean]),
        "compile_peak_mem_mib": median_of([r.compile_peak_mem_mib for _, r in clean]),
        "reserved_mem_mib": median_of([r.reserved_mem_mib for _, r in clean]),
    }


def _correctness_fields(checked: list[TrialResult]) -> dict[str, Any]:
    """The worst output difference against eager over the processes that checked it, and the task's agreement."""
    if not checked:
        return {}
    return {
        "max_abs_diff": max(r.max_abs_diff for r in checked),
        "max_rel_diff": max(r.max_rel_diff for r in checked),
        "task_check": checked[0].task_check,
        "task_agreement": min(r.task_agreement for r in checked if r.task_agreement is not None),
        "warmup_calls": checked[0].warmup_calls,
    }


def _speedup_fields(
    spec: TrialSpec, measured: list[tuple[TrialSpec, TrialResult]], record: dict[str, Any]
) -> dict[str, Any]:
    """Latency, eager's latency from the same rounds, the paired speedup with its interval and verdict, and the calls
    a compile takes to pay for itself (cold and warm: `record` holds the compile times)."""
    samples = [list(r.compiled_ms) for _, r in measured]
    eager = [list(r.eager_ms) for _, r in measured]
    fields = _latency_fields(samples, spec.batch_size)
    paired = sample_stats.summarize_ms([value for process in eager for value in process])
    speedup = stats.speedup_estimate(list(zip(eager, samples, strict=True)))
    eager_median, compiled_median = paired["latency_ms_median"], fields["latency_ms_median"]
    fields.update(
        eager_latency_ms_mean=paired["latency_ms_mean"],
        eager_latency_ms_median=eager_median,
        eager_cv=paired["cv"],
        speedup=speedup.value,
        speedup_ci_low=speedup.low,
        speedup_ci_high=speedup.high,
        speedup_ci_method=speedup.method,
        speedup_verdict=stats.verdict(speedup.low, speedup.high) if speedup.has_interval else None,
        improvement_pct=sample_stats.improvement_pct(paired["latency_ms_mean"], fields["latency_ms_mean"]),
        eager_first_inference_s=median_of([first_inference_s(r, r.eager_first_call_s) for _, r in measured]),
    )
    for key, compile_s in (
        ("break_even_calls", record["compile_s"]),
        ("break_even_calls_warm", record["compile_s_warm"]),
    ):
        if compile_s is not None:
            fields[key] = sample_stats.break_even_calls(compile_s, eager_median, compiled_median)
    return fields


def _health_fields(healths: list[CompileHealth]) -> dict[str, Any]:
    """Graphs, breaks and recompiles over the processes (the worst), their reasons, and a cold process's counters."""
    if not healths:
        return {}
    return {
        "graph_count": max(h.graph_count for h in healths),
        "graph_break_count": max(h.graph_break_count for h in healths),
        "graph_break_reasons": tuple(dict.fromkeys(reason for h in healths for reason in h.graph_break_reasons)),
        "recompile_count": max(h.recompile_count for h in healths),
        "fell_back_to_eager": any(h.fell_back_to_eager for h in healths),
        "inductor_counters": healths[0].inductor_counters,
        "recompile_reasons": tuple(dict.fromkeys(reason for h in healths for reason in h.recompile_reasons)),
    }


def _serve_fields(spec: TrialSpec, trials: list[tuple[TrialSpec, TrialResult]]) -> dict[str, Any]:
    """A dynamic-batch run: the batch sizes it served, each one's first call cold, its graphs and recompiles."""
    fields: dict[str, Any] = {}
    if spec.serve_batch_sizes:  # what it was to serve, also when no process got through
        fields["serve_batch_sizes"] = ",".join(str(size) for size in spec.serve_batch_sizes)
    served = [(s, r) for s, r in trials if r.serve_graph_counts]
    if served:
        cold = [r for s, r in served if compiled_cold(s, r)]
        fields.update(
            serve_first_call_s=tuple(
                median_of([r.serve_first_call_s[i] for r in cold]) for i in range(len(spec.serve_batch_sizes))
            ),
            serve_graphs=max(r.serve_graph_counts[-1] for _, r in served),
            serve_recompiles=max(r.serve_graph_counts[-1] - r.serve_graph_counts[0] for _, r in served),
        )
    return fields


def eager_processes(trials: list[tuple[TrialSpec, TrialResult]]) -> list[tuple[TrialSpec, TrialResult]]:
    """The processes of a model's trials as the eager run counts them, each once: a timing process through its eager
    arm (its compiled arms carry the same eager samples), paired trials and cold processes themselves."""
    return [(s, r) for s, r in trials if s.kind != KIND_ARM or not s.variant.compile]


def eager_run(
    trials: list[tuple[TrialSpec, TrialResult]], environment: EnvironmentInfo, model: ModelInfo, context: Context
) -> RunRecord:
    """The eager run of one (environment, model, batch size): every process's eager samples, first call and memory.
    Judged by its latency's spread only in an eager-only suite (beside a compiled variant, the ratio is judged)."""
    eager_alone = not any(spec.variant.compile for spec, _ in trials)
    trials = eager_processes(trials)
    spec = trials[0][0]
    results = [result for _, result in trials]
    measured, disturbed_problems = undisturbed(
        [(s, r) for s, r in trials if r.eager_ms and times_own_level(s.kind)], context.validity
    )
    load_failures = [r for r in _failures(results) if r.eager_first_call_s is None]
    status, error = _run_status(load_failures) if load_failures else (STATUS_OK, None)
    machines, mixed_problems = machine_problems(results)
    if status == STATUS_OK and not measured:
        status, error = "error", "no process timed eager: every trial failed before its eager timing"
    record: dict[str, Any] = {
        **_identity(spec, environment, model, context),
        **_measured_facts(results),
        "compile": False,
        "compile_mode": "none",
        "inductor_options": "{}",
        "dynamic": None,
        "fullgraph": False,
        "channels_last": False,
        "deploy": "none",
        "run_uid": run_uid(context.invocation_id, spec, EAGER),
        "variant": EAGER,
        "variant_dtype": spec.timing.dtype,
        "status": status,
        "error": error,
        "replicates": len(trials),
        "processes": len(measured),
        "disturbed_processes": sum(is_disturbed(r, context.validity.disturbed_cores) for _, r in trials),
        "machines": machines,
        "process_results": tuple(process_record(s, r, context, eager_run=True) for s, r in trials),
        "first_call_s": median_of([r.eager_first_call_s for r in results]),
        "first_inference_s": median_of([first_inference_s(r, r.eager_first_call_s) for r in results]),
        "peak_mem_mib": median_of([r.eager_peak_mem_mib for r in results]),
        "mem_delta_mib": median_of([r.eager_mem_delta_mib for r in results]),
        "eager_peak_mem_mib": median_of([r.eager_peak_mem_mib for r in results]),
        "warmup_calls": spec.timing.warmup_iters,
    }
    if measured:
        record.update(_latency_fields([list(r.eager_ms) for _, r in measured], spec.batch_size))
        if status == STATUS_OK:  # beside a compiled variant, the ratio is judged (compiled_run), not eager's spread
            measured_results = [r for _, r in measured]
            spread = validity_problems(measured_results, context.validity, compiled=False) if eager_alone else []
            judged = disturbed_problems + spread if eager_alone else []
            problems = mixed_problems + judged
            if problems:
                record.update(status="invalid", error="; ".join(problems))
    return RunRecord.of(record)


def run_records(
    trials: list[TrialSpec],
    results: dict[str, TrialResult],
    environments: dict[str, EnvironmentInfo],
    models: dict[str, ModelInfo],
    context: Context,
) -> list[RunRecord]:
    """Every run of an invocation whose trials all have results: per (environment, model, batch), eager first."""
    by_model: dict[tuple, list[tuple[TrialSpec, TrialResult]]] = defaultdict(list)
    by_run: dict[tuple, list[tuple[TrialSpec, TrialResult]]] = defaultdict(list)
    for spec in trials:
        result = results.get(spec.trial_id)
        key = (spec.environment, spec.model.model_id, spec.batch_size)
        by_model[key].append((spec, result))
        by_run[spec.run_key].append((spec, result))
    records = []
    for key, model_trials in by_model.items():
        if any(result is None for _, result in model_trials):
            continue  # not complete yet
        environment, model = environments[key[0]], models[key[1]]
        records.append(eager_run(model_trials, environment, model, context))
        for run_key, run_trials in by_run.items():
            if run_key[:3] == key and run_trials[0][0].variant.compile:
                records.append(
                    compiled_run(sorted(run_trials, key=lambda t: t[0].replicate), environment, model, context)
                )
    return records
