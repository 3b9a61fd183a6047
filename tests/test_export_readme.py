"""benchmarks/export_readme.py: an exported plan's folder gets the README it generates from the folder's own files,
and it refuses what is not such a folder or a README already written. On a frozen window: an H100 window's ResNet-50
processes (tests/fixtures/h100-window)."""

import json
import shutil
import subprocess
import sys

import pytest

from compilebench.exported import NOT_RUN_YET, waiting_readme
from compilebench.records.reading import read_plan
from compilebench.records.selection import Selection


def run(repo_root, *args):
    return subprocess.run(
        [sys.executable, str(repo_root / "benchmarks" / "export_readme.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


WINDOW = "tests/fixtures/h100-window"


def test_a_windows_readme_says_what_its_files_hold(repo_root, tmp_path):
    record = tmp_path / "2026-11-27-h100-paper-bs1-w1"
    shutil.copytree(repo_root / WINDOW, record)
    done = run(repo_root, record, "--note", "a note")
    assert done.returncode == 0, done.stderr
    text = (record / "README.md").read_text()
    trials = [json.loads(line) for line in (record / "results/trials.jsonl").read_text().splitlines()]
    planned = len(json.loads((record / "plan.json").read_text())["trials"])
    assert f"{len(trials)} of the plan's {planned} trials came back: {len(trials)} ok." in text
    assert trials[0]["environment"]["device_name"] in text and "a note" in text
    assert f"make ingest FROM={record.as_posix()}" in text
    assert "`ingested`" not in text  # only the files it has are listed

    again = run(repo_root, record)  # written once
    assert again.returncode != 0 and "exists" in again.stderr and (record / "README.md").read_text() == text


@pytest.mark.parametrize("missing", ["plan.json", "results/trials.jsonl"])
def test_a_folder_without_an_exported_plan_is_refused_naming_the_file(repo_root, tmp_path, missing):
    record = tmp_path / "record"
    shutil.copytree(repo_root / WINDOW, record)
    (record / missing).unlink()
    done = run(repo_root, record)
    assert done.returncode != 0 and missing in done.stderr and not (record / "README.md").exists()


def test_the_readme_an_export_left_is_replaced_once_its_results_are_back(repo_root, tmp_path):
    record = tmp_path / "2026-11-27-h100-paper-bs1-w1"
    shutil.copytree(repo_root / WINDOW, record)
    plan = read_plan(record / "plan.json")  # the README its export would have left
    selection = Selection.from_dict(json.loads((record / "export.json").read_text())["selection"])
    (record / "README.md").write_text(waiting_readme(record.name, plan, selection, "an estimate", None, 8))
    done = run(repo_root, record)
    assert done.returncode == 0, done.stderr
    text = (record / "README.md").read_text()
    assert NOT_RUN_YET not in text and "12 of the plan's 15 trials came back: 12 ok." in text
