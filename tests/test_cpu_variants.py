"""The `cpu-variants` suite's variants, as the config defines them (built in), at tiny scale: one timing process
holds them all as arms (eager, default, freezing, max-autotune with freezing, bfloat16, channels_last, the C++
wrapper), and each compiles a graph of its own, passes the check against eager and is timed."""

import sys
from dataclasses import asdict

import pytest

from compilebench.analysis import plan
from compilebench.config import load_config
from compilebench.harness import launcher
from compilebench.records.formats import TimingSpec, VariantSpec

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cpu-variants")]


@pytest.fixture(scope="module")
def one_process(tiny_resnet, repo_root, tmp_path_factory):
    config = load_config(repo_root / "params.yaml")
    names = list(config.suites["cpu-variants"].variants)
    variants = [VariantSpec(name=name, **asdict(config.variants[name])) for name in names]
    model, image = tiny_resnet
    timing = TimingSpec(min_iters=3, min_time_s=0.2, max_time_s=10.0, warmup_iters=1, warmup_s=0.0)
    specs = plan.trials([model], [2], variants, ["current"], 1, 0, True, image, timing, 0)
    results = launcher.run_trials(specs, {"current": sys.executable}, tmp_path_factory.mktemp("variants"), 1200)
    return names, specs, {result.trial_id: result for result in results}


def test_every_variant_of_the_suite_is_an_arm_of_one_process(one_process):
    names, specs, _ = one_process
    assert sorted(spec.variant.name for spec in specs) == sorted(names)
    assert len({spec.process_id for spec in specs}) == 1


def test_each_compiles_its_own_graph_passes_the_check_and_is_timed(one_process):
    _, specs, results = one_process
    for spec in specs:
        result = results[spec.trial_id]
        assert result.status == "ok", (spec.variant.name, result.error)
        if spec.variant.compile:
            assert result.health.graph_count >= 1 and not result.health.fell_back_to_eager, spec.variant.name
            assert len(result.compiled_ms) == len(result.eager_ms) >= 3
    by_name = {spec.variant.name: results[spec.trial_id] for spec in specs}
    assert by_name["freezing-bf16"].variant_dtype == "bfloat16"
    assert by_name["freezing-bf16"].max_rel_diff > 1e-6  # really computed in bfloat16
    for name in ("freezing", "max-autotune-freezing", "cpp-wrapper"):  # froze, beside the unfrozen default arm
        assert by_name[name].health.inductor_counters.get("binary_folding", 0) > 0, name
    assert by_name["default"].health.inductor_counters.get("binary_folding", 0) == 0
