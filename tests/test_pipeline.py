"""The whole pipeline: a real `dvc repro` in a temporary git repo (the shared `compared_project`: two environments,
tiny models), read back from MLflow; what DVC re-runs after which edit; each stage's code dependencies are the
modules it imports."""

import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from conftest import OTHER, SECRETS, project_env, run_ok

from compilebench.analysis import stats

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("compared_project")]

STAGES = ("fetch_image", "load_models", "benchmark", "aggregate", "plot")


@pytest.fixture(scope="module")
def project(compared_project):
    root, env, first, _ = compared_project
    return root, env, first


def _changed(root: Path) -> set[str]:
    """The stages `dvc status` says would run: DVC's own status, asked in this process from the project's folder, as
    the command does (its answer without its second of start-up, a dozen times)."""
    from dvc.repo import Repo

    with contextlib.chdir(root), Repo() as repo:
        return set(repo.status())


def _commit(root: Path) -> None:
    """`dvc commit -f`, in this process: the workspace as it is becomes the recorded state."""
    from dvc.repo import Repo

    with contextlib.chdir(root), Repo() as repo:
        repo.commit(force=True)


def test_outputs_and_tables(project):
    root, _, first = project
    for stage in STAGES:
        assert f"Running stage '{stage}'" in first.stdout
    assert json.loads((root / "data/image/input.json").read_text())["image_source"] == "embedded-fallback"
    manifest = json.loads((root / "data/checkpoints/manifest.json").read_text())
    assert [entry["weights_source"] for entry in manifest] == ["random-init"]
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["status"] == "ok" for row in rows)  # (eager + default) x 2 environments
    assert all(len(row["process_results"]) == 3 for row in rows)  # a cold process, two timing processes
    assert all(len(p["eager_ms"]) >= 3 for row in rows for p in row["process_results"])
    # the cold block's processes ran together and timed in turns after their compile, eager and default paired
    cold = [p for row in rows if row["variant"] == "default" for p in row["process_results"] if p["kind"] == "cold"]
    assert len(cold) == 2 and all(len(p["compiled_ms"]) == len(p["eager_ms"]) == len(p["round_turns"]) for p in cold)
    summary = pd.read_csv(root / "data/results/summary.csv")
    assert sorted(summary["environment"]) == sorted(["current", OTHER])
    assert (summary["speedup"] > 0).all() and summary["eager_latency_ms_mean"].notna().all()
    assert summary["speedup_ci_method"].eq("between-process t").all()
    metrics = json.loads((root / "data/results/metrics.json").read_text())
    assert metrics["runs_ok"] == 2 and f"{OTHER}_default_speedup_geomean" in metrics
    assert metrics["compared_cells"] == 2 and "verdict_informational" in metrics
    figures = sorted(p.name.split("_")[0] for p in (root / "data/plots").glob("*.png"))
    assert figures == [
        "comparison.png",
        "duration",
        "duration",
        "improvement",
        "improvement",
        "speedup",
        "startup",
        "startup",
    ]
    verdicts = pd.read_csv(root / "data/results/verdicts.csv")
    assert set(verdicts["verdict"]) == {"informational"}  # a CPU run is never judged against the doc's GPUs
    assert verdicts["published_speedup_A100"].notna().all()
    report = (root / "data/report/report.md").read_text()
    for heading in (
        "## Environment",
        "## Measured, in the doc's layout",
        "## Environments compared",
        "## Against the published numbers",
        "## Anomalies in the published data",
        "## Start-up: time to first inference in a fresh process",
        "## Failed, invalid or unsupported runs",
        "## Figures",
    ):
        assert heading in report
    assert report.index("## The answer, per model") < report.index("## Environment")  # the answer first
    assert "**Beside the question**" not in report  # B pins transformers otherwise, and differs in nothing else
    assert "| Image Classification/ResNet |" in report and "](../plots/duration_" in report


