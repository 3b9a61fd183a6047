"""The installer: pip's package sources read from pip itself and handed to uv; pip where no uv is found. (Real
installs with uv: the compared environment of test_environments and `make`.)"""

import os
import subprocess
import sys
from pathlib import Path

from compilebench.environments import installer

LISTED = """\
:env:.find-links='/opt/wheels'
:env:.default-timeout='180'
global.find-links='/elsewhere'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
install.index-url="https://mirror.example/simple"
global.constraint='/etc/xdg/pip/constraints.txt'
"""


def test_pip_sources_take_each_setting_from_its_highest_precedence_section():
    assert installer.pip_sources(LISTED) == {
        "find-links": ["/opt/wheels"],  # the environment variable over the config file
        "extra-index-url": ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"],
        "index-url": ["https://mirror.example/simple"],
        "constraint": ["/etc/xdg/pip/constraints.txt"],
    }
    assert installer.pip_sources("global.timeout='60'\nnot a setting\n") == {}


def test_uv_flags_name_every_source_and_pips_best_match_rule():
    flags = installer.uv_flags(
        {
            "find-links": ["/w"],
            "index-url": ["https://a/simple", "https://b/simple"],
            "extra-index-url": ["file:///x", "file:///y"],
        }
    )
    assert flags[:3] == ["--compile-bytecode", "--index-strategy", "unsafe-best-match"]
    pairs = list(zip(flags[3::2], flags[4::2], strict=True))
    assert pairs == [
        ("--find-links", "/w"),
        ("--index-url", "https://a/simple"),
        ("--extra-index-url", "file:///x"),
        ("--extra-index-url", "file:///y"),
    ]


def test_pips_own_listing_of_its_variables_is_read(tmp_path):
    """The format is pip's, not ours: the real `pip config list` under PIP_* variables."""
    env = {**os.environ, "PIP_FIND_LINKS": str(tmp_path / "wheels"), "PIP_EXTRA_INDEX_URL": "file:///a file:///b"}
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], env=env, capture_output=True, text=True)
    sources = installer.pip_sources(listed.stdout)
    assert sources["find-links"] == [str(tmp_path / "wheels")]
    assert sources["extra-index-url"] == ["file:///a", "file:///b"]


def test_uv_beside_the_interpreter_installs_else_the_targets_own_pip(tmp_path, monkeypatch):
    command = installer.install_command("/some/venv/bin/python", ["torch==2.13.0"])
    assert Path(command[0]).name == "uv" and command[1:5] == ["pip", "install", "--quiet", "--python"]
    assert command[5] == "/some/venv/bin/python" and command[-1] == "torch==2.13.0"
    runner = tmp_path / "bin" / "python"  # an interpreter with no uv beside it, and none on PATH
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert installer.find_uv(runner) is None
    assert installer.install_command("/t/python", ["x==1"], runner=runner) == [
        "/t/python",
        "-m",
        "pip",
        "install",
        "--quiet",
        "x==1",
    ]


def test_the_script_says_how_to_call_it():
    done = subprocess.run([sys.executable, installer.__file__], capture_output=True, text=True)
    assert done.returncode != 0 and "usage: python installer.py VENV_PYTHON" in done.stderr
