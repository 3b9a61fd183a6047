"""A run's schema: `RunRecord`, one run as it goes to results (a line of runs.jsonl), the tables and MLflow, with its
reader and writer; and what a run names beside it: its model's checkpoint (`ModelInfo`) and its environment
(`EnvironmentInfo`, its key with the settings it ran under). Filled by `runs` from trial results.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, field
from typing import Any

from compilebench.analysis.per_process import ProcessRecord
from compilebench.harness import fingerprint
from compilebench.records.formats import RecordError


@dataclass(frozen=True)
class ModelInfo:
    """Where a model's checkpoint came from (the manifest's entry)."""

    weights_source: str
    config_origin: str
    param_count: int | None
    resolved_revision: str | None = None


@dataclass(frozen=True)
class EnvironmentInfo:
    """A compared environment: its label in this invocation, its name in params, its pins and package list."""

    label: str
    name: str
    key: str
    pins: dict[str, str]
    freeze: tuple[str, ...] = ()
    # where its processes ran unlike `benchmark` says (config.Settings); part of its key
    settings: dict[str, Any] = field(default_factory=dict)


def settings_key(stack_key: str, settings: dict[str, Any]) -> str:
    """An environment's key: its stack's, and where it sets settings, a hash of both (one stack run two ways)."""
    if not settings:
        return stack_key
    payload = json.dumps({"stack": stack_key, "settings": settings}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def settings_text(settings: dict[str, Any]) -> str:
    """An environment's settings as a reader names them (`huge_pages True, num_threads 1`)."""
    return ", ".join(f"{key} {value}" for key, value in settings.items())


@dataclass(frozen=True)
class Identity:
    """Which run it is, from what code and on what machine, and how it ended."""

    run_uid: str
    invocation_id: str
    suite: str
    scale: str
    machine: str
    git_commit: str
    status: str
    error: str | None
    replicates: int  # processes planned
    processes: int  # processes that measured
    runner_sha256: str = ""  # an ingested plan's: the runner that measured it (runner.py); "" for the pipeline's own
    disturbed_processes: int = 0  # processes left out: the machine was busy while they timed (process_results)
    machines: int = 1  # machines and software stacks its processes ran on (machine_problems): above 1, invalid


@dataclass(frozen=True)
class RunEnvironment:
    """The environment it ran in: its label, name, key, pins and package list, the settings it set, what its
    processes saw of the machine."""

    environment: str
    environment_name: str
    environment_key: str
    environment_pins: str  # JSON
    environment_freeze: tuple[str, ...]  # the exact package list of the environment
    environment_settings: str = "{}"  # JSON: what the environment set in place of `benchmark` (config.Settings)
    num_threads: int | None = None
    environment_fields: dict[str, str] = field(default_factory=dict)  # fingerprint.RUN_FIELDS


@dataclass(frozen=True)
class Cell:
    """What it ran: the model, its checkpoint and inputs, the batch size and the variant."""

    model_id: str
    label: str
    task: str
    batch_size: int
    variant: str
    compile: bool
    compile_mode: str
    inductor_options: str  # JSON
    dynamic: bool | None
    fullgraph: bool
    dtype: str
    variant_dtype: str
    channels_last: bool
    weights_source: str
    config_origin: str
    param_count: int | None
    resolved_revision: str | None
    image_source: str
    image_sha256: str
    deploy: str = "jit"  # how a fresh process got the compiled model: jit | artifacts | aoti | regional; eager: none
    text_source: str | None = None
    input_shapes: str | None = None  # JSON
    warmup_calls: int | None = None
    # A `serve` variant: the one compiled model met every batch size of the suite, smallest first, in each process.
    serve_batch_sizes: str | None = None  # e.g. "1,4,16"


@dataclass(frozen=True)
class Latency:
    """Its latency over the processes that timed it: pooled samples' summary, the median's interval, the spreads;
    a compiled run's paired eager samples beside."""

    count: int | None = None  # samples pooled over processes
    latency_ms_mean: float | None = None
    latency_ms_median: float | None = None
    latency_ms_p90: float | None = None
    latency_ms_p99: float | None = None
    latency_ms_std: float | None = None
    latency_ms_iqr: float | None = None
    latency_ms_min: float | None = None
    latency_ms_max: float | None = None
    cv: float | None = None  # pooled samples' std / mean
    robust_cv: float | None = None  # pooled samples' IQR / 1.349 / median: the spread without the outliers
    process_cv: float | None = None  # median over processes of their own latency robust cv
    pair_cv: float | None = None  # compiled: median over processes of the per-pair ratio's robust cv (validity)
    latency_ms_median_ci_low: float | None = None
    latency_ms_median_ci_high: float | None = None
    latency_ci_method: str | None = None
    throughput_img_s: float | None = None
    eager_latency_ms_mean: float | None = None  # a compiled run's paired eager samples
    eager_latency_ms_median: float | None = None
    eager_cv: float | None = None


@dataclass(frozen=True)
class VsEager:
    """A compiled run's paired speedup over eager: the estimate, its interval and word."""

    speedup: float | None = None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    speedup_ci_method: str | None = None
    speedup_verdict: str | None = None
    improvement_pct: float | None = None


