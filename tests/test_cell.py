"""A benchmark cell with real torch.compile on a tiny model of a real class, in its own process."""

import os
import signal
import subprocess
import time
from dataclasses import asdict

import pytest

from compilebench import benchmark, cell, load_models, models
from compilebench.config import Benchmark, Variant

pytestmark = pytest.mark.slow

FAST = asdict(Benchmark(min_iters=5, min_time_s=0.2, max_time_s=5.0, warmup_iters=1, memory_iters=1))


def _spec(checkpoint, image, variants, batch_size=2, **bench):
    return {
        "model_id": "microsoft/resnet-50",
        "checkpoint": str(checkpoint),
        "batch_size": batch_size,
        "image": str(image),
        "device": "cpu",
        "dtype": "float32",
        "benchmark": {**FAST, **bench},
        "variants": {name: asdict(variant) for name, variant in variants.items()},
    }


@pytest.fixture(scope="module")
def tiny_resnet(tmp_path_factory, image_640x480):
    root = tmp_path_factory.mktemp("ckpt")
    card = models.get_card("microsoft/resnet-50")
    load_models.materialise(card, root, "tiny", "random-init", seed=0, online=False)
    image = root / "image.jpg"
    image_640x480.save(image)
    return root / card.slug("tiny"), image


def test_eager_and_compiled_variants_run_interleaved(tiny_resnet):
    checkpoint, image = tiny_resnet
    variants = {
        "eager": Variant(compile=False),
        "default": Variant(mode="default"),
        "freezing": Variant(mode="default", inductor={"freezing": True}),
        "bf16-channels-last": Variant(mode="default", dtype="bfloat16", channels_last=True),
    }
    spec = _spec(checkpoint, image, variants)
    results = {r["variant"]: r for r in benchmark.run_cell_process(spec, 900, compile_cache="cold", warm_compile=True)}
    assert [results[name]["status"] for name in variants] == ["ok"] * 4, results
    for name in ("default", "freezing", "bf16-channels-last"):
        result = results[name]
        assert len(result["samples_ms"]) == len(result["paired_eager_ms"]) >= 5  # paired, same count
        assert result["first_call_s"] > 0 and result["graph_count"] == 1 and result["graph_break_count"] == 0
        assert result["recompile_count"] == 0 and result["fell_back_to_eager"] is False
        assert result["task_agreement"] == 1.0
        assert result["input_shapes"] == {"pixel_values": [2, 3, 32, 32]}
        assert result["inductor_cache"] == "cold"
        assert 0 < result["compile_s_warm"] < result["first_call_s"]  # the warm cache makes compiling cheaper
    assert results["default"]["max_rel_diff"] < 1e-3
    assert results["bf16-channels-last"]["variant_dtype"] == "bfloat16"
    assert 1e-6 < results["bf16-channels-last"]["max_rel_diff"] < 5e-2  # really ran in bfloat16, within tolerance
    # eager's samples are the paired ones of every compiled variant
    compiled = [n for n in variants if n != "eager"]
    assert len(results["eager"]["samples_ms"]) == sum(len(results[n]["paired_eager_ms"]) for n in compiled)
    # The freezing variant really changed the compilation (weights folded and packed), not a silent no-op.
    frozen, plain = results["freezing"]["inductor_counters"], results["default"]["inductor_counters"]
    assert frozen.get("binary_folding", 0) > 0 and plain.get("binary_folding", 0) == 0
    assert frozen.get("pattern_matcher_count", 0) > plain.get("pattern_matcher_count", 0)


def test_a_failing_variant_is_recorded_and_the_others_run(tiny_resnet):
    checkpoint, image = tiny_resnet
    variants = {
        "eager": Variant(compile=False),
        "broken": Variant(mode="default", inductor={"cpp.cxx": ("/nonexistent/c++",), "fx_graph_cache": False}),
        "default": Variant(mode="default"),
    }
    results = {r["variant"]: r for r in benchmark.run_cell_process(_spec(checkpoint, image, variants), 600)}
    assert results["broken"]["status"] == "compile_error"
    assert results["broken"]["error"]
    assert results["default"]["status"] == "ok" and results["eager"]["status"] == "ok"


def test_cell_timeout_is_a_status(tiny_resnet):
    checkpoint, image = tiny_resnet
    variants = {"eager": Variant(compile=False), "default": Variant(mode="default")}
    results = benchmark.run_cell_process(_spec(checkpoint, image, variants), timeout_s=1.0)
    assert {r["status"] for r in results} == {"timeout"}


def test_missing_checkpoint_fails_every_variant(tmp_path, tiny_resnet):
    _, image = tiny_resnet
    variants = {"eager": Variant(compile=False), "default": Variant(mode="default")}
    results = benchmark.run_cell_process(_spec(tmp_path / "nope", image, variants), 120)
    assert [r["status"] for r in results] == ["error", "error"] and "nope" in results[0]["error"]


def test_oom_is_recognised_through_the_exception_chain():
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("backend='inductor' raised") from inner
    except RuntimeError as outer:
        assert cell.classify_error(outer, "compile") == "oom"
    assert cell.classify_error(RuntimeError("DefaultCPUAllocator: can't allocate memory"), "run") == "oom"
    assert cell.classify_error(ValueError("bad"), "compile") == "compile_error"
    assert cell.classify_error(ValueError("bad"), "run") == "error"


def test_segfaulting_cell_is_recorded_as_crashed(tiny_resnet):
    """A real SIGSEGV of the cell process (sent from outside, mid-run) ends as status `crashed`."""
    import threading

    checkpoint, image = tiny_resnet
    variants = {"eager": Variant(compile=False), "default": Variant(mode="default")}
    spec = _spec(checkpoint, image, variants, min_time_s=30.0, max_time_s=60.0)

    def segfault_the_cell():
        for _ in range(600):
            found = subprocess.run(["pgrep", "-f", "compilebench.cell"], capture_output=True, text=True).stdout.split()
            if found:
                time.sleep(5)  # let it load and start
                for pid in found:
                    os.kill(int(pid), signal.SIGSEGV)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=segfault_the_cell)
    killer.start()
    results = benchmark.run_cell_process(spec, 600)
    killer.join()
    assert {r["status"] for r in results} == {"crashed"}
    assert "-11" in results[0]["error"]  # the exit status names the signal
