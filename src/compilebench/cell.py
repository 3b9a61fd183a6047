"""One benchmark cell, (model, batch size), in its own process: eager and every compiled variant, interleaved.

    python -m compilebench.cell SPEC.json OUT.json                  # run by `benchmark`, one process per cell
    python -m compilebench.cell SPEC.json OUT.json --compile-only    # only time each variant's first call

Per compiled variant: dynamo is reset, the inductor options are patched in, the first call is timed apart
(compile time), the output is checked against eager (numerically and for the task), then eager and compiled calls
alternate on the same inputs until the minimum iterations and minimum time are reached and, if asked, the speedup's
confidence interval is narrow enough (or the maximum time). Eager is always the plain model in `benchmark.dtype`;
a variant's own dtype or channels_last applies to its compiled model. A failing variant is recorded with its status
and error; the others still run. Results go to OUT.json atomically.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
import traceback
from pathlib import Path
from typing import Any

from compilebench import checks, models, timing
from compilebench.files import write_json

LOGGER = logging.getLogger(__name__)

CUDAGRAPH_MODES = ("reduce-overhead",)
CI_CHECK_EVERY = 10  # pairs between two adaptive-stop checks of the speedup CI


OOM_MARKERS = ("out of memory", "outofmemory", "can't allocate memory", "cannot allocate memory", "memoryerror")


def classify_error(error: BaseException, phase: str) -> str:
    """Status of a failed variant: oom (anywhere in the exception chain), compile_error (while compiling) or error."""
    seen: BaseException | None = error
    while seen is not None:
        text = f"{type(seen).__name__}: {seen}".lower()
        if isinstance(seen, MemoryError) or any(marker in text for marker in OOM_MARKERS):
            return "oom"
        seen = seen.__cause__ or seen.__context__
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
    return {
        "task": card.task,
        "model": model,
        "inputs": _convert_inputs(inputs, device, dtype, channels_last=False),
        "text_source": text_source,
        "input_shapes": {key: list(value.shape) for key, value in inputs.items()},
    }


def limit_memory(extra_mib: float) -> None:
    """Cap this process's address space at its current size plus `extra_mib` (0 = no cap): exceeding it is an OOM."""
    if extra_mib <= 0:
        return
    import resource

    with open("/proc/self/statm") as statm:
        current = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (current + int(extra_mib * 2**20), resource.RLIM_INFINITY))


def _convert_inputs(inputs: dict[str, Any], device: str, dtype: Any, channels_last: bool) -> dict[str, Any]:
    """Inputs on `device`; floating-point ones in `dtype`, 4-d images in channels_last if asked."""
    import torch

    converted = {}
    for key, value in inputs.items():
        value = value.to(device, dtype) if value.is_floating_point() else value.to(device)
        if channels_last and value.dim() == 4:
            value = value.contiguous(memory_format=torch.channels_last)
        converted[key] = value
    return converted


def _variant_model(state: dict[str, Any], variant: dict[str, Any], spec: dict[str, Any]) -> tuple[Any, dict, str]:
    """The model and inputs a variant compiles: the eager ones, or a copy in the variant's dtype / memory format."""
    import copy

    import torch

    dtype_name = variant.get("dtype") or spec["dtype"]
    if dtype_name == spec["dtype"] and not variant.get("channels_last"):
        return state["model"], state["inputs"], dtype_name
    model = copy.deepcopy(state["model"]).to(getattr(torch, dtype_name))
    if variant.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    inputs = _convert_inputs(state["inputs"], spec["device"], getattr(torch, dtype_name), variant.get("channels_last"))
    return model, inputs, dtype_name


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


def ci_narrow_enough(eager_ms: list[float], compiled_ms: list[float], target_halfwidth: float) -> bool:
    """Whether the speedup's 95% CI half-width is at most `target_halfwidth` (0 = no target)."""
    if target_halfwidth <= 0:
        return True
    low, high = timing.speedup_ci(eager_ms, compiled_ms, resamples=500)
    return (high - low) / 2 <= target_halfwidth


def paired_timing(
    eager: Any,
    compiled: Any,
    device: str,
    min_iters: int,
    min_time_s: float,
    max_time_s: float,
    target_ci_halfwidth: float = 0.0,
) -> tuple[list[float], list[float], float]:
    """Alternate eager and compiled calls (order flipped every pair) until the minimums (and CI target) or max time."""
    eager_ms: list[float] = []
    compiled_ms: list[float] = []
    start = time.perf_counter()
    while True:
        order = ((eager, eager_ms), (compiled, compiled_ms))
        for fn, samples in order if len(eager_ms) % 2 == 0 else reversed(order):
            samples.append(timing.time_call_ms(fn, device)[1])
        elapsed = time.perf_counter() - start
        if elapsed >= max_time_s:
            return eager_ms, compiled_ms, elapsed
        if len(eager_ms) >= min_iters and elapsed >= min_time_s:
            checkpoint = target_ci_halfwidth <= 0 or len(eager_ms) % CI_CHECK_EVERY == 0
            if checkpoint and ci_narrow_enough(eager_ms, compiled_ms, target_ci_halfwidth):
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


