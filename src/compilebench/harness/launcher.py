"""Runs trials, each in a fresh process of its environment's interpreter, in the plan's order; resumable.

    python -m compilebench.harness.launcher PLAN.json OUT_DIR      # on any machine with torch and transformers

The benchmark stage calls `run_trials` with the project's plan. On another machine (a GPU box with nothing but
torch and transformers: no mlflow, dvc, pandas or omegaconf), the command above runs a plan exported with
`python -m compilebench.benchmark --export DIR`: it builds the checkpoints the plan's recipes describe (random
weights, published architecture), runs every trial with this interpreter, and appends each result to
OUT_DIR/trials.jsonl as it completes (flushed to disk: a killed run resumes where it stopped). Bring OUT_DIR back and
`python -m compilebench.benchmark --ingest OUT_DIR` logs it, exactly once, with that machine's device and versions.

A process runs one trial, or a timing process's arms (consecutive trials with one `process_id`). It gets its own
process group and, unless the cache is `shared`, its own cache folders (inductor's, triton's, and the temp folder
where torch keeps precompiled C++ headers): empty for a cold trial; for a timing process, its cell's warm cache,
into which every cold compile-only process of that cell was merged as it ended; for a paired trial, its run's cold
trial's. A hang past the timeout ends the process group (the trial and its compile workers, by the group id this
launcher created). An exit by SIGKILL is an `oom` only when the kernel's OOM-kill counters rose meanwhile; otherwise
it is `killed`. A variant whose trial ended in a failure that would repeat is left out of the processes after it.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from compilebench.harness import fingerprint, turns
from compilebench.harness.files import append_lines, write_json
from compilebench.harness.groups import LIVE, check_stopping, end_group, end_trials_on_signal, track
from compilebench.harness.records import (
    CACHE_COLD,
    CACHE_SHARED,
    CURRENT,
    DEPLOY_AOTI,
    DEPLOY_ARTIFACTS,
    DEPLOY_DIR_ENV,
    KIND_ARM,
    KIND_COLD,
    LAUNCHER_PID,
    MEASURED_NOTHING,
    STATUS_OK,
    Plan,
    RecordError,
    TrialResult,
    TrialSpec,
    plan_digest,
    processes,
    read_plan,
    read_result_lines,
    thread_environment,
    trial_stem,
    usable_cores,
)

LOGGER = logging.getLogger(__name__)

SRC_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the compilebench package
LOG_TAIL_LINES = 8
HUGE_PAGES_ENV = "THP_MEM_ALLOC_ENABLE"  # read by torch's CPU allocator when it starts (benchmark.huge_pages)
# A warm trial repeats its cold trial: when that one ended like this, the repeats would too, minutes each.
NOT_REPEATED = MEASURED_NOTHING
ADDED_TRIALS = "added.jsonl"  # beside an exported plan's results: the specs of the blocks its loop added
FINISHED = "finished.json"  # beside them once the plan and its loop have ended: no block will be added any more


def oom_kills() -> int:
    """OOM kills the kernel has counted, machine-wide and in this process's memory cgroup (0 where unreadable)."""
    total = 0
    vmstat = Path("/proc/vmstat")
    if vmstat.exists():
        for line in vmstat.read_text().splitlines():
            if line.startswith("oom_kill "):
                total += int(line.split()[1])
    cgroup_file = Path("/proc/self/cgroup")
    if cgroup_file.exists():
        for line in cgroup_file.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            candidates = []
            if controllers == "":  # cgroup v2
                candidates.append(Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events")
            elif "memory" in controllers.split(","):  # cgroup v1
                candidates.append(Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control")
            for candidate in candidates:
                try:
                    for entry in candidate.read_text().splitlines():
                        if entry.startswith("oom_kill "):
                            total += int(entry.split()[1])
                except OSError:
                    continue
    return total


def exit_status(returncode: int, oom_killed: bool) -> tuple[str, str]:
    """The status of a trial process that ended without a result, and why."""
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else "?"
        if returncode == -signal.SIGKILL:
            if oom_killed:
                return "oom", f"killed by the kernel's OOM killer ({name})"
            return "killed", f"killed by {name}, not by the OOM killer (its counters did not rise)"
        return "crashed", f"ended by signal {-returncode} ({name})"
    return "crashed", f"exited with {returncode}"


def last_lines(path: Path, count: int = LOG_TAIL_LINES) -> list[str]:
    """The last `count` lines a process wrote to its log (a progress bar's redraws, split at their carriage returns,
    are lines too), stripped; none where the log cannot be read."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return []
    return [line.strip() for line in lines[-count:]]


def log_tail(path: Path) -> str:
    """The last lines a process wrote, on one line."""
    return " | ".join(last_lines(path))


def cache_variables(cache_dir: Path) -> dict[str, str]:
    """The variables that put all of a process's compile caches in `cache_dir` (its temp folder made here).

    Besides inductor's and triton's caches, the temp folder: torch 2.13 keeps the precompiled header of its C++
    kernels in TMPDIR/torchinductor_USER, outside TORCHINDUCTOR_CACHE_DIR. Left there, the first cold process on a
    machine builds it (about 5 s of a tiny model's compile here) and every later "cold" one reuses it, so which
    environment of a comparison went first would show as a difference in cold compile time."""
    (cache_dir / "tmp").mkdir(parents=True, exist_ok=True)
    return {"TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TRITON_CACHE_DIR": str(cache_dir / "triton"),
            "TMPDIR": str(cache_dir / "tmp")}  # fmt: skip


def trial_environment(
    cache_dir: Path | None, deploy_dir: Path | None = None, slot: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment variables of a trial process: our package importable, no Hub, its own compile caches (see
    `cache_variables`), its run's folder for portable artifacts or an AOTInductor package, and its slot's variables
    (the GPU it may see, its threads, its cores: see executors)."""
    env = {**os.environ, **(slot or {})}
    if deploy_dir is not None:
        env[DEPLOY_DIR_ENV] = str(deploy_dir)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_ROOT), env.get("PYTHONPATH")]))
    env["HF_HUB_OFFLINE"] = "1"  # checkpoints are local folders; never wait on an unreachable Hub
    env["PYTHONUNBUFFERED"] = "1"
    env[LAUNCHER_PID] = str(os.getpid())  # the trial ends itself if this process dies (trial.end_with_launcher)
    if cache_dir is not None:
        env.update(cache_variables(cache_dir))
    return env


