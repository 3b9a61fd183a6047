"""aggregate: the summary join, headline metrics, and the cross-version comparison (hand-made and real runs)."""

import json

import pandas as pd
import pytest

from compilebench import aggregate, benchmark, tracking

BASE = {"model_id": "m", "label": "M", "batch_size": 1, "variant": "default", "device_name": "cpu-x", "status": "ok"}


def _run(torch_version, latency, cv, speedup, low, high, **extra):
    return {**BASE, "torch_version": torch_version, "transformers_version": "5.0", "latency_ms_median": latency,
            "cv": cv, "speedup": speedup, "speedup_ci_low": low, "speedup_ci_high": high, **extra}  # fmt: skip


def test_version_table_orders_versions_and_flags_regressions_beyond_noise():
    runs = pd.DataFrame(
        [
            _run("2.14.0", 12.0, 0.05, 1.2, 1.1, 1.3),  # speedup CI below 2.13's, latency +20% > 5% noise
            _run("2.13.0+cpu", 10.0, 0.05, 1.5, 1.4, 1.6),
            _run("2.9.1", 10.2, 0.05, 1.45, 1.35, 1.55),  # oldest
        ]
    )
    table = aggregate.version_table(runs)
    assert list(table["torch_version"]) == ["2.9.1", "2.13.0+cpu", "2.14.0"]
    assert list(table["regression"].astype(bool)) == [False, False, True]
    assert (
        "latency +20.0% > noise 5.0%" in table["regression"].iloc[2]
        and "below the previous CI" in table["regression"].iloc[2]
    )
    assert table["latency_change_pct"].iloc[1] == pytest.approx((10.0 / 10.2 - 1) * 100)


def test_change_within_noise_is_not_a_regression():
    runs = pd.DataFrame([_run("2.13.0", 10.0, 0.2, 1.5, 1.2, 1.8), _run("2.14.0", 11.0, 0.2, 1.4, 1.1, 1.7)])
    assert not aggregate.version_table(runs)["regression"].astype(bool).any()


def test_summary_joins_compiled_with_eager_and_metrics_count_only_ok():
    keys = {"model_id": "m", "label": "M", "task": "t", "batch_size": 1, "device": "cpu", "device_name": "x",
            "torch_version": "2.13", "transformers_version": "5"}  # fmt: skip
    results = pd.DataFrame(
        [
            {**keys, "variant": "eager", "compile": False, "status": "ok", "latency_ms_mean": 10.0,
             "peak_mem_mib": 100.0},
            {**keys, "variant": "a", "compile": True, "status": "ok", "latency_ms_mean": 5.0, "speedup": 2.0,
             "speedup_ci_low": 1.9, "speedup_ci_high": 2.1, "eager_latency_ms_mean": 10.2, "compile_s": 3.0},
            {**keys, "variant": "b", "compile": True, "status": "invalid", "latency_ms_mean": 4.0, "speedup": 2.5,
             "speedup_ci_low": 2.0, "speedup_ci_high": 3.0, "eager_latency_ms_mean": 10.0, "compile_s": 3.0},
        ]
    )  # fmt: skip
    table = aggregate.summarize(results)
    assert list(table["variant"]) == ["a", "b"] and list(table["eager_peak_mem_mib"]) == [100.0, 100.0]
    metrics = aggregate.headline_metrics(table)
    assert metrics["runs_ok"] == 1 and metrics["runs_not_ok"] == 1 and metrics["a_speedup_geomean"] == 2.0
    assert "b_speedup_geomean" not in metrics  # invalid runs stay out of the speedup tables
    assert list(aggregate.best_variants(table)["variant"]) == ["a"]


@pytest.mark.slow
def test_two_sets_of_logged_runs_compare_across_versions(tmp_path, monkeypatch, cell_records):
    """Two sets of runs logged through the real MLflow store, read back with search_runs, compared by version.

    Both sets are real measurements of one tiny model; the second is logged as if from a newer torch whose compiled
    model got 50% slower (one venv cannot hold two torch builds here; the comparison path is what is under test).
    """
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = tracking.client(uri)
    for torch_version, slowdown in (("2.13.0+cpu", 1.0), ("2.14.0", 1.5)):
        parent = tracking.start_parent(client, tracking.EXPERIMENT, torch_version, {}, {})
        for record in cell_records:
            relabelled = {**record, "torch_version": torch_version, "run_uid": f"{torch_version}/{record['variant']}"}
            if record["compile"] and slowdown != 1.0:
                relabelled["samples_ms"] = [s * slowdown for s in record["samples_ms"]]
                relabelled = {
                    **benchmark.build_record(relabelled, *relabelled["_build_args"]),
                    "run_uid": relabelled["run_uid"],
                }
            record = {k: v for k, v in relabelled.items() if k != "_build_args"}
            tracking.log_child(client, parent, **benchmark.run_payload(record))
    runs = aggregate.from_mlflow_frame(tracking.search_children(uri, tracking.EXPERIMENT))
    table = aggregate.version_table(runs)
    compiled = table[table["variant"] == "default"]
    assert list(compiled["torch_version"]) == ["2.13.0+cpu", "2.14.0"]
    assert "below the previous CI" in compiled["regression"].iloc[1]
    eager = table[table["variant"] == "eager"]
    assert eager["latency_change_pct"].iloc[1] == pytest.approx(0.0)  # the same eager samples: no change
    assert not eager["regression"].astype(bool).any()


@pytest.fixture(scope="module")
def cell_records(tmp_path_factory, image_640x480):
    """Real records of one tiny-model cell (eager + default), as the benchmark stage builds them."""
    from dataclasses import asdict

    from compilebench import load_models, models
    from compilebench.config import Benchmark, Variant

    root = tmp_path_factory.mktemp("cell")
    card = models.get_card("facebook/detr-resnet-50")
    entry = load_models.materialise(card, root, "tiny", "random-init", seed=0, online=False)
    image = root / "image.jpg"
    image_640x480.save(image)
    bench = asdict(Benchmark(min_iters=20, min_time_s=0.3, max_time_s=5.0, warmup_iters=1, memory_iters=1, max_cv=10.0))
    spec = {"model_id": card.hub_id, "checkpoint": entry["path"], "batch_size": 1, "image": str(image), "device": "cpu",
            "dtype": "float32", "benchmark": bench,
            "variants": {"eager": asdict(Variant(compile=False)), "default": asdict(Variant())}}  # fmt: skip
    context = {"device": "cpu", "device_name": "test-cpu", "transformers_version": "5.23.0", "suite": "t"}
    records = []
    for result in benchmark.run_cell_process(spec, 600):
        assert result["status"] == "ok", json.dumps(result)[:500]
        record = benchmark.build_record(result, spec, entry, context)
        record["_build_args"] = (spec, entry, context)
        records.append(record)
    return records
