"""The typed records that cross a process or machine boundary, written and read here only.

A `Plan` (what one invocation measures: trials in their run order, the checkpoints they need) goes to the launcher,
possibly on another machine. A trial is one variant measured in one fresh process, and it answers with a `TrialResult`.
A process holds one trial, or several (`process_id`): a timing process times eager and each compiled variant of one
(environment, model, batch size) as its arms, one trial per arm, so every arm is paired with eager in the same process.
Kinds of trial (`TrialSpec.kind`): `arm`, one arm of a timing process (warm compile, steady-state samples); `cold`, a
process that compiles on an empty inductor cache (cold compile time, compile health, memory), then times eager against
its variant; `paired`, eager against one variant in a process of its own (deploy ways and served sizes, which change
what a fresh process is). Standard library only: a trial process, or a GPU box with nothing but torch and transformers,
imports this module. Every format that crosses a boundary is defined here, each beside the others it refers to; it is
read back, checked, in `reading`, and the names a trial process meets are in harness/names.py.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from compilebench.records.invocation import Loop

EAGER = "eager"
CURRENT = "current"  # the project's own environment (constraints.txt, requirements.txt), the default baseline
STATUS_OK = "ok"
# How a trial can end: ok, or a failure that is data (kept in results and MLflow, left out of speedup tables).
# `unsupported`: the environment cannot run the variant or model at all (an old torch without that inductor option,
# an old transformers without that class): an answer about the stack, said with its reason, not a failure of the run.
UNSUPPORTED = "unsupported"
MEASURED_NOTHING = ("compile_error", "error", "oom", "killed", "timeout", "crashed", UNSUPPORTED)  # ended unmeasured
# Ended from outside (SIGKILL, not by the OOM killer): nothing of the trial says it would end so again. Its block is
# measured again, the run's other processes stand, and the variant is never left out of the blocks after it.
ENDED_FROM_OUTSIDE = ("killed",)
STATUSES = ("ok", "accuracy_fail", "invalid", *MEASURED_NOTHING)  # the other two measured, and failed a check
CACHE_COLD, CACHE_WARM, CACHE_SHARED = "cold", "warm", "shared"


class Unsupported(Exception):
    """What this environment's torch or transformers cannot run at all; the message says what it lacks."""


# How a fresh process gets its compiled model (VariantSpec.deploy), and where a run keeps what it carries over.
DEPLOY_JIT, DEPLOY_ARTIFACTS, DEPLOY_AOTI, DEPLOY_REGIONAL = "jit", "artifacts", "aoti", "regional"
# VariantSpec.dynamic beside true / false / None: torch.compile(dynamic=None) with dim 0 of every input marked dynamic
# (torch._dynamo.mark_dynamic: sizes 0 and 1 still specialise) or unbacked (mark_unbacked: no specialisation at all)
DYNAMIC_BATCH, DYNAMIC_BATCH_UNBACKED = "batch", "batch-unbacked"
KIND_PAIRED, KIND_ARM, KIND_COLD = "paired", "arm", "cold"  # what a trial's process does (TrialSpec.kind)
KINDS = (KIND_PAIRED, KIND_ARM, KIND_COLD)


def times_own_level(kind: str) -> bool:
    """Whether a process of `kind` times its run's own latency and speedup (a timing process, a paired trial). A cold
    process does not: it holds one compiled model and runs faster than a timing process beside every arm, a level
    that cancels in B/A but not in one stack's interval, so its rounds are a block of B/A only."""
    return kind != KIND_COLD


def memory_before_timing(kind: str) -> bool:
    """Whether a process of `kind` measured its peak memory before it timed (a cold process, its one compiled model
    alone), so that a disturbance of its timing leaves its memory standing."""
    return kind == KIND_COLD


RESULT_FORMAT = 6  # of a TrialResult line; older ones are read with the fields added since at their defaults
RESULT_FIELDS_ADDED = {
    3: ("timeline_s",),
    4: ("turn_wait_s", "plan_sha256"),
    5: ("round_turns",),
    6: ("runner_sha256",),
}
#   format -> the TrialResult fields it added (1, no `format` key: before multi-arm processes; 2: those, without a
#   process's timeline; 3: before blocks together and before a launcher's lines named their plan; 4: before each
#   round's turn was recorded; 5: before a line named the runner that wrote it)


