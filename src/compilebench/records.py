"""The typed records that cross a process or machine boundary, written and read here only.

A `Plan` (what one invocation measures: trials in their run order, the checkpoints they need) goes to the
launcher, possibly on another machine; each `TrialSpec` goes to one fresh trial process, which answers with a
`TrialResult`. Standard library only: a trial process, or a GPU box with nothing but torch and transformers,
imports this module.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

EAGER = "eager"
STATUS_OK = "ok"
# How a trial can end: ok, or a failure that is data (kept in results and MLflow, left out of speedup tables).
STATUSES = ("ok", "accuracy_fail", "invalid", "compile_error", "error", "oom", "killed", "timeout", "crashed")
CACHE_COLD, CACHE_WARM, CACHE_SHARED = "cold", "warm", "shared"
LAUNCHER_PID = "COMPILEBENCH_LAUNCHER_PID"  # set for a trial process: the process it must not outlive
# How a fresh process gets its compiled model (VariantSpec.deploy), and where a run keeps what it carries over.
DEPLOY_JIT, DEPLOY_ARTIFACTS, DEPLOY_AOTI, DEPLOY_REGIONAL = "jit", "artifacts", "aoti", "regional"
DEPLOY_DIR_ENV = "COMPILEBENCH_DEPLOY_DIR"  # set for a trial process: its run's artifacts / package folder
# VariantSpec.dynamic beside true / false / None: torch.compile(dynamic=None) with dim 0 of every input marked dynamic
# (torch._dynamo.mark_dynamic: sizes 0 and 1 still specialise) or unbacked (mark_unbacked: no specialisation at all)
DYNAMIC_BATCH, DYNAMIC_BATCH_UNBACKED = "batch", "batch-unbacked"
ARTIFACTS_FILE = "cache-artifacts.bin"  # torch.compiler.save_cache_artifacts() of the run's cold process
AOTI_PACKAGE = "model.pt2"  # the run's AOTInductor package


def _build(cls: type, raw: dict[str, Any]) -> Any:
    """An instance of dataclass `cls` from a dict, refusing keys it does not have (a stale or foreign file)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown fields {unknown}; expected {sorted(known)}")
    return cls(**raw)


@dataclass(frozen=True)
class ModelSpec:
    """How a trial builds one model and its inputs: a checkpoint folder and what its processor cannot say."""

    model_id: str  # Hub id (or the folder's name for a local checkpoint)
    label: str  # the doc's row label, or the model id
    task: str  # one of models.TASKS
    model_class: str  # transformers class, e.g. DetrForObjectDetection
    checkpoint: str  # folder with config.json, safetensors and the processor config
    text_queries: tuple[str, ...] = ()  # zero-shot detection: the text queries
    text_input_ids: tuple[tuple[int, ...], ...] = ()  # their token ids when the folder has no tokenizer
    text_max_length: int = 16
    text_pad_id: int = 0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelSpec:
        raw = dict(raw)
        raw["text_queries"] = tuple(raw.get("text_queries", ()))
        raw["text_input_ids"] = tuple(tuple(ids) for ids in raw.get("text_input_ids", ()))
        return _build(cls, raw)


@dataclass(frozen=True)
class VariantSpec:
    """One way to run the model: eager, or torch.compile with a mode, inductor options, dtype and memory format."""

    name: str
    compile: bool = True
    mode: str = "default"
    inductor: dict[str, Any] = field(default_factory=dict)  # torch._inductor.config values set while compiling
    dynamic: bool | str | None = False  # torch.compile(dynamic=...), or DYNAMIC_BATCH(_UNBACKED): the batch dim
    fullgraph: bool = False
    dtype: str | None = None  # the compiled model's dtype; None = the trial's dtype
    channels_last: bool = False
    deploy: str = "jit"  # jit | artifacts | aoti | regional (see trial.compiled_module)
    serve: bool = False  # the process first serves each batch size of the suite, smallest first (trial.serve_sizes)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VariantSpec:
        return _build(cls, raw)


@dataclass(frozen=True)
class TimingSpec:
    """How a trial measures: device, dtype, threads, iterations and times, tolerances, numerics settings."""

    device: str = "cpu"
    dtype: str = "float32"
    num_threads: int = 0  # 0 = one per core
    warmup_iters: int = 2
    min_iters: int = 10  # timed pairs (eager, compiled) per process, at least
    min_time_s: float = 2.0
    max_time_s: float = 60.0
    memory_iters: int = 1
    rtol: float = 1e-3
    target_ci_halfwidth: float = 0.0
    memory_limit_mib: float = 0.0  # CPU: resident MiB of the trial's processes; CUDA: device MiB it may add; 0 = no cap
    float32_matmul_precision: str = "highest"
    cudnn_allow_tf32: bool = True
    cudnn_benchmark: bool = False

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TimingSpec:
        return _build(cls, raw)


