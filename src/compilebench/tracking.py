"""MLflow: one parent run per pipeline invocation, one child run per eager or compiled measurement.

The only module that imports mlflow, and one module on purpose (over 500 lines): MLflow's API, its store's failures
and the keys it is given are met in one place. The store is `paths.tracking_uri` in params (SQLite under mlruns/ by
default); the MLFLOW_TRACKING_URI environment variable overrides it, e.g. to point at a shared `mlflow server`.

Nothing is lost when the store fails: results are on disk before they are logged, every run carries a unique
`compilebench.run_uid` tag and its invocation's `compilebench.invocation` tag (the parent's role is `pipeline`), so
logging is exactly-once — a run whose uid is already in the store is not logged again — and `Tracker` turns a store
failure into a warning and a list of runs not logged, which `python -m compilebench.sync` logs later.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from compilebench.analysis import compare
from compilebench.analysis.per_process import ProcessRecord
from compilebench.analysis.runs import RunRecord
from compilebench.config import home
from compilebench.harness import fingerprint
from compilebench.harness.files import locked
from compilebench.harness.records import MEASURED_NOTHING
from compilebench.logs import redact
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)

PARENT_RUN_TAG = "mlflow.parentRunId"
NOTE_TAG = "mlflow.note.content"  # a run's description in the UI (markdown)
RUN_UID_TAG = "compilebench.run_uid"
INVOCATION_TAG = "compilebench.invocation"
EXPERIMENT_NAME_TAG = "dvc.exp_name"  # the DVC experiment an invocation ran in (`dvc exp run`, queued or not)
# A down server otherwise blocks each call for minutes (MLflow's default retries); users may set their own values.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
# MLflow prints "View run at <tracking URI>", credentials included; compilebench prints a redacted link instead.
QUIET = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
PARAM_KEYS = (
    "model_id", "label", "task", "batch_size", "variant", "compile", "compile_mode", "inductor_options", "dynamic",
    "fullgraph", "deploy", "serve_batch_sizes", "dtype", "variant_dtype", "channels_last", "scale", "suite",
    "environment", "environment_name", "environment_key", "environment_pins", "environment_settings",
    "weights_source", "config_origin",
    "resolved_revision", "image_source", "image_sha256", "text_source", "input_shapes", "num_threads", "replicates",
    "machine", "git_commit",
    "invocation_id", "run_uid", "task_check", "fell_back_to_eager", "latency_ci_method", "speedup_ci_method",
    *fingerprint.RUN_FIELDS,
)  # fmt: skip
TAG_KEYS = ("status", "label", "variant", "task", "device_name", "machine", "machine_fingerprint", "environment",
            "torch_version", "transformers_version", "suite", "weights_source")  # fmt: skip
COMPILED_VS_EAGER_TAG = "compiled_vs_eager"  # the run's speedup verdict (compiled against eager, this stack alone)
RAW_KEYS = ("process_results", "graph_break_reasons", "inductor_counters", "environment_freeze", "error",
            "recompile_reasons", "serve_first_call_s")  # fmt: skip
HEALTH_KEYS = ("graph_count", "graph_break_count", "graph_break_reasons", "recompile_count", "fell_back_to_eager",
               "inductor_counters", "recompile_reasons", "serve_batch_sizes", "serve_first_call_s", "serve_graphs",
               "serve_recompiles")  # fmt: skip
EXPERIMENT = "compilebench"  # every pipeline invocation logs here
# MLflow's FAILED is for runs that produced no measurement; `invalid` and `accuracy_fail` measured (FINISHED, the
# status as a tag and as `status_code`, so charts and searches can tell them apart)
CRASHED = MEASURED_NOTHING
STATUS_CODES = {"ok": 0, "invalid": 1, "accuracy_fail": 2, "compile_error": 3, "error": 4, "oom": 5, "killed": 6,
                "timeout": 7, "crashed": 8}  # fmt: skip
REFUSED_IN_KEY = re.compile(r"[^/\w.\- :]")  # characters MLflow refuses in a metric key (on Linux)
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"  # the UI's "training runs"


def tracking_uri(configured: str) -> str:
    """The store to use: MLFLOW_TRACKING_URI when set, else the configured one."""
    return os.environ.get("MLFLOW_TRACKING_URI") or configured


class StoreError(ValueError):
    """A tracking store that is misconfigured, cannot be read, or lacks what a reader of it asked for; its message is
    one line, credentials redacted."""


def problem(error: BaseException) -> str:
    """What went wrong with the store, in one redacted line (MLflow's messages hold the URI, credentials included)."""
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return redact(lines[0])[:300]


@contextlib.contextmanager
def reading(configured_uri: str) -> Iterator[None]:
    """Around a read of the store: any failure of it (unreachable, refused, a database error) becomes a StoreError
    naming the store, redacted, so that a command ends with one line instead of a traceback that holds a password."""
    try:
        yield
    except StoreError:
        raise
    except Exception as error:  # MLflow, requests and SQLAlchemy each raise their own: all are the store's failure
        uri = redact(tracking_uri(configured_uri))
        raise StoreError(f"MLflow store {uri} could not be read: {problem(error)}") from None


def check_store(configured_uri: str) -> str:
    """The store URI, after checking a local store can be written (a remote one may be down: that is not an error)."""
    uri = tracking_uri(configured_uri)
    if "://" not in uri or uri.split("://", 1)[0] not in (
        "sqlite",
        "http",
        "https",
        "postgresql",
        "mysql",
        "file",
        "databricks",
    ):
        raise StoreError(
            f"tracking store {redact(uri)!r}: unknown scheme; use sqlite:///PATH, http(s)://HOST or a database URI"
        )
    if uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///"))
        folder = database.parent
        existing = next(path for path in (folder, *folder.parents) if path.exists())  # checks without writing
        if not existing.is_dir():
            raise StoreError(f"tracking store {uri!r}: cannot create {folder}: {existing} is not a directory")
        if not os.access(existing, os.W_OK):
            raise StoreError(f"tracking store {uri!r}: cannot create {folder}: {existing} is not writable")
        if database.exists():
            problem = sqlite_write_problem(database)
            if problem:
                raise StoreError(f"tracking store {uri!r}: the database {database} cannot be written ({problem})")
    return uri


def sqlite_write_problem(database: Path) -> str | None:
    """Why a SQLite file cannot take a write (None when it can): a write is made and rolled back. (Taking the write
    lock alone succeeds on a read-only file; only a write says so.)"""
    import sqlite3

    try:
        connection = sqlite3.connect(database, timeout=30, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            connection.execute(f"PRAGMA user_version = {int(version)}")  # a write to the header, same value
            connection.execute("ROLLBACK")
        finally:
            connection.close()
    except sqlite3.OperationalError as error:
        text = str(error)
        return "the database is read-only" if "readonly" in text.replace("-", "") or "read-only" in text else text
    return None


def relocate_copied_store(database: Path) -> list[str]:
    """A project copied with its store (cp -a) still records the original folder's absolute artifact paths, so its
    runs would write into the original. Point them at this store's folder instead; returns what was moved."""
    import sqlite3

    root = database.parent.resolve()
    moved = []
    connection = sqlite3.connect(database, timeout=30)
    try:
        for experiment_id, location in connection.execute("SELECT experiment_id, artifact_location FROM experiments"):
            old_root = str(location).removeprefix("file://").rsplit("/", 1)[0]
            expected = f"{root}/{experiment_id}"
            if str(location).removeprefix("file://") == expected or Path(old_root).name != root.name:
                continue  # this store's own folder, or an artifact location someone chose on purpose
            connection.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                               (expected, experiment_id))  # fmt: skip
            connection.execute(
                "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE experiment_id = ? AND "
                "artifact_uri LIKE ?",
                (str(root), len(old_root) + 1, experiment_id, f"{old_root}/%"),
            )
            moved.append(f"{old_root} -> {root}")
        connection.commit()
    finally:
        connection.close()
    return sorted(set(moved))


def artifacts_beside(database: Path, experiment_id: str) -> None:
    """A new experiment of a SQLite store keeps its artifacts beside the database (DATABASE_FOLDER/ID, where a
    project's mlruns/ has them), not in mlruns/ of whatever folder the process runs in (MLflow's default: in DVC's
    temporary copy for a queued experiment, deleted with it; the current project for a store elsewhere)."""
    import sqlite3

    connection = sqlite3.connect(database, timeout=30)
    try:
        connection.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                           (f"{database.parent.resolve()}/{experiment_id}", experiment_id))  # fmt: skip
        connection.commit()
    finally:
        connection.close()


