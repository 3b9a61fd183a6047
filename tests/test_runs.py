"""From trial results to runs, on hand-made results: statistics over processes, cold and warm compiles, status."""

import dataclasses
import json
from dataclasses import replace

import pytest

from compilebench.analysis import per_process, run_record, runs, stats, validity
from compilebench.records.formats import (
    CompileHealth,
    ModelSpec,
    RecordError,
    TimingSpec,
    TrialResult,
    TrialSpec,
    VariantSpec,
)
from compilebench.records.invocation import Context, Validity

MODEL = ModelSpec("org/m", "M", "image-classification", "X", "ckpt")
DEFAULT = VariantSpec("default")
CONTEXT = Context(
    "inv", "s", "full", "vm", "abc", "embedded-fallback", "00", Validity(min_iters=5, min_time_s=0.1, max_cv=0.25)
)
ENVIRONMENT = {
    "current": run_record.EnvironmentInfo("current", "current", "k1", {"torch": "2.13.0"}, ("torch==2.13.0",))
}
MODELS = {"org/m": run_record.ModelInfo("random-init", "card:m.yaml", 1000)}


def _spec(replicate, cache, variant=DEFAULT):
    return TrialSpec(
        f"current/org--m/bs2/{variant.name}/r{replicate}",
        "current",
        MODEL,
        2,
        variant,
        replicate,
        cache,
        "i.jpg",
        TimingSpec(),
    )


def _result(spec, eager, compiled, compile_s, status="ok", **extra):
    return TrialResult(
        spec.trial_id,
        status,
        environment={"device": "cpu", "device_name": "cpu-x", "torch_version": "2.13.0"},
        eager_ms=tuple(eager),
        compiled_ms=tuple(compiled),
        compile_s=compile_s,
        timed_s=1.0,
        eager_first_call_s=0.5,
        peak_mem_mib=100.0 + compile_s,
        eager_peak_mem_mib=90.0,
        max_abs_diff=1e-6,
        max_rel_diff=1e-7,
        task_agreement=1.0,
        health=CompileHealth(graph_count=1),
        **extra,
    )


def _records(results):
    specs = [spec for spec, _ in results]
    return {
        r.cell.variant: r
        for r in runs.run_records(specs, {s.trial_id: r for s, r in results}, ENVIRONMENT, MODELS, CONTEXT)
    }


def _three(eager=(10.0, 12.0, 11.0)):
    specs = [_spec(0, "cold"), _spec(1, "warm"), _spec(2, "warm")]
    return [
        (spec, _result(spec, [e] * 6, [5.0] * 6, compile_s))
        for spec, e, compile_s in zip(specs, eager, (20.0, 3.0, 4.0), strict=True)
    ]


def test_a_compiled_run_pools_its_processes():
    records = _records(_three())
    compiled, eager = records["default"], records["eager"]
    assert compiled.identity.status == "ok" and compiled.identity.processes == 3 and compiled.identity.replicates == 3
    assert compiled.vs_eager.speedup == pytest.approx((2.0 * 2.4 * 2.2) ** (1 / 3))
    assert (
        compiled.vs_eager.speedup_ci_method == stats.BETWEEN
        and compiled.vs_eager.speedup_ci_low < 2.0 < 2.4 < compiled.vs_eager.speedup_ci_high
    )
    assert (
        compiled.compiling.compile_s == 20.0 and compiled.compiling.compile_s_warm == 3.5
    )  # cold: the empty cache; warm: median
    assert compiled.compiling.break_even_calls == pytest.approx(20.0 * 1000 / (11.0 - 5.0))
    assert compiled.memory.peak_mem_mib == 104.0  # median over processes
    assert eager.latency.count == 18 and eager.latency.latency_ms_median == 11.0 and eager.cell.compile is False
    assert [p.cache for p in compiled.process_results] == ["cold", "warm", "warm"]
    assert compiled.env.environment_freeze == ("torch==2.13.0",) and compiled.identity.run_uid.endswith("bs2/default")


