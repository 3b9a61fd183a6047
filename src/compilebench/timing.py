"""The one place where time and memory are measured, and where samples become statistics.

Timers: CUDA events on a GPU (with a synchronize before reading), `perf_counter_ns` on the CPU.
Memory: the allocator's peak on CUDA; on the CPU, the process's peak RSS (VmHWM), reset per phase.
Statistics are pure functions over raw samples in milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

NO_SIGNIFICANT_DIFFERENCE = "no significant difference"


def time_call_ms(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """Run `fn` once; return its output and the wall time in ms, synchronised on the device."""
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


def synchronize(device: str) -> None:
    """Wait for queued device work (no-op on the CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(torch.device(device))


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


def _status_kib(field: str) -> float:
    status = Path("/proc/self/status")
    if not status.exists():
        import resource

        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    for line in status.read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def summarize_ms(samples_ms: list[float]) -> dict[str, float]:
    """Latency statistics of raw samples (ms) and throughput for one image per sample."""
    values = np.asarray(samples_ms, dtype=float)
    if values.size == 0:
        return {"count": 0}
    q25, q50, q75, q90, q99 = np.percentile(values, [25, 50, 75, 90, 99])
    mean = float(values.mean())
    std = float(values.std(ddof=1)) if values.size > 1 else 0.0
    return {
        "count": int(values.size),
        "latency_ms_mean": mean,
        "latency_ms_median": float(q50),
        "latency_ms_p90": float(q90),
        "latency_ms_p99": float(q99),
        "latency_ms_std": std,
        "latency_ms_iqr": float(q75 - q25),
        "latency_ms_min": float(values.min()),
        "latency_ms_max": float(values.max()),
        "cv": std / mean if mean > 0 else 0.0,
    }


def throughput_img_s(latency_ms: float, batch_size: int) -> float:
    """Images per second at `latency_ms` per batch."""
    return batch_size * 1000.0 / latency_ms if latency_ms > 0 else 0.0


def speedup(eager_ms: list[float], compiled_ms: list[float]) -> float:
    """Speedup as the ratio of medians, eager / compiled (the dynamo harness's definition)."""
    return float(np.median(eager_ms) / np.median(compiled_ms))


def improvement_pct(eager_ms: float, compiled_ms: float) -> float:
    """The doc's percentage improvement: how much of the eager time compiling saves."""
    return (eager_ms - compiled_ms) / eager_ms * 100.0


def speedup_ci(
    eager_ms: list[float], compiled_ms: list[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap CI of the speedup; pairs (same iteration) are resampled together."""
    eager, compiled = np.asarray(eager_ms, dtype=float), np.asarray(compiled_ms, dtype=float)
    if eager.size != compiled.size or eager.size < 2:
        raise ValueError(f"paired samples needed: {eager.size} eager vs {compiled.size} compiled")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, eager.size, size=(resamples, eager.size))
    ratios = np.median(eager[index], axis=1) / np.median(compiled[index], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def verdict(ci_low: float, ci_high: float) -> str:
    """`faster`, `slower`, or no significant difference when the CI contains 1.0."""
    if ci_low > 1.0:
        return "faster"
    if ci_high < 1.0:
        return "slower"
    return NO_SIGNIFICANT_DIFFERENCE


def break_even_calls(compile_s: float, eager_ms: float, compiled_ms: float) -> float | None:
    """Calls until compiling pays off: compile time over the time saved per call; None if it never does."""
    saved_ms = eager_ms - compiled_ms
    return compile_s * 1000.0 / saved_ms if saved_ms > 0 else None
