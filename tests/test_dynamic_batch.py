"""Dynamic batch: one compiled model serving batch 1, 2 and 4 in one fresh process, with static shapes, the batch dim
marked dynamic and marked unbacked, on a tiny ResNet; graphs and recompiles counted by dynamo, not by us. The static
run is primed first (`launcher --prime`'s compile-only process) and then served warm from that shared cache."""

import sys

import pytest

from compilebench.analysis import per_process, run_record, runs
from compilebench.harness import launcher, trial_process
from compilebench.records.formats import DYNAMIC_BATCH, DYNAMIC_BATCH_UNBACKED, TimingSpec, TrialSpec, VariantSpec
from compilebench.records.invocation import Context, Validity

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dynamic-batch")]  # trial processes; fixture runs once

TIMING = TimingSpec(min_iters=3, min_time_s=0.2, max_time_s=5.0, warmup_iters=1, memory_iters=1)
SIZES = (1, 2, 4)  # within a convolution's batch guard (2..15 on torch 2.13), so a dynamic batch can reuse a graph
SERVE = {
    "serve-static": VariantSpec(name="serve-static", serve=True),
    "serve-dynamic": VariantSpec(name="serve-dynamic", serve=True, dynamic=DYNAMIC_BATCH),
    "serve-unbacked": VariantSpec(name="serve-unbacked", serve=True, dynamic=DYNAMIC_BATCH_UNBACKED),
}


def _spec(model, image, name, cache):
    return TrialSpec(
        trial_id=f"current/tiny-resnet/bs2/{name}/r0",
        environment="current",
        model=model,
        batch_size=2,
        variant=SERVE[name],
        replicate=0,
        cache=cache,
        image=image,
        timing=TIMING,
        serve_batch_sizes=SIZES,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_resnet):
    """Each way, one process timing batch 2 after serving 1, 2 and 4, on one cache primed for the static way (the
    others compile their own graphs there). Also the prime's own result and cache folder."""
    model, image = tiny_resnet
    workdir = tmp_path_factory.mktemp("serve")
    python = {"current": sys.executable}
    static = _spec(model, image, "serve-static", "shared")
    shared = workdir / "shared-cache"
    [(_, primed)] = launcher.prime([static], python, workdir, shared, 600, workers=1)
    results = {}
    for name in SERVE:  # the dynamic ones find no graph of theirs there: they compile (cold by their counters)
        spec = _spec(model, image, name, "shared")
        results[name] = (spec, trial_process.run_trial_process(spec, sys.executable, workdir, shared, 600))
    return results, primed, shared


def test_each_way_serves_every_size_then_times_its_own(served):
    by_name, _, _ = served
    for name in ("serve-static", "serve-dynamic"):
        _, result = by_name[name]
        assert result.status == "ok", (name, result.error)
        assert len(result.serve_first_call_s) == len(SIZES) == len(result.serve_graph_counts)
        assert all(seconds > 0 for seconds in result.serve_first_call_s)
        assert len(result.compiled_ms) >= 3 and result.task_agreement == 1.0  # checked at batch 2, as timed
        assert result.health.recompile_count == 0  # timing batch 2 again compiled nothing new


def test_priming_compiles_every_served_size_and_the_trial_then_finds_them_in_the_cache(served):
    by_name, primed, shared = served
    assert primed.status == "ok" and primed.compile_s > 0
    assert len([path for path in (shared / "fxgraph").rglob("*") if path.is_file()]) >= 3  # 1, 2 and 4
    spec, result = by_name["serve-static"]
    counters = result.health.inductor_counters
    assert counters.get("fxgraph_cache_hit", 0) >= 3 and counters.get("fxgraph_cache_miss", 0) == 0
    assert not per_process.compiled_cold(spec, result)  # so its compile time counts as warm, not cold


def test_static_shapes_compile_a_graph_per_size_and_say_why(served):
    by_name, _, _ = served
    _, static = by_name["serve-static"]
    assert static.serve_graph_counts == (1, 2, 3)
    assert any("expected 2, actual 4" in reason for reason in static.health.recompile_reasons)


def test_a_dynamic_batch_reuses_its_graph_where_the_guards_allow(served):
    """Batch 1 is specialised (dynamo's 0/1 rule), so the marked batch dim recompiles once, at 2, for a range of
    sizes that 4 then reuses. (A ResNet-50 at batch 16 leaves that range: see the README.)"""
    by_name, _, _ = served
    _, result = by_name["serve-dynamic"]
    assert result.serve_graph_counts == (1, 2, 2), result.health.recompile_reasons
    assert not any("expected 2" in reason for reason in result.health.recompile_reasons)  # 2 was not static