def test_a_run_read_back_from_its_line_of_runs_jsonl_is_the_same_record():
    """What aggregate, plot and sync read is what the benchmark wrote, processes and environment fields included;
    a line that is not a run says which fields it lacks."""
    for record in _records(_three()).values():
        line = json.loads(json.dumps(record.to_dict()))
        read = run_record.RunRecord.from_dict(line)
        assert read == record and json.loads(json.dumps(read.to_dict())) == line
    with pytest.raises(RecordError, match=r"has no .*variant"):
        run_record.RunRecord.from_dict({key: value for key, value in line.items() if key != "variant"})


def test_a_run_is_in_parts_whose_fields_keep_the_flat_names_of_every_line_on_record(repo_root):
    """A kept record's lines, written before the run had parts, read into them and flattened back to the same keys
    and values; a flat field no part holds is refused by name, and no part hides a field of the same name."""
    kept = repo_root / "tests/fixtures/aa-2026-11-28/results/runs.jsonl"
    for text in kept.read_text().splitlines():
        line = json.loads(text)
        read = run_record.RunRecord.from_dict(line)
        assert read.cell.variant == line["variant"] and read.latency.latency_ms_median == line["latency_ms_median"]
        assert read.vs_eager.speedup == line.get("speedup") and read.env.environment == line["environment"]
        flat = json.loads(json.dumps(read.to_dict()))
        kept_keys = [key for key in line if key in flat and key != "process_results"]  # processes migrate
        assert {key: flat[key] for key in kept_keys} == {key: line[key] for key in kept_keys}
        assert len(kept_keys) > 100
    flat = read.to_dict()
    with pytest.raises(RecordError, match="no field latency_ms_mode"):
        run_record.RunRecord.of({"run_uid": "x", "latency_ms_mode": 1.0})
    parts = {f.name for f in dataclasses.fields(run_record.RunRecord)} - {"process_results"}
    assert not parts & set(flat) and {"environment", "compile", "speedup"} <= set(flat)


def _on(result, **fields):
    return replace(result, environment={**result.environment, **fields})


def test_processes_of_two_machines_or_stacks_are_not_pooled_into_one_run():
    """A plan resumed on another kind of GPU (or after an upgrade) must not average both into one verdict: its
    runs are invalid, the error names each machine and stack and how many processes ran there, and the loop
    would add no block to them; another hostname on the same hardware and stack pools."""
    h100 = {"device_name": "NVIDIA H100 80GB HBM3", "machine_fingerprint": "5ec15378526d", "torch_version": "2.11.0"}
    h200 = {**h100, "device_name": "NVIDIA H200", "machine_fingerprint": "0a1b2c3d4e5f"}
    three = _three()
    same = _records([(s, _on(r, **h100, hostname=f"vm{i}")) for i, (s, r) in enumerate(three)])
    assert {(r.identity.status, r.identity.machines) for r in same.values()} == {("ok", 1)}
    assert [p.machine_fingerprint for p in same["default"].process_results] == ["5ec15378526d"] * 3
    torch_12 = ({**h100, "torch_version": "2.12.0"}, "NVIDIA H100 80GB HBM3 (machine 5ec15378526d), torch 2.12.0")
    for other, named in ((h200, "NVIDIA H200 (machine 0a1b2c3d4e5f), torch 2.11.0"), torch_12):
        records = _records([(s, _on(r, **(other if i == 2 else h100))) for i, (s, r) in enumerate(three)])
        for record in records.values():
            assert (record.identity.status, record.identity.machines) == ("invalid", 2), record.identity.error
            assert (
                "2 different machines or software stacks (2 processes on NVIDIA H100 80GB HBM3 (machine "
                f"5ec15378526d), torch 2.11.0; 1 process on {named})" in record.identity.error
            )
        assert records["default"].vs_eager.speedup is not None  # the numbers are kept; the run is not judged


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
    assert compiled.compiling.compile_s == 12.6 and compiled.compiling.compile_s_warm == 3.5
    assert [p.cold_compile for p in compiled.process_results] == [True, False]  # what compare reads
    mixed = {"fxgraph_cache_hit": 1, "fxgraph_cache_miss": 1}  # one graph of two compiled: still a cold compile
    assert per_process.compiled_cold(specs[1], replace(results[1][1], health=CompileHealth(2, inductor_counters=mixed)))


