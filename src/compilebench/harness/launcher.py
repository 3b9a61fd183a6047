"""Runs trials, each in a fresh process of its environment's interpreter, in the plan's order; resumable.

The benchmark stage calls `run_trials` with the project's plan; on another machine the runner (compilebench/runner.py,
`python runner.pyz PLAN.json OUT`) calls `launch` with an exported one. `launch` builds the checkpoints the plan's
recipes describe (random weights, published architecture), runs every trial, and appends each result to
OUT_DIR/trials.jsonl as it completes (flushed to disk: a killed run resumes where it stopped).

A process runs one trial, or a timing process's arms (consecutive trials with one `process_id`), by the process
runner (harness/trial_process.py: its own process group, timeout, memory cap and OOM attribution). Unless the cache
is `shared`, each gets its own cache folders (inductor's, triton's, and the temp folder where torch keeps precompiled
C++ headers): empty for a cold trial; for a timing process, the warm cache of its (environment, model, batch size),
into which each of its variants' cold processes was merged as it ended (the first of them also compiles
inductor's start-up network for it: trial.cache_startup_network); for a paired trial, its run's cold trial's. A
variant whose trial ended in a failure that would repeat is left out of the processes after it.
What it writes into OUT, and reads back to resume, is results_folder.py's. Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from compilebench.harness import fingerprint
from compilebench.harness.names import CACHE_STARTUP_ENV, thread_environment, usable_cores
from compilebench.harness.results_folder import (
    ADDED_TRIALS,
    ENVIRONMENT,
    FINISHED,
    append_results,
    json_lines,
    plan_progress,
    read_added,
    read_results,
)
from compilebench.harness.trial_process import cache_variables, run_together, run_trial_process
from compilebench.records.formats import (
    CACHE_COLD,
    CACHE_SHARED,
    DEPLOY_AOTI,
    DEPLOY_ARTIFACTS,
    ENDED_FROM_OUTSIDE,
    KIND_ARM,
    KIND_COLD,
    MEASURED_NOTHING,
    STATUS_OK,
    Plan,
    TrialResult,
    TrialSpec,
    processes,
)
from compilebench.records.reading import plan_digest
from compilebench.records.writing import append_lines, write_json

LOGGER = logging.getLogger(__name__)
WARM_CACHES = "inductor-cache"  # under the work folder: each environment, model and batch size's warm cache

# A warm trial repeats its cold trial: when that one ended like this, the repeats would too, minutes each. A process
# ended from outside says nothing of its trials: the blocks after it run (the loop measures its block again).
NOT_REPEATED = tuple(status for status in MEASURED_NOTHING if status not in ENDED_FROM_OUTSIDE)


def not_repeated(spec: TrialSpec, first: TrialResult) -> TrialResult:
    """A replicate left out because the first trial of its run already failed in a way it would repeat."""
    return TrialResult.failed(
        spec.trial_id, first.status, f"not run: the first trial of this run ended {first.status}: {first.error}"
    )


def trial_folders(spec: TrialSpec, workdir: Path) -> tuple[Path | None, Path]:
    """A trial's inductor cache folder (None: the user's) and its run's deploy folder. A cold trial starts both
    empty (also after an interruption); a cold trial's cache is its own, merged into the warm
    cache when it ends (`merge_cold_cache`). A timing process's arms share that warm cache. A warm paired
    trial reuses its run's cold trial's cache, except where the run carries its compile over in the deploy folder
    (portable artifacts, an AOTInductor package): then it starts on an empty cache of its own, as a fresh machine
    would."""
    deploy_dir = workdir / "deploy" / spec.cache_key
    if spec.cache == CACHE_SHARED:
        return None, deploy_dir
    if spec.kind == KIND_ARM:
        return warm_cache(spec, workdir), deploy_dir
    if spec.kind == KIND_COLD:
        cache_dir = workdir / "inductor-cache-cold" / spec.cache_key / f"c{spec.replicate}"
        shutil.rmtree(cache_dir, ignore_errors=True)
        return cache_dir, deploy_dir
    cache_dir = workdir / WARM_CACHES / spec.cache_key
    if spec.cache == CACHE_COLD:
        shutil.rmtree(cache_dir, ignore_errors=True)
        shutil.rmtree(deploy_dir, ignore_errors=True)
    elif spec.variant.deploy in (DEPLOY_ARTIFACTS, DEPLOY_AOTI):
        cache_dir = workdir / "inductor-cache-empty" / spec.cache_key / f"r{spec.replicate}"
        shutil.rmtree(cache_dir, ignore_errors=True)
    return cache_dir, deploy_dir


def warm_cache(spec: TrialSpec, workdir: Path) -> Path:
    """The warm inductor cache of a trial's (environment, model, batch size): its timing processes' arms share it."""
    return workdir / WARM_CACHES / spec.warm_cache_key


def merge_cold_cache(spec: TrialSpec, cache_dir: Path, workdir: Path) -> None:
    """A cold trial's caches into the warm cache of its model and batch size (inductor's entries are
    named by content, so variants' caches merge without clashing), then its own folder removed."""
    shutil.copytree(cache_dir, warm_cache(spec, workdir), dirs_exist_ok=True, symlinks=True)
    shutil.rmtree(cache_dir, ignore_errors=True)


