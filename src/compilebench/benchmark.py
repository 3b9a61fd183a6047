"""Stage benchmark: every (model, batch size) cell of the suite, eager and each compiled variant, one MLflow run each.

    python -m compilebench.benchmark              # reads params.yaml; writes paths.results and paths.run_info

Each cell runs in its own process (`compilebench.cell`), with a timeout: no dynamo state leaks between batch sizes,
and a crash or hang ends as a recorded status. Raw per-iteration samples go to paths.results (JSON lines, written
atomically); every eager and compiled result becomes one MLflow run nested under one parent run of this invocation.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from compilebench import environment, journal, timing, tracking
from compilebench.config import Config, ConfigError, load_config
from compilebench.files import write_json, write_jsonl

LOGGER = logging.getLogger(__name__)

_STAT_KEYS = ("latency_ms_mean", "latency_ms_median", "latency_ms_p90", "latency_ms_p99", "latency_ms_std")
_RAW_KEYS = ("samples_ms", "paired_eager_ms", "graph_break_reasons", "inductor_counters", "input_shapes")
_PARAM_KEYS = (
    "model_id", "label", "task", "batch_size", "variant", "compile", "compile_mode", "inductor_options", "dynamic",
    "dtype", "scale", "suite", "num_threads", "weights_source", "config_origin", "resolved_revision", "image_source",
    "image_sha256", "text_source", "device", "device_name", "torch_version", "transformers_version",
    "python_version", "cuda_version", "platform", "git_commit", "cell", "cell_key", "machine", "invocation_id",
    "run_uid", "inductor_cache", "variant_dtype",
    "channels_last", "task_check", "fell_back_to_eager",
)  # fmt: skip
_TAG_KEYS = ("status", "label", "variant", "task", "device_name", "machine", "torch_version", "suite", "weights_source")
_HEALTH_KEYS = ("graph_count", "graph_break_count", "graph_break_reasons", "recompile_count", "fell_back_to_eager",
                "inductor_counters")  # fmt: skip
_CELL_ENVIRONMENT = ("device_name", "machine", "torch_version", "transformers_version", "python_version",
                     "cuda_version", "num_threads", "image_sha256")  # fmt: skip


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


def _cell_process(
    spec: dict[str, Any], timeout_s: float, env: dict[str, str], *flags: str
) -> tuple[Any, str | None, str | None]:
    """Run `compilebench.cell` on `spec` in a child process: (its JSON output, None, None) or (None, status, error)."""
    with tempfile.TemporaryDirectory(prefix="compilebench-cell-") as workdir:
        spec_path, out_path = Path(workdir, "spec.json"), Path(workdir, "out.json")
        spec_path.write_text(json.dumps(spec))
        command = [sys.executable, "-m", "compilebench.cell", str(spec_path), str(out_path), *flags]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s or None, env=env)
        except subprocess.TimeoutExpired:
            return None, "timeout", f"cell exceeded {timeout_s} s"
        if done.returncode != 0 or not out_path.exists():
            tail = " | ".join((done.stderr or "").strip().splitlines()[-5:])
            status = "oom" if done.returncode in (-9, 137) else "crashed"  # SIGKILL: the kernel's OOM killer
            return None, status, f"cell process exited with {done.returncode}: {tail}"
        return json.loads(out_path.read_text()), None, None


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
        results, status, error = _cell_process(spec, timeout_s, env)
        if status is not None:
            return [{"variant": name, "status": status, "error": error} for name in spec["variants"]]
        compiled_ok = [
            r["variant"] for r in results if r["status"] == "ok" and spec["variants"][r["variant"]]["compile"]
        ]
        if warm_compile and compiled_ok:
            warm_spec = {**spec, "variants": {name: spec["variants"][name] for name in compiled_ok}}
            warm, status, error = _cell_process(warm_spec, timeout_s, env, "--compile-only")
            if status is not None:
                LOGGER.warning("warm compile of %s failed: %s: %s", spec["model_id"], status, error)
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
    record["cell"] = f"{spec['model_id']}|bs{spec['batch_size']}|{result['variant']}"
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


def run_payload(record: dict[str, Any]) -> dict[str, Any]:
    """A result row as an MLflow run: name, params, metrics, tags, JSON artifacts, failed flag, uid."""
    params = {key: record.get(key) for key in _PARAM_KEYS}
    params["input_shapes"] = json.dumps(record.get("input_shapes"))
    metrics = {
        key: value
        for key, value in record.items()
        if key not in _PARAM_KEYS and key not in _RAW_KEYS and isinstance(value, int | float)
    }
    tags = {key: record.get(key) for key in _TAG_KEYS}
    tags["compiled"] = str(record["compile"]).lower()
    if record.get("speedup_verdict"):
        tags["speedup_verdict"] = record["speedup_verdict"]
    artifacts = {"samples.json": {key: record.get(key) for key in ("samples_ms", "paired_eager_ms")}}
    if record["compile"]:
        artifacts["compile_health.json"] = {key: record.get(key) for key in _HEALTH_KEYS}
    if record.get("error"):
        artifacts["error.json"] = {"status": record["status"], "error": record["error"]}
    return {
        "name": f"{record['label']} bs{record['batch_size']} {record['variant']}",
        "params": params,
        "metrics": metrics,
        "tags": tags,
        "artifacts": artifacts,
        "failed": record["status"] != "ok",
        "uid": record["run_uid"],
    }


def cell_key(spec: dict[str, Any], entry: dict[str, Any], context: dict[str, Any]) -> str:
    """Deterministic key of a cell: model, revision, weights, batch, variants, settings, device, library versions."""
    return journal.stable_hash(
        {
            "model": spec["model_id"],
            "revision": entry.get("resolved_revision") or entry.get("revision"),
            "card": entry.get("card_sha256"),
            "weights": entry["weights_source"],
            "batch_size": spec["batch_size"],
            "dtype": spec["dtype"],
            "variants": spec["variants"],
            "benchmark": spec["benchmark"],
            "environment": {key: context.get(key) for key in _CELL_ENVIRONMENT},
        }
    )


def _log_line(record: dict[str, Any]) -> str:
    median = f"{record['latency_ms_median']:.2f}" if "latency_ms_median" in record else "-"
    speedup = ""
    if "speedup" in record:
        speedup = (
            f", speedup {record['speedup']:.2f}x [{record['speedup_ci_low']:.2f}, {record['speedup_ci_high']:.2f}]"
        )
    return f"  {record['variant']:<22} {record['status']:<13} median {median} ms{speedup}"


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the benchmark stage.")
    parser.add_argument("--fresh", action="store_true", help="ignore an interrupted invocation's journal")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config()
        tracking.check_store(config.paths.tracking_uri)
        manifest = json.loads(Path(config.paths.manifest).read_text())
        image_meta = json.loads(Path(config.paths.image_meta).read_text())
        specs = cell_specs(config, manifest)
    except (ConfigError, tracking.StoreError, OSError, json.JSONDecodeError) as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    env = environment.collect(config.benchmark.device)
    context = {
        **env,
        "machine": config.benchmark.machine or socket.gethostname(),
        "suite": config.suite,
        "num_threads": config.benchmark.num_threads or os.cpu_count(),
        "image_source": image_meta["image_source"],
        "image_sha256": image_meta["sha256"],
    }
    by_id = {entry["model_id"]: entry for entry in manifest}
    keys = [cell_key(spec, by_id[spec["model_id"]], context) for spec in specs]
    journal_dir = Path(config.paths.journal)
    invocation_id, done, resumed = journal.open_journal(journal_dir, journal.stable_hash(keys), fresh=args.fresh)
    if resumed:
        LOGGER.info(
            "resuming interrupted invocation %s: %d of %d cells already done", invocation_id, len(done), len(keys)
        )
    suite = config.selected
    parent_params = {
        **context,
        "models": ",".join(suite.models),
        "batch_sizes": ",".join(map(str, suite.batch_sizes)),
        "variants": ",".join(suite.variants),
        "scale": suite.scale,
        "weights_sources": ",".join(sorted({entry["weights_source"] for entry in manifest})),
    }
    parent_tags = {key: context[key] for key in ("suite", "device_name", "machine", "torch_version", "image_source")}
    tracker = tracking.Tracker(
        config.paths.tracking_uri, invocation_id, f"{config.suite} on {context['machine']}", parent_params, parent_tags
    )
    LOGGER.info("invocation %s -> MLflow %s", invocation_id, tracking.redact(tracker.uri))
    records, bench = [], config.benchmark
    for spec, key in tqdm(list(zip(specs, keys, strict=True)), desc="benchmark", unit="cell"):
        LOGGER.info(
            "cell %s bs%d%s",
            spec["model_id"],
            spec["batch_size"],
            " (done before the interruption)" if key in done else "",
        )
        cell_records = done.get(key)
        if cell_records is None:
            results = run_cell_process(spec, bench.cell_timeout_s, bench.compile_cache, bench.warm_compile)
            cell_records = [build_record(result, spec, by_id[spec["model_id"]], context) for result in results]
            for record in cell_records:
                record.update(
                    cell_key=key, invocation_id=invocation_id, run_uid=f"{invocation_id}/{key}/{record['variant']}"
                )
            journal.save_cell(journal_dir, key, cell_records)  # on disk before it is logged
        for record in cell_records:
            tracker.log_run(**run_payload(record))  # exactly once: a run already in the store is not logged again
            LOGGER.info(_log_line(record))
        records += cell_records
    write_jsonl(config.paths.results, records)
    failed = [f"{record['cell']}: {record['status']}" for record in records if record["status"] != "ok"]
    run_info = {"invocation_id": invocation_id, "experiment": tracking.EXPERIMENT, "failed_runs": failed}
    write_json(config.paths.run_info, run_info)
    tracker.log_parent(finish_failed=bool(failed))
    journal.close_journal(journal_dir)
    if failed:
        LOGGER.warning(
            "%d of %d runs did not end ok (recorded in the tables and MLflow): %s", len(failed), len(records), failed
        )
    if tracker.failures:
        LOGGER.warning(
            "%d item(s) not logged to MLflow; results are in %s. `python -m compilebench.sync` logs them later.",
            len(tracker.failures),
            config.paths.results,
        )


if __name__ == "__main__":
    main()