@dataclass(frozen=True)
class TrialSpec:
    """One fresh process: one model at one batch size in one environment, eager and (at most) one compiled variant."""

    trial_id: str  # unique in its plan: environment/model/batch/variant/replicate
    environment: str  # the environment's label in this invocation (e.g. `current`, `torch-2.14.1`)
    model: ModelSpec
    batch_size: int
    variant: VariantSpec  # the compiled variant; `eager` itself for an eager-only trial
    replicate: int  # 0 .. replicates-1
    cache: str  # cold (a fresh, empty inductor cache) | warm (the cold trial's cache) | shared (the user's)
    image: str
    timing: TimingSpec
    serve_batch_sizes: tuple[int, ...] = ()  # a `serve` variant: every batch size the one compiled model meets

    @property
    def run_key(self) -> tuple[str, str, int, str]:
        """The run this trial is a replicate of: (environment, model, batch size, variant)."""
        return self.environment, self.model.model_id, self.batch_size, self.variant.name

    @property
    def cache_key(self) -> str:
        """Trials sharing an inductor cache folder: the cold trial and the warm ones of the same compiled run."""
        return "/".join(self.trial_id.split("/")[:-1])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrialSpec:
        raw = dict(raw)
        raw["model"] = ModelSpec.from_dict(raw["model"])
        raw["variant"] = VariantSpec.from_dict(raw["variant"])
        raw["timing"] = TimingSpec.from_dict(raw["timing"])
        raw["serve_batch_sizes"] = tuple(raw.get("serve_batch_sizes", ()))
        return _build(cls, raw)


@dataclass(frozen=True)
class CompileHealth:
    """What dynamo and inductor did: graphs, breaks and their reasons, recompiles, pattern counters."""

    graph_count: int = 0
    graph_break_count: int = 0
    graph_break_reasons: tuple[str, ...] = ()
    recompile_count: int = 0
    fell_back_to_eager: bool = False
    inductor_counters: dict[str, int] = field(default_factory=dict)
    recompile_reasons: tuple[str, ...] = ()  # the guards that failed, as dynamo words them (first line each)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CompileHealth:
        raw = dict(raw)
        raw["graph_break_reasons"] = tuple(raw.get("graph_break_reasons", ()))
        raw["recompile_reasons"] = tuple(raw.get("recompile_reasons", ()))
        return _build(cls, raw)


@dataclass(frozen=True)
class TrialResult:
    """What one trial process measured, raw samples included; failures carry their status and error."""

    trial_id: str
    status: str
    error: str | None = None
    environment: dict[str, str] = field(default_factory=dict)  # versions, device, machine fingerprint, as seen
    started_at: float = 0.0  # unix time the process started (the run order)
    wall_s: float = 0.0  # the whole process, start to exit, as the launcher saw it
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    text_source: str = "none"
    num_threads: int = 0
    startup_s: float | None = None  # process start to the harness ready: interpreter, torch and transformers imports
    load_s: float | None = None  # checkpoint and processor loaded, inputs made, on the device
    eager_first_call_s: float | None = None
    eager_peak_mem_mib: float | None = None
    eager_mem_delta_mib: float | None = None
    compile_s: float | None = None  # the compiled variant's first call: compile plus one inference
    compile_peak_mem_mib: float | None = None
    peak_mem_mib: float | None = None
    mem_delta_mib: float | None = None
    reserved_mem_mib: float | None = None  # CUDA: the caching allocator's reserved peak
    warmup_calls: int = 0
    eager_ms: tuple[float, ...] = ()  # eager latencies, paired with compiled_ms when a variant was compiled
    compiled_ms: tuple[float, ...] = ()
    timed_s: float | None = None
    disturbance: dict[str, float] = field(default_factory=dict)  # how busy the machine was while it timed (timing.py)
    compile_disturbance: dict[str, float] = field(default_factory=dict)  # ... while it compiled (its first call)
    variant_dtype: str | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    task_check: str | None = None
    task_agreement: float | None = None
    health: CompileHealth | None = None
    serve_first_call_s: tuple[float, ...] = ()  # a `serve` variant: first call at each of serve_batch_sizes
    serve_graph_counts: tuple[int, ...] = ()  # dynamo graphs after each of those first calls

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrialResult:
        raw = dict(raw)
        raw["eager_ms"] = tuple(raw.get("eager_ms", ()))
        raw["compiled_ms"] = tuple(raw.get("compiled_ms", ()))
        raw["serve_first_call_s"] = tuple(raw.get("serve_first_call_s", ()))
        raw["serve_graph_counts"] = tuple(raw.get("serve_graph_counts", ()))
        if raw.get("health") is not None:
            raw["health"] = CompileHealth.from_dict(raw["health"])
        return _build(cls, raw)

    @classmethod
    def failed(cls, trial_id: str, status: str, error: str, **known: Any) -> TrialResult:
        """A trial that ended without measurements."""
        return cls(trial_id=trial_id, status=status, error=error, **known)


@dataclass(frozen=True)
class CheckpointRecipe:
    """How to build a checkpoint folder with random weights where no Hub is reachable (e.g. on a GPU box)."""

    model_id: str
    folder: str  # relative to the plan's folder when the plan travels
    model_class: str
    config_class: str
    config: dict[str, Any]
    processor_class: str
    processor: dict[str, Any]
    seed: int

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CheckpointRecipe:
        return _build(cls, raw)


@dataclass(frozen=True)
class Plan:
    """One invocation's trials in run order, and what a bare machine needs to build their checkpoints."""

    invocation_id: str
    trials: tuple[TrialSpec, ...]
    recipes: tuple[CheckpointRecipe, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Plan:
        return _build(
            cls,
            {
                **raw,
                "trials": tuple(TrialSpec.from_dict(t) for t in raw["trials"]),
                "recipes": tuple(CheckpointRecipe.from_dict(r) for r in raw.get("recipes", ())),
            },
        )


def trial_stem(trial_id: str) -> str:
    """A trial id (environment/model/batch/variant/replicate) as one file name."""
    return trial_id.replace("/", "__")


def read_json(path: str | Path) -> Any:
    """A JSON file's content."""
    return json.loads(Path(path).read_text())


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file (blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
