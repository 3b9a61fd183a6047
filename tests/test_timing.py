"""Statistics on hand-made samples: exact expectations."""

import math

import pytest

from compilebench import timing


def test_summarize_exact_values():
    stats = timing.summarize_ms([1.0, 2.0, 3.0, 4.0, 100.0])
    assert stats["count"] == 5
    assert stats["latency_ms_mean"] == pytest.approx(22.0)
    assert stats["latency_ms_median"] == 3.0
    assert stats["latency_ms_iqr"] == pytest.approx(2.0)  # 4 - 2
    assert stats["latency_ms_min"] == 1.0 and stats["latency_ms_max"] == 100.0
    assert stats["latency_ms_std"] == pytest.approx(math.sqrt(sum((x - 22) ** 2 for x in [1, 2, 3, 4, 100]) / 4))


def test_summarize_empty_and_single():
    assert timing.summarize_ms([]) == {"count": 0}
    assert timing.summarize_ms([5.0])["latency_ms_std"] == 0.0


def test_speedup_is_ratio_of_medians():
    assert timing.speedup([10, 10, 10, 1000], [5, 5, 5, 5]) == pytest.approx(2.0)


def test_improvement_pct_matches_the_doc_definition():
    # A100 bs1 ViT in the doc: 9.325 ms eager, 7.584 ms compiled -> 18.7 %
    assert timing.improvement_pct(9.325, 7.584) == pytest.approx(18.67, abs=0.01)


def test_throughput_counts_images_per_batch():
    assert timing.throughput_img_s(50.0, 4) == pytest.approx(80.0)


def test_ci_of_a_clear_win_excludes_one():
    eager = [10.0 + 0.1 * (i % 5) for i in range(40)]
    compiled = [5.0 + 0.1 * (i % 3) for i in range(40)]
    low, high = timing.speedup_ci(eager, compiled)
    assert 1.0 < low <= timing.speedup(eager, compiled) <= high
    assert timing.verdict(low, high) == "faster"


def test_ci_of_noise_straddles_one():
    eager = [10.0 + (i % 7) for i in range(50)]
    compiled = [10.0 + ((i * 3) % 7) for i in range(50)]
    low, high = timing.speedup_ci(eager, compiled)
    assert low < 1.0 < high
    assert timing.verdict(low, high) == timing.NO_SIGNIFICANT_DIFFERENCE


def test_ci_needs_pairs():
    with pytest.raises(ValueError, match="paired"):
        timing.speedup_ci([1.0, 2.0], [1.0])


def test_verdict_slower():
    assert timing.verdict(0.5, 0.9) == "slower"


def test_break_even_calls():
    assert timing.break_even_calls(10.0, 60.0, 40.0) == pytest.approx(500.0)  # 10 s / 20 ms saved
    assert timing.break_even_calls(10.0, 40.0, 60.0) is None  # never pays off


def test_time_call_ms_returns_output_and_positive_time():
    out, ms = timing.time_call_ms(lambda: sum(range(10000)), "cpu")
    assert out == sum(range(10000)) and ms > 0


def test_cpu_peak_memory_sees_an_allocation():
    timing.reset_peak_memory("cpu")
    before = timing.peak_memory_mib("cpu")
    block = bytearray(64 * 2**20)  # 64 MiB, touched
    block[::4096] = b"x" * len(block[::4096])
    assert timing.peak_memory_mib("cpu") - before > 50
    del block
