"""Every command the README and docs/*.md show, run as far as it goes without measuring: a `make` line through
`make -n` (its target exists, its recipe's commands checked in turn), a `dvc exp run -S` line through DVC's own
override parser on a copy of params.yaml and then the project's config, a `python -m compilebench.…` or script line
against its own `--help` (every flag it uses exists) and its `--set` values against the config, the runner's lines
against a runner.pyz built from this tree. A moved key or a renamed flag fails here, not on a user's machine.

Fenced `bash` blocks are checked whole, and so is a command shown inline in the prose; one with placeholders (NAME,
DIR, …) is checked for its target, module or script and its flags. docs/findings.md is the log of what ran, not a
manual, and is left out. And CI's script runs both tiers of the suite, `make test` and `make test-long`."""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from conftest import ROOT, make_dry_run, project_env

DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "findings.md")]
FENCE = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`((?:make|dvc exp run|python -m compilebench|python benchmarks/)[^`]*)`")
PLACEHOLDER = re.compile(r"\b[A-Z]{3,}\b|…|\.\.\.|<")  # NAME, DIR, KEY=VALUE, RECORD, <time>: an inline template
SEPARATORS = {";", "&&", "||", "|", "(", ")", "&"}
# Commands that do not run in this project or need what a test cannot have, with why; anything else unknown fails.
NOT_CHECKED = {
    "cd": "a folder change",
    "ray": "Ray's own command (optional extra)",
    "pip download": "needs the network",
}


def _shown(path: Path) -> list[tuple[str, str, bool]]:
    """(where, command, whole) for each command `path` shows: fenced lines whole, inline spans for their names."""
    text = path.read_text()
    found = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                found.append((path.name, line.strip(), True))
    prose = FENCE.sub("", text)
    found += [(path.name, span, not PLACEHOLDER.search(span)) for span in INLINE.findall(prose)]
    return found


COMMANDS = [entry for path in DOCS for entry in _shown(path)]


def _segments(line: str) -> list[list[str]]:
    """A shell line's simple commands as token lists, leading VAR=value assignments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segments, current = [], []
    for token in lexer:
        if token in SEPARATORS:
            segments.append(current)
            current = []
        elif not current and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token):
            continue
        else:
            current.append(token)
    return [segment for segment in [*segments, current] if segment]


@cache
def _help(*program: str) -> str:
    done = subprocess.run(
        [*program, "--help"], cwd=ROOT, env=project_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{' '.join(program)} --help exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


@cache
def _runner(folder: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "compilebench.runner", "build", folder], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return str(Path(folder) / "runner.pyz")


@cache
def _config_paths():
    from compilebench.config import load_config

    return load_config(ROOT / "params.yaml").paths


@cache
def _make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([a-z][a-z0-9-]*):", text, re.MULTILINE))


def _flags_known(tokens: list[str], helptext: str) -> list[str]:
    flags = [token.split("=", 1)[0] for token in tokens if token.startswith("--")]
    return [f"flag {flag} is not in its --help" for flag in flags if flag not in helptext]


def _values(tokens: list[str], option: str) -> list[str]:
    return [tokens[i + 1] for i, token in enumerate(tokens[:-1]) if token == option]


def _config_problems(params: Path, overrides: list[str]) -> list[str]:
    from compilebench.config import ConfigError, load_config

    try:
        load_config(params, overrides).check_selected_variants()
    except ConfigError as error:
        return [f"the config refuses it: {error}"]
    return []


def _dvc_problems(tokens: list[str], scratch: Path) -> list[str]:
    """`dvc exp run -S …`: DVC applies the overrides to a copy of params.yaml as it would, then the config reads it."""
    from dvc.utils.hydra import apply_overrides

    overrides = _values(tokens, "-S") + _values(tokens, "--set-param")
    params = scratch / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    if overrides:
        try:
            apply_overrides(str(params), overrides)
        except Exception as error:  # DVC's own refusal, whatever its type
            return [f"DVC refuses {overrides}: {error}"]
    return _config_problems(params, [])


def _python_problems(tokens: list[str], whole: bool, scratch: Path) -> list[str]:
    if tokens[1] == "-m":
        module = tokens[2]
        if not module.startswith("compilebench"):
            return [f"module {module} is not the project's"]
        if importlib.util.find_spec(module) is None:
            return [f"no module {module}"]
        problems = _flags_known(tokens[3:], _help(sys.executable, "-m", module))
        if whole and _values(tokens, "--set"):
            problems += _config_problems(ROOT / "params.yaml", _values(tokens, "--set"))
        return problems
    script = tokens[1]
    if script == "runner.pyz":  # run where an exported plan was carried: the runner built from this tree
        return _flags_known(tokens[2:], _help(sys.executable, _runner(str(scratch.parent / "runner"))))
    if not (ROOT / script).is_file():
        return [f"script {script} does not exist"]
    return _flags_known(tokens[2:], _help(sys.executable, script))


def _make_problems(tokens: list[str], whole: bool, scratch: Path) -> list[str]:
    target = next((token for token in tokens[1:] if "=" not in token and not token.startswith("-")), "run")
    if target not in _make_targets():
        return [f"make has no target {target!r}"]
    if not whole:
        return []
    done = subprocess.run(["make", "-n", *tokens[1:]], cwd=ROOT, env=project_env(), capture_output=True, text=True)
    if done.returncode != 0:
        return [f"make -n exited {done.returncode}: {done.stderr.strip()[-500:]}"]
    problems = []
    for line in done.stdout.replace("\\\n", " ").splitlines():
        for segment in _segments(line):
            if segment[0] == "dvc" or (segment[:2] == ["python", "-m"] and segment[2].startswith("compilebench")):
                problems += [f"its recipe's `{' '.join(segment)}`: {p}" for p in _problems(segment, True, scratch)]
    return problems


def _problems(tokens: list[str], whole: bool, scratch: Path) -> list[str]:
    head = tokens[0]
    if head == "make":
        return _make_problems(tokens, whole, scratch)
    if head == "dvc":
        if tokens[1:3] != ["exp", "run"]:
            return _flags_known(tokens, _help("dvc", *tokens[1:2]))
        return _dvc_problems(tokens, scratch) if whole else _flags_known(tokens[3:], _help("dvc", "exp", "run"))
    if head in ("python", "python3"):
        return _python_problems(tokens, whole, scratch)
    if head == "less":
        written = {str(value) for value in vars(_config_paths()).values()}
        return (
            [] if tokens[1:] and tokens[1] in written else [f"{' '.join(tokens)}: not a file params.yaml's paths name"]
        )
    if head == "source":
        return [] if (ROOT / tokens[1]).is_file() else [f"{tokens[1]} does not exist"]
    if head == "pip" and tokens[1] == "install":
        extras = re.findall(r"\.\[([a-z,]+)\]", " ".join(tokens))
        declared = (ROOT / "pyproject.toml").read_text()
        return [
            f"pyproject.toml has no extra {e!r}"
            for group in extras
            for e in group.split(",")
            if f"\n{e} =" not in declared
        ]
    if head in NOT_CHECKED or " ".join(tokens[:2]) in NOT_CHECKED:
        return []
    return [f"no check knows `{head}`: add one to tests/test_documented_commands.py"]


@pytest.mark.parametrize("where, command, whole", COMMANDS, ids=[f"{w}: {c[:60]}" for w, c, _ in COMMANDS])
def test_a_documented_command_runs_as_typed(where, command, whole, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    segments = _segments(command) if whole else [shlex.split(command)]  # inline: `a|b` is a choice, not a pipe
    problems = [problem for segment in segments for problem in _problems(segment, whole, scratch)]
    assert problems == [], f"{where}: `{command}`: " + "; ".join(problems)


def test_the_docs_show_commands_and_a_moved_key_is_caught(tmp_path):
    assert len(COMMANDS) > 60 and {where for where, _, _ in COMMANDS} >= {"README.md", "gpu.md", "comparing.md"}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (said,) = _problems(_segments("dvc exp run -S suite=gpu -S benchmark.device=cuda")[0], True, scratch)
    assert "DVC refuses" in said or "is now `device`" in said
    (said,) = _problems(
        _segments("python -m compilebench.benchmark --export x --set benchmark.budget_min=45")[0], True, scratch
    )
    assert "`benchmark.budget_min` is now `budget_min`" in said
    assert _problems(["make", "no-such-target"], True, scratch) == ["make has no target 'no-such-target'"]
    for drifted in (
        "dvc exp run -S suite=no-such-suite",
        "python -m compilebench.nothing",
        "less data/summary.md",
        "make compare B=no-such-environment",
        "python -m compilebench.bisect --no-such-flag",
    ):
        assert _problems(_segments(drifted)[0], True, scratch), drifted


def test_ci_runs_make_test_and_the_long_scenarios_it_leaves_out():
    """`make test` ends within 20 minutes by leaving out the tests marked `long`; CI runs those too, so no test is
    out of CI. A tier dropped from .ci/run, or two tiers that no longer add up to the suite, fail here."""
    ci = {line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()}
    assert {"make test", "make test-long"} <= ci
    selected = {}
    for target in ("test", "test-long"):
        tokens = shlex.split(make_dry_run(target))
        command = tokens[tokens.index("pytest") :]
        assert not {"-k", "--deselect", "--ignore", "--ignore-glob", "--lf", "--sw"} & set(command), command
        assert not [token for token in command[1:] if token.startswith("tests")], command  # no paths: the whole tree
        selected[target] = command[command.index("-m") + 1]
    assert selected == {"test": "not long", "test-long": "long"}
