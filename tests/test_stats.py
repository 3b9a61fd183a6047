"""Statistics on hand-made samples (exact expectations) and on synthetic processes with a known truth (coverage)."""

import math

import numpy as np
import pytest

from compilebench.analysis import stats
from compilebench.harness import sample_stats


def test_summarize_exact_values():
    summary = sample_stats.summarize_ms([1.0, 2.0, 3.0, 4.0, 100.0])
    assert summary["count"] == 5
    assert summary["latency_ms_mean"] == pytest.approx(22.0)
    assert summary["latency_ms_median"] == 3.0
    assert summary["latency_ms_iqr"] == pytest.approx(2.0)  # 4 - 2
    assert summary["latency_ms_min"] == 1.0 and summary["latency_ms_max"] == 100.0
    assert summary["latency_ms_std"] == pytest.approx(math.sqrt(sum((x - 22) ** 2 for x in [1, 2, 3, 4, 100]) / 4))
    assert summary["robust_cv"] == pytest.approx(2.0 / 1.349 / 3.0)  # the outlier moves cv, not robust_cv
    assert summary["cv"] > 1.5


def test_summarize_empty_and_single():
    assert sample_stats.summarize_ms([]) == {"count": 0}
    assert sample_stats.summarize_ms([5.0])["latency_ms_std"] == 0.0


def test_speedup_is_ratio_of_medians():
    assert sample_stats.speedup([10, 10, 10, 1000], [5, 5, 5, 5]) == pytest.approx(2.0)


def test_improvement_pct_matches_the_doc_definition():
    # A100 bs1 ViT in the doc: 9.325 ms eager, 7.584 ms compiled -> 18.7 %
    assert sample_stats.improvement_pct(9.325, 7.584) == pytest.approx(18.67, abs=0.01)


def test_throughput_and_break_even():
    assert sample_stats.throughput_img_s(50.0, 4) == pytest.approx(80.0)
    assert sample_stats.break_even_calls(10.0, 60.0, 40.0) == pytest.approx(500.0)  # 10 s / 20 ms saved
    assert sample_stats.break_even_calls(10.0, 40.0, 60.0) is None  # never pays off


def test_within_process_bootstrap_of_a_clear_win_excludes_one():
    eager = [10.0 + 0.1 * (i % 5) for i in range(40)]
    compiled = [5.0 + 0.1 * (i % 3) for i in range(40)]
    low, high = sample_stats.paired_bootstrap_ci(eager, compiled)
    assert 1.0 < low <= sample_stats.speedup(eager, compiled) <= high
    assert stats.verdict(low, high) == "faster"
    assert stats.verdict(0.5, 0.9) == "slower" and stats.verdict(0.9, 1.1) == stats.NO_SIGNIFICANT_DIFFERENCE


def test_bootstrap_needs_pairs():
    with pytest.raises(ValueError, match="paired"):
        sample_stats.paired_bootstrap_ci([1.0, 2.0], [1.0])


def test_speedup_estimate_uses_processes_when_there_are_several():
    pairs = [([10.0] * 5, [5.0] * 5), ([12.0] * 5, [5.0] * 5), ([11.0] * 5, [5.0] * 5)]
    estimate = stats.speedup_estimate(pairs)
    assert estimate.method == stats.BETWEEN and estimate.processes == 3
    assert estimate.value == pytest.approx((2.0 * 2.4 * 2.2) ** (1 / 3))  # geometric mean of per-process speedups
    assert estimate.low < 2.0 and estimate.high > 2.4  # t with 2 df reaches past the range of three values
    single = stats.speedup_estimate(pairs[:1])
    assert single.method == stats.WITHIN and single.value == 2.0


