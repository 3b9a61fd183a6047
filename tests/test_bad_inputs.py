"""Bad input to the stage commands: a clear error naming what was wrong, exit 2, nothing written to results or the
MLflow store. One case per stage runs the real command in a process of its own; the others call the same `main()`
in this process, in the project's folder (config and download cases are in test_config and test_fetch_image)."""

import fcntl
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import zipfile

import pytest
from conftest import closed_port, make_project, project_env, set_params

from compilebench.environments import package_index, venvs

pytestmark = pytest.mark.xdist_group("test_bad_inputs")  # its module fixtures run once

# (stage, params changes as dotted keys, extra environment, text the error must contain); the first case of each
# stage runs as a command
CASES = [
    ("fetch_image", {"benchmark.min_iters": "ten"}, {}, "benchmark.min_iters"),
    (
        "load_models",
        {"suites.smoke.models": ["acme/not-a-model"], "suites.smoke.scale": "full"},
        {},
        "acme/not-a-model: no card, and the Hub",
    ),
    ("load_models", {"suites.smoke.models": ["/no/such/model"], "suites.smoke.scale": "full"}, {}, "/no/such/model"),
    ("load_models", {"suites.smoke.cells": "published", "suites.smoke.batch_sizes": [2]}, {}, "use `cells: all`"),
    ("fetch_image", {"image.file": "/no/such/image.jpg"}, {}, "image.file '/no/such/image.jpg': does not exist"),
    ("benchmark", {"variants.default.inductor": {"no_such_option": True}}, {}, "no_such_option"),
    ("aggregate", {"suite": "nope"}, {}, "suite"),
    ("plot", {"plot.dpi": 0}, {}, "plot.dpi"),
    ("benchmark", {}, {}, "selection.json"),  # run before load_models: nothing to measure yet
    ("benchmark", {"device": "cuda"}, {}, "built without CUDA"),  # this torch is a CPU build
    ("benchmark", {"paths.tracking_uri": "sqlite:///{root}/params.yaml/store/mlflow.db"}, {}, "is not a directory"),
    ("benchmark", {}, {"MLFLOW_TRACKING_URI": "ftp://host/store"}, "unknown scheme"),
    ("benchmark", {"compare": ["current", "torch-9.9"]}, {}, "torch-9.9"),
    ("benchmark", {}, {"__ARGS__": ("--set", "benchmark.seed=1")}, "--set and --window-min only go with --export"),
    ("benchmark", {}, {"__ARGS__": ("--export", "plans", "--prime", "8")}, "--prime only with --window-min"),
]