def compile_variant(state: dict[str, Any], variant: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Reset dynamo, compile, time the first call; call it inside the variant's `inductor_options` context."""
    import torch
    from torch._dynamo.utils import counters

    device = spec["device"]
    model, inputs, dtype_name = _variant_model(state, variant, spec)
    torch._dynamo.reset()  # a fresh cache: an earlier variant's graph must not be reused
    counters.clear()
    state["phase"] = "compile"
    compiled_module = torch.compile(
        model, mode=variant["mode"], dynamic=variant["dynamic"], fullgraph=variant["fullgraph"]
    )
    compiled = _caller(compiled_module, inputs, device, variant["mode"])
    timing.reset_peak_memory(device)
    output, first_ms = timing.time_call_ms(compiled, device)
    state["phase"] = "run"
    return {
        "call": compiled,
        "output": output,
        "first_call_s": first_ms / 1000.0,
        "compile_peak_mem_mib": timing.peak_memory_mib(device),
        "dtype": dtype_name,
    }


def inductor_options(variant: dict[str, Any]) -> Any:
    """A context with the variant's torch._inductor.config values, read at every (re)compile inside it."""
    from torch._inductor import config as inductor_config

    return inductor_config.patch(variant["inductor"])


def run_variant(name: str, variant: dict[str, Any], state: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Compile, check and time one variant against eager; status `ok` or `accuracy_fail`."""
    bench, device = spec["benchmark"], spec["device"]
    eager = _caller(state["model"], state["inputs"], device, None)
    with inductor_options(variant):
        compiled = compile_variant(state, variant, spec)
        health = dynamo_health()
        numeric = checks.compare_outputs(state["reference"], compiled["output"])
        task_ok, agreement, compared = checks.task_agreement(
            state["task"], state["reference"], compiled["output"], compiled["dtype"]
        )
        del compiled["output"]
        for _ in range(bench["warmup_iters"]):
            compiled["call"]()
        peak_mib, delta_mib = _memory_peak_mib(compiled["call"], bench["memory_iters"], device)
        eager_ms, compiled_ms, elapsed_s = paired_timing(
            eager,
            compiled["call"],
            device,
            bench["min_iters"],
            bench["min_time_s"],
            bench["max_time_s"],
            bench["target_ci_halfwidth"],
        )
        health["recompile_count"] = dynamo_health()["graph_count"] - health["graph_count"]  # graphs added after call 1
    tolerance = checks.numeric_tolerance(bench["rtol"], compiled["dtype"])
    problems = []
    if numeric["max_rel_diff"] > tolerance:
        problems.append(f"max_rel_diff {numeric['max_rel_diff']:.3g} > {tolerance:g}")
    if not task_ok:
        problems.append(f"task check failed: {compared} agree on {agreement:.3f}")
    return {
        "variant": name,
        "status": "accuracy_fail" if problems else "ok",
        "error": "; ".join(problems) or None,
        "first_call_s": compiled["first_call_s"],
        "samples_ms": compiled_ms,
        "paired_eager_ms": eager_ms,
        "timed_s": elapsed_s,
        "peak_mem_mib": peak_mib,
        "mem_delta_mib": delta_mib,
        "compile_peak_mem_mib": compiled["compile_peak_mem_mib"],
        "task_check": compared,
        "task_agreement": agreement,
        "fell_back_to_eager": health["graph_count"] == 0,
        "variant_dtype": compiled["dtype"],
        **numeric,
        **health,
    }


def _failed(name: str, error: BaseException, phase: str) -> dict[str, Any]:
    return {
        "variant": name,
        "status": classify_error(error, phase),
        "error": "".join(traceback.format_exception_only(error)).strip(),
    }


def run_cell(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every variant of one (model, batch size) cell; one dict per variant, eager first."""
    import torch

    bench, device = spec["benchmark"], spec["device"]
    torch.set_num_threads(bench["num_threads"] or os.cpu_count() or 1)
    variants = spec["variants"]  # name -> variant dict, eager included
    state: dict[str, Any] = {"phase": "load"}
    try:
        with torch.no_grad():
            state.update(_setup(spec))
            limit_memory(bench["cell_memory_limit_mib"])
            eager = _caller(state["model"], state["inputs"], device, None)
            timing.reset_peak_memory(device)
            state["reference"], eager_first_ms = timing.time_call_ms(eager, device)
            for _ in range(bench["warmup_iters"]):
                eager()
            eager_peak, eager_delta = _memory_peak_mib(eager, bench["memory_iters"], device)
    except Exception as error:  # the cell boundary: a load or eager failure fails every variant of the cell
        return [_failed(name, error, "load") for name in variants]

    common = {
        "text_source": state["text_source"],
        "input_shapes": state["input_shapes"],
        "num_threads": torch.get_num_threads(),
    }
    results: list[dict[str, Any]] = []
    eager_samples: list[float] = []
    for name, variant in variants.items():
        if not variant["compile"]:
            continue
        try:
            with torch.no_grad():
                result = run_variant(name, variant, state, spec)
            eager_samples += result["paired_eager_ms"]
        except Exception as error:  # the cell boundary: record what happened, go on with the next variant
            LOGGER.exception("variant %s failed", name)
            result = _failed(name, error, state.get("phase", "run"))
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


def compile_only(spec: dict[str, Any]) -> dict[str, float | None]:
    """First-call time of each compiled variant (e.g. on a warm inductor cache); None where it failed."""
    import torch

    torch.set_num_threads(spec["benchmark"]["num_threads"] or os.cpu_count() or 1)
    times: dict[str, float | None] = {}
    with torch.no_grad():
        state: dict[str, Any] = {"phase": "load", **_setup(spec)}
        for name, variant in spec["variants"].items():
            if not variant["compile"]:
                continue
            try:
                with inductor_options(variant):
                    compiled = compile_variant(state, variant, spec)
                times[name] = compiled["first_call_s"]
            except Exception:  # the first run already recorded this variant's failure
                LOGGER.exception("compile-only: variant %s failed", name)
                times[name] = None
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description="Run one benchmark cell.")
    parser.add_argument("spec", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--compile-only", action="store_true", help="only time each compiled variant's first call")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    spec = json.loads(args.spec.read_text())
    write_json(args.out, compile_only(spec) if args.compile_only else run_cell(spec), indent=None)


if __name__ == "__main__":
    main()
