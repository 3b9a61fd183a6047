"""From trial results to runs, on hand-made results: statistics over processes, cold and warm compiles, status."""

from dataclasses import replace

import pytest

from compilebench import runs, stats
from compilebench.records import CompileHealth, ModelSpec, TimingSpec, TrialResult, TrialSpec, VariantSpec

MODEL = ModelSpec("org/m", "M", "image-classification", "X", "ckpt")
DEFAULT = VariantSpec("default")
CONTEXT = runs.Context("inv", "s", "full", "vm", "abc", "embedded-fallback", "00", min_iters=5, min_time_s=0.1,
                       max_cv=0.25)  # fmt: skip
ENVIRONMENT = {"current": runs.EnvironmentInfo("current", "current", "k1", {"torch": "2.13.0"}, ("torch==2.13.0",))}
MODELS = {"org/m": runs.ModelInfo("random-init", "card:m.yaml", 1000)}


def _spec(replicate, cache, variant=DEFAULT):
    return TrialSpec(f"current/org--m/bs2/{variant.name}/r{replicate}", "current", MODEL, 2, variant, replicate,
                     cache, "i.jpg", TimingSpec())  # fmt: skip


def _result(spec, eager, compiled, compile_s, status="ok", **extra):
    return TrialResult(spec.trial_id, status, environment={"device": "cpu", "device_name": "cpu-x",
                       "torch_version": "2.13.0"}, eager_ms=tuple(eager), compiled_ms=tuple(compiled),
                       compile_s=compile_s, timed_s=1.0, eager_first_call_s=0.5, peak_mem_mib=100.0 + compile_s,
                       eager_peak_mem_mib=90.0, max_abs_diff=1e-6, max_rel_diff=1e-7, task_agreement=1.0,
                       health=CompileHealth(graph_count=1), **extra)  # fmt: skip


def _records(results):
    specs = [spec for spec, _ in results]
    return {r.variant: r for r in runs.run_records(specs, {s.trial_id: r for s, r in results}, ENVIRONMENT, MODELS,
                                                   CONTEXT)}  # fmt: skip


def _three(eager=(10.0, 12.0, 11.0)):
    specs = [_spec(0, "cold"), _spec(1, "warm"), _spec(2, "warm")]
    return [
        (spec, _result(spec, [e] * 6, [5.0] * 6, compile_s))
        for spec, e, compile_s in zip(specs, eager, (20.0, 3.0, 4.0), strict=True)
    ]


def test_a_compiled_run_pools_its_processes():
    records = _records(_three())
    compiled, eager = records["default"], records["eager"]
    assert compiled.status == "ok" and compiled.processes == 3 and compiled.replicates == 3
    assert compiled.speedup == pytest.approx((2.0 * 2.4 * 2.2) ** (1 / 3))
    assert (
        compiled.speedup_ci_method == stats.BETWEEN and compiled.speedup_ci_low < 2.0 < 2.4 < compiled.speedup_ci_high
    )
    assert compiled.compile_s == 20.0 and compiled.compile_s_warm == 3.5  # cold: the empty cache; warm: median
    assert compiled.break_even_calls == pytest.approx(20.0 * 1000 / (11.0 - 5.0))
    assert compiled.peak_mem_mib == 104.0  # median over processes
    assert eager.count == 18 and eager.latency_ms_median == 11.0 and eager.compile is False
    assert [p["cache"] for p in compiled.process_results] == ["cold", "warm", "warm"]
    assert compiled.environment_freeze == ("torch==2.13.0",) and compiled.run_uid.endswith("bs2/default")


def test_a_shared_cache_process_is_warm_when_every_graph_came_from_the_cache():
    """On the H100 (shared cache, the launcher's way) the first process of ResNet-50 compiled in 12.6 s and the
    second, all FX-graph cache hits, in 3.5 s: reporting their mean as the cold compile mixed the two."""
    specs = [_spec(0, "shared"), _spec(1, "shared")]
    counters = ({"fxgraph_cache_miss": 1}, {"fxgraph_cache_hit": 1, "async_compile_cache_hit": 24})
    results = [
        (spec, replace(_result(spec, [10.0] * 6, [5.0] * 6, compile_s), health=CompileHealth(1, inductor_counters=c)))
        for spec, compile_s, c in zip(specs, (12.6, 3.5), counters, strict=True)
    ]
    compiled = _records(results)["default"]
    assert compiled.compile_s == 12.6 and compiled.compile_s_warm == 3.5
    assert [p["cold_compile"] for p in compiled.process_results] == [True, False]  # what compare reads
    mixed = {"fxgraph_cache_hit": 1, "fxgraph_cache_miss": 1}  # one graph of two compiled: still a cold compile
    assert runs.compiled_cold(specs[1], replace(results[1][1], health=CompileHealth(2, inductor_counters=mixed)))


