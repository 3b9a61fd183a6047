"""What an invocation ran and where it is logged (paths.run_info): one record the benchmark stage writes and the
stages after it (aggregate, plot) and `sync` read, the compared environments' labels in their order among it.

`RunInfo.read` takes back a file of any earlier version: one written before `labels` was (the baseline was the first
key of `environments`, as the benchmark wrote them), one without `crashed`, a minimal one a user wrote for sync.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunInfo:
    """One invocation: its id and MLflow parent, the environments compared (the baseline first), how much of the plan
    ran, what failed, and why nothing was logged where that is so."""

    invocation_id: str
    experiment: str = ""
    labels: tuple[str, ...] = ()  # the compared environments in the invocation's order: the first is the baseline (A)
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> its name, key and pins
    failed_runs: tuple[str, ...] = ()  # "model bs1 variant [label]: status" of each run that did not end ok
    crashed: bool | None = None  # a run measured nothing (the parent run ends FAILED); None: a file from before
    parent: dict[str, Any] = field(default_factory=dict)  # the parent run's name, params and tags, for sync
    trials: int = 0
    planned_trials: int | None = None
    processes: int | None = None
    planned_processes: int | None = None
    targets: tuple[dict[str, Any], ...] = ()  # per run and targeted interval, what it reached (adaptive.shortfalls)
    ingested_from: str = ""  # an exported plan's folder, where the results were ingested
    trials_missing: int = 0  # of an ingested plan, trials without a result
    processes_not_run: int = 0  # of an ingested plan ended by `runner.pyz --end`
    not_logged: str = ""  # why none of the invocation's results go to MLflow (an exported plan not finished)
    store_s: float = 0.0  # seconds the benchmark waited on the MLflow store, every logging call's wall time
    store_calls: int = 0  # its logging calls (a run, a comparison, the parent's files)

    @property
    def failed(self) -> bool:
        """Whether the parent run ends FAILED: a run crashed (a file from before `crashed`: any run failed)."""
        return bool(self.failed_runs) if self.crashed is None else self.crashed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunInfo:
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"run info: unknown keys {unknown}; expected some of {sorted(known)}")
        if "invocation_id" not in raw:
            raise ValueError("run info: no `invocation_id`")
        environments = dict(raw.get("environments") or {})
        return cls(
            **{
                **raw,
                "labels": tuple(raw.get("labels") or environments),
                "environments": environments,
                "failed_runs": tuple(raw.get("failed_runs") or ()),
                "targets": tuple(raw.get("targets") or ()),
            }
        )

    @classmethod
    def read(cls, path: str | Path) -> RunInfo:
        """From `path`; OSError, or ValueError naming the file and what is wrong (not JSON included)."""
        try:
            raw = json.loads(Path(path).read_text())
            if not isinstance(raw, dict):
                raise ValueError(f"not a JSON object but {type(raw).__name__}")
            return cls.from_dict(raw)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: {error}") from None
