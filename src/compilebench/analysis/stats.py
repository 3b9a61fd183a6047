"""Statistics between processes, and of B against A: pure functions, fed hand-made numbers by the tests.

Fresh processes are the unit of replication. Between processes, the per-process estimates (harness/sample_stats.py)
vary more than the samples inside one process do (a process's memory layout, thread placement, the machine's state),
so a confidence interval comes from the spread of the per-process estimates: a t-interval on their logarithms with
P - 1 degrees of freedom. A bootstrap that resamples 3 processes cannot do this: its interval stays within the range
of the 3 estimates, which holds the true value only 75% of the time (1 - 2 * 0.5**3). With a single process there is
no between-process spread to measure: the interval is then a bootstrap of that process's pairs, and labelled
`within-process` as a warning.

Comparing two environments (B against A) inside one invocation uses the blocks the balanced order makes: in each
block A and B ran close in time (a timing block's processes together, taking turns), so the difference of their log
values cancels what the machine did to both.
The mean difference gets a t-interval whose variance pools the cell's own blocks with this machine's noise (a
pooled variance of such differences, learnt from earlier comparisons and A/A runs, with its degrees of freedom),
unless an F-test finds the cell much noisier than the machine: then the cell stands on its own blocks, flagged.
Two questions get two answers: *did it change?* (a t-test at 5%; the headline across cells Holm-adjusted) and *does
it matter?* (equivalence within a user margin: the 90% interval inside +-margin, i.e. two one-sided tests).
Rows from different invocations cannot be paired: Welch's t on the per-process values of each side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compilebench.harness.sample_stats import CONFIDENCE, median_bootstrap_ci, paired_bootstrap_ci, speedup

BETWEEN = "between-process t"
WITHIN = "within-process bootstrap"
SINGLE = "single value"
NO_SIGNIFICANT_DIFFERENCE = "no significant difference"
EQUIVALENT, INCONCLUSIVE = "equivalent", "inconclusive"
BEYOND_MARGIN, UNDECIDED = "beyond margin", "undecided"  # does it matter: the 90% CI wholly beyond +-margin, or neither
NOT_SIGNIFICANT = "not significant"  # did it change: no (p >= ALPHA)
ALPHA = 0.05  # significance level of every "did it change" test
NOISY_ALPHA = 0.01  # an F-test below this says a cell is noisier than the machine: it is not pooled, and flagged
PAIRED = "paired blocks"  # how a B/A interval was made: differences within blocks of one invocation
PAIRED_BY_TURN = "paired blocks, rounds by turn"  # ... each block's difference from its processes' rounds paired by
#                                                   the turn they ran in (a block run together: compare.py)
PAIRED_METHODS = (PAIRED, PAIRED_BY_TURN)
ACROSS = "across cells"  # a suite's B/A whose cells have one value a side: from the spread of the cells' ratios
UNPAIRED = "welch"  # per-process values of separate invocations: no pairing possible


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


def t_quantile(probability: float, dof: float) -> float:
    """Student's t quantile. scipy.stats is imported here, not with the module: the launcher imports the analysis
    on a machine that runs trials, and the import costs half a second."""
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


def verdict(ci_low: float, ci_high: float) -> str:
    """Eager vs compiled: `faster`, `slower`, or no significant difference when the CI contains 1.0."""
    if ci_low > 1.0:
        return "faster"
    if ci_high < 1.0:
        return "slower"
    return NO_SIGNIFICANT_DIFFERENCE


@dataclass(frozen=True)
class Noise:
    """Noise of paired log differences: their sum of squares around each cell's mean, and its degrees of freedom.
    Pooled by adding (what an A/A calibration and every comparison's blocks contribute to a machine's record)."""

    ss: float = 0.0
    dof: int = 0

    @property
    def variance(self) -> float:
        return self.ss / self.dof if self.dof > 0 else math.nan

    def __add__(self, other: Noise) -> Noise:
        return Noise(self.ss + other.ss, self.dof + other.dof)


def noise_of(differences: list[float]) -> Noise:
    """A cell's own noise: the spread of its paired differences around their mean (n - 1 degrees of freedom)."""
    values = np.asarray(differences, dtype=float)
    if values.size < 2:
        return Noise()
    return Noise(float(((values - values.mean()) ** 2).sum()), int(values.size - 1))


@dataclass(frozen=True)
class Ratio:
    """B / A with a 95% and a 90% interval, the p-value of "no change", and what the interval rests on."""

    value: float
    low: float  # 95%
    high: float
    low90: float  # 90%: the equivalence test's interval
    high90: float
    p_value: float
    blocks: int  # paired blocks (or the smaller side's processes, unpaired)
    dof: float
    method: str  # PAIRED | PAIRED_BY_TURN | UNPAIRED | SINGLE
    noise: str = "none"  # the variance used: cell | cell+machine | machine | none
    noisy: bool = False  # the F-test found the cell noisier than the machine (not pooled)
    cell_noise: Noise = Noise()

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def halfwidth(self) -> float:
        """Half the 95% interval's width on the log scale (0.049 = +-5%); infinite without an interval."""
        return (math.log(self.high) - math.log(self.low)) / 2 if self.has_interval else math.inf

    @property
    def detectable(self) -> float:
        """The smallest change this interval's data would have found at 80% power (minimum_detectable)."""
        return minimum_detectable(self.halfwidth, self.dof)


