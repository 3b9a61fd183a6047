"""The one place where time and memory are measured: timers, peak memory, and the measurement loops.

Steady-state calls: CUDA events around the call on a GPU (read after a synchronize), `perf_counter_ns` on the CPU.
A first call (compile time: seconds of host work) is timed on the host clock between two synchronizes, as the
dynamo harness does. Memory: the allocator's peaks on CUDA (allocated and reserved); on the CPU, the process's
peak RSS (VmHWM), reset per phase. How busy the machine was while a process timed (other processes' CPU, the VM's
steal and iowait, the load) is read from /proc around the timed window, and the device's state (GPU clocks, power,
temperature, throttle reasons, other processes on it) from NVML where the driver has it. A timing process times
several arms (eager and compiled variants) in rounds whose order follows a Williams design, after a warm-up by time.
Statistics of the samples live in `sample_stats`.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compilebench.harness import sample_stats
from compilebench.harness.names import SLOT_ENV, usable_cores
from compilebench.harness.turns import Solo
from compilebench.records.formats import williams_orders

CI_CHECK_EVERY = 10  # pairs between two adaptive-stop checks of the speedup CI
WARMUP_DRIFT = 0.03  # warm-up goes on while an arm's last rounds are still this much faster than the ones before
WARMUP_MAX_FACTOR = 5  # ... for at most this many times the warm-up's planned seconds


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


def thread_moves() -> tuple[int, int]:
    """(migrations to another core, involuntary context switches: preemptions) of this process's threads so far, from
    /proc/self/task/*/sched; (0, 0) where the kernel does not say (not Linux, no scheduler statistics)."""
    migrations = preempted = 0
    for task in Path("/proc/self/task").glob("*"):
        try:
            text = (task / "sched").read_text()
        except OSError:
            continue  # a thread that ended
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "se.nr_migrations":
                migrations += int(value)
            elif key.strip() == "nr_involuntary_switches":
                preempted += int(value)
    return migrations, preempted


def cpu_snapshot() -> tuple[float, ...] | None:
    """(monotonic s, the machine's busy CPU s, its steal s, this trial's own CPU s: its process group's, iowait s, its
    threads' migrations, their preemptions) from /proc/stat, /proc/*/stat and /proc/self/task/*/sched; None where
    /proc/stat is missing (not Linux)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    ticks = [int(value) for value in fields[1:]]
    user, nice, system, _idle, iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    per_tick = os.sysconf("SC_CLK_TCK")
    busy = (user + nice + system + irq + softirq) / per_tick
    return time.monotonic(), busy, steal / per_tick, group_cpu_s(), iowait / per_tick, *thread_moves()


def disturbance(before: tuple | None, after: tuple | None) -> dict[str, float]:
    """How busy the machine was between two `cpu_snapshot`s, in cores (CPU seconds per second): `others_cores`, the
    CPU that processes outside this trial's group used; `steal_cores`, what the hypervisor took; `iowait_cores`; the
    1-minute load; and how this process's threads were moved about, per second: `migrations_per_s` to another core,
    `preempted_per_s` (involuntary context switches), recorded for the noise's anatomy, judged by nothing."""
    if before is None or after is None or after[0] <= before[0]:
        return {}
    window = after[0] - before[0]
    others = max((after[1] - before[1]) - (after[3] - before[3]), 0.0)
    found = {
        "window_s": window,
        "others_cores": others / window,
        "steal_cores": (after[2] - before[2]) / window,
        "load_1m": os.getloadavg()[0],
    }
    if len(before) > 4 and len(after) > 4:
        found["iowait_cores"] = (after[4] - before[4]) / window
    if len(before) > 6 and len(after) > 6:
        found["migrations_per_s"] = (after[5] - before[5]) / window
        found["preempted_per_s"] = (after[6] - before[6]) / window
    return found


NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
NVML_ERROR_INSUFFICIENT_SIZE = 7


def _nvml() -> Any:
    """The driver's NVML library, initialised (None where there is none: a CPU machine, or no driver)."""
    import ctypes

    try:
        library = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    return library if library.nvmlInit_v2() == 0 else None


def _nvml_read(library: Any, name: str, *args: Any) -> int | None:
    """NVML's return code of `name(*args)`, or None where this driver's library lacks the function: one missing
    function costs its field only."""
    function = getattr(library, name, None)
    return None if function is None else function(*args)


def gpu_state(device: str) -> dict[str, Any]:
    """The GPU a trial times on, as NVML reads it: SM and memory clocks (MHz), power (W), temperature (C), the
    clock-throttle reasons (a bit mask; 0 = none) and how many compute processes use it (this one included).
    Empty on a CPU, without the driver's NVML, or where a read fails. By UUID, so CUDA_VISIBLE_DEVICES is honoured."""
    if not device.startswith("cuda"):
        return {}
    import ctypes

    import torch

    library = _nvml()
    if library is None:
        return {}
    try:
        uuid = getattr(torch.cuda.get_device_properties(torch.device(device)), "uuid", None)
        handle = ctypes.c_void_p()
        if uuid is None or library.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}".encode(), ctypes.byref(handle)) != 0:
            return {}
        state: dict[str, Any] = {}
        value, wide = ctypes.c_uint(), ctypes.c_ulonglong()
        for key, clock in (("gpu_sm_clock_mhz", NVML_CLOCK_SM), ("gpu_mem_clock_mhz", NVML_CLOCK_MEM)):
            if _nvml_read(library, "nvmlDeviceGetClockInfo", handle, clock, ctypes.byref(value)) == 0:
                state[key] = value.value
        if _nvml_read(library, "nvmlDeviceGetPowerUsage", handle, ctypes.byref(value)) == 0:
            state["gpu_power_w"] = value.value / 1000
        if _nvml_read(library, "nvmlDeviceGetTemperature", handle, NVML_TEMPERATURE_GPU, ctypes.byref(value)) == 0:
            state["gpu_temperature_c"] = value.value
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if _nvml_read(library, name, handle, ctypes.byref(wide)) == 0:  # the newer name first, the older kept
                state["gpu_throttle_reasons"] = wide.value
                break
        count = ctypes.c_uint(0)  # asked with no room: NVML answers how many there are
        if _nvml_read(library, "nvmlDeviceGetComputeRunningProcesses_v3", handle, ctypes.byref(count), None) in (
            0,
            NVML_ERROR_INSUFFICIENT_SIZE,
        ):
            state["gpu_processes"] = count.value
        return state
    except (AttributeError, OSError, RuntimeError):
        return {}


def machine_state(device: str) -> dict[str, Any]:
    """What a process saw of the machine at one moment: the slot it ran on (an executor's: machine and GPU), the
    cores it may run on, the load, and its GPU's state."""
    cores = usable_cores()
    slot = os.environ.get(SLOT_ENV, "")
    return {
        "slot": slot,
        "cpu_affinity": len(cores),
        "cpu_cores": ",".join(map(str, cores)),  # which ones (a pinned process: the launcher's --cpus)
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", ""),
        "load_1m": os.getloadavg()[0],
        **gpu_state(device),
    }


def ci_narrow_enough(eager_ms: list[float], compiled_ms: list[float], target_halfwidth: float) -> bool:
    """Whether this process's speedup CI half-width is at most `target_halfwidth` (0 = no target)."""
    if target_halfwidth <= 0:
        return True
    low, high = sample_stats.paired_bootstrap_ci(eager_ms, compiled_ms, resamples=500)
    return (high - low) / 2 <= target_halfwidth


def _round(calls: list[Callable[[], Any]], order: list[int], device: str, into: list[list[float]]) -> None:
    for arm in order:
        into[arm].append(time_call_ms(calls[arm], device)[1])


def _drift(samples: list[float]) -> float:
    """How much faster an arm's last warm-up rounds (a third of them, two at least) ran than as many before them (0
    when not faster; infinite with fewer than four rounds: not known yet, so not settled)."""
    window = max(len(samples) // 3, 2)
    if len(samples) < 2 * window:
        return math.inf
    last, before = statistics.median(samples[-window:]), statistics.median(samples[-2 * window : -window])
    return max(1 - last / before, 0.0) if before > 0 else 0.0


def _own_clock(turns: Solo) -> Callable[[], float]:
    """Seconds since now, less what the process waits for its turns from now on (turns.py; none alone)."""
    began, waited = time.perf_counter(), turns.waited_s
    return lambda: time.perf_counter() - began - (turns.waited_s - waited)


def warm_up(
    calls: list[Callable[[], Any]],
    device: str,
    min_rounds: int,
    min_s: float,
    start: int = 0,
    turns: Solo | None = None,
) -> tuple[int, float, float | None]:
    """Untimed rounds of every arm, in the timing's rotation, right before timing: at least `min_rounds` and `min_s`,
    longer while an arm's last rounds still run faster than the ones before (caches, clocks, the allocator settling),
    up to WARMUP_MAX_FACTOR times `min_s`. A drift needs four rounds to be judged: a slow model whose `min_s` holds
    two rounds goes on (measured: ViT-B/16's eager arm on a 2-core VM ran 279, 268, 239, 204 ms in its first timed
    rounds after a two-round warm-up, and its speedup moved 13-18% between the halves of its rounds). Its rounds run
    in the process's turns (turns.py); its seconds leave out its waits for them.
    (rounds, seconds, the drift left: the largest over arms; None when the cap came before four rounds)."""
    orders, seen, turns = williams_orders(len(calls)), [[] for _ in calls], turns or Solo()
    own = _own_clock(turns)
    rounds, drift = 0, 0.0
    limit_s = max(min_s, 0.0) * WARMUP_MAX_FACTOR
    while True:
        elapsed = own()
        if rounds >= min_rounds and elapsed >= min_s:
            drift = max((_drift(arm) for arm in seen), default=0.0)
            if drift <= WARMUP_DRIFT or elapsed >= limit_s:
                return rounds, elapsed, (drift if math.isfinite(drift) else None)
        turns.round_begins()
        _round(calls, orders[(start + rounds) % len(orders)], device, seen)
        turns.round_ends(last=False)  # the timed rounds follow
        rounds += 1


def round_samples(
    calls: list[Callable[[], Any]],
    device: str,
    min_rounds: int,
    min_time_s: float,
    max_time_s: float,
    start: int = 0,
    target_ci_halfwidth: float = 0.0,
    turns: Solo | None = None,
) -> tuple[list[list[float]], float, list[int]]:
    """Rounds of every arm (index 0 is eager), each round in the next order of a Williams design (from `start`), until
    `min_rounds` and `min_time_s` are reached (and every compiled arm's speedup CI is within the target) or
    `max_time_s` passes. The i-th samples of two arms come from the same round: their ratio is a pair. Its rounds run
    in the process's turns (turns.py), the last one said to be the last; its seconds leave out the waits.
    (samples by arm, seconds, the turn of each round: empty alone)."""
    orders, samples, turns = williams_orders(len(calls)), [[] for _ in calls], turns or Solo()
    own, round_turns = _own_clock(turns), []
    while True:
        turns.round_begins()
        if (turn := turns.round_turn()) is not None:
            round_turns.append(turn)
        _round(calls, orders[(start + len(samples[0])) % len(orders)], device, samples)
        elapsed = own()
        enough = len(samples[0]) >= min_rounds and elapsed >= min_time_s
        if enough and target_ci_halfwidth > 0:
            checkpoint = len(samples[0]) % CI_CHECK_EVERY == 0
            enough = checkpoint and all(ci_narrow_enough(samples[0], arm, target_ci_halfwidth) for arm in samples[1:])
        last = enough or elapsed >= max_time_s
        turns.round_ends(last)
        if last:
            return samples, elapsed, round_turns


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
