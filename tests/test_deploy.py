"""What compiling costs at start-up, the ways people deploy: each way through real fresh processes on a tiny
ResNet (portable cache artifacts loaded by a second process on an empty cache, an AOTInductor package built by one
process and loaded by another, regional compilation), and a way that cannot work recorded as a status."""

import sys

import pytest

from compilebench.analysis import per_process
from compilebench.harness import compiling, launcher, models
from compilebench.records.formats import TimingSpec, TrialSpec, VariantSpec

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deploy")]  # trial processes; the fixture runs once

TIMING = TimingSpec(min_iters=3, min_time_s=0.2, max_time_s=5.0, warmup_iters=1, memory_iters=1)
DEPLOYS = {
    "artifacts": VariantSpec(name="artifacts", deploy="artifacts"),
    "aoti": VariantSpec(name="aoti", deploy="aoti", inductor={"freezing": True}),
    "regional": VariantSpec(name="regional", deploy="regional"),
}


def _trials(model, image, variant, caches=("cold", "warm")):
    return [
        TrialSpec(
            trial_id=f"current/tiny-resnet/bs1/{variant.name}/r{replicate}",
            environment="current",
            model=model,
            batch_size=1,
            variant=variant,
            replicate=replicate,
            cache=cache,
            image=image,
            timing=TIMING,
        )
        for replicate, cache in enumerate(caches)
    ]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, tiny_resnet):
    """Each way of deploying that carries a compile to another process: a cold process, then a warm one, as the
    benchmark runs them. Regional compilation (its graphs are the point, not its cache) on the session's cache."""
    model, image = tiny_resnet
    workdir = tmp_path_factory.mktemp("deploy")
    trials = [
        trial
        for name, variant in DEPLOYS.items()
        for trial in _trials(model, image, variant, ("shared",) if name == "regional" else ("cold", "warm"))
    ]
    results = launcher.run_trials(trials, {"current": sys.executable}, workdir, timeout_s=600)
    return workdir, {spec.trial_id: (spec, result) for spec, result in zip(trials, results, strict=True)}


def _pair(deployed, name):
    _, by_id = deployed
    return by_id[f"current/tiny-resnet/bs1/{name}/r0"], by_id[f"current/tiny-resnet/bs1/{name}/r1"]


def test_every_way_runs_and_is_timed_from_process_start(deployed):
    _, by_id = deployed
    assert len(by_id) == 5  # artifacts and aoti cold and warm, regional on the session's cache
    for trial_id, (_, result) in by_id.items():
        assert result.status == "ok", (trial_id, result.error)
        assert result.startup_s > 0 and result.load_s > 0 and result.compile_s > 0
        assert len(result.compiled_ms) >= 3 and not result.health.fell_back_to_eager


def test_portable_artifacts_serve_a_second_process_on_an_empty_cache(deployed):
    workdir, _ = deployed
    (cold_spec, cold), (warm_spec, warm) = _pair(deployed, "artifacts")
    assert (workdir / "deploy" / cold_spec.cache_key / "cache-artifacts.bin").stat().st_size > 0
    cold_counts, warm_counts = cold.health.inductor_counters, warm.health.inductor_counters
    assert cold_counts.get("fxgraph_cache_miss", 0) >= 1  # the cold process compiled
    # The warm process's own cache folder was new and empty, so every graph it found came from the artifacts.
    assert warm_counts.get("fxgraph_cache_hit", 0) >= 1 and warm_counts.get("fxgraph_cache_miss", 0) == 0
    assert (workdir / "inductor-cache-empty" / warm_spec.cache_key / "r1").is_dir()


def test_a_cold_process_builds_its_precompiled_header_in_its_own_folder(deployed):
    """torch keeps the precompiled header of its C++ kernels in the temp folder, not in its inductor cache: a cold
    process's temp folder is in its own cache folder, so every cold process builds one (none finds an earlier's), and
    so does a process given portable artifacts on an empty cache, as a fresh machine would."""
    workdir, _ = deployed
    (cold_spec, cold), (warm_spec, warm) = _pair(deployed, "artifacts")
    for cache, result in (
        (workdir / "inductor-cache" / cold_spec.cache_key, cold),
        (workdir / "inductor-cache-empty" / warm_spec.cache_key / "r1", warm),
    ):
        headers = list((cache / "tmp").glob("torchinductor_*/precompiled_headers/*.h.[gp]ch"))
        assert headers, cache
        # built while this process ran (not found there from an earlier one): its time is inside the process's life
        assert all(result.started_at - 1 <= h.stat().st_mtime <= result.started_at + result.wall_s + 1 for h in headers)


def test_an_aoti_package_built_by_one_process_is_loaded_by_another(deployed):
    workdir, _ = deployed
    (cold_spec, _), (_, warm) = _pair(deployed, "aoti")
    package = workdir / "deploy" / cold_spec.cache_key / "model.pt2"
    assert package.stat().st_size > 0
    assert warm.health.graph_count == 0  # no dynamo graph: the warm process only loaded and ran the package
    assert warm.task_agreement == 1.0 and warm.max_rel_diff <= 1e-3  # checked against eager like any variant


def test_regional_compilation_compiles_the_repeated_blocks_only(deployed):
    _, by_id = deployed
    _, regional = by_id["current/tiny-resnet/bs1/regional/r0"]
    assert regional.health.graph_count >= 2  # one graph per stage shape, none for the stem or the classifier alone


def test_first_inference_is_start_up_plus_load_plus_first_call(deployed):
    (_, cold), (_, warm) = _pair(deployed, "artifacts")
    expected = cold.startup_s + cold.load_s + cold.compile_s
    assert per_process.first_inference_s(cold, cold.compile_s) == pytest.approx(expected)
    assert per_process.first_inference_s(warm, None) is None  # nothing to add up without a first call


def test_a_way_that_cannot_work_for_a_model_is_a_recorded_status(tiny_resnet, tmp_path):
    """Regional compilation of the tiny OWL-ViT, whose towers have one layer each (no repeated block): a status
    and the error, with eager still timed in that process; never a crash."""
    _, image = tiny_resnet
    owlvit = models.random_checkpoint("google/owlvit-base-patch32", "tiny", tmp_path)
    (result,) = launcher.run_trials(
        _trials(owlvit, image, DEPLOYS["regional"], caches=("cold",)),
        {"current": sys.executable},
        tmp_path / "work",
        timeout_s=600,
    )
    assert result.status == "compile_error" and "OwlViTForObjectDetection has no repeated block" in result.error
    assert len(result.eager_ms) >= 3


def test_repeated_blocks_are_the_models_own_layers():
    for hub, expected in (
        ("microsoft/resnet-50", {"ResNetStage"}),
        ("facebook/detr-resnet-50", {"ResNetStage"}),
        ("microsoft/beit-base-patch16-224-pt22k-ft22k", {"BeitLayer"}),
    ):
        blocks = compiling.repeated_blocks(models.random_model(models.get_card(hub), "tiny", 0))
        assert {type(block).__name__ for block in blocks} == expected, hub
