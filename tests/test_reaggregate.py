"""benchmarks/reaggregate.py: a record aggregated again by two versions of the code, table by table."""

import subprocess
import sys

SCRIPT = "benchmarks/reaggregate.py"
RECORD = "tests/fixtures/aa-2026-11-28"  # runs, run info and noise record of a real A/A


def test_one_version_against_itself_gives_identical_tables(repo_root):
    done = subprocess.run(
        [sys.executable, SCRIPT, "--old", "HEAD", "--new", "HEAD", RECORD],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split()[1:] for line in lines[:5]] == [
        [table, "identical"] for table in ("summary", "verdicts", "comparison", "metrics", "cells")
    ]
    assert lines[-1] == "1 record(s), 5 files: 0 differ (HEAD -> HEAD)"


def test_a_commit_that_is_none_or_a_folder_that_is_none_is_refused(repo_root, tmp_path):
    for args, said in (
        (["--old", "no-such-commit", RECORD], "no such commit"),
        (["--old", "HEAD", str(tmp_path / "nowhere")], "not a folder"),
        (["--old", "HEAD", str(tmp_path)], "no record with runs.jsonl and run_info.json"),
    ):
        done = subprocess.run([sys.executable, SCRIPT, *args], cwd=repo_root, capture_output=True, text=True)
        assert done.returncode == 2 and said in done.stderr, done.stderr
