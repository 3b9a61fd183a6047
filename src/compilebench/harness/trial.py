"""A trial process, fresh for its trials: a timing process's arms, a cold trial, or a paired trial.

    python -m compilebench.harness.trial SPEC.json OUT.json     # run by the launcher, in the environment's interpreter
    python -m compilebench.harness.trial SPEC.json OUT.json --compile-only   # load, compile, first call: fills a cache

Every kind starts alike (start_process): threads and numerics set, the machine recorded, the checkpoint and its inputs
loaded, eager run once as the reference, warmed up and its peak memory measured while it is the only model loaded. Then
a timing process (run_arms) starts inductor and compiles each arm on its own copy of the model, in the block's order,
and times eager and every arm in alternating rounds; a cold trial (run_cold) compiles one variant on an empty cache,
measures its memory, then times it against eager (not with --compile-only); a paired trial (run_trial) compiles one
variant and times it against eager. How a variant is compiled, checked and its first call timed is compiling.py's.

On CUDA: float32 numerics (TF32, matmul precision, cuDNN autotuning) are set as the spec says and recorded; a
variant whose mode or options turn on CUDA graphs (reduce-overhead, max-autotune, `triton.cudagraphs`) marks each
step and gets at least compiling.CUDAGRAPH_WARMUP calls before timing, so graph recording is never timed.

Needs torch, transformers and what they need (numpy, pillow, safetensors, scipy, pyyaml): this runs in any
environment a comparison names, and on a GPU box with nothing else installed. A failure is a status with its
error; the result is written to OUT.json atomically either way.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from compilebench.harness import compiling, fingerprint, models, profiling, timing
from compilebench.harness.groups import die_with_parent
from compilebench.harness.names import CACHE_STARTUP_ENV, CPUS_ENV, LAUNCHER_PID, usable_cores
from compilebench.harness.turns import Solo, Turns, of_this_process
from compilebench.records.formats import (
    KIND_ARM,
    KIND_COLD,
    UNSUPPORTED,
    TimingSpec,
    TrialResult,
    TrialSpec,
    Unsupported,
)
from compilebench.records.writing import write_json

LOGGER = logging.getLogger(__name__)

OOM_MARKERS = ("out of memory", "outofmemory", "can't allocate memory", "cannot allocate memory", "memoryerror")
TIMELINE: dict[str, float] = {}  # this process's moments: seconds since it started, by what it had just done (mark)


def mark(moment: str) -> None:
    """Note that the process has just done `moment`, at its age in seconds (Linux; elsewhere nothing is noted): the
    timeline every result of the process carries, which accounts for its whole wall time, where the phases measured
    on their own (load, compile, timing) leave gaps."""
    age = timing.process_age_s()
    if age is not None:
        TIMELINE[moment] = round(age, 3)


def classify_error(error: BaseException, phase: str) -> str:
    """Status of a failure: unsupported (what the stack cannot run at all), oom (anywhere in the exception chain),
    compile_error (while compiling) or error."""
    seen: BaseException | None = error
    if isinstance(error, Unsupported):
        return UNSUPPORTED
    while seen is not None:
        text = f"{type(seen).__name__}: {seen}".lower()
        if isinstance(seen, MemoryError) or any(marker in text for marker in OOM_MARKERS):
            return "oom"
        seen = seen.__cause__ or seen.__context__
    return "compile_error" if phase == "compile" else "error"


def set_numerics(timing_spec: TimingSpec) -> None:
    """Float32 numerics on purpose, not by default: matmul precision (TF32 for matmuls), cuDNN TF32 and autotuning."""
    import torch

    torch.set_float32_matmul_precision(timing_spec.float32_matmul_precision)
    torch.backends.cudnn.allow_tf32 = timing_spec.cudnn_allow_tf32
    torch.backends.cudnn.benchmark = timing_spec.cudnn_benchmark


def threads(requested: int) -> int:
    """Intra-op threads: the requested number, or one per core this process may run on."""
    if requested:
        return requested
    return len(usable_cores())


def limit_device_memory(extra_mib: float, device: str) -> None:
    """CUDA: cap what the trial may add to the device from now on (0 = no cap) through the caching allocator, so
    exceeding it raises torch's out-of-memory error. (On the CPU the launcher watches the trial's resident memory:
    an address-space cap breaks allocations at random points inside torch, and a CUDA context maps far more virtual
    memory than it uses.)"""
    if extra_mib <= 0 or not device.startswith("cuda"):
        return
    import torch

    index = torch.device(device).index or 0
    total = torch.cuda.get_device_properties(index).total_memory
    allowed = torch.cuda.memory_allocated(index) + extra_mib * 2**20
    torch.cuda.set_per_process_memory_fraction(min(allowed / total, 1.0), index)


def load(spec: TrialSpec) -> dict[str, Any]:
    """The checkpoint on the device in the trial's dtype, and the inputs its processor makes from the image."""
    import torch
    from PIL import Image

    device, dtype = spec.timing.device, getattr(torch, spec.timing.dtype)
    folder = Path(spec.model.checkpoint)
    model_class = models.model_class(spec.model)
    mark("model code imported")
    model = model_class.from_pretrained(folder, use_safetensors=True, **models.dtype_argument(dtype))
    mark("checkpoint read")
    model = model.eval().to(device)
    mark("on the device")
    processor = models.load_processor(folder)
    with Image.open(spec.image) as image:
        single, text_source = models.single_inputs(spec.model, processor, image.convert("RGB"), folder)
    inputs = models.forward_inputs(model, models.batch_inputs(single, spec.batch_size))
    return {
        "model": model,
        "inputs": compiling.convert_inputs(inputs, device, dtype, channels_last=False),
        "batched": lambda size: models.forward_inputs(model, models.batch_inputs(single, size)),  # for `serve`
        "text_source": text_source,
        "input_shapes": {key: list(value.shape) for key, value in inputs.items()},
    }


