"""One trial, in its own fresh process: one model at one batch size, eager against (at most) one compiled variant.

    python -m compilebench.harness.trial SPEC.json OUT.json     # run by the launcher, in the environment's interpreter
    python -m compilebench.harness.trial SPEC.json OUT.json --compile-only   # load, compile, first call: fills a cache

The process loads the checkpoint and its inputs, runs eager once as the reference, then compiles the variant and
times its first call on the host clock (compile time: in a fresh process, on a cold or warm inductor cache), checks
the compiled output against eager (numerically and for the task), warms up, measures peak memory alone, and then
alternates eager and compiled calls on the same inputs until the minimum pairs and time are reached. One compiled
variant per process, so no variant's compile time depends on which compiled before it.

On CUDA: float32 numerics (TF32, matmul precision, cuDNN autotuning) are set as the spec says and recorded; a
variant whose mode or options turn on CUDA graphs (reduce-overhead, max-autotune, `triton.cudagraphs`) marks each
step and gets at least CUDAGRAPH_WARMUP calls before timing, so graph recording is never timed.

Needs torch, transformers and what they need (numpy, pillow, safetensors, scipy, pyyaml): this runs in any
environment a comparison names, and on a GPU box with nothing else installed. A failure is a status with its
error; the result is written to OUT.json atomically either way.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from compilebench.harness import checks, fingerprint, models, timing
from compilebench.harness.files import write_json
from compilebench.harness.groups import die_with_parent
from compilebench.harness.records import (
    AOTI_PACKAGE,
    ARTIFACTS_FILE,
    CACHE_COLD,
    CACHE_WARM,
    CPUS_ENV,
    DEPLOY_AOTI,
    DEPLOY_ARTIFACTS,
    DEPLOY_DIR_ENV,
    DEPLOY_REGIONAL,
    DYNAMIC_BATCH,
    DYNAMIC_BATCH_UNBACKED,
    KIND_ARM,
    KIND_COLD,
    LAUNCHER_PID,
    CompileHealth,
    TimingSpec,
    TrialResult,
    TrialSpec,
    VariantSpec,
    usable_cores,
)
from compilebench.harness.turns import Solo, Turns, of_this_process

LOGGER = logging.getLogger(__name__)

BATCH_DYNAMICS = (DYNAMIC_BATCH, DYNAMIC_BATCH_UNBACKED)
CUDAGRAPH_WARMUP = 3  # calls before timing a CUDA-graph variant: warm-up run, recording, a first replay
OOM_MARKERS = ("out of memory", "outofmemory", "can't allocate memory", "cannot allocate memory", "memoryerror")
TIMELINE: dict[str, float] = {}  # this process's moments: seconds since it started, by what it had just done (mark)


def mark(moment: str) -> None:
    """Note that the process has just done `moment`, at its age in seconds (Linux; elsewhere nothing is noted): the
    timeline every result of the process carries, which accounts for its whole wall time, where the phases measured
    on their own (load, compile, timing) leave gaps."""
    age = timing.process_age_s()
    if age is not None:
        TIMELINE[moment] = round(age, 3)


def classify_error(error: BaseException, phase: str) -> str:
    """Status of a failure: oom (anywhere in the exception chain), compile_error (while compiling) or error."""
    seen: BaseException | None = error
    while seen is not None:
        text = f"{type(seen).__name__}: {seen}".lower()
        if isinstance(seen, MemoryError) or any(marker in text for marker in OOM_MARKERS):
            return "oom"
        seen = seen.__cause__ or seen.__context__
    return "compile_error" if phase == "compile" else "error"


def uses_cudagraphs(variant: VariantSpec, device: str) -> bool:
    """Whether a compiled variant runs CUDA graphs on `device` (its mode's options, then its own, decide)."""
    if not variant.compile or not device.startswith("cuda"):
        return False
    from torch._inductor import list_mode_options

    options = {**list_mode_options(variant.mode), **variant.inductor}
    return bool(options.get("triton.cudagraphs", False))


def warmup_calls(variant: VariantSpec, timing_spec: TimingSpec) -> int:
    """Untimed calls after the first: the spec's warm-up, and never fewer than CUDA graphs need."""
    if uses_cudagraphs(variant, timing_spec.device):
        return max(timing_spec.warmup_iters, CUDAGRAPH_WARMUP)
    return timing_spec.warmup_iters


def reduced_float32(timing_spec: TimingSpec) -> bool:
    """Whether float32 work may run in TF32: cuDNN convolutions on a GPU, or matmuls below `highest` precision."""
    cuda_tf32 = timing_spec.device.startswith("cuda") and timing_spec.cudnn_allow_tf32
    return cuda_tf32 or timing_spec.float32_matmul_precision != "highest"


def set_numerics(timing_spec: TimingSpec) -> None:
    """Float32 numerics on purpose, not by default: matmul precision (TF32 for matmuls), cuDNN TF32 and autotuning."""
    import torch

    torch.set_float32_matmul_precision(timing_spec.float32_matmul_precision)
    torch.backends.cudnn.allow_tf32 = timing_spec.cudnn_allow_tf32
    torch.backends.cudnn.benchmark = timing_spec.cudnn_benchmark


def threads(requested: int) -> int:
    """Intra-op threads: the requested number, or one per core this process may run on."""
    if requested:
        return requested
    return len(usable_cores())


def limit_device_memory(extra_mib: float, device: str) -> None:
    """CUDA: cap what the trial may add to the device from now on (0 = no cap) through the caching allocator, so
    exceeding it raises torch's out-of-memory error. (On the CPU the launcher watches the trial's resident memory:
    an address-space cap breaks allocations at random points inside torch, and a CUDA context maps far more virtual
    memory than it uses.)"""
    if extra_mib <= 0 or not device.startswith("cuda"):
        return
    import torch

    index = torch.device(device).index or 0
    total = torch.cuda.get_device_properties(index).total_memory
    allowed = torch.cuda.memory_allocated(index) + extra_mib * 2**20
    torch.cuda.set_per_process_memory_fraction(min(allowed / total, 1.0), index)


def convert_inputs(inputs: dict[str, Any], device: str, dtype: Any, channels_last: bool) -> dict[str, Any]:
    """Inputs on `device`; floating-point ones in `dtype`, 4-d images in channels_last if asked."""
    import torch

    converted = {}
    for key, value in inputs.items():
        value = value.to(device, dtype) if value.is_floating_point() else value.to(device)
        if channels_last and value.dim() == 4:
            value = value.contiguous(memory_format=torch.channels_last)
        converted[key] = value
    return converted


def load(spec: TrialSpec) -> dict[str, Any]:
    """The checkpoint on the device in the trial's dtype, and the inputs its processor makes from the image."""
    import torch
    from PIL import Image

    device, dtype = spec.timing.device, getattr(torch, spec.timing.dtype)
    folder = Path(spec.model.checkpoint)
    model_class = models.model_class(spec.model)
    mark("model code imported")
    model = model_class.from_pretrained(folder, use_safetensors=True, dtype=dtype)
    mark("checkpoint read")
    model = model.eval().to(device)
    mark("on the device")
    processor = models.load_processor(folder)
    with Image.open(spec.image) as image:
        single, text_source = models.single_inputs(spec.model, processor, image.convert("RGB"), folder)
    inputs = models.forward_inputs(model, models.batch_inputs(single, spec.batch_size))
    return {
        "model": model,
        "inputs": convert_inputs(inputs, device, dtype, channels_last=False),
        "batched": lambda size: models.forward_inputs(model, models.batch_inputs(single, size)),  # for `serve`
        "text_source": text_source,
        "input_shapes": {key: list(value.shape) for key, value in inputs.items()},
    }


def variant_model(
    loaded: dict[str, Any], variant: VariantSpec, timing_spec: TimingSpec, own_copy: bool = False
) -> tuple[Any, dict, str]:
    """The model and inputs a variant compiles: eager's own, or a copy (in the variant's dtype and memory format, or
    because `own_copy`: an arm of a timing process compiles a model no other arm compiled)."""
    import torch

    dtype_name = variant.dtype or timing_spec.dtype
    if dtype_name == timing_spec.dtype and not variant.channels_last and not own_copy:
        return loaded["model"], loaded["inputs"], dtype_name
    model = copy.deepcopy(loaded["model"]).to(getattr(torch, dtype_name))
    if variant.channels_last:
        model = model.to(memory_format=torch.channels_last)
    inputs = convert_inputs(loaded["inputs"], timing_spec.device, getattr(torch, dtype_name), variant.channels_last)
    return model, inputs, dtype_name


def caller(module: Any, inputs: dict[str, Any], cudagraphs: bool) -> Any:
    """A no-argument call of `module`; CUDA-graph variants mark a new step so outputs are not overwritten in use."""
    import torch

    if cudagraphs:

        def call() -> Any:
            torch.compiler.cudagraph_mark_step_begin()
            return module(**inputs)

        return call
    return lambda: module(**inputs)


def deploy_folder() -> Path:
    """Where a run's portable artifacts or AOTInductor package live, shared by its cold and warm processes."""
    folder = os.environ.get(DEPLOY_DIR_ENV)
    if not folder:
        raise RuntimeError(f"{DEPLOY_DIR_ENV} is not set: the launcher gives artifacts and aoti trials a folder")
    return Path(folder)


def repeated_blocks(model: Any) -> list[Any]:
    """The model's repeated blocks: the items of every ModuleList of two or more modules of one class the model
    defines (transformer layers, ResNet and Swin stages; not torch's own Linear or LayerNorm), outermost only."""
    import torch

    blocks: list[Any] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside or not isinstance(module, torch.nn.ModuleList) or len(module) < 2:
            continue
        kinds = {type(m) for m in module}
        if len(kinds) == 1 and not next(iter(kinds)).__module__.startswith("torch."):
            blocks.extend(module)
            inside.update(id(sub) for block in module for sub in block.modules())
    return blocks


def save_artifacts(folder: Path) -> None:
    """The cold process's compile, as portable cache artifacts another process loads into an empty cache."""
    import torch

    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        raise RuntimeError("torch.compiler.save_cache_artifacts() saved nothing (no compile was cached)")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ARTIFACTS_FILE).write_bytes(saved[0])


