"""aggregate on hand-made rows: the summary join, headline metrics, the store's versions across invocations, and the
comparison with and without an A/A calibration (the real interleaved comparison is in test_environments)."""

import json

import pandas as pd
import pytest
from made_runs import run_record, runs_of

from compilebench import aggregate, tracking
from compilebench.analysis import compare, noise_record, stats

KEYS = {
    "environment": "current",
    "model_id": "m",
    "label": "M",
    "task": "t",
    "batch_size": 1,
    "device": "cpu",
    "device_name": "x",
    "torch_version": "2.13",
    "transformers_version": "5",
}


def test_summary_joins_compiled_with_eager_and_metrics_count_only_ok():
    results = pd.DataFrame(
        [
            {
                **KEYS,
                "variant": "eager",
                "compile": False,
                "status": "ok",
                "latency_ms_mean": 10.0,
                "peak_mem_mib": 100.0,
            },
            {
                **KEYS,
                "variant": "a",
                "compile": True,
                "status": "ok",
                "latency_ms_mean": 5.0,
                "speedup": 2.0,
                "speedup_ci_low": 1.9,
                "speedup_ci_high": 2.1,
                "eager_latency_ms_mean": 10.2,
                "compile_s": 3.0,
            },
            {
                **KEYS,
                "variant": "b",
                "compile": True,
                "status": "invalid",
                "latency_ms_mean": 4.0,
                "speedup": 2.5,
                "speedup_ci_low": 2.0,
                "speedup_ci_high": 3.0,
                "eager_latency_ms_mean": 10.0,
                "compile_s": 3.0,
            },
        ]
    )
    table = aggregate.summarize(results)
    assert list(table["variant"]) == ["a", "b"] and list(table["eager_peak_mem_mib"]) == [100.0, 100.0]
    metrics = aggregate.headline_metrics(table, [])
    assert metrics["runs_ok"] == 1 and metrics["runs_not_ok"] == 1 and metrics["a_speedup_geomean"] == 2.0
    assert "b_speedup_geomean" not in metrics  # invalid runs stay out of the speedup tables
    assert list(aggregate.best_variants(table)["variant"]) == ["a"]


def _store_row(torch_version, invocation, medians, start):
    return {
        "model_id": "m",
        "label": "M",
        "task": "t",
        "batch_size": 1,
        "variant": "default",
        "compile": True,
        "fullgraph": False,
        "status": "ok",
        "environment": "current",
        "environment_key": torch_version,
        "torch_version": torch_version,
        "transformers_version": "5.0",
        "device_name": "cpu-x",
        "device": "cpu",
        "machine_fingerprint": "f",
        "invocation_id": invocation,
        "start_time": start,
        "process_values": {"compiled_latency": medians, "eager_latency": [10.0, 10.1, 9.9]},
    }
    # an older store's unpaired lists: across invocations nothing pairs anyway


def test_versions_across_invocations_are_ordered_by_version_and_not_interleaved():
    rows = [
        _store_row("2.14.0", "i3", [6.0, 6.1, 5.9], 3),
        _store_row("2.13.0+cpu", "i2", [5.0, 5.01, 4.99], 2),
        _store_row("2.9.1", "i1", [5.0, 5.02, 4.98], 1),
        _store_row("2.13.0+cpu", "i0", [9.0, 9.0, 9.0], 0),  # an older rerun of the same stack: the newest counts
    ]
    record = noise_record.record_noise(None, "aa", {"m|bs1|default": {"compiled_latency": stats.Noise(0.01, 10)}}, {})
    oldest_first = [tracking.stored_run(row) for row in sorted(rows, key=lambda row: row["start_time"])]
    versions = aggregate.version_rows(oldest_first, calibrations={"f|cpu": record}, margin=0.05)
    versions = [comparison.row() for comparison in versions]  # versions.csv's lines
    assert [(r["baseline_versions"].split()[1], r["candidate_versions"].split()[1]) for r in versions] == [
        ("2.9.1", "2.13.0+cpu"),
        ("2.13.0+cpu", "2.14.0"),
    ]
    assert (
        versions[0]["compiled_latency_verdict"] == "equivalent" and versions[1]["compiled_latency_verdict"] == "slower"
    )
    assert not any(r["interleaved"] for r in versions) and all(r["calibrated"] for r in versions)
    assert all(r["compiled_latency_method"] == stats.UNPAIRED for r in versions)  # separate invocations: Welch