@dataclass
class Running:
    """A trial process started and not yet ended: what its results are made of."""

    specs: list[TrialSpec]
    single: bool  # one trial given alone (not a list): one result returned
    process: subprocess.Popen
    out_path: Path
    log_path: Path
    started: float  # unix time
    oom_before: int  # the kernel's OOM kills before it started
    cap_mib: float  # CPU: the resident memory its group may use (0 = no cap)

    def failed(self, status: str, error: str) -> list[TrialResult]:
        wall_s = time.time() - self.started
        return [TrialResult.failed(s.trial_id, status, error, started_at=self.started, wall_s=wall_s)
                for s in self.specs]  # fmt: skip

    def returned(self, results: list[TrialResult]) -> TrialResult | list[TrialResult]:
        return results[0] if self.single else results


def start_trial_process(
    spec: TrialSpec | list[TrialSpec],
    python: str,
    workdir: Path,
    cache_dir: Path | None,
    *flags: str,
    deploy_dir: Path | None = None,
    slot: dict[str, str] | None = None,
    member: turns.Member | None = None,
) -> Running:
    """Start one trial (a list: a timing process's arms) in a fresh process of `python`, as the leader of a process
    group of its own, its output in a log; `member`: its turn pipes, when its block's processes run together."""
    check_stopping()  # a pool's thread after the stop began: no new process, nothing written
    specs = spec if isinstance(spec, list) else [spec]
    first = specs[0]
    name = first.process_id if isinstance(spec, list) else first.trial_id  # prime runs arms one by one, at once
    stem = trial_stem(name) + ("-".join(("", *flags)) if flags else "")
    spec_path, out_path, log_path = (workdir / f"{stem}.{suffix}" for suffix in ("spec.json", "out.json", "log"))
    workdir.mkdir(parents=True, exist_ok=True)
    out_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps([s.to_dict() for s in specs] if isinstance(spec, list) else first.to_dict()))
    command = [python, "-m", "compilebench.harness.trial", str(spec_path), str(out_path), *flags]
    started, oom_before = time.time(), oom_kills()
    env = trial_environment(cache_dir, deploy_dir, slot)
    if first.timing.huge_pages:  # torch's CPU allocator: large blocks 2 MiB-aligned, madvise(MADV_HUGEPAGE)
        env[HUGE_PAGES_ENV] = "1"
    if member is not None:
        env[turns.TURNS_ENV] = turns.environment_value(member)
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                   pass_fds=member.child_fds() if member is not None else ())  # fmt: skip
    if member is not None:
        member.started(lambda: process.poll() is not None)
    track(process)
    cap_mib = first.timing.memory_limit_mib if not first.timing.device.startswith("cuda") else 0.0
    return Running(specs, not isinstance(spec, list), process, out_path, log_path, started, oom_before, cap_mib)


