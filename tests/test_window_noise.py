"""benchmarks/window_noise.py: a comparison's blocks judged again as if each process had timed a shorter window."""

import json
import math
import subprocess
import sys

import pytest
from made_runs import FILLED


@pytest.fixture
def window_noise(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    import window_noise

    return window_noise


def test_a_window_keeps_the_rounds_a_process_would_have_timed(window_noise):
    rounds = [100.0] * 30  # 0.1 s a round
    assert window_noise.rounds_within(rounds, 2.0, 10) == 20  # 2 s of rounds
    assert window_noise.rounds_within(rounds, 0.5, 10) == 10  # min_iters holds it
    assert window_noise.rounds_within(rounds, 60.0, 10) == 30  # it never got there: all of them


def _rows(shift_of_block):
    """Two environments of one cell (eager and default, one timing process each per block, taking turns), 3 blocks
    of 20 rounds, 10 turns of 2 rounds; B's rounds are A's times `shift_of_block(block, round)`."""
    rows = []
    for environment in ("A", "B"):
        processes = {"eager": [], "default": []}
        for block in range(3):
            eager = [100.0 * (1 + 0.01 * (i % 3)) for i in range(20)]
            compiled = [50.0 * (1 + 0.01 * (i % 2)) for i in range(20)]
            if environment == "B":
                eager = [ms * shift_of_block(block, i) for i, ms in enumerate(eager)]
                compiled = [ms * shift_of_block(block, i) for i, ms in enumerate(compiled)]
            common = {
                "kind": "arm",
                "process_id": f"{environment}/r{block}",
                "replicate": block,
                "cache": "warm",
                "wall_s": 40.0,
                "turn_wait_s": 15.0,
                "round_turns": [2 + i // 2 for i in range(20)],
                "eager_ms": eager,
            }
            for variant in processes:
                processes[variant].append(
                    {
                        **common,
                        "trial_id": f"{environment}/org--m/bs1/{variant}/r{block}",
                        "block": f"{variant}/r{block}",
                        "compiled_ms": compiled if variant == "default" else [],
                    }
                )
        for variant, listed in processes.items():
            rows.append(
                {
                    **FILLED,
                    "environment": environment,
                    "environment_name": environment,
                    "variant": variant,
                    "compile": variant != "eager",
                    "run_uid": f"inv/{environment}/org/m/bs1/{variant}",
                    "process_results": listed,
                }
            )
    return rows


def test_blocks_cut_to_a_window_are_compared_as_aggregate_compares_them(window_noise):
    """B's first 8 rounds (4 turns) of block b are 1 + 0.02 b slower, its later ones as A: a window that keeps the
    first 10 rounds (5 turns, 4 of them slower) sees three block differences log(1.00), log(1.02), log(1.04) in every
    metric of latency; the whole window (10 turns, 6 of them alike) sees none."""
    rows = _rows(lambda block, i: 1 + 0.02 * block if i < 8 else 1.0)
    cut, saved = window_noise.cut(rows, 1.0, 10)  # a round is 0.15 s: 10 rounds reach 1 s
    assert saved["A|A/r0"] == pytest.approx(10 * 0.151, rel=0.02)  # the 10 rounds it did not time
    noise = window_noise.block_noise(cut)
    differences = [math.log(1 + 0.02 * block) for block in range(3)]
    mean = sum(differences) / 3
    expected = sum((d - mean) ** 2 for d in differences)
    assert noise["eager_latency"].dof == 2 and noise["eager_latency"].ss == pytest.approx(expected, rel=1e-6)
    assert noise["compiled_latency"].ss == pytest.approx(expected, rel=1e-6)
    assert noise["speedup"].ss == pytest.approx(0.0, abs=1e-12)  # both arms moved alike
    whole = window_noise.block_noise(window_noise.cut(rows, 100.0, 10)[0])
    assert whole["eager_latency"].ss == pytest.approx(0.0, abs=1e-12)  # medians over 10 turns: 6 of them say 0


def test_the_optimum_window_follows_from_the_variance_falling_as_one_over_the_window(window_noise):
    """variance = s_p² + a / T with s_p² 0.0016 and a 0.004 s: d* = sqrt(a o / s_p²), at o = 40 s 10 s."""
    windows = [10.0, 5.0, 2.0]
    variances = [0.0016 + 0.004 / window for window in windows]
    assert window_noise.optimum_s(windows, variances, 40.0) == pytest.approx(10.0, rel=1e-6)
    assert window_noise.optimum_s(windows, [0.002] * 3, 40.0) is None  # no fall with 1/T: no fit


def test_the_command_prints_each_window_and_refuses_a_folder_without_runs(repo_root, tmp_path):
    script = repo_root / "benchmarks" / "window_noise.py"
    (tmp_path / "results").mkdir()
    rows = _rows(lambda block, i: 1 + 0.02 * block)
    (tmp_path / "results" / "runs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--window-s", "3", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "1 record(s)" in done.stdout and "     3.0 " in done.stdout and "     1.0 " in done.stdout
    refused = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "none")], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 1 and "none/results/runs.jsonl does not exist" in refused.stderr
    bad = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--window-s", "0"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "positive seconds" in bad.stderr