def test_one_failed_process_fails_the_run_and_names_it():
    results = _three()
    spec = results[2][0]
    results[2] = (spec, TrialResult.failed(spec.trial_id, "crashed", "signal 11"))
    compiled = _records(results)["default"]
    assert compiled.status == "crashed" and spec.trial_id in compiled.error and compiled.processes == 2


def test_validity_is_judged_on_the_per_pair_ratio():
    """Eager and compiled moving together in level shifts (a busy host at batch 1): each arm's latency is wide, the
    per-pair ratio is steady, and the speedup is what the verdict uses: valid. A ratio that jumps: invalid."""
    specs = [_spec(0, "cold"), _spec(1, "warm")]
    shifts = [1.0, 5.0, 1.0, 5.0, 1.0, 5.0]  # robust cv of each arm far above 0.25
    together = _records([(s, _result(s, [10 * x for x in shifts], [5 * x for x in shifts], 1.0)) for s in specs])
    assert together["default"].status == "ok" and together["default"].pair_cv == 0.0
    assert together["default"].process_cv > 0.25  # latency cv is reported, not gating
    apart = _records([(s, _result(s, [10.0] * 6, [5 * x for x in shifts], 1.0)) for s in specs])["default"]
    assert apart.status == "invalid" and "per-pair ratio" in apart.error and "benchmark.max_cv" in apart.error


def test_a_disturbed_process_is_recorded_and_left_out():
    context = replace(CONTEXT, disturbed_cores=0.25)
    results = _three()
    spec, result = results[1]
    results[1] = (spec, replace(result, eager_ms=(99.0,) * 6, disturbance={"others_cores": 0.9, "steal_cores": 0.0}))
    specs = [spec for spec, _ in results]
    records = {r.variant: r for r in runs.run_records(specs, {s.trial_id: r for s, r in results}, ENVIRONMENT,
                                                      MODELS, context)}  # fmt: skip
    compiled = records["default"]
    assert compiled.processes == 2 and compiled.disturbed_processes == 1 and compiled.status == "ok"
    assert [p["disturbed"] for p in compiled.process_results] == [False, True, False]
    assert compiled.process_results[1]["disturbance"]["others_cores"] == 0.9  # kept, with why
    assert compiled.speedup == pytest.approx((2.0 * 2.2) ** 0.5)  # the disturbed process's 99 ms is not in it
    assert records["eager"].latency_ms_median == pytest.approx(10.5)


def test_too_few_pairs_make_the_run_invalid():
    spec = _spec(0, "cold")
    compiled = _records([(spec, _result(spec, [10.0] * 3, [5.0] * 3, 1.0))])["default"]
    assert compiled.status == "invalid" and "benchmark.min_iters" in compiled.error
    assert compiled.speedup_ci_method == stats.WITHIN  # one process: only a within-process interval


def test_a_compile_error_keeps_the_eager_baseline():
    spec = _spec(0, "cold")
    failed = TrialResult(spec.trial_id, "compile_error", "boom", eager_ms=(10.0,) * 6, eager_first_call_s=0.5,
                         timed_s=1.0)  # fmt: skip
    records = _records([(spec, failed)])
    assert records["default"].status == "compile_error" and records["default"].speedup is None
    assert records["eager"].status == "ok" and records["eager"].latency_ms_median == 10.0


def test_incomplete_runs_are_not_recorded_yet():
    results = _three()
    specs = [spec for spec, _ in results]
    partial = {results[0][0].trial_id: results[0][1]}
    assert runs.run_records(specs, partial, ENVIRONMENT, MODELS, CONTEXT) == []
