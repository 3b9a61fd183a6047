"""One process of a run: what it measured (raw samples kept) and what follows from its samples alone.

A run lists its processes as `ProcessRecord`s (runs.py pools them) and keeps them as objects; compare, tracking and the
report read them there. A line of runs.jsonl is read back by `RunRecord.from_dict`, which reads its processes through
`ProcessRecord.from_dict`, the one place rows of earlier versions are migrated.
Pure functions over typed records.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from compilebench.analysis.validity import compile_disturbed, halves_p_value, halves_ratio, timing_disturbed
from compilebench.harness import sample_stats
from compilebench.records.formats import CACHE_COLD, CACHE_SHARED, KIND_PAIRED, STATUS_OK, TrialResult, TrialSpec
from compilebench.records.invocation import Context


@dataclass(frozen=True)
class ProcessRecord:
    """One process of a run: what it measured (raw samples kept) and the values that follow from its samples, for
    the run it is listed in (an eager run lists eager's memory, a compiled run its variant's). Held in the run's
    `process_results`; `from_dict` reads rows of any earlier version (the one place they are migrated)."""

    trial_id: str
    block: str  # `variant/rN` (a cold process: `variant/cN`): A and B of a cell share it
    kind: str = KIND_PAIRED  # paired | arm | cold
    process_id: str = ""  # the timing process (its arms share it)
    replicate: int = 0
    cache: str = CACHE_COLD
    cold_compile: bool = False  # compiled on an empty cache (compiled_cold)
    status: str = STATUS_OK
    started_at: float = 0.0
    wall_s: float = 0.0
    turn_wait_s: float | None = None  # a block run together: seconds it waited while the others took their turns
    compile_s: float | None = None  # the compiled run's first call; None in an eager run
    compile_position: int | None = None  # arms that compiled before this one in its process
    inductor_startup_s: float | None = None  # a timing process: inductor's one-time start-up, before its arms
    first_call_s: float | None = None  # eager's first call
    startup_s: float | None = None
    load_s: float | None = None
    peak_mem_mib: float | None = None  # the run's variant's (eager's in an eager run), where measured alone
    disturbance: dict[str, float] = field(default_factory=dict)
    compile_disturbance: dict[str, float] = field(default_factory=dict)
    disturbed: bool = False  # its samples are left out: the machine was busy while it timed (timing_disturbed)
    compile_disturbed: bool = False  # its compile time is left out: busy while it compiled
    eager_ms: tuple[float, ...] = ()
    compiled_ms: tuple[float, ...] = ()  # paired with eager_ms by round (empty in an eager run)
    round_turns: tuple[int, ...] = ()  # a block run together: each round's turn (turns.py); empty for a process alone
    warmup_s: float | None = None
    warmup_drift: float | None = None
    slot: str = ""  # where it ran (an executor's slot: machine and GPU), from its machine state
    machine_fingerprint: str = ""  # the hardware it ran on (fingerprint.fingerprint)
    omp_num_threads: str = ""  # OMP_NUM_THREADS as the process saw it
    serve_first_call_s: tuple[float, ...] = ()
    serve_graph_counts: tuple[int, ...] = ()
    timeline_s: dict[str, float] = field(default_factory=dict)  # its moments, seconds since it started (trial.mark)
    # Derived from the samples (`derived`):
    eager_ms_median: float | None = None
    eager_ms_mean: float | None = None
    compiled_ms_median: float | None = None
    compiled_ms_mean: float | None = None
    speedup: float | None = None  # median eager / median compiled (the dynamo harness's)
    speedup_of_means: float | None = None  # mean eager / mean compiled (the doc averaged its calls)
    pair_cv: float | None = None  # robust CV of the per-pair ratio (an eager run: of eager latency)
    halves_ratio: float | None = None  # the speedup of the process's second half of rounds over its first half
    halves_p: float | None = None  # how likely a steady process's halves differ that much (halves_p_value)

    @property
    def own_s(self) -> float:
        """The machine's time this process took (TrialResult.own_s): its wall time less its waits for turns."""
        return self.wall_s - (self.turn_wait_s or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], index: int = 0) -> ProcessRecord:
        """A row of `process_results` as written by any version: fields this version does not know are dropped,
        missing ones derived (the block from the trial id or position, values from the samples)."""
        known = {f.name for f in fields(cls)}
        row = {key: value for key, value in raw.items() if key in known}
        row["trial_id"] = row.get("trial_id") or f"p{index}"
        if not row.get("block"):
            trial_id = row["trial_id"]
            row["block"] = "/".join(trial_id.split("/")[-2:]) if trial_id.count("/") >= 4 else f"p{index}"
        if "cold_compile" not in raw:  # before it was recorded: by the cache
            row["cold_compile"] = raw.get("cache") in (CACHE_COLD, CACHE_SHARED)
        for key in ("eager_ms", "compiled_ms", "round_turns", "serve_first_call_s", "serve_graph_counts"):
            row[key] = tuple(row.get(key) or ())
        for key in ("disturbance", "compile_disturbance", "timeline_s"):
            row[key] = dict(row.get(key) or {})
        return derived(cls(**{k: v for k, v in row.items() if v is not None or k in _OPTIONAL}))


