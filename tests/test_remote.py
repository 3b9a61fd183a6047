"""A plan measured on another machine: `benchmark --export`, the launcher run from the exported copy alone (as on a
bare GPU box), the pipeline's own loop adding blocks there, a second window resuming, `--ingest` logging once."""

import csv
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import uuid

import mlflow
import pytest
from conftest import OTHER, make_dry_run, make_project, project_env, run_ok, set_params

from compilebench import runner
from compilebench.benchmark import exported as exported_module
from compilebench.benchmark.exported import NOT_RUN_YET
from compilebench.records.reading import plan_digest
from compilebench.records.selection import Selection

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.xdist_group("remote")]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny one-model plan (eager and default, two blocks, an unreachable speedup target, a cap of three blocks),
    exported and run by its launcher twice: the second run is a later window finding everything done."""
    root = make_project(
        tmp_path_factory.mktemp("remote"), ["microsoft/resnet-50"], replicates=2, max_replicates=3, budget_min=30
    )
    set_params(root, **{"benchmark.target.speedup": 0.001})
    env = project_env()
    run_ok([sys.executable, "-m", "compilebench.fetch_image"], root, env)
    folder = root / "gpu-run"
    export = run_ok([sys.executable, "-m", "compilebench.benchmark", "--export", str(folder)], root, env)
    bare = {key: value for key, value in env.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}  # a GPU box's
    windows = [run_ok([sys.executable, "runner.pyz", "plan.json", "results"], folder, bare) for _ in range(2)]
    return root, folder, env, export, windows


def test_the_launcher_adds_blocks_with_the_pipelines_loop_and_a_later_window_resumes(exported):
    root, folder, _, export, windows = exported
    assert "no estimate of the plan's time" in export.stderr  # a CPU plan: the GPU cost table does not apply
    assert not (folder / "compilebench").exists() and (folder / "runner.pyz").is_file()  # what travels: one file
    plan = json.loads((folder / "plan.json").read_text())
    assert plan["adaptive"]["settings"]["max_replicates"] == 3 and plan["adaptive"]["labels"] == ["current"]
    added = [json.loads(line) for line in (folder / "results" / "added.jsonl").read_text().splitlines()]
    assert sorted((spec["variant"]["name"], spec["replicate"]) for spec in added) == [("default", 2), ("eager", 2)]
    assert "adaptive: 2 more trial(s)" in windows[0].stderr  # the cap: a third block, then no more
    results = [json.loads(line) for line in (folder / "results" / "trials.jsonl").read_text().splitlines()]
    assert len(results) == len(plan["trials"]) + len(added) == 6
    assert "(done before)" in windows[1].stderr and "adaptive:" not in windows[1].stderr  # nothing measured again
    assert not any(str(root / "src") in path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep))


def test_ingest_logs_every_trial_once_the_added_blocks_included(exported):
    root, folder, env, _, _ = exported
    for _ in range(2):  # a second ingest finds every run in the store and logs none again
        run_ok([sys.executable, "-m", "compilebench.benchmark", "--ingest", str(folder)], root, env)
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    default = next(row for row in rows if row["variant"] == "default")
    assert [(p["kind"], p["replicate"]) for p in default["process_results"]] == [("arm", 0), ("arm", 1), ("arm", 2)]
    info = json.loads((root / "data/results/run_info.json").read_text())
    assert (info["planned_processes"], info["trials"]) == (2, 6)  # two planned blocks; the loop added the third
    [speedup] = [row for row in info["targets"] if row["variant"] == "default" and row["metric"] == "speedup"]
    assert (speedup["blocks"], speedup["met"], speedup["target_pct"]) == (3, False, pytest.approx(0.1, rel=0.01))
    assert speedup["halfwidth_pct"] > 0.1  # what the launcher's loop judged there, for the next window to size
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    logged = mlflow.search_runs(experiment_names=["compilebench"], filter_string="tags.mlflow.parentRunId != ''")
    assert len(logged) == 2 and logged["tags.compilebench.run_uid"].is_unique  # eager and default, once each
    # the one runner that travelled: its digest in the plan, in every line it wrote, in every run and MLflow run
    digest = runner.digest_of((folder / runner.RUNNER).read_bytes())
    assert json.loads((folder / "plan.json").read_text())["runner_sha256"] == digest
    lines = [json.loads(line) for line in (folder / "results" / "trials.jsonl").read_text().splitlines()]
    assert {line["runner_sha256"] for line in lines} == {digest}
    assert {row["runner_sha256"] for row in rows} == {digest} and set(logged["params.runner_sha256"]) == {digest}
    readme = (folder / "README.md").read_text()  # the export's, replaced by the record's once results are back
    assert NOT_RUN_YET not in readme.splitlines()
    assert "trials came back:" in readme and f"make ingest FROM={folder.as_posix()}" in readme
    (folder / "README.md").write_text("mine\n")  # a README a person wrote is left as it is
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--ingest", str(folder)], root, env)
    assert (folder / "README.md").read_text() == "mine\n"


def test_ingest_refuses_lines_another_runner_wrote(exported, tmp_path):
    root, folder, env, _, _ = exported
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    lines = (copy / "results" / "trials.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "runner_sha256": "f" * 64})
    (copy / "results" / "trials.jsonl").write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "compilebench.benchmark", "--ingest", str(copy)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and "was measured by runner ffffffffffff" in done.stderr, done.stderr[-2000:]
    assert "key 'runner_sha256'" in done.stderr and "nothing ingested" in done.stderr


def test_a_plan_whose_launcher_has_not_finished_is_written_but_not_logged_until_it_has(exported, tmp_path):
    root, folder, env, _, _ = exported
    copy = tmp_path / "window-1"  # the same results as a new invocation, brought back before the plan finished
    shutil.copytree(folder, copy)
    invocation = uuid.uuid4().hex
    plan = json.loads((copy / "plan.json").read_text())
    (copy / "plan.json").write_text(json.dumps({**plan, "invocation_id": invocation}))
    digest = plan_digest(copy / "plan.json")  # a new plan: what its export, its launcher and its lines name
    for name, keys in (("export.json", ["context", "invocation_id"]), ("results/environment.json", ["invocation_id"])):
        tree = json.loads((copy / name).read_text())
        (tree if len(keys) == 1 else tree[keys[0]])[keys[-1]] = invocation
        (copy / name).write_text(json.dumps({**tree, "plan_sha256": digest}))
    lines = (copy / "results" / "trials.jsonl").read_text().splitlines()
    (copy / "results" / "trials.jsonl").write_text(
        "".join(json.dumps({**json.loads(line), "plan_sha256": digest}) + "\n" for line in lines)
    )
    (copy / "results" / "finished.json").unlink()
    store = f"sqlite:///{root}/mlruns/mlflow.db"
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--ingest", str(copy)], root, env)
    run_info = json.loads((root / "data/results/run_info.json").read_text())
    assert "has not finished this plan" in run_info["not_logged"] and run_info["invocation_id"] == invocation
    for stage in ("aggregate", "plot", "sync"):  # the readers of run_info write their files and log nothing
        run_ok([sys.executable, "-m", f"compilebench.{stage}"], root, env)
    assert "Not logged to MLflow" in (root / "data/report/report.md").read_text()
    mlflow.set_tracking_uri(store)
    tagged = f"tags.`compilebench.invocation` = '{invocation}'"
    assert mlflow.search_runs(experiment_names=["compilebench"], filter_string=tagged).empty  # no parent either
    (copy / "results" / "finished.json").write_text((folder / "results" / "finished.json").read_text())
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--ingest", str(copy)], root, env)
    logged = mlflow.search_runs(
        experiment_names=["compilebench"], filter_string=f"tags.`compilebench.run_uid` LIKE '{invocation}/%'"
    )
    assert len(logged) == 2  # once it finished: eager and default


def test_ingest_refuses_lines_of_another_plan_a_plan_edited_since_and_a_result_without_its_samples(exported, tmp_path):
    """Each refused with the file, line or trial and key named, exit 2, nothing logged or written."""
    root, folder, env, _, _ = exported
    results = root / "data" / "results" / "runs.jsonl"
    before = results.read_bytes() if results.exists() else None
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    logged = len(mlflow.search_runs(experiment_names=["compilebench"]))
    lines = (folder / "results" / "trials.jsonl").read_text().splitlines()
    assert all(json.loads(line)["plan_sha256"] == plan_digest(folder / "plan.json") for line in lines)
    foreign = {**json.loads(lines[0]), "plan_sha256": "0" * 64}  # another plan's line, for a trial id of this one
    plan = json.loads((folder / "plan.json").read_text())
    edited = json.loads(json.dumps(plan))
    for trial in edited["trials"]:
        if trial["variant"]["name"] == "default":
            trial["variant"]["mode"] = "max-autotune"  # measured as `default`, to be logged as max-autotune
    measured = next(i for i, line in enumerate(lines) if json.loads(line)["status"] == "ok")
    emptied = [
        line if i != measured else json.dumps({**json.loads(line), "eager_ms": []}) for i, line in enumerate(lines)
    ]
    cases = [
        (
            {"results/trials.jsonl": "\n".join([*lines, json.dumps(foreign)]) + "\n"},
            f"line {len(lines) + 1}: key 'plan_sha256' names another plan",
        ),
        ({"plan.json": json.dumps(edited)}, "plan.json was edited after export"),
        ({"results/trials.jsonl": "\n".join(emptied) + "\n"}, "but its key 'eager_ms' is empty or missing"),
        (
            {
                "results/trials.jsonl": "\n".join([*lines, json.dumps({**json.loads(lines[0]), "trial_id": "../../x"})])
                + "\n"
            },
            "key 'trial_id' '../../x' names no trial of the plan",
        ),
        (
            {
                "results/checkpoints.json": json.dumps(
                    [
                        {**entry, "folder": "../../elsewhere"}
                        for entry in json.loads((folder / "results/checkpoints.json").read_text())
                    ]
                )
            },
            "has key 'folder' '../../elsewhere'; a checkpoint's folder is checkpoints/<model> inside the export",
        ),
    ]
    for number, (changes, needle) in enumerate(cases):
        copy = tmp_path / f"case{number}"
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("work", "shared-cache", "checkpoints"))
        for name, text in changes.items():
            (copy / name).write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "compilebench.benchmark", "--ingest", str(copy)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (results.read_bytes() if results.exists() else None) == before
    assert len(mlflow.search_runs(experiment_names=["compilebench"])) == logged


GPU_PLAN = [
    "device=cuda",
    "benchmark.compile_cache=shared",
    "benchmark.replicates=5",
    "benchmark.max_replicates=10",
    "benchmark.min_iters=100",
    "benchmark.min_time_s=4",
]


def _gpu_export(exported, folder, suite: str, *sets: str) -> tuple[str, int, int, dict]:
    """`suite` exported for a GPU into `folder`: the log's line estimating GPU minutes, the minutes and the processes
    it names, and the plan."""
    root, _, env, _, _ = exported
    arguments = [arg for value in [f"suite={suite}", *GPU_PLAN, *sets] for arg in ("--set", value)]
    done = run_ok([sys.executable, "-m", "compilebench.benchmark", "--export", str(folder), *arguments], root, env)
    [line] = [line for line in done.stderr.splitlines() if "GPU minutes" in line]
    minutes = int(line.split("estimated ")[1].split(" GPU minutes")[0])
    processes = int(line.split(" for ")[1].split(" processes")[0])
    return line, minutes, processes, json.loads((folder / "plan.json").read_text())


PAPER_BS1 = ("suites.paper.batch_sizes=[1]", "suites.paper.cells=published")  # the doc's 16 batch-1 cells


@pytest.fixture(scope="module")
def paper_bs1(exported, tmp_path_factory):
    return _gpu_export(exported, tmp_path_factory.mktemp("paper") / "paper-bs1", "paper", *PAPER_BS1)


def test_an_export_for_a_gpu_prints_its_estimated_minutes_and_refuses_nothing(paper_bs1):
    line, minutes, processes, plan = paper_bs1
    assert 10 <= minutes <= 120 and "NVIDIA H100" in line and processes == 60  # 12 models x 5 blocks
    assert len({trial["model"]["model_id"] for trial in plan["trials"]}) == 12 and len(plan["recipes"]) == 12
    reduce = {trial["model"]["label"] for trial in plan["trials"] if trial["variant"]["name"] == "reduce-overhead"}
    assert len(plan["trials"]) == 60 * 2 + 4 * 5 and len(reduce) == 4  # `cells: published`: the doc's 16 cells


def _compiled_cells(plan: dict) -> list[tuple[str, str]]:
    return sorted({(t["model"]["model_id"], t["variant"]["name"]) for t in plan["trials"] if t["variant"]["compile"]})


def test_an_export_splits_paper_bs1_into_gpu_windows_that_hold_its_16_cells_each_once(exported, paper_bs1, tmp_path):
    """A GPU machine at hand for a fixed time: at four processes a model, with the prime eight at a time,
    `--window-min 11` packs the doc's batch-1 cells into windows estimated at no more than 11 minutes each, its prime
    included, each a plan of its own; without a GPU's costs to split by, it is refused."""
    root, _, env, _, _ = exported
    sets = ["suite=paper", *PAPER_BS1, *GPU_PLAN, "budget_min=0", "benchmark.replicates=4"]
    command = [
        sys.executable,
        "-m",
        "compilebench.benchmark",
        "--export",
        str(tmp_path / "bs1"),
        "--window-min",
        "11",
        "--prime",
        "8",
        *[arg for value in sets for arg in ("--set", value)],
    ]
    done = run_ok(command, root, env)
    folders = sorted(tmp_path.iterdir())
    assert [folder.name for folder in folders] == [f"bs1-w{n}" for n in range(1, len(folders) + 1)]
    plans = [json.loads((folder / "plan.json").read_text()) for folder in folders]
    assert sorted(cell for window in plans for cell in _compiled_cells(window)) == _compiled_cells(paper_bs1[3])
    in_all = [float(minutes) for minutes in re.findall(r"; ([0-9.]+) minutes in all with the prime 8", done.stderr)]
    assert len(in_all) == len(folders) == 3 and all(minutes <= 11 for minutes in in_all), done.stderr[-2000:]
    assert len({window["invocation_id"] for window in plans}) == 3
    per_minute = [len(_compiled_cells(window)) / minutes for window, minutes in zip(plans, in_all, strict=True)]
    # the window judging most cells a minute first (the minutes printed are rounded to a tenth)
    assert all(first >= then * 0.98 for first, then in itertools.pairwise(per_minute)), per_minute
    for n, (folder, window) in enumerate(zip(folders, plans, strict=True), start=1):
        models = {trial["model"]["model_id"] for trial in window["trials"]}
        assert {recipe["model_id"] for recipe in window["recipes"]} == models
        saved = json.loads((folder / "export.json").read_text())
        assert saved["selection"]["suite"] == window["adaptive"]["context"]["suite"] == f"paper-w{n}"
        assert {model["model_id"] for model in saved["selection"]["models"]} == models
        assert (folder / "runner.pyz").is_file() and (folder / "image.jpg").exists()
        assert window["runner_sha256"] == plans[0]["runner_sha256"]  # the windows share one runner
        readme = (folder / "README.md").read_text()  # until its results are back: what it is, costs, and how to run
        assert NOT_RUN_YET in readme.splitlines() and f"paper-w{n}" in readme and f"window {n} of 3" in readme
        assert f"{in_all[n - 1]} minutes in all with the prime 8" in readme
        assert f"{len(window['trials'])} trials in 16 processes" in readme
        assert f"cd {folder.name} && python runner.pyz plan.json results --prime 8" in readme
    for folder in folders[:2]:
        shutil.rmtree(folder)
    again = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "bs1-w3 holds a plan" in again.stderr  # all windows written, or none
    assert sorted(tmp_path.iterdir()) == folders[2:]
    cpu = subprocess.run(
        [*command[:4], str(tmp_path / "cpu"), "--window-min", "11"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert cpu.returncode == 2 and "device cuda" in cpu.stderr and not (tmp_path / "cpu-w1").exists()


def test_make_gpu_plan_checks_its_first_window_on_this_cpu_before_a_gpu_is_lent(exported, tmp_path):
    """`make gpu-plan`'s own commands, read from the Makefile, in a project (the paper suite narrowed to ViT-B/16, its
    three published cells, for time): the cells exported as GPU windows, then the first window's runner runs that
    window's first trial once on this CPU. A key the config no longer takes, a stale export or a recipe that cannot be
    built fails here; the check writes nothing beside the plan. A plan whose first model has neither a recipe nor a
    checkpoint is refused with its reason."""
    root, _, env, _, _ = exported
    line = make_dry_run("gpu-plan", f"DIR={tmp_path / 'gpu'}")
    line = line[line.index("python -m compilebench.benchmark") :]
    narrowed = line.replace(
        "--set suite=paper", "--set suite=paper --set suites.paper.models=[google/vit-base-patch16-224]"
    )
    assert narrowed != line
    done = run_ok(["bash", "-c", narrowed], root, env)
    first = tmp_path / "gpu-w1"
    plan = json.loads((first / "plan.json").read_text())
    trial = plan["trials"][0]
    said = f"check on the CPU: {trial['model']['label']} bs{trial['batch_size']} {trial['variant']['name']}"
    assert said in done.stdout and "ended ok" in done.stdout, done.stdout[-2000:]
    assert trial["timing"]["device"] == "cuda"  # the GPU's plan, its first trial run on the CPU
    assert not (first / "results").exists() and not (first / "checkpoints").exists()  # nothing beside the plan
    plan["trials"][0]["model"]["model_id"] = "nobody/no-such-model"  # its recipe no longer matches
    (first / "plan.json").write_text(json.dumps(plan))
    bare = {key: value for key, value in env.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    broken = subprocess.run(
        [sys.executable, "runner.pyz", "plan.json", "results", "--check-on-cpu"],
        cwd=first,
        env=bare,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert broken.returncode == 2 and "nobody/no-such-model, which has neither a checkpoint recipe" in broken.stderr
    assert "Traceback" not in broken.stderr and not (first / "results").exists()


@pytest.mark.parametrize("minutes", ["nan", "0", "-3", "inf"])
def test_a_window_that_is_no_positive_number_of_minutes_is_refused(exported, tmp_path, minutes):
    root, _, env, _, _ = exported
    sets = ["suite=paper", *PAPER_BS1, *GPU_PLAN]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "compilebench.benchmark",
            "--export",
            str(tmp_path / "w"),
            "--window-min",
            minutes,
            *[a for value in sets for a in ("--set", value)],
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and "--window-min must be a positive number of minutes" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())


def test_windows_shorter_than_a_unit_say_which_windows_run_over(exported, tmp_path):
    """A (model, batch size) stays whole: asked for windows of 0.01 minutes, each window holds one unit and says that
    it runs over, by how much, and what carries it over."""
    root, _, env, _, _ = exported
    sets = [
        "suite=paper",
        "suites.paper.batch_sizes=[1]",
        "suites.paper.cells=published",
        "suites.paper.models=[microsoft/resnet-50,google/vit-base-patch16-224]",
        *GPU_PLAN,
    ]
    done = run_ok(
        [
            sys.executable,
            "-m",
            "compilebench.benchmark",
            "--export",
            str(tmp_path / "w"),
            "--window-min",
            "0.01",
            *[a for value in sets for a in ("--set", value)],
        ],
        root,
        env,
    )
    over = [line for line in done.stderr.splitlines() if "over --window-min 0.01" in line]
    assert len(over) == 2 == len(list(tmp_path.iterdir())) and all("a window of its own" in line for line in over)


def test_two_settings_on_the_other_machines_own_stack_are_two_environments_there(exported, tmp_path):
    """TF32 off and on, say: a plan comparing the machine's own stack with itself run another way names that machine's
    own interpreter for both, each process of the other environment takes its settings, and ingest keys the two
    environments apart (one package list, two keys: never an A/A)."""
    root, _, env, _, _ = exported
    sets = ["compare=[current,tf32]", "environments.tf32.settings.float32_matmul_precision=high", *GPU_PLAN]
    done = run_ok(
        [
            sys.executable,
            "-m",
            "compilebench.benchmark",
            "--export",
            str(tmp_path / "tf32"),
            *[arg for value in sets for arg in ("--set", value)],
        ],
        root,
        env,
    )
    command = 'python runner.pyz plan.json results --python tf32="$(command -v python)"'
    readme = (tmp_path / "tf32" / "README.md").read_text()
    assert command in done.stderr and command in readme
    assert "compared: `current`, `tf32` (`current`'s interpreter with float32_matmul_precision high)." in readme
    trials = json.loads((tmp_path / "tf32" / "plan.json").read_text())["trials"]
    precision = {(trial["environment"], trial["timing"]["float32_matmul_precision"]) for trial in trials}
    assert precision == {("current", "highest"), ("tf32", "high")}
    selection = Selection.from_dict(json.loads((tmp_path / "tf32" / "export.json").read_text())["selection"])
    freeze = ["torch==2.11.0", "transformers==5.17.0"]
    remote = {
        "freeze": freeze,
        "environments": {label: {"python": "/usr/bin/python3", "freeze": freeze} for label in ("current", "tf32")},
    }
    info = exported_module.found_environments(selection, remote, "gpu-box")
    assert info["tf32"].settings == {"float32_matmul_precision": "high"} and info["current"].settings == {}
    assert info["tf32"].pins == info["current"].pins == {"torch": "2.11.0", "transformers": "5.17.0"}
    assert info["tf32"].key != info["current"].key


def test_an_export_goes_only_into_a_new_or_empty_folder_is_written_whole_and_ingests_only_its_own_results(
    exported, tmp_path
):
    root, folder, env, _, _ = exported

    def export(target, *sets):
        command = [sys.executable, "-m", "compilebench.benchmark", "--export", str(target)]
        return subprocess.run(
            command + [a for s in sets for a in ("--set", s)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    before = {path: path.read_bytes() for path in (folder / "plan.json", folder / "results" / "trials.jsonl")}
    again = export(folder, "suite=paper")  # a plan that has results: replacing it would orphan them
    assert again.returncode == 2 and "holds a plan" in again.stderr and "new or empty folder" in again.stderr
    assert {path: path.read_bytes() for path in before} == before
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    refused = export(busy)
    assert refused.returncode == 2 and "is not an empty folder" in refused.stderr
    assert [path.name for path in busy.iterdir()] == ["notes.txt"]
    spaced = export(tmp_path / "gpu run")  # inductor would compile nothing there
    assert spaced.returncode == 2 and "contains a space" in spaced.stderr and not (tmp_path / "gpu run").exists()
    moved = tmp_path / "moved here"
    shutil.copytree(folder, moved, ignore=shutil.ignore_patterns("results", "checkpoints"))
    launched = subprocess.run(
        [sys.executable, "runner.pyz", "plan.json", "results"],
        cwd=moved,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert launched.returncode == 2 and "contains a space" in launched.stderr and not (moved / "results").exists()
    shutil.rmtree(moved)
    failed = export(tmp_path / "failed", "paths.image=/no/such/image.jpg")
    assert failed.returncode == 2 and "/no/such/image.jpg does not exist" in failed.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["busy"]  # no folder, no .partial
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export(empty).returncode == 0
    assert sorted(path.name for path in empty.iterdir()) == sorted(
        path.name for path in folder.iterdir() if path.name not in ("results", "checkpoints")
    )
    assert (
        json.loads((empty / "plan.json").read_text())["invocation_id"]
        != json.loads(before[folder / "plan.json"])["invocation_id"]
    )
    shutil.copytree(folder / "results", empty / "results", ignore=shutil.ignore_patterns("work", "shared-cache"))
    mixed = subprocess.run(
        [sys.executable, "-m", "compilebench.benchmark", "--ingest", str(empty)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )  # results of the first plan
    assert mixed.returncode == 2 and "holds results of another plan" in mixed.stderr, mixed.stderr


# What a second stack with transformers 4.57.6 carries to a machine without network: the release and the two packages
# it will not import without (this interpreter's tokenizers and huggingface_hub are newer than it allows).
CARRIED = ("transformers==4.57.6", "tokenizers==0.22.2", "huggingface_hub==0.36.2")


def test_a_second_stack_carried_as_wheels_is_compared_on_a_machine_with_one(tmp_path):
    """A comparison exported to a machine with one stack and no network: the second is this interpreter's packages with
    transformers 4.57.6 laid over them from wheels (`runner.pyz --overlay`, the exported runner alone); each
    environment's processes run in its own interpreter, and ingest records each stack as it was found there, so the
    comparison is of two stacks, not an A/A."""
    (tmp_path / "project").mkdir()
    root = make_project(tmp_path / "project", ["microsoft/resnet-50"])
    set_params(root, compare=["current", OTHER])
    env = project_env()
    run_ok([sys.executable, "-m", "compilebench.fetch_image"], root, env)
    folder = root / "gpu-run"
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--export", str(folder)], root, env)
    wheels = tmp_path / "wheels"
    run_ok(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels), *CARRIED], tmp_path, env
    )
    bare = {key: value for key, value in env.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    made = run_ok(
        [sys.executable, "runner.pyz", "--overlay", str(tmp_path / "stack-b"), *map(str, sorted(wheels.iterdir()))],
        folder,
        bare,
    )
    python, imports = made.stdout.strip().splitlines()[-2:]
    assert json.loads(imports)["transformers"] == "4.57.6"
    run_ok([sys.executable, "runner.pyz", "plan.json", "results", "--python", f"{OTHER}={python}"], folder, bare)
    found = json.loads((folder / "results" / "environment.json").read_text())["environments"]
    assert "transformers==4.57.6" in found[OTHER]["freeze"] and "transformers==4.57.6" not in found["current"]["freeze"]
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--ingest", str(folder)], root, env)
    run_ok([sys.executable, "-m", "compilebench.aggregate"], root, env)
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    by_label = {row["environment"]: row for row in rows if row["variant"] == "default"}
    assert by_label[OTHER]["transformers_version"] == "4.57.6" != by_label["current"]["transformers_version"]
    assert json.loads(by_label[OTHER]["environment_pins"])["transformers"] == "4.57.6"
    assert by_label[OTHER]["environment_key"] != by_label["current"]["environment_key"]  # two stacks, not one
    [compared] = [
        row for row in csv.DictReader((root / "data/results/comparison.csv").open()) if row["variant"] == "default"
    ]
    assert "transformers 4.57.6" in compared["candidate_versions"] and compared["candidate"] == OTHER
