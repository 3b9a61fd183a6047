"""benchmarks/decided.py: a comparison's verdicts counted per metric, as the report's what-changed section counts."""

import csv
import json
import subprocess
import sys

import pytest

RECORDS = ["2026-11-28-epyc-aa", "2026-11-27-epyc-torch-2.14.1-together"]


@pytest.fixture
def decided(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import decided

    return decided


@pytest.mark.parametrize("record", RECORDS)
def test_the_counts_are_the_ones_the_pipeline_wrote_into_its_metrics(decided, repo_root, record):
    """What the pipeline's aggregate stage counted (metrics.json: changed, equivalent, inconclusive over every
    compared metric) is what the script counts from the comparison table alone."""
    folder = repo_root / "benchmarks" / "results" / record
    metrics = json.loads((folder / "results" / "metrics.json").read_text())
    prefix = next(key.removesuffix("_changed") for key in metrics if key.endswith("_vs_current_changed"))
    with (folder / "results" / "comparison.csv").open() as handle:
        counts = decided.count(list(csv.DictReader(handle)))
    assert sum(c.directions for c in counts) == metrics[f"{prefix}_changed"]
    assert sum(c.equivalent for c in counts) == metrics[f"{prefix}_equivalent"]
    assert sum(c.inconclusive for c in counts) == metrics[f"{prefix}_inconclusive"]
    by_metric = {c.metric: c for c in counts}
    assert by_metric["eager_latency"].verdicts == 3  # the eager cells only: compiled cells share their processes
    assert by_metric["compile_cold"].single == 6  # one cold process a side: no interval, inconclusive by design


def test_a_folder_without_a_comparison_is_a_clear_error_and_prints_nothing(repo_root, tmp_path):
    done = subprocess.run([sys.executable, str(repo_root / "benchmarks" / "decided.py"),
                           str(repo_root / "benchmarks" / "results" / RECORDS[0]), str(tmp_path)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0 and done.stdout == ""
    assert str(tmp_path) in done.stderr and "comparison.csv" in done.stderr
