"""Where processes run: units of dispatch, this machine's slots, and a real local Ray cluster with two logical GPUs
through a real `dvc repro` (a worker killed mid-unit included). On a CPU, slots side by side measure each other:
these tests check the dispatch (who ran where, with which threads, once), not the numbers."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import closed_port, descendants, init_project, make_project, project_env, run_ok, set_params

from compilebench.analysis import plan
from compilebench.benchmark import executors
from compilebench.records import formats as records
from compilebench.records.formats import ModelSpec, TimingSpec, VariantSpec

MODELS = [ModelSpec(f"org/m{i}", f"M{i}", "image-classification", "X", "ckpt") for i in range(3)]
VARIANTS = [VariantSpec("eager", compile=False), VariantSpec("default")]


def test_a_unit_is_every_pending_trial_of_a_model_and_batch_size_in_the_plans_order():
    trials = plan.trials(MODELS, [1, 4], VARIANTS, ["a", "b"], 2, 1, False, "i.jpg", TimingSpec(), 0)
    units = records.units(trials)
    assert len(units) == 3 * 2  # models x batch sizes
    for unit in units:
        assert len({(s.model.model_id, s.batch_size) for s in unit}) == 1
        assert [trials.index(s) for s in unit] == sorted(trials.index(s) for s in unit)  # the plan's order
        assert {s.environment for s in unit} == {"a", "b"}  # A and B of its blocks together
    assert sum(len(unit) for unit in units) == len(trials)


def test_this_machines_slots_split_its_cores_and_name_their_gpu():
    slots = executors.local_slots([3, 5], 0)
    cores = len(os.sched_getaffinity(0))
    assert [slot["CUDA_VISIBLE_DEVICES"] for slot in slots] == ["3", "5"]
    assert all(
        slot["OMP_NUM_THREADS"] == slot["TORCHINDUCTOR_COMPILE_THREADS"] == str(max(cores // 2, 1)) for slot in slots
    )
    if cores >= 2:
        first, second = ({int(c) for c in slot["COMPILEBENCH_CPUS"].split(",")} for slot in slots)
        assert first and second and not first & second  # each its own cores


def test_the_gpus_executor_on_a_machine_without_a_gpu_is_a_clear_error(tmp_path):
    if executors._cuda_devices():
        pytest.skip("this machine has a GPU torch can see")
    runner = SimpleNamespace(executor="gpus", gpus=[], cpus_per_slot=0, trial_timeout_s=60.0)
    with pytest.raises(executors.ExecutorError, match=r"no GPU torch can see.*`runner.gpus`"):
        executors.executor(runner, "cpu", {"current": sys.executable}, tmp_path)


def _project(tmp_path, **runner):
    """Two units (the tiny ResNet at batch 1 and 2), eager and default: two timing blocks each (the first compiles,
    the second finds its graphs in the shared cache), one environment."""
    root = make_project(tmp_path, ["microsoft/resnet-50"], replicates=2, cold_replicates=0, compile_cache="shared")
    set_params(
        root,
        **{f"runner.{key}": value for key, value in runner.items()},
        **{"runner.parallel_cpu_slots": True, "suites.smoke.batch_sizes": [1, 2]},
    )
    return root


def _processes(root):
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    seen = {}  # by process: a timing process's arms share one
    for row in rows:
        for process in row["process_results"]:
            seen[process["process_id"] or process["trial_id"]] = ((row["model_id"], row["batch_size"]), process)
    return rows, seen


@pytest.fixture(scope="module")
def on_slots(tmp_path_factory):
    """The plan on this machine's slots (the gpus executor, two slots of one core), through `dvc repro`."""
    root = _project(tmp_path_factory.mktemp("slots"), executor="gpus", gpus=[0, 1], cpus_per_slot=1)
    env = project_env()
    init_project(root, env, commit=False)
    run_ok(["dvc", "repro"], root, env)
    return root


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.xdist_group("executors")
def test_this_machines_slots_run_a_unit_each_with_their_threads(on_slots):
    root = on_slots
    rows, seen = _processes(root)
    assert all(row["status"] == "ok" for row in rows), [(r["model_id"], r["status"], r["error"]) for r in rows]
    per_unit = {}
    for unit, process in seen.values():
        per_unit.setdefault(unit, set()).add(process["slot"])
    assert len(per_unit) == 2 and all(len(slots) == 1 for slots in per_unit.values()), per_unit  # a unit's, on one
    assert all(process["omp_num_threads"] == "1" for _, process in seen.values())
    windows = sorted((p["started_at"], p["started_at"] + p["wall_s"]) for _, p in seen.values())
    at_once = max(sum(start <= moment < end for start, end in windows) for moment, _ in windows)
    assert at_once <= 2  # one process per slot at a time


