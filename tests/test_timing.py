"""Timers, memory and the measurement loops, on the CPU (the CUDA paths run in test_cuda on a GPU)."""

import threading
import time

from compilebench.harness import timing
from compilebench.records.formats import williams_orders


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


def test_rounds_follow_a_williams_design_and_stop_at_the_minimums():
    calls = []
    arms = [lambda name=name: calls.append(name) for name in "ecf"]
    samples, elapsed, turns = timing.round_samples(arms, "cpu", min_rounds=6, min_time_s=0.0, max_time_s=5.0, start=1)
    assert [len(arm) for arm in samples] == [6, 6, 6] and elapsed < 5.0 and turns == []  # alone: no turns
    rounds = ["".join(calls[i : i + 3]) for i in range(0, 18, 3)]
    expected = ["".join("ecf"[arm] for arm in order) for order in williams_orders(3)]
    assert rounds == expected[1:] + expected[:1]  # every order of the design once, from `start`
    two = []
    timing.round_samples([lambda: two.append("e"), lambda: two.append("c")], "cpu", 2, 0.0, 5.0)
    assert two == ["e", "c", "c", "e"]  # two arms: the order flips every round, as pairs always did


def test_adaptive_stop_waits_for_a_narrow_ci():
    calls = iter(range(10**6))
    wobbly = lambda: [sum(range(200 + 150 * (next(calls) % 2)))]  # noqa: E731 (alternating cost: noisy pairs)
    steady = lambda: None  # noqa: E731
    samples, _, _ = timing.round_samples([wobbly, steady], "cpu", 10, 0.0, 5.0, target_ci_halfwidth=0.0)
    assert len(samples[0]) == 10  # no target: stops at the minimum
    samples, elapsed, _ = timing.round_samples([wobbly, steady], "cpu", 10, 0.0, 0.3, target_ci_halfwidth=1e-9)
    assert elapsed >= 0.3 and len(samples[0]) > 10  # an unreachable target: runs to max_time_s


def test_warm_up_goes_on_while_the_rounds_still_speed_up():
    calls = iter(range(10**6))
    # 20% faster every call, from 40 ms down to 2 ms: from the first judged round to the planned 0.1 s, its last
    # rounds run a third faster than the ones before, 5-13 ms a call, beyond the sleeps' jitter on a loaded machine (a
    # trend of 0.4 ms a call was not: with a second test worker compiling, it once stopped at 0.058 s)
    settling = lambda: time.sleep(max(0.040 * 0.8 ** next(calls), 0.002))  # noqa: E731 (faster and faster)
    steady = lambda: time.sleep(0.002)  # noqa: E731
    rounds, seconds, drift = timing.warm_up([steady, steady], "cpu", min_rounds=2, min_s=0.05)
    assert rounds >= 2 and 0.05 <= seconds < 0.2 and drift <= timing.WARMUP_DRIFT  # steady: stops at the minimum
    rounds, seconds, _ = timing.warm_up([steady, settling], "cpu", min_rounds=2, min_s=0.1)
    assert seconds > 0.2  # still speeding up after 0.1 s: warmed up for longer
    assert seconds < 0.1 * timing.WARMUP_MAX_FACTOR + 0.1  # and never past the cap


def test_a_slow_model_warms_up_for_four_rounds_at_least_so_its_drift_can_be_judged():
    slow = lambda: time.sleep(0.03)  # noqa: E731 (two rounds fill the planned seconds)
    rounds, _, drift = timing.warm_up([slow, slow], "cpu", min_rounds=1, min_s=0.1)
    assert rounds >= 4 and drift is not None  # judged after four rounds at least, not stopped at two
    rounds, _, drift = timing.warm_up([slow, slow], "cpu", min_rounds=1, min_s=0.0)
    assert rounds == 1 and drift is None  # no seconds planned: the cap came first, the drift not judged


def test_the_machine_state_has_no_gpu_fields_on_a_cpu():
    state = timing.machine_state("cpu")
    assert state["cpu_affinity"] >= 1 and "load_1m" in state
    assert not any(key.startswith("gpu_") for key in state)


def test_a_function_the_drivers_nvml_lacks_costs_its_field_only():
    import ctypes

    library = ctypes.CDLL(None)  # a real library (this process's C library) without NVML's functions
    assert timing._nvml_read(library, "nvmlDeviceGetCurrentClocksEventReasons", None, None) is None
    assert timing._nvml_read(library, "abs", -3) == 3  # a function it has is called, its return code returned


def test_single_samples_stop_at_the_minimums_or_max_time():
    samples, elapsed = timing.single_samples(lambda: None, "cpu", min_iters=4, min_time_s=0.0, max_time_s=5.0)
    assert len(samples) == 4
    samples, elapsed = timing.single_samples(lambda: time.sleep(0.02), "cpu", 10**6, 0.0, max_time_s=0.1)
    assert 0.1 <= elapsed < 1.0


def test_how_a_process_s_threads_were_moved_about_is_read_from_the_kernel():
    """Migrations and preemptions of this process's threads: counters that only grow, per second in a disturbance."""
    before = timing.cpu_snapshot()
    spinning = [threading.Thread(target=lambda: sum(range(3_000_000))) for _ in range(3)]  # 3 threads on 2 cores
    for thread in spinning:
        thread.start()
    for thread in spinning:
        thread.join()
    after = timing.cpu_snapshot()
    assert len(before) == len(after) == 7
    assert all(later >= earlier for earlier, later in zip(before[5:], after[5:], strict=True))
    found = timing.disturbance(before, after)
    assert found["migrations_per_s"] >= 0 and found["preempted_per_s"] >= 0
    assert timing.disturbance(before[:5], after[:5]).keys() == found.keys() - {"migrations_per_s", "preempted_per_s"}
