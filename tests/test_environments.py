"""Environments compared for real: a second stack built with pip (transformers 4.57.6 beside the project's 5.23.0,
the same torch wheel from disk), interleaved trials through the real stages, an A/A calibration, the store read back.
"""

import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import OTHER, make_project, project_env, run_ok, set_params
from made_runs import runs_of

from compilebench.analysis import stats
from compilebench.benchmark import forecast
from compilebench.environments import venvs
from compilebench.records.formats import key_part

pytestmark = pytest.mark.slow
COMPARED = pytest.mark.xdist_group("compared_project")  # the tests on the shared project run where it was built


def test_pins_resolve_over_the_projects(repo_root):
    project = venvs.project_pins(repo_root)
    assert project["torch"] == "2.13.0" and project["transformers"]
    assert venvs.resolve(project, {"Transformers": "4.57.6"})["transformers"] == "4.57.6"
    assert venvs.normalize("PyYAML") == "pyyaml" and venvs.normalize("typing_extensions") == "typing-extensions"
    key = venvs.environment_key(project, "3.11.7")
    assert key == venvs.environment_key(dict(reversed(project.items())), "3.11.7")
    assert key != venvs.environment_key(project, "3.12.0")


def test_mismatches_accept_a_local_version_label():
    assert venvs.mismatches({"torch": "2.13.0"}, {"torch": "2.13.0+cpu"}) == []
    assert venvs.mismatches({"torch": "2.13.0"}, {"torch": "2.14.1"}) == ["torch 2.14.1 (pinned 2.13.0)"]
    assert venvs.mismatches({"scipy": "1.0"}, {}) == ["scipy missing (pinned 1.0)"]


def test_current_environment_holds_the_projects_pins(repo_root):
    stack = venvs.current(repo_root)
    assert stack.python == sys.executable and any(line.startswith("torch==2.13.0") for line in stack.freeze)


def _stage(name, root, env, *args):
    return run_ok([sys.executable, "-m", f"compilebench.{name}", *args], root, env)


@pytest.fixture(scope="module")
def compared(compared_project):
    """The tiny ResNet in the project's environment and in transformers 4.57.6, two processes each, interleaved
    (the pipeline test's project: read here, never changed)."""
    root, env, _, rows = compared_project
    return root, env, rows


@pytest.fixture(scope="module")
def calibrated(compared, tmp_path_factory):
    """A copy of that project after an A/A invocation (the same environment compared with itself), two blocks of
    warm processes: one degree of freedom of noise per metric, added to the machine's record."""
    source, env, _ = compared
    root = tmp_path_factory.mktemp("aa") / "project"
    shutil.copytree(source, root, symlinks=True)
    set_params(
        root,
        compare=["current", "current"],
        **{"benchmark.compile_cache": "shared", "benchmark.replicates": 2, "benchmark.cold_replicates": 0},
    )
    for stage in ("load_models", "benchmark", "aggregate"):
        _stage(stage, root, env)
    return root, env


@COMPARED
def test_each_environment_runs_in_its_own_interpreter(compared):
    _, _, rows = compared
    by_env = {row["environment"]: row for row in rows if row["variant"] == "default"}
    assert set(by_env) == {"current", OTHER}
    assert by_env["current"]["transformers_version"] != by_env[OTHER]["transformers_version"] == "4.57.6"
    assert by_env[OTHER]["torch_version"].startswith("2.13.0")
    assert json.loads(by_env[OTHER]["environment_pins"])["transformers"] == "4.57.6"
    assert "transformers==4.57.6" in by_env[OTHER]["environment_freeze"]
    for label in ("current", OTHER):  # the trial's stack only, the baseline built by the same recipe
        assert not any(line.startswith("mlflow==") for line in by_env[label]["environment_freeze"]), label
    assert by_env["current"]["environment_key"] != by_env[OTHER]["environment_key"]
    assert all(row["status"] == "ok" for row in rows), [(r["variant"], r["status"], r["error"]) for r in rows]


