"""Nothing lost: a real kill -9 mid-benchmark, a real MLflow server stopped and restarted, machines sharing a store,
pipelines racing on a fresh store, a copied project, a password in the store's URI, failures as data.

Every test here uses real processes: the stage commands, their trial processes, `mlflow server` on a free loopback
port. Counts of runs come back from the store with search_runs. Processes are ended only by the PIDs we started.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from conftest import (
    MlflowServer,
    descendants,
    init_project,
    make_dry_run,
    make_project,
    project_env,
    run_ok,
    running,
    set_params,
)

pytestmark = pytest.mark.slow
# The tests on the module's shared project and server are one xdist group (its fixtures run once, on one worker); a
# test with a project of its own is a group of its own, on whichever worker is free.
SHARED = pytest.mark.xdist_group("test_reliability")

MODELS = ["microsoft/resnet-50"]
ROOT_ENVIRONMENTS = Path(__file__).resolve().parents[1] / ".compilebench" / "environments"
RUNS_PER_INVOCATION = 2  # eager + default


def _stage(name: str, root: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return run_ok([sys.executable, "-m", f"compilebench.{name}", *args], root, env)


def _children(uri: str) -> pd.DataFrame:
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["compilebench"], max_results=10000)
    return runs[runs["tags.role"] == "measurement"] if not runs.empty else runs


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A tiny project after fetch_image and load_models (one process per run, on the tests' shared cache)."""
    root = make_project(tmp_path_factory.mktemp("reliable"), MODELS)
    env = project_env()
    _stage("fetch_image", root, env)
    _stage("load_models", root, env)
    return root, env


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("server"))
    server.start()
    yield server
    if server.process.poll() is None:
        server.stop()


