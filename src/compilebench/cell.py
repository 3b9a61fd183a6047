"""One benchmark cell, (model, batch size), in its own process: eager and every compiled variant, interleaved.

    python -m compilebench.cell SPEC.json OUT.json     # run by `benchmark`, one process per cell

Per compiled variant: dynamo is reset, the inductor options are patched in, the first call is timed apart
(compile time), the output is checked against eager, then eager and compiled calls alternate on the same inputs
until both the minimum iteration count and the minimum time are reached (or the maximum time). A failing variant is
recorded with its status and error; the others still run. Results go to OUT.json atomically.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from compilebench import models, timing

LOGGER = logging.getLogger(__name__)

CUDAGRAPH_MODES = ("reduce-overhead",)
_TOLERANCE_FACTOR = {"float32": 1.0, "bfloat16": 50.0, "float16": 50.0}


def flat_tensors(output: Any) -> list[Any]:
    """The floating-point tensors of a model output, in a fixed order."""
    import torch

    if isinstance(output, torch.Tensor):
        return [output] if output.is_floating_point() else []
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, list | tuple):
        return [tensor for item in output for tensor in flat_tensors(item)]
    return []


def compare_outputs(reference: Any, candidate: Any) -> dict[str, float]:
    """Max absolute difference and that difference relative to the reference's largest magnitude."""
    ref, cand = flat_tensors(reference), flat_tensors(candidate)
    if len(ref) != len(cand):
        return {"max_abs_diff": float("inf"), "max_rel_diff": float("inf")}
    max_abs, scale = 0.0, 0.0
    for a, b in zip(ref, cand, strict=True):
        if a.shape != b.shape:
            return {"max_abs_diff": float("inf"), "max_rel_diff": float("inf")}
        max_abs = max(max_abs, (a.float() - b.float()).abs().max().item())
        scale = max(scale, a.float().abs().max().item())
    return {"max_abs_diff": max_abs, "max_rel_diff": max_abs / scale if scale > 0 else max_abs}


def classify_error(error: BaseException, phase: str) -> str:
    """Status of a failed variant: oom, compile_error (first compiled call) or error."""
    text = f"{type(error).__name__}: {error}".lower()
    if isinstance(error, MemoryError) or "out of memory" in text or "outofmemory" in text:
        return "oom"
    return "compile_error" if phase == "compile" else "error"


def dynamo_health() -> dict[str, Any]:
    """Graph count, graph breaks with reasons, and inductor's pattern counters since the last reset."""
    from torch._dynamo.utils import counters

    breaks = dict(counters["graph_break"])
    return {
        "graph_count": int(counters["stats"].get("unique_graphs", 0)),
        "graph_break_count": int(sum(breaks.values())),
        "graph_break_reasons": list(breaks)[:20],
        "inductor_counters": {key: int(value) for key, value in counters["inductor"].items()},
    }


def _setup(spec: dict[str, Any]) -> dict[str, Any]:
    """Load the checkpoint, the processor and the inputs of this cell."""
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor

    device, dtype = spec["device"], getattr(torch, spec["dtype"])
    card = models.get_card(spec["model_id"])
    folder = Path(spec["checkpoint"])
    model = models.model_class(card).from_pretrained(folder, use_safetensors=True, dtype=dtype)
    model = model.eval().to(device)
    processor = AutoImageProcessor.from_pretrained(folder)
    with Image.open(spec["image"]) as image:
        single, text_source = models.single_inputs(card, processor, image.convert("RGB"), folder)
    inputs = models.forward_inputs(model, models.batch_inputs(single, spec["batch_size"]))
    inputs = {
        key: value.to(device, dtype) if value.is_floating_point() else value.to(device) for key, value in inputs.items()
    }
    return {
        "model": model,
        "inputs": inputs,
        "text_source": text_source,
        "input_shapes": {key: list(value.shape) for key, value in inputs.items()},
    }


def _caller(module: Any, inputs: dict[str, Any], device: str, mode: str | None) -> Any:
    """A no-argument call of `module`; CUDA-graph modes mark a new step so outputs are not overwritten mid-use."""
    import torch

    if device.startswith("cuda") and mode in CUDAGRAPH_MODES:

        def call() -> Any:
            torch.compiler.cudagraph_mark_step_begin()
            return module(**inputs)

        return call
    return lambda: module(**inputs)


def _memory_peak_mib(call: Any, iters: int, device: str) -> tuple[float, float]:
    """Peak memory over `iters` calls of `call` alone, absolute and above the memory in use before."""
    timing.synchronize(device)
    before = timing.current_memory_mib(device)
    timing.reset_peak_memory(device)
    for _ in range(iters):
        call()
    timing.synchronize(device)
    peak = timing.peak_memory_mib(device)
    return peak, max(peak - before, 0.0)


def paired_timing(
    eager: Any, compiled: Any, device: str, min_iters: int, min_time_s: float, max_time_s: float
) -> tuple[list[float], list[float], float]:
    """Alternate eager and compiled calls (order flipped every iteration) until both minimums or the maximum time."""
    eager_ms: list[float] = []
    compiled_ms: list[float] = []
    start = time.perf_counter()
    while True:
        order = ((eager, eager_ms), (compiled, compiled_ms))
        for fn, samples in order if len(eager_ms) % 2 == 0 else reversed(order):
            samples.append(timing.time_call_ms(fn, device)[1])
        elapsed = time.perf_counter() - start
        if (len(eager_ms) >= min_iters and elapsed >= min_time_s) or elapsed >= max_time_s:
            return eager_ms, compiled_ms, elapsed


