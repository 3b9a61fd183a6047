"""params.yaml against the schema: the shipped file loads; each kind of bad input fails naming the key, in-process."""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from compilebench.analysis import plan
from compilebench.config import ConfigError, check_compile_paths, load_config, stage_config

BAD_PARAMS = [
    # (override as dotted key -> value, text the error must contain)
    ({"benchmark.min_iters": "ten"}, "benchmark.min_iters"),
    ({"benchmark.iterz": 3}, "iterz"),
    ({"suite": "paper-bs1-w2"}, "--window-min"),  # a hand-made window suite, removed: the way that replaced it
    ({"benchmrk": {"min_iters": 3}}, "benchmrk"),  # a typo of a whole section
    ({"benchmark.min_iters": -5}, "benchmark.min_iters"),
    ({"benchmark.replicates": 0}, "benchmark.replicates"),
    ({"benchmark.cold_replicates": 4}, "benchmark.cold_replicates"),
    ({"benchmark.device": "tpu"}, "benchmark.device"),
    ({"benchmark.dtype": "float64"}, "benchmark.dtype"),
    ({"benchmark.max_time_s": 0.5}, "benchmark.max_time_s"),
    ({"benchmark.compile_cache": "lukewarm"}, "benchmark.compile_cache"),
    ({"benchmark.malloc": "mimalloc"}, "benchmark.malloc"),
    ({"benchmark.float32_matmul_precision": "low"}, "float32_matmul_precision"),
    ({"runner.trial_timeout_s": 0}, "runner.trial_timeout_s"),
    ({"suite": "nope"}, "suite"),
    ({"suites.cpu.models": ["acme/not a model"]}, "neither a Hub id (owner/name) nor a local folder"),
    ({"suites.smoke.models": ["./my-swin"]}, "has no card, and `scale: tiny`"),
    ({"suites.cpu.models": []}, "suites.cpu.models"),
    ({"suites.cpu.batch_sizes": [0]}, "suites.cpu.batch_sizes"),
    ({"suites.cpu.batch_sizes": []}, "suites.cpu.batch_sizes"),
    ({"suites.cpu.variants": ["default"]}, "eager"),
    ({"suites.cpu.variants": ["eager", "turbo"]}, "turbo"),
    ({"suites.cpu.scale": "huge"}, "suites.cpu.scale"),
    ({"suites.cpu.cells": "some"}, "suites.cpu.cells"),
    ({"variants.default.mode": "ludicrous"}, "variants.default.mode"),
    ({"variants.default.compile": False}, "variants.default.compile"),
    ({"variants.default.dynamic": "sometimes"}, "variants.default.dynamic"),
    ({"variants.default.dynamic": 3}, "variants.default.dynamic"),
    ({"variants.aoti.serve": True}, "variants.aoti.serve"),
    ({"variants.eager.serve": True}, "variants.eager.serve"),
    ({"image.url": "ftp://example.org/x.jpg"}, "image.url"),
    ({"image.sha256": "abc"}, "image.sha256"),
    ({"image.max_bytes": 0}, "image.max_bytes"),
    ({"models.weights": "pretrained"}, "models.weights"),
    ({"paths.results": ""}, "paths.results"),
    ({"plot.dpi": "high"}, "plot.dpi"),
    ({"compare": ["current", "torch-9.9"]}, "torch-9.9"),
    ({"compare": []}, "compare"),
    ({"environments.current.pins": {"torch": "2.14.1"}}, "environments.current"),
    ({"environments.bad.pins": {}}, "`environments.bad` must pin at least one package"),
    ({"environments.bad.settings": {"malloc": "mimalloc"}}, "`environments.bad.settings.malloc` must be one of"),
    ({"environments.bad.settings": {"tf32": True}}, "environments.bad.settings.tf32"),
    ({"environments.bad.settings": {"num_threads": -1}}, "`environments.bad.settings.num_threads` must be >= 0"),
    ({"environments.current.settings": {"malloc": "tcmalloc"}}, "it takes no settings"),
    ({"environments.bad.pins": {"torch": ">=2"}}, "environments.bad.pins.torch"),
    ({"environments.bad.pins": {"not a package!": "1.0"}}, "not a package!"),
    (
        {"compare": ["current", "current", "current_2"], "environments.current_2.pins": {"torch": "2.14.1"}},
        "would share the metric key 'current_2'",
    ),  # the A/A label current#2 and a name of the user's
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
    assert config.suite == "cpu" and config.compare == ["current"]
    assert config.selected.variants[0] == "eager"
    assert config.variants["freezing"].inductor == {"freezing": True}
    assert len(config.suites["paper"].models) == 12 and len(config.suites["paper-bs1"].models) == 12
    assert config.suites["paper"].batch_sizes == [1, 4, 16]
    assert set(config.suites["paper"].variants) == {"eager", "default", "reduce-overhead", "max-autotune"}
    gpu = config.suites["gpu"]  # the shorter GPU suite: three tasks, batch 1 and 16, the doc's two modes
    assert gpu.batch_sizes == [1, 16] and set(gpu.variants) == {"eager", "default", "reduce-overhead"}
    assert config.environments["torch-2.14.1"].pins == {"torch": "2.14.1"}
    assert config.benchmark.replicates >= 3


def test_an_environment_of_settings_is_benchmark_with_them_in_place(tmp_path, repo_root):
    """Two settings on one stack: the environment pins nothing, runs on `current`'s interpreter, and its processes
    take its settings where `benchmark` has its own; every other key stays `benchmark`'s."""
    change = {"compare": ["current", "tf32"], "environments.tf32.settings": {"float32_matmul_precision": "high",
                                                                          "num_threads": 1}}  # fmt: skip
    config = load_config(_write(tmp_path, repo_root, change))
    own = config.benchmark_of("tf32")
    assert (own.float32_matmul_precision, own.num_threads) == ("high", 1)
    assert (config.benchmark.float32_matmul_precision, config.benchmark.num_threads) == ("highest", 0)
    assert replace(own, float32_matmul_precision="highest", num_threads=0) == config.benchmark
    selected = plan.selection(config, [], {"current": {"torch": "2.13.0"}, "tf32": {"torch": "2.13.0"}}, None)
    assert selected["environments"][1] == {"label": "tf32", "name": "tf32", "pins": {"torch": "2.13.0"},
                                           "settings": {"float32_matmul_precision": "high", "num_threads": 1},
                                           "stack": "current"}  # fmt: skip
    assert selected["environments"][0]["settings"] == {} and selected["environments"][0]["stack"] == "current"


@pytest.mark.parametrize(("change", "needle"), BAD_PARAMS, ids=[next(iter(c)) + "-" + n for c, n in BAD_PARAMS])
def test_bad_params_fail_naming_the_key(tmp_path, repo_root, change, needle):
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, repo_root, change))
    assert needle in str(error.value)