def client(configured_uri: str) -> MlflowClient:
    """A client on the project's store; bounded HTTP retries. A local SQLite store gets its folder and schema once,
    under a lock (two pipelines starting at once on a fresh store would otherwise race MLflow's migration), and is
    pointed back at its own folder if the project was copied with it (also when the stage runs in DVC's temporary
    copy of that project: a queued experiment)."""
    uri = check_store(configured_uri)
    for key, value in {**HTTP_DEFAULTS, **QUIET}.items():
        os.environ.setdefault(key, value)
    # MLflow logs a database error with its SQLAlchemy traceback (and, for a server database, its URI) before raising
    # it; each caller here turns it into one redacted line (Tracker's warning, reading's StoreError)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    user_uri = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)  # for mlflow's own functions; it also sets MLFLOW_TRACKING_URI, which is the user's:
    if user_uri is None:  # left set, it would override the next configured store (tracking_uri) in this process
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = user_uri
    if not uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri=uri)
    database = Path(uri.removeprefix("sqlite:///"))
    database.parent.mkdir(parents=True, exist_ok=True)
    with locked(database.with_name(database.name + ".lock")):
        mlflow_client = MlflowClient(tracking_uri=uri)
        mlflow_client.search_experiments(max_results=1)  # creates or migrates the schema, one process at a time
        inside_project = database.resolve().is_relative_to(home().resolve())
        for move in relocate_copied_store(database) if inside_project else []:
            LOGGER.warning("MLflow store %s was copied from another folder: artifact paths moved (%s)", database,
                           move)  # fmt: skip
    return mlflow_client