@COMPARED
def test_processes_alternate_in_a_balanced_order(compared):
    _, _, rows = compared
    processes = sorted(
        (process["started_at"], row["environment"], process["cache"])
        for row in rows
        if row["variant"] == "default"
        for process in row["process_results"]
    )
    order = [environment for _, environment, _ in processes]
    assert sorted(order) == sorted(["current", OTHER] * 3)  # a cold compile-only process, two timing processes
    blocks = [order[i : i + 2] for i in range(0, 6, 2)]
    assert all(a != b for a, b in blocks)  # each block: both environments, back to back
    assert blocks[0][1] == blocks[1][0] and blocks[1][1] == blocks[2][0]  # A B, B A, A B (or B A, A B, B A)
    assert [cache for _, _, cache in processes] == ["cold", "cold", "warm", "warm", "warm", "warm"]


@COMPARED
def test_the_comparison_table_reads_b_against_a(compared):
    root, _, _ = compared
    table = pd.read_csv(root / "data/results/comparison.csv")
    assert set(table["variant"]) == {"default", "eager"}
    row = table[table["variant"] == "default"].iloc[0]
    assert row["baseline"] == "current" and row["candidate"] == OTHER and row["interleaved"]
    for metric in ("eager_latency", "compiled_latency", "speedup", "compile_cold", "compile_warm", "peak_memory"):
        assert row[f"{metric}_ratio"] > 0, metric
    assert row["compiled_latency_ci_low"] <= row["compiled_latency_ratio"] <= row["compiled_latency_ci_high"]
    # two timing blocks and the cold block (its processes timed after their compile)
    assert row["compiled_latency_method"] == "paired blocks" and row["compiled_latency_blocks"] == 3
    assert row["compiled_latency_ci90_low"] > row["compiled_latency_ci_low"]  # the 90% CI inside the 95% one
    # the word the rule gives its 90% CI against the margin: inside both bounds, wholly outside one, or neither
    bound, low, high = (
        math.log1p(row["margin"]),
        *(math.log(row[f"compiled_latency_ci90_{e}"]) for e in ("low", "high")),
    )
    expected = (
        "equivalent"
        if -bound < low and high < bound
        else "beyond margin"
        if low > bound or high < -bound
        else ("undecided")
    )
    assert row["compiled_latency_relevance"] == expected and row["margin"] == 0.10  # params.yaml's default
    assert not row["calibrated"]  # the first comparison on this machine: no noise record yet
    # the same row, per metric, in the DVC metric file `dvc metrics diff` compares between experiments
    cells = json.loads((root / "data/results/cells.json").read_text())
    cell = cells[f"{key_part(OTHER)}_vs_current"][f"{row['label']} bs1 default"]["compiled_latency"]
    assert cell["ratio"] == pytest.approx(row["compiled_latency_ratio"])
    assert cell["ci_low"] == pytest.approx(row["compiled_latency_ci_low"]) and cell["verdict_code"] in (-1, 0, 1, 2)
    report = (root / "data/report/report.md").read_text()
    assert "## Environments compared" in report and "No noise record of this machine yet" in report
    assert (root / "data/plots/comparison.png").exists()


@COMPARED
def test_every_comparison_adds_to_the_machines_noise_record(calibrated, compared):
    """The two-stack invocation recorded its blocks' noise; the A/A after it added its own beside it (not over it),
    was judged with the first one's, and the baseline was a venv built by the same recipe as the candidate."""
    root, _ = calibrated
    _, _, ab_rows = compared
    calibrations = json.loads((root / "data/calibration.json").read_text())
    [record] = calibrations.values()
    assert record["version"] == 2 and len(record["invocations"]) == 2
    aa = [entry for entry in record["invocations"].values() if entry["aa"]]
    ab = [entry for entry in record["invocations"].values() if not entry["aa"]]
    assert len(aa) == len(ab) == 1
    ss, dof = ab[0]["noise"]["microsoft/resnet-50|bs1|default"]["compiled_latency"]
    assert dof == 2  # three blocks of one cell (two timing, one cold): two degrees of freedom
    # its sum of squares is the spread of that invocation's per-block differences of log compiled latency
    by_env = {run.environment: run.values["compiled_latency"] for run in runs_of(ab_rows) if run.variant == "default"}
    blocks = sorted(set(by_env["current"]) & set(by_env[OTHER]))
    differences = [math.log(by_env[OTHER][block] / by_env["current"][block]) for block in blocks]
    assert len(blocks) == 3 and ss == pytest.approx(stats.noise_of(differences).ss, rel=1e-9) and ss > 0
    table = pd.read_csv(root / "data/results/comparison.csv")
    assert set(table["candidate"]) == {"current#2"} and table["calibrated"].all()
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    assert not any(line.startswith("mlflow==") for row in rows for line in row["environment_freeze"])