def test_each_invocation_adds_its_blocks_to_the_machines_noise_and_later_ones_use_it(tmp_path):
    def row(environment, key, compiled, invocation):
        processes = [
            {
                "eager_ms": [10.0] * 3,
                "compiled_ms": [c] * 3,
                "compile_s": 2.0,
                "cache": "warm",
                "peak_mem_mib": 50.0,
                "block": f"default/r{i}",
            }
            for i, c in enumerate(compiled)
        ]
        identity = {"environment": environment, "environment_key": key, "variant": "default", "compile": True}
        return {
            **KEYS,
            **identity,
            "status": "ok",
            "machine_fingerprint": "f",
            "invocation_id": invocation,
            "process_results": processes,
        }

    calibration = tmp_path / "calibration.json"
    aa = runs_of([row("current", "k", [5.0, 5.1, 4.9], "i1"), row("current#2", "k", [5.1, 5.0, 5.2], "i1")])
    compared, record = aggregate.comparison(aa, ["current", "current#2"], calibration, margin=0.05)
    assert record is not None and not compared[0].calibrated
    assert (
        record["invocations"]["i1"]["aa"]
        and record["invocations"]["i1"]["noise"]["m|bs1|default"]["compiled_latency"][1] == 2
    )
    calibration.write_text(json.dumps({"f|cpu": record}))
    ab = runs_of([row("current", "k", [5.0, 5.1, 4.9], "i2"), row("new", "k2", [5.6, 5.7, 5.5], "i2")])
    compared, record = aggregate.comparison(ab, ["current", "new"], calibration, margin=0.05)
    judged = compared[0].judged["compiled_latency"]
    assert compared[0].calibrated and judged.verdict == "slower"
    assert judged.ratio.dof == 4  # its own 2 df pooled with the A/A's 2
    assert set(record["invocations"]) == {"i1", "i2"}  # accumulated, not overwritten
    reversed_order, _ = aggregate.comparison(ab, ["new", "current"], calibration, margin=0.05)
    assert reversed_order[0].baseline == "new"  # the baseline is compare's first, whatever order runs finished


