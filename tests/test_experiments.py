"""`make experiments` (compilebench.experiments): what a real `dvc exp show --json` lists, per experiment and metric
the suite's word and B/A [95% CI], compile time included, in a terminal's width (issue 78)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from compilebench import aggregate, experiments
from compilebench.analysis import suite
from compilebench.analysis.run_record import RunRecord
from compilebench.report import read_comparisons

COLD_TIMED = "tests/fixtures/cold-timed-2026-11-29/results"  # torch 2.14.1 against 2.13.0


def run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_each_experiment_lists_each_metrics_word_and_suite_ratio(repo_root, tmp_path):
    folder = repo_root / COLD_TIMED
    records = [RunRecord.from_dict(json.loads(line)) for line in (folder / "runs.jsonl").read_text().splitlines()]
    table = aggregate.summarize(pd.DataFrame([record.to_dict() for record in records]))
    compared = read_comparisons(pd.read_csv(folder / "comparison.csv"))
    metrics = aggregate.headline_metrics(table, compared)
    old = {
        key: value for key, value in metrics.items() if not key.endswith(("_verdict_code", "_cells", "_cells_changed"))
    }
    dvc = str(Path(sys.executable).parent / "dvc")
    (tmp_path / "new.json").write_text(json.dumps(metrics))
    (tmp_path / "old.json").write_text(json.dumps(old))  # a metrics file of before the words: still read
    (tmp_path / "params.yaml").write_text("which: old\n")
    run(["git", "init", "-q"], tmp_path)
    run([dvc, "init", "-q"], tmp_path)
    run(
        [
            dvc,
            "stage",
            "add",
            "-q",
            "-n",
            "m",
            "-p",
            "which",
            "-M",
            "metrics.json",
            f"{sys.executable} -c \"import yaml, shutil; which = yaml.safe_load(open('params.yaml'))['which']; "
            "shutil.copy(which + '.json', 'metrics.json')\"",
        ],
        tmp_path,
    )
    run(["git", "add", "-A"], tmp_path)
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], tmp_path)
    run([dvc, "exp", "run", "-q", "-n", "before-words", "-S", "which=old"], tmp_path)
    run([dvc, "exp", "run", "-q", "-n", "torch-2.14.1-vs-current", "-S", "which=new"], tmp_path)
    shown = json.loads(run([dvc, "exp", "show", "--json", "--no-pager"], tmp_path))
    found = experiments.read_shown(shown, "metrics.json")
    assert [e.name for e in found] == ["before-words", "torch-2.14.1-vs-current"]  # the workspace is the newest
    text = experiments.render(found)
    assert max(len(line) for line in text.splitlines()) <= 100, text  # a terminal's width
    newest = text[text.index("torch-2.14.1-vs-current") :]
    for entry in suite.summary(compared):
        if entry["metric"] not in aggregate.SUITE_METRICS:
            continue
        line = next(line for line in newest.splitlines() if line.strip().startswith(entry["metric"].replace("_", " ")))
        assert entry["verdict"] in line and f"{entry['geomean']:.3f}" in line, line
        assert f"{entry['changed']} of {entry['cells']}" in line, line
    assert "compile warm" in newest and "compile cold" in newest and "inductor startup" in newest
    older = text[: text.index("torch-2.14.1-vs-current")]
    assert "(older: no word)" in older and "speedup" in older
    # the workspace's results where no experiment of this commit has them, named so; a long stack name on its own line
    long = {key.replace("torch-2.14.1", "transformers-4.57.6-long"): value for key, value in metrics.items()}
    workspace = {"rev": "workspace", "data": {"timestamp": None, "metrics": {"metrics.json": {"data": long}}}}
    (shown_workspace,) = experiments.read_shown([workspace], "metrics.json")
    text = experiments.render([shown_workspace])
    assert text.startswith("workspace (data/ as it is now") and "\n  transformers-4.57.6-long vs current\n" in text
    assert "\n    metric                  word" in text


def test_without_a_dvc_project_it_says_so_and_exits_2(tmp_path, repo_root):
    shutil.copy(repo_root / "params.yaml", tmp_path / "params.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "compilebench.experiments"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 2 and "`dvc exp show` failed" in done.stderr, done.stderr