def _ratio(center: float, se: float, dof: float, blocks: int, method: str, **extra) -> Ratio:
    """A Ratio from a mean log difference, its standard error and degrees of freedom."""
    from scipy import stats as scipy_stats

    if not (se > 0 and dof > 0):
        nan = math.nan
        exact = se == 0 and dof > 0  # every block gave the same difference: a point, p by its sign
        p_value = (0.0 if center else 1.0) if exact else nan
        bound = (math.exp(center),) * 4 if exact else (nan,) * 4
        return Ratio(math.exp(center), *bound, p_value, blocks, dof, method, **extra)
    t95, t90 = t_quantile(0.975, dof), t_quantile(0.95, dof)
    p_value = float(2 * scipy_stats.t.sf(abs(center) / se, dof))
    return Ratio(
        math.exp(center),
        math.exp(center - t95 * se),
        math.exp(center + t95 * se),
        math.exp(center - t90 * se),
        math.exp(center + t90 * se),
        p_value,
        blocks,
        dof,
        method,
        **extra,
    )


def log_mean_ratio(center: float, se: float, dof: float, count: int) -> Ratio:
    """B / A from a mean log ratio, its standard error and degrees of freedom (a suite's mean over its cells)."""
    return _ratio(center, se, dof, count, PAIRED, noise="cells")


def across_cells_ratio(logs: list[float]) -> Ratio:
    """B / A over a suite whose cells do not all have an interval (one value a side: one cold process a stack), from
    the cells' log ratios alone: their mean with a one-sample t-interval from their spread (len - 1 degrees of freedom).
    That spread holds how the cells' true changes differ as well as their noise, so the interval errs wide, never
    narrow; the cells' values must come from separate processes (their errors independent)."""
    center = float(np.mean(logs))
    se = float(np.std(logs, ddof=1)) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
    return _ratio(center, se, len(logs) - 1, len(logs), ACROSS, noise="cells")


def paired_ratio(a: list[float], b: list[float], machine: Noise | None = None) -> Ratio:
    """B / A from per-block values (a[i] and b[i] ran in the same block), with this machine's noise as a prior
    (`paired_log_ratio` of their log differences)."""
    diffs = np.log(np.asarray(b, dtype=float)) - np.log(np.asarray(a, dtype=float))
    return paired_log_ratio(list(diffs), machine)


def paired_log_ratio(differences: list[float], machine: Noise | None = None, method: str = PAIRED) -> Ratio:
    """B / A from per-block log differences (log B - log A of one block each), with this machine's noise of such
    differences as a prior; `method` says how a block's difference was made.

    The cell's own variance of log differences is pooled with `machine`'s unless an F-test (p < NOISY_ALPHA) says
    the cell is noisier: then it stands alone and is flagged `noisy`. One block with no machine noise: no interval.
    """
    diffs = np.asarray(differences, dtype=float)
    blocks = int(diffs.size)
    if blocks == 0:
        return Ratio(*(math.nan,) * 6, 0, 0, SINGLE)
    center, own = float(diffs.mean()), noise_of(list(diffs))
    usable = machine if machine is not None and machine.dof > 0 and machine.variance > 0 else None
    noisy = False
    if usable is not None and own.dof > 0:
        from scipy import stats as scipy_stats

        noisy = bool(scipy_stats.f.sf(own.variance / usable.variance, own.dof, usable.dof) < NOISY_ALPHA)
    if usable is None or noisy:
        pooled, source = own, "cell"
    else:
        pooled, source = own + usable, ("cell+machine" if own.dof else "machine")
    if pooled.dof == 0:
        return Ratio(math.exp(center), *(math.nan,) * 5, blocks, 0, SINGLE)
    se = math.sqrt(pooled.variance / blocks)
    return _ratio(center, se, pooled.dof, blocks, method, noise=source, noisy=noisy, cell_noise=own)


def welch_ratio(baseline: list[float], candidate: list[float]) -> Ratio:
    """B / A from per-process values that cannot be paired (separate invocations): Welch's t on the difference of
    mean logs; a pooled variance when one side has a single process; no interval when neither shows its spread."""
    a, b = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(candidate, dtype=float))
    processes = int(min(a.size, b.size))
    if a.size == 0 or b.size == 0:
        return Ratio(*(math.nan,) * 6, 0, 0, SINGLE)
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
        return Ratio(math.exp(center), *(math.nan,) * 5, processes, 0, SINGLE)
    return _ratio(center, se, float(dof), processes, UNPAIRED, noise="cell")


