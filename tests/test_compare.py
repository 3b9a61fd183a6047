"""Environments compared, on hand-made runs: ratios from per-process values, verdicts, health first, A/A."""

import pytest

from compilebench import compare, stats


def _row(environment, eager, compiled, key="k1", status="ok", breaks=0, invocation="inv", **extra):
    caches = zip(eager, compiled, (20.0, 3.0, 3.2), ("cold", "warm", "warm"), strict=False)
    processes = [
        {"eager_ms": [e] * 5, "compiled_ms": [c] * 5, "compile_s": cs, "cache": cache, "peak_mem_mib": 100.0}
        for e, c, cs, cache in caches
    ]
    return {"model_id": "org/m", "label": "M", "task": "t", "batch_size": 1, "variant": "default", "compile": True,
            "environment": environment, "environment_key": key, "status": status, "graph_break_count": breaks,
            "invocation_id": invocation, "process_results": processes, **extra}  # fmt: skip


def test_b_slower_than_a_is_flagged_with_its_ratio():
    a = _row("current", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("torch-new", [10.0, 10.1, 9.9], [6.0, 6.06, 5.94], key="k2")
    [row] = compare.comparison_rows([a, b], deltas={"compiled_latency": 0.03, "speedup": 0.03})
    assert row["compiled_latency_ratio"] == pytest.approx(1.2) and row["compiled_latency_verdict"] == "slower"
    assert row["speedup_verdict"] == "lower" and row["verdict"] == "slower"
    assert row["eager_latency_ratio"] == pytest.approx(1.0)
    assert row["interleaved"] and row["calibrated"] and row["candidate"] == "torch-new"
    assert compare.flagged([row]) == [row]


def test_without_calibration_nothing_is_equivalent():
    a = _row("current", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("current#2", [10.05, 10.0, 9.95], [5.02, 5.0, 4.98])
    [row] = compare.comparison_rows([a, b], deltas=None)
    assert row["compiled_latency_verdict"] == stats.INCONCLUSIVE and not row["calibrated"]
    [row] = compare.comparison_rows([a, b], deltas={"compiled_latency": 0.05})
    assert row["compiled_latency_verdict"] == stats.EQUIVALENT


def test_health_changes_come_first():
    a = _row("current", [10.0] * 3, [5.0] * 3)
    b = _row("new", [10.0] * 3, [5.0] * 3, key="k2", breaks=2)
    other_a = {**_row("current", [10.0] * 3, [5.0] * 3), "label": "A-first"}
    other_b = {**_row("new", [10.0] * 3, [5.0] * 3, key="k2"), "label": "A-first"}
    rows = compare.comparison_rows([other_a, a, other_b, b], deltas=None)
    assert rows[0]["health_change"] == "graph breaks 0 -> 2" and rows[1]["health_change"] == ""
    failed = compare.health_changes(a, {**b, "status": "compile_error"})
    assert "status ok -> compile_error" in failed


def test_aa_calibration_sets_each_metrics_margin():
    a = _row("current", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("current#2", [10.3, 10.2, 10.4], [5.0, 5.1, 5.0])
    assert compare.is_aa([a, b]) and not compare.is_aa([a, {**b, "environment_key": "k2"}])
    compared = compare.comparison_rows([a, b], deltas=None)
    deltas = compare.calibration(compared)
    assert deltas["eager_latency"] == pytest.approx(abs(compared[0]["eager_latency_ratio"] - 1), rel=0.05)
    assert set(deltas) >= {"eager_latency", "compiled_latency", "speedup", "peak_memory"}


def test_values_read_back_from_mlflow_are_used_as_they_are():
    row = {"process_values": {"speedup": [2.0, 2.2]}, "process_results": None}
    assert compare.process_values(row, "speedup") == [2.0, 2.2]
    with pytest.raises(ValueError, match="unknown metric"):
        compare.process_values(_row("x", [1.0], [1.0]), "bogus")


def test_compile_times_go_cold_or_warm_by_what_each_process_found_in_its_cache():
    """With a shared cache (a GPU machine's plan) the process row says whether its graphs came from the cache;
    a row written before that was recorded goes by its cache: `cold` and `shared` as cold."""
    shared = [{"eager_ms": [10.0], "compiled_ms": [5.0], "compile_s": s, "cache": "shared", "cold_compile": cold}
              for s, cold in ((12.6, True), (3.5, False))]  # fmt: skip
    assert compare.process_values({"process_results": shared}, "compile_cold") == [12.6]
    assert compare.process_values({"process_results": shared}, "compile_warm") == [3.5]
    older = [{**process, "cache": cache} for process, cache in zip(shared, ("shared", "warm"), strict=True)]
    for process in older:
        del process["cold_compile"]
    assert compare.process_values({"process_results": older}, "compile_cold") == [12.6]
    assert compare.process_values({"process_results": older}, "compile_warm") == [3.5]