def environment_labels(names: list[str]) -> list[str]:
    """Labels of the compared environments, in order; a name given again (an A/A calibration) gets `#2`, `#3`."""
    labels, seen = [], {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        labels.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return labels


def key_part(name: str) -> str:
    """An environment's label or a variant's name as it goes into a metric key (metrics.json, MLflow): every character
    MLflow refuses in a key (all but letters, digits, `_`, `-`, `.` and space; `/` and `:` would make a path of it)
    made `_`. An A/A label `current#2` becomes `current_2`."""
    return re.sub(r"[^\w.\- ]", "_", name)


class RecordError(ValueError):
    """A result or spec that cannot be read: the message names the file, the line and the key."""


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
    deploy: str = "jit"  # jit | artifacts | aoti | regional (see compiling.compiled_module)
    serve: bool = False  # the process first serves each batch size of the suite, smallest first (compiling.serve_sizes)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> VariantSpec:
        return _build(cls, raw)


# settings.malloc: each malloc library a trial process can run on in place of the C library's (`libc`), with the
# name the dynamic linker knows it by and the Debian/Ubuntu package that has it
MALLOC_LIBRARIES = {"jemalloc": ("jemalloc", "libjemalloc2"), "tcmalloc": ("tcmalloc_minimal", "libtcmalloc-minimal4")}
# settings.cpu_isa -> what torch's own CPU kernels (and inductor's generated C++) may use, what oneDNN may use: the
# widest vector instructions a process's CPU code runs, capped below what the machine has (ATEN_CPU_CAPABILITY,
# DNNL_MAX_CPU_ISA and its newer name ONEDNN_MAX_CPU_ISA, read when the libraries start).
CPU_ISAS = {"sse41": ("default", "SSE41"), "avx2": ("avx2", "AVX2"), "avx512": ("avx512", "AVX512_CORE_BF16")}


@dataclass(frozen=True)
class TimingSpec:
    """How a trial measures: device, dtype, threads, iterations and times, tolerances, numerics settings."""

    device: str = "cpu"
    dtype: str = "float32"
    num_threads: int = 0  # 0 = one per core
    warmup_iters: int = 2
    warmup_s: float = 1.0  # untimed rounds of every arm right before timing, seconds at least (timing.warm_up)
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
    together: bool = False  # a block's timing processes alive together, timing in turns (turns.py); a plan from
    #                         before it ran them one after the other
    huge_pages: bool = False  # CPU: torch's allocator asks for transparent huge pages (THP_MEM_ALLOC_ENABLE=1)
    malloc: str = "libc"  # CPU: the C library's malloc, or jemalloc / tcmalloc preloaded (LD_PRELOAD)
    cpu_isa: str = ""  # CPU: the widest vector instructions torch's and oneDNN's kernels may use (CPU_ISAS); "" = all

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
    kind: str = KIND_PAIRED  # paired | arm | cold (see the module docstring)
    process_id: str = ""  # the timing process whose arm this trial is (its arms share it); "" = a process of its own
    timed: bool = True  # a cold process: times eager and its variant after its compile, a block of B/A; not where no
    #                     other environment is compared (one stack's own intervals take its timing processes only)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"TrialSpec {self.trial_id}: kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == KIND_ARM) != bool(self.process_id):
            raise ValueError(f"TrialSpec {self.trial_id}: an arm names its process, and only an arm does")

    @property
    def process(self) -> str:
        """The process this trial ran in: its timing process (shared by the arms), or its own."""
        return self.process_id or self.trial_id

    @property
    def run_key(self) -> tuple[str, str, int, str]:
        """The run this trial is a replicate of: (environment, model, batch size, variant)."""
        return self.environment, self.model.model_id, self.batch_size, self.variant.name

    @property
    def warm_cache_key(self) -> str:
        """environment/model/batch: the arms of its timing processes share this warm inductor cache, into which its
        variants' cold processes merged theirs."""
        return "/".join(self.trial_id.split("/")[:3])

    @property
    def cache_key(self) -> str:
        """A compiled run's trials (environment/model/batch/variant): its cold trials, then the warm ones."""
        return "/".join(self.trial_id.split("/")[:-1])

    @property
    def block(self) -> str:
        """The block this trial ran in (`variant/rN`, a cold compile `variant/cN`): A and B of a cell share it, so a
        comparison pairs them by it."""
        return f"{self.variant.name}/{'c' if self.kind == KIND_COLD else 'r'}{self.replicate}"

    @staticmethod
    def is_cold_block(block: str) -> bool:
        """Whether a block (`block`'s name) is a cold one: its processes are cold processes (not `times_own_level`)."""
        return block.rsplit("/", 1)[-1].startswith("c")

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
    started_at: float = 0.0  # unix time the launcher started the process (with wall_s: its window, on one clock)
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
    compile_position: int | None = None  # an arm: how many arms of its process compiled before it (0 = first)
    inductor_startup_s: float | None = None  # a timing process: inductor's one-time start-up, paid before its arms
    #                                          compile (compiling.start_inductor); not in their compile_s
    arms: tuple[str, ...] = ()  # a timing process: the variants it timed, in the order they compiled (eager first)
    compile_peak_mem_mib: float | None = None
    peak_mem_mib: float | None = None
    mem_delta_mib: float | None = None
    reserved_mem_mib: float | None = None  # CUDA: the caching allocator's reserved peak
    compile_reserved_mem_mib: float | None = None  # CUDA: reserved peak from the compile through warm-up (a CUDA-graph
    #                                                variant's recording and its graph pool included)
    warmup_calls: int = 0
    warmup_s: float | None = None  # seconds of untimed rounds right before timing
    warmup_drift: float | None = None  # how much the last warm-up rounds still sped up (0.02 = 2%; see timing.warm_up)
    eager_ms: tuple[float, ...] = ()  # eager latencies, paired with compiled_ms when a variant was compiled
    compiled_ms: tuple[float, ...] = ()
    timed_s: float | None = None
    disturbance: dict[str, float] = field(default_factory=dict)  # how busy the machine was while it timed (timing.py)
    compile_disturbance: dict[str, float] = field(default_factory=dict)  # ... while it compiled (its first call)
    variant_dtype: str | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    replay_max_rel_diff: float | None = None  # the output of a call after warm-up (a CUDA graph's replay) against eager
    task_check: str | None = None
    task_agreement: float | None = None
    health: CompileHealth | None = None
    serve_first_call_s: tuple[float, ...] = ()  # a `serve` variant: first call at each of serve_batch_sizes
    serve_graph_counts: tuple[int, ...] = ()  # dynamo graphs after each of those first calls
    device_state: dict[str, dict[str, Any]] = field(default_factory=dict)  # the machine at the start and end of timing
    #   (timing.machine_state: host affinity, iowait; GPU clocks, power, temperature, throttle reasons, processes)
    timeline_s: dict[str, float] = field(default_factory=dict)  # the process's moments, seconds since it started, by
    #   what it had just done (trial.mark), `measured` last; wall_s less that is its exit
    turn_wait_s: float | None = None  # a timing process of a block run together (turns.py): seconds it waited while
    #   the block's other processes took their turns; None for a process alone
    plan_sha256: str = ""  # a launcher's line of an exported plan: the digest of the plan.json it ran (plan_digest)
    runner_sha256: str = ""  # ... and of the runner.pyz that ran it ("" from a source tree: compilebench/runner.py)
    round_turns: tuple[int, ...] = ()  # a timing process of a block run together: the turn (turns.py) each timed round
    #   ran in, counted from its first; empty for a process alone

    @property
    def own_s(self) -> float:
        """The machine's time this process took: its wall time less what it waited while its block's other processes
        took their turns (their time, counted in theirs)."""
        return self.wall_s - (self.turn_wait_s or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "format": RESULT_FORMAT}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TrialResult:
        raw = dict(raw)
        raw.pop("format", None)
        raw["eager_ms"] = tuple(raw.get("eager_ms", ()))
        raw["compiled_ms"] = tuple(raw.get("compiled_ms", ()))
        raw["arms"] = tuple(raw.get("arms", ()))
        raw["round_turns"] = tuple(raw.get("round_turns", ()))
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
    adaptive: Loop | None = None  # the loop that adds blocks after the plan, where the machine running it has the
    #   analysis (its settings, the invocation's context, the compared environments); None: the plan's trials only
    runner_sha256: str = ""  # an exported plan: the SHA-256 of the runner.pyz exported beside it (runner.py)

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
                "adaptive": Loop.from_dict(raw["adaptive"], raw["invocation_id"]) if raw.get("adaptive") else None,
            },
        )