def test_welch_ratio_of_b_over_a():
    same = stats.welch_ratio([10.0, 10.2, 9.8], [10.1, 9.9, 10.0])
    assert same.low < 1.0 < same.high and same.method == stats.UNPAIRED and same.p_value > 0.5
    slower = stats.welch_ratio([10.0, 10.1, 9.9, 10.0], [12.0, 12.1, 11.9, 12.0])
    assert slower.low > 1.15 and slower.value == pytest.approx(1.2, rel=1e-3) and slower.p_value < 0.001
    assert slower.low < slower.low90 < slower.value < slower.high90 < slower.high  # 90% inside 95%
    pooled = stats.welch_ratio([10.0], [12.0, 12.2, 11.8])  # one side of one process: the other's spread
    assert pooled.has_interval and pooled.low < 1.2 < pooled.high
    assert not stats.welch_ratio([10.0], [12.0]).has_interval  # neither side shows its spread


def test_paired_blocks_cancel_what_the_machine_did_to_both():
    """Block effects (the machine slow in block 2 for A and B alike) vanish from the paired difference: a 10%
    change is resolved where an unpaired comparison of the same values sees nothing."""
    drift = [1.0, 1.6, 0.9, 1.3]
    a = [100 * d for d in drift]
    b = [110 * d * (1 + e) for d, e in zip(drift, (0.01, -0.01, 0.0, 0.005), strict=True)]
    paired = stats.paired_ratio(a, b)
    assert paired.method == stats.PAIRED and paired.noise == "cell" and paired.blocks == 4
    assert 1.08 < paired.low < 1.10 < paired.high < 1.12 and paired.p_value < 0.001
    assert stats.welch_ratio(a, b).p_value > 0.3


def test_the_machines_noise_narrows_a_cell_and_a_much_noisier_cell_stands_alone():
    machine = stats.Noise(ss=30 * 0.07**2, dof=30)  # sd 0.07 of a log difference, 30 df
    three = stats.paired_ratio([1.0, 1.0, 1.0], [1.02, 0.98, 1.05], machine)
    alone = stats.paired_ratio([1.0, 1.0, 1.0], [1.02, 0.98, 1.05])
    assert three.noise == "cell+machine" and three.dof == 32 and not three.noisy
    assert alone.dof == 2 and three.halfwidth < alone.halfwidth  # t(32) instead of t(2)
    one = stats.paired_ratio([1.0], [1.05], machine)  # one block: the machine's noise gives it an interval
    assert one.noise == "machine" and one.has_interval and one.dof == 30
    assert not stats.paired_ratio([1.0], [1.05]).has_interval
    wild = stats.paired_ratio([1.0] * 4, [1.5, 0.7, 1.4, 0.6], machine)  # sd ~0.45 against 0.07
    assert wild.noisy and wild.noise == "cell" and wild.dof == 3
    assert stats.noise_of([0.1, 0.3]) == stats.Noise(pytest.approx(0.02), 1)
    assert (stats.Noise(1.0, 2) + stats.Noise(0.5, 1)).variance == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("interval90", "p_value", "changed", "relevant", "verdict"),
    [
        ((1.10, 1.20), 0.001, "slower", stats.BEYOND_MARGIN, "slower"),
        ((0.80, 0.90), 0.001, "faster", stats.BEYOND_MARGIN, "faster"),
        ((0.97, 1.03), 0.50, stats.NOT_SIGNIFICANT, stats.EQUIVALENT, stats.EQUIVALENT),
        ((1.01, 1.03), 0.01, "slower", stats.EQUIVALENT, stats.EQUIVALENT),  # real but within the margin
        ((1.02, 1.10), 0.01, "slower", stats.UNDECIDED, "slower"),  # changed; whether it matters is open
        ((0.93, 1.08), 0.60, stats.NOT_SIGNIFICANT, stats.UNDECIDED, stats.INCONCLUSIVE),
    ],
)
def test_two_questions_two_answers(interval90, p_value, changed, relevant, verdict):
    value = math.sqrt(interval90[0] * interval90[1])
    ratio = stats.Ratio(value, interval90[0] * 0.99, interval90[1] * 1.01, *interval90, p_value, 5, 4, stats.PAIRED)
    assert stats.change(ratio, "slower", "faster") == changed
    assert stats.relevance(ratio, 0.05) == relevant
    assert stats.verdict_of(changed, relevant) == verdict