def time_arms(calls: list[Any], timing_spec: TimingSpec, start: int, turns: Solo | None = None) -> dict[str, Any]:
    """Warm every arm up in rounds, then time them in rounds (index 0 is eager), in turns with its block's other
    processes where they run together (turns.py); the machine's state around it, and its disturbance while timing
    (taking turns: during its own turns only)."""
    device, turns = timing_spec.device, turns or Solo()
    state_before = timing.machine_state(device)
    rounds, warmup_s, drift = timing.warm_up(
        calls, device, timing_spec.warmup_iters, timing_spec.warmup_s, start, turns
    )
    mark("warmed up")
    turns.start_metering(timing.cpu_snapshot)  # alone: around the timing; taking turns: during its own turns
    samples, timed_s, round_turns = timing.round_samples(
        calls,
        device,
        timing_spec.min_iters,
        timing_spec.min_time_s,
        timing_spec.max_time_s,
        start,
        timing_spec.target_ci_halfwidth,
        turns,
    )
    busy = timing.disturbance(*turns.metered())
    mark("timed")
    return {
        "samples": samples,
        "timed_s": timed_s,
        "round_turns": tuple(round_turns),
        "disturbance": busy,
        "warmup_s": warmup_s,
        "warmup_drift": drift,
        "warmup_rounds": rounds,
        "device_state": {"start": state_before, "end": timing.machine_state(device)},
    }


def time_against_eager(
    eager: Any, compiled: compiling.Compiled, spec: TrialSpec, graphs: int, turns: Solo, state: dict | None = None
) -> dict[str, Any]:
    """Eager and one compiled variant timed in alternating rounds (time_arms), once the compile workers are stopped
    and the process's set-up turn is given up (alone: no turn; `state`'s phase is `run` from then): their samples and
    the rounds' facts as TrialResult fields, and the variant's health with the recompiles made since `graphs`
    (compiling.graphs_so_far) counted in."""
    compiling.stop_compile_workers()
    mark("compile workers stopped")
    turns.give(more=True)  # the set-up turn: the rounds follow
    if state is not None:
        state["phase"] = "run"
    timed = time_arms([eager, compiled.call], spec.timing, spec.replicate, turns)
    eager_ms, compiled_ms = timed.pop("samples")
    timed.pop("warmup_rounds")
    health = compiling.with_recompiles(compiled.health, compiling.graphs_so_far() - graphs)
    return {**timed, "health": health, "eager_ms": tuple(eager_ms), "compiled_ms": tuple(compiled_ms)}