def compile_kwargs(variant: VariantSpec) -> dict[str, Any]:
    """torch.compile's arguments for a variant: its mode alone (the doc's call), or, with inductor options, the mode's
    options and the variant's as `options`. Dynamo keeps one cache per `forward` and reuses a graph for any backend
    that compares equal, and inductor's backend compares by its options: a config patch alone (what makes `freezing`
    take effect) is invisible to it, so a frozen arm beside a default one in one process would silently run the
    default graph. (torch.compile takes `mode` or `options`, not both.)"""
    dynamic = None if variant.dynamic in BATCH_DYNAMICS else variant.dynamic  # batch: marked on the inputs
    kwargs: dict[str, Any] = {"dynamic": dynamic, "fullgraph": variant.fullgraph}
    if not variant.inductor:
        return {**kwargs, "mode": variant.mode}
    from torch._inductor import list_mode_options

    mode_options = list_mode_options(variant.mode, dynamic) if variant.mode != "default" else {}
    return {**kwargs, "options": {**mode_options, **variant.inductor}}


def compiled_module(model: Any, inputs: dict[str, Any], variant: VariantSpec, cache: str) -> Any:
    """The compiled model as a fresh process gets it under `variant.deploy` (timed by the caller up to the first
    output): jit and artifacts compile with torch.compile (artifacts first loads the cold process's portable cache
    artifacts, on a warm trial); regional compiles each repeated block in place; aoti exports and packages on the
    cold trial, and every trial loads the package."""
    import torch

    options = compile_kwargs(variant)
    if variant.deploy == DEPLOY_REGIONAL:
        blocks = repeated_blocks(model)
        if not blocks:
            raise ValueError(f"{type(model).__name__} has no repeated block (no ModuleList of one class) to compile")
        for block in blocks:
            block.compile(**options)
        return model
    if variant.deploy == DEPLOY_AOTI:
        folder = deploy_folder()
        package = folder / AOTI_PACKAGE
        if cache == CACHE_COLD or not package.exists():
            folder.mkdir(parents=True, exist_ok=True)
            exported = torch.export.export(model, args=(), kwargs=inputs, strict=False)
            torch._inductor.aoti_compile_and_package(
                exported, package_path=str(package), inductor_configs=dict(variant.inductor)
            )
        runner = torch._inductor.aoti_load_package(str(package))
        return lambda **kwargs: runner(**kwargs)
    if variant.deploy == DEPLOY_ARTIFACTS and cache == CACHE_WARM:
        artifacts = deploy_folder() / ARTIFACTS_FILE
        if not artifacts.exists():
            raise FileNotFoundError(f"{artifacts}: the cold trial of this run left no cache artifacts")
        torch.compiler.load_cache_artifacts(artifacts.read_bytes())
    return torch.compile(model, **options)


