"""Shared fixtures: the repo root, the default params, the embedded 640x480 test image."""

from __future__ import annotations

import http.server
import io
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from PIL import Image

from compilebench.fetch_image import fallback_image

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def image_640x480() -> Image.Image:
    """The embedded fallback image: the published image's size, so processors give the published shapes."""
    return Image.open(io.BytesIO(fallback_image())).convert("RGB")


def run_ok(command: list[str], cwd: Path, env: dict, timeout: float = 1200) -> subprocess.CompletedProcess:
    """Run a command; fail the test with its output if it exits non-zero."""
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


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


def make_project(root: Path, models: list[str], **benchmark) -> Path:
    """A copy of the project on a tiny suite of `models`, eager + default, quick timing, offline image."""
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "data" / "reference", root / "data" / "reference")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["suite"] = "smoke"
    params["suites"]["smoke"]["models"] = models
    # Sub-millisecond tiny models are noisy: validity (max_cv) has its own tests; here the plumbing is under test.
    quick = {"min_iters": 3, "min_time_s": 0.2, "max_time_s": 5.0, "warmup_iters": 1, "memory_iters": 1, "max_cv": 10.0}
    params["benchmark"].update({**quick, **benchmark})
    params["image"]["url"] = f"http://127.0.0.1:{closed_port()}/000000039769.jpg"  # offline, deterministically
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


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