_OPTIONAL = {f.name for f in fields(ProcessRecord) if f.default is None}


def derived(record: ProcessRecord) -> ProcessRecord:
    """A process record with its values computed from its samples (a pure function of them)."""
    values: dict[str, Any] = {}
    if record.eager_ms:
        values.update(
            eager_ms_median=statistics.median(record.eager_ms), eager_ms_mean=statistics.mean(record.eager_ms)
        )
    paired = bool(record.eager_ms) and len(record.compiled_ms) == len(record.eager_ms)
    if paired:
        values.update(
            compiled_ms_median=statistics.median(record.compiled_ms),
            compiled_ms_mean=statistics.mean(record.compiled_ms),
            speedup=sample_stats.speedup(record.eager_ms, record.compiled_ms),
            speedup_of_means=statistics.mean(record.eager_ms) / statistics.mean(record.compiled_ms),
            halves_ratio=halves_ratio(record.eager_ms, record.compiled_ms),
            halves_p=halves_p_value(record.eager_ms, record.compiled_ms),
        )
    ratios = [e / c for e, c in zip(record.eager_ms, record.compiled_ms, strict=False) if c > 0] if paired else None
    samples = ratios if paired else list(record.eager_ms)
    if samples:
        values["pair_cv"] = sample_stats.summarize_ms(samples).get("robust_cv")
    return replace(record, **values)


def compiled_cold(spec: TrialSpec, result: TrialResult) -> bool:
    """Whether a process compiled on a cold cache: `cold` and `warm` caches say so; a `shared` cache (the user's, or
    the one a launcher primes) was warm for a process whose inductor graphs all came from it (FX-graph cache hits,
    no misses), as its counters record."""
    if spec.cache != CACHE_SHARED:
        return spec.cache == CACHE_COLD
    counters = result.health.inductor_counters if result.health else {}
    return not (counters.get("fxgraph_cache_hit", 0) > 0 and counters.get("fxgraph_cache_miss", 0) == 0)


def first_inference_s(result: TrialResult, first_call_s: float | None) -> float | None:
    """Time to a first output in a fresh process: start-up and imports, load, then `first_call_s` (eager's first
    call, or the compiled model's: compile, build or load, and call)."""
    parts = (result.startup_s, result.load_s, first_call_s)
    return None if any(part is None for part in parts) else sum(parts)


def process_record(spec: TrialSpec, result: TrialResult, context: Context, eager_run: bool = False) -> ProcessRecord:
    """A process as a run lists it: for an eager run, eager's samples, first call and memory only."""
    started = result.device_state.get("start") or {}  # the machine's state as the process began: its slot, threads
    record = ProcessRecord(
        trial_id=result.trial_id,
        block=spec.block,
        kind=spec.kind,
        process_id=spec.process_id,
        replicate=spec.replicate,
        cache=spec.cache,
        cold_compile=False if eager_run else compiled_cold(spec, result),
        status=result.status,
        started_at=result.started_at,
        wall_s=result.wall_s,
        turn_wait_s=result.turn_wait_s,
        compile_s=None if eager_run else result.compile_s,
        compile_position=None if eager_run else result.compile_position,
        inductor_startup_s=None if eager_run else result.inductor_startup_s,
        first_call_s=result.eager_first_call_s,
        startup_s=result.startup_s,
        load_s=result.load_s,
        peak_mem_mib=result.eager_peak_mem_mib if eager_run else result.peak_mem_mib,
        disturbance=dict(result.disturbance),
        compile_disturbance={} if eager_run else dict(result.compile_disturbance),
        disturbed=timing_disturbed(result, context.validity.disturbed_cores),
        compile_disturbed=False if eager_run else compile_disturbed(result, context.validity.disturbed_cores),
        eager_ms=tuple(result.eager_ms),
        compiled_ms=() if eager_run else tuple(result.compiled_ms),
        round_turns=tuple(result.round_turns),
        warmup_s=result.warmup_s,
        warmup_drift=result.warmup_drift,
        slot=str(started.get("slot", "")),
        machine_fingerprint=str(result.environment.get("machine_fingerprint", "")),
        omp_num_threads=str(started.get("omp_num_threads", "")),
        serve_first_call_s=tuple(result.serve_first_call_s),
        serve_graph_counts=tuple(result.serve_graph_counts),
        timeline_s=dict(result.timeline_s),
    )
    return derived(record)
