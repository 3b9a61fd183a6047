"""A release series end to end on three real stacks: torch 2.0.1 named as `torch-2.0.1` (its own Python 3.10, the
transformers that still runs on it, a CUDA build), the project's torch with transformers 4.57.6, and the project's own
stack; the tiny ResNet, eager, default and freezing, through `dvc repro`. torch 2.0.1's inductor has no `freezing`:
its row is `unsupported` with the reason, and the rest of the series goes on."""

import json
import re
import shutil
import subprocess
import sys

import pytest
from conftest import OTHER, init_project, make_project, project_env, run_ok, set_params

from compilebench.environments import venvs

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.xdist_group("series_project")]
SERIES = ["torch-2.0.1", OTHER, "current"]


@pytest.fixture(scope="module")
def series_project(tmp_path_factory):
    if not venvs.pyenv_versions("3.10") and not shutil.which("python3.10"):
        pytest.skip("no Python 3.10 under pyenv here: torch 2.0's torch.compile needs Python <= 3.10")
    root = make_project(tmp_path_factory.mktemp("series"), ["microsoft/resnet-50"])
    set_params(root, compare=SERIES, **{"suites.smoke.variants": ["eager", "default", "freezing"]})
    env = project_env()
    init_project(root, env)
    run_ok(["dvc", "repro"], root, env, timeout=1800)
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    return root, env, rows


def test_a_release_is_named_and_built_with_its_companions(series_project):
    root, _, rows = series_project
    selection = json.loads((root / "data/selection.json").read_text())
    old = next(entry for entry in selection["environments"] if entry["name"] == "torch-2.0.1")
    assert old["python"] == "3.10" and old["pins"]["torch"] == "2.0.1" and old["pins"]["transformers"] == "4.49.0"
    by_stack = {row["environment"]: row for row in rows}
    assert by_stack["torch-2.0.1"]["python_version"].startswith("3.10.")
    assert by_stack["torch-2.0.1"]["torch_version"].startswith("2.0.1")
    assert by_stack["torch-2.0.1"]["transformers_version"] == "4.49.0"
    assert (
        by_stack["current"]["python_version"]
        == by_stack[OTHER]["python_version"]
        != by_stack["torch-2.0.1"]["python_version"]
    )


def test_an_old_stack_cannot_run_a_variant_and_says_why(series_project):
    root, env, rows = series_project
    status = {(row["environment"], row["variant"]): row for row in rows}
    assert status[("torch-2.0.1", "freezing")]["status"] == "unsupported"
    assert "inductor has no option freezing" in status[("torch-2.0.1", "freezing")]["error"]
    assert all(row["status"] == "ok" for key, row in status.items() if key != ("torch-2.0.1", "freezing"))
    check = subprocess.run(
        [sys.executable, "-m", "compilebench.aggregate", "--check"], cwd=root, env=env, capture_output=True, text=True
    )
    assert check.returncode in (0, 4), check.stderr[-2000:]  # unsupported is an answer, not a failed run (3)
    assert "unsupported: microsoft/resnet-50 bs1 freezing [torch-2.0.1]" in check.stderr


