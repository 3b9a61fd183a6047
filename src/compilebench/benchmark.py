"""Stage benchmark: every (model, batch size) cell of the suite, eager and each compiled variant, one MLflow run each.

    python -m compilebench.benchmark              # reads params.yaml; writes paths.results and paths.run_info

Each cell runs in its own process (`compilebench.cell`), with a timeout: no dynamo state leaks between batch sizes,
and a crash or hang ends as a recorded status. Raw per-iteration samples go to paths.results (JSON lines, written
atomically); every eager and compiled result becomes one MLflow run nested under one parent run of this invocation.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from compilebench import environment, timing, tracking
from compilebench.config import Config, ConfigError, load_config

LOGGER = logging.getLogger(__name__)

_STAT_KEYS = ("latency_ms_mean", "latency_ms_median", "latency_ms_p90", "latency_ms_p99", "latency_ms_std")
_RAW_KEYS = ("samples_ms", "paired_eager_ms", "graph_break_reasons", "inductor_counters", "input_shapes")
_HEALTH_KEYS = ("graph_count", "graph_break_count", "graph_break_reasons", "recompile_count", "fell_back_to_eager",
                "inductor_counters")  # fmt: skip
_PARAM_KEYS = (
    "model_id", "label", "task", "batch_size", "variant", "compile", "compile_mode", "inductor_options", "dynamic",
    "dtype", "scale", "suite", "num_threads", "weights_source", "config_origin", "resolved_revision", "image_source",
    "image_sha256", "text_source", "device", "device_name", "torch_version", "transformers_version",
    "python_version", "cuda_version", "platform", "git_commit", "cell_key", "inductor_cache", "variant_dtype",
    "channels_last", "task_check", "fell_back_to_eager",
)  # fmt: skip
_TAG_KEYS = ("status", "label", "variant", "task", "device_name", "torch_version", "suite", "weights_source")


def cell_specs(config: Config, manifest: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One spec per (model, batch size) of the selected suite; the cell process gets everything it needs."""
    suite, by_id = config.selected, {entry["model_id"]: entry for entry in manifest}
    variants = {name: asdict(config.variants[name]) for name in suite.variants}
    specs = []
    for model_id in suite.models:
        if model_id not in by_id:
            raise ConfigError(f"model {model_id!r} is in suite {config.suite!r} but not in {config.paths.manifest}")
        for batch_size in suite.batch_sizes:
            specs.append(
                {
                    "model_id": model_id,
                    "checkpoint": by_id[model_id]["path"],
                    "batch_size": batch_size,
                    "image": config.paths.image,
                    "device": config.benchmark.device,
                    "dtype": config.benchmark.dtype,
                    "benchmark": asdict(config.benchmark),
                    "variants": variants,
                }
            )
    return specs


def _cell_process(spec: dict[str, Any], timeout_s: float, env: dict[str, str], *flags: str) -> tuple[Any, str | None]:
    """Run `compilebench.cell` on `spec` in a child process: (its JSON output, None) or (None, failure status: text)."""
    with tempfile.TemporaryDirectory(prefix="compilebench-cell-") as workdir:
        spec_path, out_path = Path(workdir, "spec.json"), Path(workdir, "out.json")
        spec_path.write_text(json.dumps(spec))
        command = [sys.executable, "-m", "compilebench.cell", str(spec_path), str(out_path), *flags]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s or None, env=env)
        except subprocess.TimeoutExpired:
            return None, f"timeout: cell exceeded {timeout_s} s"
        if done.returncode != 0 or not out_path.exists():
            tail = " | ".join((done.stderr or "").strip().splitlines()[-5:])
            status = "oom" if done.returncode in (-9, 137) else "crashed"  # SIGKILL: the kernel's OOM killer
            return None, f"{status}: cell process exited with {done.returncode}: {tail}"
        return json.loads(out_path.read_text()), None