def test_one_failed_process_fails_the_run_and_names_it():
    results = _three()
    spec = results[2][0]
    results[2] = (spec, TrialResult.failed(spec.trial_id, "crashed", "signal 11"))
    compiled = _records(results)["default"]
    assert (
        compiled.identity.status == "crashed"
        and spec.trial_id in compiled.identity.error
        and compiled.identity.processes == 2
    )


def test_validity_is_judged_on_the_per_pair_ratio():
    """Eager and compiled moving together in level shifts (a busy host at batch 1): each arm's latency is wide, the
    per-pair ratio is steady, and the speedup is what the verdict uses: valid. A ratio that jumps: invalid."""
    specs = [_spec(0, "cold"), _spec(1, "warm")]
    shifts = [1.0, 5.0, 1.0, 5.0, 1.0, 5.0]  # robust cv of each arm far above 0.25
    together = _records([(s, _result(s, [10 * x for x in shifts], [5 * x for x in shifts], 1.0)) for s in specs])
    assert together["default"].identity.status == "ok" and together["default"].latency.pair_cv == 0.0
    assert together["default"].latency.process_cv > 0.25  # latency cv is reported, not gating
    apart = _records([(s, _result(s, [10.0] * 6, [5 * x for x in shifts], 1.0)) for s in specs])["default"]
    assert (
        apart.identity.status == "invalid"
        and "per-pair ratio" in apart.identity.error
        and "benchmark.max_cv" in apart.identity.error
    )


def test_a_disturbed_process_is_recorded_and_left_out():
    context = replace(CONTEXT, validity=replace(CONTEXT.validity, disturbed_cores=0.25))
    results = _three()
    spec, result = results[1]
    results[1] = (spec, replace(result, eager_ms=(99.0,) * 6, disturbance={"others_cores": 0.9, "steal_cores": 0.0}))
    specs = [spec for spec, _ in results]
    records = {
        r.cell.variant: r
        for r in runs.run_records(specs, {s.trial_id: r for s, r in results}, ENVIRONMENT, MODELS, context)
    }
    compiled = records["default"]
    assert (
        compiled.identity.processes == 2
        and compiled.identity.disturbed_processes == 1
        and compiled.identity.status == "ok"
    )
    assert [p.disturbed for p in compiled.process_results] == [False, True, False]
    assert compiled.process_results[1].disturbance["others_cores"] == 0.9  # kept, with why
    assert compiled.vs_eager.speedup == pytest.approx((2.0 * 2.2) ** 0.5)  # the disturbed process's 99 ms is not in it
    assert records["eager"].latency.latency_ms_median == pytest.approx(10.5)


def test_a_process_that_drifted_between_its_halves_makes_the_run_invalid():
    context = replace(CONTEXT, validity=replace(CONTEXT.validity, max_halves_diff=0.10))
    specs = [_spec(0, "cold"), _spec(1, "warm")]
    drifting = [5.0] * 6 + [6.5] * 6  # its compiled calls 30% slower in the second half; eager steady
    results = [(s, _result(s, [10.0] * 12, drifting, 1.0)) for s in specs]
    compiled = {
        r.cell.variant: r
        for r in runs.run_records(specs, {s.trial_id: r for s, r in results}, ENVIRONMENT, MODELS, context)
    }["default"]
    assert (
        compiled.identity.status == "invalid"
        and "benchmark.max_halves_diff" in compiled.identity.error
        and "30.0%" in (compiled.identity.error or "")
    )
    steady = [(s, _result(s, [10.0] * 12, [5.0, 5.2] * 6, 1.0)) for s in specs]
    assert _records(steady)["default"].identity.status == "ok"


