"""tracking against a real MLflow SQLite store in tmp_path, read back with mlflow.search_runs."""

import os
import time
from pathlib import Path

import mlflow
from made_runs import run_record

from compilebench import tracking
from compilebench.analysis import compare
from compilebench.run_info import RunInfo


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


def _row(status="ok", uid="inv/current/org/m/bs1/default"):
    processes = [
        {
            "trial_id": f"current/org--m/bs1/default/r{i}",
            "block": f"default/r{i}",
            "kind": "arm",
            "replicate": i,
            "cache": "warm",
            "eager_ms": [10.0, 10.2],
            "compiled_ms": [5.0, 5.1],
            "compile_s": 2.0 + i,
        }
        for i in range(3)
    ]
    return {
        "label": "M",
        "batch_size": 1,
        "variant": "default",
        "environment": "current",
        "model_id": "org/m",
        "compile": True,
        "status": status,
        "run_uid": uid,
        "image_source": "embedded-fallback",
        "image_sha256": "a5" * 32,
        "process_results": processes,
        "speedup": 2.0,
    }


def test_a_run_carries_its_processes_as_a_table_and_its_image_as_an_input(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    client = tracking.client(uri)
    parent = tracking.start_parent(client, tracking.EXPERIMENT, "p", {}, {})
    payload = tracking.run_payload(run_record(_row()))
    assert payload["name"] == "M default · bs1 · current"  # model and variant first: a narrow column shows them
    child = tracking.log_child(client, parent, **payload)
    mlflow.set_experiment(tracking.EXPERIMENT)  # load_table reads the active experiment's runs
    table = mlflow.load_table(tracking.PROCESS_TABLE, extra_columns=["run_id"])
    assert len(table) == 3 and set(table["run_id"]) == {child} and list(table["replicate"]) == [0, 1, 2]
    assert table["speedup"].round(3).tolist() == [2.0] * 3 and set(table["environment"]) == {"current"}
    [given] = client.get_run(child).inputs.dataset_inputs
    assert given.dataset.name == "embedded-fallback image" and given.dataset.digest.startswith("a5a5")


def test_invalid_measured_and_is_finished_a_crash_is_failed(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    client = tracking.client(uri)
    parent = tracking.start_parent(client, tracking.EXPERIMENT, "p", {}, {})
    for status, uid in (("invalid", "inv/a"), ("crashed", "inv/b")):
        tracking.log_child(client, parent, **tracking.run_payload(run_record(_row(status, uid))))
    runs = tracking.search_children(uri, tracking.EXPERIMENT, parent).set_index("tags.compilebench.run_uid")
    assert runs.loc["inv/a", "status"] == "FINISHED" and runs.loc["inv/a", "metrics.status_code"] == 1
    assert runs.loc["inv/b", "status"] == "FAILED" and runs.loc["inv/b", "metrics.status_code"] == 8
    assert runs.loc["inv/a", "tags.status"] == "invalid"


def test_a_half_logged_run_is_completed_not_logged_twice(tmp_path, monkeypatch):
    """A run a failing store left RUNNING (created with its uid, nothing else) is completed by the next logging of
    it; a complete one is left as it is."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    client = tracking.client(uri)
    parent = tracking.start_parent(client, tracking.EXPERIMENT, "p", {}, {})
    experiment = client.get_run(parent).info.experiment_id
    half = client.create_run(
        experiment, tags={tracking.RUN_UID_TAG: "inv/x", tracking.PARENT_RUN_TAG: parent, "role": "measurement"}
    ).info.run_id
    payload = tracking.run_payload(run_record(_row(uid="inv/x")))
    assert tracking.log_child(client, parent, **payload) == half
    done = client.get_run(half)
    assert done.info.status == "FINISHED" and done.data.metrics["speedup"] == 2.0 and done.data.params["variant"]
    assert "samples.json" in {a.path for a in client.list_artifacts(half)}
    assert tracking.log_child(client, parent, **payload) == half  # complete now: returned as it is
    assert len(tracking.search_children(uri, tracking.EXPERIMENT, parent)) == 1


def test_a_comparison_row_becomes_metrics_of_the_candidate_run():
    row = {
        "reference": "first",
        "headline": "compiled_latency",
        "verdict": "slower",
        "compiled_latency_ratio": 1.2,
        "compiled_latency_ci_low": 1.1,
        "compiled_latency_ci_high": 1.3,
        "compiled_latency_verdict": "slower",
        "speedup_ratio": 0.83,
        "speedup_ci_low": 0.8,
        "speedup_ci_high": 0.86,
        "speedup_verdict": "lower",
        "compile_cold_ratio": 1.0,
        "compile_cold_ci_low": 0.9,
        "compile_cold_ci_high": 1.1,
        "compile_cold_verdict": "equivalent",
        "eager_latency_verdict": float("nan"),
    }
    tags = tracking.comparison_tags(
        compare.Comparison.read(
            {
                **row,
                "baseline": "current",
                "baseline_versions": "torch 2.13.0 / transformers 5",
                "baseline_run_uid": "inv/current/org/m/bs1/default",
                "beside_the_question": float("nan"),
            }
        )
    )
    assert "vs_first/beside_the_question" not in tags  # B differs in nothing it did not ask for
    assert tags["vs_first/compiled_latency"] == "slower B/A 1.200 [1.100, 1.300]"  # the word first
    assert tags["vs_first/verdict"] == "slower (compiled latency B/A 1.200 [1.100, 1.300])"
    assert tags["vs_first/against"] == "current (torch 2.13.0 / transformers 5), run inv/current/org/m/bs1/default"
    assert "vs_first/eager_latency" not in tags  # not compared: no word
    beside = "torch build: CPU build → CUDA 13.0 build"
    assert (
        tracking.comparison_tags(compare.Comparison.read({**row, "beside_the_question": beside}))[
            "vs_first/beside_the_question"
        ]
        == beside
    )
    metrics = tracking.comparison_metrics(compare.Comparison.read(row))
    assert metrics["vs_first/compiled_latency_ratio"] == 1.2 and metrics["vs_first/compiled_latency_verdict_code"] == 1
    assert metrics["vs_first/speedup_verdict_code"] == -1 and metrics["vs_first/compile_cold_verdict_code"] == 0
    assert metrics["vs_first/verdict_code"] == 1 and not any("eager_latency" in key for key in metrics)


def test_a_b_runs_description_states_its_row_and_raw_medians_that_moved_beyond_an_undecided_word():
    """ResNet-50 `default`, torch 2.14.1 (2026-12-04): raw medians 48.08 -> 36.76 ms (-23.5%) where the paired word
    was `inconclusive` 0.864 [0.680, 1.097]: the description says so; a decided word, or medians within the margin,
    gets no such line."""
    row = {
        "model_id": "microsoft/resnet-50",
        "label": "ResNet",
        "task": "image-classification",
        "batch_size": 1,
        "variant": "default",
        "baseline": "current",
        "candidate": "torch-2.14.1",
        "reference": "first",
        "margin": 0.1,
        "headline": "compiled_latency",
        "verdict": "inconclusive",
        "compiled_latency_ratio": 0.864,
        "compiled_latency_ci_low": 0.68,
        "compiled_latency_ci_high": 1.097,
        "compiled_latency_verdict": "inconclusive",
        "speedup_ratio": 1.09,
        "speedup_ci_low": 0.97,
        "speedup_ci_high": 1.24,
        "speedup_verdict": "inconclusive",
    }
    a, b = {"latency_ms_median": 48.08}, {"latency_ms_median": 36.76}
    note = tracking.candidate_note(compare.Comparison.read(row), a, b)
    assert note.startswith("**inconclusive**: ResNet bs1 default, torch-2.14.1 against current (compiled latency B/A ")
    assert "| compiled latency | inconclusive | 0.864 [0.680, 1.097] |" in note and "| speedup | inconclusive |" in note
    assert "The raw medians of compiled latency moved -23.5% (48.08 → 36.76 ms), beyond the margin" in note
    assert "raw medians" not in tracking.candidate_note(compare.Comparison.read(row), a, {"latency_ms_median": 46.0})
    decided = {**row, "verdict": "faster", "compiled_latency_verdict": "faster"}
    assert "raw medians" not in tracking.candidate_note(compare.Comparison.read(decided), a, b)


def test_a_queued_experiment_of_a_copied_project_writes_into_the_copys_store(tmp_path, monkeypatch):
    """Issue 52, item 9: `cp -a` of a project that has run, then `dvc exp run --queue` there: DVC runs the stage in a
    temporary copy (.dvc/tmp/exps/...) and names the project in DVC_ROOT; the copy's store (its artifact paths still
    the original's) is pointed at the copy's own mlruns/, so nothing is written into the original's."""
    import shutil

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    original, copy = tmp_path / "project", tmp_path / "copy"
    original.mkdir()
    monkeypatch.chdir(original)
    client = tracking.client(f"sqlite:///{original}/mlruns/mlflow.db")
    parent = tracking.start_parent(client, tracking.EXPERIMENT, "p", {}, {})
    tracking.log_child(client, parent, **tracking.run_payload(run_record(_row())))
    shutil.copytree(original, copy, symlinks=True)
    before = sorted(original.rglob("*"))
    workspace = copy / ".dvc" / "tmp" / "exps" / "tmpq1"  # where a queued experiment's stage runs
    workspace.mkdir(parents=True)
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("DVC_ROOT", str(copy))
    uri = f"sqlite:///{copy}/mlruns/mlflow.db"  # config.at_home's store of the copy
    client = tracking.client(uri)
    parent = tracking.start_parent(client, tracking.EXPERIMENT, "q", {}, {})
    child = tracking.log_child(
        client, parent, **tracking.run_payload(run_record(_row(uid="inv2/current/org/m/bs1/default")))
    )
    assert sorted(original.rglob("*")) == before  # the original untouched
    artifact_uri = client.get_run(child).info.artifact_uri.removeprefix("file://")
    assert Path(artifact_uri).is_relative_to(copy / "mlruns") and (Path(artifact_uri) / "samples.json").exists()


FULL_DISK = """
import resource, signal, sys
sys.path.insert(0, sys.argv[2])
from compilebench import logs, tracking
from test_tracking import _row, run_record
logs.configure()
tracker = tracking.Tracker(sys.argv[1], "inv", "p")
tracker.parent()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
payload = tracking.run_payload(run_record(_row()))
tracker.log_run(**{k: payload[k] for k in ("name", "params", "metrics", "tags", "artifacts", "failed", "uid")})
print(tracker.failures)
"""


def test_a_store_that_cannot_take_a_write_is_one_warning_not_mlflows_traceback(tmp_path):
    """mlruns/ on a full disk (a write refused): the run is not logged, the project says so in one warning line that
    `make sync` logs it later, and MLflow's own SQLAlchemy traceback is not printed before it."""
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
    store = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    command = [sys.executable, "-c", FULL_DISK, store, str(Path(__file__).parent)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "['run inv/current/org/m/bs1/default']" in done.stdout  # not logged, and counted for sync
    assert "not logged" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]


def test_a_runs_times_in_the_store_are_its_measurements_window(tmp_path, monkeypatch):
    """The UI's Duration of a run: from its first process's start to its last one's end, not the moment of logging."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    row = _row()
    for i, process in enumerate(row["process_results"]):
        process.update(started_at=1_800_000_000.0 + 40 * i, wall_s=30.0)
    payload = tracking.run_payload(run_record(row))
    assert payload["window_ms"] == (1_800_000_000_000, 1_800_000_110_000)
    client = tracking.client(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = client.get_run(tracking.log_child(client, tracking.start_parent(client, "exp", "p", {}, {}), **payload))
    assert (run.info.start_time, run.info.end_time) == payload["window_ms"]


def test_a_later_stage_finds_the_invocations_parent_not_one_of_its_runs(tmp_path, monkeypatch):
    """Every run carries the invocation's tag (one search lists a comparison's runs): the aggregate and plot stages'
    tracker must still find the parent, whatever order the store returns the tagged runs in."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    first = tracking.Tracker(uri, "inv", "p")
    payload = tracking.run_payload(run_record(_row(uid="inv/current/org/m/bs1/default")))
    for i in range(3):  # more runs than parents, logged after it
        first.log_run(**{**payload, "uid": f"inv/current/org/m/bs1/v{i}"})
    later = tracking.Tracker.of_invocation(uri, RunInfo("inv"))
    assert later.parent() == first.parent_id
    assert later.client.get_run(later.parent()).data.tags["role"] == "pipeline"


def test_the_ui_address_opens_on_the_newest_comparisons_candidate_runs(tmp_path, monkeypatch):
    """Issue 78: what `make ui` prints lists the newest invocation's B runs (those carrying B/A and its word), not
    every run of every invocation; an invocation of one environment lists its runs; an empty store, the table."""
    import urllib.parse

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    client = tracking.client(uri)
    assert tracking.ui_url(uri, "http://127.0.0.1:5000").endswith("/runs?workflowType=machine_learning")  # the table

    def invocation(name: str, compared: bool) -> str:
        parent = tracking.start_parent(client, tracking.EXPERIMENT, name, {}, {"compilebench.invocation": name})
        for environment in ("current", "B") if compared else ("current",):
            tags = {"compilebench.invocation": name, "environment": environment}
            if compared and environment == "B":
                tags["vs_first/verdict"] = "equivalent (speedup B/A 1.000 [0.990, 1.010])"
            tracking.log_child(
                client, parent, f"M default · bs1 · {environment}", {}, {}, tags, {}, False, f"{name}/{environment}"
            )
        return name

    def listed(url: str) -> set[tuple[str, str]]:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url.split("#", 1)[1]).query)["searchFilter"][0]
        runs = client.search_runs([tracking.experiment_id(client, tracking.EXPERIMENT)], query)
        return {(r.data.tags["compilebench.invocation"], r.data.tags["environment"]) for r in runs}

    invocation("one-stack", compared=False)
    assert listed(tracking.ui_url(uri, "http://127.0.0.1:5000")) == {("one-stack", "current")}
    time.sleep(0.01)  # the newest parent by start time
    invocation("comparison", compared=True)
    url = tracking.ui_url(uri, "http://127.0.0.1:5000")
    assert listed(url) == {("comparison", "B")}
    assert "orderByKey=tags.%60mlflow.runName%60" in url  # sorted by name, MLflow lists the runs flat
    assert "workflowType=machine_learning" in url  # the runs table, not MLflow 3's GenAI mode
