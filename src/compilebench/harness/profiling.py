"""A compiled call profiled, in the trial process that compiled it: the trial side of `make explain`.

    python -m compilebench.harness.trial SPEC.json OUT.json --profile    # a paired trial, then this; OUT.profile/

Before the variant compiles, inductor's kernel profiling is switched on (`cpp.enable_kernel_profile`: each generated C++
kernel records itself by name; on CUDA the device kernels are the profiler's own), so the profiler sees generated
kernels beside the library calls the compiled program keeps (convolution, matmul) and whatever else runs. After the
trial has timed the variant, `capture` profiles CHUNKS rounds of calls and writes into the folder:

- `trace.json`: the last round in Chrome trace format (Perfetto, chrome://tracing);
- `profile.json`: per round, each event name's calls and self time on the calling thread (µs), the round's wall
  time and calls; dynamo's compile-time table (`compile_times`: its timed functions, seconds, nested); graphs, breaks
  with their reasons, recompiles; the torch release;
- `code/`: the generated code of this compile (wrapper modules and C++ kernels) from the process's inductor cache.

Kernel profiling puts ATen's record_function header into every kernel's C++ build, so this compile's build phase is
longer than a timed cold compile's: phases compare A with B under the same condition. Runs in any environment a
comparison names (torch 2.0 on): what a release lacks is left out, not failed on.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

CHUNKS = 5  # rounds of profiled calls: their spread is the process's own
MIN_CHUNK_S = 0.5  # each round at least this long, at least MIN_CHUNK_CALLS calls
MIN_CHUNK_CALLS = 3
CODE_SUFFIXES = (".py", ".cpp")  # what inductor writes as the compiled program's source (its wrapper, its kernels)
MAX_CODE_BYTES = 20 * 2**20  # a bigger program's code is left in the cache, said in profile.json


def enable_kernel_profile() -> None:
    """Have each generated C++ kernel record itself by name (before anything compiles)."""
    from torch._inductor import config

    if hasattr(config, "cpp") and hasattr(config.cpp, "enable_kernel_profile"):
        config.cpp.enable_kernel_profile = True


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


def generated_code(cache_dir: Path, since: float, folder: Path) -> dict[str, Any]:
    """The generated source written into the process's inductor cache since `since`, copied under `folder`."""
    found = [
        path
        for path in cache_dir.rglob("*")
        if path.suffix in CODE_SUFFIXES
        and path.relative_to(cache_dir).parts[0] != "tmp"  # the temp folder: precompiled headers, not the program
        and path.is_file()
        and path.stat().st_mtime >= since
    ]

    size = sum(path.stat().st_size for path in found)
    if size > MAX_CODE_BYTES:
        return {"files": len(found), "bytes": size, "kept": False}
    for path in found:
        target = folder / path.relative_to(cache_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return {"files": len(found), "bytes": size, "kept": True}


def capture(call: Any, device: str, folder: Path, since: float, health: dict[str, Any]) -> None:
    """Profile CHUNKS rounds of `call` into `folder` (see the module docstring); `since`: when this compile began."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    calls = _calls_per_round(call, device)
    rounds = [_round(call, calls, device, folder / "trace.json" if i == CHUNKS - 1 else None) for i in range(CHUNKS)]
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    code = generated_code(Path(cache), since, folder / "code") if cache else {"files": 0, "bytes": 0, "kept": False}
    payload = {
        "torch": torch.__version__,
        "device": device,
        "rounds": rounds,
        "compile_phases_s": compile_phases(),
        "health": health,
        "code": code,
    }
    tmp = folder / "profile.json.tmp"
    tmp.write_text(json.dumps(payload))
    tmp.replace(folder / "profile.json")
