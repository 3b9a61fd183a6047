"""Runs made by hand for the tests: a line of runs.jsonl with the fields a test does not care about filled in, read
by the real `RunRecord.from_dict` (its processes by `ProcessRecord.from_dict`), and the run as a comparison reads it."""

from typing import Any

from compilebench.analysis.compare import ComparedRun
from compilebench.analysis.run_record import RunRecord

FILLED = {
    "run_uid": "inv/current/org/m/bs1/default",
    "invocation_id": "inv",
    "suite": "t",
    "scale": "small",
    "environment": "current",
    "environment_name": "current",
    "environment_key": "k1",
    "environment_pins": "{}",
    "environment_freeze": [],
    "model_id": "org/m",
    "label": "M",
    "task": "t",
    "batch_size": 1,
    "variant": "default",
    "compile": True,
    "compile_mode": "default",
    "inductor_options": "{}",
    "dynamic": None,
    "fullgraph": False,
    "dtype": "float32",
    "variant_dtype": "float32",
    "channels_last": False,
    "weights_source": "random-init",
    "config_origin": "recipe",
    "param_count": None,
    "resolved_revision": None,
    "image_source": "embedded-fallback",
    "image_sha256": "a5" * 32,
    "machine": "test",
    "git_commit": "",
    "status": "ok",
    "error": None,
    "replicates": 3,
    "processes": 3,
}


def run_record(row: dict[str, Any]) -> RunRecord:
    """`row` (any fields of a runs.jsonl line) as a run record."""
    return RunRecord.from_dict({**FILLED, **row})


def runs_of(rows: list[dict[str, Any]]) -> list[ComparedRun]:
    """Each row as a comparison reads its run."""
    return [ComparedRun.of(run_record(row)) for row in rows]
