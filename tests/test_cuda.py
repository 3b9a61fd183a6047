"""The CUDA path on a real GPU: skipped, visibly, where none is present.

Runs with nothing but torch, transformers and their companions (a GPU image has no mlflow, dvc or omegaconf):
    python -m pytest --noconftest tests/test_cuda.py
A tiny model of a real class goes through real trials on the device: the default mode, and reduce-overhead, whose
CUDA graphs must be marked per step and warmed up before timing; a device-memory cap ends as `oom` without
breaking the CUDA context (an address-space cap would).
"""

import json
import sys

import pytest
import torch
from PIL import Image

from compilebench.harness import models, trial_process
from compilebench.records.formats import TimingSpec, TrialSpec, VariantSpec

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the GPU smoke test is skipped")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda")
    image = root / "image.jpg"
    Image.new("RGB", (640, 480), (120, 80, 40)).save(image)
    return models.random_checkpoint("microsoft/resnet-50", "tiny", root), str(image), root


def _trial(tiny, variant: VariantSpec, **timing) -> TrialSpec:
    model, image, _ = tiny
    spec = TimingSpec(device="cuda", warmup_iters=0, min_iters=20, min_time_s=0.1, max_time_s=5.0, **timing)
    return TrialSpec(f"cuda/{variant.name}/r0", "current", model, 2, variant, 0, "cold", image, spec)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_trial_on_the_gpu(tiny, mode):
    _, _, root = tiny
    variant = VariantSpec(name=mode, mode=mode)
    result = trial_process.run_trial_process(_trial(tiny, variant), sys.executable, root / "work", root / mode, 600)
    assert result.status == "ok", result.error
    assert len(result.eager_ms) == len(result.compiled_ms) >= 20
    assert result.environment["device"] == "cuda" and result.environment["gpu_name"] == torch.cuda.get_device_name()
    assert result.environment["gpu_driver"] and result.environment["cudnn_version"]
    assert result.reserved_mem_mib >= result.peak_mem_mib > 0
    assert result.compile_s > 0 and result.task_agreement == 1.0
    # CUDA graphs are recorded in the warm-up, never in the timed samples, even with warmup_iters 0
    assert result.warmup_calls == (3 if mode == "reduce-overhead" else 0)
    json.dumps(result.to_dict())


def test_device_memory_cap_is_an_oom_not_a_broken_context(tiny):
    _, _, root = tiny
    variant = VariantSpec(name="default")
    result = trial_process.run_trial_process(
        _trial(tiny, variant, memory_limit_mib=0.001), sys.executable, root / "work", root / "cap", 600
    )
    assert result.status == "oom", (result.status, result.error)