def mark_batch_dynamic(inputs: dict[str, Any], how: str) -> dict[str, Any]:
    """Dim 0 of every input tensor marked dynamic (`batch`) or unbacked (`batch-unbacked`)."""
    import torch

    mark = torch._dynamo.mark_dynamic if how == DYNAMIC_BATCH else torch._dynamo.decorators.mark_unbacked
    for value in inputs.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            mark(value, 0)
    return inputs


def serve_sizes(
    spec: TrialSpec, loaded: dict[str, Any], module: Any, inputs: dict[str, Any], dtype_name: str, cudagraphs: bool
) -> tuple[Any, list[float], list[int]]:
    """The one compiled model's first call at each of the suite's batch sizes, smallest first, as a server meets
    them: (the output at the trial's own batch size, first-call seconds, dynamo graphs after each call)."""
    import torch
    from torch._dynamo.utils import counters

    output, first_call_s, graphs = None, [], []
    for size in spec.serve_batch_sizes:
        sized = inputs if size == spec.batch_size else convert_inputs(
            loaded["batched"](size), spec.timing.device, getattr(torch, dtype_name), spec.variant.channels_last
        )  # fmt: skip
        if spec.variant.dynamic in BATCH_DYNAMICS:
            mark_batch_dynamic(sized, spec.variant.dynamic)
        out, seconds = timing.time_first_call_s(caller(module, sized, cudagraphs), spec.timing.device)
        first_call_s.append(seconds)
        graphs.append(int(counters["stats"].get("unique_graphs", 0)))
        if size == spec.batch_size:
            output = out
        del out
    return output, first_call_s, graphs


