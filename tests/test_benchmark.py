"""benchmark's pure parts: validity rules, the record it builds from a cell result, the adaptive stop."""

from dataclasses import asdict

from compilebench import benchmark, cell
from compilebench.config import Benchmark, Variant

BENCH = asdict(Benchmark(min_iters=10, min_time_s=1.0, max_cv=0.2))


def _spec():
    return {
        "model_id": "microsoft/resnet-50",
        "batch_size": 2,
        "dtype": "float32",
        "benchmark": BENCH,
        "variants": {"eager": asdict(Variant(compile=False)), "default": asdict(Variant())},
    }


ENTRY = {"label": "ResNet", "task": "image-classification", "scale": "full", "weights_source": "random-init",
         "config_origin": "card:resnet-50.yaml", "param_count": 25557032}  # fmt: skip


def test_compiled_record_has_paired_speedup_and_doc_improvement():
    result = {"variant": "default", "status": "ok", "first_call_s": 2.0, "timed_s": 1.5,
              "samples_ms": [5.0] * 10 + [5.2] * 10, "paired_eager_ms": [10.0] * 10 + [10.4] * 10}  # fmt: skip
    record = benchmark.build_record(result, _spec(), ENTRY, {"device": "cpu"})
    assert record["status"] == "ok" and record["cell"] == "microsoft/resnet-50|bs2|default"
    assert record["speedup"] == 2.0 and record["speedup_ci_low"] == 2.0 and record["speedup_verdict"] == "faster"
    assert record["improvement_pct"] == 50.0
    assert record["throughput_img_s"] == 2 * 1000 / 5.1
    assert record["break_even_calls"] == 2000.0 / 5.1  # 2 s of compile over 5.1 ms saved per call


def test_too_few_iterations_or_noise_make_a_run_invalid():
    noisy = {"variant": "default", "status": "ok", "first_call_s": 1.0, "timed_s": 2.0,
             "samples_ms": [1.0, 9.0] * 6, "paired_eager_ms": [5.0] * 12}  # fmt: skip
    record = benchmark.build_record(noisy, _spec(), ENTRY, {})
    assert record["status"] == "invalid" and "benchmark.max_cv" in record["error"]
    short = {"variant": "eager", "status": "ok", "first_call_s": 1.0, "timed_s": None, "samples_ms": [5.0] * 3}
    record = benchmark.build_record(short, _spec(), ENTRY, {})
    assert record["status"] == "invalid" and "benchmark.min_iters" in record["error"]


def test_failed_result_keeps_status_and_error():
    failed = {"variant": "default", "status": "compile_error", "error": "boom"}
    record = benchmark.build_record(failed, _spec(), ENTRY, {})
    assert record["status"] == "compile_error" and record["error"] == "boom" and "speedup" not in record


def test_adaptive_stop_waits_for_a_narrow_ci():
    calls = iter(range(10**6))
    wobbly = lambda: [sum(range(200 + 150 * (next(calls) % 2)))]  # noqa: E731 (alternating cost: noisy pairs)
    steady = lambda: None  # noqa: E731
    eager, _, _ = cell.paired_timing(wobbly, steady, "cpu", 10, 0.0, 5.0, target_ci_halfwidth=0.0)
    assert len(eager) == 10  # no target: stops at the minimum
    eager, _, elapsed = cell.paired_timing(wobbly, steady, "cpu", 10, 0.0, 0.3, target_ci_halfwidth=1e-9)
    assert elapsed >= 0.3 and len(eager) > 10  # an unreachable target: runs to max_time_s