def test_the_report_names_each_step_and_what_else_it_changes(series_project):
    root, _, _ = series_project
    report = (root / "data/report/report.md").read_text()
    section = report.split("## The series, step by step", 1)[1].split("\n## ", 1)[0]
    step = next(line for line in section.splitlines() if line.startswith(f"| torch-2.0.1 -> {OTHER} |"))
    assert "transformers 4.49.0 → 4.57.6" in step and "Python: 3.10." in step and "CPU build" in step
    assert next(line for line in section.splitlines() if line.startswith(f"| {OTHER} -> current |"))
    rows = [line for line in section.splitlines() if line.startswith("| ResNet | 1 |")]
    metrics = {tuple(cell.strip() for cell in line.split("|")[3:5]) for line in rows}
    assert ("freezing", "compiled latency") in metrics and ("default", "speedup") in metrics
    assert not any(metric.startswith("compile,") for _, metric in metrics)  # a cell's compile: the comparison table
    suite_rows = [line for line in section.splitlines() if line.startswith("| over the suite |")]
    over = {line.split("|")[4].strip() for line in suite_rows}  # warm compile where a step has a ratio of it
    answered = {"eager latency", "compiled latency", "speedup", "compile, cold"}
    assert answered <= over <= {*answered, "compile, warm"}
    said = re.search(
        r"of their (\d+) steps (\d+) have a direction, (\d+) are `equivalent`, (\d+) `inconclusive`", section
    )
    counted, judged_said = int(said[1]), sum(map(int, said.groups()[1:]))
    judged = {line: sum(map(int, line.split("|")[6].split("/"))) for line in rows + suite_rows}  # equivalent/changed/…
    unjudged = [line for line in rows if line.rstrip(" |").endswith("torch-2.0.1 (unsupported)")]
    assert sum(judged.values()) == judged_said and counted == judged_said + len(unjudged)  # counted, not judged
    assert all(judged[line] + (line in unjudged) == 2 for line in rows)  # a cell's two steps
    # Over the suite a step is there where both its stacks measured the headline: a cold compile, say, only where
    # neither found the session's inductor cache warm (tests/conftest.py), so one step or two.
    assert all(judged[line] in (1, 2) for line in suite_rows)
    assert any(
        "| freezing | compiled latency |" in line and line.rstrip(" |").endswith("torch-2.0.1 (unsupported)")
        for line in rows
    )
    assert (root / "data/plots/series.png").stat().st_size > 10_000
    assert "![series](../plots/series.png)" in report


def test_explain_profiles_a_cell_on_torch_2_0_and_the_project_s_torch(series_project):
    """`make explain`'s command on the series' real stacks, for one compiled cell against the baseline: one profiled
    process per side in its own interpreter (torch 2.0.1 on Python 3.10 and the project's), each leaving a Chrome
    trace, its profile and the generated code, and a report that lays them side by side."""
    root, env, _ = series_project
    done = subprocess.run(
        [sys.executable, "-m", "compilebench.explain", "--b", "current", "--cell", "microsoft/resnet-50 1 default"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    folder = root / "data/explain/microsoft--resnet-50-bs1-default"
    for label, release in (("torch-2.0.1", "2.0.1"), ("current", "")):
        profile = json.loads((folder / label / "profile.json").read_text())
        assert profile["torch"].startswith(release) and len(profile["rounds"]) == 5
        names = set(profile["rounds"][0]["events"])
        # each generated kernel timed by its name (torch 2.0.1: kernel_cpp_N, later releases cpp_fused_OPS_N)
        kernels = [name for name in names if name.startswith(("kernel_cpp_", "cpp_fused_"))]
        assert kernels and profile["kernels_named"] >= len(kernels), sorted(names)[:20]
        assert profile["compile_phases_s"] and profile["code"]["kept"] and profile["code"]["files"] > 0
        assert list((folder / label / "code").rglob("*.py"))  # the generated wrapper
        # on the comparison's cache (this project's: the user's shared one): the program the timing blocks ran
        result = json.loads((folder / label / "result.json").read_text())
        assert result["cache"] == "shared" and result["status"] == "ok", result
        assert json.loads((folder / label / "trace.json").read_text())["traceEvents"]
    text = (root / "data/explain/report.md").read_text()
    assert "## ResNet bs1 default: torch-2.0.1 → current" in text and "| generated kernels |" in text
    assert "| torch | 2.0.1" in text and "| **profiled call** (the sum) |" in text
    again = subprocess.run(
        [sys.executable, "-m", "compilebench.explain", "--cell", "microsoft/resnet-50 1 nope"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 2 and "no compiled cell ('microsoft/resnet-50', 1, 'nope')" in again.stderr
    assert "microsoft/resnet-50 1 default" in again.stderr
