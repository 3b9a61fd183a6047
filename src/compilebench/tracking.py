"""MLflow: one parent run per pipeline invocation, one child run per eager or compiled measurement.

The only module that imports mlflow. The store is `tracking.uri` in params (SQLite under mlruns/ by default);
the MLFLOW_TRACKING_URI environment variable overrides it, e.g. to point at a shared `mlflow server`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

LOGGER = logging.getLogger(__name__)

PARENT_RUN_TAG = "mlflow.parentRunId"
EXPERIMENT = "compilebench"  # every pipeline invocation logs here
_CREDENTIALS = re.compile(r"(//)[^/@\s]+@")  # user:password@ in a URI


def redact(text: str) -> str:
    """Drop credentials embedded in URIs (`scheme://user:pass@host` -> `scheme://***@host`)."""
    return _CREDENTIALS.sub(r"\1***@", text)


def tracking_uri(configured: str) -> str:
    """The store to use: MLFLOW_TRACKING_URI when set, else the configured one."""
    return os.environ.get("MLFLOW_TRACKING_URI") or configured


def client(configured_uri: str) -> MlflowClient:
    """A client on the project's store; creates the folder of a local SQLite store."""
    uri = tracking_uri(configured_uri)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri)


def experiment_id(mlflow_client: MlflowClient, name: str) -> str:
    """The id of experiment `name`, created if missing."""
    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return mlflow_client.create_experiment(name)


def _params(values: dict[str, Any]) -> list[Param]:
    return [Param(key, redact(str(value))[:6000]) for key, value in values.items() if value is not None]


def _metrics(values: dict[str, Any], timestamp_ms: int) -> list[Metric]:
    return [
        Metric(key, float(value), timestamp_ms, 0)
        for key, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and value == value  # drop NaN
    ]


def _tags(values: dict[str, Any]) -> list[RunTag]:
    return [RunTag(key, redact(str(value))) for key, value in values.items() if value is not None]


def start_parent(
    mlflow_client: MlflowClient, experiment: str, name: str, params: dict[str, Any], tags: dict[str, Any]
) -> str:
    """Open the parent run of one pipeline invocation; returns its run id."""
    run = mlflow_client.create_run(experiment_id(mlflow_client, experiment), run_name=name, tags={"role": "pipeline"})
    mlflow_client.log_batch(run.info.run_id, params=_params(params), tags=_tags(tags))
    return run.info.run_id


def log_child(
    mlflow_client: MlflowClient,
    parent_run_id: str,
    name: str,
    params: dict[str, Any],
    metrics: dict[str, Any],
    tags: dict[str, Any],
    artifacts: dict[str, Any] | None = None,
    failed: bool = False,
) -> str:
    """One finished child run under `parent_run_id`, with params, metrics, tags and JSON artifacts."""
    parent = mlflow_client.get_run(parent_run_id)
    run = mlflow_client.create_run(
        parent.info.experiment_id, run_name=name, tags={PARENT_RUN_TAG: parent_run_id, "role": "measurement"}
    )
    run_id = run.info.run_id
    mlflow_client.log_batch(
        run_id, metrics=_metrics(metrics, int(time.time() * 1000)), params=_params(params), tags=_tags(tags)
    )
    for file_name, payload in (artifacts or {}).items():
        mlflow_client.log_text(run_id, json.dumps(payload, indent=1, default=str), file_name)
    mlflow_client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")
    return run_id


def finish(mlflow_client: MlflowClient, run_id: str, failed: bool = False) -> None:
    """Close a run."""
    mlflow_client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")


def log_files(mlflow_client: MlflowClient, run_id: str, paths: list[Path], artifact_dir: str | None = None) -> None:
    """Attach files to a run (e.g. the summary table and plots to the parent run)."""
    for path in paths:
        mlflow_client.log_artifact(run_id, str(path), artifact_dir)


def log_metrics(mlflow_client: MlflowClient, run_id: str, metrics: dict[str, Any]) -> None:
    """Add metrics to an existing run."""
    mlflow_client.log_batch(run_id, metrics=_metrics(metrics, int(time.time() * 1000)))


def search_children(configured_uri: str, experiment: str, parent_run_id: str | None = None) -> Any:
    """Measurement runs of `experiment` as a pandas DataFrame (params.*, metrics.*, tags.* columns)."""
    mlflow_client = client(configured_uri)
    found = mlflow_client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"no MLflow experiment {experiment!r} in {tracking_uri(configured_uri)}")
    query = "tags.role = 'measurement'"
    if parent_run_id:
        query += f" and tags.`{PARENT_RUN_TAG}` = '{parent_run_id}'"
    return mlflow.search_runs([found.experiment_id], filter_string=query, max_results=50000)