def over_memory(running: Running, peak_mib: float) -> list[TrialResult]:
    """The results of a process ended because its group's memory passed its cap."""
    return running.failed("oom", f"the trial's processes used {peak_mib:.0f} MiB of memory, more than "
                          f"benchmark.memory_limit_mib {running.cap_mib:g}")  # fmt: skip


def finish_trial_process(running: Running, returncode: int) -> list[TrialResult]:
    """The results of a process that exited by itself: its own, or its exit as the status of each trial."""
    wall_s = time.time() - running.started
    if returncode == 0 and running.out_path.exists():
        raw = json.loads(running.out_path.read_text())
        rows = raw if isinstance(raw, list) else [raw]
        # the process's window on this clock: from its start here to its end (the trial's own clock starts later)
        return [replace(TrialResult.from_dict(row), started_at=running.started, wall_s=wall_s) for row in rows]
    status, why = exit_status(returncode, oom_kills() > running.oom_before)
    return [TrialResult.failed(s.trial_id, status, f"trial process {why}: {log_tail(running.log_path)}",
                               started_at=running.started, wall_s=wall_s) for s in running.specs]  # fmt: skip


def run_trial_process(
    spec: TrialSpec | list[TrialSpec],
    python: str,
    workdir: Path,
    cache_dir: Path | None,
    timeout_s: float,
    *flags: str,
    deploy_dir: Path | None = None,
    slot: dict[str, str] | None = None,
) -> TrialResult | list[TrialResult]:
    """One trial (a list: a timing process's arms) in a fresh process of `python`; a timeout, crash or kill becomes
    the status of each. Returns a result per spec (one result for one spec)."""
    running = start_trial_process(spec, python, workdir, cache_dir, *flags, deploy_dir=deploy_dir, slot=slot)
    try:
        returncode, peak_mib = wait_within(running.process, timeout_s, running.cap_mib)
    except subprocess.TimeoutExpired:
        end_group(running.process)
        return running.returned(running.failed("timeout", f"trial exceeded {timeout_s} s"))
    finally:
        LIVE.discard(running.process)
    check_stopping()  # ended by the stop (in another thread's handler): not a result, crashed or not
    if returncode is None:
        end_group(running.process)
        return running.returned(over_memory(running, peak_mib))
    return running.returned(finish_trial_process(running, returncode))


def run_together(
    runnables: list[list[TrialSpec]],
    python_of: Callable[[TrialSpec], str],
    workdir: Path,
    cache_dir_of: Callable[[TrialSpec], tuple[Path | None, Path]],
    timeout_s: float,
    slot: dict[str, str] | None = None,
) -> list[list[TrialResult]]:
    """The timing processes of one block (a list of arms each) alive together, taking turns (harness/turns.py); the
    results of each, in order. Each may run `timeout_s` per process of the block (it waits while the others run);
    one over its memory cap, or one that fails, ends alone, and the others go on."""
    members = [turns.Member() for _ in runnables]
    running: list[Running] = []
    try:
        for specs, member in zip(runnables, members, strict=True):
            cache_dir, deploy_dir = cache_dir_of(specs[0])
            running.append(start_trial_process(specs, python_of(specs[0]), workdir, cache_dir, deploy_dir=deploy_dir,
                                               slot=slot, member=member))  # fmt: skip
        deadline = time.time() + timeout_s * len(runnables)
        ended: dict[int, list[TrialResult]] = {}
        peaks = [0.0] * len(running)

        def check() -> None:
            check_stopping()
            if time.time() > deadline:
                raise subprocess.TimeoutExpired("block", timeout_s * len(runnables))
            for index, (one, member) in enumerate(zip(running, members, strict=True)):
                if one.cap_mib <= 0 or index in ended:
                    continue
                peaks[index] = max(peaks[index], group_memory_mib(one.process.pid))
                if peaks[index] > one.cap_mib:
                    end_group(one.process)
                    member.active = False
                    ended[index] = over_memory(one, peaks[index])

        try:
            turns.run_turns(members, check, MEMORY_POLL_S)
            for index, one in enumerate(running):
                if index not in ended:
                    while one.process.poll() is None:
                        check()
                        time.sleep(0.05)
        except subprocess.TimeoutExpired:
            for index, one in enumerate(running):
                if index not in ended:
                    end_group(one.process)
                    ended[index] = one.failed("timeout", f"trial exceeded {timeout_s * len(runnables):g} s (a block of "
                                              f"{len(runnables)} processes taking turns)")  # fmt: skip
        check_stopping()
        return [ended.get(index) or finish_trial_process(one, one.process.returncode)
                for index, one in enumerate(running)]  # fmt: skip
    finally:
        for one in running:
            if one.process.poll() is None:  # a stop, or an error here: nothing of the block runs on
                end_group(one.process)
            LIVE.discard(one.process)
        for member in members:
            member.close()