def together_blocks(groups: list[list[TrialSpec]]) -> list[list[list[TrialSpec]]]:
    """The processes of a plan (processes()) as the launcher runs them: the consecutive processes of one block (a
    timing block: one model, batch size and replicate; a cold block: one variant's cold processes of them too; each
    environment once) together when their timing says so (`benchmark.together`), every other process alone."""
    blocks: list[list[list[TrialSpec]]] = []
    for group in groups:
        first = group[0]
        last = blocks[-1][-1][0] if blocks else None
        joins = (
            first.kind in (KIND_ARM, KIND_COLD)
            and first.timing.together
            and last is not None
            and last.kind == first.kind
            and block_of(last) == block_of(first)
            and first.environment not in {other[0].environment for other in blocks[-1]}
        )
        if joins:
            blocks[-1].append(group)
        else:
            blocks.append([group])
    return blocks


def block_of(spec: TrialSpec) -> tuple:
    """What the processes of one block share: model, batch size and replicate (a cold block: its variant too)."""
    variant = spec.variant.name if spec.kind == KIND_COLD else ""
    return spec.model.model_id, spec.batch_size, spec.replicate, variant


def process_variables(
    spec: TrialSpec, cache_dir: Path | None, workdir: Path, slot: dict[str, str] | None
) -> dict[str, str] | None:
    """The environment variables a process of `spec` starts with: its slot's, and, for the cold process that first
    fills its warm cache, the request to compile inductor's start-up network into it (run_cold)."""
    if spec.kind == KIND_COLD and cache_dir is not None and not warm_cache(spec, workdir).exists():
        return {**(slot or {}), CACHE_STARTUP_ENV: "1"}
    return slot


def run_trials(
    trials: list[TrialSpec],
    pythons: dict[str, str],
    workdir: Path,
    timeout_s: float,
    done: dict[str, TrialResult] | None = None,
    on_process: Callable[[list[TrialSpec], list[TrialResult], bool], None] | None = None,
    slot: dict[str, str] | None = None,
    before_process: Callable[[list[TrialSpec]], None] | None = None,
) -> list[TrialResult]:
    """Run `trials` in order, a process at a time, or a block's timing processes together (together_blocks), skipping
    processes whose trials are all in `done` (one done in part runs again whole: its arms are paired only with each
    other); `on_process(specs, results, resumed)` after each process, with its trials' results. A variant whose first
    trial failed in a way that would repeat is not run again (`not_repeated`). `slot`: environment variables of the
    slot the trials run on (executors). `before_process(specs)` before a process (a block: its first) starts: it may
    raise to stop the run there (`Deadline`)."""
    done = dict(done or {})
    first_failure: dict[str, TrialResult] = {}  # by cache key (environment/model/batch/variant): its first failure
    results: list[TrialResult] = []

    def ended(group: list[TrialSpec], ran: dict[str, TrialResult], resumed: bool) -> None:
        found = [
            ran.get(spec.trial_id)
            or (
                not_repeated(spec, first_failure[spec.cache_key])
                if spec.cache_key in first_failure
                else TrialResult.failed(spec.trial_id, "crashed", "its process wrote no result for this trial")
            )
            for spec in group
        ]
        for spec, result in zip(group, found, strict=True):
            if result.status in NOT_REPEATED:
                first_failure.setdefault(spec.cache_key, result)
        results.extend(found)
        if on_process is not None:
            on_process(group, found, resumed)

    for block in together_blocks(processes(trials)):
        todo: list[tuple[list[TrialSpec], list[TrialSpec]]] = []  # (the process's trials, those that run)
        for group in block:
            if all(spec.trial_id in done for spec in group):
                ended(group, done, resumed=True)
            else:  # an eager arm alone still runs: the eager run needs its samples
                todo.append((group, [spec for spec in group if spec.cache_key not in first_failure]))
        runnable = [run for _, run in todo if run]
        if runnable and before_process is not None:
            before_process(runnable[0])
        ran: dict[str, TrialResult] = {}
        folders = {run[0].trial_id: trial_folders(run[0], workdir) for run in runnable}
        variables = {
            run[0].trial_id: process_variables(run[0], folders[run[0].trial_id][0], workdir, slot) for run in runnable
        }
        if len(runnable) > 1:
            for measured in run_together(
                runnable,
                lambda spec: pythons[spec.environment],
                workdir / "trials",
                lambda spec, found=folders: found[spec.trial_id],
                timeout_s,
                lambda spec, found=variables: found[spec.trial_id],
            ):
                ran.update((result.trial_id, result) for result in measured)
        elif runnable:
            first = runnable[0][0]
            cache_dir, deploy_dir = folders[first.trial_id]
            measured = run_trial_process(
                runnable[0] if first.kind == KIND_ARM else first,
                pythons[first.environment],
                workdir / "trials",
                cache_dir,
                timeout_s,
                deploy_dir=deploy_dir,
                slot=variables[first.trial_id],
            )
            ran = {result.trial_id: result for result in (measured if isinstance(measured, list) else [measured])}
        for run in runnable:  # a cold process's own cache, into the warm cache of its model and batch size
            cache_dir = folders[run[0].trial_id][0]
            if run[0].kind == KIND_COLD and cache_dir is not None:
                merge_cold_cache(run[0], cache_dir, workdir)
        for group, _ in todo:
            ended(group, ran, resumed=False)
    return results