def test_unknown_inductor_option_fails_where_torch_is_imported(tmp_path, repo_root):
    config = load_config(_write(tmp_path, repo_root, {"variants.freezing.inductor": {"no_such_option": True}}))
    with pytest.raises(ConfigError, match="no_such_option"):
        config.check_selected_variants()


def test_a_project_path_with_a_space_is_refused_before_any_compile(tmp_path, repo_root, monkeypatch, caplog):
    """Inductor hands the project's and the venv's paths to g++ unquoted: a stage that compiles refuses such a path
    with exit 2 and why, where every compiled run would otherwise end compile_error."""
    spaced = tmp_path / "my project"
    spaced.mkdir()
    (spaced / "params.yaml").write_text((repo_root / "params.yaml").read_text())
    monkeypatch.chdir(spaced)
    assert stage_config().suite == "cpu"  # a stage that does not compile runs there
    with pytest.raises(SystemExit) as exited:
        stage_config(compiles=True)
    assert exited.value.code == 2 and "contains a space" in caplog.text and "my project" in caplog.text
    check_compile_paths(tmp_path / "plain")  # no space: nothing to say


def test_not_yaml_and_not_utf8(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("suite: [unclosed\n")
    with pytest.raises(ConfigError, match="YAML"):
        load_config(path)
    path.write_bytes("suite: cpu  # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"params\.yaml: not UTF-8"):
        load_config(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_overrides_as_dvc_exp_would(repo_root):
    config = load_config(
        repo_root / "params.yaml", ["suite=paper", "benchmark.min_iters=50", "compare=[current,current]"]
    )
    assert config.suite == "paper" and config.benchmark.min_iters == 50 and config.compare == ["current", "current"]


def test_config_loads_without_importing_torch(repo_root):
    code = (
        "import sys\nfrom compilebench.config import load_config\n"
        "load_config('params.yaml')\nprint('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_dvc_exp_run_set_rewrites_only_the_key_it_sets(tmp_path, repo_root):
    """`dvc exp run -S 'compare=[current,torch-2.14.1]'` (`make compare`) rewrites params.yaml through DVC's YAML
    round trip: params.yaml is kept in the form that round trip writes, so the rewrite changes the set key's lines
    and nothing else (no comment moved, no null, quote or list restyled)."""
    import difflib

    from dvc.utils.serialize import modify_yaml

    params = tmp_path / "params.yaml"
    shipped = (repo_root / "params.yaml").read_text()
    params.write_text(shipped)
    with modify_yaml(params) as data:
        data["compare"] = ["current", "torch-2.14.1"]
    changed = [line for line in difflib.unified_diff(shipped.splitlines(), params.read_text().splitlines(), n=0)
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]  # fmt: skip
    assert len(changed) == 4, changed  # the compare line out and in, its two items in
    assert all(line[1:].startswith(("compare:", "- current", "- torch-2.14.1")) for line in changed), changed
    assert yaml.safe_load(params.read_text())["compare"] == ["current", "torch-2.14.1"]
