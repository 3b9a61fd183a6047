"""Statistics of raw samples: pure functions, fed hand-made numbers by the tests.

Two levels, because fresh processes are the unit of replication. Within one process, eager and compiled calls
alternate and give a per-process estimate (the median of its samples; a speedup = median eager / median compiled
of its pairs). Between processes, the per-process estimates vary more than the samples inside one process do
(a process's memory layout, thread placement, the machine's state), so a confidence interval comes from the spread
of the per-process estimates: a t-interval on their logarithms with P - 1 degrees of freedom. A bootstrap that
resamples 3 processes cannot do this: its interval stays within the range of the 3 estimates, which holds the
true value only 75% of the time (1 - 2 * 0.5**3). With a single process there is no between-process spread to
measure: the interval is then a bootstrap of that process's pairs, and labelled `within-process` as a warning.

Comparing two environments (B against A) uses the per-process estimates of both: Welch's t on the difference of
their mean logarithms. A verdict needs the interval to clear a margin delta measured by an A/A calibration (the
same environment compared with itself on this machine), not only 1.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
BETWEEN = "between-process t"
WITHIN = "within-process bootstrap"
SINGLE = "single value"
NO_SIGNIFICANT_DIFFERENCE = "no significant difference"
EQUIVALENT, INCONCLUSIVE = "equivalent", "inconclusive"
IQR_PER_STD = 1.349  # the interquartile range of a normal distribution, in standard deviations
MIN_DELTA = 0.005  # the smallest margin an A/A calibration may set (0.5%): below that, rounding noise


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% interval, how many processes it rests on, and how the interval was made."""

    value: float
    low: float
    high: float
    processes: int
    method: str

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def halfwidth(self) -> float:
        """Half the interval's width relative to the value (0.05 = +-5%); NaN without an interval."""
        return (self.high - self.low) / 2 / self.value if self.has_interval and self.value else math.nan


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


def t_quantile(probability: float, dof: float) -> float:
    """Student's t quantile. scipy.stats is imported here, not with the module: a trial process times with these
    statistics but never needs a t-interval, and the import costs it half a second of start-up."""
    from scipy import stats as scipy_stats

    return float(scipy_stats.t.ppf(probability, dof))


def geometric_interval(values: list[float], confidence: float = CONFIDENCE) -> Estimate:
    """The geometric mean of positive per-process values, with a t-interval on their logs (P - 1 df)."""
    logs = np.log(np.asarray(values, dtype=float))
    if logs.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, SINGLE)
    center = float(logs.mean())
    if logs.size == 1:
        return Estimate(math.exp(center), math.nan, math.nan, 1, SINGLE)
    half = float(t_quantile((1 + confidence) / 2, logs.size - 1) * logs.std(ddof=1) / math.sqrt(logs.size))
    return Estimate(math.exp(center), math.exp(center - half), math.exp(center + half), int(logs.size), BETWEEN)


def speedup_estimate(pairs: list[tuple[list[float], list[float]]], confidence: float = CONFIDENCE) -> Estimate:
    """Speedup over processes, each given as its (eager, compiled) paired samples."""
    pairs = [(e, c) for e, c in pairs if len(e) and len(c)]
    if len(pairs) == 1:
        eager, compiled = pairs[0]
        low, high = paired_bootstrap_ci(eager, compiled, confidence) if len(eager) >= 2 else (math.nan, math.nan)
        return Estimate(speedup(eager, compiled), low, high, 1, WITHIN)
    return geometric_interval([speedup(e, c) for e, c in pairs], confidence)


def median_estimate(samples: list[list[float]], confidence: float = CONFIDENCE) -> Estimate:
    """Median latency over processes, each given as its samples."""
    samples = [s for s in samples if len(s)]
    if len(samples) == 1:
        low, high = median_bootstrap_ci(samples[0], confidence)
        return Estimate(float(np.median(samples[0])), low, high, 1, WITHIN)
    return geometric_interval([float(np.median(s)) for s in samples], confidence)


def ratio_estimate(baseline: list[float], candidate: list[float], confidence: float = CONFIDENCE) -> Estimate:
    """Candidate / baseline of per-process values (B over A), with a t-interval on the difference of mean logs.

    Welch's interval when both sides have two or more processes; a pooled variance when one side has a single
    process; no interval when neither can show its spread.
    """
    a, b = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(candidate, dtype=float))
    processes = int(min(a.size, b.size))
    if a.size == 0 or b.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, SINGLE)
    center = float(b.mean() - a.mean())
    if a.size >= 2 and b.size >= 2:
        var_a, var_b = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
        se = math.sqrt(var_a + var_b)
        dof = (var_a + var_b) ** 2 / (var_a**2 / (a.size - 1) + var_b**2 / (b.size - 1)) if se > 0 else 1.0
    elif a.size + b.size >= 3:
        spread = a if a.size >= 2 else b
        se = float(spread.std(ddof=1)) * math.sqrt(1 / a.size + 1 / b.size)
        dof = a.size + b.size - 2
    else:
        return Estimate(math.exp(center), math.nan, math.nan, processes, SINGLE)
    half = t_quantile((1 + confidence) / 2, dof) * se
    return Estimate(math.exp(center), math.exp(center - half), math.exp(center + half), processes, BETWEEN)


def verdict(ci_low: float, ci_high: float) -> str:
    """Eager vs compiled: `faster`, `slower`, or no significant difference when the CI contains 1.0."""
    if ci_low > 1.0:
        return "faster"
    if ci_high < 1.0:
        return "slower"
    return NO_SIGNIFICANT_DIFFERENCE


def calibrated_verdict(ratio: Estimate, delta: float | None, above: str, below: str) -> str:
    """B/A ratio against a margin delta (log scale) from an A/A calibration.

    `above` / `below`: the interval lies wholly above e^delta / below e^-delta; `equivalent`: wholly inside
    [e^-delta, e^delta]; `inconclusive` otherwise. Without a calibration (delta None) only significance is judged
    (the interval excludes 1.0), and nothing is called equivalent.
    """
    if not ratio.has_interval:
        return INCONCLUSIVE
    margin = delta or 0.0
    low, high = math.log(ratio.low), math.log(ratio.high)
    if low > margin:
        return above
    if high < -margin:
        return below
    if delta is not None and -margin <= low and high <= margin:
        return EQUIVALENT
    return INCONCLUSIVE


def calibration_delta(aa_ratios: list[float]) -> float:
    """The margin an A/A calibration sets: the largest |log ratio| its cells showed (never below MIN_DELTA)."""
    logs = [abs(math.log(r)) for r in aa_ratios if r and math.isfinite(r) and r > 0]
    return max([MIN_DELTA, *logs])