MEMORY_POLL_S = 0.25  # how often a capped trial's resident memory is read


def process_memory_kib(pid_dir: Path) -> int:
    """A process's proportional resident memory (PSS: shared pages divided among their users, so a trial's compile
    workers do not count libtorch once each), or its RSS where the kernel gives no PSS."""
    try:
        for line in (pid_dir / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return int((pid_dir / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def group_memory_mib(group: int) -> float:
    """Memory of every process in process group `group` (a trial and its compile workers), MiB."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group:  # the field after state and ppid: pgrp
                total += process_memory_kib(entry)
        except (OSError, IndexError, ValueError):
            continue  # the process ended while we looked
    return total / 1024


def wait_within(process: subprocess.Popen, timeout_s: float, cap_mib: float) -> tuple[int | None, float]:
    """Wait for a trial process: (its exit code, peak MiB), or (None, peak MiB) when its process group's resident
    memory passed `cap_mib` (0 = no cap, nothing is read). Raises TimeoutExpired past `timeout_s`."""
    if cap_mib <= 0:
        return process.wait(timeout=timeout_s or None), 0.0
    deadline, peak = time.time() + (timeout_s or float("inf")), 0.0
    while True:
        try:
            return process.wait(timeout=MEMORY_POLL_S), peak
        except subprocess.TimeoutExpired:
            if time.time() > deadline:
                raise
        peak = max(peak, group_memory_mib(process.pid))
        if peak > cap_mib:
            return None, peak


def not_repeated(spec: TrialSpec, first: TrialResult) -> TrialResult:
    """A replicate left out because the first trial of its run already failed in a way it would repeat."""
    return TrialResult.failed(
        spec.trial_id, first.status, f"not run: the first trial of this run ended {first.status}: {first.error}"
    )


def trial_folders(spec: TrialSpec, workdir: Path) -> tuple[Path | None, Path]:
    """A trial's inductor cache folder (None: the user's) and its run's deploy folder. A cold trial starts both
    empty (also after an interruption); a cold compile-only trial's cache is its own, merged into its cell's warm
    cache when it ends (`merge_cold_cache`). A timing process's arms share their cell's warm cache. A warm paired
    trial reuses its run's cold trial's cache, except where the run carries its compile over in the deploy folder
    (portable artifacts, an AOTInductor package): then it starts on an empty cache of its own, as a fresh machine
    would."""
    deploy_dir = workdir / "deploy" / spec.cache_key
    if spec.cache == CACHE_SHARED:
        return None, deploy_dir
    if spec.kind == KIND_ARM:
        return workdir / "inductor-cache" / spec.cell_key, deploy_dir
    if spec.kind == KIND_COLD:
        cache_dir = workdir / "inductor-cache-cold" / spec.cache_key / f"c{spec.replicate}"
        shutil.rmtree(cache_dir, ignore_errors=True)
        return cache_dir, deploy_dir
    cache_dir = workdir / "inductor-cache" / spec.cache_key
    if spec.cache == CACHE_COLD:
        shutil.rmtree(cache_dir, ignore_errors=True)
        shutil.rmtree(deploy_dir, ignore_errors=True)
    elif spec.variant.deploy in (DEPLOY_ARTIFACTS, DEPLOY_AOTI):
        cache_dir = workdir / "inductor-cache-empty" / spec.cache_key / f"r{spec.replicate}"
        shutil.rmtree(cache_dir, ignore_errors=True)
    return cache_dir, deploy_dir


def merge_cold_cache(spec: TrialSpec, cache_dir: Path, workdir: Path) -> None:
    """A cold compile-only trial's caches into its cell's warm cache (inductor's entries are named by content, so
    variants' caches merge without clashing), then its own folder removed."""
    shutil.copytree(cache_dir, workdir / "inductor-cache" / spec.cell_key, dirs_exist_ok=True, symlinks=True)
    shutil.rmtree(cache_dir, ignore_errors=True)


def together_blocks(groups: list[list[TrialSpec]]) -> list[list[list[TrialSpec]]]:
    """The processes of a plan (processes()) as the launcher runs them: the consecutive timing processes of one block
    (one model, batch size and replicate; each environment once) together when their timing says so
    (`benchmark.together`), every other process alone."""
    blocks: list[list[list[TrialSpec]]] = []
    for group in groups:
        first = group[0]
        last = blocks[-1][-1][0] if blocks else None
        joins = (
            first.kind == KIND_ARM and first.timing.together and last is not None and last.kind == KIND_ARM
            and (last.model.model_id, last.batch_size, last.replicate)
            == (first.model.model_id, first.batch_size, first.replicate)
            and first.environment not in {other[0].environment for other in blocks[-1]}
        )  # fmt: skip
        if joins:
            blocks[-1].append(group)
        else:
            blocks.append([group])
    return blocks


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
            or (not_repeated(spec, first_failure[spec.cache_key]) if spec.cache_key in first_failure
                else TrialResult.failed(spec.trial_id, "crashed", "its process wrote no result for this trial"))
            for spec in group
        ]  # fmt: skip
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
        if len(runnable) > 1:
            for measured in run_together(runnable, lambda spec: pythons[spec.environment], workdir / "trials",
                                         lambda spec: trial_folders(spec, workdir), timeout_s, slot):  # fmt: skip
                ran.update((result.trial_id, result) for result in measured)
        elif runnable:
            first = runnable[0][0]
            cache_dir, deploy_dir = trial_folders(first, workdir)
            measured = run_trial_process(runnable[0] if first.kind == KIND_ARM else first, pythons[first.environment],
                                         workdir / "trials", cache_dir, timeout_s, deploy_dir=deploy_dir,
                                         slot=slot)  # fmt: skip
            ran = {result.trial_id: result for result in (measured if isinstance(measured, list) else [measured])}
            if first.kind == KIND_COLD and cache_dir is not None:
                merge_cold_cache(first, cache_dir, workdir)
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
            raise WindowEnded(f"--stop-after-min: {specs[0].process} would end after it "
                              f"(about {expected_s:.0f} s)")  # fmt: skip


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


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _json_lines(path: Path) -> list[dict]:
    """The JSON objects of a file's lines; a torn one (a kill, a copy taken while it was written) is left out."""
    parsed = []
    for line in _lines(path):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return parsed


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
        entry = {"model_id": recipe.model_id, "folder": recipe.folder, "weights_source": "random-init",
                 "config_origin": f"recipe:{recipe.config_class}", "seed": recipe.seed}  # fmt: skip
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


def append_results(path: Path, results: list[TrialResult]) -> None:
    """A process's result lines, in one write, on disk before the next process starts (files.append_lines)."""
    append_lines(path, [json.dumps(result.to_dict()) for result in results])


def read_results(path: Path, plan_sha256: str | None = None) -> dict[str, TrialResult]:
    """Results already in a trials.jsonl, by trial id, each line checked (records.read_result_lines: with
    `plan_sha256`, a line of another plan is refused; a torn last line from a kill is left out; a line written again
    for a process run again replaces the earlier)."""
    return {result.trial_id: result for result in read_result_lines(path, plan_sha256)} if path.exists() else {}


def read_added(path: Path) -> tuple[TrialSpec, ...]:
    """The specs of the blocks an earlier run of this plan's loop added (a torn last line from a kill is ignored)."""
    added = []
    for raw in _json_lines(path):
        try:
            added.append(TrialSpec.from_dict(raw))
        except (ValueError, TypeError):
            continue
    return tuple(added)


def plan_progress(plan: Plan, out: Path) -> tuple[int, int, int]:
    """Of the processes of `plan` and the blocks its loop added in `out`: how many have a result for every trial,
    how many there are, how many of them are added blocks."""
    added = read_added(out / ADDED_TRIALS)
    done = read_results(out / "trials.jsonl")
    groups = processes(list(plan.trials) + list(added))
    finished = sum(all(spec.trial_id in done for spec in group) for group in groups)
    return finished, len(groups), len(processes(list(added)))


def run_plan_adaptively(plan: Plan, trials: list[TrialSpec], run, out: Path, budget_min: float | None) -> None:
    """The plan's trials, then the pipeline's own loop (adaptive.measure) on this machine's results: more blocks
    where the intervals are widest, within the plan's budget (or `budget_min`). Each added block's specs are
    appended to out/added.jsonl before it runs, so a later window resumes it and ingest knows it. Needs numpy and
    scipy, which a GPU image has; nothing of the pipeline's tools."""
    from compilebench.analysis import adaptive, runs

    settings = adaptive.Settings(**plan.adaptive["settings"])
    if budget_min is not None:
        settings = replace(settings, budget_min=budget_min)
    labels = plan.adaptive["labels"]
    context = runs.Context(plan.invocation_id, "", "", "", "", "", "", **plan.adaptive["context"])
    environments = {label: runs.EnvironmentInfo(label, label, "", {}) for label in labels}
    models = {spec.model.model_id: runs.ModelInfo("", "", None) for spec in trials}

    def records_of(specs: list[TrialSpec], results: dict[str, TrialResult]) -> list[dict]:
        return [record.to_dict() for record in runs.run_records(specs, results, environments, models, context)]

    def added(specs: list[TrialSpec]) -> None:
        append_lines(out / ADDED_TRIALS, [json.dumps(spec.to_dict()) for spec in specs])

    adaptive.measure(trials, labels, settings, run, records_of, added=added)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Run an exported plan's trials on this machine.")
    parser.add_argument("plan", type=Path, help="plan.json written by `compilebench.benchmark --export`")
    parser.add_argument("out", type=Path, help="folder for trials.jsonl and checkpoints.json")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per trial, seconds")
    parser.add_argument("--python", action="append", default=[], metavar="ENV=PATH",
                        help="interpreter of an environment other than `current` (this one)")  # fmt: skip
    parser.add_argument(
        "--prime", type=int, default=0, metavar="N", help="first compile every run, N at a time, into one shared cache"
    )
    parser.add_argument("--budget-min", type=float, default=None, metavar="M",
                        help="after the plan, add blocks where intervals are widest while they fit in M minutes of "
                             "processes per environment (the plan's own budget if not given)")  # fmt: skip
    parser.add_argument("--plan-only", action="store_true", help="run the plan's trials only: no blocks added")
    parser.add_argument("--cpus", default=None, metavar="LIST",
                        help="pin every timing process to these cores (e.g. 2-9), a torch thread per core; the prime "
                             "keeps the whole machine")  # fmt: skip
    parser.add_argument("--stop-after-min", type=float, default=None, metavar="M",
                        help="start no process that would end more than M minutes after the launcher started (by "
                             "the longest of its model so far); run again later to resume")  # fmt: skip
    return parser


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
        raise ValueError(f"--cpus {cpus!r}: cores {sorted(set(cores) - set(allowed))} are not among this machine's "
                         f"cores this process may use, {allowed}")  # fmt: skip
    return thread_environment(len(cores), cores)


def path_problem(*folders: Path) -> str | None:
    """Why the launcher cannot work in these folders: a space in a path, which torch's inductor hands to the C++
    compiler unquoted (every compiled trial would end `compile_error`); None where it can."""
    for folder in folders:
        if any(character.isspace() for character in str(folder.resolve())):
            return (f"{str(folder.resolve())!r} contains a space: torch's inductor passes the cache paths under it to "
                    "the C++ compiler unquoted, so every compiled trial would fail; move the plan's folder to a path "
                    "without spaces")  # fmt: skip
    return None


def plan_problem(plan: Plan, pythons: dict[str, str], prime_parallel: int) -> str | None:
    """Why this launcher cannot run `plan` as asked, or None."""
    missing = sorted({spec.environment for spec in plan.trials} - set(pythons))
    if missing:
        return f"the plan runs environments {missing}; give their interpreters with --python ENV=PATH"
    if prime_parallel and any(spec.cache != CACHE_SHARED for spec in plan.trials):
        return "--prime needs a plan exported with benchmark.compile_cache=shared"
    return None


ENVIRONMENT = "environment.json"  # in OUT: the interpreter and packages of the last run, and the plan it ran


def output_folder(plan_path: Path, out: Path) -> Path:
    """Where the launcher writes: OUT, relative to the plan's folder (where it works) unless absolute."""
    return out if out.is_absolute() else plan_path.resolve().parent / out


def results_plan(out: Path) -> str | None:
    """The invocation id of the plan whose results OUT holds, as the launcher recorded it; None where no launcher
    ran there (or one from before the record)."""
    try:
        return json.loads((out / ENVIRONMENT).read_text()).get("invocation_id")
    except (OSError, ValueError, AttributeError):
        return None


def output_problem(plan: Plan, out: Path) -> str | None:
    """Why `plan` must not run into OUT (it holds another plan's results, which a resume would take for its own
    wherever trial ids agree), or None."""
    owner = results_plan(out)
    if owner is None or owner == plan.invocation_id:
        return None
    return (f"{out} holds results of another plan (invocation {owner}; this plan is {plan.invocation_id}): a plan's "
            "results go in a folder of their own")  # fmt: skip


def this_machine(python: str, device: str) -> dict[str, str] | None:
    """What a trial of `python` on `device` would record of this machine and its stack (fingerprint.collect, in a
    process of its own: the interpreter's imports and, on a GPU, CUDA's start); None, said, where that fails."""
    command = [python, "-m", "compilebench.harness.fingerprint", device]
    try:
        done = subprocess.run(command, env=trial_environment(None), capture_output=True, text=True, timeout=300,
                              check=True)  # fmt: skip
        return json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        LOGGER.warning("could not read this machine's record with %s (%s); its results are checked at ingest", command,
                       error)  # fmt: skip
        return None


def measured_elsewhere(
    specs: list[TrialSpec], done: dict[str, TrialResult], pythons: dict[str, str], device: str
) -> str | None:  # fmt: skip
    """Why these results must not be continued here: an environment's were measured on another machine or software
    stack (another kind of GPU, another torch) than a trial of it on `device` would be here, and a run pools the
    processes of one only; None where nothing ran yet or this machine is the one they ran on."""
    recorded: dict[str, dict[str, dict]] = {}  # environment -> process -> its record (a timing process's arms: one)
    for spec in specs:
        result = done.get(spec.trial_id)
        if result is not None and result.environment:
            recorded.setdefault(spec.environment, {})[spec.process] = result.environment
    for label, records in recorded.items():
        here = this_machine(pythons[label], device)
        found = fingerprint.mixture(list(records.values()))
        if here is None or fingerprint.machine_and_stack(here) in found:
            continue
        return (
            f"results of environment {label!r} measured elsewhere ({fingerprint.counted(found)}), and this "
            f"machine is {fingerprint.described(here)}: a run pools the processes of one machine and stack only"
        )
    return None


def machine_problem(plan: Plan, out: Path, pythons: dict[str, str]) -> str | None:
    """Why this machine must not continue the plan whose results OUT holds (`measured_elsewhere`); None where it may."""
    specs = [*plan.trials, *read_added(out / ADDED_TRIALS)]
    problem = measured_elsewhere(specs, read_results(out / "trials.jsonl"), pythons, plan.trials[0].timing.device)
    if problem is None:
        return None
    return (f"{out} holds {problem}. Continue the plan on a machine like that one, or export it again into a folder "
            "of its own for this one")  # fmt: skip


def log_process(specs: list[TrialSpec], ended: list[TrialResult], resumed: bool) -> None:
    """One line per trial of a process that ended (or had ended in an earlier window): status and medians."""
    for spec, result in zip(specs, ended, strict=True):
        medians = ""
        if result.status == STATUS_OK and result.eager_ms:
            medians = f" eager {sorted(result.eager_ms)[len(result.eager_ms) // 2]:.2f} ms"
            if result.compiled_ms:
                medians += f" compiled {sorted(result.compiled_ms)[len(result.compiled_ms) // 2]:.2f} ms"
                medians += f" first call {result.compile_s:.1f} s"
        LOGGER.info("%s: %s%s (%.0f s)%s", spec.trial_id, result.status, medians, result.wall_s,
                    " (done before)" if resumed else "")  # fmt: skip


def prime_shared_cache(
    trials: list[TrialSpec], done: dict[str, TrialResult], pythons: dict[str, str], out: Path, timeout_s: float,
    parallel: int,
) -> None:  # fmt: skip
    """Compile every run not done and not primed on this machine before, `parallel` at a time, into the shared
    cache, which this process's environment then points the trials at; each prime's result in prime.jsonl."""
    started = time.time()
    cache = out / "shared-cache"
    boot, cached = boot_id(), cache.is_dir()  # a later window on a fresh machine finds prime.jsonl, not the cache
    primed_before = {line["cache_key"] for line in _json_lines(out / "prime.jsonl")
                     if line.get("boot_id") == boot and cached}  # fmt: skip
    os.environ.update(cache_variables(cache))  # the trials after the prime find all it compiled
    pending = [spec for spec in trials if spec.trial_id not in done and spec.cache_key not in primed_before]
    primed = prime(pending, pythons, out / "work", cache, timeout_s, parallel)
    append_lines(out / "prime.jsonl", [json.dumps({**result.to_dict(), "cache_key": key, "parallel": parallel,
                                                   "boot_id": boot}) for key, result in primed])  # fmt: skip
    LOGGER.info("primed %d runs %d at a time in %.0f s", len(primed), parallel, time.time() - started)


def launch(plan: Plan, args: argparse.Namespace, pythons: dict[str, str], pinned: dict[str, str] | None) -> None:
    """Build the plan's checkpoints, prime, run its trials (and the blocks its loop adds) into `args.out`; a plan
    that has run to its end leaves FINISHED there, a window that ended leaves what a later run resumes from."""
    out = output_folder(args.plan, args.out)
    os.chdir(args.plan.resolve().parent)  # the plan's paths are relative to its folder
    out.mkdir(parents=True, exist_ok=True)
    (out / FINISHED).unlink(missing_ok=True)  # a larger --budget-min may add blocks to a plan that had finished
    started = time.time()
    digest = plan_digest(args.plan)  # every line written names the plan it belongs to
    environment = {"python": sys.executable, "freeze": fingerprint.freeze(sys.executable),
                   "invocation_id": plan.invocation_id, "plan_sha256": digest}  # fmt: skip
    write_json(out / ENVIRONMENT, environment, indent=None)
    (out / "checkpoints.json").write_text(json.dumps(build_checkpoints(plan, Path.cwd()), indent=1))
    LOGGER.info("checkpoints ready in %.0f s", time.time() - started)
    results_path = out / "trials.jsonl"
    deadline = Deadline(None if args.stop_after_min is None else started + args.stop_after_min * 60)

    def report(specs: list[TrialSpec], ended: list[TrialResult], resumed: bool) -> None:
        if not resumed:
            append_results(results_path, [replace(result, plan_sha256=digest) for result in ended])
            deadline.ended(specs, ended)
        log_process(specs, ended, resumed)

    trials, done = list(plan.trials) + list(read_added(out / ADDED_TRIALS)), read_results(results_path, digest)
    if args.prime:
        prime_shared_cache(trials, done, pythons, out, args.timeout_s, args.prime)
    results = dict(done)

    def run(pending: list[TrialSpec]) -> dict[str, TrialResult]:
        for result in run_trials(pending, pythons, out / "work", args.timeout_s, results, report, slot=pinned,
                                 before_process=deadline.check):  # fmt: skip
            results[result.trial_id] = result
        return results

    try:
        if plan.adaptive and not args.plan_only:
            run_plan_adaptively(plan, trials, run, out, args.budget_min)
        else:
            run(trials)
    except WindowEnded as ended:
        finished, total, _ = plan_progress(plan, out)
        LOGGER.info("window ended: %s; %d processes left for a later window (run this again)", ended, total - finished)
        return  # the shared cache and the work folder stay: a resume on this machine uses them
    shutil.rmtree(out / "work", ignore_errors=True)
    (out / FINISHED).write_text(json.dumps({"finished_at": time.time(), "trials": len(results)}))
    LOGGER.info("%d trials in %.0f s -> %s", len(results), time.time() - started, results_path)


def main() -> None:
    parser = arguments()
    args = parser.parse_args()
    if args.stop_after_min is not None and args.stop_after_min <= 0:
        parser.error(f"--stop-after-min must be a positive number of minutes, got {args.stop_after_min}")
    try:
        pinned = pinned_slot(args.cpus)
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    end_trials_on_signal()
    try:
        plan = read_plan(args.plan)
    except RecordError as error:
        parser.error(str(error))
    if any("=" not in item for item in args.python):
        parser.error(f"--python takes ENV=PATH (an environment's name, its interpreter), got {args.python}")
    pythons = {CURRENT: sys.executable, **dict(item.split("=", 1) for item in args.python)}
    out = output_folder(args.plan, args.out)
    problem = (
        path_problem(args.plan.resolve().parent, out) or plan_problem(plan, pythons, args.prime)
        or output_problem(plan, out) or machine_problem(plan, out, pythons)
    )  # fmt: skip
    if problem:
        parser.error(problem)
    launch(plan, args, pythons, pinned)


if __name__ == "__main__":
    main()