@pytest.fixture(scope="module")
def on_ray(tmp_path_factory):
    """The same plan on a real Ray cluster started for the run (two logical GPUs), through `dvc repro`; a Ray worker
    running a unit is killed mid-unit (SIGKILL, by its PID: a process our own `dvc repro` started)."""
    pytest.importorskip("ray")
    root = _project(tmp_path_factory.mktemp("ray"), executor="ray", ray_address="local", gpus=[0, 1], cpus_per_slot=1)
    ray_tmp = tempfile.mkdtemp(prefix="cbray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**project_env(), "COMPILEBENCH_RAY_TMP": ray_tmp}
    init_project(root, env, commit=False)
    repro = subprocess.Popen(
        ["dvc", "repro"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    killed, deadline = None, time.time() + 600
    while killed is None and time.time() < deadline and repro.poll() is None:
        for pid in descendants(repro.pid):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"compilebench.harness.trial" in command:  # a trial: its parent is the Ray worker running its unit
                worker = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                os.kill(worker, signal.SIGKILL)
                killed = worker
                break
        time.sleep(0.2)
    output, _ = repro.communicate(timeout=1200)
    assert repro.returncode == 0, output[-3000:]
    return root, killed, output


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.xdist_group("executors")
def test_on_ray_every_unit_runs_on_one_gpu_with_its_threads_and_a_killed_unit_runs_again_once(on_ray):
    root, killed, _ = on_ray
    assert killed is not None, "no trial was seen to kill its worker"
    rows, seen = _processes(root)
    assert all(row["status"] == "ok" for row in rows), [(r["model_id"], r["status"], r["error"]) for r in rows]
    per_unit = {}
    for unit, process in seen.values():
        per_unit.setdefault(unit, set()).add(process["slot"])
    assert len(per_unit) == 2 and all(
        len(slots) == 1 and next(iter(slots)).rsplit(":", 1)[1] in ("0", "1") for slots in per_unit.values()
    )
    assert all(process["omp_num_threads"] == "1" for _, process in seen.values())  # not Ray's own 1 by chance:
    windows = sorted((p["started_at"], p["started_at"] + p["wall_s"]) for _, p in seen.values())
    assert max(sum(start <= moment < end for start, end in windows) for moment, _ in windows) <= 2
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["compilebench"], filter_string="tags.role = 'measurement'")
    assert len(runs) == len(rows) and runs["tags.compilebench.run_uid"].is_unique  # the killed unit's runs once


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.xdist_group("executors")
def test_on_ray_the_results_and_tables_have_this_machines_schema(on_ray, on_slots):
    """The same plan on Ray and on this machine (its slots: the launcher's own process runner, as the local executor
    runs it) gives tables with the same columns and result lines with the same keys."""
    root, _, _ = on_ray
    local = on_slots
    for table in ("summary.csv", "comparison.csv", "verdicts.csv"):
        remote_header = (root / "data/results" / table).read_text().splitlines()[0]
        local_header = (local / "data/results" / table).read_text().splitlines()[0]
        assert remote_header == local_header, table
    remote_row = json.loads((root / "data/results/runs.jsonl").read_text().splitlines()[0])
    local_row = json.loads((local / "data/results/runs.jsonl").read_text().splitlines()[0])
    assert set(remote_row) == set(local_row)


def test_a_ray_address_where_nothing_listens_is_refused_within_seconds(tmp_path):
    """`executor: ray` at a real address with nothing listening: the executor refuses within seconds, naming the
    address (Ray's own join retries for minutes; the benchmark stage turns the error into one line, exit 2); a port
    that answers is let through to Ray."""
    pytest.importorskip("ray")
    port = closed_port()
    assert "nothing answers at 127.0.0.1:" in executors.unreachable(f"127.0.0.1:{port}")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert executors.unreachable(f"ray://127.0.0.1:{listening.getsockname()[1]}") is None
    runner = SimpleNamespace(ray_address=f"127.0.0.1:{port}", gpus=[], cpus_per_slot=0)
    began = time.monotonic()
    with pytest.raises(executors.ExecutorError, match=f"'127.0.0.1:{port}': nothing answers"):
        executors.Ray({"current": sys.executable}, tmp_path, 60.0, runner, "cpu")
    assert time.monotonic() - began < 30