def first_answers(
    spec: TrialSpec, loaded: dict[str, Any], module: Any, inputs: dict[str, Any], dtype_name: str, cudagraphs: bool
) -> tuple[Any, list[float], list[int]]:
    """The compiled model's first call: at every served size for a `serve` variant (see serve_sizes), else at the
    trial's batch size alone, its batch dim marked first where the variant asks (then no per-size lists)."""
    if spec.serve_batch_sizes:
        return serve_sizes(spec, loaded, module, inputs, dtype_name, cudagraphs)
    if spec.variant.dynamic in BATCH_DYNAMICS:
        mark_batch_dynamic(inputs, spec.variant.dynamic)
    output, _ = timing.time_first_call_s(caller(module, inputs, cudagraphs), spec.timing.device)
    return output, [], []


def recompile_reasons() -> tuple[str, ...]:
    """The guard failures that made dynamo recompile since the last reset, first line each (at most 20)."""
    from torch._dynamo.utils import guard_failures

    reasons = [str(reason).splitlines()[0][:300] for failures in guard_failures.values() for reason in failures]
    return tuple(reasons[:20])


def compile_health(first: dict[str, Any] | None = None) -> CompileHealth:
    """Graphs, graph breaks with reasons and inductor's pattern counters since the last reset (recompiles: graphs
    added after `first`, the health read right after the first call)."""
    from torch._dynamo.utils import counters

    breaks = dict(counters["graph_break"])
    graphs = int(counters["stats"].get("unique_graphs", 0))
    return CompileHealth(
        graph_count=graphs,
        graph_break_count=int(sum(breaks.values())),
        graph_break_reasons=tuple(list(breaks)[:20]),
        recompile_count=graphs - first["graph_count"] if first else 0,
        fell_back_to_eager=graphs == 0,
        inductor_counters={key: int(value) for key, value in counters["inductor"].items()},
        recompile_reasons=recompile_reasons(),
    )


def compile_variant(
    spec: TrialSpec, loaded: dict[str, Any], reference: Any, state: dict, own_copy: bool = False
) -> dict[str, Any]:
    """Compile the variant (on a copy where `own_copy`) and time its first call on the host clock: compile time, in a
    fresh process on a cold or warm cache, or after the arms before it. Its inductor options are set while it
    compiles (dynamo reads `freezing` as it traces) and are its backend's options too (see compile_kwargs); then the
    first output is checked against eager. Returns the call, what the compile measured and the checks."""
    from torch._dynamo.utils import counters, guard_failures
    from torch._inductor import config as inductor_config

    variant, timing_spec, device = spec.variant, spec.timing, spec.timing.device
    model, inputs, dtype_name = variant_model(loaded, variant, timing_spec, own_copy)
    cudagraphs = uses_cudagraphs(variant, device)
    counters.clear()
    guard_failures.clear()
    with inductor_config.patch(variant.inductor):  # read at every (re)compile inside it
        state["phase"] = "compile"
        timing.reset_peak_memory(device)
        compiling = timing.cpu_snapshot()
        started = time.perf_counter()
        module = compiled_module(model, inputs, variant, spec.cache)
        call = caller(module, inputs, cudagraphs)
        output, serve_first_s, serve_graphs = first_answers(spec, loaded, module, inputs, dtype_name, cudagraphs)
        compile_s = time.perf_counter() - started  # everything before the first output (at every served size)
        compile_busy = timing.disturbance(compiling, timing.cpu_snapshot())
        if variant.deploy == DEPLOY_ARTIFACTS and spec.cache == CACHE_COLD:
            save_artifacts(deploy_folder())
        state["phase"] = "run"
        compile_peak = timing.peak_memory_mib(device)
        first = compile_health()
        # An arm: the guards that failed so far were those of the other arms' graphs of the same code (their backends,
        # their modules), not recompiles of its own; its own come after its first answer.
        if own_copy:
            guard_failures.clear()
        numeric = checks.compare_outputs(reference, output)
        task_ok, agreement, compared = checks.task_agreement(loaded["task"], reference, output, dtype_name)
        del output
        warmups = warmup_calls(variant, timing_spec)
        for _ in range(warmups):  # a CUDA-graph variant records its graph here: never timed
            call()
        replay = checks.compare_outputs(reference, call())  # a call after warm-up: a CUDA graph's replay
        compile_reserved = timing.peak_reserved_mib(device)  # the graph pool of a CUDA-graph variant included
        health = compile_health({"graph_count": first.graph_count})  # recompiles: graphs the warm-up added
    if variant.deploy == DEPLOY_AOTI:  # a package runs no dynamo graph, and is compiled all the same
        health = dataclasses.replace(health, fell_back_to_eager=False)
    tolerance = checks.numeric_tolerance(timing_spec.rtol, dtype_name, reduced_float32(timing_spec))
    problems = []
    if numeric["max_rel_diff"] > tolerance:
        problems.append(f"max_rel_diff {numeric['max_rel_diff']:.3g} > {tolerance:g}")
    if replay["max_rel_diff"] > tolerance:
        problems.append(f"after warm-up, max_rel_diff {replay['max_rel_diff']:.3g} > {tolerance:g}")
    if not task_ok:
        problems.append(f"task check failed: {compared} agree on {agreement:.3f}")
    return {
        "call": call,
        "status": "accuracy_fail" if problems else "ok",
        "error": "; ".join(problems) or None,
        "compile_s": compile_s,
        "compile_peak_mem_mib": compile_peak,
        "compile_reserved_mem_mib": compile_reserved,
        "compile_disturbance": compile_busy,
        "warmup_calls": warmups,
        "variant_dtype": dtype_name,
        "task_check": compared,
        "task_agreement": agreement,
        "replay_max_rel_diff": replay["max_rel_diff"],
        "health": health,
        "serve_first_call_s": tuple(serve_first_s),
        "serve_graph_counts": tuple(serve_graphs),
        **numeric,
    }