def _message(error: BaseException) -> str:
    if isinstance(error, Unsupported):
        return str(error)  # what the stack lacks, as said
    return "".join(traceback.format_exception_only(error)).strip()


def start_process(spec: TrialSpec, known: dict[str, Any], waited_s: float = 0.0) -> tuple[dict[str, Any], Any, Any]:
    """What every kind of trial process does first: threads and numerics set, the machine recorded, the checkpoint
    loaded, eager's first call (the reference output), its warm-up and its peak memory, measured while eager's model
    is the only one loaded. Returns (loaded, eager call, reference output); fills `known`. `waited_s`: what the
    process spent waiting for its first turn (turns.py), not part of its start-up."""
    import torch

    timing_spec, device = spec.timing, spec.timing.device
    mark("imported")  # the interpreter, torch and the harness
    torch.set_num_threads(threads(timing_spec.num_threads))
    set_numerics(timing_spec)
    known["environment"] = fingerprint.collect(device)
    known["device_state"] = {"start": timing.machine_state(device)}  # a timing process adds its timing's start and end
    known["num_threads"] = torch.get_num_threads()
    age_s = timing.process_age_s()
    known["startup_s"] = None if age_s is None else age_s - waited_s
    mark("started")
    started = time.perf_counter()
    loaded = load(spec)
    known["load_s"] = time.perf_counter() - started
    mark("loaded")
    loaded["task"] = spec.model.task
    known.update(input_shapes=loaded["input_shapes"], text_source=loaded["text_source"])
    limit_device_memory(timing_spec.memory_limit_mib, device)
    eager = compiling.caller(loaded["model"], loaded["inputs"], cudagraphs=False)
    timing.reset_peak_memory(device)
    reference, eager_first_s = timing.time_first_call_s(eager, device)
    for _ in range(timing_spec.warmup_iters):
        eager()
    eager_peak, eager_delta = timing.memory_peak_mib(eager, timing_spec.memory_iters, device)
    known.update(eager_first_call_s=eager_first_s, eager_peak_mem_mib=eager_peak, eager_mem_delta_mib=eager_delta)
    mark("eager measured")
    return loaded, eager, reference


def before_its_turn(spec: TrialSpec) -> None:
    """What a process does before it may have to wait for its first turn: the model's code imported (transformers'
    modules: 2-3 s on a 2-core VM, measured by nothing), so that a block run together imports it in every process at
    once, at their start, instead of in each one's set-up turn while the others wait. Its seconds stay in the
    process's start-up (`startup_s`, the time before `started` less its waits), where the interpreter's and torch's
    imports are: a first inference still counts them. A model class that cannot be imported fails at load, as before."""
    try:
        models.model_class(spec.model)
    except (models.CardError, ImportError, RuntimeError):  # load meets it again, inside the trial's boundary
        return


def failed_variant(spec: TrialSpec, error: Exception, state: dict) -> tuple[str, str]:
    """A variant that failed (eager is still measured): its status and error, dynamo reset for what follows."""
    import torch

    LOGGER.exception("trial %s: variant %s failed while %s", spec.trial_id, spec.variant.name, state["phase"])
    torch._dynamo.reset()
    return classify_error(error, state["phase"]), _message(error)


