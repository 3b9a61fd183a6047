"""The README's commands, as a user types them after the two set-up commands: each resolves to something this project
has. A `make` verb is a target of the Makefile; `python -m` a module that imports; `python FILE` a file; `python -c`
code that compiles; `dvc exp run -S` and `--set` overrides valid against params.yaml's schema (a typo in a key or a
suite fails here, not in a user's terminal); `dvc`, `mlflow` and `ray` programs of the environment; `less` a file the
pipeline writes. A program the README shows that this test does not know fails it: teach the test, or drop the
command."""

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest

from compilebench.config import ConfigError, load_config

BIN = Path(sys.executable).parent


def readme_commands(text: str) -> list[str]:
    """Every command of the README's bash blocks: comments dropped, continued lines joined."""
    commands, pending = [], ""
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).rstrip()
            if not line.strip():
                continue
            pending += line.rstrip("\\").strip() + " "
            if not line.endswith("\\"):
                commands.append(pending.strip())
                pending = ""
    return commands


def overrides(words: list[str], flag: str) -> list[str]:
    """The values given after `flag` (`-S` or `--set`), as OmegaConf dotlist items (DVC's `+key` adds a key)."""
    return [words[i + 1].lstrip("+") for i, word in enumerate(words[:-1]) if word == flag]


def check(words: list[str], root: Path, targets: set[str]) -> None:
    """One command (its words, assignments before it dropped) resolves, or the assertion names what does not."""
    program, rest = words[0], words[1:]
    if program == "make":
        assert rest[0] in targets, f"`make {rest[0]}`: no such target in the Makefile"
    elif program == "source":
        assert rest == [".venv/bin/activate"] and (BIN / "activate").exists()
    elif program == "python":
        if rest[0] == "-m":
            assert importlib.util.find_spec(rest[1]) is not None, f"`python -m {rest[1]}`: no such module"
            sets = overrides(rest, "--set")
            if sets:
                load_config(root / "params.yaml", sets)
        elif rest[0] == "-c":
            compile(rest[1], "<README>", "exec")
        else:
            assert (root / rest[0]).exists(), f"`python {rest[0]}`: no such file"
    elif program == "dvc":
        assert (BIN / "dvc").exists()
        sets = overrides(rest, "-S")
        if rest[:2] == ["exp", "run"] and not any("./mine" in item for item in sets):  # the user's own folders
            try:
                load_config(root / "params.yaml", sets)
            except ConfigError as error:
                pytest.fail(f"`dvc {' '.join(rest)}`: {error}")
    elif program == "pip":
        assert rest[:2] == ["install", "-e"] and "ray" in (root / "pyproject.toml").read_text()
    elif program == "less":
        paths = load_config(root / "params.yaml").paths
        assert rest and rest[0] in {str(value) for value in vars(paths).values()}, (
            f"`less {' '.join(rest)}`: not a file the pipeline writes (params.yaml's paths)"
        )
    elif program in ("ray", "mlflow"):
        assert (BIN / program).exists(), f"`{program}` is not in the environment"
    elif program != "cd":
        pytest.fail(f"the README shows `{' '.join(words)}`, a program this test does not know")


def test_every_command_the_readme_shows_resolves(repo_root):
    text = (repo_root / "README.md").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", (repo_root / "Makefile").read_text(), re.M))
    commands = readme_commands(text)
    assert len(commands) >= 20 and "make run" in commands and "make compare B=torch-2.14.1" in commands
    for command in commands:
        for part in command.split("&&"):
            words = shlex.split(part)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # an assignment before the command
                words = words[1:]
            check(words, repo_root, targets)


def test_a_readme_command_that_drifted_fails_here(repo_root):
    targets = set(re.findall(r"^([a-z][a-z-]*):", (repo_root / "Makefile").read_text(), re.M))
    for drifted in (
        "make compar B=x",
        "dvc exp run -S suite=no-such-suite",
        "python -m compilebench.nothing",
        "less data/report/summary.md",
    ):
        with pytest.raises((AssertionError, pytest.fail.Exception, ConfigError)):
            check(shlex.split(drifted), repo_root, targets)
