"""What `make ui` shows, in a real headless Chromium (Playwright): after a two-environment comparison, the address it
prints (scripts/check_ui.py): the newest comparison's B runs alone, each named with its model, variant and word on the
first screen within 10 s, the parent's description opening with the answer per model, a candidate's tags. Skipped,
visibly, where Chromium or Playwright is not installed (`apt-get install -y chromium`, `pip install playwright`)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import OTHER, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("compared_project")]


@pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists() or importlib.util.find_spec("playwright") is None,
    reason="Chromium or Playwright is not installed (apt-get install -y chromium; pip install "
    "playwright): the UI check is skipped",
)
def test_the_readmes_route_through_the_mlflow_ui_shows_what_changed(compared_project, tmp_path):
    root, env, _, _ = compared_project
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_ui.py"), "--out", str(tmp_path)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in ("runs", "parent", "candidate"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000, name  # a rendered page, not an empty one
    runs = (tmp_path / "runs.txt").read_text()  # the first screen: the B runs alone, each its word first
    assert f" · ResNet default · bs1 · {OTHER}" in runs and "· current" not in runs
    assert "words whole in 2 of 2 B runs' names" in done.stdout  # the word readable at the default column width
    assert "The answer, per model" in (tmp_path / "parent.txt").read_text()
    assert "vs_first/against" in (tmp_path / "candidate.txt").read_text()


def test_the_ui_check_fails_on_more_than_one_printed_address_or_another_mode():
    """The check's rule for what `make ui` printed (before this, `make ui` printed three addresses and the check
    took its address from the code, not from what was printed)."""
    spec = importlib.util.spec_from_file_location("check_ui", ROOT / "scripts" / "check_ui.py")
    check_ui = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_ui)
    runs = "http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning&searchFilter=x"
    printed = f"compilebench runs: {runs}\n"
    assert check_ui.address_problems(check_ui.printed_addresses(printed, ""), runs) == []
    mlflow_own = "INFO:     Uvicorn running on http://127.0.0.1:5000 (Press CTRL+C to quit)\n"
    (problem,) = check_ui.address_problems(check_ui.printed_addresses(printed, mlflow_own), runs)
    assert problem.startswith("make ui printed 2 addresses, not one")
    bare = "http://127.0.0.1:5000/#/experiments/1/runs"
    assert "not the runs table in machine-learning mode" in check_ui.address_problems([bare], bare)[0]