def run_trial(spec: TrialSpec, profile: Path | None = None) -> TrialResult:
    """A paired trial: eager against one variant in this process (compiled on a cold or warm cache, then both timed
    in alternating rounds); a failure anywhere is a status with its error, never an exception. With `profile`, the
    variant's call is profiled after the timing, each generated kernel by name (profiling.capture); a profile that
    fails is logged, and the trial's result stands."""
    import dataclasses

    import torch
    import torch._dynamo  # torch 2.0 does not import it with torch: reset() below needs it

    timing_spec, device = spec.timing, spec.timing.device
    state: dict[str, Any] = {"phase": "load"}
    known: dict[str, Any] = {}
    try:
        with torch.no_grad():
            loaded, eager, reference = start_process(spec, known)
            failure = None
            if spec.variant.compile:
                try:
                    torch._dynamo.reset()
                    since = time.time()
                    compiled = compiling.compile_variant(spec, loaded, reference, state)
                    graphs = compiling.graphs_so_far()
                    peak, delta = timing.memory_peak_mib(compiled.call, timing_spec.memory_iters, device)
                    reserved = timing.peak_reserved_mib(device)
                    mark(f"{spec.variant.name} compiled")
                    measured = {
                        **compiled.measured(),
                        **time_against_eager(eager, compiled, spec, graphs, Solo()),
                        "peak_mem_mib": peak,
                        "mem_delta_mib": delta,
                        "reserved_mem_mib": reserved,
                    }
                    if profile is not None:
                        try:
                            health = dataclasses.asdict(compiled.health)
                            profiling.capture(compiled.call, device, profile, since, health)
                            mark("profiled")
                        except Exception:  # the profile is an extra: the trial's own result stands
                            LOGGER.exception("trial %s: its profile failed", spec.trial_id)
                except Exception as error:  # the variant failed: eager is still measured, for the eager run
                    failure = failed_variant(spec, error, state)
            if not spec.variant.compile or failure is not None:
                state["phase"] = "run"
                for _ in range(timing_spec.warmup_iters if failure else 0):  # warm again after a failed compile
                    eager()
                before = timing.cpu_snapshot()
                samples, timed_s = timing.single_samples(
                    eager, device, timing_spec.min_iters, timing_spec.min_time_s, timing_spec.max_time_s
                )
                mark("timed")
                status, error_text = failure or ("ok", None)
                measured = {
                    "status": status,
                    "error": error_text,
                    "eager_ms": tuple(samples),
                    "timed_s": timed_s,
                    "warmup_calls": timing_spec.warmup_iters,
                    "disturbance": timing.disturbance(before, timing.cpu_snapshot()),
                }
    except Exception as error:  # the trial boundary: what happened becomes the result
        LOGGER.exception("trial %s failed while %s", spec.trial_id, state["phase"])
        return TrialResult.failed(spec.trial_id, classify_error(error, state["phase"]), _message(error), **known)
    return TrialResult(trial_id=spec.trial_id, **{**known, **measured})


def run_cold(spec: TrialSpec, turns: Solo | None = None, timed: bool = True) -> TrialResult:
    """A cold process (on an empty cache, or priming a shared one): eager's reference, then the variant compiled, its
    first call timed (cold compile time), checked, warmed up and its peak memory measured while it is the only
    compiled model in the process. Then, with the compile workers stopped, eager and the variant are timed in
    alternating rounds, as in a timing process (`timed`: not when priming): a block of their own for the variant's
    latency and speedup, and eager's. Where the cell's cold processes of every environment run together (turns.py),
    everything up to the compile workers' stop is this process's set-up turn, so the other waits while it compiles
    and its cold compile has the machine alone. The cold process that first fills a warm cache then, with
    everything measured, compiles inductor's start-up network into it (cache_startup_network)."""
    import torch

    state: dict[str, Any] = {"phase": "load"}
    known: dict[str, Any] = {}
    turns = turns or Solo()
    before_its_turn(spec)
    turns.take()
    if isinstance(turns, Turns):
        mark("its turn")
    try:
        with torch.no_grad():
            loaded, eager, reference = start_process(spec, known, waited_s=turns.waited_s)
            compiled = compiling.compile_variant(spec, loaded, reference, state)
            timing.reset_peak_memory(spec.timing.device)
            peak, delta = timing.memory_peak_mib(compiled.call, spec.timing.memory_iters, spec.timing.device)
            mark(f"{spec.variant.name} compiled")
            measured = {
                **compiled.measured(),
                "peak_mem_mib": peak,
                "mem_delta_mib": delta,
                "reserved_mem_mib": timing.peak_reserved_mib(spec.timing.device),
            }
            if timed:
                measured.update(
                    time_against_eager(eager, compiled, spec, compiling.graphs_so_far(), turns, state),
                    turn_wait_s=turns.waited_s if isinstance(turns, Turns) else None,
                )
        if os.environ.get(CACHE_STARTUP_ENV):
            cache_startup_network(spec)
    except Exception as error:  # the trial boundary
        LOGGER.exception("cold trial %s failed while %s", spec.trial_id, state["phase"])
        return TrialResult.failed(spec.trial_id, classify_error(error, state["phase"]), _message(error), **known)
    return TrialResult(trial_id=spec.trial_id, **{**known, **measured})