def _run(root, stage, env, *args):
    return subprocess.run(
        [sys.executable, "-m", f"compilebench.{stage}", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _main(monkeypatch, caplog, root, stage, env, *args) -> tuple[int, str]:
    """The stage's `main()` in this process, as its command would run it: in `root`, with `args` and `env`; its exit
    status and what it logged. Signal handlers a stage installs are put back."""
    module = importlib.import_module(f"compilebench.{stage}")
    if not hasattr(module, "main"):  # a stage's wing: its stage module has the main() `python -m` runs
        module = importlib.import_module(f"compilebench.{stage}.stage")
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "argv", [f"compilebench.{stage}", *args])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(SystemExit) as exited:
            module.main()
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return exited.value.code, caplog.text


def _files(root):
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A project after fetch_image and load_models, copied by each case that needs a benchmark's inputs."""
    root = make_project(tmp_path_factory.mktemp("prepared"), ["microsoft/resnet-50"])
    for stage in ("fetch_image", "load_models"):
        assert _run(root, stage, project_env()).returncode == 0
    return root


COMMAND_CASE = {stage: needle for stage, *_, needle in reversed(CASES)}  # each stage's first case, by its needle


@pytest.mark.parametrize(("stage", "changes", "extra_env", "needle"), CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_bad_input_is_a_clear_error_and_writes_nothing(
    tmp_path, prepared, monkeypatch, caplog, stage, changes, extra_env, needle
):
    if stage == "benchmark" and "selection.json" not in needle:
        root = tmp_path / "project"  # its inputs exist: the bad part is the one under test
        shutil.copytree(prepared, root, symlinks=True)
    else:
        root = make_project(tmp_path, ["microsoft/resnet-50"])
    extra_env = dict(extra_env)
    args = list(extra_env.pop("__ARGS__", ()))
    env = {**project_env(), "HF_HOME": str(tmp_path / "empty-hf-home")}
    set_params(root, **{k: v.replace("{root}", str(root)) if isinstance(v, str) else v for k, v in changes.items()})
    before = _files(root)
    if COMMAND_CASE[stage] == needle:
        done = _run(root, stage, {**env, **extra_env}, *args)
        status, said = done.returncode, done.stderr
        assert "Traceback" not in said  # a message, not a crash
    else:  # an unexpected exception fails the test as a crash would
        status, said = _main(monkeypatch, caplog, root, stage, extra_env, *args)
    assert status == 2, said[-2000:]
    assert needle in said, said[-2000:]
    assert _files(root) == before  # nothing written: no result, no store, no half-built environment


def test_non_utf8_params_name_the_file(tmp_path):
    root = make_project(tmp_path, ["microsoft/resnet-50"])
    (root / "params.yaml").write_bytes((root / "params.yaml").read_bytes() + "# caf\xe9\n".encode("latin-1"))
    before = _files(root)
    done = _run(root, "fetch_image", project_env())
    assert done.returncode == 2 and "params.yaml: not UTF-8" in done.stderr and "Traceback" not in done.stderr
    assert _files(root) == before


def test_a_read_only_database_is_refused_before_any_work(tmp_path, prepared):
    """A store whose database cannot take a write: said plainly, before any trial runs. (Root ignores a file's mode:
    as root the file is made immutable instead, which binds root too.)"""
    root = tmp_path / "project"
    shutil.copytree(prepared, root, symlinks=True)
    env = project_env()
    code = "from compilebench import tracking; tracking.client('sqlite:///mlruns/mlflow.db')"
    subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True, capture_output=True)
    database = root / "mlruns" / "mlflow.db"
    immutable = os.geteuid() == 0
    if immutable and subprocess.run(["chattr", "+i", str(database)], capture_output=True).returncode != 0:
        pytest.skip("running as root on a file system without immutable files: a read-only file cannot be made")
    if not immutable:
        database.chmod(0o444)
    try:
        done = _run(root, "benchmark", env)
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(database)], check=True)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot be written (the database is read-only)" in done.stderr
    assert not (root / "data" / "results").exists()


@pytest.mark.parametrize(
    ("probe", "device", "needle"),
    [
        ({"version": "2.13.0+cpu", "built": False, "available": False, "count": 0}, "cuda", "built without CUDA"),
        ({"version": "2.14.1", "built": True, "available": False, "count": 0}, "cuda", "sees no GPU"),
        ({"version": "2.14.1", "built": True, "available": True, "count": 1}, "cuda:3", "use cuda:0 .. cuda:0"),
        ({"version": "2.14.1", "built": True, "available": True, "count": 2}, "cuda:1", None),
    ],
)
def test_device_problems_name_the_key(probe, device, needle):
    problem = venvs.device_problem(probe, "current", device)
    assert problem is None if needle is None else (needle in problem and "`device`" in problem)


def test_make_gpu_on_a_machine_without_a_gpu_stops_before_any_stage(tmp_path, repo_root):
    """`make gpu`'s first step on this CPU machine (the project's torch, a CPU build): exit 2, naming the key and
    why, before DVC runs anything."""
    root = make_project(tmp_path, ["microsoft/resnet-50"])
    before = _files(root)
    done = _run(root, "environments", project_env(), "--device", "cuda", "current")
    assert done.returncode == 2 and "built without CUDA" in done.stderr and "`device`" in done.stderr
    assert "Traceback" not in done.stderr and _files(root) == before
    make = subprocess.run(["make", "-n", "gpu"], cwd=repo_root, capture_output=True, text=True)
    assert make.stdout.index("--device cuda current") < make.stdout.index("dvc exp run -S suite=gpu")


def test_no_remote_code_and_safetensors_only(repo_root):
    source = "\n".join(p.read_text() for p in (repo_root / "src").rglob("*.py"))
    assert "trust_remote_code=" not in source
    assert "use_safetensors=True" in source and '"*.bin"' not in source


def test_reading_a_store_that_holds_no_runs_is_a_clear_error(tmp_path):
    """`aggregate --from-mlflow` on a store without the experiment, then on one with the experiment and no measurement
    run: exit 2, one line naming the store and what it lacks, no store table written."""
    root = make_project(tmp_path, ["microsoft/resnet-50"])
    env, store = project_env(), "sqlite:///mlruns/mlflow.db"  # the project's default store
    done = _run(root, "aggregate", env, "--from-mlflow")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"no MLflow experiment 'compilebench' in {store}" in done.stderr
    create = f"from compilebench import tracking as t; t.client('{store}').create_experiment(t.EXPERIMENT)"
    subprocess.run([sys.executable, "-c", create], cwd=root, env=env, check=True, capture_output=True, timeout=300)
    done = _run(root, "aggregate", env, "--from-mlflow")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"no measurement runs in the MLflow store {store}" in done.stderr
    assert not (root / "data/store").exists()