def measured_of(compiled: dict[str, Any]) -> dict[str, Any]:
    """A compile_variant result as TrialResult fields (without its call)."""
    return {key: value for key, value in compiled.items() if key != "call"}


def graphs_so_far() -> int:
    """Dynamo graphs made since its counters were last cleared."""
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))


def with_recompiles(health: CompileHealth, graphs: int) -> CompileHealth:
    """`health` with `graphs` more recompiles (made after it was read: while timing) and their guards' reasons."""
    reasons = tuple(dict.fromkeys(health.recompile_reasons + recompile_reasons()))[:20]
    return dataclasses.replace(health, recompile_count=health.recompile_count + graphs, recompile_reasons=reasons)


def startup_network(device: str) -> tuple[Any, Any]:
    """A small network of the operations the doc's vision models are made of (convolution, batch norm, pooling,
    attention, layer norm, interpolation, softmax), and an input for it."""
    import torch
    from torch import nn

    class StartupNetwork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.convolutions = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1, groups=2), nn.GELU(),
            )  # fmt: skip
            self.norm = nn.LayerNorm(16)
            self.qkv = nn.Linear(16, 48)
            self.head = nn.Linear(16, 10)

        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            tokens = self.convolutions(pixels).flatten(2).transpose(1, 2)
            query, key, value = self.qkv(self.norm(tokens)).chunk(3, dim=-1)
            tokens = tokens + nn.functional.scaled_dot_product_attention(query, key, value)
            grid = tokens.transpose(1, 2).reshape(1, 16, 4, 4)
            grid = nn.functional.interpolate(grid, size=(8, 8), mode="bilinear", align_corners=False)
            return self.head(grid.mean((2, 3))).softmax(-1)

    return StartupNetwork().eval().to(device), torch.ones(1, 3, 8, 8, device=device)


def start_inductor(device: str) -> float:
    """Compile and call a small network (startup_network), so the process's one-time inductor start-up (imports,
    its code caches, the compiler's probes, the first lowering of each kind of operation) is paid before any arm
    compiles, and each arm's compile time is its own, whatever its position (a one-line function paid too little:
    benchmarks/compile_position.py measures both). Seconds it took."""
    import torch

    started = time.perf_counter()
    network, pixels = startup_network(device)
    with torch.no_grad():
        torch.compile(network)(pixels)
    timing.synchronize(device)
    return time.perf_counter() - started


def stop_compile_workers() -> None:
    """End inductor's pool of compile workers before timing: idle or not, nothing of the compile runs beside the
    timed calls (a recompile starts them again)."""
    from torch._inductor import async_compile

    shutdown = getattr(async_compile, "shutdown_compile_workers", None)
    if shutdown is not None:
        shutdown()


