"""exported.window_readme: an exported plan's folder gets the README it generates from the folder's own files when
`make ingest` logs its results, in place of the one its export left; it refuses what is not such a folder. On a frozen
window: an H100 window's ResNet-50 processes (tests/fixtures/h100-window)."""

import json
import shutil

import pytest

from compilebench.benchmark.exported import NOT_RUN_YET, WindowError, waiting_readme, window_readme
from compilebench.records.reading import read_plan
from compilebench.records.selection import Selection

WINDOW = "tests/fixtures/h100-window"


def test_a_windows_readme_says_what_its_files_hold(repo_root, tmp_path):
    record = tmp_path / "2026-11-27-h100-paper-bs1-w1"
    shutil.copytree(repo_root / WINDOW, record)
    text = window_readme(record)
    trials = [json.loads(line) for line in (record / "results/trials.jsonl").read_text().splitlines()]
    planned = len(json.loads((record / "plan.json").read_text())["trials"])
    assert f"{len(trials)} of the plan's {planned} trials came back: {len(trials)} ok." in text
    assert trials[0]["environment"]["device_name"] in text
    assert f"make ingest FROM={record.as_posix()}" in text
    assert "`ingested`" not in text  # only the files it has are listed


@pytest.mark.parametrize("missing", ["plan.json", "results/trials.jsonl"])
def test_a_folder_without_an_exported_plan_is_refused_naming_the_file(repo_root, tmp_path, missing):
    record = tmp_path / "record"
    shutil.copytree(repo_root / WINDOW, record)
    (record / missing).unlink()
    with pytest.raises(WindowError, match=missing):
        window_readme(record)


def test_the_readme_an_export_leaves_says_ingest_replaces_it(repo_root, tmp_path):
    record = tmp_path / "2026-11-27-h100-paper-bs1-w1"
    shutil.copytree(repo_root / WINDOW, record)
    plan = read_plan(record / "plan.json")  # the README its export would have left
    selection = Selection.from_dict(json.loads((record / "export.json").read_text())["selection"])
    left = waiting_readme(record.name, plan, selection, "an estimate", None, 8)
    assert NOT_RUN_YET in left.splitlines() and "which also writes the record's README in place of this one" in left
    assert "benchmarks/" not in left  # the product names no lab tool
