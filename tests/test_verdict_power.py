"""benchmarks/verdict_power.py runs the project's own verdict code on comparisons with a known answer: its last line
is what the closing notes quote, so its format and its rough values are checked here (few trials: loose bounds)."""

import re
import subprocess
import sys


def test_the_error_rate_script_ends_with_its_two_numbers(repo_root, tmp_path):
    done = subprocess.run(
        [sys.executable, str(repo_root / "benchmarks" / "verdict_power.py"), "--trials", "40", "--sigma", "0.07",
         "--calibration", str(tmp_path / "none.json")],
        capture_output=True, text=True, timeout=600, cwd=repo_root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"fpr=(\d\.\d{3}) power10=(\d\.\d{3})", last)
    assert match, last
    fpr, power = map(float, match.groups())
    assert fpr <= 0.12 and power >= 0.6, last  # 40 comparisons x 6 cells: targets 0.05 and 0.80 with room for chance
    assert "A/A flags" in done.stdout and "+10% flagged" in done.stdout
