"""What `make ui` shows, in a real headless Chromium: after a two-environment comparison, the address it prints
opens compilebench's runs table with the invocation's runs, each named environment first (scripts/check_ui.py).
Skipped, visibly, where Chromium is not installed (`apt-get install -y chromium`)."""

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("compared_project")]


@pytest.mark.skipif(
    not (shutil.which("chromium") or shutil.which("chromium-browser")),
    reason="Chromium is not installed (apt-get install -y chromium): the UI check is skipped",
)
def test_the_address_make_ui_prints_shows_the_comparisons_runs(compared_project, tmp_path):
    root, env, _, _ = compared_project
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_ui.py"), "--out", str(tmp_path)], cwd=root,
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "runs.png").stat().st_size > 10_000  # a rendered page, not an empty one
    page = (tmp_path / "runs.html").read_text()
    assert "current" in page and "transformers-4.57.6" in page  # both environments' runs are listed