def test_every_run_is_in_mlflow_with_clean_provenance(project):
    root, _, _ = project
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["compilebench"])
    parents = runs[runs["tags.role"] == "pipeline"]
    children = runs[runs["tags.role"] == "measurement"]
    assert len(parents) == 1 and len(children) == 4
    assert (children["tags.mlflow.parentRunId"] == parents["run_id"].iloc[0]).all()
    for key in (
        "model_id",
        "task",
        "batch_size",
        "variant",
        "compile_mode",
        "inductor_options",
        "device",
        "device_name",
        "torch_version",
        "transformers_version",
        "python_version",
        "cuda_version",
        "dtype",
        "weights_source",
        "image_source",
        "git_commit",
        "environment",
        "environment_key",
        "machine",
        "machine_fingerprint",
        "num_threads",
        "replicates",
        "process_values",
    ):
        assert children[f"params.{key}"].notna().all(), key
    assert set(children["params.transformers_version"]) == {"5.23.0", "4.57.6"}
    commit = run_ok(["git", "rev-parse", "HEAD"], root, project_env()).stdout.strip()
    assert set(children["params.git_commit"]) == {commit}  # the run rewrote dvc.lock; the checkout is still clean
    for key in (
        "latency_ms_mean",
        "latency_ms_median",
        "latency_ms_p90",
        "latency_ms_std",
        "throughput_img_s",
        "peak_mem_mib",
        "latency_ms_median_ci_low",
    ):
        assert children[f"metrics.{key}"].notna().all(), key
    compiled = children[children["tags.compiled"] == "true"]
    assert compiled["metrics.speedup"].notna().all() and compiled["metrics.compile_s"].notna().all()
    run = compiled["run_id"].iloc[0]
    assert {a.path for a in mlflow.artifacts.list_artifacts(run_id=run)} >= {
        "samples.json",
        "compile_health.json",
        "environment",
    }
    freeze = mlflow.artifacts.load_text(f"runs:/{run}/environment/pip-freeze.txt")
    assert "torch==2.13.0" in freeze
    artifacts = mlflow.artifacts.list_artifacts(run_id=parents["run_id"].iloc[0])
    assert {a.path for a in artifacts} >= {"summary", "plots", "report"}
    # what the UI shows: each run's Duration is its measurement's window (processes of seconds, not the ms of logging)
    durations_s = (children["end_time"] - children["start_time"]).dt.total_seconds()
    assert (durations_s > 1).all(), durations_s
    # one comparison's runs alone, by the tag the parent's description gives; the words beside the codes
    invocation = parents["tags.compilebench.invocation"].iloc[0]
    assert (children["tags.compilebench.invocation"] == invocation).all()
    note = parents["tags.mlflow.note.content"].iloc[0]
    assert f"'{invocation}'" in note and "## What changed" in note
    assert note.index("## The answer, per model") < note.index("## What changed")  # the answer first, per model
    candidate = children[(children["params.environment"] == OTHER) & (children["tags.compiled"] == "true")].iloc[0]
    word = candidate["tags.vs_first/compiled_latency"]  # the word first, where a narrow column still shows it
    assert word.split()[0] in ("slower", "faster", "equivalent", "inconclusive") and " B/A " in word, word
    headline = candidate["tags.vs_first/verdict"]  # its word is Holm-adjusted across the invocation's cells
    assert headline.endswith(f" (compiled latency {' '.join(word.split()[1:])})"), headline
    assert headline.split()[0] in ("slower", "faster", "equivalent", "inconclusive"), headline
    name = candidate["tags.mlflow.runName"]  # the runs table's first column answers: the word, what, where
    what = f"{candidate['params.label']} {candidate['params.variant']} · bs{candidate['params.batch_size']}"
    assert name == f"{headline.split()[0]} · {what} · {OTHER}", name
    described = candidate["tags.mlflow.note.content"]  # its page's description: its row in words
    assert described.startswith(f"**{headline.split()[0]}**: {candidate['params.label']} bs"), described
    assert candidate["tags.vs_first/against"].startswith("current (torch ")
    assert candidate["tags.compiled_vs_eager"] in ("faster", "slower", stats.NO_SIGNIFICANT_DIFFERENCE)


def test_no_secret_reaches_the_store(project):
    """Tokens and passwords in the environment appear nowhere in the MLflow store: params, tags, metrics, artifacts."""
    root, _, _ = project
    stored = [root / "mlruns" / "mlflow.db", *(p for p in (root / "mlruns").rglob("*") if p.is_file())]
    for path in stored:
        data = path.read_bytes()
        for secret in SECRETS.values():
            assert secret.encode() not in data, f"{secret} found in {path}"


def _edit(path: Path, change) -> str:
    before = path.read_text()
    path.write_text(change(before))
    return before


def _params(change):
    """An edit of params.yaml's values (the text is rewritten from the parsed file)."""

    def edit(text: str) -> str:
        params = yaml.safe_load(text)
        change(params)
        return yaml.safe_dump(params, sort_keys=False)

    return edit


