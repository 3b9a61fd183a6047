"""benchmarks/process_time.py: a process's wall time in phases, from its timeline or, in older records, its parts."""

import sys

import pytest

from compilebench.records.formats import TrialResult
from compilebench.records.reading import read_result_lines


@pytest.fixture
def process_time(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import process_time

    return process_time


def _arm(variant, started_at, status="ok", **known):
    return TrialResult(f"current/org--m/bs1/{variant}/r0", status, started_at=started_at, wall_s=20.0, **known)


def test_a_timelines_phases_are_the_time_between_its_moments_and_exit_the_rest_of_the_wall(process_time):
    timeline = {"started": 2.0, "loaded": 5.0, "default compiled": 11.0, "timed": 17.5, "measured": 17.5}
    ok = [_arm(name, 1.0, timeline_s=timeline) for name in ("eager", "default")]
    failed = [_arm("eager", 2.0, timeline_s=timeline), _arm("default", 2.0, "compile_error", timeline_s=timeline)]
    found = process_time.processes([*ok, *failed])
    assert found == {
        ("org--m", "bs1"): [
            {
                "started": 2.0,
                "loaded": 3.0,
                "default compiled": 6.0,
                "timed": 6.5,
                "measured": 0.0,
                "exit": 2.5,
                "own": 20.0,
            }
        ]
    }
    lines = process_time.table(found)
    assert lines[2].startswith("| org--m | bs1 | 1 | 20.0 | 20.0 | 2.00 | 3.00 | 6.00 | 6.50 | 0.00 | 2.50 |")
    assert lines[-1] == "| share of all wall time | | | | | 10% | 15% | 30% | 32% | 0% | 12% |"


def test_a_runs_processes_are_read_once_with_their_own_time_and_kind(process_time, tmp_path):
    """A pipeline's runs.jsonl lists a timing process in each of its runs: the table counts it once, its own time
    its wall time less its waits for turns, and `--kind` keeps one kind."""
    import json

    from made_runs import FILLED

    timeline = {"its turn": 4.0, "loaded": 6.0, "default compiled": 16.0, "timed": 30.0, "measured": 30.0}
    arm = {
        "trial_id": "current/org--m/bs1/default/r0",
        "kind": "arm",
        "process_id": "p0",
        "started_at": 1.0,
        "wall_s": 31.0,
        "turn_wait_s": 11.0,
        "timeline_s": timeline,
        "eager_ms": [5.0] * 3,
    }
    cold = {
        **arm,
        "trial_id": "current/org--m/bs1/default/c0",
        "kind": "cold",
        "process_id": "",
        "started_at": 0.0,
        "turn_wait_s": None,
        "wall_s": 60.0,
    }
    rows = [
        {**FILLED, "variant": "eager", "compile": False, "process_results": [{**arm, "compiled_ms": []}]},
        {**FILLED, "process_results": [cold, {**arm, "compiled_ms": [4.0] * 3}]},
    ]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "runs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    every = process_time.processes(process_time.read_record(tmp_path, None))
    assert sorted(process["own"] for process in every[("org--m", "bs1")]) == [20.0, 60.0]
    [timing] = process_time.processes(process_time.read_record(tmp_path, "arm"))[("org--m", "bs1")]
    assert timing["its turn"] == 4.0 and timing["default compiled"] == 10.0 and timing["exit"] == 1.0


def test_a_record_without_timelines_shows_its_measured_parts_and_what_they_leave(repo_root, process_time):
    """An H100 window's ResNet-50 processes (result format 2, before timelines): 4 processes, each one's phases
    summing to its wall time."""
    path = repo_root / "tests/fixtures/h100-window/results/trials.jsonl"
    results = read_result_lines(path)
    found = process_time.processes(results)
    walls = {result.started_at: result.wall_s for result in results}
    every = [phases for group in found.values() for phases in group]
    assert len(found) == 1 and len(every) == 4
    assert sorted(sum(s for name, s in phases.items() if name != "own") for phases in every) == pytest.approx(
        sorted(walls.values())
    )
    assert all(phases["not accounted"] > 0 and "exit" not in phases for phases in every)


def test_a_folder_that_is_no_record_is_refused_naming_it(repo_root, tmp_path):
    import subprocess

    script = repo_root / "benchmarks/process_time.py"
    (tmp_path / "torn/results").mkdir(parents=True)
    (tmp_path / "torn/results/trials.jsonl").write_text('{"trial_id": "a"}\n{"b": 1}\n')
    for folder, says in (
        (tmp_path / "none", "none: neither results/trials.jsonl nor"),
        (tmp_path / "torn", "line 1: missing keys"),
    ):
        done = subprocess.run([sys.executable, str(script), str(folder)], capture_output=True, text=True)
        assert done.returncode == 1 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