class WindowEnded(Exception):
    """The launcher's --stop-after-min came: the processes left are for a later window, which resumes them."""


class Deadline:
    """No process starts that would not end by `at` (seconds since the epoch; None: no deadline), by the longest
    process of its model in this window so far (else the median of all, else nothing): a window ends between
    processes, with every line written, rather than in the middle of one."""

    def __init__(self, at: float | None) -> None:
        self.at = at
        self.walls_s: dict[str, list[float]] = {}

    def ended(self, specs: list[TrialSpec], results: list[TrialResult]) -> None:
        """A process of this window ended: its wall time counts for its model."""
        wall_s = max((result.wall_s or 0.0 for result in results), default=0.0)
        self.walls_s.setdefault(specs[0].model.model_id, []).append(wall_s)

    def expected_s(self, specs: list[TrialSpec]) -> float:
        own = self.walls_s.get(specs[0].model.model_id)
        every = sorted(wall for walls in self.walls_s.values() for wall in walls)
        return max(own) if own else (every[len(every) // 2] if every else 0.0)

    def check(self, specs: list[TrialSpec]) -> None:
        """Raise WindowEnded when the process of `specs` would end after the deadline."""
        expected_s = self.expected_s(specs)
        if self.at is not None and time.time() + expected_s > self.at:
            raise WindowEnded(f"--stop-after-min: {specs[0].process} would end after it (about {expected_s:.0f} s)")


def parse_cpus(text: str) -> list[int]:
    """Cores as `taskset` lists them: "2-9", "0,2,4-6". Raises ValueError naming what is wrong."""
    cores: set[int] = set()
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
            raise ValueError(f"{part!r} is not a core or a range of cores (such as 2 or 2-9)")
        cores.update(range(int(low), int(high or low) + 1))
    if not cores:
        raise ValueError("no core given")
    return sorted(cores)


def boot_id() -> str:
    """This machine's boot (Linux's random boot id; else the host name): what a primed cache belongs to."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return fingerprint.host()["hostname"]


def prime(
    trials: list[TrialSpec], pythons: dict[str, str], workdir: Path, cache_dir: Path, timeout_s: float, workers: int
) -> list[tuple[str, TrialResult]]:
    """Compile each run once, `workers` at a time, into one shared cache (for `shared`-cache plans on machines with
    many cores). Compile times measured this way overlap each other: they are kept apart, never reported as cold."""
    from concurrent.futures import ThreadPoolExecutor

    first = list({spec.cache_key: spec for spec in reversed(trials) if spec.variant.compile}.values())[::-1]
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        futures = [
            pool.submit(
                run_trial_process,
                spec,
                pythons[spec.environment],
                workdir / "prime",
                cache_dir,
                timeout_s,
                "--compile-only",
                deploy_dir=workdir / "deploy" / spec.cache_key,
            )
            for spec in first
        ]
        return [(spec.cache_key, future.result()) for spec, future in zip(first, futures, strict=True)]
    finally:  # stopped: the primes not started never start, and those running were ended by the stop's handler
        pool.shutdown(wait=True, cancel_futures=True)


def build_checkpoints(plan: Plan, root: Path) -> list[dict]:
    """Build each recipe's random-init checkpoint under `root` (skipping complete folders); what was built. A recipe
    that fails to build (this transformers lacks a class, say) is an entry with its `error`, logged, and no folder:
    its model's trials then fail at load, as a status, while the other models run."""
    from compilebench.harness import models  # torch and transformers: only on the machine that runs trials

    built = []
    for recipe in plan.recipes:
        folder = root / recipe.folder
        record = folder / "compilebench-recipe.json"
        entry = {
            "model_id": recipe.model_id,
            "folder": recipe.folder,
            "weights_source": "random-init",
            "config_origin": f"recipe:{recipe.config_class}",
            "seed": recipe.seed,
        }
        if not record.exists():
            partial = folder.with_name(folder.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            try:
                param_count = models.build_checkpoint(recipe, partial)
            except Exception as error:  # one model's recipe: the window goes on with the others
                LOGGER.error("checkpoint of %s not built: %s: %s", recipe.model_id, type(error).__name__, error)
                shutil.rmtree(partial, ignore_errors=True)
                built.append({**entry, "param_count": None, "error": f"{type(error).__name__}: {error}"[:2000]})
                continue
            (partial / record.name).write_text(json.dumps({"param_count": param_count}))
            shutil.rmtree(folder, ignore_errors=True)
            partial.rename(folder)
        built.append({**entry, "param_count": json.loads(record.read_text())["param_count"]})
    return built


def pinned_slot(cpus: str | None) -> dict[str, str] | None:
    """The variables that pin timing processes to `cpus` (a taskset list), a thread per core; None without it.
    ValueError names what is wrong."""
    if cpus is None:
        return None
    allowed = usable_cores()
    try:
        cores = parse_cpus(cpus)
    except ValueError as error:
        raise ValueError(f"--cpus {cpus!r}: {error}") from None
    if not set(cores) <= set(allowed):
        raise ValueError(
            f"--cpus {cpus!r}: cores {sorted(set(cores) - set(allowed))} are not among this machine's "
            f"cores this process may use, {allowed}"
        )
    return thread_environment(len(cores), cores)


def path_problem(*folders: Path) -> str | None:
    """Why the launcher cannot work in these folders: a space in a path, which torch's inductor hands to the C++
    compiler unquoted (every compiled trial would end `compile_error`); None where it can."""
    for folder in folders:
        if any(character.isspace() for character in str(folder.resolve())):
            return (
                f"{str(folder.resolve())!r} contains a space: torch's inductor passes the cache paths under it to "
                "the C++ compiler unquoted, so every compiled trial would fail; move the plan's folder to a path "
                "without spaces"
            )
    return None


def plan_problem(plan: Plan, pythons: dict[str, str], prime_parallel: int) -> str | None:
    """Why this launcher cannot run `plan` as asked, or None."""
    missing = sorted({spec.environment for spec in plan.trials} - set(pythons))
    if missing:
        return f"the plan runs environments {missing}; give their interpreters with --python ENV=PATH"
    if prime_parallel and any(spec.cache != CACHE_SHARED for spec in plan.trials):
        return "--prime needs a plan exported with benchmark.compile_cache=shared"
    return None


def log_process(specs: list[TrialSpec], ended: list[TrialResult], resumed: bool) -> None:
    """One line per trial of a process that ended (or had ended in an earlier window): status and medians."""
    for spec, result in zip(specs, ended, strict=True):
        medians = ""
        if result.status == STATUS_OK and result.eager_ms:
            medians = f" eager {sorted(result.eager_ms)[len(result.eager_ms) // 2]:.2f} ms"
            if result.compiled_ms:
                medians += f" compiled {sorted(result.compiled_ms)[len(result.compiled_ms) // 2]:.2f} ms"
                medians += f" first call {result.compile_s:.1f} s"
        LOGGER.info(
            "%s: %s%s (%.0f s)%s",
            spec.trial_id,
            result.status,
            medians,
            result.wall_s,
            " (done before)" if resumed else "",
        )


def prime_shared_cache(
    trials: list[TrialSpec],
    done: dict[str, TrialResult],
    pythons: dict[str, str],
    out: Path,
    timeout_s: float,
    parallel: int,
) -> None:
    """Compile every run not done and not primed on this machine before, `parallel` at a time, into the shared
    cache, which this process's environment then points the trials at; each prime's result in prime.jsonl."""
    started = time.time()
    cache = out / "shared-cache"
    boot, cached = boot_id(), cache.is_dir()  # a later window on a fresh machine finds prime.jsonl, not the cache
    primed_before = {
        line["cache_key"] for line in json_lines(out / "prime.jsonl") if line.get("boot_id") == boot and cached
    }
    os.environ.update(cache_variables(cache))  # the trials after the prime find all it compiled
    pending = [spec for spec in trials if spec.trial_id not in done and spec.cache_key not in primed_before]
    primed = prime(pending, pythons, out / "work", cache, timeout_s, parallel)
    append_lines(
        out / "prime.jsonl",
        [
            json.dumps({**result.to_dict(), "cache_key": key, "parallel": parallel, "boot_id": boot})
            for key, result in primed
        ],
    )
    LOGGER.info("primed %d runs %d at a time in %.0f s", len(primed), parallel, time.time() - started)


def launch(
    plan: Plan,
    plan_path: Path,
    out: Path,
    pythons: dict[str, str],
    pinned: dict[str, str] | None,
    timeout_s: float,
    prime_parallel: int = 0,
    stop_after_min: float | None = None,
    budget_min: float | None = None,
    loop: Callable | None = None,
    runner_sha256: str = "",
) -> None:
    """Build the plan's checkpoints, prime (`prime_parallel` at a time), run its trials into `out`, then `loop(plan,
    trials, run, out, budget_min)` where given (the runner's adaptive loop, which adds blocks); a plan that has run to
    its end leaves FINISHED there, a window that ended leaves what a later run resumes from. Every line written names
    the plan and the runner it came from (`runner_sha256`: "" from a source tree)."""
    os.chdir(plan_path.resolve().parent)  # the plan's paths are relative to its folder
    out.mkdir(parents=True, exist_ok=True)
    (out / FINISHED).unlink(missing_ok=True)  # a larger --budget-min may add blocks to a plan that had finished
    started = time.time()
    digest = plan_digest(plan_path)  # every line written names the plan it belongs to
    used = dict.fromkeys(spec.environment for spec in plan.trials)  # each compared environment: its own packages
    freezes = {python: fingerprint.freeze(python) for python in {sys.executable, *(pythons[label] for label in used)}}
    environment = {
        "python": sys.executable,
        "freeze": freezes[sys.executable],
        "invocation_id": plan.invocation_id,
        "plan_sha256": digest,
        "runner_sha256": runner_sha256,
        "environments": {label: {"python": pythons[label], "freeze": freezes[pythons[label]]} for label in used},
    }
    write_json(out / ENVIRONMENT, environment, indent=None)
    (out / "checkpoints.json").write_text(json.dumps(build_checkpoints(plan, Path.cwd()), indent=1))
    LOGGER.info("checkpoints ready in %.0f s", time.time() - started)
    results_path = out / "trials.jsonl"
    deadline = Deadline(None if stop_after_min is None else started + stop_after_min * 60)

    def report(specs: list[TrialSpec], ended: list[TrialResult], resumed: bool) -> None:
        if not resumed:
            append_results(
                results_path, [replace(result, plan_sha256=digest, runner_sha256=runner_sha256) for result in ended]
            )
            deadline.ended(specs, ended)
        log_process(specs, ended, resumed)

    trials, done = list(plan.trials) + list(read_added(out / ADDED_TRIALS)), read_results(results_path, digest)
    if prime_parallel:
        prime_shared_cache(trials, done, pythons, out, timeout_s, prime_parallel)
    results = dict(done)

    def run(pending: list[TrialSpec]) -> dict[str, TrialResult]:
        for result in run_trials(
            pending, pythons, out / "work", timeout_s, results, report, slot=pinned, before_process=deadline.check
        ):
            results[result.trial_id] = result
        return results

    try:
        if loop is not None:
            loop(plan, trials, run, out, budget_min)
        else:
            run(trials)
    except WindowEnded as ended:
        finished, total, _ = plan_progress(plan, out)
        LOGGER.info("window ended: %s; %d processes left for a later window (run this again)", ended, total - finished)
        return  # the shared cache and the work folder stay: a resume on this machine uses them
    shutil.rmtree(out / "work", ignore_errors=True)
    (out / FINISHED).write_text(json.dumps({"finished_at": time.time(), "trials": len(results)}))
    LOGGER.info("%d trials in %.0f s -> %s", len(results), time.time() - started, results_path)