@pytest.mark.parametrize(
    ("what", "file", "change", "expected"),
    [
        ("a comment in params", "params.yaml", lambda t: t + "\n# just a note\n", set()),
        (
            "an unselected suite",
            "params.yaml",
            _params(lambda p: p["suites"]["paper"].update(batch_sizes=[1, 4])),
            {"fetch_image", "load_models"},
        ),  # load_models reads every suite (a built-in one is in no params key)
        ("the machine's name", "params.yaml", _params(lambda p: p["runner"].update(machine="lab-7")), {"fetch_image"}),
        (
            "the trial timeout",
            "params.yaml",
            _params(lambda p: p["runner"].update(trial_timeout_s=60)),
            {"fetch_image"},
        ),
        (
            "the store's location",
            "params.yaml",
            _params(lambda p: p["paths"].update(tracking_uri="sqlite:///x.db")),
            {"fetch_image"},
        ),
        (
            "an unselected variant",
            "params.yaml",
            _params(lambda p: p["variants"]["max-autotune"].update(dynamic=True)),
            {"fetch_image", "load_models"},
        ),  # load_models rewrites the same selection: benchmark stays
        (
            "an unselected environment",
            "params.yaml",
            _params(lambda p: p["environments"].update({"other": {"pins": {"torch": "2.14.1"}}})),
            {"fetch_image", "load_models"},
        ),
        (
            "what is measured",
            "params.yaml",
            _params(lambda p: p["benchmark"].update(min_iters=4)),
            {"fetch_image", "benchmark"},
        ),
        ("the plot code", "src/compilebench/plot.py", lambda t: t + "\n# a comment\n", {"plot"}),
        ("the report code", "src/compilebench/report/tables.py", lambda t: t + "\n# a comment\n", {"plot"}),
        ("the trial code", "src/compilebench/harness/trial.py", lambda t: t + "\n# a comment\n", {"benchmark"}),
        (
            "the statistics",
            "src/compilebench/analysis/stats.py",
            lambda t: t + "\n# a comment\n",
            {"benchmark", "aggregate", "plot"},
        ),
        ("the project's pins", "requirements.txt", lambda t: t + "\n# a comment\n", {"load_models"}),
    ],
)
def test_dvc_reruns_exactly_what_changed(project, what, file, change, expected):
    root, env, _ = project
    path = root / file
    before = _edit(path, change)
    ran = False
    try:
        assert path.read_text() != before, f"the edit of {what} changed nothing"
        assert _changed(root) == expected, what
        if expected == {"fetch_image", "load_models"}:
            ran = True
            run_ok(["dvc", "repro", "load_models"], root, env)
            assert "benchmark" not in _changed(root)  # the selection it wrote is unchanged
    finally:
        path.write_text(before)  # the file as recorded: nothing else changed unless a stage ran
        if ran:
            _commit(root)  # back to the recorded state
    assert _changed(root) == set()


def test_a_typo_in_params_fails_dvc_repro(project):
    root, env, _ = project
    before = _edit(root / "params.yaml", lambda t: t.replace("benchmark:", "benchmrk:\n  min_iters: 3\nbenchmark:", 1))
    try:
        done = subprocess.run(["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode != 0 and "benchmrk" in done.stdout + done.stderr
    finally:
        (root / "params.yaml").write_text(before)
    again = run_ok(["dvc", "repro"], root, env)  # the failed stage's outputs come back (run or run cache)
    ran = {line for line in again.stdout.splitlines() if line.startswith("Running stage")}
    assert ran <= {"Running stage 'fetch_image':"} and _changed(root) == set()


def test_second_repro_runs_nothing_and_plot_param_reruns_only_plot(project):
    root, env, _ = project
    again = run_ok(["dvc", "repro"], root, env)
    assert "Running stage" not in again.stdout
    experiment = run_ok(["dvc", "exp", "run", "-S", "plot.dpi=60"], root, env)
    ran = [line for line in experiment.stdout.splitlines() if line.startswith("Running stage")]
    assert ran == ["Running stage 'fetch_image':", "Running stage 'plot':"], experiment.stdout


def test_explain_profiles_on_the_comparison_s_warm_cache_where_it_was_used(project, tmp_path):
    """A benchmark that ended leaves its warm inductor caches where its processes used them (its journal gone);
    `make explain`'s command profiles a cell on them, in place (inductor's keys hold the cache's path), each generated
    kernel named, its graph found in inductor's FX graph cache as the timing processes found it. Its MLflow
    artifacts go to a store of its own here, and its folder is removed after: the shared project stays as its other
    tests read it."""
    root, env, _ = project
    caches = root / "data/journal/inductor-cache"
    assert not (root / "data/journal/invocation.json").exists()  # nothing to resume
    for label in ("current", OTHER):
        cache = caches / label / "microsoft--resnet-50" / "bs1"
        assert cache.is_dir() and any(cache.rglob("*.py")), sorted(caches.rglob("*"))[:20]
    apart = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'explain.db'}"}
    try:
        run_ok([sys.executable, "-m", "compilebench.explain", "--cell", "microsoft/resnet-50 1 default"], root, apart)
        rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
        for label in ("current", OTHER):
            side = root / "data/explain/microsoft--resnet-50-bs1-default" / label
            result = json.loads((side / "result.json").read_text())
            profile = json.loads((side / "profile.json").read_text())
            assert result["cache"] == "warm" and result["status"] == "ok", result
            counters = result["health"]["inductor_counters"]
            assert counters.get("fxgraph_cache_hit", 0) > 0 and "fxgraph_cache_miss" not in counters, counters
            events = profile["rounds"][0]["events"]
            assert profile["kernels_named"] > 0 and any(name.startswith("cpp_fused") for name in events)
            assert profile["code"]["kept"] and list((side / "code").rglob("*.py"))
            assert any(r["environment"] == label and r["variant"] == "default" for r in rows)
        assert "warm inductor cache" in (root / "data/explain/report.md").read_text()
    finally:
        shutil.rmtree(root / "data/explain", ignore_errors=True)