@dataclass(frozen=True)
class Compiling:
    """Time to a first inference in a fresh process, compile cold and warm, and the calls a compile takes to pay for
    itself. Medians over processes."""

    first_call_s: float | None = None  # eager: the first call (median over processes)
    compile_s: float | None = None  # compiled: first call in a fresh process on an empty cache (median of cold)
    compile_s_warm: float | None = None  # ... on the cache a cold process left (median of warm processes)
    break_even_calls: float | None = None  # cold compile / time saved per call
    break_even_calls_warm: float | None = None
    # Time to first inference in a fresh process: interpreter and imports, load, then compile (or build or load a
    # package) and the first call; what a restarted or scaled-out service waits.
    first_inference_s: float | None = None  # compiled: on an empty cache (cold); eager: eager's first call
    first_inference_s_warm: float | None = None  # compiled: warm (local cache, artifacts or a built package)
    eager_first_inference_s: float | None = None  # a compiled run's processes, had they served eager instead
    startup_s: float | None = None  # interpreter and imports
    load_s: float | None = None  # checkpoint, processor and inputs
    serve_first_call_s: tuple[float | None, ...] = ()  # a serve variant: first call at each size (cold processes)


@dataclass(frozen=True)
class Memory:
    """Memory over the undisturbed processes (medians), MiB."""

    peak_mem_mib: float | None = None
    mem_delta_mib: float | None = None
    compile_peak_mem_mib: float | None = None
    reserved_mem_mib: float | None = None
    eager_peak_mem_mib: float | None = None


@dataclass(frozen=True)
class Health:
    """Did the compiled model compute what eager did, and what the compiler made of it: graphs, breaks, recompiles,
    inductor's counters."""

    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    task_check: str | None = None
    task_agreement: float | None = None
    graph_count: int | None = None
    graph_break_count: int | None = None
    graph_break_reasons: tuple[str, ...] = ()
    recompile_count: int | None = None
    fell_back_to_eager: bool | None = None
    inductor_counters: dict[str, int] = field(default_factory=dict)
    recompile_reasons: tuple[str, ...] = ()  # guard failures, as dynamo words them
    serve_graphs: int | None = None  # a serve variant: dynamo graphs once every size was served (max over processes)
    serve_recompiles: int | None = None  # graphs added after the first size (max over processes)


@dataclass(frozen=True)
class RunRecord:
    """One run as it goes to results (a JSON line), the tables and MLflow: what ran (`cell`), which run and where
    (`identity`, `env`), what it measured (`latency`, its speedup `vs_eager`, `compiling`, `memory`, `health`) and
    each process's raw samples. `to_dict` flattens it once, for every writer: the flat keys are the names of
    runs.jsonl, the tables, MLflow and the glossary, and a part's fields keep them (no part is named as a field)."""

    identity: Identity
    env: RunEnvironment
    cell: Cell
    latency: Latency = field(default_factory=Latency)
    vs_eager: VsEager = field(default_factory=VsEager)
    compiling: Compiling = field(default_factory=Compiling)
    memory: Memory = field(default_factory=Memory)
    health: Health = field(default_factory=Health)
    process_results: tuple[ProcessRecord, ...] = ()  # per process, raw samples kept

    def to_dict(self) -> dict[str, Any]:
        """A flat row (a line of runs.jsonl): every part's fields side by side, the environment's fields among them,
        each process a dict."""
        row = {key: value for part in _PARTS for key, value in asdict(getattr(self, part)).items()}
        row.update(row.pop("environment_fields"))
        row["process_results"] = [p.to_dict() for p in self.process_results]
        return row

    @classmethod
    def of(cls, row: dict[str, Any]) -> RunRecord:
        """A run from its flat fields (as `runs` gathers them, or `from_dict` reads them): each to its part. A field
        no part has raises RecordError; so does a missing one that every run has."""
        parts: dict[str, dict[str, Any]] = {part: {} for part in _PARTS}
        unknown = [key for key in row if key not in _PART_OF and key != "process_results"]
        if unknown:
            raise RecordError(f"a run has no field {', '.join(unknown)}")
        for key, value in row.items():
            if key != "process_results":
                parts[_PART_OF[key]][key] = tuple(value) if key in _TUPLES and value is not None else value
        missing = [name for name in _REQUIRED if name not in row]
        if missing:
            raise RecordError(f"not a run of runs.jsonl: {row.get('run_uid', 'a line')} has no {', '.join(missing)}")
        return cls(
            **{part: _PART_TYPES[part](**values) for part, values in parts.items()},
            process_results=tuple(row.get("process_results") or ()),
        )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunRecord:
        """A line of runs.jsonl as `to_dict` wrote it, of this version or an earlier one: the environment fields
        gathered, each process read by `ProcessRecord.from_dict` (which migrates older ones), fields this version
        does not know dropped. A line without a field every run has raises RecordError naming them."""
        row = {key: value for key, value in raw.items() if key in _PART_OF}
        row["environment_fields"] = {key: raw[key] for key in fingerprint.RUN_FIELDS if key in raw}
        row["process_results"] = tuple(
            ProcessRecord.from_dict(p, i) for i, p in enumerate(raw.get("process_results") or ())
        )
        return cls.of(row)


_PART_TYPES: dict[str, type] = {
    "identity": Identity,
    "env": RunEnvironment,
    "cell": Cell,
    "latency": Latency,
    "vs_eager": VsEager,
    "compiling": Compiling,
    "memory": Memory,
    "health": Health,
}
_PARTS = tuple(_PART_TYPES)
_PART_OF = {f.name: part for part, kind in _PART_TYPES.items() for f in dataclasses.fields(kind)}
_REQUIRED = tuple(
    f.name
    for kind in _PART_TYPES.values()
    for f in dataclasses.fields(kind)
    if f.default is MISSING and f.default_factory is MISSING
)
_TUPLES = ("environment_freeze", "graph_break_reasons", "recompile_reasons", "serve_first_call_s")