def relevance(ratio: Ratio, margin: float) -> str:
    """Does it matter, against a margin (0.05 = 5%): `equivalent` when the 90% interval lies inside
    [1/(1+margin), 1+margin] (two one-sided tests at 5%), `beyond margin` when it lies wholly outside on one side,
    else `undecided`."""
    if not (math.isfinite(ratio.low90) and math.isfinite(ratio.high90)):
        return UNDECIDED
    bound = math.log1p(margin)
    low, high = math.log(ratio.low90), math.log(ratio.high90)
    if -bound < low and high < bound:
        return EQUIVALENT
    if low > bound or high < -bound:
        return BEYOND_MARGIN
    return UNDECIDED


def change(ratio: Ratio, above: str, below: str, p_value: float | None = None) -> str:
    """Did it change: `above` / `below` when the p-value (or an adjusted one) is under ALPHA, else not significant."""
    return change_word(ratio.value, ratio.p_value if p_value is None else p_value, above, below)


def change_word(value: float, p_value: float, above: str, below: str) -> str:
    """The word for a B/A `value` whose test gave `p_value` (NaN: no test possible)."""
    if math.isnan(p_value) or p_value >= ALPHA:
        return NOT_SIGNIFICANT
    return above if value > 1 else below


def verdict_of(changed: str, relevant: str) -> str:
    """One word per (cell, metric): `equivalent` when it does not matter (whatever a test says of a tiny change),
    the direction of a significant change, else `inconclusive`."""
    if relevant == EQUIVALENT:
        return EQUIVALENT
    return INCONCLUSIVE if changed == NOT_SIGNIFICANT else changed


def holm(p_values: list[float]) -> list[float]:
    """Holm-adjusted p-values (family-wise error at most the level), in the order given; NaN stays NaN."""
    indexed = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [math.nan] * len(p_values)
    running, count = 0.0, len(indexed)
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (count - rank) * p))
        adjusted[i] = running
    return adjusted


POWER = 0.80  # the power a minimum detectable effect is stated at


def minimum_detectable(halfwidth: float, dof: float, power: float = POWER) -> float:
    """The smallest change (a fraction: 0.12 = 12%, either way) a two-sided t-test at 5% finds with probability
    `power`, for an interval of 95% `halfwidth` (log scale) on `dof` degrees of freedom: (t(0.975) + t(power)) times
    its standard error. What an `inconclusive` verdict could have seen; infinite without an interval."""
    if not math.isfinite(halfwidth) or dof <= 0:
        return math.inf
    t95 = t_quantile(0.975, dof)
    return math.expm1((t95 + t_quantile(power, dof)) * halfwidth / t95)


def equivalence_chance(halfwidth: float, dof: float, margin: float) -> float:
    """How often an interval of 95% `halfwidth` (log scale) on `dof` degrees of freedom says `equivalent` against
    `margin` when nothing changed (`relevance`: its 90% interval inside +-log1p(margin)): the mean log difference must
    fall within the margin less the 90% half-width, and it is t-distributed about 0 with the interval's standard error.
    0 without an interval, or where the 90% half-width alone is as wide as the margin."""
    from scipy import stats as scipy_stats

    if not math.isfinite(halfwidth) or dof <= 0:
        return 0.0
    se = halfwidth / t_quantile(0.975, dof)
    room = math.log1p(margin) / se - t_quantile(0.95, dof) if se > 0 else math.inf
    return max(0.0, float(2 * scipy_stats.t.cdf(room, dof) - 1))


def expected_halfwidth(machine: Noise, blocks: int) -> float:
    """The 95% half-width (log scale) a paired interval of `blocks` blocks gets from this machine's noise alone: what
    the adaptive loop stops on where the machine has a record. It does not look at the cell's own differences, so
    stopping cannot favour cells whose first blocks happened to agree (which would flag equal stacks too often)."""
    if machine.dof <= 0 or blocks < 1:
        return math.inf
    return t_quantile(0.975, machine.dof + blocks - 1) * math.sqrt(machine.variance / blocks)


def more_blocks(halfwidth: float, target: float, blocks: int, dof: float, cap: int = 10_000) -> int | None:
    """About how many more blocks an interval of `halfwidth` (log scale) from `blocks` blocks and `dof` degrees of
    freedom needs to reach `target`: the same spread, a t quantile that falls as the degrees of freedom grow with
    the blocks, the square root of the blocks; None when it cannot be said (no interval yet), `cap` at most."""
    if halfwidth <= target:
        return 0
    if not math.isfinite(halfwidth) or blocks < 1 or dof < 1:
        return None
    spread = halfwidth / t_quantile(0.975, dof) * math.sqrt(blocks)  # the sd of one block's value
    for more in range(1, cap + 1):
        total = blocks + more
        if t_quantile(0.975, dof + more) * spread / math.sqrt(total) <= target:
            return more
    return cap