def test_halves_that_differ_no_more_than_a_noisy_process_does_keep_the_run_valid():
    """At 5 rounds a half, a steady but noisy process's halves differ by 10-30% by chance (SegFormer-B0 on the
    2-core VM): the run stays valid unless the halves' per-pair ratios differ beyond that noise, one way in most of
    its processes."""
    context = replace(CONTEXT, validity=replace(CONTEXT.validity, max_halves_diff=0.10))
    specs = [_spec(0, "cold"), _spec(1, "warm")]
    ratios = [2.4, 1.8, 2.6, 2.5, 1.9, 2.0, 2.5, 1.85, 2.1, 2.55]  # halves' medians 2.4 and 2.1 (12.5%), interleaved
    noisy = [(s, _result(s, [10.0] * 10, [10.0 / r for r in ratios], 1.0)) for s in specs]
    records = runs.run_records(specs, {s.trial_id: r for s, r in noisy}, ENVIRONMENT, MODELS, context)
    compiled = next(record for record in records if record.cell.variant == "default")
    assert [p.halves_ratio for p in compiled.process_results] == pytest.approx([0.875, 0.875])
    assert all(p.halves_p > validity.HALVES_ALPHA for p in compiled.process_results)
    assert compiled.identity.status == "ok", compiled.identity.error
    shifted = [2.4, 2.3, 2.6, 2.5, 2.35, 2.0, 2.1, 1.85, 2.2, 2.15]  # the same medians, every first-half ratio above
    drifted = [(s, _result(s, [10.0] * 10, [10.0 / r for r in shifted], 1.0)) for s in specs]
    records = runs.run_records(specs, {s.trial_id: r for s, r in drifted}, ENVIRONMENT, MODELS, context)
    compiled = next(record for record in records if record.cell.variant == "default")
    assert (
        compiled.identity.status == "invalid"
        and "14.3% between the halves of its rounds (down)" in compiled.identity.error
    )
    # One process drifts down, the other up as far (level shifts inside processes): the median speedup is not biased.
    swapped = shifted[5:] + shifted[:5]
    both_ways = [
        (s, _result(s, [10.0] * 10, [10.0 / r for r in series], 1.0))
        for s, series in zip(specs, (shifted, swapped), strict=True)
    ]
    records = runs.run_records(specs, {s.trial_id: r for s, r in both_ways}, ENVIRONMENT, MODELS, context)
    compiled = next(record for record in records if record.cell.variant == "default")
    assert [p.halves_ratio for p in compiled.process_results] == pytest.approx([0.875, 1 / 0.875])
    assert all(p.halves_p < validity.HALVES_ALPHA for p in compiled.process_results)  # each beyond its noise
    assert compiled.identity.status == "ok", compiled.identity.error


def test_too_few_pairs_make_the_run_invalid():
    spec = _spec(0, "cold")
    compiled = _records([(spec, _result(spec, [10.0] * 3, [5.0] * 3, 1.0))])["default"]
    assert compiled.identity.status == "invalid" and "benchmark.min_iters" in compiled.identity.error
    assert compiled.vs_eager.speedup_ci_method == stats.WITHIN  # one process: only a within-process interval


def test_a_compile_error_keeps_the_eager_baseline():
    spec = _spec(0, "cold")
    failed = TrialResult(
        spec.trial_id, "compile_error", "boom", eager_ms=(10.0,) * 6, eager_first_call_s=0.5, timed_s=1.0
    )
    records = _records([(spec, failed)])
    assert records["default"].identity.status == "compile_error" and records["default"].vs_eager.speedup is None
    assert records["eager"].identity.status == "ok" and records["eager"].latency.latency_ms_median == 10.0