def eager_only_timing(
    eager: Any, device: str, min_iters: int, min_time_s: float, max_time_s: float
) -> tuple[list[float], float]:
    """Time eager alone (a suite with no compiled variant)."""
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        samples.append(timing.time_call_ms(eager, device)[1])
        elapsed = time.perf_counter() - start
        if (len(samples) >= min_iters and elapsed >= min_time_s) or elapsed >= max_time_s:
            return samples, elapsed


def run_variant(name: str, variant: dict[str, Any], state: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Compile, check and time one variant against eager; a dict of results, status `ok` or `accuracy_fail`."""
    import torch
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    bench, device = spec["benchmark"], spec["device"]
    model, inputs = state["model"], state["inputs"]
    eager = _caller(model, inputs, device, None)
    torch._dynamo.reset()  # a fresh cache: an earlier variant's graph must not be reused
    counters.clear()
    state["phase"] = "compile"
    with inductor_config.patch(variant["inductor"]):
        compiled_module = torch.compile(
            model, mode=variant["mode"], dynamic=variant["dynamic"], fullgraph=variant["fullgraph"]
        )
        compiled = _caller(compiled_module, inputs, device, variant["mode"])
        timing.reset_peak_memory(device)
        output, first_ms = timing.time_call_ms(compiled, device)
        state["phase"] = "run"
        compile_peak_mib = timing.peak_memory_mib(device)
        diff = compare_outputs(state["reference"], output)
        del output
        health = dynamo_health()
        for _ in range(bench["warmup_iters"]):
            compiled()
        peak_mib, delta_mib = _memory_peak_mib(compiled, bench["memory_iters"], device)
        eager_ms, compiled_ms, elapsed_s = paired_timing(
            eager, compiled, device, bench["min_iters"], bench["min_time_s"], bench["max_time_s"]
        )
        health["recompile_count"] = dynamo_health()["graph_count"] - health["graph_count"]  # graphs added after call 1
    tolerance = bench["rtol"] * _TOLERANCE_FACTOR[spec["dtype"]]
    return {
        "variant": name,
        "status": "ok" if diff["max_rel_diff"] <= tolerance else "accuracy_fail",
        "error": None
        if diff["max_rel_diff"] <= tolerance
        else f"max_rel_diff {diff['max_rel_diff']:.3g} > {tolerance}",
        "first_call_s": first_ms / 1000.0,
        "samples_ms": compiled_ms,
        "paired_eager_ms": eager_ms,
        "timed_s": elapsed_s,
        "peak_mem_mib": peak_mib,
        "mem_delta_mib": delta_mib,
        "compile_peak_mem_mib": compile_peak_mib,
        **diff,
        **health,
    }


def run_cell(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every variant of one (model, batch size) cell; one dict per variant, eager first."""
    import torch

    bench, device = spec["benchmark"], spec["device"]
    torch.set_num_threads(bench["num_threads"] or os.cpu_count() or 1)
    variants = spec["variants"]  # name -> variant dict, eager included
    compiled_names = [name for name, variant in variants.items() if variant["compile"]]
    state: dict[str, Any] = {"phase": "load"}
    try:
        with torch.no_grad():
            state.update(_setup(spec))
            eager = _caller(state["model"], state["inputs"], device, None)
            timing.reset_peak_memory(device)
            state["reference"], eager_first_ms = timing.time_call_ms(eager, device)
            for _ in range(bench["warmup_iters"]):
                eager()
            eager_peak, eager_delta = _memory_peak_mib(eager, bench["memory_iters"], device)
    except Exception as error:  # the cell boundary: a load or eager failure fails every variant of the cell
        status = classify_error(error, "load")
        text = "".join(traceback.format_exception_only(error)).strip()
        return [{"variant": name, "status": status, "error": text} for name in variants]

    common = {"text_source": state["text_source"], "input_shapes": state["input_shapes"]}
    results: list[dict[str, Any]] = []
    eager_samples: list[float] = []
    for name in compiled_names:
        try:
            with torch.no_grad():
                result = run_variant(name, variants[name], state, spec)
            eager_samples += result["paired_eager_ms"]
        except Exception as error:  # the cell boundary: record what happened, go on with the next variant
            LOGGER.exception("variant %s failed", name)
            status = classify_error(error, state.get("phase", "run"))
            result = {"variant": name, "status": status, "error": "".join(traceback.format_exception_only(error))}
            torch._dynamo.reset()
        results.append({**common, **result})
    timed_s = None
    if not eager_samples:
        with torch.no_grad():
            eager_samples, timed_s = eager_only_timing(
                eager, device, bench["min_iters"], bench["min_time_s"], bench["max_time_s"]
            )
    eager_result = {
        **common,
        "variant": "eager",
        "status": "ok",
        "error": None,
        "first_call_s": eager_first_ms / 1000.0,
        "samples_ms": eager_samples,
        "timed_s": timed_s,
        "peak_mem_mib": eager_peak,
        "mem_delta_mib": eager_delta,
    }
    return [eager_result, *results]


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON to a temporary file beside `path`, then rename it into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, path)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    spec_path, out_path = Path(sys.argv[1]), Path(sys.argv[2])
    write_json_atomic(out_path, run_cell(json.loads(spec_path.read_text())))


if __name__ == "__main__":
    main()
