"""Dynamic batch: one compiled model serving batch 1, 4 and 16 in one fresh process, with static shapes, torch's
automatic dynamic shapes and the batch dim marked dynamic, on a tiny ResNet; graphs and recompiles counted by dynamo,
not by us."""

import sys

import pytest

from compilebench import launcher, runs
from compilebench.records import DYNAMIC_BATCH, DYNAMIC_BATCH_UNBACKED, TimingSpec, TrialSpec, VariantSpec

pytestmark = pytest.mark.xdist_group("dynamic-batch")  # the module fixture runs once

TIMING = TimingSpec(min_iters=3, min_time_s=0.2, max_time_s=5.0, warmup_iters=1, memory_iters=1)
SIZES = (1, 4, 16)
SERVE = {
    "serve-static": VariantSpec(name="serve-static", serve=True),
    "serve-dynamic": VariantSpec(name="serve-dynamic", serve=True, dynamic=DYNAMIC_BATCH),
    "serve-unbacked": VariantSpec(name="serve-unbacked", serve=True, dynamic=DYNAMIC_BATCH_UNBACKED),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_resnet):
    """Each way, one cold process timing batch 4 after serving 1, 4 and 16."""
    model, image = tiny_resnet
    trials = [
        TrialSpec(trial_id=f"current/tiny-resnet/bs4/{name}/r0", environment="current", model=model, batch_size=4,
                  variant=variant, replicate=0, cache="cold", image=image, timing=TIMING, serve_batch_sizes=SIZES)
        for name, variant in SERVE.items()
    ]  # fmt: skip
    results = launcher.run_trials(trials, {"current": sys.executable}, tmp_path_factory.mktemp("serve"), 600)
    return {spec.variant.name: (spec, result) for spec, result in zip(trials, results, strict=True)}


def test_each_way_serves_every_size_then_times_its_own(served):
    for name, (_, result) in served.items():
        if name == "serve-unbacked":
            continue  # its own test: it may fail to compile
        assert result.status == "ok", (name, result.error)
        assert len(result.serve_first_call_s) == len(SIZES) == len(result.serve_graph_counts)
        assert all(seconds > 0 for seconds in result.serve_first_call_s)
        assert len(result.compiled_ms) >= 3 and result.task_agreement == 1.0  # checked at batch 4, as timed
        assert result.health.recompile_count == 0  # timing batch 4 again compiled nothing new


def test_static_shapes_compile_a_graph_per_size_and_say_why(served):
    _, static = served["serve-static"]
    assert static.serve_graph_counts == (1, 2, 3)
    assert static.health.recompile_reasons and all("size" in r for r in static.health.recompile_reasons)


def test_a_dynamic_batch_graph_serves_a_range_and_dynamo_says_where_it_ends(served):
    """With the batch dim marked dynamic (as torch's automatic dynamic also makes it at the first recompile), batch 4
    gets a graph for a range of sizes instead of a static one. On a ResNet that range is bounded (a convolution's
    guard, 2 <= batch <= 15 on torch 2.13), so 16 still recompiles: the recorded reasons show which it was."""
    _, static = served["serve-static"]
    assert any("expected 4, actual 16" in reason for reason in static.health.recompile_reasons)  # 4 was static
    _, result = served["serve-dynamic"]
    reasons = result.health.recompile_reasons
    assert not any("expected 4" in reason for reason in reasons), reasons  # 4 was not static
    assert any("<=" in reason for reason in reasons) or result.serve_graph_counts[-1] == 2, reasons


def test_an_unbacked_batch_is_one_graph_or_a_recorded_failure(served):
    """mark_unbacked avoids the 0/1 specialisation; where inductor cannot compile it (a stride assertion for a
    ResNet on torch 2.13), the process records the status and error instead of crashing."""
    _, result = served["serve-unbacked"]
    if result.status == "ok":
        assert result.serve_graph_counts == (1, 1, 1)
    else:
        assert result.error and result.eager_ms  # eager was still timed, for the eager run


def test_the_run_record_carries_sizes_graphs_and_recompiles(served):
    spec, result = served["serve-static"]
    environment = {"current": runs.EnvironmentInfo("current", "current", "k", {"torch": "x"}, ())}
    context = runs.Context("inv", "s", "tiny", "vm", "abc", "file", "00", min_iters=3, min_time_s=0.1, max_cv=1e6)
    models_info = {spec.model.model_id: runs.ModelInfo("random-init", "card", 1)}
    records = runs.run_records([spec], {spec.trial_id: result}, environment, models_info, context)
    record = next(r for r in records if r.variant == "serve-static")
    assert record.serve_batch_sizes == "1,4,16" and record.serve_graphs == 3 and record.serve_recompiles == 2
    assert record.serve_first_call_s == result.serve_first_call_s  # one cold process: its own first calls
    row = record.to_dict()
    assert row["serve_recompiles"] == 2 and row["recompile_reasons"]
    spec, result = served["serve-unbacked"]
    [failed] = [r for r in runs.run_records([spec], {spec.trial_id: result}, environment, models_info, context)
                if r.variant == "serve-unbacked"]  # fmt: skip
    assert failed.serve_batch_sizes == "1,4,16"  # what it had to serve, whether or not it got through
    assert (failed.serve_graphs is None) is (result.status != "ok")


def test_the_report_table_sums_a_graph_per_size_and_takes_a_serving_process_whole():
    """`default` compiled each size in its own process (compile times add up); a `serve` run's every process
    compiled for all sizes (its compile time is already the whole)."""
    import pandas as pd

    from compilebench import report

    def run(variant, size, compile_s, serve=None, graphs=None, recompiles=None, status="ok", error=None):
        return {"environment": "current", "device_name": "cpu-x", "label": "ResNet", "variant": variant,
                "batch_size": size, "latency_ms_median": 10.0 * size, "speedup": 1.5, "status": status,
                "error": error, "compile_s": compile_s, "graph_count": 1, "serve_batch_sizes": serve,
                "serve_graphs": graphs, "serve_recompiles": recompiles}  # fmt: skip

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


def test_priming_a_serve_run_compiles_every_size_into_the_shared_cache(tmp_path, tiny_resnet):
    """`launcher --prime` (a GPU machine's first pass) compiles what the trial will meet: all three sizes."""
    model, image = tiny_resnet
    spec = TrialSpec(trial_id="current/tiny-resnet/bs4/serve-static/r0", environment="current", model=model,
                     batch_size=4, variant=SERVE["serve-static"], replicate=0, cache="shared", image=image,
                     timing=TIMING, serve_batch_sizes=SIZES)  # fmt: skip
    cache = tmp_path / "shared-cache"
    [(key, result)] = launcher.prime([spec], {"current": sys.executable}, tmp_path, cache, 600, workers=1)
    assert key == spec.cache_key and result.status == "ok" and result.compile_s > 0
    graphs = [path for path in (cache / "fxgraph").rglob("*") if path.is_file()]
    assert len(graphs) >= 3, graphs  # a static graph for each of 1, 4 and 16
