"""params.yaml against the schema: the shipped file loads; each kind of bad input fails naming the key."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compilebench.config import ConfigError, load_config

BAD_PARAMS = [
    # (override as dotted key -> value, text the error must contain)
    ({"benchmark.min_iters": "ten"}, "benchmark.min_iters"),
    ({"benchmark.iterz": 3}, "iterz"),
    ({"benchmark.min_iters": -5}, "benchmark.min_iters"),
    ({"benchmark.device": "tpu"}, "benchmark.device"),
    ({"benchmark.dtype": "float64"}, "benchmark.dtype"),
    ({"benchmark.max_time_s": 0.5}, "benchmark.max_time_s"),
    ({"suite": "nope"}, "suite"),
    ({"suites.cpu.models": ["acme/not-a-model"]}, "acme/not-a-model"),
    ({"suites.cpu.models": []}, "suites.cpu.models"),
    ({"suites.cpu.batch_sizes": [0]}, "suites.cpu.batch_sizes"),
    ({"suites.cpu.batch_sizes": []}, "suites.cpu.batch_sizes"),
    ({"suites.cpu.variants": ["default"]}, "eager"),
    ({"suites.cpu.variants": ["eager", "turbo"]}, "turbo"),
    ({"suites.cpu.scale": "huge"}, "suites.cpu.scale"),
    ({"variants.default.mode": "ludicrous"}, "variants.default.mode"),
    ({"variants.default.inductor": {"no_such_option": True}}, "no_such_option"),
    ({"variants.default.compile": False}, "variants.default.compile"),
    ({"image.url": "ftp://example.org/x.jpg"}, "image.url"),
    ({"image.sha256": "abc"}, "image.sha256"),
    ({"image.max_bytes": 0}, "image.max_bytes"),
    ({"models.weights": "pretrained"}, "models.weights"),
    ({"paths.results": ""}, "paths.results"),
    ({"plot.dpi": "high"}, "plot.dpi"),
]


def _set(tree: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[leaf] = value


def _write(tmp_path: Path, repo_root: Path, change: dict) -> Path:
    params = yaml.safe_load((repo_root / "params.yaml").read_text())
    for key, value in change.items():
        _set(params, key, value)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_shipped_params_load(repo_root):
    config = load_config(repo_root / "params.yaml")
    assert config.suite == "cpu"
    assert config.selected.variants[0] == "eager"
    assert config.variants["freezing"].inductor == {"freezing": True}
    assert len(config.suites["paper"].models) == 12
    assert config.suites["paper"].batch_sizes == [1, 4, 16]
    assert set(config.suites["paper"].variants) == {"eager", "default", "reduce-overhead", "max-autotune"}
    cpu_tasks = {m.split("/")[0] for m in config.suites["cpu"].models}
    assert cpu_tasks  # the default suite names real registered models (checked by load_config)


@pytest.mark.parametrize(("change", "needle"), BAD_PARAMS, ids=[next(iter(c)) + "-" + n for c, n in BAD_PARAMS])
def test_bad_params_fail_naming_the_key(tmp_path, repo_root, change, needle):
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, repo_root, change))
    assert needle in str(error.value)


def test_not_yaml(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("suite: [unclosed\n")
    with pytest.raises(ConfigError, match="YAML"):
        load_config(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_overrides_as_dvc_exp_would(repo_root):
    config = load_config(repo_root / "params.yaml", ["suite=paper", "benchmark.min_iters=50"])
    assert config.suite == "paper" and config.benchmark.min_iters == 50


@pytest.mark.parametrize("stage", ["fetch_image", "load_models", "benchmark", "aggregate", "plot"])
def test_stage_exits_nonzero_on_bad_params_and_writes_nothing(tmp_path, repo_root, stage):
    _write(tmp_path, repo_root, {"benchmark.min_iters": -1})
    done = subprocess.run(
        [sys.executable, "-m", f"compilebench.{stage}"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "benchmark.min_iters" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]
