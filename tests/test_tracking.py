"""tracking against a real MLflow SQLite store in tmp_path, read back with mlflow.search_runs."""

import mlflow

from compilebench import tracking


def test_child_runs_nest_under_parent_and_read_back(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    client = tracking.client(uri)
    parent = tracking.start_parent(client, "exp", "p", {"suite": "cpu"}, {"suite": "cpu"})
    child = tracking.log_child(
        client,
        parent,
        "ResNet bs1 default",
        {"model_id": "microsoft/resnet-50", "batch_size": 1, "skipped": None},
        {"latency_ms_median": 12.5, "speedup": 1.7, "nan": float("nan"), "flag": True},
        {"status": "ok"},
        {"samples.json": {"samples_ms": [1.0, 2.0]}},
    )
    runs = tracking.search_children(uri, "exp", parent)
    assert list(runs["run_id"]) == [child]
    row = runs.iloc[0]
    assert row["params.model_id"] == "microsoft/resnet-50" and row["params.batch_size"] == "1"
    assert row["metrics.latency_ms_median"] == 12.5 and row["metrics.speedup"] == 1.7
    assert "metrics.nan" not in runs and "metrics.flag" not in runs and "params.skipped" not in runs
    assert row["tags.mlflow.parentRunId"] == parent and row["status"] == "FINISHED"
    assert mlflow.artifacts.load_dict(f"runs:/{child}/samples.json") == {"samples_ms": [1.0, 2.0]}


def test_env_var_overrides_configured_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/other.db")
    assert tracking.tracking_uri("sqlite:///mlruns/mlflow.db") == f"sqlite:///{tmp_path}/other.db"


def test_credentials_are_redacted():
    assert tracking.redact("postgresql://bob:s3cret@db:5432/x") == "postgresql://***@db:5432/x"
    assert tracking.redact("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
