"""How a trial process compiles a variant: torch.compile's arguments, the deploy ways, the first answers (at every
served size), the checks of the first output against eager's, the compile's health, and inductor's one-time start-up
paid before any arm compiles. trial.py's processes call `compile_variant` and time what it returns.

Needs torch, like trial.py; a GPU box with nothing else installed runs it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compilebench.harness import checks, timing
from compilebench.harness.names import AOTI_PACKAGE, ARTIFACTS_FILE, DEPLOY_DIR_ENV
from compilebench.records.formats import (
    CACHE_COLD,
    CACHE_WARM,
    DEPLOY_AOTI,
    DEPLOY_ARTIFACTS,
    DEPLOY_REGIONAL,
    DYNAMIC_BATCH,
    DYNAMIC_BATCH_UNBACKED,
    CompileHealth,
    TimingSpec,
    TrialSpec,
    Unsupported,
    VariantSpec,
)


@dataclass(frozen=True)
class Compiled:
    """A variant compiled and checked: its call, and what compiling it measured, named as TrialResult names it
    (`measured()`; tests/test_trial.py checks every name is a TrialResult field)."""

    call: Any
    status: str  # ok | accuracy_fail
    error: str | None
    compile_s: float  # everything before the first output (at every served size)
    compile_peak_mem_mib: float | None
    compile_reserved_mem_mib: float | None
    compile_disturbance: dict[str, float]
    warmup_calls: int
    variant_dtype: str
    task_check: str
    task_agreement: float
    replay_max_rel_diff: float
    health: CompileHealth
    serve_first_call_s: tuple[float, ...]
    serve_graph_counts: tuple[int, ...]
    max_abs_diff: float
    max_rel_diff: float

    def measured(self) -> dict[str, Any]:
        """What it measured, as TrialResult fields (without its call)."""
        return {item.name: getattr(self, item.name) for item in dataclasses.fields(self) if item.name != "call"}


BATCH_DYNAMICS = (DYNAMIC_BATCH, DYNAMIC_BATCH_UNBACKED)


CUDAGRAPH_WARMUP = 3  # calls before timing a CUDA-graph variant: warm-up run, recording, a first replay


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
        sized = (
            inputs
            if size == spec.batch_size
            else convert_inputs(
                loaded["batched"](size), spec.timing.device, getattr(torch, dtype_name), spec.variant.channels_last
            )
        )
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


def check_supported(variant: VariantSpec) -> None:
    """Raise Unsupported where this process's torch cannot run `variant` at all: an inductor option or a deploy its
    release does not have (torch 2.0 has no `freezing`), so an old stack's row says so rather than failing."""
    import torch
    from torch._inductor import config as inductor_config

    version = torch.__version__
    missing = [option for option in variant.inductor if not _has_option(inductor_config, option)]
    if missing:
        raise Unsupported(f"torch {version}'s inductor has no option {', '.join(missing)} (torch._inductor.config)")
    needs = {
        DEPLOY_AOTI: (torch._inductor, "aoti_compile_and_package", "torch._inductor"),
        DEPLOY_REGIONAL: (torch.nn.Module, "compile", "torch.nn.Module"),
        DEPLOY_ARTIFACTS: (getattr(torch, "compiler", None), "save_cache_artifacts", "torch.compiler"),
    }
    if variant.deploy in needs:
        owner, name, where = needs[variant.deploy]
        if not hasattr(owner, name):
            raise Unsupported(f"torch {version} has no {where}.{name} (deploy: {variant.deploy})")
    if variant.dynamic == DYNAMIC_BATCH_UNBACKED and not hasattr(torch._dynamo.decorators, "mark_unbacked"):
        raise Unsupported(f"torch {version} has no torch._dynamo.decorators.mark_unbacked (dynamic: {variant.dynamic})")


def _has_option(config: Any, option: str) -> bool:
    """Whether a dotted inductor option (`triton.cudagraphs`) exists in this torch's config."""
    head, _, rest = option.partition(".")
    return hasattr(config, head) and (not rest or _has_option(getattr(config, head), rest))


def compile_variant(
    spec: TrialSpec, loaded: dict[str, Any], reference: Any, state: dict, own_copy: bool = False
) -> Compiled:
    """Compile the variant (on a copy where `own_copy`) and time its first call on the host clock: compile time, in a
    fresh process on a cold or warm cache, or after the arms before it. Its inductor options are set while it
    compiles (dynamo reads `freezing` as it traces) and are its backend's options too (see compile_kwargs); then the
    first output is checked against eager."""
    from torch._dynamo.utils import counters, guard_failures
    from torch._inductor import config as inductor_config

    variant, timing_spec, device = spec.variant, spec.timing, spec.timing.device
    check_supported(variant)
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
    return Compiled(
        call=call,
        status="accuracy_fail" if problems else "ok",
        error="; ".join(problems) or None,
        compile_s=compile_s,
        compile_peak_mem_mib=compile_peak,
        compile_reserved_mem_mib=compile_reserved,
        compile_disturbance=compile_busy,
        warmup_calls=warmups,
        variant_dtype=dtype_name,
        task_check=compared,
        task_agreement=agreement,
        replay_max_rel_diff=replay["max_rel_diff"],
        health=health,
        serve_first_call_s=tuple(serve_first_s),
        serve_graph_counts=tuple(serve_graphs),
        max_abs_diff=numeric["max_abs_diff"],
        max_rel_diff=numeric["max_rel_diff"],
    )


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
                nn.Conv2d(3, 8, 3, padding=1),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1, groups=2),
                nn.GELU(),
            )
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
    findings 2026-11-27, compile position). Seconds it took."""
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
    try:
        from torch._inductor import async_compile as owner
    except ImportError:  # torch before 2.4 keeps its pool in codecache
        from torch._inductor import codecache as owner

    shutdown = getattr(owner, "shutdown_compile_workers", None)
    if shutdown is not None:
        shutdown()