def test_holm_adjusts_a_family_of_p_values():
    assert stats.holm([0.01, 0.04, 0.03, float("nan")])[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(stats.holm([0.01, float("nan")])[1])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_more_blocks_follow_the_square_root_rule_and_the_falling_t():
    assert stats.more_blocks(0.10, 0.05, 4, dof=1000) == 12  # twice as wide, t steady: four times the blocks
    assert stats.more_blocks(0.10, 0.05, 4, dof=3) == 5  # t(3) = 3.18 falls to t(8) = 2.31 on the way
    assert stats.more_blocks(0.04, 0.05, 4, dof=3) == 0
    assert stats.more_blocks(math.inf, 0.05, 1, dof=0) is None


def _processes(rng, truth, between_sd, within_sd, processes, pairs):
    """Synthetic per-process paired samples: each process has its own log-speedup offset (between-process
    variance) and noisy samples around it (within-process variance)."""
    out = []
    for _ in range(processes):
        offset = rng.normal(0, between_sd)
        eager = 10.0 * np.exp(rng.normal(0, within_sd, pairs))
        compiled = 10.0 / (truth * math.exp(offset)) * np.exp(rng.normal(0, within_sd, pairs))
        out.append((list(eager), list(compiled)))
    return out


def test_between_process_interval_covers_the_truth_95_percent():
    """With a real between-process variance, the t-interval over 3 processes covers the true speedup ~95% of the
    time; a bootstrap over the same 3 processes (resample processes, then pairs) would not (checked below)."""
    rng = np.random.default_rng(7)
    truth, trials = 1.5, 600
    covered = 0
    for _ in range(trials):
        estimate = stats.speedup_estimate(
            _processes(rng, truth, between_sd=0.05, within_sd=0.03, processes=3, pairs=10)
        )
        covered += estimate.low <= truth <= estimate.high
    assert 0.92 <= covered / trials <= 0.985, covered / trials


def test_hierarchical_bootstrap_over_three_processes_undercovers():
    """Why the interval is a t over processes: the percentile bootstrap (processes, then pairs in them) stays
    within the range of 3 process estimates and covers the truth far less often than its nominal 95%."""
    rng = np.random.default_rng(11)
    truth, trials, covered = 1.5, 300, 0
    for _ in range(trials):
        processes = _processes(rng, truth, between_sd=0.05, within_sd=0.03, processes=3, pairs=10)
        eager, compiled = (np.asarray([process[side] for process in processes]) for side in (0, 1))  # (3, pairs)
        resamples, pairs = 400, eager.shape[1]
        chosen = rng.integers(0, 3, (resamples, 3))[:, :, None]  # processes, with replacement
        pick = rng.integers(0, pairs, (resamples, 3, pairs))  # pairs within each chosen process, kept together
        boot = np.median(eager[chosen, pick].reshape(resamples, -1), axis=1) / np.median(
            compiled[chosen, pick].reshape(resamples, -1), axis=1
        )  # sample_stats.speedup (a ratio of medians) of each resample
        low, high = np.percentile(boot, [2.5, 97.5])
        covered += low <= truth <= high
    assert covered / trials < 0.88, covered / trials


def test_ratio_interval_of_identical_stacks_covers_one_95_percent():
    """A/A: two sides with the same truth and a between-process variance; Welch's interval holds 1.0 ~95%."""
    rng = np.random.default_rng(3)
    trials, covered = 800, 0
    for _ in range(trials):
        a = list(100 * np.exp(rng.normal(0, 0.05, 3)))
        b = list(100 * np.exp(rng.normal(0, 0.05, 3)))
        estimate = stats.welch_ratio(a, b)
        covered += estimate.low <= 1.0 <= estimate.high
    assert 0.93 <= covered / trials <= 0.99, covered / trials


def test_paired_verdicts_error_rates_on_synthetic_blocks():
    """What users run compilebench for, measured: per-process log values with block drift (shared by A and B of a
    block) and sd 0.05 each, 8 blocks, the machine's noise from an earlier A/A (30 df). Equal stacks: flagged at
    most ~5% of the time and covered ~95%; a real +10%: flagged >= 80% of the time, never called equivalent."""
    rng = np.random.default_rng(5)
    sd, blocks, trials = 0.05, 8, 1500
    machine = stats.Noise(ss=float((rng.normal(0, sd * math.sqrt(2), 31) ** 2).sum()), dof=30)
    outcomes = {1.0: [], 1.1: []}
    for truth, found in outcomes.items():
        for _ in range(trials):
            drift = rng.normal(0, 0.2, blocks)
            a = np.exp(drift + rng.normal(0, sd, blocks))
            b = truth * np.exp(drift + rng.normal(0, sd, blocks))
            ratio = stats.paired_ratio(list(a), list(b), machine)
            found.append(
                (
                    stats.verdict_of(stats.change(ratio, "slower", "faster"), stats.relevance(ratio, 0.05)),
                    ratio.low <= truth <= ratio.high,
                )
            )
    aa, real = outcomes[1.0], outcomes[1.1]
    assert sum(v in ("slower", "faster") for v, _ in aa) / trials <= 0.065
    assert 0.93 <= sum(c for _, c in aa) / trials <= 0.97
    assert sum(v == "slower" for v, _ in real) / trials >= 0.80
    assert not any(v == stats.EQUIVALENT for v, _ in real)


@pytest.mark.parametrize("sd, blocks, margin", [(0.05, 4, 0.10), (0.08, 3, 0.10), (0.05, 4, 0.05)])
def test_the_chance_of_equivalent_at_no_change_is_what_the_verdict_code_gives(sd, blocks, margin):
    """Synthetic paired blocks of equal stacks, judged by the verdict's own code with a machine record of the true
    spread (30 degrees of freedom): the share of cells `equivalent` against the margin is what the forecast's
    closed form says, from the half-width the record alone expects."""
    machine = stats.Noise(sd**2 * 30, 30)
    expected = stats.equivalence_chance(stats.expected_halfwidth(machine, blocks), machine.dof + blocks - 1, margin)
    rng = np.random.default_rng(11)
    trials = 3000
    hits = sum(
        stats.relevance(stats.paired_log_ratio(list(rng.normal(0, sd, blocks)), machine), margin) == stats.EQUIVALENT
        for _ in range(trials)
    )
    assert hits / trials == pytest.approx(expected, abs=0.03)  # 3000 trials: about +-0.01 of sampling error
    assert stats.equivalence_chance(math.inf, 5, margin) == 0.0 and stats.equivalence_chance(0.1, 0, margin) == 0.0
    assert stats.equivalence_chance(0.5, 10, 0.10) == 0.0  # the 90% interval alone is wider than the margin


def test_the_minimum_detectable_change_is_found_four_times_in_five():
    """Synthetic paired blocks with a known answer: a true change the size of the minimum detectable effect (from
    the blocks' true spread) is flagged by the verdict's own t-test in about 80% of comparisons, a change half that
    size far less often, and no change in about 5%."""
    blocks, sd = 6, 0.08
    se = sd / math.sqrt(blocks)
    halfwidth = stats.t_quantile(0.975, blocks - 1) * se  # the interval the true spread gives
    detectable = stats.minimum_detectable(halfwidth, blocks - 1)
    assert detectable == pytest.approx(math.expm1((2.5706 + 0.9195) * se), rel=1e-3)
    rng = np.random.default_rng(7)

    def flagged(truth: float) -> float:
        hits = 0
        for _ in range(3000):
            a = np.exp(rng.normal(0, 0.2, blocks))  # what the machine did to a block: cancelled by pairing
            b = a * truth * np.exp(rng.normal(0, sd, blocks))
            hits += stats.paired_ratio(list(a), list(b)).p_value < 0.05
        return hits / 3000

    assert 0.72 <= flagged(1 + detectable) <= 0.86  # 80% power (a t-test's, with its own variance: near it)
    assert flagged(1 + detectable / 2) <= 0.45
    assert flagged(1.0) <= 0.07
    assert stats.minimum_detectable(math.inf, 5) == math.inf and stats.minimum_detectable(0.1, 0) == math.inf