def test_a_store_that_cannot_be_reached_is_one_line_without_its_password(tmp_path):
    """A server store with a password in its URI and nothing listening: every command that reads the store (the
    store's tables, sync, the UI's address) ends with one line naming the store, redacted, and no traceback."""
    root = make_project(tmp_path, ["microsoft/resnet-50"])
    (root / "data" / "results").mkdir(parents=True)
    (root / "data" / "results" / "run_info.json").write_text('{"invocation_id": "i"}')  # sync has something to sync
    (root / "data" / "results" / "runs.jsonl").write_text("")
    env = {
        **project_env(),
        "MLFLOW_TRACKING_URI": f"http://bench:pwSECRET77@127.0.0.1:{closed_port()}",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    }
    for stage, args, code in (
        ("aggregate", ("--from-mlflow",), 2),
        ("sync", (), 1),
        ("tracking", ("--ui-url", "http://127.0.0.1:5000"), 2),
    ):
        done = _run(root, stage, env, *args)
        assert done.returncode == code, (stage, done.stderr[-2000:])
        output = done.stdout + done.stderr
        assert "pwSECRET77" not in output and "Traceback" not in output, (stage, output[-2000:])
        assert "MLflow store http://***@127.0.0.1:" in done.stderr, (stage, done.stderr[-2000:])
    assert not (root / "data/store").exists()


def test_make_ui_on_a_port_another_program_holds_says_so_and_exits_2(tmp_path):
    """`make ui` where something already listens on PORT: one line naming the address and `PORT=`, exit 2, and the
    runs table's address (another program's page now) not printed."""
    root = make_project(tmp_path, ["microsoft/resnet-50"])
    create = (
        "from compilebench import tracking as t; t.client('sqlite:///mlruns/mlflow.db').create_experiment(t.EXPERIMENT)"
    )
    subprocess.run(
        [sys.executable, "-c", create], cwd=root, env=project_env(), check=True, capture_output=True, timeout=300
    )
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = _run(root, "tracking", project_env(), "--ui-url", f"http://127.0.0.1:{port}")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"http://127.0.0.1:{port} is taken" in done.stderr and f"make ui PORT={port + 1}" in done.stderr
    assert "compilebench runs:" not in done.stdout
    free = _run(root, "tracking", project_env(), "--ui-url", f"http://127.0.0.1:{port}")  # the holder is gone
    assert free.returncode == 0 and "compilebench runs: http://127.0.0.1:" in free.stdout, free.stderr[-2000:]


def test_make_ui_prints_one_address_once_the_ui_answers_and_ends_with_it(tmp_path):
    """`make ui`'s command: MLflow's own output (its bare address, which opens MLflow's Home in GenAI mode) goes to
    mlruns/ui.log; one address is printed, the runs table's in machine-learning mode, once the UI answers there; a
    SIGTERM to the command ends the UI it started (its port free again)."""
    import time
    import urllib.request

    root = make_project(tmp_path, ["microsoft/resnet-50"])
    create = (
        "from compilebench import tracking as t; t.client('sqlite:///mlruns/mlflow.db').create_experiment(t.EXPERIMENT)"
    )
    subprocess.run(
        [sys.executable, "-c", create], cwd=root, env=project_env(), check=True, capture_output=True, timeout=300
    )
    port = closed_port()
    base = f"http://127.0.0.1:{port}"
    ui = subprocess.Popen(
        [sys.executable, "-m", "compilebench.tracking", "--ui-url", base, "--serve", "sqlite:///mlruns/mlflow.db"],
        cwd=root,
        env=project_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        line = ui.stdout.readline()  # printed once the UI answers
        assert line.startswith(f"compilebench runs: {base}/#/experiments/") and "workflowType=machine_learning" in line
        assert urllib.request.urlopen(f"{base}/health", timeout=10).status == 200
    finally:
        os.killpg(ui.pid, signal.SIGTERM)  # the group started here
        out, err = ui.communicate(timeout=90)
    assert ui.returncode == 0 and "http" not in out + err, out + err  # one address in all: the line above
    assert "Uvicorn running on" in (root / "mlruns" / "ui.log").read_text()  # MLflow's own, kept in its log
    time.sleep(1)
    with socket.socket() as probe:  # the UI ended with the command
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))


