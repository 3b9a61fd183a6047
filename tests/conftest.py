"""Shared fixtures: the repo root, the embedded 640x480 image, a project copy on tiny models, a tiny checkpoint.

Hermetic: the tests and every process they start compile into a session-local inductor cache and temp folder (set
here, before anything imports torch), never into the user's. Tests that measure cold compiles give their trials empty
caches of their own (the launcher does); the others share this one, so a tiny model compiles cold once per test run.
"""

from __future__ import annotations

import atexit
import http.server
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# One inductor cache per test run: the controller makes it and every xdist worker (a child) inherits the variable;
# the controller removes it as it exits, after every worker, also where pytest ends before a session (a usage error).
# Nothing is left in the temp folder, nothing reaches the user's cache.
if "COMPILEBENCH_TEST_INDUCTOR_CACHE" not in os.environ:
    os.environ["COMPILEBENCH_TEST_INDUCTOR_CACHE"] = tempfile.mkdtemp(prefix="compilebench-tests-inductor-")
    atexit.register(shutil.rmtree, os.environ["COMPILEBENCH_TEST_INDUCTOR_CACHE"], ignore_errors=True)
_INDUCTOR_CACHE = os.environ["COMPILEBENCH_TEST_INDUCTOR_CACHE"]
# Inductor's and triton's caches, and the temp folder (where torch keeps precompiled C++ headers, whatever
# TORCHINDUCTOR_CACHE_DIR says), as the launcher sets them for a trial: every process the tests start uses the
# session's folder (pytest's own tmp_path folders are not in it). The launcher imports no torch.
from cxx_cache import counts, install  # noqa: E402 (the standard library only)

from compilebench.harness.trial_process import cache_variables  # noqa: E402

os.environ.update(cache_variables(Path(_INDUCTOR_CACHE)))
# Inductor probes the CPU's vector ISAs by compiling and loading six C++ programs into each new cache, seconds of every
# cold compile; the tests count graphs and cache hits, not those seconds, so they take the ISAs /proc/cpuinfo
# names. The pipeline itself (and every number it reports) keeps the probe.
os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
# torch's OpenMP threads (libgomp) spin between parallel regions: on a tiny model, a two-thread process burns a second
# core for every second it calls, taken from the other workers' processes. The tests check what was measured, not how
# fast, so their processes sleep instead (findings 2026-12-05, OMP_WAIT_POLICY); the pipeline keeps torch's default.
# Set beforehand (`OMP_WAIT_POLICY=ACTIVE make test`), it is left as it is.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# A cold trial compiles its kernels and precompiled header with g++ again, byte for byte what an earlier cold trial of
# the same model compiled; inductor's compiler (`CXX`, read when torch is imported) is a compiler cache for the test
# run (tests/cxx_cache.py), so g++ does each distinct compile once. Inductor's caches stay as cold as the tests say.
# COMPILEBENCH_TEST_CXX set beforehand (`COMPILEBENCH_TEST_CXX=off make test`) leaves the compiler as it is.
_CXX_CACHE = Path(_INDUCTOR_CACHE) / "cxx"
_REAL_CXX = shutil.which(os.environ.get("CXX", "g++"))
if "COMPILEBENCH_TEST_CXX" not in os.environ and _REAL_CXX:  # the controller; its workers and children inherit both
    os.environ["COMPILEBENCH_TEST_CXX"] = _REAL_CXX
    os.environ["CXX"] = str(install(_CXX_CACHE, _REAL_CXX))

import pytest  # noqa: E402 (after the cache is set: imports below may pull in torch)
import yaml  # noqa: E402
from PIL import Image  # noqa: E402

from compilebench.fetch_image import fallback_image  # noqa: E402

_CXX_COUNTS = pytest.StashKey[dict]()

ROOT = Path(__file__).resolve().parents[1]
# Timing settings that keep tiny models quick. Validity is off (max_cv, max_halves_diff): it has tests of its own,
# and on 2 cores a parallel test run stalls a 1 ms call for 200 ms now and then; here the plumbing is tested.
QUICK = {
    "min_iters": 3,
    "min_time_s": 0.2,
    "max_time_s": 5.0,
    "warmup_iters": 1,
    "warmup_s": 0.0,
    "memory_iters": 1,
    "max_cv": 1e6,
    "max_halves_diff": 0,
    "replicates": 1,
    "cold_replicates": 0,
    "compile_cache": "shared",
    "budget_min": 0,
    "disturbed_cores": 0,
}
# budget_min 0: no blocks beyond `replicates`; disturbed_cores 0: the other xdist workers' trials do not count as
# disturbance (the tests of the adaptive loop and of disturbance set their own)
TOP_LEVEL = ("budget_min", "device")  # of what make_project takes, params.yaml's top-level keys


