"""The process runner: one trial, or a timing process's arms, in a fresh process of an environment's interpreter.

A process gets its own process group and, unless told otherwise, its own compile caches (`cache_variables`); its
output goes to a log. A hang past the timeout ends the process group (the trial and its compile workers, by the
group id created here). On a CPU, the group's resident memory is read while it runs and the group is ended past its
cap. An exit by SIGKILL is an `oom` only when the kernel's OOM-kill counters rose meanwhile; otherwise it is
`killed`. A block's timing processes can run together, taking turns (harness/turns.py). What runs which process,
in which order, with which cache, and how a plan resumes is the launcher's (harness/launcher.py). Standard library
only.
"""

from __future__ import annotations

import ctypes.util
import functools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from compilebench.harness import turns
from compilebench.harness.groups import LIVE, check_stopping, end_group, track
from compilebench.harness.names import DEPLOY_DIR_ENV, LAUNCHER_PID, trial_stem
from compilebench.records.formats import CPU_ISAS, MALLOC_LIBRARIES, TrialResult, TrialSpec

SRC_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the compilebench package
LOG_TAIL_LINES = 8
HUGE_PAGES_ENV = "THP_MEM_ALLOC_ENABLE"  # read by torch's CPU allocator when it starts (settings.huge_pages)
MEMORY_POLL_S = 0.25  # how often a capped trial's resident memory is read
PRELOAD_ENV = "LD_PRELOAD"
ATEN_ISA_ENV = "ATEN_CPU_CAPABILITY"  # torch's CPU kernels, and inductor's C++ where it reads it (settings.cpu_isa)
ONEDNN_ISA_ENVS = ("DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA")  # oneDNN's, under its old and new names


class MallocMissing(RuntimeError):
    """A `malloc` setting names a malloc library this machine does not have."""


@functools.cache  # the linker's cache is read once, not at every process start
def malloc_to_preload(name: str, key: str = "settings.malloc") -> str | None:
    """The shared library to preload for a `malloc` setting (`key`, as the error names it; None: `libc`, the C
    library's own), found by the dynamic linker's cache; MallocMissing names what to install when this machine lacks
    it."""
    if name == "libc":
        return None
    if name not in MALLOC_LIBRARIES:
        raise MallocMissing(f"{key} must be libc or one of {sorted(MALLOC_LIBRARIES)}, got {name!r}")
    library, package = MALLOC_LIBRARIES[name]
    found = ctypes.util.find_library(library)
    if found is None:
        raise MallocMissing(
            f"{key} {name}: no lib{library}.so on this machine (Debian and Ubuntu: apt install "
            f"{package}); libc (the default) needs none"
        )
    return found


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
    cache_dir = cache_dir.resolve()  # absolute: older torch (2.12 and before) compiles its C++ from another folder
    (cache_dir / "tmp").mkdir(parents=True, exist_ok=True)
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
        "TRITON_CACHE_DIR": str(cache_dir / "triton"),
        "TMPDIR": str(cache_dir / "tmp"),
    }


def trial_environment(
    cache_dir: Path | None, deploy_dir: Path | None = None, slot: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment variables of a trial process: our package importable, no Hub, its own compile caches (see
    `cache_variables`), its run's folder for portable artifacts or an AOTInductor package, and its slot's variables
    (the GPU it may see, its threads, its cores: see executors)."""
    env = {**os.environ, **(slot or {})}
    if deploy_dir is not None:
        env[DEPLOY_DIR_ENV] = str(deploy_dir.resolve())
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
        return [
            TrialResult.failed(s.trial_id, status, error, started_at=self.started, wall_s=wall_s) for s in self.specs
        ]

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
    name = first.process if isinstance(spec, list) else first.trial_id  # prime runs arms one by one, at once
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
    if first.timing.cpu_isa:
        aten, onednn = CPU_ISAS[first.timing.cpu_isa]
        env.update({ATEN_ISA_ENV: aten, **dict.fromkeys(ONEDNN_ISA_ENVS, onednn)})
    library = malloc_to_preload(first.timing.malloc)
    if library is not None:  # every process of the trial's group (compile workers, the C++ compiler) loads it too
        env[PRELOAD_ENV] = f"{library} {env[PRELOAD_ENV]}" if env.get(PRELOAD_ENV) else library
    if member is not None:
        env[turns.TURNS_ENV] = turns.environment_value(member)
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            pass_fds=member.child_fds() if member is not None else (),
        )
    if member is not None:
        member.started(lambda: process.poll() is not None)
    track(process)
    cap_mib = first.timing.memory_limit_mib if not first.timing.device.startswith("cuda") else 0.0
    return Running(specs, not isinstance(spec, list), process, out_path, log_path, started, oom_before, cap_mib)


def over_memory(running: Running, peak_mib: float) -> list[TrialResult]:
    """The results of a process ended because its group's memory passed its cap."""
    return running.failed(
        "oom",
        f"the trial's processes used {peak_mib:.0f} MiB of memory, more than "
        f"benchmark.memory_limit_mib {running.cap_mib:g}",
    )


def finish_trial_process(running: Running, returncode: int) -> list[TrialResult]:
    """The results of a process that exited by itself: its own, or its exit as the status of each trial."""
    wall_s = time.time() - running.started
    if returncode == 0 and running.out_path.exists():
        raw = json.loads(running.out_path.read_text())
        rows = raw if isinstance(raw, list) else [raw]
        # the process's window on this clock: from its start here to its end (the trial's own clock starts later)
        return [replace(TrialResult.from_dict(row), started_at=running.started, wall_s=wall_s) for row in rows]
    status, why = exit_status(returncode, oom_kills() > running.oom_before)
    return [
        TrialResult.failed(
            s.trial_id,
            status,
            f"trial process {why}: {log_tail(running.log_path)}",
            started_at=running.started,
            wall_s=wall_s,
        )
        for s in running.specs
    ]


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
    slot_of: Callable[[TrialSpec], dict[str, str] | None] = lambda spec: None,
) -> list[list[TrialResult]]:
    """The processes of one block (a timing process's arms, or a cold process's trial, each) alive together, taking
    turns (harness/turns.py); the results of each, in order. `slot_of(spec)`: the environment variables a process
    starts with (its slot's). Each may run `timeout_s` per process of the block (it waits while the others run);
    one over its memory cap, or one that fails, ends alone, and the others go on."""
    members = [turns.Member() for _ in runnables]
    running: list[Running] = []
    try:
        for specs, member in zip(runnables, members, strict=True):
            cache_dir, deploy_dir = cache_dir_of(specs[0])
            running.append(
                start_trial_process(
                    specs,
                    python_of(specs[0]),
                    workdir,
                    cache_dir,
                    deploy_dir=deploy_dir,
                    slot=slot_of(specs[0]),
                    member=member,
                )
            )
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
                    ended[index] = one.failed(
                        "timeout",
                        f"trial exceeded {timeout_s * len(runnables):g} s (a block of "
                        f"{len(runnables)} processes taking turns)",
                    )
        check_stopping()
        return [
            ended.get(index) or finish_trial_process(one, one.process.returncode) for index, one in enumerate(running)
        ]
    finally:
        for one in running:
            if one.process.poll() is None:  # a stop, or an error here: nothing of the block runs on
                end_group(one.process)
            LIVE.discard(one.process)
        for member in members:
            member.close()


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