def time_arms(calls: list[Any], timing_spec: TimingSpec, start: int, turns: Solo | None = None) -> dict[str, Any]:
    """Warm every arm up in rounds, then time them in rounds (index 0 is eager), in turns with its block's other
    processes where they run together (turns.py); the machine's state around it, and its disturbance while timing
    (taking turns: during its own turns only)."""
    device, turns = timing_spec.device, turns or Solo()
    state_before = timing.machine_state(device)
    rounds, warmup_s, drift = timing.warm_up(calls, device, timing_spec.warmup_iters, timing_spec.warmup_s, start,
                                             turns)  # fmt: skip
    mark("warmed up")
    turns.start_metering(timing.cpu_snapshot)  # alone: around the timing; taking turns: during its own turns
    samples, timed_s = timing.round_samples(
        calls, device, timing_spec.min_iters, timing_spec.min_time_s, timing_spec.max_time_s, start,
        timing_spec.target_ci_halfwidth, turns,
    )  # fmt: skip
    busy = timing.disturbance(*turns.metered())
    mark("timed")
    return {"samples": samples, "timed_s": timed_s, "disturbance": busy, "warmup_s": warmup_s, "warmup_drift": drift,
            "warmup_rounds": rounds,
            "device_state": {"start": state_before, "end": timing.machine_state(device)}}  # fmt: skip


def _message(error: BaseException) -> str:
    return "".join(traceback.format_exception_only(error)).strip()


def start_process(spec: TrialSpec, known: dict[str, Any], waited_s: float = 0.0) -> tuple[dict[str, Any], Any, Any]:
    """What every kind of trial process does first: threads and numerics set, the machine recorded, the checkpoint
    loaded, eager's first call (the reference output), its warm-up and its peak memory, measured while eager's model
    is the only one loaded. Returns (loaded, eager call, reference output); fills `known`. `waited_s`: what the
    process spent waiting for its first turn (turns.py), not part of its start-up."""
    import torch

    timing_spec, device = spec.timing, spec.timing.device
    mark("imported")  # the interpreter, torch and the harness
    torch.set_num_threads(threads(timing_spec.num_threads))
    set_numerics(timing_spec)
    known["environment"] = fingerprint.collect(device)
    known["device_state"] = {"start": timing.machine_state(device)}  # a timing process adds its timing's start and end
    known["num_threads"] = torch.get_num_threads()
    age_s = timing.process_age_s()
    known["startup_s"] = None if age_s is None else age_s - waited_s
    mark("started")
    started = time.perf_counter()
    loaded = load(spec)
    known["load_s"] = time.perf_counter() - started
    mark("loaded")
    loaded["task"] = spec.model.task
    known.update(input_shapes=loaded["input_shapes"], text_source=loaded["text_source"])
    limit_device_memory(timing_spec.memory_limit_mib, device)
    eager = caller(loaded["model"], loaded["inputs"], cudagraphs=False)
    timing.reset_peak_memory(device)
    reference, eager_first_s = timing.time_first_call_s(eager, device)
    for _ in range(timing_spec.warmup_iters):
        eager()
    eager_peak, eager_delta = timing.memory_peak_mib(eager, timing_spec.memory_iters, device)
    known.update(eager_first_call_s=eager_first_s, eager_peak_mem_mib=eager_peak, eager_mem_delta_mib=eager_delta)
    mark("eager measured")
    return loaded, eager, reference


def failed_variant(spec: TrialSpec, error: Exception, state: dict) -> tuple[str, str]:
    """A variant that failed (eager is still measured): its status and error, dynamo reset for what follows."""
    import torch

    LOGGER.exception("trial %s: variant %s failed while %s", spec.trial_id, spec.variant.name, state["phase"])
    torch._dynamo.reset()
    return classify_error(error, state["phase"]), _message(error)