def williams_orders(arms: int) -> list[list[int]]:
    """Orders of `arms` arms in which each arm takes each position equally often and follows every other arm equally
    often (a Williams design: `arms` orders for an even count, twice as many for an odd one), so neither a position
    in the round nor the arm before it favours one arm."""
    if arms <= 1:
        return [list(range(arms))]
    first, low, high = [0], 1, arms - 1
    while len(first) < arms:
        first.append(low)
        low += 1
        if len(first) < arms:
            first.append(high)
            high -= 1
    orders = [[(arm + shift) % arms for arm in first] for shift in range(arms)]
    return orders if arms % 2 == 0 else orders + [order[::-1] for order in orders]


def processes(trials: list[TrialSpec]) -> list[list[TrialSpec]]:
    """The plan's trials as processes, in order: consecutive arms of one timing process together, any other trial
    alone."""
    grouped: list[list[TrialSpec]] = []
    for spec in trials:
        if spec.process_id and grouped and grouped[-1][0].process_id == spec.process_id:
            grouped[-1].append(spec)
        else:
            grouped.append([spec])
    return grouped


def units(trials: list[TrialSpec]) -> list[list[TrialSpec]]:
    """The plan's trials by unit: every trial of one (model, batch size), across environments and blocks, in the
    plan's order, units in the order they first appear. What an executor dispatches to a slot, and what an export
    split into windows keeps whole."""
    grouped: dict[tuple[str, int], list[TrialSpec]] = {}
    for spec in trials:
        grouped.setdefault((spec.model.model_id, spec.batch_size), []).append(spec)
    return list(grouped.values())