def run_cell_process(
    spec: dict[str, Any], timeout_s: float, compile_cache: str = "shared", warm_compile: bool = False
) -> list[dict[str, Any]]:
    """Run one cell in a child process; a timeout or crash becomes a status on every variant of the cell.

    compile_cache `cold` gives the cell a fresh, empty inductor cache, so `first_call_s` is a cold compile; with
    `warm_compile`, a second process on that now-warm cache times each compile again (`compile_s_warm`).
    """
    with tempfile.TemporaryDirectory(prefix="compilebench-inductor-") as cache_dir:
        env = dict(os.environ)
        if compile_cache == "cold":
            env.update(TORCHINDUCTOR_CACHE_DIR=cache_dir, TRITON_CACHE_DIR=str(Path(cache_dir, "triton")))
        results, failure = _cell_process(spec, timeout_s, env)
        if failure is not None:
            status, error = failure.split(": ", 1)
            return [{"variant": name, "status": status, "error": error} for name in spec["variants"]]
        compiled_ok = [
            r["variant"] for r in results if r["status"] == "ok" and spec["variants"][r["variant"]]["compile"]
        ]
        if warm_compile and compiled_ok:
            warm_spec = {**spec, "variants": {name: spec["variants"][name] for name in compiled_ok}}
            warm, failure = _cell_process(warm_spec, timeout_s, env, "--compile-only")
            if failure is not None:
                LOGGER.warning("warm compile of %s failed: %s", spec["model_id"], failure)
            for result in results:
                if warm and warm.get(result["variant"]) is not None:
                    result["compile_s_warm"] = warm[result["variant"]]
        for result in results:
            if spec["variants"][result["variant"]]["compile"]:
                result["inductor_cache"] = compile_cache
        return results


def validity_problems(record: dict[str, Any], bench: dict[str, Any]) -> list[str]:
    """Why an otherwise ok run is too thin or too noisy to report (empty when it is fine)."""
    problems = []
    if record.get("iterations", 0) < bench["min_iters"]:
        problems.append(f"{record.get('iterations', 0)} iterations < benchmark.min_iters {bench['min_iters']}")
    if record.get("timed_s") is not None and record["timed_s"] < bench["min_time_s"]:
        problems.append(f"timed {record['timed_s']:.2f} s < benchmark.min_time_s {bench['min_time_s']}")
    for key in ("cv", "eager_cv"):
        if record.get(key) is not None and record[key] > bench["max_cv"]:
            problems.append(f"{key} {record[key]:.3f} > benchmark.max_cv {bench['max_cv']}")
    return problems


def build_record(
    result: dict[str, Any], spec: dict[str, Any], entry: dict[str, Any], context: dict[str, Any]
) -> dict[str, Any]:
    """A flat result row: what ran, where, its raw samples and their statistics."""
    variant = spec["variants"][result["variant"]]
    record: dict[str, Any] = {
        "model_id": spec["model_id"],
        "label": entry["label"],
        "task": entry["task"],
        "batch_size": spec["batch_size"],
        "variant": result["variant"],
        "compile": variant["compile"],
        "compile_mode": variant["mode"] if variant["compile"] else "none",
        "channels_last": variant["channels_last"],
        "inductor_options": json.dumps(variant["inductor"], sort_keys=True),
        "dynamic": variant["dynamic"],
        "dtype": spec["dtype"],
        "scale": entry["scale"],
        "weights_source": entry["weights_source"],
        "config_origin": entry["config_origin"],
        "resolved_revision": entry.get("resolved_revision"),
        "param_count": entry["param_count"],
        **context,
        **result,
    }
    record["cell_key"] = f"{spec['model_id']}|bs{spec['batch_size']}|{result['variant']}"
    samples = result.get("samples_ms") or []
    if result.get("status") in ("ok", "accuracy_fail") and samples:
        stats = timing.summarize_ms(samples)
        record.update(stats)
        record["iterations"] = stats["count"]
        record["throughput_img_s"] = timing.throughput_img_s(stats["latency_ms_median"], spec["batch_size"])
        paired = result.get("paired_eager_ms")
        if variant["compile"] and paired:
            eager_stats = timing.summarize_ms(paired)
            low, high = timing.speedup_ci(paired, samples)
            record.update(
                {
                    "compile_s": result["first_call_s"],
                    "eager_cv": eager_stats["cv"],
                    "eager_latency_ms_median": eager_stats["latency_ms_median"],
                    "eager_latency_ms_mean": eager_stats["latency_ms_mean"],
                    "speedup": timing.speedup(paired, samples),
                    "speedup_ci_low": low,
                    "speedup_ci_high": high,
                    "speedup_verdict": timing.verdict(low, high),
                    "improvement_pct": timing.improvement_pct(eager_stats["latency_ms_mean"], stats["latency_ms_mean"]),
                    "break_even_calls": timing.break_even_calls(
                        result["first_call_s"], eager_stats["latency_ms_median"], stats["latency_ms_median"]
                    ),
                }
            )
        if record["status"] == "ok":
            problems = validity_problems(record, spec["benchmark"])
            if problems:
                record.update(status="invalid", error="; ".join(problems))
    return record