def run_trial(spec: TrialSpec) -> TrialResult:
    """A paired trial: eager against one variant in this process (compiled on a cold or warm cache, then both timed
    in alternating rounds); a failure anywhere is a status with its error, never an exception."""
    import torch

    timing_spec, device = spec.timing, spec.timing.device
    state: dict[str, Any] = {"phase": "load"}
    known: dict[str, Any] = {}
    try:
        with torch.no_grad():
            loaded, eager, reference = start_process(spec, known)
            failure = None
            if spec.variant.compile:
                try:
                    torch._dynamo.reset()
                    compiled = compile_variant(spec, loaded, reference, state)
                    graphs = graphs_so_far()
                    peak, delta = timing.memory_peak_mib(compiled["call"], timing_spec.memory_iters, device)
                    reserved = timing.peak_reserved_mib(device)
                    mark(f"{spec.variant.name} compiled")
                    stop_compile_workers()
                    mark("compile workers stopped")
                    timed = time_arms([eager, compiled["call"]], timing_spec, spec.replicate)
                    eager_ms, compiled_ms = timed.pop("samples")
                    health = with_recompiles(compiled["health"], graphs_so_far() - graphs)
                    measured = {**measured_of(compiled), **timed, "health": health, "peak_mem_mib": peak,
                                "mem_delta_mib": delta, "reserved_mem_mib": reserved, "eager_ms": tuple(eager_ms),
                                "compiled_ms": tuple(compiled_ms)}  # fmt: skip
                    measured.pop("warmup_rounds")
                except Exception as error:  # the variant failed: eager is still measured, for the eager run
                    failure = failed_variant(spec, error, state)
            if not spec.variant.compile or failure is not None:
                state["phase"] = "run"
                for _ in range(timing_spec.warmup_iters if failure else 0):  # warm again after a failed compile
                    eager()
                before = timing.cpu_snapshot()
                samples, timed_s = timing.single_samples(
                    eager, device, timing_spec.min_iters, timing_spec.min_time_s, timing_spec.max_time_s
                )
                mark("timed")
                status, error_text = failure or ("ok", None)
                measured = {"status": status, "error": error_text, "eager_ms": tuple(samples), "timed_s": timed_s,
                            "warmup_calls": timing_spec.warmup_iters,
                            "disturbance": timing.disturbance(before, timing.cpu_snapshot())}  # fmt: skip
    except Exception as error:  # the trial boundary: what happened becomes the result
        LOGGER.exception("trial %s failed while %s", spec.trial_id, state["phase"])
        return TrialResult.failed(spec.trial_id, classify_error(error, state["phase"]), _message(error), **known)
    return TrialResult(trial_id=spec.trial_id, **{**known, **measured})


def run_cold(spec: TrialSpec) -> TrialResult:
    """A compile-only trial (on an empty cache, or priming a shared one): eager's reference, then the variant
    compiled, its first call timed (cold compile time), checked, warmed up and its peak memory measured while it is
    the only compiled model in the process. No steady-state timing: timing processes do that from the warm cache."""
    import torch

    state: dict[str, Any] = {"phase": "load"}
    known: dict[str, Any] = {}
    try:
        with torch.no_grad():
            loaded, _eager, reference = start_process(spec, known)
            compiled = compile_variant(spec, loaded, reference, state)
            timing.reset_peak_memory(spec.timing.device)
            peak, delta = timing.memory_peak_mib(compiled["call"], spec.timing.memory_iters, spec.timing.device)
            mark(f"{spec.variant.name} compiled")
            measured = {**measured_of(compiled), "peak_mem_mib": peak, "mem_delta_mib": delta,
                        "reserved_mem_mib": timing.peak_reserved_mib(spec.timing.device)}  # fmt: skip
    except Exception as error:  # the trial boundary
        LOGGER.exception("cold trial %s failed while %s", spec.trial_id, state["phase"])
        return TrialResult.failed(spec.trial_id, classify_error(error, state["phase"]), _message(error), **known)
    return TrialResult(trial_id=spec.trial_id, **{**known, **measured})