def test_incomplete_runs_are_not_recorded_yet():
    results = _three()
    specs = [spec for spec, _ in results]
    partial = {results[0][0].trial_id: results[0][1]}
    assert runs.run_records(specs, partial, ENVIRONMENT, MODELS, CONTEXT) == []


def _cell(blocks=3, eager=(10.0, 12.0, 11.0), warm=(2.0, 1.8, 2.2)):
    """A timing process per block (eager, default and freezing arms sharing eager's samples) and a cold compile-only
    process per compiled variant, as the plan makes them."""
    freezing = VariantSpec("freezing", inductor={"freezing": True})
    results = []
    for variant, cold_s, peak in ((DEFAULT, 20.0, 120.0), (freezing, 15.0, 130.0)):
        spec = TrialSpec(
            f"current/org--m/bs2/{variant.name}/c0",
            "current",
            MODEL,
            2,
            variant,
            0,
            "cold",
            "i.jpg",
            TimingSpec(),
            kind="cold",
        )
        health = CompileHealth(1, inductor_counters={"binary_folding": 3})
        results.append(
            (
                spec,
                TrialResult(
                    spec.trial_id,
                    "ok",
                    compile_s=cold_s,
                    peak_mem_mib=peak,
                    eager_first_call_s=0.5,
                    eager_peak_mem_mib=90.0,
                    max_abs_diff=0.0,
                    max_rel_diff=0.0,
                    task_agreement=1.0,
                    startup_s=2.0,
                    load_s=1.0,
                    health=health,
                ),
            )
        )
    for replicate in range(blocks):
        process = f"current/org--m/bs2/r{replicate}"
        samples = (eager[replicate],) * 6
        for variant, factor in ((VariantSpec("eager", compile=False), None), (DEFAULT, 2.0), (freezing, 4.0)):
            spec = TrialSpec(
                f"current/org--m/bs2/{variant.name}/r{replicate}",
                "current",
                MODEL,
                2,
                variant,
                replicate,
                "warm",
                "i.jpg",
                TimingSpec(),
                kind="arm",
                process_id=process,
            )
            compiled = (
                {}
                if factor is None
                else {
                    "compiled_ms": tuple(x / factor for x in samples),
                    "compile_s": warm[replicate],
                    "max_abs_diff": 0.0,
                    "max_rel_diff": 0.0,
                    "task_agreement": 1.0,
                    "health": CompileHealth(1),
                }
            )
            results.append(
                (
                    spec,
                    TrialResult(
                        spec.trial_id,
                        "ok",
                        eager_ms=samples,
                        timed_s=1.0,
                        startup_s=2.0,
                        load_s=1.0,
                        eager_first_call_s=0.5,
                        eager_peak_mem_mib=90.0,
                        inductor_startup_s=1.5,
                        **compiled,
                    ),
                )
            )
    return results


def test_a_timing_process_counts_once_in_the_eager_run_and_pairs_every_arm_with_its_eager_samples():
    records = _records(_cell())
    eager, default, freezing = records["eager"], records["default"], records["freezing"]
    assert (
        eager.identity.processes == 3 and eager.latency.count == 18
    )  # one eager arm per process, not one per compiled arm
    assert [p.kind for p in eager.process_results].count("arm") == 3
    assert default.vs_eager.speedup == pytest.approx(2.0) and freezing.vs_eager.speedup == pytest.approx(4.0)
    assert default.identity.processes == 3 and default.identity.replicates == 4  # three timing processes and a cold one
    assert [p.kind for p in default.process_results] == ["cold", "arm", "arm", "arm"]  # cold first
    assert (
        default.compiling.compile_s == 20.0 and default.compiling.compile_s_warm == 2.0
    )  # cold from the compile-only process
    assert default.memory.peak_mem_mib == 120.0  # where the variant was the only compiled model: the cold process
    assert freezing.health.inductor_counters == {"binary_folding": 3}  # health from the process that ran the passes
    assert default.compiling.first_inference_s == 2.0 + 1.0 + 20.0  # start-up, load, cold compile
    assert default.compiling.first_inference_s_warm == pytest.approx(
        2.0 + 1.0 + 1.5 + 2.0
    )  # inductor's start-up added back
    assert eager.memory.peak_mem_mib == 90.0 and all(p.compile_s is None for p in eager.process_results)


