"""benchmarks/decided.py: a comparison's verdicts counted per metric, each cell once, as the report counts them."""

import shutil
import subprocess
import sys

import pandas as pd
import pytest

from compilebench.report import read_comparisons

RECORD = "tests/fixtures/aa-2026-11-28"  # an A/A made before rounds knew their turns
COLD_TIMED = "tests/fixtures/cold-timed-2026-11-29"  # a comparison whose cold processes timed, at ±5%
SERIES = "tests/fixtures/series-2026-12-02"  # a real release series of seven stacks


@pytest.fixture
def decided(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import decided

    return decided


def test_each_cell_counts_once_and_one_process_a_side_is_told_apart(decided, repo_root):
    """On a frozen A/A (3 models, `default` and `freezing`): eager latency in the 3 eager cells, inductor start-up
    once per model (both arms of a timing process have its value), cold compile in all 6 compiled cells, each with
    one cold process a side; the counts add up, and they are the table's verdict words."""
    frame = pd.read_csv(repo_root / RECORD / "results" / "comparison.csv")
    counts = {c.metric: c for c in decided.count(read_comparisons(frame))}
    assert {m: c.verdicts for m, c in counts.items()} == {
        "eager_latency": 3,
        "compiled_latency": 6,
        "speedup": 6,
        "compile_cold": 6,
        "compile_warm": 6,
        "inductor_startup": 3,
        "peak_memory": 9,
    }
    assert all(c.decided + c.inconclusive == c.verdicts for c in counts.values())
    assert counts["compile_cold"].single == 6 and counts["compile_cold"].decided == 0
    words = frame[frame["variant"] != "eager"]["speedup_verdict"]
    assert counts["speedup"].equivalent == (words == "equivalent").sum()
    assert counts["speedup"].inconclusive == (words == "inconclusive").sum()


def test_the_script_prints_every_folder_and_a_folder_without_a_comparison_is_a_clear_error(repo_root, tmp_path):
    script = str(repo_root / "benchmarks" / "decided.py")
    done = subprocess.run([sys.executable, script, str(repo_root / RECORD)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "all: " in done.stdout and "headline: " in done.stdout and "with one process a side" in done.stdout
    done = subprocess.run(
        [sys.executable, script, str(repo_root / RECORD), str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode != 0 and done.stdout == ""
    assert str(tmp_path) in done.stderr and "comparison.csv" in done.stderr
    (tmp_path / "results").mkdir()
    shutil.copy(repo_root / RECORD / "results" / "comparison.csv", tmp_path / "results")  # a table, no runs
    done = subprocess.run(
        [sys.executable, script, "--rejudge", "medians", str(repo_root / RECORD), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and done.stdout == ""
    assert str(tmp_path) in done.stderr and "runs.jsonl" in done.stderr and str(RECORD) not in done.stderr


def test_judged_again_from_its_runs_a_record_without_turns_gives_its_own_table(decided, repo_root):
    """A record made before rounds knew their turns: judged again from its runs.jsonl and noise record, either
    statistic reproduces every verdict its comparison table holds (each block's difference from process medians), and
    so does leaving out the cold blocks' latency and speedup (its cold processes did not time)."""
    table = repo_root / RECORD / "results" / "comparison.csv"
    written = decided.count(read_comparisons(pd.read_csv(table)))
    for statistic in ("turns", "medians", "timing-blocks"):
        assert decided.count(decided.rejudged(table, statistic)) == written


def test_judged_as_before_cold_processes_timed_a_record_loses_its_cold_blocks_only(decided, repo_root):
    """A comparison whose cold processes timed after their compile: judged again without the cold blocks' latency and
    speedup, such verdicts rest on fewer blocks (a compiled cell's one cold block; an eager cell's cold block of each
    variant, where none was disturbed), and cold compile time (the cold blocks' own) on as many as before."""
    table = repo_root / COLD_TIMED / "results" / "comparison.csv"
    now, before = (decided.rejudged(table, statistic) for statistic in ("turns", "timing-blocks"))
    for metric, fewer in (("eager_latency", 2), ("compiled_latency", 1), ("speedup", 1), ("compile_cold", 0)):
        lost = [
            a.judged[metric].ratio.blocks - b.judged[metric].ratio.blocks
            for a, b in zip(now, before, strict=True)
            if a.judged.get(metric) and a.judged[metric].ratio.blocks
        ]
        assert lost and all(0 <= n <= fewer for n in lost) and fewer in lost, (metric, lost)


def test_a_wider_margin_only_turns_words_equivalent(decided, repo_root):
    """The same blocks judged against ±10% rather than the table's ±5%: every interval stays as it was; a verdict
    either stays or becomes `equivalent` (a change that no longer matters), and on this record some do."""
    table = repo_root / COLD_TIMED / "results" / "comparison.csv"
    narrow, wide = decided.rejudged(table, "turns"), decided.rejudged(table, "turns", 0.10)
    moved = 0
    for a, b in zip(narrow, wide, strict=True):
        for metric, judged in a.judged.items():
            assert b.judged[metric].ratio == judged.ratio
            changed = (judged.verdict, b.judged[metric].verdict)
            assert changed[0] == changed[1] or changed[1] == "equivalent", (metric, changed)
            moved += changed[0] != changed[1]
    assert moved >= 5
    done = subprocess.run(
        [sys.executable, str(repo_root / "benchmarks" / "decided.py"), "--margin", "0.1", str(repo_root / COLD_TIMED)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "with --rejudge" in done.stderr and done.stdout == ""


def test_a_series_steps_are_counted_as_its_report_answers_them(decided, repo_root):
    """A real series (7 stacks, 3 models, `default` and `freezing`): 6 steps each of 3 eager and 12 compiled latency
    and speedup cells and of 5 headlines over the suite are what the report answers (120); every headline per cell, as
    counted before, 162. One process a stack leaves every measured cold compile step of a cell undecided (of 36: 3
    `unsupported` in 2.0.1, 8 `compile_error` in 2.6.0)."""
    record = repo_root / SERIES
    out = decided.series_counts(record, 0.10)
    assert out[0].startswith(f"{record}: torch-2.0.1 -> torch-2.3.1") and out[0].endswith(
        "torch-2.15.0#2; margin +-10%"
    )
    steps = {tuple(line.split()[:2]): line for line in out[1:] if line.startswith(("  cell", "  suite"))}
    assert len(steps) == 10 and " 6 steps" in steps[("suite", "compile_cold")]
    cold = steps[("cell", "compile_cold")].split()
    assert cold[2] == "36" and int(cold[4]) == 36 - 3 - 8
    answered, every = out[-2], out[-1]
    assert " of 120 steps inconclusive" in answered and " of 162 steps inconclusive" in every
    assert int(answered.split()[1]) < int(every.split()[4])
