"""Statistics of one process's raw samples: pure functions, fed hand-made numbers by the tests.

Within one process, eager and compiled calls alternate and give a per-process estimate (the median of its samples; a
speedup = median eager / median compiled of its pairs), with a bootstrap of its own pairs where a process must say
how precise it is on its own (timing.round_samples stops a process's rounds on it). What follows from several
processes (intervals between them, B against A) is the analysis's: analysis/stats.py.
"""

from __future__ import annotations

import math

import numpy as np

CONFIDENCE = 0.95
IQR_PER_STD = 1.349  # the interquartile range of a normal distribution, in standard deviations


def summarize_ms(samples_ms: list[float] | tuple[float, ...]) -> dict[str, float]:
    """Latency statistics of raw samples in ms: mean, median, p90, p99, std, IQR, min, max, CV."""
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
        "robust_cv": float(q75 - q25) / IQR_PER_STD / float(q50) if q50 > 0 else 0.0,
    }


def throughput_img_s(latency_ms: float, batch_size: int) -> float:
    """Images per second at `latency_ms` per batch."""
    return batch_size * 1000.0 / latency_ms if latency_ms > 0 else 0.0


def speedup(eager_ms, compiled_ms) -> float:
    """Speedup as the ratio of medians, eager / compiled (the dynamo harness's definition)."""
    return float(np.median(eager_ms) / np.median(compiled_ms))


def improvement_pct(eager_ms: float, compiled_ms: float) -> float:
    """The doc's percentage improvement: how much of the eager time compiling saves."""
    return (eager_ms - compiled_ms) / eager_ms * 100.0


def break_even_calls(compile_s: float, eager_ms: float, compiled_ms: float) -> float | None:
    """Calls until compiling pays off: compile time over the time saved per call; None if it never does."""
    saved_ms = eager_ms - compiled_ms
    return compile_s * 1000.0 / saved_ms if saved_ms > 0 else None


def paired_bootstrap_ci(
    eager_ms, compiled_ms, confidence: float = CONFIDENCE, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap CI of one process's speedup; pairs (the same iteration) are resampled together."""
    eager, compiled = np.asarray(eager_ms, dtype=float), np.asarray(compiled_ms, dtype=float)
    if eager.size != compiled.size or eager.size < 2:
        raise ValueError(f"paired samples needed: {eager.size} eager vs {compiled.size} compiled")
    index = np.random.default_rng(seed).integers(0, eager.size, size=(resamples, eager.size))
    ratios = np.median(eager[index], axis=1) / np.median(compiled[index], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def median_bootstrap_ci(
    samples_ms, confidence: float = CONFIDENCE, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap CI of one process's median latency."""
    values = np.asarray(samples_ms, dtype=float)
    if values.size < 2:
        return math.nan, math.nan
    index = np.random.default_rng(seed).integers(0, values.size, size=(resamples, values.size))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(np.median(values[index], axis=1), [tail, 100 - tail])
    return float(low), float(high)