def run_payload(record: RunRecord) -> dict[str, Any]:
    """A run as an MLflow run (the one place a run is flattened for MLflow; `store_rows` and `stored_run` read it
    back): name, params, metrics, tags, artifacts, failed flag, uid, its processes' table and window."""
    row, processes = record.to_dict(), list(record.process_results)
    params = {key: row.get(key) for key in PARAM_KEYS}
    params["process_values"] = json.dumps(compare.process_values(processes))
    metrics = {
        key: value
        for key, value in row.items()
        if key not in PARAM_KEYS
        and key not in RAW_KEYS
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    }
    metrics["status_code"] = STATUS_CODES.get(row["status"], len(STATUS_CODES))
    tags = {key: row.get(key) for key in TAG_KEYS}
    tags["compiled"] = str(row["compile"]).lower()
    tags[COMPILED_VS_EAGER_TAG] = row.get("speedup_verdict")
    artifacts: dict[str, Any] = {"samples.json": row.get("process_results")}
    if row["compile"]:
        artifacts["compile_health.json"] = {key: row.get(key) for key in HEALTH_KEYS}
    if row.get("error"):
        artifacts["error.json"] = {"status": row["status"], "error": row["error"]}
    if row.get("environment_freeze"):
        artifacts["environment/pip-freeze.txt"] = "\n".join(row["environment_freeze"]) + "\n"
    return {
        "name": f"{row['environment']} · {row['label']} bs{row['batch_size']} {row['variant']}",  # legends cut the end
        "table": process_table(row, processes),
        "image": {
            "name": f"{row.get('image_source')} image",
            "digest": str(row.get("image_sha256") or "")[:36],
            "source": json.dumps({"image_source": row.get("image_source"), "sha256": row.get("image_sha256")}),
        },
        "params": params,
        "metrics": metrics,
        "tags": tags,
        "artifacts": artifacts,
        "failed": row["status"] in CRASHED,
        "uid": row["run_uid"],
        "window_ms": measured_window_ms(processes),
    }


def store_rows(frame: Any) -> list[dict[str, Any]]:
    """Runs read back from the store (`search_children`: params.*, metrics.*, tags.* columns) as flat rows, typed as
    `run_payload` wrote them where a table needs it: batch size, compile and fullgraph, each process's values."""
    rows = []
    for _, run in frame.iterrows():
        row: dict[str, Any] = {}
        for column, value in run.items():
            for prefix in ("params.", "metrics."):
                if column.startswith(prefix) and not (isinstance(value, float) and value != value):
                    row[column.removeprefix(prefix)] = value
        row["status"] = run.get("tags.status")
        row["start_time"] = run.get("start_time")
        row["batch_size"] = int(row["batch_size"])
        row["compile"] = str(row.get("compile")).lower() == "true"
        row["fullgraph"] = str(row.get("fullgraph")).lower() == "true"
        row["process_values"] = json.loads(row.get("process_values") or "{}")
        rows.append(row)
    return rows