def test_a_process_disturbed_while_compiling_keeps_its_samples_and_loses_its_compile_time():
    context = replace(CONTEXT, validity=replace(CONTEXT.validity, disturbed_cores=0.25))
    results = _cell()
    index = next(i for i, (s, _) in enumerate(results) if s.trial_id.endswith("default/r1"))
    spec, result = results[index]
    results[index] = (spec, replace(result, compile_s=99.0, compile_disturbance={"others_cores": 0.9}))
    specs = [spec for spec, _ in results]
    records = {
        r.cell.variant: r
        for r in runs.run_records(specs, {s.trial_id: r for s, r in results}, ENVIRONMENT, MODELS, context)
    }
    default = records["default"]
    assert (
        default.identity.processes == 3 and default.compiling.compile_s_warm == 2.1
    )  # 99 s left out; its samples kept
    row = next(p for p in default.process_results if p.trial_id == spec.trial_id)
    assert row.compile_disturbed and not row.disturbed


def test_a_process_record_derives_its_values_and_reads_rows_of_earlier_versions():
    record = per_process.ProcessRecord.from_dict(
        {
            "trial_id": "a/m/bs1/default/r2",
            "cache": "warm",
            "eager_ms": [10.0] * 4 + [12.0] * 4,
            "compiled_ms": [5.0] * 8,
            "compile_s": 3.0,
            "some_field_of_the_future": 1,
        }
    )
    assert record.block == "default/r2" and not record.cold_compile and record.kind == "paired"
    assert record.speedup == pytest.approx(2.2) and record.speedup_of_means == pytest.approx(2.2)
    assert record.halves_ratio == pytest.approx(1.2) and record.pair_cv == pytest.approx(0.4 / 1.349 / 2.2)
    assert record.halves_p < validity.HALVES_ALPHA  # every ratio of the second half above every one of the first
    assert per_process.ProcessRecord.from_dict({"cache": "cold", "eager_ms": [1.0]}, index=4).block == "p4"
    assert per_process.ProcessRecord.from_dict(
        {"trial_id": "x", "cache": "cold"}
    ).cold_compile  # by its cache, as before


def test_the_context_reads_exports_written_before_validity_was_a_record_of_its_own(repo_root):
    """An export of 2026-11-27 holds the thresholds beside the identity; one written now nests them (`validity`), as
    the benchmark section makes them."""
    import json
    from dataclasses import asdict

    from compilebench.config import Benchmark

    saved = json.loads((repo_root / "tests/fixtures/h100-window/export.json").read_text())
    older = Context.from_dict(saved["context"])
    assert older.validity == Validity(
        min_iters=100, min_time_s=4.0, max_cv=0.25, disturbed_cores=0.25, max_halves_diff=0.1
    )
    assert older.invocation_id == saved["context"]["invocation_id"]
    assert Context.from_dict(json.loads(json.dumps(older.to_dict()))) == older  # as an export now writes it
    section = Benchmark(min_iters=7, max_cv=0.5, disturbed_cores=0.3)
    expected = {
        "min_iters": 7,
        "min_time_s": section.min_time_s,
        "max_cv": 0.5,
        "disturbed_cores": 0.3,
        "max_halves_diff": section.max_halves_diff,
    }
    assert asdict(section.validity()) == expected
