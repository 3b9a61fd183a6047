"""MLflow: one parent run per pipeline invocation, one child run per eager or compiled measurement. The only package
that imports mlflow. `store` is where runs live, `payload` a run as MLflow holds it, `tracker` logging one invocation
exactly once; their names used elsewhere are handed on here.
"""

from compilebench.analysis.keys import INVOCATION_TAG, PARENT_RUN_TAG, RUN_UID_TAG
from compilebench.tracking.payload import (
    CRASHED,
    PROCESS_TABLE,
    candidate_note,
    compared_metrics,
    comparison_metrics,
    comparison_tags,
    run_payload,
    store_rows,
    stored_run,
    verdict_code,
    verdict_word,
)
from compilebench.tracking.store import (
    EXPERIMENT,
    StoreError,
    check_store,
    client,
    count_invocation_runs,
    experiment_id,
    find_run,
    redact,
    search_children,
    tracking_uri,
    ui_url,
)
from compilebench.tracking.tracker import Tracker, log_child, log_metrics, start_parent

__all__ = [
    "CRASHED",
    "EXPERIMENT",
    "INVOCATION_TAG",
    "PARENT_RUN_TAG",
    "PROCESS_TABLE",
    "RUN_UID_TAG",
    "StoreError",
    "Tracker",
    "candidate_note",
    "check_store",
    "client",
    "compared_metrics",
    "comparison_metrics",
    "comparison_tags",
    "count_invocation_runs",
    "experiment_id",
    "find_run",
    "log_child",
    "log_metrics",
    "redact",
    "run_payload",
    "search_children",
    "start_parent",
    "store_rows",
    "stored_run",
    "tracking_uri",
    "ui_url",
    "verdict_code",
    "verdict_word",
]
