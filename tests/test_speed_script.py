"""benchmarks/test_speed.py: what it reads from a run and how it pairs runs (its runs take minutes each; the script
is run by hand, as the README says)."""

import importlib.util
import subprocess
import sys

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("benchmarks_test_speed", ROOT / "benchmarks" / "test_speed.py")
speed = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # registered first, for its dataclass
_spec.loader.exec_module(speed)


def _run(label, wall_s):
    return speed.Run(label, "c0ffee", 0, wall_s, None, 0.0, "log")


def test_pytest_seconds_come_from_the_last_summary_line():
    output = (
        "370 passed, 3 skipped in 12.50s (0:00:12)\n...\n========= 2 failed, 368 passed in 388.06s (0:06:28) ====\n"
    )
    assert speed.pytest_seconds(output) == 388.06
    assert speed.pytest_seconds("229 passed, 1 skipped in 585.25s (0:09:45)") == 585.25
    assert speed.pytest_seconds("make: *** [Makefile:20: test] Error 2\n") is None


def test_each_run_pairs_with_the_next_of_the_other_side():
    abba = [_run("A", 800.0), _run("B", 400.0), _run("B", 500.0), _run("A", 750.0)]
    assert speed.pair_ratios(abba) == [2.0, 1.5]
    assert speed.pair_ratios([_run("A", 600.0), _run("A", 900.0), _run("B", 300.0)]) == [3.0]
    assert speed.pair_ratios([_run("B", 300.0)]) == []


def test_commits_resolve_to_hashes_and_a_name_of_none_to_nothing(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    assert speed.resolve("HEAD", tmp_path) is None  # a repository without commits
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    full = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert speed.resolve("HEAD", tmp_path) == speed.resolve(full[:8], tmp_path) == full
    assert speed.resolve("no-such-commit", tmp_path) is None
