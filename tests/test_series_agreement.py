"""benchmarks/series_agreement.py: two invocations of one release series, each step judged in both and compared."""

import json
import subprocess
import sys

import pytest

RECORD = "tests/fixtures/series-2026-12-02"  # a real series of seven stacks, 63 runs (a frozen copy)


@pytest.fixture
def agreement(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import series_agreement

    return series_agreement


def test_a_series_agrees_with_itself_and_its_order_comes_from_the_releases(agreement, repo_root):
    """The record judged twice: every step the same, none contradicting; the order is `make series`' (by torch
    version, the release named twice after its first), not the runs file's."""
    records = agreement.read_runs(repo_root / RECORD)
    labels = agreement.series_order(records)
    assert labels == [
        "torch-2.0.1",
        "torch-2.3.1",
        "torch-2.6.0",
        "torch-2.9.1",
        "torch-2.12.0",
        "torch-2.15.0",
        "torch-2.15.0#2",
    ]
    steps = agreement.steps_of(records, labels, 0.10)
    found = agreement.agreement(steps, steps)
    assert found["contradict"] == [] and found["one"] == []
    changed = {key for key in found["both"] if steps[key]["changed"]}
    assert ("ResNet", 1, "default", "compiled_latency", "torch-2.0.1 -> torch-2.3.1") in changed
    assert ("Segformer", 1, "freezing", "speedup", "torch-2.9.1 -> torch-2.12.0") in changed


def test_two_stacks_swapped_contradict_and_the_script_says_so(repo_root, tmp_path):
    """A second invocation whose 2.0.1 and 2.3.1 runs are swapped reverses the step between them: ResNet's compiled
    latency slower in one, faster in the other, a contradiction (exit 1); a folder without runs is a clear error."""
    swap = {"torch-2.0.1": "torch-2.3.1", "torch-2.3.1": "torch-2.0.1"}
    lines = []
    for line in (repo_root / RECORD / "runs.jsonl").read_text().splitlines():
        run = json.loads(line)
        run["environment"] = swap.get(run["environment"], run["environment"])
        lines.append(json.dumps(run))
    (tmp_path / "swapped").mkdir()
    (tmp_path / "swapped" / "runs.jsonl").write_text("\n".join(lines) + "\n")
    script = str(repo_root / "benchmarks" / "series_agreement.py")
    done = subprocess.run(
        [sys.executable, script, str(repo_root / RECORD), str(tmp_path / "swapped"), "--margin", "0.10"],
        capture_output=True,
        text=True,
        cwd=repo_root,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "CONTRADICT: ResNet bs1 default compiled_latency torch-2.0.1 -> torch-2.3.1: slower" in done.stdout
    assert "| faster" in done.stdout and "machine c77956ccca10" in done.stdout
    done = subprocess.run(
        [sys.executable, script, str(repo_root / RECORD), str(tmp_path), "--margin", "0.10"],
        capture_output=True,
        text=True,
        cwd=repo_root,
    )
    assert done.returncode != 0 and done.stdout == "" and f"{tmp_path}: no runs.jsonl" in done.stderr