def stored_run(row: dict[str, Any]) -> compare.ComparedRun:
    """A run read back from the store (a `store_rows` row) as a comparison reads it: its processes are there as their
    values by block (an older store's lists, by position: they cannot be paired)."""
    stored = row.get("process_values") or {}
    values = {metric.name: dict(found) if isinstance(found, dict) else {f"p{i}": v for i, v in enumerate(found)}
              for metric in compare.METRICS for found in [stored.get(metric.name, {})]}  # fmt: skip
    fell_back = row.get("fell_back_to_eager")  # a param: MLflow keeps its text
    return compare.ComparedRun(
        model_id=row["model_id"], label=row.get("label", ""), task=row.get("task", ""), batch_size=row["batch_size"],
        variant=row["variant"], environment=row["environment"], environment_key=row.get("environment_key", ""),
        run_uid=row.get("run_uid"), invocation_id=row.get("invocation_id"), status=row["status"],
        compile=row["compile"], values=values, fullgraph=row["fullgraph"], graph_count=row.get("graph_count"),
        graph_break_count=row.get("graph_break_count"), recompile_count=row.get("recompile_count"),
        fell_back_to_eager=None if fell_back in (None, "None") else str(fell_back).lower() == "true",
        torch_version=row.get("torch_version"), transformers_version=row.get("transformers_version"),
        machine_fingerprint=row.get("machine_fingerprint"), device=row.get("device"),
        device_name=row.get("device_name"), machine=row.get("machine"),
    )  # fmt: skip


def measured_window_ms(processes: list[ProcessRecord]) -> tuple[int, int] | None:
    """When a run measured, as MLflow's start and end times (ms): from its first process's start to its last
    process's end (the launcher's clock), so that the UI's Duration is the measurement's, not the moment of logging;
    None for a run without timed processes."""
    spans = [(p.started_at, p.started_at + p.wall_s) for p in processes if p.started_at > 0]
    if not spans:
        return None
    return int(min(start for start, _ in spans) * 1000), int(max(end for _, end in spans) * 1000)


PROCESS_TABLE = "processes.json"  # every process of a run, one row each: mlflow.load_table(PROCESS_TABLE, ...)
TABLE_COLUMNS = ("trial_id", "block", "kind", "replicate", "cache", "cold_compile", "status", "disturbed",
                 "compile_disturbed", "wall_s", "compile_s", "compile_position", "eager_ms_median",
                 "compiled_ms_median", "speedup", "speedup_of_means", "pair_cv", "halves_ratio", "peak_mem_mib",
                 "warmup_s", "slot", "machine_fingerprint", "omp_num_threads")  # fmt: skip


def process_table(row: dict[str, Any], processes: list[ProcessRecord]) -> dict[str, list]:
    """A run's processes as an MLflow table (columns of equal length), with the run's identity on every row, so that
    the tables of every run of the experiment read back as one (`mlflow.load_table(..., extra_columns=["run_id"])`)."""
    identity = {key: [row.get(key)] * len(processes) for key in ("environment", "model_id", "batch_size", "variant")}
    return {**identity, **{column: [getattr(p, column) for p in processes] for column in TABLE_COLUMNS}}


VERDICT_CODES = {"equivalent": 0, "inconclusive": 2}  # the direction of a change: -1 below (B less), +1 above


def verdict_code(word: str, metric: compare.Metric) -> int:
    """A (cell, metric) verdict as a number MLflow's charts can plot: -1 B below A, 0 equivalent, +1 above, 2
    inconclusive."""
    if word in VERDICT_CODES:
        return VERDICT_CODES[word]
    return 1 if word == metric.above else -1


def verdict_word(code: int, metric: compare.Metric) -> str:
    """A verdict code (`verdict_code`) as its word again."""
    words = {value: word for word, value in VERDICT_CODES.items()}
    return words.get(code) or (metric.above if code == 1 else metric.below if code == -1 else str(code))