def test_an_unbacked_batch_fails_to_compile_on_torch_2_13_and_the_process_records_why(served):
    """mark_unbacked avoids the 0/1 specialisation, but inductor on torch 2.13 cannot compile this ResNet with an
    unbacked batch: a stride assertion at the first call (measured; docs/startup.md says so). The process records the
    status and error and still times eager. When a torch release compiles it, this fails: update the docs then."""
    import torch

    by_name, _, _ = served
    _, result = by_name["serve-unbacked"]
    assert torch.__version__.startswith("2.13."), "the outcome below was measured on torch 2.13"
    assert result.status == "compile_error" and result.error.startswith("AssertionError") and "stride" in result.error
    assert result.eager_ms and not result.compiled_ms  # eager was still timed, for the eager run


def test_the_run_record_carries_sizes_graphs_and_recompiles(served):
    by_name, _, _ = served
    environment = {"current": run_record.EnvironmentInfo("current", "current", "k", {"torch": "x"}, ())}
    context = Context("inv", "s", "tiny", "vm", "abc", "file", "00", Validity(min_iters=3, min_time_s=0.1, max_cv=1e6))

    def record(name):
        spec, result = by_name[name]
        models_info = {spec.model.model_id: run_record.ModelInfo("random-init", "card", 1)}
        records = runs.run_records([spec], {spec.trial_id: result}, environment, models_info, context)
        return next(r for r in records if r.cell.variant == name), result

    dynamic, result = record("serve-dynamic")
    assert dynamic.cell.serve_batch_sizes == "1,2,4" and dynamic.health.serve_graphs == 2
    assert dynamic.health.serve_recompiles == 1
    # one process that compiled: its own first calls
    assert dynamic.compiling.serve_first_call_s == result.serve_first_call_s
    assert dynamic.to_dict()["recompile_reasons"]
    static, _ = record("serve-static")
    assert static.health.serve_graphs == 3 and static.compiling.compile_s is None
    assert static.compiling.compile_s_warm > 0  # primed: warm
    failed, result = record("serve-unbacked")
    assert failed.cell.serve_batch_sizes == "1,2,4"  # what it had to serve, whether or not it got through
    assert (failed.health.serve_graphs is None) is (result.status != "ok")


def test_the_report_table_sums_a_graph_per_size_and_takes_a_serving_process_whole():
    """`default` compiled each size in its own process (compile times add up); a `serve` run's every process
    compiled for all sizes (its compile time is already the whole)."""
    import pandas as pd

    from compilebench import report

    def run(variant, size, compile_s, serve=None, graphs=None, recompiles=None, status="ok", error=None):
        return {
            "environment": "current",
            "device_name": "cpu-x",
            "label": "ResNet",
            "variant": variant,
            "batch_size": size,
            "latency_ms_median": 10.0 * size,
            "speedup": 1.5,
            "status": status,
            "error": error,
            "compile_s": compile_s,
            "graph_count": 1,
            "serve_batch_sizes": serve,
            "serve_graphs": graphs,
            "serve_recompiles": recompiles,
        }

    summary = pd.DataFrame(
        [run("default", size, 20.0) for size in (1, 4, 16)]
        + [run("serve-dynamic", size, 50.0 + size, "1,4,16", 3, 2) for size in (1, 4, 16)]
        + [run("serve-unbacked", 1, None, "1,4,16", status="compile_error", error="AssertionError: stride")]
    )
    table = report.dynamic_batch_table(summary).set_index("variant")
    assert table.loc["default", "compile s in all (cold)"] == "60.0" and table.loc["default", "graphs"] == "3"
    assert table.loc["serve-dynamic", "compile s in all (cold)"] == "54.0"  # the median of 51, 54, 66
    assert table.loc["serve-dynamic", "recompiles"] == "2" and table.loc["serve-dynamic", "batch 4: ms (speedup)"] == (
        "40.00 (1.50x)"
    )
    assert table.loc["serve-unbacked", "batch 1: ms (speedup)"] == "compile_error"
    assert table.loc["serve-unbacked", "status"].startswith("AssertionError")
    assert table.loc["serve-unbacked", "one process serves"] == "1,4,16"
    assert table.loc["serve-unbacked", "graphs"] == table.loc["serve-unbacked", "compile s in all (cold)"] == ""
    assert report.dynamic_batch_table(summary[summary["variant"] == "default"]).empty  # no serve run: no table
