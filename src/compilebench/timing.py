"""The one place where time and memory are measured: timers, peak memory, and the measurement loops.

Steady-state calls: CUDA events around the call on a GPU (read after a synchronize), `perf_counter_ns` on the CPU.
A first call (compile time: seconds of host work) is timed on the host clock between two synchronizes, as the
dynamo harness does. Memory: the allocator's peaks on CUDA (allocated and reserved); on the CPU, the process's
peak RSS (VmHWM), reset per phase. How busy the machine was while a process timed (other processes' CPU, the VM's
steal, the load) is read from /proc around the timed window. Statistics of the samples live in `stats`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compilebench import stats

CI_CHECK_EVERY = 10  # pairs between two adaptive-stop checks of the speedup CI


def synchronize(device: str) -> None:
    """Wait for queued device work (no-op on the CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(torch.device(device))


def time_call_ms(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """Run `fn` once in steady state; its output and its time in ms (CUDA events on a GPU)."""
    if device.startswith("cuda"):
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        return out, float(start.elapsed_time(end))
    begin = time.perf_counter_ns()
    out = fn()
    return out, (time.perf_counter_ns() - begin) / 1e6


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: /proc/self/stat against CLOCK_BOOTTIME, 10 ms ticks); None
    elsewhere."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks since boot
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started_s
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def time_first_call_s(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """Run `fn` once on the host clock between synchronizes: for calls dominated by host work (compiling)."""
    synchronize(device)
    begin = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - begin


def reset_peak_memory(device: str) -> None:
    """Start a new peak-memory window."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(torch.device(device))
        return
    clear_refs = Path("/proc/self/clear_refs")
    if clear_refs.exists():
        clear_refs.write_text("5")  # 5 resets the peak RSS (VmHWM) to the current RSS


def current_memory_mib(device: str) -> float:
    """Memory in use now: allocated on CUDA, RSS on the CPU."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.memory_allocated(torch.device(device)) / 2**20
    return _status_kib("VmRSS") / 1024


def peak_memory_mib(device: str) -> float:
    """Peak memory since the last reset: max allocated on CUDA, VmHWM on the CPU."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.max_memory_allocated(torch.device(device)) / 2**20
    return _status_kib("VmHWM") / 1024


def peak_reserved_mib(device: str) -> float | None:
    """CUDA: the caching allocator's peak reserved memory since the last reset; None on the CPU."""
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.max_memory_reserved(torch.device(device)) / 2**20


def _status_kib(field: str) -> float:
    status = Path("/proc/self/status")
    if not status.exists():
        import resource

        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    for line in status.read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def memory_peak_mib(call: Callable[[], Any], iters: int, device: str) -> tuple[float, float]:
    """Peak memory over `iters` calls of `call` alone: (absolute, above the memory in use before)."""
    synchronize(device)
    before = current_memory_mib(device)
    reset_peak_memory(device)
    for _ in range(iters):
        call()
    synchronize(device)
    peak = peak_memory_mib(device)
    return peak, max(peak - before, 0.0)


def group_cpu_s() -> float:
    """CPU seconds of every process in this process's group and of the children they reaped: the trial, its compile
    workers and their g++ runs (the launcher starts each trial as the leader of a group of its own); this process
    alone where /proc cannot be read."""
    group, per_tick, total = os.getpgrp(), os.sysconf("SC_CLK_TCK"), 0
    try:
        entries = [entry for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    except OSError:
        own = os.times()
        return own[0] + own[1]
    for entry in entries:
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        if int(fields[2]) == group:  # pgrp; then utime, stime and the reaped children's (g++) cutime, cstime
            total += sum(int(value) for value in fields[11:15])
    return total / per_tick


def cpu_snapshot() -> tuple[float, float, float, float] | None:
    """(monotonic s, the machine's busy CPU s, its steal s, this trial's own CPU s: its process group's) from
    /proc/stat and /proc/*/stat; None where /proc/stat is missing (not Linux)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    ticks = [int(value) for value in fields[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    per_tick = os.sysconf("SC_CLK_TCK")
    return time.monotonic(), (user + nice + system + irq + softirq) / per_tick, steal / per_tick, group_cpu_s()


def disturbance(before: tuple | None, after: tuple | None) -> dict[str, float]:
    """How busy the machine was between two `cpu_snapshot`s, in cores (CPU seconds per second): `others_cores`, the
    CPU that processes outside this trial's group used; `steal_cores`, what the hypervisor took; the 1-minute load."""
    if before is None or after is None or after[0] <= before[0]:
        return {}
    window = after[0] - before[0]
    others = max((after[1] - before[1]) - (after[3] - before[3]), 0.0)
    return {"window_s": window, "others_cores": others / window, "steal_cores": (after[2] - before[2]) / window,
            "load_1m": os.getloadavg()[0]}  # fmt: skip


def ci_narrow_enough(eager_ms: list[float], compiled_ms: list[float], target_halfwidth: float) -> bool:
    """Whether this process's speedup CI half-width is at most `target_halfwidth` (0 = no target)."""
    if target_halfwidth <= 0:
        return True
    low, high = stats.paired_bootstrap_ci(eager_ms, compiled_ms, resamples=500)
    return (high - low) / 2 <= target_halfwidth


def paired_samples(
    eager: Callable[[], Any],
    compiled: Callable[[], Any],
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
            samples.append(time_call_ms(fn, device)[1])
        elapsed = time.perf_counter() - start
        if elapsed >= max_time_s:
            return eager_ms, compiled_ms, elapsed
        if len(eager_ms) >= min_iters and elapsed >= min_time_s:
            checkpoint = target_ci_halfwidth <= 0 or len(eager_ms) % CI_CHECK_EVERY == 0
            if checkpoint and ci_narrow_enough(eager_ms, compiled_ms, target_ci_halfwidth):
                return eager_ms, compiled_ms, elapsed


def single_samples(
    fn: Callable[[], Any], device: str, min_iters: int, min_time_s: float, max_time_s: float
) -> tuple[list[float], float]:
    """Time `fn` alone (an eager-only trial) until the minimums or max time."""
    samples: list[float] = []
    start = time.perf_counter()
    while True:
        samples.append(time_call_ms(fn, device)[1])
        elapsed = time.perf_counter() - start
        if (len(samples) >= min_iters and elapsed >= min_time_s) or elapsed >= max_time_s:
            return samples, elapsed