RATIO_KEYS = ("ratio", "ci_low", "ci_high")  # a compared metric's B/A and its 95% CI bounds


def compared_metrics(row: compare.Comparison) -> dict[str, dict[str, Any]]:
    """The metrics a comparison judged (not an eager cell's speedup), each with its B/A and 95% CI bounds (NaN
    where missing), its verdict word and code."""
    found = {}
    for name, judged in row.judged.items():
        code = verdict_code(judged.verdict, compare.METRIC_BY_NAME[name])
        found[name] = {"ratio": judged.ratio.value, "ci_low": judged.ratio.low, "ci_high": judged.ratio.high,
                       "verdict": judged.verdict, "verdict_code": code}  # fmt: skip
    return found


def comparison_metrics(row: compare.Comparison) -> dict[str, float]:
    """A comparison's B/A results as metrics of the candidate run: `vs_first/` (or `vs_previous/` in a series) the
    ratio, its 95% CI bounds and the verdict code per metric, the headline's verdict code."""
    prefix = f"vs_{row.reference}/"
    metrics: dict[str, float] = {}
    for name, values in compared_metrics(row).items():
        for key in (*RATIO_KEYS, "verdict_code"):
            metrics[f"{prefix}{name}_{key}"] = values[key]
    metrics[f"{prefix}verdict_code"] = verdict_code(row.verdict, compare.METRIC_BY_NAME[row.headline])
    return metrics


def ratio_text(row: compare.Comparison, metric: str) -> str:
    """A metric's B/A and its 95% CI as a person reads it: 'B/A 1.053 [1.010, 1.098]' (no CI: '[no CI]')."""
    judged = row.judged.get(metric)
    if judged is None or not math.isfinite(judged.ratio.value):
        return "B/A unmeasured"
    ratio, low, high = judged.ratio.value, judged.ratio.low, judged.ratio.high
    finite = all(math.isfinite(v) for v in (low, high))
    return f"B/A {ratio:.3f} " + (f"[{low:.3f}, {high:.3f}]" if finite else "[no CI]")


def comparison_tags(row: compare.Comparison) -> dict[str, str]:
    """A comparison's words as tags of the candidate run, beside comparison_metrics' codes: per metric
    `vs_first/<metric>` 'B/A 1.053 [1.010, 1.098] slower', `vs_first/verdict` the headline's word with its B/A, and
    `vs_first/against` the stack and run it was compared with (the A of this comparison, not of another one)."""
    prefix = f"vs_{row.reference}/"
    tags = {f"{prefix}{name}": f"{ratio_text(row, name)} {judged.verdict}" for name, judged in row.judged.items()}
    tags[f"{prefix}verdict"] = f"{row.verdict} ({row.headline.replace('_', ' ')} {ratio_text(row, row.headline)})"
    tags[f"{prefix}against"] = f"{row.baseline} ({row.baseline_versions}), run {row.baseline_run_uid}"
    return tags


def experiment_id(mlflow_client: MlflowClient, name: str) -> str:
    """The id of experiment `name`, created if missing, marked as model-training runs (not a GenAI app) so that the
    MLflow UI opens it on its runs table."""
    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is None:
        created = mlflow_client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        uri = str(mlflow_client.tracking_uri)
        if uri.startswith("sqlite:///"):
            artifacts_beside(Path(uri.removeprefix("sqlite:///")), created)
        return created
    if experiment.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
        mlflow_client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment.experiment_id


def ui_url(configured_uri: str, base: str) -> str:
    """Where the MLflow UI at `base` shows compilebench's runs table (the experiment's runs tab)."""
    with reading(configured_uri):
        return f"{base.rstrip('/')}/#/experiments/{experiment_id(client(configured_uri), EXPERIMENT)}/runs"


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


def find_run(mlflow_client: MlflowClient, experiment_id: str, tag: str, value: str, role: str = "") -> str | None:
    """The id of the run of `experiment_id` whose tag `tag` is `value` (and whose role is `role`, if given), if any."""
    query = f"tags.`{tag}` = '{value}'" + (f" and tags.role = '{role}'" if role else "")
    found = mlflow_client.search_runs([experiment_id], filter_string=query, max_results=1)
    return found[0].info.run_id if found else None


