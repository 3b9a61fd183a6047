"""benchmarks/verdict_power.py runs the project's own verdict code on comparisons with a known answer: its last line
is what the closing notes quote, so its format and its rough values are checked here (few trials: loose bounds)."""

import json
import re
import subprocess
import sys


def test_the_error_rate_script_ends_with_its_two_numbers(repo_root, tmp_path):
    runs = tmp_path / "runs.jsonl"  # priced at these processes: a timing one of a block run together, a cold one
    processes = [{"trial_id": "a/m/bs1/eager/r0", "process_id": "a/m/bs1/r0", "kind": "arm", "wall_s": 50.0,
                  "turn_wait_s": 20.0},
                 {"trial_id": "a/m/bs1/default/c0", "process_id": "", "kind": "cold", "wall_s": 25.0}]  # fmt: skip
    runs.write_text(json.dumps({"process_results": processes}) + "\n")
    done = subprocess.run(
        [sys.executable, str(repo_root / "benchmarks" / "verdict_power.py"), "--trials", "40", "--sigma", "0.07",
         "--calibration", str(tmp_path / "none.json"), "--runs", str(runs)],
        capture_output=True, text=True, timeout=600, cwd=repo_root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"fpr=(\d\.\d{3}) power10=(\d\.\d{3})", last)
    assert match, last
    fpr, power = map(float, match.groups())
    assert fpr <= 0.12 and power >= 0.6, last  # 40 comparisons x 6 cells: targets 0.05 and 0.80 with room for chance
    assert "A/A flags" in done.stdout and "+10% flagged" in done.stdout
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[:-1]}
    assert "30 s a process" in lines["speedup"] and "30 s a process" in lines["latency"]  # its own time, not its waits
    assert "25 s a process" in lines["compile"]
