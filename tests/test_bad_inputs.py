"""Malformed inputs through the real stage commands: each a clear error naming what was wrong, a non-zero exit,
and nothing written to the results or the MLflow store."""

import subprocess
import sys

import pytest
import yaml
from conftest import closed_port, make_project, project_env, serve_files

from compilebench.fetch_image import fallback_image

JPEG = fallback_image()
FILES = {"/cats.jpg": JPEG, "/text.jpg": b"<html>not an image</html>", "/truncated.jpg": JPEG[:5000]}


@pytest.fixture(scope="module")
def server():
    with serve_files(FILES) as url:
        yield url


# (stage, params changes as dotted keys, extra environment, text the error must contain)
CASES = [
    ("fetch_image", {"benchmark.min_iters": "ten"}, {}, "benchmark.min_iters"),
    ("load_models", {"benchmark.iterz": 3}, {}, "iterz"),
    ("load_models", {"suites.smoke.models": ["acme/not-a-model"]}, {}, "acme/not-a-model"),
    ("load_models", {"suites.smoke.models": []}, {}, "suites.smoke.models"),
    ("benchmark", {"suites.smoke.batch_sizes": [0]}, {}, "batch_sizes"),
    ("benchmark", {"benchmark.min_iters": -5}, {}, "benchmark.min_iters"),
    ("benchmark", {"benchmark.max_time_s": -1.0}, {}, "benchmark.max_time_s"),
    ("benchmark", {"suites.smoke.variants": ["eager", "turbo"]}, {}, "turbo"),
    ("benchmark", {"variants.default.mode": "ludicrous"}, {}, "variants.default.mode"),
    ("benchmark", {"variants.default.inductor": {"no_such_option": True}}, {}, "no_such_option"),
    ("benchmark", {"benchmark.device": "tpu"}, {}, "benchmark.device"),
    ("benchmark", {"benchmark.dtype": "float64"}, {}, "benchmark.dtype"),
    ("benchmark", {"benchmark.compile_cache": "lukewarm"}, {}, "benchmark.compile_cache"),
    ("load_models", {"models.weights": "pretrained"}, {}, "models.weights"),
    ("aggregate", {"suite": "nope"}, {}, "suite"),
    ("fetch_image", {"image.url": "ftp://example.org/x.jpg"}, {}, "image.url"),
    ("fetch_image", {"image.sha256": "abc"}, {}, "image.sha256"),
    ("fetch_image", {"image.url": "{server}/cats.jpg", "image.sha256": "0" * 64}, {}, "does not match"),
    ("fetch_image", {"image.url": "{server}/text.jpg"}, {}, "not a readable image"),
    ("fetch_image", {"image.url": "{server}/truncated.jpg"}, {}, "not a readable image"),
    ("fetch_image", {"image.url": "{server}/cats.jpg", "image.max_bytes": 1000}, {}, "max_bytes"),
    ("fetch_image", {"image.url": "{server}/cats.jpg", "image.max_pixels": 1000}, {}, "max_pixels"),
    ("fetch_image", {"image.url": "{server}/missing.jpg"}, {}, "HTTP 404"),
    ("fetch_image", {"image.url": "{closed}", "image.allow_fallback": False}, {}, "allow_fallback is false"),
    ("load_models", {"models.weights": "hub"}, {}, "models.weights is 'hub'"),
    ("benchmark", {"paths.tracking_uri": "sqlite:///{root}/params.yaml/store/mlflow.db"}, {}, "is not a directory"),
    ("benchmark", {}, {"MLFLOW_TRACKING_URI": "ftp://host/store"}, "unknown scheme"),
    ("benchmark", {}, {}, "manifest.json"),  # run before load_models: no checkpoints yet
]


def _set(tree, dotted, value):
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[leaf] = value


@pytest.mark.parametrize(("stage", "changes", "extra_env", "needle"), CASES, ids=[f"{c[0]}-{c[3]}" for c in CASES])
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, server, stage, changes, extra_env, needle):
    root = make_project(tmp_path, ["microsoft/resnet-50"])
    if changes.get("models.weights") == "hub":
        changes = {**changes, "suites.smoke.scale": "full"}
    params = yaml.safe_load((root / "params.yaml").read_text())
    for key, value in changes.items():
        if isinstance(value, str):
            value = value.replace("{server}", server).replace("{closed}", f"http://127.0.0.1:{closed_port()}/x.jpg")
            value = value.replace("{root}", str(root))
        _set(params, key, value)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**project_env(), "HF_HOME": str(tmp_path / "empty-hf-home"), **extra_env}
    done = subprocess.run([sys.executable, "-m", f"compilebench.{stage}"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode != 0
    assert needle in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr  # a message, not a crash
    written = {p.relative_to(root).as_posix() for p in (root / "data").rglob("*") if p.is_file()}
    assert written == {"data/reference/published.csv"}  # no image, checkpoint, result or manifest
    assert not (root / "mlruns").exists()  # nothing in the MLflow store


def test_at_least_twenty_malformed_inputs():
    assert len(CASES) >= 20


def test_no_remote_code_and_safetensors_only(repo_root):
    source = "\n".join(p.read_text() for p in (repo_root / "src").rglob("*.py"))
    assert "trust_remote_code" not in source
    assert "use_safetensors=True" in source and '"*.bin"' not in source
