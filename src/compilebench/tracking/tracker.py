"""Logging one invocation: its parent run found by the invocation's tag or made, each run logged once by its uid, and a
store failure a warning and a list of what was not logged (which `python -m compilebench.sync` logs later).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from compilebench.analysis import compare
from compilebench.analysis.keys import EXPERIMENT_NAME_TAG, INVOCATION_TAG, NOTE_TAG, PARENT_RUN_TAG, RUN_UID_TAG
from compilebench.logs import redact
from compilebench.run_info import RunInfo
from compilebench.tracking.payload import (
    PROCESS_TABLE,
    REFUSED_IN_KEY,
    candidate_note,
    comparison_metrics,
    comparison_tags,
    run_name,
)
from compilebench.tracking.store import EXPERIMENT, check_store, client, experiment_id, find_run, problem

LOGGER = logging.getLogger(__name__)


def _params(values: dict[str, Any]) -> list[Param]:
    return [Param(key, redact(str(value))[:6000]) for key, value in values.items() if value is not None]


def _metrics(values: dict[str, Any], timestamp_ms: int) -> list[Metric]:
    """Metrics as MLflow takes them: NaN and non-numbers left out; a character MLflow refuses in a key made `_` (the
    pipeline's keys are key-safe already, records.key_part; a metrics.json written before them may not be)."""
    return [
        Metric(REFUSED_IN_KEY.sub("_", key), float(value), timestamp_ms, 0)
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
    uid: str | None = None,
    table: dict[str, list] | None = None,
    image: dict[str, str] | None = None,
    window_ms: tuple[int, int] | None = None,
) -> str:
    """One finished child run under `parent_run_id`, with params, metrics, tags and JSON artifacts.

    With `uid`, a run already carrying that uid is not logged a second time (exactly-once): a complete one (closed:
    closing is the last step) is returned as it is; one a store failure left open halfway (RUNNING, some params,
    metrics or artifacts missing) is completed, the same values logged again, then closed.
    """
    parent = mlflow_client.get_run(parent_run_id)
    run_id = half_logged = None
    if uid is not None:
        run_id = find_run(mlflow_client, parent.info.experiment_id, RUN_UID_TAG, uid)
        if run_id is not None:
            half_logged = mlflow_client.get_run(run_id)
            if half_logged.info.status != "RUNNING":
                return run_id
    if run_id is None:
        run_tags = {PARENT_RUN_TAG: parent_run_id, "role": "measurement", **({RUN_UID_TAG: uid} if uid else {})}
        start_ms = window_ms[0] if window_ms else None
        run_id = mlflow_client.create_run(
            parent.info.experiment_id, start_time=start_ms, run_name=name, tags=run_tags
        ).info.run_id
    mlflow_client.log_batch(
        run_id, metrics=_metrics(metrics, int(time.time() * 1000)), params=_params(params), tags=_tags(tags)
    )
    for file_name, payload in (artifacts or {}).items():
        text = payload if isinstance(payload, str) else json.dumps(payload, indent=1, default=str)
        mlflow_client.log_text(run_id, redact(text), file_name)
    if table:
        mlflow_client.log_table(run_id, table, PROCESS_TABLE)
    if image and not (half_logged and half_logged.inputs.dataset_inputs):  # the input, so runs group by image
        dataset = Dataset(image["name"], image["digest"], "local", image["source"])
        mlflow_client.log_inputs(run_id, [DatasetInput(dataset, [InputTag("mlflow.data.context", "benchmark")])])
    mlflow_client.set_terminated(
        run_id, status="FAILED" if failed else "FINISHED", end_time=window_ms[1] if window_ms else None
    )
    return run_id


def finish(mlflow_client: MlflowClient, run_id: str, failed: bool = False) -> None:
    """Close a run."""
    mlflow_client.set_terminated(run_id, status="FAILED" if failed else "FINISHED")


def log_files(mlflow_client: MlflowClient, run_id: str, paths: list[Path], artifact_dir: str | None = None) -> None:
    """Attach files to a run (e.g. the summary table and plots to the parent run)."""
    for path in paths:
        mlflow_client.log_artifact(run_id, str(path), artifact_dir)


def log_metrics(mlflow_client: MlflowClient, run_id: str, metrics: dict[str, Any]) -> None:
    """Log the metrics the run does not already hold with these values (a second sync adds no history)."""
    held = mlflow_client.get_run(run_id).data.metrics
    metrics = {key: value for key, value in metrics.items() if held.get(REFUSED_IN_KEY.sub("_", key)) != value}
    if not metrics:
        return
    mlflow_client.log_batch(run_id, metrics=_metrics(metrics, int(time.time() * 1000)))


class Tracker:
    """Logging for one pipeline invocation that never raises on a store failure: it warns and counts what is missing.

    The parent run is found by the invocation's tag, or created on first use, so a resumed or synced invocation
    keeps its one parent.
    """

    def __init__(
        self, configured_uri: str, invocation_id: str, parent_name: str = "", parent_params=None, parent_tags=None
    ):
        self.uri = check_store(configured_uri)
        self.invocation_id = invocation_id
        self.parent_name, self.parent_params, self.parent_tags = parent_name, parent_params or {}, parent_tags or {}
        self.client = client(configured_uri)
        self.parent_id: str | None = None
        self.failures: list[str] = []
        self.store_s, self.store_calls = 0.0, 0  # what this invocation waited on the store: seconds, logging calls
        experiment = os.environ.get("DVC_EXP_NAME")  # set by DVC for `dvc exp run`, queued or in a temporary copy
        self.common_tags = {EXPERIMENT_NAME_TAG: experiment} if experiment else {}
        self.parent_tags = {**self.parent_tags, **self.common_tags}

    @classmethod
    def of_invocation(cls, configured_uri: str, run_info: RunInfo) -> Tracker:
        """The tracker of the invocation run_info describes (paths.run_info): where its parent run has to be made
        here (the store was down while it measured), it gets the name, params and tags the benchmark gave it."""
        parent = run_info.parent
        return cls(
            configured_uri, run_info.invocation_id, parent.get("name") or "", parent.get("params"), parent.get("tags")
        )

    @contextmanager
    def _waited(self) -> Iterator[None]:
        """Count a logging call's wall time in `store_s`: on a shared store under load, what the invocation waited."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.store_s += time.monotonic() - started
            self.store_calls += 1

    def _warn(self, what: str, error: Exception) -> None:
        self.failures.append(what)
        LOGGER.warning("MLflow store %s: %s not logged (%s)", redact(self.uri), what, problem(error))

    def parent(self) -> str:
        """The invocation's parent run id (found by tag, else created); raises if the store is unreachable."""
        if self.parent_id is None:
            experiment = experiment_id(self.client, EXPERIMENT)
            self.parent_id = find_run(self.client, experiment, INVOCATION_TAG, self.invocation_id, "pipeline")
            if self.parent_id is None:
                tags = {**self.parent_tags, INVOCATION_TAG: self.invocation_id}
                self.parent_id = start_parent(self.client, EXPERIMENT, self.parent_name, self.parent_params, tags)
        return self.parent_id

    def log_run(
        self,
        name: str,
        params,
        metrics,
        tags,
        artifacts,
        failed: bool,
        uid: str,
        table=None,
        image=None,
        window_ms=None,
    ) -> str | None:
        """Log one child run exactly once; None (and a warning) when the store fails. Each carries the invocation's
        tag, so that a search for it (the parent's description gives it) lists one comparison's runs only."""
        try:
            tags = {**tags, **self.common_tags, INVOCATION_TAG: self.invocation_id}
            with self._waited():
                return log_child(
                    self.client,
                    self.parent(),
                    name,
                    params,
                    metrics,
                    tags,
                    artifacts,
                    failed,
                    uid,
                    table,
                    image,
                    window_ms,
                )
        except Exception as error:  # any store failure (connection, HTTP, database) must not lose the run
            self._warn(f"run {uid}", error)
            return None

    def log_comparison(self, compared: list[compare.Comparison]) -> None:
        """Each comparison's B/A results onto its candidate run (comparison_metrics); a warning per run not found or
        not reachable (`sync` logs them later)."""
        experiment = None
        for row in compared:
            uid = row.candidate_run_uid
            if not uid:
                continue
            try:
                with self._waited():
                    experiment = experiment or experiment_id(self.client, EXPERIMENT)
                    run_id = find_run(self.client, experiment, RUN_UID_TAG, uid)
                    if run_id is None:
                        raise LookupError(f"no run {uid} in the store yet")
                    log_metrics(self.client, run_id, comparison_metrics(row))
                    self.client.log_batch(run_id, tags=_tags(comparison_tags(row)))
                    if row.reference == compare.FIRST:  # its headline word in its name, against the baseline
                        name = run_name(row.label, row.batch_size, row.variant, row.candidate, row.verdict)
                        self.client.update_run(run_id, name=name)
                        uid_a = row.baseline_run_uid
                        baseline = uid_a and find_run(self.client, experiment, RUN_UID_TAG, uid_a)
                        a_metrics = self.client.get_run(baseline).data.metrics if baseline else {}
                        b_metrics = self.client.get_run(run_id).data.metrics
                        self.client.set_tag(run_id, NOTE_TAG, candidate_note(row, a_metrics, b_metrics))
            except Exception as error:  # any store failure: the table is on disk, `sync` logs it later
                self._warn(f"comparison of run {uid}", error)

    def log_parent(
        self, files: list[Path] = (), artifact_dir: str | None = None, metrics=None, finish_failed=None, note=None
    ) -> bool:
        """Attach files, metrics and a description (`note`: markdown the UI shows as the run's description) to the
        parent run (and optionally close it); False when the store fails."""
        try:
            with self._waited():
                parent = self.parent()
                log_files(self.client, parent, list(files), artifact_dir)
                if note:
                    self.client.set_tag(parent, NOTE_TAG, redact(note))
                if metrics:
                    log_metrics(self.client, parent, metrics)
                if finish_failed is not None:
                    finish(self.client, parent, failed=finish_failed)
            return True
        except Exception as error:  # any store failure: the files are on disk, `sync` attaches them later
            self._warn(f"parent artifacts {artifact_dir or ''}".strip(), error)
            return False