@COMPARED
def test_the_store_compares_versions_across_invocations(calibrated):
    root, env = calibrated
    _stage("aggregate", root, env, "--from-mlflow")
    versions = pd.read_csv(root / "data/store/versions.csv")
    across = versions[versions["baseline_versions"] != versions["candidate_versions"]]
    assert not across.empty and not across["interleaved"].any()  # separate invocations: labelled as such
    assert across["calibrated"].all()  # the A/A margin of this machine applies
    assert "4.57.6" in " ".join(across["baseline_versions"]) + " ".join(across["candidate_versions"])
    repeats = pd.read_csv(root / "data/store/repeats.csv")  # the A/B and the A/A are different pairs: none repeated
    assert repeats.empty and "contradict" in repeats.columns
    _stage("plot", root, env, "--from-mlflow")
    assert (root / "data/store/versions.png").exists()


@COMPARED
def test_the_forecast_prices_a_plan_at_this_machines_processes_and_writes_nothing(calibrated):
    """Before spending, on the A/A's project: its plan (two timing blocks of current and current#2) priced at the
    processes its last results hold, against its budget; from the noise record (one or two degrees of freedom a cell,
    as the blocks fell), what it can forecast or that it is too thin; a comparison with an environment not built yet
    says so. Nothing is written; bad input exits 2."""
    root, env = calibrated
    before = {path: path.stat().st_mtime_ns for path in root.rglob("*") if path.is_file()}
    log = _stage("benchmark.forecast", root, env).stderr
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    own = {p["process_id"]: p["wall_s"] - (p["turn_wait_s"] or 0.0) for row in rows for p in row["process_results"]}
    assert len(own) == 4  # two blocks of two timing processes, each listed by the eager and the compiled run
    planned_s = 4 * statistics.median(own.values())
    blocks = {}  # a block run together lasts as long as its longest process: each process's share of the wall
    for process in {p["process_id"]: p for row in rows for p in row["process_results"]}.values():
        blocks.setdefault(process["block"], []).append(process["wall_s"])
    shares = [max(walls) / len(walls) for walls in blocks.values() for _ in walls]
    wall_s = planned_s * statistics.median(shares) / statistics.median(own.values())
    assert "planned: 4 processes (4 timing) for 2 environment(s)" in log, log
    assert (
        f"priced at this machine's 4 earlier processes (data/results/runs.jsonl): the planned blocks take about "
        f"{forecast.minutes(wall_s)} of wall time, which the budget counts" in log
    ), log
    assert f"{forecast.minutes(planned_s)} of the processes' own time)" in log, log
    assert "environment current: built" in log, log
    forecast_lines = [line for line in log.splitlines() if " finds a change of " in line]
    assert all("`equivalent` (within +-10%) in about " in line for line in forecast_lines), log
    assert forecast_lines or "fewer than 2 degrees of freedom" in log, log  # a record this thin: either, as it fell
    assert "ran alone" not in log  # priced at the A/A's blocks, which ran together as the plan's will
    unbuilt = _stage(
        "benchmark.forecast",
        root,
        env,
        "--set",
        "environments.pinned={pins: {transformers: 4.56.2}}",
        "--set",
        "compare=[current,pinned]",
    ).stderr
    assert "environment pinned: not built yet" in unbuilt, unbuilt
    fresh = _stage(
        "benchmark.forecast",
        root,
        env,
        "--set",
        "compare=[current,pinned]",
        "--set",
        "paths.calibration=none.json",
        "--set",
        "environments.pinned={pins: {transformers: 4.56.2}}",
    ).stderr
    assert "no noise record of this machine" in fresh and "an A/A first (`make compare B=current`" in fresh, fresh
    assert {path: path.stat().st_mtime_ns for path in root.rglob("*") if path.is_file()} == before
    bad = subprocess.run(
        [sys.executable, "-m", "compilebench.benchmark.forecast", "--set", "compare=[current,nosuch]"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "unknown environment 'nosuch'" in bad.stderr, bad.stderr


SHAPES = """
import json, sys
from pathlib import Path
from PIL import Image
from compilebench.harness import models
root, image, mode = Path(sys.argv[1]), Image.open(sys.argv[2]).convert("RGB"), sys.argv[3]
shapes = {}
for card in models.registry().values():
    folder = root / card.slug("full")
    if mode == "write":
        models.processor_from(card.processor_class, models.processor_kwargs(card)).save_pretrained(folder)
    inputs, _ = models.single_inputs(card, models.load_processor(folder), image)
    shapes[card.hub_id] = {key: list(value.shape) for key, value in inputs.items()}
print(json.dumps(shapes))
"""


def test_published_processors_give_the_same_inputs_under_transformers_4(repo_root, image_640x480, tmp_path):
    """Processor configs written here (transformers 5) read in 4.57.6 give the published input shapes, all 12."""
    env = project_env()
    pins = venvs.resolve(venvs.project_pins(repo_root), {"transformers": "4.57.6"})
    python = venvs.build(OTHER, pins, repo_root / ".compilebench" / "environments").python
    script, image = tmp_path / "shapes.py", tmp_path / "input.jpg"
    script.write_text(SHAPES)
    image_640x480.save(image)
    written = run_ok([sys.executable, str(script), str(tmp_path), str(image), "write"], tmp_path, env)  # transformers 5
    read = run_ok(
        [python, str(script), str(tmp_path), str(image), "read"],
        tmp_path,
        {**env, "PYTHONPATH": str(repo_root / "src")},
    )
    shapes_5, shapes_4 = (json.loads(done.stdout.splitlines()[-1]) for done in (written, read))
    assert shapes_4 == shapes_5 and len(shapes_4) == 12
    assert shapes_4["facebook/detr-resnet-50"]["pixel_values"] == [1, 3, 800, 1066]
    assert shapes_4["facebook/maskformer-swin-base-ade"]["pixel_values"] == [1, 3, 640, 864]


def test_an_environment_that_cannot_be_built_fails_before_any_work(tmp_path):
    root = make_project(tmp_path, ["microsoft/resnet-50"])
    set_params(root, compare=["current", "ancient"], **{"environments.ancient": {"pins": {"torch": "0.0.1"}}})
    env = project_env()
    for stage in ("fetch_image", "load_models"):
        _stage(stage, root, env)
    done = subprocess.run(
        [sys.executable, "-m", "compilebench.benchmark"], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 2, done.stderr[-2000:]
    said = done.stderr  # the index refuses it first where it can be read, else the build (uv's resolver)
    assert "environment 'ancient'" in said and (
        "torch 0.0.1 is not a release on the package index" in said or "torch==0.0.1" in said
    )
    assert "Traceback" not in done.stderr
    assert not (root / "data/results").exists() and not (root / "mlruns").exists()


def test_a_built_environment_harmed_since_is_refused_with_how_to_mend_it(tmp_path):
    """Issue 89, item 3: a venv marked built whose torch (or interpreter) was deleted since is refused before any
    trial, in one line naming what it lacks and how to have it built again; nothing of it is removed or rebuilt."""
    (tmp_path / "project").mkdir()
    root, cache = make_project(tmp_path / "project", ["microsoft/resnet-50"]), tmp_path / "environments"
    set_params(root, **{"paths.environments": str(cache), "environments.harmed": {"pins": {"torch": "2.4.1"}}})
    pins = venvs.resolve(venvs.project_pins(root), {"torch": "2.4.1"})
    folder = venvs.folder_of("harmed", pins, cache)
    run_ok([sys.executable, "-m", "venv", "--without-pip", str(folder)], tmp_path, project_env())  # no torch in it
    (folder / venvs.READY_MARKER).write_text(json.dumps({"name": "harmed", "pins": pins, "python": "3.11"}))
    made = subprocess.run(
        [sys.executable, "-m", "compilebench.environments", "harmed"],
        cwd=root,
        env=project_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 2 and "Traceback" not in made.stderr, made.stderr[-2000:]
    assert (
        "environment 'harmed'" in made.stderr and "torch, transformers, numpy no longer installed in it" in made.stderr
    )
    assert "python -m compilebench.environments --remove harmed" in made.stderr
    (folder / "bin" / "python").unlink()
    with pytest.raises(venvs.BuildError, match=r"is broken: its interpreter .*bin/python is gone"):
        venvs.build("harmed", pins, cache)
    assert (folder / venvs.READY_MARKER).exists() and not (folder / "build.log").exists()  # nothing rebuilt


def test_built_environments_are_listed_with_their_size_and_the_unused_ones_removed(tmp_path, repo_root):
    """Issue 79, item 5: each built environment's size on disk (files hard-linked from uv's wheel cache counted as
    shared), whether it is still in use, and `--remove-unused` removing only those that are not, refused
    while a pipeline of the project holds its lock."""
    import fcntl
    import os

    cache, elsewhere = tmp_path / "environments", tmp_path / "uv-cache"
    project = venvs.project_pins(repo_root)
    wanted = venvs.folder_of("current", project, cache)
    old = venvs.folder_of("torch-2.4.1", venvs.resolve(project, {"torch": "2.4.1"}), cache)
    elsewhere.mkdir()
    for folder, pins in ((wanted, project), (old, {**project, "torch": "2.4.1"})):
        (folder / "lib").mkdir(parents=True)
        (folder / "lib" / "own.so").write_bytes(os.urandom(300_000))
        (elsewhere / f"{folder.name}.whl-file").write_bytes(os.urandom(200_000))
        os.link(elsewhere / f"{folder.name}.whl-file", folder / "lib" / "shared.so")  # as uv installs from its cache
        (folder / venvs.READY_MARKER).write_text(
            json.dumps({"name": folder.name.rsplit("-", 1)[0], "pins": pins, "python": "3.11.7"})
        )
    (cache / "half-built-0123456789ab").mkdir()  # no marker: not an environment, never listed or removed
    built = venvs.built_environments(cache, {wanted})
    assert sorted((b.name, b.wanted) for b in built) == [("current", True), ("torch-2.4.1", False)]
    for entry in built:
        assert 480_000 <= entry.disk_bytes <= 600_000 and 190_000 <= entry.shared_bytes <= 220_000, entry
    text = venvs.listing(built)
    assert "torch-2.4.1" in text and "2.4.1" in text and f"no: {old.name}" in text and "--remove-unused" in text
    lock = tmp_path / ".dvc" / "tmp" / "pipeline.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:  # a make run of this project
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(venvs.BuildError, match="nothing removed"):
            venvs.remove(built, [], True, lock)
    assert old.exists()
    with pytest.raises(venvs.BuildError, match=r"no built environment \['torch-9.9'\]"):
        venvs.remove(built, ["torch-9.9"], False, lock)
    gone = venvs.remove(built, [], True, lock)
    assert [entry.folder for entry in gone] == [old] and not old.exists() and wanted.exists()
    assert (cache / "half-built-0123456789ab").exists() and (elsewhere / f"{old.name}.whl-file").exists()


def test_a_venv_a_benchmark_runs_on_is_not_removed_from_another_project(tmp_path, repo_root):
    """Issue 89, item 6: two projects share one folder of environments; while one's benchmark holds a venv
    (venvs.stacks, in a process of its own), `--remove` from the other is refused in one line, nothing
    removed; once that process has ended, the venv goes."""
    import site

    cache = tmp_path / "shared-environments"
    pins = venvs.resolve(venvs.project_pins(repo_root), {"torch": "2.4.1"})
    folder = venvs.folder_of("torch-2.4.1", pins, cache)
    run_ok([sys.executable, "-m", "venv", "--without-pip", str(folder)], tmp_path, project_env())
    [packages] = folder.glob("lib/python*/site-packages")  # torch and the rest: the project's, seen through a .pth
    (packages / "project.pth").write_text(site.getsitepackages()[0] + "\n")
    (folder / venvs.READY_MARKER).write_text(json.dumps({"name": "torch-2.4.1", "pins": pins, "python": "3"}))
    selected = {"name": "torch-2.4.1", "label": "torch-2.4.1", "pins": pins}
    holder = (
        "import sys, time\nfrom pathlib import Path\nfrom compilebench.environments import venvs\n"
        "from compilebench.records.selection import SelectedEnvironment\n"
        f"venvs.stacks([SelectedEnvironment(**{selected!r})], Path('.'), Path({str(cache)!r}))\n"
        "print('holding', flush=True)\ntime.sleep(120)\n"
    )
    benchmark = subprocess.Popen(
        [sys.executable, "-c", holder], cwd=tmp_path, env=project_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert benchmark.stdout.readline().strip() == "holding"
        other = tmp_path / "other-project"  # not a DVC project: its own pipeline lock is not what stops it
        other.mkdir()
        built = venvs.built_environments(cache, set())
        with pytest.raises(venvs.BuildError, match=r"\['torch-2.4.1'\] in use by a running benchmark"):
            venvs.remove(built, ["torch-2.4.1"], False, other / ".dvc" / "tmp" / "pipeline.lock")
        assert (folder / venvs.READY_MARKER).exists()
    finally:
        benchmark.kill()  # the process this test started, by its handle
        benchmark.wait(timeout=30)
    gone = venvs.remove(built, ["torch-2.4.1"], False, other / ".dvc" / "tmp" / "pipeline.lock")
    assert [entry.folder for entry in gone] == [folder] and not folder.exists()


def test_the_venvs_the_last_run_ran_on_stay_in_use(tmp_path):
    """A series names releases on the command line only (`make series`): params.yaml does not hold them, yet the
    venvs its last run measured stay in use until another run replaces it; a cut-short line is skipped."""
    cache, results = tmp_path / "environments", tmp_path / "runs.jsonl"
    lines = [
        {"environment": "torch-2.15.0#2", "environment_name": "torch-2.15.0", "environment_key": "ab9e7ead030a"},
        {"environment": "torch-2.0.1", "environment_name": "torch-2.0.1", "environment_key": "0123456789ab"},
    ]
    results.write_text("\n".join(json.dumps(line) for line in lines) + '\n{"environment_name": "torch-2.3')
    assert venvs.last_run_folders(results, cache) == {
        (cache / "torch-2.15.0-ab9e7ead030a").resolve(),
        (cache / "torch-2.0.1-0123456789ab").resolve(),
    }
    assert venvs.last_run_folders(tmp_path / "none.jsonl", cache) == set()


def test_an_environment_is_built_on_the_python_it_names():
    """`environments.NAME.python`: pyenv's interpreter of that version (or pythonX.Y on PATH), its full version
    recorded; a version the machine lacks is an error naming it and how to get it."""
    if not venvs.pyenv_versions("3.10") and not shutil.which("python3.10"):
        pytest.skip("no Python 3.10 here")
    python, version = venvs.interpreter("3.10", "old")
    assert (
        version.startswith("3.10.")
        and subprocess.run([python, "-c", "import sys; assert sys.version_info[:2] == (3, 10)"]).returncode == 0
    )
    assert venvs.interpreter("")[0] == sys.executable
    with pytest.raises(
        venvs.BuildError,
        match=r"environment 'old' asks for Python 3\.99: none found.*pyenv "
        r"install 3\.99",
    ):
        venvs.interpreter("3.99", "old")


def test_a_machine_cap_on_a_pinned_package_gives_way_to_the_pin(tmp_path):
    """pip's machine-wide constraint (here PIP_CONSTRAINT, as /etc/xdg/pip sets torch<=2.14.1) is copied without
    the lines of the packages an environment pins; every other constraint stays, and uv is pointed at the copy."""
    caps = tmp_path / "caps.txt"
    caps.write_text("# lie on disk\ntorch<=2.14.1\ntorchvision<=0.29.1\nNumPy<3\n")
    folder = tmp_path / "env"
    folder.mkdir()
    code = (
        "import json, sys; from pathlib import Path; from compilebench.environments import installer\n"
        "released = installer.released_constraints(sys.executable, {'torch', 'numpy'}, Path(sys.argv[1]))\n"
        "print(json.dumps([released, installer.install_command('/x/python', ['torch==2.15.0'], sys.executable,"
        " released)]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        capture_output=True,
        text=True,
        check=True,
        env={**project_env(), "PIP_CONSTRAINT": str(caps)},
    )
    released, command = json.loads(done.stdout)
    copy = released[str(caps)]
    assert Path(copy).read_text() == "# lie on disk\ntorchvision<=0.29.1\n"
    assert copy in command and str(caps) not in command
