"""Every key a result is stored under, declared once: the tags an MLflow run is found by, comparison.csv's columns per
metric, the B/A a candidate run carries in MLflow (`vs_first/...`), and the headline metrics of metrics.json and
cells.json. The writers build their keys here and the readers read them here, never with an f-string of their own.

Keys users store never change silently: a key renamed keeps its old name read (`OLD_NAMES`). Standard library only.
"""

from __future__ import annotations

from compilebench.records.formats import key_part

# MLflow tags
PARENT_RUN_TAG = "mlflow.parentRunId"
NOTE_TAG = "mlflow.note.content"  # a run's description in the UI (markdown)
RUN_UID_TAG = "compilebench.run_uid"  # every run's, unique: a run in the store is never logged again
INVOCATION_TAG = "compilebench.invocation"  # every run of one invocation, its parent's too
ROLE_TAG = "role"  # `pipeline` (an invocation's parent run) or `measurement` (a child run)
EXPERIMENT_NAME_TAG = "dvc.exp_name"  # the DVC experiment an invocation ran in (`dvc exp run`, queued or not)
COMPILED_VS_EAGER_TAG = "compiled_vs_eager"  # the run's speedup verdict (compiled against eager, this stack alone)

# comparison.csv: per compared metric, these fields, each a column `{metric}_{field}` (compare.Judged.columns)
JUDGED_FIELDS = (
    "ratio",
    "ci_low",
    "ci_high",
    "ci90_low",
    "ci90_high",
    "halfwidth",
    "detectable",
    "p",
    "blocks",
    "dof",
    "method",
    "noise",
    "noisy",
    "cell_ss",
    "cell_dof",
    "change",
    "relevance",
    "verdict",
)
RATIO_FIELDS = ("ratio", "ci_low", "ci_high")  # a compared metric's B/A and its 95% CI bounds, as MLflow metrics


def column(metric: str, field: str) -> str:
    """A compared metric's column in comparison.csv (`compiled_latency_ratio`)."""
    return f"{metric}_{field}"


def is_column_of(key: str, metric: str) -> bool:
    """Whether `key` is one of `metric`'s columns."""
    return key.startswith(f"{metric}_")


# MLflow: what a candidate run carries of its comparison (tracking.payload), under its reference's prefix
def compared_prefix(reference: str) -> str:
    """`vs_first/` (against the baseline) or `vs_previous/` (against the stack before it in a series)."""
    return f"vs_{reference}/"


def compared_key(reference: str, name: str) -> str:
    """A candidate run's metric or tag of its comparison: `vs_first/compiled_latency_ratio`, `vs_first/verdict`."""
    return f"{compared_prefix(reference)}{name}"


# metrics.json and cells.json (aggregate): keys a DVC experiment's table shows, each label made a key part (key_part)
def compared_pair(candidate: str, baseline: str) -> str:
    """A compared stack's prefix: `torch-2.14.1_vs_current`."""
    return f"{key_part(candidate)}_vs_{key_part(baseline)}"


def variant_prefix(environment: str, variant: str, several: bool) -> str:
    """A variant's prefix (an environment's variant where several environments ran)."""
    return f"{key_part(environment)}_{key_part(variant)}" if several else key_part(variant)


def metric_key(prefix: str, name: str) -> str:
    """One headline metric under its prefix: `default_speedup_geomean`, `torch-2.14.1_vs_current_changed`."""
    return f"{prefix}_{name}"


OLD_NAMES: dict[str, str] = {}  # a stored key renamed -> its name now (none renamed yet)