def count_invocation_runs(configured_uri: str, invocation_id: str) -> int:
    """How many measurement runs of one invocation the store holds; StoreError when it cannot be read."""
    with reading(configured_uri):
        mlflow_client = client(configured_uri)
        experiment = mlflow_client.get_experiment_by_name(EXPERIMENT)
        if experiment is None:
            return 0
        query = f"tags.`{RUN_UID_TAG}` LIKE '{invocation_id}/%'"
        return len(mlflow_client.search_runs([experiment.experiment_id], filter_string=query, max_results=50000))


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
        run_id = mlflow_client.create_run(parent.info.experiment_id, start_time=start_ms, run_name=name,
                                          tags=run_tags).info.run_id  # fmt: skip
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
    mlflow_client.set_terminated(run_id, status="FAILED" if failed else "FINISHED",
                                 end_time=window_ms[1] if window_ms else None)  # fmt: skip
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


def search_children(configured_uri: str, experiment: str, parent_run_id: str | None = None) -> Any:
    """Measurement runs of `experiment` as a pandas DataFrame (params.*, metrics.*, tags.* columns); StoreError when
    the store cannot be read or has no such experiment."""
    with reading(configured_uri):
        mlflow_client = client(configured_uri)
        found = mlflow_client.get_experiment_by_name(experiment)
        if found is None:
            raise StoreError(f"no MLflow experiment {experiment!r} in {redact(tracking_uri(configured_uri))}")
        query = "tags.role = 'measurement'"
        if parent_run_id:
            query += f" and tags.`{PARENT_RUN_TAG}` = '{parent_run_id}'"
        return mlflow.search_runs([found.experiment_id], filter_string=query, max_results=50000)


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
        experiment = os.environ.get("DVC_EXP_NAME")  # set by DVC for `dvc exp run`, queued or in a temporary copy
        self.common_tags = {EXPERIMENT_NAME_TAG: experiment} if experiment else {}
        self.parent_tags = {**self.parent_tags, **self.common_tags}

    @classmethod
    def of_invocation(cls, configured_uri: str, run_info: RunInfo) -> Tracker:
        """The tracker of the invocation run_info describes (paths.run_info): where its parent run has to be made
        here (the store was down while it measured), it gets the name, params and tags the benchmark gave it."""
        parent = run_info.parent
        return cls(configured_uri, run_info.invocation_id, parent.get("name") or "", parent.get("params"),
                   parent.get("tags"))  # fmt: skip

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

    def log_run(self, name: str, params, metrics, tags, artifacts, failed: bool, uid: str, table=None,
                image=None, window_ms=None) -> str | None:  # fmt: skip
        """Log one child run exactly once; None (and a warning) when the store fails. Each carries the invocation's
        tag, so that a search for it (the parent's description gives it) lists one comparison's runs only."""
        try:
            tags = {**tags, **self.common_tags, INVOCATION_TAG: self.invocation_id}
            return log_child(self.client, self.parent(), name, params, metrics, tags, artifacts, failed, uid, table,
                             image, window_ms)  # fmt: skip
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
                experiment = experiment or experiment_id(self.client, EXPERIMENT)
                run_id = find_run(self.client, experiment, RUN_UID_TAG, uid)
                if run_id is None:
                    raise LookupError(f"no run {uid} in the store yet")
                log_metrics(self.client, run_id, comparison_metrics(row))
                self.client.log_batch(run_id, tags=_tags(comparison_tags(row)))
            except Exception as error:  # any store failure: the table is on disk, `sync` logs it later
                self._warn(f"comparison of run {uid}", error)

    def log_parent(
        self, files: list[Path] = (), artifact_dir: str | None = None, metrics=None, finish_failed=None, note=None
    ) -> bool:
        """Attach files, metrics and a description (`note`: markdown the UI shows as the run's description) to the
        parent run (and optionally close it); False when the store fails."""
        try:
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


def main() -> None:
    import argparse

    from compilebench.config import stage_config

    parser = argparse.ArgumentParser(description="Print where the MLflow UI shows compilebench's runs table.")
    parser.add_argument("--ui-url", required=True, metavar="BASE", help="the UI's address, e.g. http://127.0.0.1:5000")
    args = parser.parse_args()
    config = stage_config()
    try:
        print(f"compilebench runs: {ui_url(config.paths.tracking_uri, args.ui_url)}")
    except StoreError as error:
        LOGGER.error("%s", error)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
