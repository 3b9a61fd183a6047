"""What every run of an invocation shares, and the loop an exported plan carries: typed records, made once from the
config's sections (config.Benchmark's `validity()` and `loop()`) and handed as they are to the code that uses them.

`Validity` holds the thresholds a run's processes are judged by (the rules are analysis/validity.py's), `Context`
the invocation's identity with them, `LoopSettings` what the adaptive loop needs (analysis/adaptive.py), and `Loop`
all three as an exported plan carries them (`Plan.adaptive`), so a launcher on another machine judges and adds blocks
on the same settings and names its runs as the invocation does. Standard library only, like records.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Validity:
    """The thresholds a run's processes are judged by (the benchmark section of params.yaml)."""

    min_iters: int  # rounds a process must time
    min_time_s: float  # seconds it must time
    max_cv: float  # the median process's robust CV of the per-pair ratio (eager: latency) above it: invalid
    disturbed_cores: float = 0.0  # a process whose machine was busier than this while it timed is left out; 0 = off
    max_halves_diff: float = 0.0  # a compiled run whose processes' halves disagree by more than this: invalid; 0 = off


@dataclass(frozen=True)
class Context:
    """What is the same for every run of an invocation, or of one environment in it."""

    invocation_id: str
    suite: str
    scale: str
    machine: str  # the label a user gives this machine (runner.machine, or the hostname)
    git_commit: str
    image_source: str
    image_sha256: str
    validity: Validity  # what makes its processes count (benchmark.min_iters, max_cv, ...)
    runner_sha256: str = ""  # an exported plan's: the runner that measured it (runner.py); "" for the pipeline's own

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Context:
        """As `to_dict` wrote it, or as an export before validity was a record of its own wrote it (its thresholds
        beside the identity: an exported plan's export.json of 2026-11-27 or earlier)."""
        if isinstance(raw.get("validity"), dict):
            return cls(**{**raw, "validity": Validity(**raw["validity"])})
        names = {f.name for f in fields(Validity)}
        identity = {key: value for key, value in raw.items() if key not in names}
        return cls(**identity, validity=Validity(**{key: value for key, value in raw.items() if key in names}))


@dataclass(frozen=True)
class LoopSettings:
    """What the adaptive loop needs of `benchmark` and `margin`: the blocks planned and allowed, the budget, the
    targets, when a process is disturbed."""

    replicates: int
    cold_replicates: int
    max_replicates: int
    budget_min: float  # minutes of processes per compared environment
    disturbed_cores: float
    target_speedup: float  # 95% CI half-widths aimed at (0.05 = +-5%); 0 = none
    target_compile: float
    target_latency: float
    margin: float = 0.10  # config.Config.margin's default

    @property
    def targets(self) -> dict[str, float]:
        """The target half-widths per kind of metric (what compare.Metric.target names)."""
        return {"speedup": self.target_speedup, "compile": self.target_compile, "latency": self.target_latency}


@dataclass(frozen=True)
class Loop:
    """The loop an exported plan carries: its settings, the invocation's context, the compared environments' labels
    (the first is the baseline)."""

    settings: LoopSettings
    context: Context
    labels: tuple[str, ...]

    @classmethod
    def from_dict(cls, raw: dict[str, Any], invocation_id: str) -> Loop:
        """As `asdict` wrote it, or as a plan of 2026-11-28 or earlier did: its `context` the validity thresholds
        alone, without the invocation's identity (only `invocation_id`, the plan's, is known of it)."""
        context = raw["context"]
        if "invocation_id" not in context:
            context = {
                "invocation_id": invocation_id,
                "suite": "",
                "scale": "",
                "machine": "",
                "git_commit": "",
                "image_source": "",
                "image_sha256": "",
                "validity": context,
            }
        return cls(LoopSettings(**raw["settings"]), Context.from_dict(context), tuple(raw["labels"]))
