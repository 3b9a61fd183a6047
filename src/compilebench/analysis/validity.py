"""What makes a run's processes count: enough rounds and time, a steady per-pair ratio, no drift between the halves
of a process's rounds beyond its noise, a machine left alone while it timed or compiled, one machine and stack.

The thresholds are records/invocation.py's `Validity` (params.yaml's `benchmark.min_iters`, `min_time_s`, `max_cv`,
`disturbed_cores`, `max_halves_diff`), the one record they travel in: into an invocation's runs (its `Context`), an
exported plan's loop and its export. Pure functions; pooling processes into runs is runs.py's.
"""

from __future__ import annotations

import math
import statistics

from compilebench.harness import fingerprint, sample_stats
from compilebench.records.formats import TrialResult, TrialSpec
from compilebench.records.invocation import Validity

HALVES_ALPHA = 0.05  # a process's halves differ beyond its noise below this p (halves_p_value): at 5 rounds a half,
#                     only when nearly every ratio of one half is above every ratio of the other


def median_of(values: list[float | None]) -> float | None:
    """The median of the values present (None where there is none)."""
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def halves_ratio(eager_ms: tuple[float, ...], compiled_ms: tuple[float, ...]) -> float | None:
    """The speedup of the second half of a process's rounds over the first half's: 1 when the process was steady."""
    half = len(compiled_ms) // 2
    if half < 2:
        return None
    first = sample_stats.speedup(eager_ms[:half], compiled_ms[:half])
    return sample_stats.speedup(eager_ms[half : 2 * half], compiled_ms[half : 2 * half]) / first


def halves_p_value(eager_ms: tuple[float, ...], compiled_ms: tuple[float, ...]) -> float | None:
    """How likely the halves of a steady process differ as much as these do: a two-sided Mann-Whitney test of the
    first half's per-pair ratios against the second half's (ranks: a few outlying calls do not decide it)."""
    half = len(compiled_ms) // 2
    if half < 2 or min(compiled_ms[: 2 * half]) <= 0:
        return None
    from scipy import stats as scipy_stats

    ratios = [e / c for e, c in zip(eager_ms, compiled_ms, strict=False)]
    return float(scipy_stats.mannwhitneyu(ratios[:half], ratios[half : 2 * half], alternative="two-sided").pvalue)


def halves_drift(eager_ms: tuple[float, ...], compiled_ms: tuple[float, ...]) -> float | None:
    """How far and which way a process's speedup moved between its halves (log of halves_ratio: > 0 it rose) where
    that is beyond its noise (halves_p_value below HALVES_ALPHA), else 0; None where it has too few rounds to tell."""
    ratio = halves_ratio(eager_ms, compiled_ms)
    if ratio is None:
        return None
    p_value = halves_p_value(eager_ms, compiled_ms)
    return math.log(ratio) if p_value is not None and p_value < HALVES_ALPHA else 0.0


def pair_ratios(result: TrialResult) -> list[float]:
    """A process's per-pair ratios eager / compiled: what a speedup rests on (both arms move together in a level
    shift of the machine, and the ratio cancels it)."""
    return [e / c for e, c in zip(result.eager_ms, result.compiled_ms, strict=False) if c > 0]


def process_cv(result: TrialResult, compiled: bool) -> float | None:
    """The robust CV validity judges: of the per-pair ratio for a compiled run, of eager latency for an eager one."""
    samples = pair_ratios(result) if compiled else list(result.eager_ms)
    return sample_stats.summarize_ms(samples).get("robust_cv") if samples else None


def _busy(window: dict[str, float] | None, limit_cores: float) -> bool:
    window = window or {}
    return limit_cores > 0 and max(window.get("others_cores", 0.0), window.get("steal_cores", 0.0)) > limit_cores


def timing_disturbed(result: TrialResult, limit_cores: float) -> bool:
    """Whether other processes (or the VM's steal) took more than `limit_cores` (0: never) while this process timed:
    its samples are left out."""
    return _busy(result.disturbance, limit_cores)


def compile_disturbed(result: TrialResult, limit_cores: float) -> bool:
    """... while it compiled (its first call): its compile time is left out."""
    return _busy(result.compile_disturbance, limit_cores)


def is_disturbed(result: TrialResult, limit_cores: float) -> bool:
    """Whether either measured window of this process was disturbed."""
    return timing_disturbed(result, limit_cores) or compile_disturbed(result, limit_cores)


def validity_problems(processes: list[TrialResult], validity: Validity, compiled: bool) -> list[str]:
    """Why an otherwise ok run is too thin or too noisy to report (empty when it is fine)."""
    problems = []
    for result in processes:
        count = len(result.compiled_ms if compiled else result.eager_ms)
        if count < validity.min_iters:
            problems.append(f"{result.trial_id}: {count} iterations < benchmark.min_iters {validity.min_iters}")
        if result.timed_s is not None and result.timed_s < validity.min_time_s:
            problems.append(f"{result.trial_id}: timed {result.timed_s:.2f} s < benchmark.min_time_s")
    cv = median_of([process_cv(result, compiled) for result in processes])
    if cv is not None and cv > validity.max_cv:
        what = "per-pair ratio" if compiled else "latency"
        problems.append(f"median process robust cv of the {what} {cv:.3f} > benchmark.max_cv {validity.max_cv}")
    # Signed: the speedup the verdict uses is the processes' median, which a drift biases only where most processes
    # drift one way; level shifts inside processes, up in one and down in another, widen its interval instead.
    drift = (
        median_of([halves_drift(r.eager_ms, r.compiled_ms) for r in processes])
        if (compiled and validity.max_halves_diff > 0)
        else None
    )
    if drift is not None and abs(drift) > math.log1p(validity.max_halves_diff):
        problems.append(
            f"the median process's speedup moved {math.expm1(abs(drift)):.1%} between the halves of its "
            f"rounds ({'up' if drift > 0 else 'down'}), beyond its noise (p < {HALVES_ALPHA}), > "
            f"benchmark.max_halves_diff {validity.max_halves_diff}"
        )
    return problems


def machine_problems(processes: list[TrialResult]) -> tuple[int, list[str]]:
    """How many machines and software stacks a run's processes ran on, and the problem when more than one: a run
    pools processes of one machine and stack (a plan resumed on another kind of GPU, a cell moved to another node
    or an upgrade in between would otherwise be averaged into one number)."""
    found = fingerprint.mixture([result.environment for result in processes if result.environment])
    if len(found) <= 1:
        return 1, []
    return len(found), [
        f"its processes ran on {len(found)} different machines or software stacks "
        f"({fingerprint.counted(found)}); a run pools the processes of one machine and stack only"
    ]


def undisturbed(
    trials: list[tuple[TrialSpec, TrialResult]], validity: Validity
) -> tuple[list[tuple[TrialSpec, TrialResult]], list[str]]:
    """The processes a run's statistics use: those the machine left alone while they timed (every one, with a
    problem named, when none was)."""
    clean = [(s, r) for s, r in trials if not timing_disturbed(r, validity.disturbed_cores)]
    if clean or not trials:
        return clean, []
    return trials, [
        f"every process was disturbed (others' CPU above benchmark.disturbed_cores {validity.disturbed_cores})"
    ]