def log_record(client: Any, parent_run_id: str, record: dict[str, Any]) -> str:
    """One MLflow child run for a result row."""
    params = {key: record.get(key) for key in _PARAM_KEYS}
    params["input_shapes"] = json.dumps(record.get("input_shapes"))
    metrics = {
        key: value
        for key, value in record.items()
        if key not in _PARAM_KEYS and key not in _RAW_KEYS and isinstance(value, int | float) and value is not None
    }
    tags = {key: record.get(key) for key in _TAG_KEYS}
    tags["compiled"] = str(record["compile"]).lower()
    if record.get("speedup_verdict"):
        tags["speedup_verdict"] = record["speedup_verdict"]
    artifacts = {"samples.json": {key: record.get(key) for key in ("samples_ms", "paired_eager_ms")}}
    if record["compile"]:
        artifacts["compile_health.json"] = {
            key: record.get(key)
            for key in (
                "graph_count",
                "graph_break_count",
                "graph_break_reasons",
                "recompile_count",
                "inductor_counters",
            )
        }
    if record.get("error"):
        artifacts["error.json"] = {"status": record["status"], "error": record["error"]}
    name = f"{record['label']} bs{record['batch_size']} {record['variant']}"
    return tracking.log_child(
        client, parent_run_id, name, params, metrics, tags, artifacts, failed=record["status"] not in ("ok",)
    )


def write_jsonl_atomic(path: Path, rows: list[dict[str, Any]]) -> None:
    """JSON lines to a temporary file, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(row, default=str) + "\n" for row in rows))
    os.replace(tmp, path)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config()
        manifest = json.loads(Path(config.paths.manifest).read_text())
        specs = cell_specs(config, manifest)
    except (ConfigError, OSError, json.JSONDecodeError) as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    image_meta = json.loads(Path(config.paths.image_meta).read_text())
    env = environment.collect(config.benchmark.device)
    context = {
        **env,
        "suite": config.suite,
        "num_threads": config.benchmark.num_threads or os.cpu_count(),
        "image_source": image_meta["image_source"],
        "image_sha256": image_meta["sha256"],
    }
    by_id = {entry["model_id"]: entry for entry in manifest}
    client = tracking.client(config.paths.tracking_uri)
    suite = config.selected
    parent_params = {
        **context,
        "models": ",".join(suite.models),
        "batch_sizes": ",".join(map(str, suite.batch_sizes)),
        "variants": ",".join(suite.variants),
        "scale": suite.scale,
        "weights_sources": ",".join(sorted({entry["weights_source"] for entry in manifest})),
    }
    parent_tags = {key: context[key] for key in ("suite", "device_name", "torch_version", "image_source")}
    parent_id = tracking.start_parent(
        client, tracking.EXPERIMENT, f"{config.suite} on {env['device_name']}", parent_params, parent_tags
    )
    LOGGER.info(
        "MLflow parent run %s in %s", parent_id, tracking.redact(tracking.tracking_uri(config.paths.tracking_uri))
    )
    records = []
    for spec in tqdm(specs, desc="benchmark", unit="cell"):
        LOGGER.info("cell %s bs%d", spec["model_id"], spec["batch_size"])
        bench = config.benchmark
        for result in run_cell_process(spec, bench.cell_timeout_s, bench.compile_cache, bench.warm_compile):
            record = build_record(result, spec, by_id[spec["model_id"]], context)
            record["mlflow_run_id"] = log_record(client, parent_id, record)
            records.append(record)
            LOGGER.info(
                "  %-14s %-13s median %s ms%s",
                record["variant"],
                record["status"],
                f"{record['latency_ms_median']:.2f}" if "latency_ms_median" in record else "-",
                f", speedup {record['speedup']:.2f}x [{record['speedup_ci_low']:.2f}, {record['speedup_ci_high']:.2f}]"
                if "speedup" in record
                else "",
            )
    write_jsonl_atomic(Path(config.paths.results), records)
    failed = [record["cell_key"] for record in records if record["status"] != "ok"]
    run_info = {"parent_run_id": parent_id, "experiment": tracking.EXPERIMENT, "failed_runs": failed}
    Path(config.paths.run_info).write_text(json.dumps(run_info, indent=2))
    tracking.finish(client, parent_id, failed=bool(failed))
    if failed:
        LOGGER.warning("%d of %d runs did not end ok: %s", len(failed), len(records), failed)


if __name__ == "__main__":
    main()
