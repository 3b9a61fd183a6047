"""The whole pipeline: real `dvc repro` in a temporary git repo on tiny models, read back from MLflow."""

import json
import sys

import mlflow
import pandas as pd
import pytest
from conftest import make_project, project_env, run_ok

pytestmark = pytest.mark.slow

MODELS = ["microsoft/resnet-50", "facebook/detr-resnet-50"]
SECRETS = {
    "HF_TOKEN": "hf_SECRETtoken123",
    "AWS_SECRET_ACCESS_KEY": "awsSECRETkey456",
    "MLFLOW_TRACKING_PASSWORD": "pwSECRET789",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the project, on a tiny two-model suite, after one `dvc repro` (with secrets in its environment)."""
    root = make_project(tmp_path_factory.mktemp("project"), MODELS)
    env = {**project_env(), **SECRETS}
    run_ok(["git", "init", "-q"], root, env)
    run_ok(["dvc", "init", "-q"], root, env)
    run_ok(["git", "add", "-A"], root, env)
    run_ok(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], root, env)
    run_ok([sys.executable, "-m", "compilebench.environment"], root, env)  # as `make run` does
    first = run_ok(["dvc", "repro"], root, env)
    return root, env, first


def test_outputs_and_tables(project):
    root, _, first = project
    for stage in ("fetch_image", "load_models", "benchmark", "aggregate", "plot"):
        assert f"Running stage '{stage}'" in first.stdout
    assert json.loads((root / "data/image/input.json").read_text())["image_source"] == "embedded-fallback"
    manifest = json.loads((root / "data/checkpoints/manifest.json").read_text())
    assert [entry["weights_source"] for entry in manifest] == ["random-init", "random-init"]
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["status"] == "ok" for row in rows)
    assert all(len(row["samples_ms"]) >= 3 for row in rows)  # raw samples kept
    summary = pd.read_csv(root / "data/results/summary.csv")
    assert sorted(summary["label"]) == ["DETR", "ResNet"]
    assert (summary["speedup"] > 0).all() and summary["eager_latency_ms_mean"].notna().all()
    metrics = json.loads((root / "data/results/metrics.json").read_text())
    assert metrics["runs_ok"] == 2 and "default_speedup_geomean" in metrics
    figures = sorted(p.name for p in (root / "data/plots").glob("*.png"))
    assert [name.split("_")[0] for name in figures] == ["duration", "improvement", "speedup", "versions"]
    verdicts = pd.read_csv(root / "data/results/verdicts.csv")
    assert set(verdicts["verdict"]) <= {"reproduced", "better", "worse"}  # DETR and ResNet bs1 default: in the doc
    assert verdicts["published_speedup_A100"].notna().all()
    versions = pd.read_csv(root / "data/results/versions.csv")
    assert len(versions) == 4 and set(versions["torch_version"]) == {__import__("torch").__version__}
    report = (root / "data/report/report.md").read_text()
    for heading in ("## Environment", "## Measured, in the doc's layout", "## Against the published numbers",
                    "## Anomalies in the published data", "## Failed or invalid runs", "## Figures"):  # fmt: skip
        assert heading in report
    assert "| Object Detection/DETR |" in report and "](../plots/duration_" in report
    assert (root / "dvc.lock").exists()


def test_every_run_is_in_mlflow(project):
    root, _, _ = project
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["compilebench"])
    parents = runs[runs["tags.role"] == "pipeline"]
    children = runs[runs["tags.role"] == "measurement"]
    assert len(parents) == 1 and len(children) == 4
    assert (children["tags.mlflow.parentRunId"] == parents["run_id"].iloc[0]).all()
    for key in ("model_id", "task", "batch_size", "variant", "compile_mode", "inductor_options", "device",
                "device_name", "torch_version", "transformers_version", "python_version", "cuda_version", "dtype",
                "weights_source", "image_source", "git_commit"):  # fmt: skip
        assert children[f"params.{key}"].notna().all(), key
    assert set(children["params.weights_source"]) == {"random-init"}
    assert set(children["params.image_source"]) == {"embedded-fallback"}
    for key in ("latency_ms_mean", "latency_ms_median", "latency_ms_p90", "latency_ms_std", "throughput_img_s",
                "first_call_s", "peak_mem_mib"):  # fmt: skip
        assert children[f"metrics.{key}"].notna().all(), key
    compiled = children[children["tags.compiled"] == "true"]
    eager = children[children["tags.compiled"] == "false"]
    assert compiled["metrics.speedup"].notna().all() and compiled["metrics.compile_s"].notna().all()
    assert "metrics.speedup" not in eager or eager["metrics.speedup"].isna().all()
    artifacts = mlflow.artifacts.list_artifacts(run_id=parents["run_id"].iloc[0])
    assert {a.path for a in artifacts} >= {"summary", "plots", "report"}


def test_second_repro_runs_nothing_and_plot_param_reruns_only_plot(project):
    root, env, _ = project
    again = run_ok(["dvc", "repro"], root, env)
    assert "Running stage" not in again.stdout
    experiment = run_ok(["dvc", "exp", "run", "-S", "plot.dpi=60"], root, env)
    ran = [line for line in experiment.stdout.splitlines() if line.startswith("Running stage")]
    assert ran == ["Running stage 'plot':"], experiment.stdout


def test_no_secret_reaches_the_store(project):
    """Tokens and passwords in the environment appear nowhere in the MLflow store: params, tags, metrics, artifacts."""
    root, _, _ = project
    stored = [root / "mlruns" / "mlflow.db", *(p for p in (root / "mlruns").rglob("*") if p.is_file())]
    for path in stored:
        data = path.read_bytes()
        for secret in SECRETS.values():
            assert secret.encode() not in data, f"{secret} found in {path}"
    assert len(stored) > 10  # the scan saw the database and the artifacts
