"""Torch releases named as torch-X.Y.Z: resolved with the companions they need, as a series; a series and a bisect
each one make command."""

import pytest
import yaml
from conftest import ROOT, make_dry_run

from compilebench.config import ConfigError, load_config, releases

PROJECT = ("5.23.0", "3.11.7")  # the project's transformers and Python


def test_releases_the_project_transformers_supports_change_torch_alone():
    resolved = releases.resolve_series(["torch-2.7.1", "torch-2.15.0"], {"current"}, *PROJECT)
    assert resolved == {
        "torch-2.7.1": releases.Release({"torch": "2.7.1"}),
        "torch-2.15.0": releases.Release({"torch": "2.15.0"}),
    }


def test_older_releases_share_the_companions_of_the_oldest():
    resolved = releases.resolve_series(["torch-2.0.1", "torch-2.3.1", "torch-2.9.1"], set(), *PROJECT)
    old, older, new = resolved["torch-2.3.1"], resolved["torch-2.0.1"], resolved["torch-2.9.1"]
    assert older.pins == {"torch": "2.0.1", "transformers": "4.49.0", "numpy": "1.26.4", "setuptools": "75.8.0"}
    assert old.pins == {**older.pins, "torch": "2.3.1"} and old.python == older.python == "3.10"
    assert new == releases.Release({"torch": "2.9.1"})  # one step changes companions, the rest torch alone


def test_the_oldest_decides_which_companions():
    resolved = releases.resolve_series(["torch-2.4.1", "torch-2.5.1"], set(), *PROJECT)
    assert resolved["torch-2.4.1"].pins == {"torch": "2.4.1", "transformers": "5.14.1"}
    assert resolved["torch-2.5.1"].python == ""  # Python 3.11 runs torch 2.4's compile: the project's


def test_a_defined_environment_is_not_resolved():
    assert releases.resolve_series(["torch-2.14.1"], {"torch-2.14.1"}, *PROJECT) == {}
    assert releases.resolve_series(["huge-pages"], set(), *PROJECT) == {}


@pytest.mark.parametrize(
    ("transformers", "torch", "runs"),
    [
        ("4.49.0", "2.0.1", True),
        ("4.50.0", "2.0.1", False),
        ("5.23.0", "2.6.0", False),
        ("5.23.0", "2.7.1", True),
        ("5.14.1", "2.4.0", True),
        ("5.15.0", "2.4.1", False),
    ],
)
def test_transformers_torch_floors(transformers, torch, runs):
    assert releases.supports(transformers, torch) is runs


def test_compare_names_releases_without_defining_them():
    config = load_config(ROOT / "params.yaml", overrides=["compare=[torch-2.0.1,torch-2.15.0]"])
    assert config.environments["torch-2.0.1"].python == "3.10"
    assert config.environments["torch-2.0.1"].pins["torch"] == "2.0.1"
    assert config.environments["torch-2.15.0"].pins == {"torch": "2.15.0"}


def test_a_name_that_is_no_release_is_refused_with_what_is_allowed():
    with pytest.raises(ConfigError, match=r"unknown environment 'torch-two'.*torch-X\.Y\.Z"):
        load_config(ROOT / "params.yaml", overrides=["compare=[torch-two]"])


def test_a_release_older_than_any_transformers_is_refused():
    with pytest.raises(ConfigError, match=r"torch 1\.13\.1: older than any transformers"):
        load_config(ROOT / "params.yaml", overrides=["compare=[torch-1.13.1,torch-2.6.0]"])


def test_an_environment_python_is_checked(tmp_path):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for environment, message in (
        ({"pins": {"torch": "2.0.1"}, "python": "ten"}, "must be a Python version"),
        ({"settings": {"malloc": "tcmalloc"}, "python": "3.10"}, "needs pins of its own"),
    ):
        params["environments"]["old"] = environment
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        with pytest.raises(ConfigError, match=rf"environments.old.python` {message}"):
            load_config(tmp_path / "params.yaml")


def test_a_series_of_releases_is_one_make_command():
    """`make series TORCH=...` asks DVC for the releases as one series (the command line, not run)."""
    line = make_dry_run("series", "TORCH=2.0.1 2.6.0 2.15.0")
    assert "-S 'compare=[torch-2.0.1,torch-2.6.0,torch-2.15.0]'" in line and "benchmark.seed" not in line
    again = make_dry_run("series", "TORCH=2.0.1 2.15.0", "SEED=1")
    assert "-S 'compare=[torch-2.0.1,torch-2.15.0]' -S benchmark.seed=1" in again


def test_bisect_is_one_make_command():
    line = make_dry_run("bisect", "TORCH=2.0.1 2.15.0", "SEED=1")
    assert "python -m compilebench.bisect --torch 2.0.1 2.15.0 --seed 1" in line