@SHARED
def test_kill_9_mid_benchmark_resumes_without_duplicates(loaded):
    root, env = loaded
    set_params(root, **{"benchmark.replicates": 2})  # two timing processes: one done, one interrupted
    journal = root / "data" / "journal" / "results"
    process = subprocess.Popen(
        [sys.executable, "-m", "compilebench.benchmark"],
        cwd=root,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 600
    while time.time() < deadline and not list(journal.glob("*.json")):
        assert process.poll() is None, "benchmark ended before it could be killed"
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)  # the benchmark and its trial process (its own group): mid-run
    process.wait()
    done_before = list(journal.glob("*.json"))
    assert len(done_before) == 1, "exactly the first process had completed"
    arms = json.loads(done_before[0].read_text())  # its trials, journaled together: eager and default
    assert sorted(arm["trial_id"].split("/")[-2] for arm in arms) == ["default", "eager"]
    first_trial = next(arm for arm in arms if arm["compiled_ms"])
    assert not (root / "data" / "results" / "runs.jsonl").exists()  # no partial result
    assert not list(journal.glob("*.tmp"))

    # The project copied to another machine mid-run: its journal is not pooled with this machine's processes.
    kept_text = done_before[0].read_text()
    elsewhere = [{**arm, "environment": {**arm["environment"], "machine_fingerprint": "0a1b2c3d4e5f"}} for arm in arms]
    done_before[0].write_text(json.dumps(elsewhere))
    refused = subprocess.run(
        [sys.executable, "-m", "compilebench.benchmark"], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert refused.returncode == 2, refused.stderr
    assert "holds results of environment 'current' measured elsewhere (1 process on " in refused.stderr  # 2 arms
    assert "(machine 0a1b2c3d4e5f)" in refused.stderr and "delete that folder to measure afresh" in refused.stderr
    assert json.loads(done_before[0].read_text()) == elsewhere and len(list(journal.glob("*.json"))) == 1  # kept
    assert not (root / "data" / "results" / "runs.jsonl").exists()
    assert not (root / "mlruns" / "mlflow.db").exists() or _children(f"sqlite:///{root}/mlruns/mlflow.db").empty
    done_before[0].write_text(kept_text)

    resumed = _stage("benchmark", root, env)
    assert "resuming interrupted invocation" in resumed.stderr and "(from the journal)" in resumed.stderr
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    assert len(rows) == RUNS_PER_INVOCATION
    kept = [p for r in rows for p in r["process_results"] if p["trial_id"] == first_trial["trial_id"]]
    assert kept and kept[0]["compiled_ms"] == first_trial["compiled_ms"]  # kept, not re-measured
    assert len({r["invocation_id"] for r in rows}) == 1
    children = _children(f"sqlite:///{root}/mlruns/mlflow.db")
    assert len(children) == RUNS_PER_INVOCATION  # no duplicate MLflow run
    assert children["tags.compilebench.run_uid"].is_unique
    assert not (root / "data" / "journal").exists()  # completed: the next run measures afresh
    set_params(root, **{"benchmark.replicates": 1})


@pytest.mark.xdist_group("sigterm")
def test_sigterm_to_dvc_repro_ends_the_benchmark_and_leaves_its_journal(tmp_path):
    """DVC passes no SIGTERM on to its stage: a job system ending the `dvc repro` it started (here with /bin/sh as
    the shell, which stays between DVC and the stage's command) must still end the benchmark and its trial at once,
    and leave the journal with nothing logged, which the next run resumes (as after a kill -9: the test above)."""
    root = make_project(tmp_path, MODELS, replicates=2)
    env = {**project_env(), "SHELL": "/bin/sh"}
    init_project(root, env, commit=False)
    journal = root / "data" / "journal" / "results"
    repro = subprocess.Popen(
        ["dvc", "repro"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 600
    while time.time() < deadline and not list(journal.glob("*.json")):
        assert repro.poll() is None, "dvc repro ended before the first process was journaled"
        time.sleep(0.1)
    below = descendants(repro.pid)  # the shell, the benchmark, its trial process and the trial's own
    assert below, "the stage's processes were not found under dvc"
    repro.send_signal(signal.SIGTERM)
    assert repro.wait(timeout=60) != 0
    deadline = time.time() + 30
    while time.time() < deadline and any(running(pid) for pid in below):
        time.sleep(0.2)
    left = [pid for pid in below if running(pid)]
    for pid in left:  # ours to end (started under our dvc): so a failure leaves nothing running
        os.kill(pid, signal.SIGKILL)
    assert not left, "processes of the stage outlived dvc"
    assert list(journal.glob("*.json")) and not (root / "data/results/runs.jsonl").exists()
    assert not (root / "mlruns" / "mlflow.db").exists() or _children(f"sqlite:///{root}/mlruns/mlflow.db").empty


@pytest.fixture(scope="module")
def synced(loaded, server):
    """An invocation of "machine-a" run while the server is down, then logged by `sync` once it is back up (twice,
    so the second must log nothing): the stages' outputs, and the runs that reached the server that way."""
    root, env = loaded
    # No retries of a refused call (a user's own setting, which the stages keep): the outcome is the same, sooner.
    env = {**env, "MLFLOW_TRACKING_URI": server.uri, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    set_params(root, **{"runner.machine": "machine-a"})
    try:
        server.stop()
        down = _stage("benchmark", root, env)  # finishes although every log call fails
        rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
        _stage("aggregate", root, env)  # also finishes with the store down
        failed_sync = subprocess.run(
            [sys.executable, "-m", "compilebench.sync"], cwd=root, env=env, capture_output=True
        )
        server.start()
        syncs = [_stage("sync", root, env) for _ in range(2)]
    finally:
        set_params(root, **{"runner.machine": ""})
        if server.process.poll() is not None:
            server.start()
    return down, rows, failed_sync, syncs


@SHARED
def test_store_down_loses_nothing_and_sync_logs_exactly_once(synced, server):
    down, rows, failed_sync, (first, second) = synced
    assert "not logged to MLflow" in down.stderr
    assert len(rows) == RUNS_PER_INVOCATION
    assert all(r["status"] == "ok" for r in rows), [(r["variant"], r["status"], r["error"]) for r in rows]
    assert failed_sync.returncode == 1  # says the store is still down
    assert f"{RUNS_PER_INVOCATION} run(s) newly logged, 0 were already" in first.stderr
    assert f"0 run(s) newly logged, {RUNS_PER_INVOCATION} were already" in second.stderr
    children = _children(server.uri)
    invocation = rows[0]["invocation_id"]
    mine = children[children["tags.compilebench.run_uid"].str.startswith(invocation)]
    assert len(mine) == RUNS_PER_INVOCATION and mine["tags.compilebench.run_uid"].is_unique
    parent = mlflow.search_runs(
        experiment_names=["compilebench"],
        filter_string=f"tags.`compilebench.invocation` = '{invocation}' and tags.role = 'pipeline'",
    )
    assert len(parent) == 1
    parent_id = parent["run_id"].iloc[0]
    assert {a.path for a in mlflow.artifacts.list_artifacts(run_id=parent_id)} >= {"summary"}
    synced_run = mlflow.get_run(parent_id)  # created by sync, yet named, described and tagged as the benchmark would
    assert synced_run.data.params["suite"] == "smoke" and synced_run.data.params["models"] == MODELS[0]
    assert synced_run.data.tags["machine"] == "machine-a" and synced_run.data.tags["machine_fingerprint"]
    assert synced_run.data.metrics, "the aggregate metrics reached the parent"
    history = mlflow.MlflowClient(server.uri)
    assert all(len(history.get_metric_history(parent_id, key)) == 1 for key in synced_run.data.metrics)  # synced twice


@SHARED
def test_identical_machines_share_one_server_and_no_password_is_printed(loaded, server, synced):
    """Two machines with the same hardware and versions (only their names differ) log into one server: machine-a's
    runs came by `sync` (the fixture above), machine-b logs directly with a password in the store's URI. Every stage
    and the store's tables still work on both, and nothing prints the password."""
    root, env = loaded
    set_params(root, **{"runner.machine": "machine-b"})
    uri = server.uri.replace("//", "//bench:pwSECRET42@")
    try:
        for stage in ("benchmark", "aggregate"):
            done = _stage(stage, root, {**env, "MLFLOW_TRACKING_URI": uri})
            assert "pwSECRET42" not in done.stdout + done.stderr, stage
            assert "View run" not in done.stdout  # MLflow's own link lines (they carry the URI) are off
    finally:
        set_params(root, **{"runner.machine": ""})
    env = {**env, "MLFLOW_TRACKING_URI": server.uri}
    _stage("plot", root, env)
    _stage("aggregate", root, env, "--from-mlflow")
    drawn = _stage("plot", root, env, "--from-mlflow")
    assert "no versions to compare" in drawn.stderr  # one stack: the same hardware twice is not a comparison
    all_runs = pd.read_csv(root / "data/store/runs.csv")
    per_machine = all_runs[all_runs["machine"].isin(["machine-a", "machine-b"])].groupby("machine").size()
    assert per_machine.to_dict() == {"machine-a": 1, "machine-b": 1}  # one compiled run per machine in the summary
    assert all_runs["machine_fingerprint"].nunique() == 1  # the same hardware
    judged = pd.read_csv(root / "data/store/verdicts.csv")  # the store's runs against the doc, one row per run
    assert judged[["model_id", "variant"]].values.tolist() == all_runs[["model_id", "variant"]].values.tolist()
    assert judged["comparison"].eq("CPU").all()  # CPU runs: never judged against the doc's GPUs
    assert judged["verdict"].isin(["informational", "not comparable"]).all()


FRESH_STORE = """
import sys
from compilebench import tracking
client = tracking.client(sys.argv[1])
parent = tracking.start_parent(client, tracking.EXPERIMENT, sys.argv[2], {}, {})
tracking.log_child(client, parent, "run", {"a": 1}, {"m": 1.0}, {"status": "ok"}, uid=sys.argv[2])
"""


@pytest.mark.parametrize("attempt", range(2))
def test_two_pipelines_start_on_a_fresh_store_at_once(tmp_path, attempt):
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    env = project_env()
    command = [sys.executable, "-c", FRESH_STORE, uri]
    racers = [
        subprocess.Popen(
            [*command, f"racer-{i}"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for i in range(2)
    ]
    outcomes = [(racer.wait(timeout=300), racer.stderr.read()) for racer in racers]
    assert [code for code, _ in outcomes] == [0, 0], [err[-500:] for _, err in outcomes]
    assert len(_children(uri)) == 2


@SHARED
def test_a_copied_project_writes_only_into_its_own_store(loaded, tmp_path):
    """cp -a of a project that has run: the copy's runs and artifacts go to the copy's mlruns/, never the original's."""
    original, env = loaded
    if not (original / "mlruns" / "mlflow.db").exists():
        _stage("benchmark", original, env)  # a project that has run
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, symlinks=True)  # as cp -a does: the store comes along, absolute paths inside
    before = sorted(p.relative_to(original) for p in (original / "mlruns").rglob("*"))
    moved = _stage("benchmark", copy, env)
    assert "was copied from another folder" in moved.stderr
    assert sorted(p.relative_to(original) for p in (original / "mlruns").rglob("*")) == before  # untouched
    runs = _children(f"sqlite:///{copy}/mlruns/mlflow.db")
    assert all(uri.startswith(str(copy / "mlruns")) for uri in runs["artifact_uri"])
    latest = runs.sort_values("start_time").iloc[-1]
    assert Path(latest["artifact_uri"].removeprefix("file://"), "samples.json").exists()


@SHARED
def test_failed_runs_leave_their_report_and_make_check_exit_nonzero(loaded):
    root, env = loaded
    # 150 MiB: less than a trial process needs to import torch, so the launcher ends it as oom, deterministically.
    set_params(root, **{"benchmark.memory_limit_mib": 150, "runner.trial_timeout_s": 120, "runner.machine": ""})
    try:
        _stage("benchmark", root, env)  # the stage itself completes: failures are data
        rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
        statuses = {r["status"] for r in rows}
        assert statuses == {"oom"}, statuses  # the capped trial was ended and said so (its eager run too)
        assert "benchmark.memory_limit_mib 150" in rows[0]["error"]
        _stage("aggregate", root, env)
        check = subprocess.run(
            [sys.executable, "-m", "compilebench.aggregate", "--check"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
        )
        assert check.returncode == 3 and "oom" in check.stderr and "not ok" in check.stderr
        shutil.rmtree(root / "data/plots", ignore_errors=True)  # what an earlier test of this project drew
        _stage("plot", root, env)  # every run failed: the report says so, beside an empty figure folder DVC can keep
        assert (root / "data/plots").is_dir() and not any((root / "data/plots").iterdir())
        assert "oom" in (root / "data/report/report.md").read_text()
        invocation = json.loads((root / "data/results/run_info.json").read_text())["invocation_id"]
        mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
        query = f"tags.`compilebench.invocation` = '{invocation}' and tags.role = 'pipeline'"
        [parent] = mlflow.search_runs(experiment_names=["compilebench"], output_format="list", filter_string=query)
        note = parent.data.tags.get("mlflow.note.content", "")
        assert parent.info.status == "FAILED" and f"{len(rows)} of {len(rows)} runs did not end ok" in note, note
    finally:
        set_params(root, **{"benchmark.memory_limit_mib": 0, "runner.trial_timeout_s": 1800})


@SHARED
def test_a_run_half_logged_while_the_artifact_store_failed_is_completed_by_sync(loaded, tmp_path):
    """A real server whose artifact folder is, for the benchmark, a plain file: every run is created, its params
    and metrics logged, its artifacts refused. Repaired, `sync` completes those runs (FINISHED, with their samples),
    and a second `sync` changes nothing."""
    root, env = loaded
    server = MlflowServer(tmp_path)
    server.start()
    artifacts = tmp_path / "artifacts"
    try:
        shutil.rmtree(artifacts, ignore_errors=True)
        artifacts.write_text("not a folder: the artifact store fails")
        env = {**env, "MLFLOW_TRACKING_URI": server.uri, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
        broken = _stage("benchmark", root, env)
        assert "not logged to MLflow" in broken.stderr
        half = _children(server.uri)  # created, their artifacts refused (a busy server may refuse one before it exists)
        assert 1 <= len(half) <= RUNS_PER_INVOCATION and set(half["status"]) == {"RUNNING"}
        artifacts.unlink()
        artifacts.mkdir()
        for _ in range(2):
            _stage("sync", root, env)
        done = _children(server.uri)
        assert len(done) == RUNS_PER_INVOCATION and done["tags.compilebench.run_uid"].is_unique
        assert set(done["status"]) == {"FINISHED"}
        for run_id in done["run_id"]:
            assert "samples.json" in {a.path for a in mlflow.artifacts.list_artifacts(run_id=run_id)}
    finally:
        server.stop()


def _group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # ended while we looked
        if group == str(pgid) and state != "Z":
            members.append(int(entry.name))
    return members


@SHARED
def test_stopping_the_benchmark_while_an_environment_builds_ends_the_builder(loaded, tmp_path):
    root, env = loaded
    set_params(root, **{"compare": ["current", "transformers-4.57.6"], "paths.environments": str(tmp_path / "envs")})
    try:
        _stage("load_models", root, env)  # the selection names the compared environment
        benchmark = subprocess.Popen(
            [sys.executable, "-m", "compilebench.benchmark"],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        builder, deadline = None, time.time() + 300
        while builder is None and time.time() < deadline and benchmark.poll() is None:
            for pid in descendants(benchmark.pid):
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if b" install " in command:  # uv pip install, or pip install: the builder
                    builder = pid
            time.sleep(0.1)
        assert builder is not None, "no environment build started"
        pgid = os.getpgid(builder)
        assert pgid != os.getpgid(benchmark.pid)  # a group of its own, so it can be ended whole
        benchmark.send_signal(signal.SIGTERM)
        benchmark.wait(timeout=60)
        deadline = time.time() + 20
        while _group_members(pgid) and time.time() < deadline:
            time.sleep(0.1)
        left = _group_members(pgid)
        if left:
            os.killpg(pgid, signal.SIGKILL)  # the group our benchmark started: not left behind by a failing test
        assert not left, f"the environment's builder outlived the benchmark: {left}"
    finally:
        set_params(root, **{"compare": ["current"], "paths.environments": str(ROOT_ENVIRONMENTS)})
        _stage("load_models", root, env)


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    """Two experiments queued with `dvc exp run --queue` (seeds 1 and 2) and run by a real `dvc queue start -j 1`,
    each in DVC's temporary copy of the project."""
    root = make_project(tmp_path_factory.mktemp("queue"), MODELS)
    env = project_env()
    init_project(root, env)
    names = []
    for seed in (1, 2):
        name = f"seed-{seed}"
        run_ok(["dvc", "exp", "run", "--queue", "-n", name, "-S", f"benchmark.seed={seed}"], root, env)
        names.append(name)
    run_ok(["dvc", "queue", "start", "-j", "1"], root, env)
    try:
        deadline, status = time.time() + 900, ""
        while time.time() < deadline:
            status = run_ok(["dvc", "queue", "status"], root, env).stdout
            if status.count("Success") + status.count("Failed") >= 2:
                break
            time.sleep(1)
    finally:
        run_ok(["dvc", "queue", "stop", "--kill"], root, env)  # DVC's own worker, stopped through DVC
    return root, env, names, status


@pytest.mark.xdist_group("queue")
def test_queued_experiments_log_into_the_projects_store_tagged_with_their_names(queued):
    root, env, names, status = queued
    assert status.count("Success") == 2, status
    runs = _children(f"sqlite:///{root}/mlruns/mlflow.db")  # the project's own store, not a deleted copy's
    assert sorted(set(runs["tags.dvc.exp_name"])) == sorted(names)
    assert len(runs) == 2 * RUNS_PER_INVOCATION and runs["tags.compilebench.run_uid"].is_unique
    assert runs.groupby("tags.dvc.exp_name")["params.invocation_id"].nunique().to_dict() == dict.fromkeys(names, 1)
    shown = json.loads(run_ok(["dvc", "exp", "show", "--json"], root, env).stdout)
    assert len(json.dumps(shown).split('"seed-')) >= 3  # both experiments are DVC's, with their own results


@pytest.mark.xdist_group("exp-race")
def test_a_plain_dvc_exp_run_beside_make_compare_loses_nothing(tmp_path):
    """`make compare`'s commands (`dvc exp run -n NAME`, then config.guard) with a plain `dvc exp run -S` started
    while its benchmark runs: the second is refused, and the first's experiment is saved under its name with its own
    params and metrics, params.yaml as it ran. (On 26ab17f the first ended "'NoneType' object is not subscriptable",
    no experiment, and params.yaml kept the second's seed.)"""
    root = make_project(tmp_path, MODELS)
    env = project_env()
    init_project(root, env)
    recipe = 'dvc exp run -n first -S benchmark.min_time_s=1; python -m compilebench.config.guard first "$?"'
    assert 'python -m compilebench.config.guard "$name" $?' in make_dry_run("compare", "B=current")  # the same
    first = subprocess.Popen(
        ["bash", "-c", recipe],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while not (root / "data/journal/invocation.json").exists() and first.poll() is None:
            assert time.time() < deadline, "the first experiment's benchmark never started"
            time.sleep(0.2)
        second = subprocess.run(
            ["dvc", "exp", "run", "-S", "benchmark.seed=7"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        output, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)  # the group we started: its bash, dvc and stages
    assert second.returncode != 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert first.returncode == 0, output[-4000:]
    params = yaml.safe_load((root / "params.yaml").read_text())
    assert params["benchmark"]["seed"] == 0 and params["benchmark"]["min_time_s"] == 1, params["benchmark"]
    shown = json.loads(run_ok(["dvc", "exp", "show", "--json"], root, env).stdout)
    runs = [rev for base in shown for exp in base.get("experiments") or [] for rev in exp["revs"]]
    saved = [rev for rev in runs if rev.get("name") == "first"]
    assert saved, [rev.get("name") for rev in runs]
    data = saved[0]["data"]
    assert data["params"]["params.yaml"]["data"]["benchmark"]["seed"] == 0
    assert "data/results/metrics.json" in (data.get("metrics") or {}), sorted(data.get("metrics") or {})
