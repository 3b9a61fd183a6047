"""Nothing lost: a real kill -9 mid-benchmark, a real MLflow server stopped and restarted, two machines, faults.

Every test here uses real processes: the benchmark stage, the cell processes, `mlflow server` on a free loopback
port. Counts of runs come back from the store with search_runs.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from conftest import closed_port, make_project, project_env, run_ok

pytestmark = pytest.mark.slow

MODELS = ["microsoft/resnet-50", "nvidia/segformer-b0-finetuned-ade-512-512"]
RUNS_PER_INVOCATION = 4  # 2 models x (eager + default)


def _stage(name: str, root: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return run_ok([sys.executable, "-m", f"compilebench.{name}", *args], root, env)


def _children(uri: str) -> pd.DataFrame:
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["compilebench"], max_results=10000)
    return runs[runs["tags.role"] == "measurement"] if not runs.empty else runs


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A tiny project after fetch_image and load_models, on the shared inductor cache (fast compiles)."""
    root = make_project(tmp_path_factory.mktemp("reliable"), MODELS, compile_cache="shared", warm_compile=False)
    env = project_env()
    _stage("fetch_image", root, env)
    _stage("load_models", root, env)
    return root, env


class Server:
    """A real `mlflow server` on 127.0.0.1 with a SQLite backend, stoppable and restartable on the same store."""

    def __init__(self, folder: Path):
        self.folder, self.port, self.process = folder, closed_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
                   "--workers", "1", "--backend-store-uri", f"sqlite:///{self.folder}/server.db",
                   "--artifacts-destination", str(self.folder / "artifacts")]  # fmt: skip
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.uri + "/health", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("mlflow server did not answer /health within 120 s")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("server"))
    server.start()
    yield server
    if server.process.poll() is None:
        server.stop()


def test_kill_9_mid_benchmark_resumes_without_duplicates(loaded):
    root, env = loaded
    journal = root / "data" / "journal"
    process = subprocess.Popen(
        [sys.executable, "-m", "compilebench.benchmark"], cwd=root, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.time() + 600
    while time.time() < deadline and not [p for p in journal.glob("*.json") if p.name != "invocation.json"]:
        assert process.poll() is None, "benchmark ended before it could be killed"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the benchmark and its cell process, mid-run
    process.wait()
    done_before = [p for p in journal.glob("*.json") if p.name != "invocation.json"]
    assert len(done_before) == 1, "exactly the first cell had completed"
    first_cell = json.loads(done_before[0].read_text())
    assert not (root / "data" / "results" / "runs.jsonl").exists()  # no partial result
    assert not list(journal.glob("*.tmp"))

    resumed = _stage("benchmark", root, env)
    assert "resuming interrupted invocation" in resumed.stderr and "done before the interruption" in resumed.stderr
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    assert len(rows) == RUNS_PER_INVOCATION
    assert [r["samples_ms"] for r in rows[:2]] == [r["samples_ms"] for r in first_cell]  # kept, not re-measured
    assert len({r["invocation_id"] for r in rows}) == 1
    children = _children(f"sqlite:///{root}/mlruns/mlflow.db")
    assert len(children) == RUNS_PER_INVOCATION  # no duplicate MLflow run
    assert children["tags.compilebench.run_uid"].is_unique
    assert not journal.exists()  # completed: the next run measures afresh


def test_store_down_loses_nothing_and_sync_logs_exactly_once(loaded, server):
    root, env = loaded
    env = {**env, "MLFLOW_TRACKING_URI": server.uri}
    server.stop()
    down = _stage("benchmark", root, env)  # finishes although every log call fails
    assert "not logged to MLflow" in down.stderr
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    assert len(rows) == RUNS_PER_INVOCATION and all(r["status"] == "ok" for r in rows)
    _stage("aggregate", root, env)  # also finishes with the store down
    failed_sync = subprocess.run([sys.executable, "-m", "compilebench.sync"], cwd=root, env=env, capture_output=True)
    assert failed_sync.returncode == 1  # says the store is still down

    server.start()
    first = _stage("sync", root, env)
    assert f"{RUNS_PER_INVOCATION} run(s) newly logged, 0 were already" in first.stderr
    second = _stage("sync", root, env)
    assert f"0 run(s) newly logged, {RUNS_PER_INVOCATION} were already" in second.stderr
    children = _children(server.uri)
    invocation = rows[0]["invocation_id"]
    mine = children[children["tags.compilebench.run_uid"].str.startswith(invocation)]
    assert len(mine) == RUNS_PER_INVOCATION and mine["tags.compilebench.run_uid"].is_unique
    parent = mlflow.search_runs(
        experiment_names=["compilebench"], filter_string=f"tags.`compilebench.invocation` = '{invocation}'"
    )
    assert len(parent) == 1
    assert {a.path for a in mlflow.artifacts.list_artifacts(run_id=parent["run_id"].iloc[0])} >= {"summary"}


def test_two_machines_compare_through_one_server(loaded, server):
    root, env = loaded
    env = {**env, "MLFLOW_TRACKING_URI": server.uri}
    if server.process.poll() is not None:
        server.start()
    params_path = root / "params.yaml"
    for machine in ("machine-a", "machine-b"):
        params = yaml.safe_load(params_path.read_text())
        params["benchmark"]["machine"] = machine
        params_path.write_text(yaml.safe_dump(params, sort_keys=False))
        _stage("benchmark", root, env)
        _stage("aggregate", root, env)
    versions = pd.read_csv(root / "data/results/versions.csv")
    assert {"machine-a", "machine-b"} <= set(versions["machine"])
    _stage("aggregate", root, env, "--from-mlflow", "--out", "all_runs.csv")
    all_runs = pd.read_csv(root / "all_runs.csv")
    assert {"machine-a", "machine-b"} <= set(all_runs["machine"])
    per_machine = all_runs[all_runs["machine"].isin(["machine-a", "machine-b"])].groupby("machine").size()
    assert per_machine.to_dict() == {"machine-a": 2, "machine-b": 2}  # 2 compiled runs per machine in the summary


def test_failed_runs_make_check_exit_nonzero(loaded):
    root, env = loaded
    params_path = root / "params.yaml"
    params = yaml.safe_load(params_path.read_text())
    # 64 MiB above the loaded model: enough for eager calls of a tiny model, not for inductor's compile workers.
    params["benchmark"].update(cell_memory_limit_mib=64, cell_timeout_s=120)
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        _stage("benchmark", root, env)  # the stage itself completes: failures are data
        rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
        statuses = {r["status"] for r in rows}
        assert "oom" in statuses  # the capped compiles ran out of memory and said so
        assert statuses <= {"ok", "oom", "timeout"}, statuses
        _stage("aggregate", root, env)
        check = subprocess.run([sys.executable, "-m", "compilebench.aggregate", "--check"], cwd=root, env=env,
                               capture_output=True, text=True)  # fmt: skip
        assert check.returncode == 3 and "oom" in check.stderr and "not ok" in check.stderr
    finally:
        params["benchmark"].update(cell_memory_limit_mib=0, cell_timeout_s=1800)
        params_path.write_text(yaml.safe_dump(params, sort_keys=False))
