"""Timers, memory and the measurement loops, on the CPU (the CUDA paths run in test_cuda on a GPU)."""

import time

from compilebench import timing


def test_time_call_ms_returns_output_and_positive_time():
    out, ms = timing.time_call_ms(lambda: sum(range(10000)), "cpu")
    assert out == sum(range(10000)) and ms > 0


def test_first_call_is_timed_on_the_host_clock():
    out, seconds = timing.time_first_call_s(lambda: time.sleep(0.05) or "done", "cpu")
    assert out == "done" and 0.05 <= seconds < 1.0


def test_cpu_peak_memory_sees_an_allocation():
    timing.reset_peak_memory("cpu")
    before = timing.peak_memory_mib("cpu")
    block = bytearray(64 * 2**20)  # 64 MiB, touched
    block[::4096] = b"x" * len(block[::4096])
    assert timing.peak_memory_mib("cpu") - before > 50
    del block
    assert timing.peak_reserved_mib("cpu") is None


def test_paired_samples_alternate_and_stop_at_the_minimums():
    calls = []
    eager, compiled, elapsed = timing.paired_samples(
        lambda: calls.append("e"), lambda: calls.append("c"), "cpu", min_iters=6, min_time_s=0.0, max_time_s=5.0
    )
    assert len(eager) == len(compiled) == 6 and elapsed < 5.0
    assert calls[:4] == ["e", "c", "c", "e"]  # the order flips every pair


def test_adaptive_stop_waits_for_a_narrow_ci():
    calls = iter(range(10**6))
    wobbly = lambda: [sum(range(200 + 150 * (next(calls) % 2)))]  # noqa: E731 (alternating cost: noisy pairs)
    steady = lambda: None  # noqa: E731
    eager, _, _ = timing.paired_samples(wobbly, steady, "cpu", 10, 0.0, 5.0, target_ci_halfwidth=0.0)
    assert len(eager) == 10  # no target: stops at the minimum
    eager, _, elapsed = timing.paired_samples(wobbly, steady, "cpu", 10, 0.0, 0.3, target_ci_halfwidth=1e-9)
    assert elapsed >= 0.3 and len(eager) > 10  # an unreachable target: runs to max_time_s


def test_single_samples_stop_at_the_minimums_or_max_time():
    samples, elapsed = timing.single_samples(lambda: None, "cpu", min_iters=4, min_time_s=0.0, max_time_s=5.0)
    assert len(samples) == 4
    samples, elapsed = timing.single_samples(lambda: time.sleep(0.02), "cpu", 10**6, 0.0, max_time_s=0.1)
    assert 0.1 <= elapsed < 1.0