def cache_startup_network(spec: TrialSpec) -> None:
    """Compile inductor's start-up network (compiling.start_inductor) into this cold process's cache, after all it
    measures; the launcher asks it of the first cold process of each warm cache (CACHE_STARTUP_ENV). A timing process
    starts inductor on that network before its arms; without it in the warm cache, the first timing process of each
    (environment, model, batch size) compiled it afresh, its start-up 7-10 s longer than the later ones'
    (docs/findings.md, 2026-11-29). Once a cache, the seconds are the same: paid here, unmeasured,
    instead of in that start-up. A failure here is logged, not the trial's: the timing processes' own start-up meets
    it and records it."""
    try:
        compiling.start_inductor(spec.timing.device)
        mark("start-up network compiled")
    except Exception:
        LOGGER.warning(
            "cold trial %s: inductor's start-up network did not compile into its cache", spec.trial_id, exc_info=True
        )


def run_arms(specs: list[TrialSpec], turns: Solo | None = None) -> list[TrialResult]:
    """A timing process: eager and every compiled arm of one (environment, model, batch size). Inductor is started
    first (start_inductor); then each compiled arm compiles its own copy of the model, in the listed order (the plan
    rotates it per block), from the warm cache of its model and batch size; an arm that fails is a status, and the
    others go on. With the compile workers stopped, every arm is warmed up and timed in rounds
    (timing.round_samples), so each arm's i-th call and eager's come from the same round. Where the block's
    processes run together (turns.py), all of that up to the compile workers' stop is this process's first turn,
    and each round a turn."""
    import torch

    first, timing_spec, turns = specs[0], specs[0].timing, turns or Solo()
    state: dict[str, Any] = {"phase": "load"}
    known: dict[str, Any] = {}
    arms = tuple(spec.variant.name for spec in specs)
    before_its_turn(first)
    turns.take()
    if isinstance(turns, Turns):
        mark("its turn")  # the time before is the interpreter's, the harness's imports and the wait for this turn
    try:
        with torch.no_grad():
            loaded, eager, reference = start_process(first, known, waited_s=turns.waited_s)
            calls, compiled_arms, outcomes = [eager], [], {}
            if any(spec.variant.compile for spec in specs):
                state["phase"] = "compile"
                known["inductor_startup_s"] = compiling.start_inductor(timing_spec.device)
                mark("inductor started")
            for position, spec in enumerate(s for s in specs if s.variant.compile):
                try:
                    compiled = compiling.compile_variant(spec, loaded, reference, state, own_copy=True)
                    _, delta = timing.memory_peak_mib(compiled.call, timing_spec.memory_iters, timing_spec.device)
                    outcomes[spec.trial_id] = {
                        **compiled.measured(),
                        "mem_delta_mib": delta,
                        "compile_position": position,
                    }
                    calls.append(compiled.call)
                    compiled_arms.append(spec)
                    mark(f"{spec.variant.name} compiled")
                except Exception as error:  # this arm failed; eager and the other arms are still timed
                    status, text = failed_variant(spec, error, state)
                    outcomes[spec.trial_id] = {"status": status, "error": text, "compile_position": position}
                    if status == "oom":
                        raise
            compiling.stop_compile_workers()
            mark("compile workers stopped")
            turns.give(more=True)  # the set-up turn: the rounds follow
            state["phase"] = "run"
            graphs = compiling.graphs_so_far()  # the last arm's; made while timing, a graph means a guard failed
            timed = time_arms(calls, timing_spec, first.replicate, turns)
            recompiles = compiling.graphs_so_far() - graphs
    except Exception as error:  # the process boundary: every arm ends with what happened
        LOGGER.exception("timing process %s failed while %s", first.process_id, state["phase"])
        status, text = classify_error(error, state["phase"]), _message(error)
        return [TrialResult.failed(spec.trial_id, status, text, arms=arms, **known) for spec in specs]
    samples = timed.pop("samples")
    timed.pop("warmup_rounds")
    eager_ms = tuple(samples[0])
    shared = {
        **known,
        **timed,
        "arms": arms,
        "eager_ms": eager_ms,
        "warmup_calls": timing_spec.warmup_iters,
        "turn_wait_s": turns.waited_s if isinstance(turns, Turns) else None,
    }
    results = []
    for spec in specs:
        if not spec.variant.compile:
            results.append(TrialResult(trial_id=spec.trial_id, status="ok", **shared))
            continue
        outcome = dict(outcomes[spec.trial_id])
        timed_ids = [arm.trial_id for arm in compiled_arms]
        if spec.trial_id in timed_ids:  # every arm's health counts the process's recompiles while timing
            outcome["compiled_ms"] = tuple(samples[1 + timed_ids.index(spec.trial_id)])
            outcome["health"] = compiling.with_recompiles(outcome["health"], recompiles)
        results.append(TrialResult(trial_id=spec.trial_id, **{**shared, **outcome}))
    return results