# The xdist groups (each runs whole on one worker), costliest first, in the order they are handed out (pyproject turns
# off xdist's reordering); the other tests follow, a few seconds each. The --durations of `make test`
# and `make test-long` (the groups marked `long`) say what each costs.
HAND_OUT_ORDER = (
    "bisect",  # three bisects of real rounds, each a dvc experiment of the pipeline
    "compared_project",  # builds the transformers 4.57.6 environment on a fresh clone
    "series_project",  # builds torch 2.0.1 on Python 3.10 (a CUDA build from PyPI), then three stacks in a series
    "test_reliability",
    "remote",
    "executors",
    "queue",
    "own_checkpoints",
    "postgres",  # PostgreSQL and an MLflow server on it, three invocations logging at once
    "adaptive-repro",
    "deploy",
    "dynamic-batch",
    "window",
    "trial-together",
    "test_bad_inputs",
    "cpu-variants",
    "detection",
    "trial-one-cell",
    "trial-frozen-and-default",
    "sigterm",
)


def xdist_group(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return None
    return marker.args[0] if marker.args else marker.kwargs.get("name")


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every collected test is checked, whatever the tier
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unslow = [item.nodeid for item in items if item.get_closest_marker("long") and not item.get_closest_marker("slow")]
    if unslow:  # `make test-fast` (-m "not slow") would run a long scenario
        raise pytest.UsageError(f"marked long but not slow: {', '.join(unslow)}")

    def rank(item: pytest.Item) -> int:
        group = xdist_group(item)
        return HAND_OUT_ORDER.index(group) if group in HAND_OUT_ORDER else len(HAND_OUT_ORDER)

    items.sort(key=rank)  # stable: each group's tests keep their order


def pytest_sessionfinish(session, exitstatus):
    controller = not hasattr(session.config, "workerinput")  # after every worker is done
    if controller and "CXX" in os.environ and Path(os.environ["CXX"]).parent == _CXX_CACHE:  # the cache was installed
        session.config.stash[_CXX_COUNTS] = counts(_CXX_CACHE)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _CXX_COUNTS in config.stash:
        found = config.stash[_CXX_COUNTS]
        compiler = Path(os.environ["CXX"]).name
        terminalreporter.write_line(
            f"compiler cache (tests/cxx_cache.py): {found['miss']} compiles by {compiler}, "
            f"{found['hit']} byte-identical ones reused"
        )


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def image_640x480() -> Image.Image:
    """The embedded fallback image: the published image's size, so processors give the published shapes."""
    return Image.open(io.BytesIO(fallback_image())).convert("RGB")


@pytest.fixture(scope="session")
def tiny_resnet(tmp_path_factory, image_640x480):
    """A tiny ResNet checkpoint (random weights, the published class) and the benchmark image, built once."""
    from compilebench.harness import models

    root = tmp_path_factory.mktemp("tiny-resnet")
    image = root / "image.jpg"
    image_640x480.save(image)
    return models.random_checkpoint("microsoft/resnet-50", "tiny", root), str(image)


def write_own_checkpoints(root: Path) -> dict[str, Path]:
    """Tiny checkpoints of three classes that are not among the doc's 12, one per task, as a user's fine-tune would
    be saved (`save_pretrained` of the model and its image processor): a Swin classifier, a YOLOS detector and a
    DPT segmenter. By folder name."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    # One block or layer each, and DPT without its auxiliary head: the class and its task are the point, and every
    # layer is compile time.
    built = {
        "swin-tiny-cls": (
            tf.SwinForImageClassification(
                tf.SwinConfig(
                    image_size=64, patch_size=4, embed_dim=16, depths=[1], num_heads=[2], window_size=4, num_labels=10
                )
            ),
            tf.ViTImageProcessor(size={"height": 64, "width": 64}),
        ),
        "yolos-tiny-det": (
            tf.YolosForObjectDetection(
                tf.YolosConfig(
                    hidden_size=32,
                    num_hidden_layers=1,
                    num_attention_heads=2,
                    intermediate_size=64,
                    image_size=[64, 96],
                    num_detection_tokens=10,
                    num_labels=5,
                )
            ),
            tf.YolosImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}),
        ),
        "dpt-tiny-seg": (
            tf.DPTForSemanticSegmentation(
                tf.DPTConfig(
                    hidden_size=16,
                    num_hidden_layers=1,
                    num_attention_heads=2,
                    intermediate_size=32,
                    image_size=64,
                    patch_size=16,
                    neck_hidden_sizes=[8],
                    reassemble_factors=[4],
                    fusion_hidden_size=8,
                    backbone_out_indices=[0],
                    use_auxiliary_head=False,
                    num_labels=6,
                )
            ),
            tf.DPTImageProcessor(size={"height": 64, "width": 64}),
        ),
    }
    folders = {}
    for name, (model, processor) in built.items():
        folders[name] = root / name
        model.save_pretrained(folders[name])
        processor.save_pretrained(folders[name])
    return folders


SECRETS = {
    "HF_TOKEN": "hf_SECRETtoken123",
    "AWS_SECRET_ACCESS_KEY": "awsSECRETkey456",
    "MLFLOW_TRACKING_PASSWORD": "pwSECRET789",
}
OTHER = "transformers-4.57.6"  # a real second stack: the same torch wheel, transformers 4.57.6 from disk


@pytest.fixture(scope="session")
def compared_project(tmp_path_factory):
    """The whole pipeline once, as a user runs it: a committed git repo in a folder whose name is unicode and long,
    `dvc repro` comparing the project's environment with transformers 4.57.6 (built with pip on first use), the tiny
    ResNet in two processes per environment (a cold one, then a warm one), secrets in the environment. Shared by
    test_pipeline and test_environments (one xdist group), which must not change it: they copy it to change it."""
    folder = tmp_path_factory.mktemp("compared-ünïcödé-" + "long" * 30)  # a user's path: unicode, a 140-byte name
    root = make_project(folder, ["microsoft/resnet-50"], replicates=2, cold_replicates=1, compile_cache="cold")
    set_params(root, compare=["current", OTHER])
    env = {**project_env(), **SECRETS}
    init_project(root, env)
    first = run_ok(["dvc", "repro"], root, env)
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    return root, env, first, rows


def run_ok(command: list[str], cwd: Path, env: dict, timeout: float = 1200) -> subprocess.CompletedProcess:
    """Run a command; fail the test with its output if it exits non-zero."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def init_project(root: Path, env: dict, commit: bool = True) -> None:
    """A project folder as a user starts one: a git repository with DVC in it, everything committed (`commit`)."""
    run_ok(["git", "init", "-q"], root, env)
    run_ok(["dvc", "init", "-q"], root, env)
    if commit:
        run_ok(["git", "add", "-A"], root, env)
        run_ok(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], root, env)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def project_env() -> dict:
    """The environment of a project command: this venv first, Hub offline, no outside MLflow store."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env["DVC_NO_ANALYTICS"] = "1"
    return env


def make_dry_run(*args: str) -> str:
    """What `make ARGS` would run in the project (`make -n`), continued lines joined."""
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *args], cwd=ROOT, env=project_env(), capture_output=True, text=True
    )
    return " ".join(done.stdout.replace("\\\n", " ").split())


def make_project(root: Path, models: list[str], **benchmark) -> Path:
    """A copy of the project on a tiny suite of `models`, eager + default, quick timing, offline image."""
    for name in ("dvc.yaml", ".dvcignore", ".gitignore", "requirements.txt", "constraints.txt"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "data" / "reference", root / "data" / "reference")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["suite"] = "smoke"
    params["suites"]["smoke"]["models"] = models
    chosen = {**QUICK, **benchmark}
    for key in TOP_LEVEL:  # keys of params.yaml's top level, given here beside benchmark's
        if key in chosen:
            params[key] = chosen.pop(key)
    params["benchmark"].update(chosen)
    params["paths"]["environments"] = str(ROOT / ".compilebench" / "environments")  # shared with the project
    params["image"]["url"] = f"http://127.0.0.1:{closed_port()}/000000039769.jpg"  # offline, deterministically
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def set_params(root: Path, **changes) -> None:
    """Change dotted keys of a project's params.yaml (`set_params(root, **{"benchmark.seed": 3})`)."""
    path = root / "params.yaml"
    params = yaml.safe_load(path.read_text())
    for dotted, value in changes.items():
        tree = params
        *parents, leaf = dotted.split(".")
        for key in parents:
            tree = tree.setdefault(key, {})
        tree[leaf] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False))


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 (SQLite in `folder` unless another backend store is given), stoppable and
    restartable on the same store; ended by the process group it was started in."""

    def __init__(self, folder: Path, backend: str = ""):
        self.folder, self.port, self.process = folder, closed_port(), None
        self.backend = backend or f"sqlite:///{folder}/server.db"
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        command = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--backend-store-uri",
            self.backend,
            "--artifacts-destination",
            str(self.folder / "artifacts"),
        ]
        self.process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.uri + "/health", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("mlflow server did not answer /health within 120 s")

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)  # the server and its workers: the group we started
        self.process.wait(timeout=60)


@contextmanager
def serve_files(files: dict[str, bytes]) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving `files` by path (404 otherwise); yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first), from /proc."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found
