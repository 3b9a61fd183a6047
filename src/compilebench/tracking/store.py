"""Where runs live: the MLflow store `paths.tracking_uri` names (MLFLOW_TRACKING_URI overrides it), checked before any
work, its client (a SQLite store's schema made once, under a lock), its failures as one redacted line, and the
searches the other modules read it with.
"""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlflow
from mlflow.tracking import MlflowClient

from compilebench.analysis import keys
from compilebench.analysis.keys import INVOCATION_TAG, PARENT_RUN_TAG, RUN_UID_TAG
from compilebench.config import home
from compilebench.logs import redact
from compilebench.records.writing import locked

LOGGER = logging.getLogger(__name__)


# A down server otherwise blocks each call for minutes (MLflow's default retries); users may set their own values.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


# MLflow prints "View run at <tracking URI>", credentials included; compilebench prints a redacted link instead.
QUIET = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


EXPERIMENT = "compilebench"  # every pipeline invocation logs here


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
            connection.execute(
                "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (expected, experiment_id)
            )
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
        connection.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
            (f"{database.parent.resolve()}/{experiment_id}", experiment_id),
        )
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
            LOGGER.warning("MLflow store %s was copied from another folder: artifact paths moved (%s)", database, move)
    return mlflow_client


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


def newest_filter(mlflow_client: MlflowClient, experiment: str) -> str:
    """The runs-table search that lists the newest invocation's runs: of a comparison, its candidate (B) runs alone,
    which carry each B/A with its word; '' when the store holds no invocation yet."""
    parents = mlflow_client.search_runs(
        [experiment], "tags.role = 'pipeline'", order_by=["attributes.start_time DESC"], max_results=1
    )
    invocation = parents[0].data.tags.get(INVOCATION_TAG) if parents else None
    if not invocation:
        return ""
    mine = f"tags.`{INVOCATION_TAG}` = '{invocation}' and tags.role = 'measurement'"
    candidates = f"{mine} and tags.`{keys.compared_key('first', 'verdict')}` LIKE '%'"
    return candidates if mlflow_client.search_runs([experiment], candidates, max_results=1) else mine


def ui_url(configured_uri: str, base: str) -> str:
    """Where the MLflow UI at `base` shows compilebench's runs table (the experiment's runs tab), filtered to the
    newest invocation's runs (of a comparison: its B runs, `newest_filter`)."""
    with reading(configured_uri):
        mlflow_client = client(configured_uri)
        experiment = experiment_id(mlflow_client, EXPERIMENT)
        search = newest_filter(mlflow_client, experiment)
    # sorted by name (model first), not by start time: MLflow then lists the runs found flat, not under their parent;
    # workflowType: MLflow 3 opens in its GenAI mode (traces, judges) unless the address asks for machine learning
    state = {"workflowType": "machine_learning"}
    if search:
        state.update(searchFilter=search, orderByKey="tags.`mlflow.runName`", orderByAsc="true")
    query = urllib.parse.urlencode(state, quote_via=urllib.parse.quote)
    return f"{base.rstrip('/')}/#/experiments/{experiment}/runs?{query}"


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
