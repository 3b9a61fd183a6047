"""A compiled call profiled, in the trial process that compiled it: the trial side of `make explain`.

    python -m compilebench.harness.trial SPEC.json OUT.json --profile    # a paired trial, then this; OUT.profile/

After the trial has timed the variant, `capture` wraps each generated C++ kernel of the compiled program in a
profiler range of its own name (`time_generated_kernels`: the kernels are globals of inductor's wrapper module, looked
up at each call, so the program runs as compiled and nothing is built again; on CUDA the device kernels are the
profiler's own), then profiles CHUNKS rounds of calls and writes into the folder:

- `trace.json`: the last round in Chrome trace format (Perfetto, chrome://tracing);
- `profile.json`: per round, each event name's calls and self time on the calling thread (µs), the round's wall
  time and calls; dynamo's compile-time table (`compile_times`: its timed functions, seconds, nested); graphs, breaks
  with their reasons, recompiles; how many kernels were named; the torch release;
- `code/`: the generated code of this compile (the wrapper modules the process loaded, which hold their C++ kernels'
  source, and what inductor wrote into the process's cache).

The process may compile on a warm cache (its comparison's: nothing built, the call as the timing blocks ran it) or an
empty one (for the compile-time table). Runs in any environment a comparison names (torch 2.0 on): what a release
lacks is left out, not failed on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

CHUNKS = 5  # rounds of profiled calls: their spread is the process's own
MIN_CHUNK_S = 0.5  # each round at least this long, at least MIN_CHUNK_CALLS calls
MIN_CHUNK_CALLS = 3
CODE_SUFFIXES = (".py", ".cpp")  # what inductor writes as the compiled program's source (its wrapper, its kernels)
MAX_CODE_BYTES = 20 * 2**20  # a bigger program's code is left in the cache, said in profile.json


KERNEL_NAME = re.compile(r"^(cpp_fused|kernel_cpp_|cpp_kernel)")  # inductor's generated C++ kernels, all releases


def wrapper_modules() -> list[Any]:
    """The wrapper modules of the programs inductor loaded in this process (each holds its kernels as globals and a
    `call`), whatever the release keeps them in."""
    from torch._inductor.codecache import PyCodeCache

    found = list(getattr(PyCodeCache, "modules", []))  # torch 2.1 on
    found += list(getattr(PyCodeCache, "modules_no_attr", {}).values())
    found += list(getattr(PyCodeCache, "cache", {}).values())  # torch 2.0
    return [module for module in dict.fromkeys(found) if callable(getattr(module, "call", None))]


def _named(kernel: Any, name: str) -> Any:
    from torch.profiler import record_function

    def call(*args: Any, **kwargs: Any) -> Any:
        with record_function(name):
            return kernel(*args, **kwargs)

    call.__wrapped__ = kernel
    return call


def time_generated_kernels(modules: list[Any]) -> int:
    """Wrap each generated C++ kernel of `modules` in a profiler range of its name; how many were wrapped. The
    wrapper's `call` looks its kernels up at each call, so the compiled program runs as it was compiled."""
    wrapped = 0
    for module in modules:
        for name, kernel in list(vars(module).items()):
            if KERNEL_NAME.match(name) and callable(kernel) and not hasattr(kernel, "__wrapped__"):
                setattr(module, name, _named(kernel, name))
                wrapped += 1
    return wrapped


def compile_phases() -> dict[str, float]:
    """Dynamo's compile-time table so far: each timed function's seconds, summed over its calls (nested: a phase
    includes those it calls)."""
    from torch._dynamo.utils import compile_times

    try:
        names, values = compile_times(repr="csv", aggregate=True)
    except Exception:  # a release whose table cannot be read this way: no phases, said by their absence
        return {}
    return {str(name): float(value) for name, value in zip(names, values, strict=True)}


def _self_us(event: Any, kind: str) -> float:
    """An averaged event's self time on the CPU or the device (µs, total over its calls), whatever the release
    calls it."""
    names = ("self_cpu_time_total",) if kind == "cpu" else ("self_device_time_total", "self_cuda_time_total")
    for name in names:
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def _round(call: Any, calls: int, device: str, trace: Path | None) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as profiler:
        started = time.perf_counter()
        for _ in range(calls):
            call()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        wall_s = time.perf_counter() - started
    if trace is not None:
        profiler.export_chrome_trace(str(trace))
    events = {}
    for event in profiler.key_averages():
        events[event.key] = {
            "count": int(event.count),
            "self_cpu_us": _self_us(event, "cpu"),
            "self_device_us": _self_us(event, "device"),
        }
    return {"calls": calls, "wall_s": wall_s, "events": events}


def _calls_per_round(call: Any, device: str) -> int:
    import torch

    started = time.perf_counter()
    call()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    one_s = max(time.perf_counter() - started, 1e-6)
    return max(MIN_CHUNK_CALLS, int(MIN_CHUNK_S / one_s) + 1)


def generated_code(cache_dir: Path | None, since: float, modules: list[Any], folder: Path) -> dict[str, Any]:
    """The compiled program's source copied under `folder`: the wrapper modules this process loaded (their C++
    kernels' source is in them) and what inductor wrote into its cache since `since` (an empty cache: the kernels'
    own files)."""
    found: dict[Path, Path] = {}  # source -> its name under folder
    for module in modules:
        path = Path(getattr(module, "__file__", "") or "")
        if path.is_file():
            found[path] = Path(path.parent.name) / path.name
    if cache_dir is not None and cache_dir.is_dir():
        for path in cache_dir.rglob("*"):
            relative = path.relative_to(cache_dir)
            if (
                path.suffix in CODE_SUFFIXES
                and relative.parts[0] != "tmp"  # the temp folder: precompiled headers, not the program
                and path.is_file()
                and path.stat().st_mtime >= since
            ):
                found.setdefault(path, relative)
    size = sum(path.stat().st_size for path in found)
    if size > MAX_CODE_BYTES:
        return {"files": len(found), "bytes": size, "kept": False}
    for path, name in found.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return {"files": len(found), "bytes": size, "kept": True}


def capture(call: Any, device: str, folder: Path, since: float, health: dict[str, Any]) -> None:
    """Profile CHUNKS rounds of `call` into `folder` (see the module docstring); `since`: when this compile began."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    modules = wrapper_modules()
    kernels = time_generated_kernels(modules)
    calls = _calls_per_round(call, device)
    rounds = [_round(call, calls, device, folder / "trace.json" if i == CHUNKS - 1 else None) for i in range(CHUNKS)]
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    code = generated_code(Path(cache) if cache else None, since, modules, folder / "code")
    payload = {
        "torch": torch.__version__,
        "device": device,
        "rounds": rounds,
        "compile_phases_s": compile_phases(),
        "health": health,
        "code": code,
        "kernels_named": kernels,  # generated C++ kernels timed by name (0: none, or a release that hid them)
    }
    tmp = folder / "profile.json.tmp"
    tmp.write_text(json.dumps(payload))
    tmp.replace(folder / "profile.json")