def test_ingest_refuses_a_line_of_another_window_in_an_export_without_plan_digests(tmp_path, repo_root):
    """An export from before lines named their plan (the H100 window fixture, format 2) with a line of another window
    of the same run mixed in: refused, naming the file, the key and the trial, exit 2, nothing written (it was taken,
    and `plot` later crashed on the mixed runs)."""
    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", ["microsoft/resnet-50"])
    export = shutil.copytree(repo_root / "tests" / "fixtures" / "h100-window", tmp_path / "w1")
    lines = (export / "results" / "trials.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    other = first["trial_id"].replace("microsoft--resnet-50", "nvidia--segformer-b0-finetuned-ade-512-512")
    (export / "results" / "trials.jsonl").write_text(
        "\n".join([*lines, json.dumps({**first, "trial_id": other})]) + "\n"
    )
    done = _run(root, "benchmark", project_env(), "--ingest", str(export))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"key 'trial_id' '{other}' names no trial of the plan" in done.stderr and "nothing ingested" in done.stderr
    assert not (root / "data" / "results").exists()


@pytest.mark.parametrize("target", ["run", "compare B=current"])
def test_a_second_pipeline_in_a_project_is_refused_before_dvc_starts(tmp_path, repo_root, target):
    """While one `make run` / `compare` holds the project's pipeline lock, a second says so and exits 75 before DVC
    starts (DVC would refuse it, and the first would then fail at its end). The project here: the Makefile with the
    project's environment (its install stamp newer than the files it is built from) and a DVC folder."""
    _makefile_project(tmp_path, repo_root)
    with open(tmp_path / ".dvc" / "tmp" / "pipeline.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first pipeline
        done = subprocess.run(["make", *target.split()], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "another make run, compare or gpu is running in this project" in done.stderr
    assert "Error 75" in done.stderr and "Running stage" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "dvc.lock").exists() and not (tmp_path / "data").exists()


def test_a_noise_record_that_cannot_be_read_stops_before_any_work_and_is_kept(tmp_path):
    """data/calibration.json cut short, a list, or an object of the wrong shape: each is refused where it is read,
    naming the file and what is wrong; the benchmark and aggregate end with that one line, exit 2, before any trial,
    and the file is left as it was."""
    from compilebench.analysis import noise_record
    from compilebench.records.formats import RecordError

    calibration = tmp_path / "calibration.json"
    for content, why in (
        ('{"abc|cpu": {"version": 2, "invoc', "not JSON"),
        ("[]", "a JSON object by machine"),
        ('{"abc|cpu": {"invocations": []}}', "not an object with `invocations`"),
    ):
        calibration.write_text(content)
        with pytest.raises(RecordError, match=why):
            noise_record.load_calibrations(calibration)
    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", ["microsoft/resnet-50"])
    calibration = root / "data" / "calibration.json"
    calibration.parent.mkdir(parents=True, exist_ok=True)
    calibration.write_text("[]")
    env = project_env()
    for stage in ("benchmark", "aggregate"):
        done = _run(root, stage, env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (stage, done.stderr[-2000:])
        assert "data/calibration.json" in done.stderr and "mend or delete it" in done.stderr, done.stderr[-2000:]
    assert calibration.read_text() == "[]" and not (root / "data" / "journal").exists()


def test_an_overlay_of_a_missing_wheel_or_into_a_used_folder_is_refused_and_writes_nothing(tmp_path):
    """`harness.overlay` (a second stack from carried wheels): a path that is not a wheel, or a folder that holds
    something else, is named, exit 2, before any venv is made; the folder is left as it was."""
    command = [sys.executable, "-m", "compilebench.harness.overlay"]
    missing = subprocess.run(
        [*command, str(tmp_path / "new"), str(tmp_path / "transformers.whl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "not a wheel file" in missing.stderr and "transformers.whl" in missing.stderr
    assert not (tmp_path / "new").exists()
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    refused = subprocess.run([*command, str(used), str(wheel)], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "is not an overlay made here" in refused.stderr
    assert [path.name for path in used.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("entry", ["ABSOLUTE", "../../escaped.py", "pkg/../../escaped.py", "..\\escaped.py"])
def test_an_overlay_of_a_wheel_with_an_entry_outside_its_folder_is_refused_and_writes_nothing(tmp_path, entry):
    """A wheel is foreign input: an entry with an absolute path, or one that climbs out with `..`, is named, exit 2,
    before anything is written: no venv, nothing at the absolute path, nothing beside the folder."""
    outside = tmp_path / "outside" / "planted.py"
    entry = str(outside) if entry == "ABSOLUTE" else entry
    wheel = tmp_path / "evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("evil/__init__.py", "")
        archive.writestr(entry, "print('planted')")
    target = tmp_path / "deep" / "er" / "overlay"
    refused = subprocess.run(
        [sys.executable, "-m", "compilebench.harness.overlay", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "outside the overlay's site-packages" in refused.stderr, refused.stderr
    assert repr(entry) in refused.stderr and "Traceback" not in refused.stderr
    assert not outside.exists() and not (tmp_path / "deep").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == [wheel.name]


def _makefile_project(tmp_path, repo_root):
    """The Makefile with the project's environment (its stamp newer than what it is built from) and a DVC folder."""
    for name in (
        "Makefile",
        "requirements.txt",
        "constraints.txt",
        "pyproject.toml",
        "src/compilebench/environments/installer.py",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(repo_root / name, tmp_path / name)
        os.utime(tmp_path / name, (0, 0))  # older than the environment's stamp: make builds nothing
    (tmp_path / ".venv").symlink_to(repo_root / ".venv")
    (tmp_path / ".dvc" / "tmp").mkdir(parents=True)
    (tmp_path / ".dvc" / "config").write_text("")
    return tmp_path


@pytest.mark.parametrize("target", ["series", "forecast"])
def test_releases_typed_newest_first_are_refused_with_the_order_to_type(tmp_path, repo_root, target):
    """`make series TORCH="2.14.1 2.13.0"` ran every step backwards and exited 0: now one line saying the order to
    type, exit 2, before DVC or the forecast starts (the pipeline lock is held: a series that got past the check would
    stop on it with 75 instead)."""
    root = _makefile_project(tmp_path, repo_root)
    with open(root / ".dvc" / "tmp" / "pipeline.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = subprocess.run(
            ["make", target, "TORCH=2.14.1 2.0.1 2.13.0"], cwd=root, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2 and "Error 2" in done.stderr, done.stdout + done.stderr
    assert (
        "TORCH lists torch releases oldest first" in done.stderr and 'type them as "2.0.1 2.13.0 2.14.1"' in done.stderr
    )
    assert "Traceback" not in done.stderr and not (root / "dvc.lock").exists() and not (root / "data").exists()


@pytest.mark.parametrize("port", ["abc", "0", "70000"])
def test_make_ui_on_a_port_that_is_none_is_one_line_and_exit_2(tmp_path, repo_root, port):
    """`make ui PORT=abc` (and 70000) was a 13-line traceback, PORT=0 printed a link to port 0 and served on a random
    one: now one line naming the allowed ports, exit 2, before MLflow's UI starts."""
    root = _makefile_project(tmp_path, repo_root)
    done = subprocess.run(["make", "ui", f"PORT={port}"], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"the UI's port must be a whole number from 1 to 65535 (make ui PORT=5001), got '{port}'" in done.stderr
    assert "compilebench runs:" not in done.stdout and "mlflow ui" not in done.stdout


def test_a_release_the_index_does_not_have_is_refused_before_anything_is_built(tmp_path, repo_root):
    """`make compare B=torch-9.9.9` built the 1.3 GB baseline, then failed on one 724-character line of uv's: now the
    benchmark stage (venvs.stacks) and `make forecast` name the release and those of its minor series the
    index has, exit 2, nothing built. Against the real package index; skipped where it cannot be read."""
    if package_index.index_versions("torch") is None:
        pytest.skip("the package index cannot be read from here (`pip index versions torch`)")
    selected = [
        {"name": name, "label": name, "pins": {**venvs.project_pins(repo_root), "torch": version}}
        for name, version in (("torch-2.14.1", "2.14.1"), ("torch-2.14.9", "2.14.9"))
    ]
    wanted = [("current", {}, ""), *((entry["name"], entry["pins"], "") for entry in selected)]
    said = "; ".join(package_index.unreleased(wanted, repo_root, tmp_path))
    assert "environment 'torch-2.14.9': torch 2.14.9 is not a release on the package index" in said
    assert "its releases near it: 2.14.1, 2.14.0" in said and "torch-2.14.1" not in said
    assert list(tmp_path.iterdir()) == []  # nothing built, the baseline included
    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", ["microsoft/resnet-50"])
    done = _run(root, "benchmark.forecast", project_env(), "--set", "compare=[current,torch-9.9.9]")
    assert done.returncode == 2 and "torch 9.9.9 is not a release on the package index" in done.stderr
    assert "Traceback" not in done.stderr