def test_process_values_survive_the_mlflow_round_trip(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = tracking.client(uri)
    parent = tracking.start_parent(client, tracking.EXPERIMENT, "p", {}, {})
    processes = [
        {
            "eager_ms": [10.0, 10.2],
            "compiled_ms": [5.0, 5.2],
            "compile_s": 3.0,
            "cache": "cold",
            "peak_mem_mib": 60.0,
            "trial_id": "t",
        }
    ]
    row = {
        **KEYS,
        "variant": "default",
        "compile": True,
        "status": "ok",
        "run_uid": "u",
        "fullgraph": False,
        "process_results": processes,
        "environment_freeze": ["torch==2.13.0"],
    }
    tracking.log_child(client, parent, **tracking.run_payload(run_record(row)))
    [read] = tracking.store_rows(tracking.search_children(uri, tracking.EXPERIMENT))
    assert read["process_values"]["compiled_latency"] == {"p0": 5.1} and read["process_values"]["compile_cold"] == {
        "p0": 3.0
    }
    assert read["batch_size"] == 1 and read["compile"] is True
    assert pytest.approx(read["process_values"]["speedup"]["p0"]) == 10.1 / 5.1


@pytest.mark.parametrize("compared", [["current", "current"], ["current", "current", "current"]])
def test_the_parent_metrics_of_an_a_a_run_reach_the_store(tmp_path, monkeypatch, compared):
    """A/A and A/A/A labels (`current#2`, `current#3`) become key-safe metric keys, and the parent holds them all."""
    from compilebench.records.formats import environment_labels

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rows = [
        {
            **KEYS,
            "environment": label,
            "variant": variant,
            "compile": variant != "eager",
            "status": "ok",
            "latency_ms_mean": 5.0,
            "speedup": 2.0,
            "compile_s": 3.0,
        }
        for label in environment_labels(compared)
        for variant in ("eager", "default")
    ]
    metrics = aggregate.headline_metrics(aggregate.summarize(pd.DataFrame(rows)), [])
    expected = {"current_default_speedup_geomean", "current_2_default_speedup_geomean"}
    assert expected | ({"current_3_default_speedup_geomean"} if len(compared) == 3 else set()) <= set(metrics)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = tracking.Tracker(uri, "inv-aa")
    assert tracker.log_parent(metrics=metrics) and not tracker.failures
    held = tracking.client(uri).get_run(tracker.parent()).data.metrics
    assert held == pytest.approx(metrics)
    # a metrics.json written before keys were made safe: sync still logs it, the refused characters made `_`
    assert tracker.log_parent(metrics={"current#2_default_speedup_geomean": 2.5}) and not tracker.failures
    assert tracking.client(uri).get_run(tracker.parent()).data.metrics["current_2_default_speedup_geomean"] == 2.5


def test_cells_json_holds_each_compared_cells_ratio_ci_and_verdict_code_for_dvc():
    """`dvc metrics diff` between two experiments compares every (stack, cell, metric): B/A, its CI and the verdict
    code; a metric not compared (an eager cell's speedup) or a bound that is NaN is no key; series steps stay out."""
    row = {
        "reference": "first",
        "candidate": "current#2",
        "baseline": "current",
        "label": "ResNet",
        "batch_size": 1,
        "variant": "default",
        "compiled_latency_ratio": 1.2,
        "compiled_latency_ci_low": 1.1,
        "compiled_latency_ci_high": float("nan"),
        "compiled_latency_verdict": "slower",
        "peak_memory_ratio": 1.0,
        "peak_memory_ci_low": 0.99,
        "peak_memory_ci_high": 1.01,
        "peak_memory_verdict": "equivalent",
        "speedup_verdict": float("nan"),
        "headline": "compiled_latency",
        "verdict": "slower",
    }
    rows = [row, {**row, "reference": "previous", "candidate": "current#3"}]  # comparison.csv's lines
    cells = aggregate.cell_metrics([compare.Comparison.read(line) for line in rows])
    assert cells == {
        "current_2_vs_current": {
            "ResNet bs1 default": {
                "compiled_latency": {"ratio": 1.2, "ci_low": 1.1, "verdict_code": 1},
                "peak_memory": {"ratio": 1.0, "ci_low": 0.99, "ci_high": 1.01, "verdict_code": 0},
            }
        }
    }
    json.dumps(cells, allow_nan=False)  # what DVC reads: no NaN


def test_the_store_lists_a_comparison_repeated_in_separate_invocations_and_flags_a_contradiction(tmp_path, monkeypatch):
    """Two invocations of the same two stacks (and an A/A) logged as the pipeline logs them (each run, then its
    comparison onto the candidate), read back from a real MLflow store: per cell and metric each invocation's word,
    oldest first, and `contradict` where one said slower and the other faster. A pair compared once is not listed."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = tracking.client(uri)
    experiment = tracking.experiment_id(client, tracking.EXPERIMENT)

    def invocation(name, compiled_b, environments=(("current", "k1"), ("torch-new", "k2"))):
        parent = tracking.start_parent(client, tracking.EXPERIMENT, name, {}, {})
        rows = []
        for (environment, key), compiled in zip(environments, ([5.0, 5.1, 4.9], compiled_b), strict=True):
            for variant in ("default", "eager"):  # a compiled cell and the eager cell, from the same processes
                processes = [
                    {
                        "eager_ms": [10.0] * 3,
                        "compiled_ms": [c] * 3 if variant == "default" else [],
                        "compile_s": 2.0 if variant == "default" else None,
                        "cache": "warm",
                        "peak_mem_mib": 50.0,
                        "block": f"default/r{i}",
                    }
                    for i, c in enumerate(compiled)
                ]
                rows.append(
                    {
                        "environment": environment,
                        "environment_key": key,
                        "invocation_id": name,
                        "run_uid": f"{name}/{environment}/{variant}",
                        "process_results": processes,
                        "variant": variant,
                        "compile": variant == "default",
                        "machine_fingerprint": "f",
                        "device_name": "cpu",
                    }
                )
        for row in rows:
            tracking.log_child(client, parent, **tracking.run_payload(run_record(row)))
        compared = compare.comparison_rows(runs_of(rows), noise=None)
        for row in compared:
            run_id = tracking.find_run(client, experiment, tracking.RUN_UID_TAG, row.candidate_run_uid)
            tracking.log_metrics(client, run_id, tracking.comparison_metrics(row))
        [compiled] = [row for row in compared if row.variant == "default"]
        return compiled

    first = invocation("i1", [6.0, 6.1, 5.9])  # B 20% slower
    second = invocation("i2", [4.0, 4.1, 3.9])  # B 20% faster
    invocation("i3", [5.0, 5.1, 4.9], (("current", "k1"), ("current#2", "k1")))  # an A/A: its own pair, once
    assert (
        first.judged["compiled_latency"].verdict == "slower" and second.judged["compiled_latency"].verdict == "faster"
    )
    stored = tracking.store_rows(tracking.search_children(uri, tracking.EXPERIMENT))
    found = aggregate.repeats(sorted(stored, key=lambda row: row["start_time"]))  # oldest first, as from_mlflow
    repeats = pd.DataFrame([repeat.row() for repeat in found], columns=aggregate.REPEAT_COLUMNS)
    latency = repeats[repeats["metric"] == "compiled_latency"].iloc[0]
    assert latency["invocations"] == 2 and latency["verdicts"] == "slower; faster" and latency["contradict"]
    assert (
        latency["ratios"] == f"{first.judged['compiled_latency'].ratio.value:.3f}; "
        f"{second.judged['compiled_latency'].ratio.value:.3f}"
    )
    assert (latency["baseline_key"], latency["candidate_key"]) == ("k1", "k2") and latency["model_id"] == "org/m"
    memory = repeats[repeats["metric"] == "peak_memory"].iloc[0]
    assert not memory["contradict"]  # the same memory both times: agreed
    assert set(repeats["candidate_key"]) == {"k2"}  # the A/A was run once: not a repeat
    assert list(repeats[repeats["metric"] == "eager_latency"]["variant"]) == ["eager"]  # each cell counted once
    assert (repeats["metric"] == "compiled_latency").sum() == 1