def run_arms(specs: list[TrialSpec], turns: Solo | None = None) -> list[TrialResult]:
    """A timing process: eager and every compiled arm of one (environment, model, batch size). Inductor is started
    first (start_inductor); then each compiled arm compiles its own copy of the model, in the listed order (the plan
    rotates it per block), from the warm cache of its model and batch size; an arm that fails is a status, and the
    others go on. With the compile workers stopped, every arm is warmed up and timed in rounds
    (timing.round_samples), so each arm's i-th call and eager's come from the same round. Where the block's
    processes run together (turns.py), all of that up to the compile workers' stop is this process's first turn,
    and each round a turn."""
    import torch

    first, timing_spec, turns = specs[0], specs[0].timing, turns or Solo()
    state: dict[str, Any] = {"phase": "load"}
    known: dict[str, Any] = {}
    arms = tuple(spec.variant.name for spec in specs)
    turns.take()
    if isinstance(turns, Turns):
        mark("its turn")  # the time before is the interpreter's, the harness's imports and the wait for this turn
    try:
        with torch.no_grad():
            loaded, eager, reference = start_process(first, known, waited_s=turns.waited_s)
            calls, compiled_arms, outcomes = [eager], [], {}
            if any(spec.variant.compile for spec in specs):
                state["phase"] = "compile"
                known["inductor_startup_s"] = start_inductor(timing_spec.device)
                mark("inductor started")
            for position, spec in enumerate(s for s in specs if s.variant.compile):
                try:
                    compiled = compile_variant(spec, loaded, reference, state, own_copy=True)
                    _, delta = timing.memory_peak_mib(compiled["call"], timing_spec.memory_iters, timing_spec.device)
                    outcomes[spec.trial_id] = {**measured_of(compiled), "mem_delta_mib": delta,
                                               "compile_position": position}  # fmt: skip
                    calls.append(compiled["call"])
                    compiled_arms.append(spec)
                    mark(f"{spec.variant.name} compiled")
                except Exception as error:  # this arm failed; eager and the other arms are still timed
                    status, text = failed_variant(spec, error, state)
                    outcomes[spec.trial_id] = {"status": status, "error": text, "compile_position": position}
                    if status == "oom":
                        raise
            stop_compile_workers()
            mark("compile workers stopped")
            turns.give(more=True)  # the set-up turn: the rounds follow
            state["phase"] = "run"
            graphs = graphs_so_far()  # the last arm's; made while timing, a graph means a guard failed
            timed = time_arms(calls, timing_spec, first.replicate, turns)
            recompiles = graphs_so_far() - graphs
    except Exception as error:  # the process boundary: every arm ends with what happened
        LOGGER.exception("timing process %s failed while %s", first.process_id, state["phase"])
        status, text = classify_error(error, state["phase"]), _message(error)
        return [TrialResult.failed(spec.trial_id, status, text, arms=arms, **known) for spec in specs]
    samples = timed.pop("samples")
    timed.pop("warmup_rounds")
    eager_ms = tuple(samples[0])
    shared = {**known, **timed, "arms": arms, "eager_ms": eager_ms, "warmup_calls": timing_spec.warmup_iters,
              "turn_wait_s": turns.waited_s if isinstance(turns, Turns) else None}  # fmt: skip
    results = []
    for spec in specs:
        if not spec.variant.compile:
            results.append(TrialResult(trial_id=spec.trial_id, status="ok", **shared))
            continue
        outcome = dict(outcomes[spec.trial_id])
        timed_ids = [arm.trial_id for arm in compiled_arms]
        if spec.trial_id in timed_ids:  # every arm's health counts the process's recompiles while timing
            outcome["compiled_ms"] = tuple(samples[1 + timed_ids.index(spec.trial_id)])
            outcome["health"] = with_recompiles(outcome["health"], recompiles)
        results.append(TrialResult(trial_id=spec.trial_id, **{**shared, **outcome}))
    return results


def run_process(specs: list[TrialSpec], turns: Solo | None = None) -> list[TrialResult]:
    """What one fresh process measures for its trials: a timing process's arms (taking turns with its block's other
    processes where they run together), or one cold or paired trial."""
    if specs[0].kind == KIND_ARM:
        return run_arms(specs, turns)
    if len(specs) != 1:
        raise ValueError(f"a process of kind {specs[0].kind} runs one trial, got {len(specs)}")
    return [run_cold(specs[0]) if specs[0].kind == KIND_COLD else run_trial(specs[0])]


def end_with_launcher() -> None:
    """On Linux, have the kernel end this trial when its launcher dies (a `kill -9` of the benchmark); otherwise it
    would run on unseen, for minutes. Its compile workers exit when it does (their pipe to it closes)."""
    expected = os.environ.get(LAUNCHER_PID)
    if not expected or not die_with_parent():
        return
    if os.getppid() != int(expected):  # the launcher died before the request took effect
        os._exit(1)


def leave() -> None:
    """End the process once its result is on disk, without the interpreter's teardown (every module, library and
    tensor freed, the libraries' exit handlers): seconds of each process's wall time that measure nothing
    (benchmarks/process_time.py shows them as `exit`). Compile workers are stopped first, as their exit handler
    would (in a process that compiled), and the logs and output streams flushed."""
    if "torch._inductor.async_compile" in sys.modules:
        stop_compile_workers()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def pin_to_slot() -> None:
    """Run on the cores the slot was given (COMPILEBENCH_CPUS, set by an executor that runs slots side by side)."""
    cores = os.environ.get(CPUS_ENV)
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(core) for core in cores.split(",")})


def main() -> None:
    end_with_launcher()
    pin_to_slot()
    parser = argparse.ArgumentParser(description="Run one process's trials in this process.")
    parser.add_argument("spec", type=Path, help="a trial spec, or a list of them: a timing process's arms")
    parser.add_argument("out", type=Path, help="the results, a list in the specs' order")
    parser.add_argument("--compile-only", action="store_true", help="load, compile, check: fill the cache")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.time()
    raw = json.loads(args.spec.read_text())
    specs = [TrialSpec.from_dict(item) for item in (raw if isinstance(raw, list) else [raw])]
    results = [run_cold(specs[0])] if args.compile_only else run_process(specs, of_this_process())
    mark("measured")
    rows = [{**result.to_dict(), "started_at": started, "timeline_s": dict(TIMELINE)} for result in results]
    write_json(args.out, rows, indent=None)
    leave()


if __name__ == "__main__":
    main()
