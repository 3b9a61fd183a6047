"""params.yaml against the schema: the shipped file loads; each kind of bad input fails naming the key, in-process."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from compilebench.config import ConfigError, check_compile_paths, load_config, stage_config
from compilebench.records.selection import Selection

BAD_PARAMS = [
    # (override as dotted key -> value, text the error must contain)
    ({"benchmark.min_iters": "ten"}, "benchmark.min_iters"),
    ({"benchmark.iterz": 3}, "iterz"),
    ({"suite": "paper-bs1-w2"}, "--window-min"),  # a hand-made window suite, removed: the way that replaced it
    ({"suite": "paper-bs1"}, "`suite: paper` with `suites.paper.batch_sizes: [1]`"),  # folded into `paper`
    ({"benchmark.device": "cuda"}, "`benchmark.device` is now `device`"),  # moved: named with its new place
    ({"benchmark.budget_min": 20}, "`benchmark.budget_min` is now `budget_min`"),
    ({"benchmark.malloc": "tcmalloc"}, "`benchmark.malloc` is now `settings.malloc`"),
    ({"benchmrk": {"min_iters": 3}}, "benchmrk"),  # a typo of a whole section
    ({"benchmark.min_iters": -5}, "benchmark.min_iters"),
    ({"benchmark.replicates": 0}, "benchmark.replicates"),
    ({"benchmark.cold_replicates": 4}, "benchmark.cold_replicates"),
    ({"device": "tpu"}, "`device` must be cpu, cuda or cuda:N"),
    ({"budget_min": -1}, "`budget_min` must be >= 0"),
    ({"benchmark.dtype": "float64"}, "benchmark.dtype"),
    ({"benchmark.max_time_s": 0.5}, "benchmark.max_time_s"),
    ({"benchmark.compile_cache": "lukewarm"}, "benchmark.compile_cache"),
    ({"settings.malloc": "mimalloc"}, "`settings.malloc` must be one of"),
    ({"settings.float32_matmul_precision": "low"}, "`settings.float32_matmul_precision` must be one of"),
    ({"settings.num_threads": -2}, "`settings.num_threads` must be >= 0"),
    ({"settings.cpu_isa": "avx"}, "`settings.cpu_isa` must be one of ('sse41', 'avx2', 'avx512') or null"),
    ({"suites.paper.models": ["doc", "microsoft/resnet-50"]}, "lists a model twice"),  # doc holds it already
    ({"runner.trial_timeout_s": 0}, "runner.trial_timeout_s"),
    ({"suite": "nope"}, "suite"),
    ({"suites.cpu.models": ["acme/not a model"]}, "neither a Hub id (owner/name), nor a local folder"),
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
    assert len(config.suites["paper"].models) == 12 == len(set(config.suites["paper"].models))  # `doc`: the 12
    assert {"cpu-full", "cpu-variants", "startup", "dynamic-batch"} <= set(config.suites)  # built in
    assert config.variants["aoti"].deploy == "aoti" and config.variants["serve-dynamic"].dynamic == "batch"
    assert config.suites["paper"].batch_sizes == [1, 4, 16]
    assert set(config.suites["paper"].variants) == {"eager", "default", "reduce-overhead", "max-autotune"}
    gpu = config.suites["gpu"]  # the shorter GPU suite: three tasks, batch 1 and 16, the doc's two modes
    assert gpu.batch_sizes == [1, 16] and set(gpu.variants) == {"eager", "default", "reduce-overhead"}
    assert config.environments["torch-2.14.1"].pins == {"torch": "2.14.1"}
    assert config.benchmark.replicates >= 3


def test_an_environment_of_settings_runs_with_them_over_the_top_level_ones(tmp_path, repo_root):
    """Two settings on one stack: the environment pins nothing, runs on `current`'s interpreter, and its processes
    take its settings over top-level `settings`; every other key of their timing is `benchmark`'s."""
    change = {
        "compare": ["current", "tf32"],
        "settings.huge_pages": True,
        "environments.tf32.settings": {"float32_matmul_precision": "high", "num_threads": 1},
    }
    config = load_config(_write(tmp_path, repo_root, change))
    own, base = config.timing("tf32"), config.timing()
    assert (own.float32_matmul_precision, own.num_threads, own.huge_pages) == ("high", 1, True)
    assert (base.float32_matmul_precision, base.num_threads, base.huge_pages) == ("highest", 0, True)
    assert replace(own, float32_matmul_precision="highest", num_threads=0) == base
    assert (base.min_time_s, base.device, base.together) == (config.benchmark.min_time_s, "cpu", True)
    selected = config.selection([], {"current": {"torch": "2.13.0"}, "tf32": {"torch": "2.13.0"}}, None)
    assert selected.to_dict()["environments"][1] == {
        "label": "tf32",
        "name": "tf32",
        "pins": {"torch": "2.13.0"},
        "settings": {"float32_matmul_precision": "high", "num_threads": 1},
        "stack": "current",
        "python": "",
    }
    assert selected.environments[0].settings == {} and selected.environments[0].stack == "current"
    assert Selection.from_dict(json.loads(json.dumps(selected.to_dict()))) == selected  # as load_models writes it


def test_dvc_set_changes_only_the_keys_lines_of_params_yaml(tmp_path, repo_root):
    """What `dvc exp run -S` runs on params.yaml (DVC's own apply_overrides) changes the lines of the keys it sets
    and no other: the file is kept in the form DVC's YAML writer gives it."""
    from dvc.utils.hydra import apply_overrides

    path = tmp_path / "params.yaml"
    before = (repo_root / "params.yaml").read_text()
    path.write_text(before)
    apply_overrides(
        path, ["compare=[current,torch-2.14.1]", "suite=gpu", "budget_min=20", "margin=0.1", "++benchmark.min_time_s=4"]
    )
    old, new = before.splitlines(), path.read_text().splitlines()
    changed = [line for line in new if line not in old]
    gone = [line for line in old if line not in new]
    assert [line.split("#")[0].strip() for line in changed] == [
        "suite: gpu",
        "- torch-2.14.1",
        "budget_min: 20",
        "min_time_s: 4",
    ]
    assert [line.split(":")[0] for line in gone] == ["suite", "budget_min"]
    assert len(new) == len(old) + 2 and load_config(path).budget_min == 20


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