def run_process(specs: list[TrialSpec], turns: Solo | None = None, profile: Path | None = None) -> list[TrialResult]:
    """What one fresh process measures for its trials: a timing process's arms (taking turns with its block's other
    processes where they run together), or one cold or paired trial (`profile`: see run_trial)."""
    if specs[0].kind == KIND_ARM:
        return run_arms(specs, turns)
    if len(specs) != 1:
        raise ValueError(f"a process of kind {specs[0].kind} runs one trial, got {len(specs)}")
    return [run_cold(specs[0], turns, specs[0].timed) if specs[0].kind == KIND_COLD else run_trial(specs[0], profile)]


def end_with_launcher() -> None:
    """On Linux, have the kernel end this trial when its launcher dies (a `kill -9` of the benchmark); otherwise it
    would run on unseen, for minutes. Its compile workers exit when it does (their pipe to it closes)."""
    expected = os.environ.get(LAUNCHER_PID)
    if not expected or not die_with_parent():
        return
    if os.getppid() != int(expected):  # the launcher died before the request took effect
        os._exit(1)


def leave() -> None:
    """End the process once its result is on disk, without the interpreter's teardown (every module, library and
    tensor freed, the libraries' exit handlers): seconds of each process's wall time that measure nothing
    (benchmarks/process_time.py shows them as `exit`). Compile workers are stopped first, as their exit handler
    would (in a process that compiled), and the logs and output streams flushed."""
    if "torch._inductor.async_compile" in sys.modules:
        compiling.stop_compile_workers()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def pin_to_slot() -> None:
    """Run on the cores the slot was given (COMPILEBENCH_CPUS, set by an executor that runs slots side by side)."""
    cores = os.environ.get(CPUS_ENV)
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(core) for core in cores.split(",")})


def main() -> None:
    end_with_launcher()
    pin_to_slot()
    parser = argparse.ArgumentParser(description="Run one process's trials in this process.")
    parser.add_argument("spec", type=Path, help="a trial spec, or a list of them: a timing process's arms")
    parser.add_argument("out", type=Path, help="the results, a list in the specs' order")
    parser.add_argument("--compile-only", action="store_true", help="load, compile, check: fill the cache")
    parser.add_argument("--profile", action="store_true", help="a paired trial, then its call profiled: OUT.profile/")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.time()
    raw = json.loads(args.spec.read_text())
    specs = [TrialSpec.from_dict(item) for item in (raw if isinstance(raw, list) else [raw])]
    profile = args.out.with_suffix(".profile") if args.profile else None
    results = [run_cold(specs[0], timed=False)] if args.compile_only else run_process(specs, of_this_process(), profile)
    mark("measured")
    rows = [{**result.to_dict(), "started_at": started, "timeline_s": dict(TIMELINE)} for result in results]
    write_json(args.out, rows, indent=None)
    leave()


if __name__ == "__main__":
    main()
