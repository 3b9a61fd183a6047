"""Processes that end with the benchmark: each started as the leader of a process group of its own (a trial with
its compile workers, an environment's builder with what it starts), tracked while it runs, its whole group ended when
the benchmark is stopped (SIGTERM, Ctrl-C), and the leader ended by the kernel when the benchmark is killed
(`kill -9`) rather than left running unseen for minutes. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

LIVE: set[subprocess.Popen] = set()  # group leaders running now, started by this process
STOPPING = threading.Event()  # set by the stop handler: from then on no group starts, and none that ended is a result
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that started it ends


def die_with_parent() -> bool:
    """Have the kernel SIGKILL this process when its parent dies (Linux); whether that could be asked. In a trial,
    and in a helper before it execs (a `kill -9` of the benchmark would leave it running, unseen, for minutes)."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL) == 0
    except (OSError, AttributeError):
        return False


class Stopped(BaseException):
    """This process is being stopped (SIGTERM, Ctrl-C): raised in a thread that would start a group, or that saw its
    group ended by the stop, so that nothing it would report (a trial "crashed" by the stop) is taken as a result."""


def track(process: subprocess.Popen) -> None:
    """Count a group leader just started among those a stop ends; one started as the stop began is ended here."""
    LIVE.add(process)
    if STOPPING.is_set():  # the handler may have ended LIVE before this one was in it
        end_group(process)
        LIVE.discard(process)
        raise Stopped


def check_stopping() -> None:
    """Raise Stopped once the stop has begun: before a group starts (in a pool's thread, say), none does; after one
    ended, its end is the stop's, not a result."""
    if STOPPING.is_set():
        raise Stopped


def run_in_group(command: list[str], **popen: object) -> int:
    """Run a helper process (an environment's builder) as the leader of a process group of its own, ended with
    everything it started when this process is stopped (end_trials_on_signal) or killed; its exit code."""
    check_stopping()
    process = subprocess.Popen(command, start_new_session=True, preexec_fn=die_with_parent, **popen)
    track(process)
    try:
        while True:  # in short waits: a blocking wait holds the Popen's lock, and the stop handler needs it
            try:
                return process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue
    finally:
        LIVE.discard(process)


def end_group(process: subprocess.Popen, reap_s: float = 10.0) -> None:
    """Kill a group leader's group (a trial and its compile workers, a builder and what it started: the group this
    process created) while the leader is still unreaped, so the group id cannot belong to anyone else; then reap it
    (polling: called from the stop handler, it may interrupt a wait on the same process, which then reaps it)."""
    with contextlib.suppress(ProcessLookupError):  # the group already ended by itself
        os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + reap_s
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def stage_runner(variable: str = "DVC_STAGE") -> int | None:
    """The process that runs this command as a stage: the nearest ancestor without `variable` in its environment
    (DVC sets DVC_STAGE for a stage's command, which a shell between them inherits, and not for itself); None when
    the variable is not set or /proc cannot tell (not Linux)."""
    if variable not in os.environ:
        return None
    pid, marker = os.getppid(), variable.encode() + b"="
    try:
        while pid > 1:
            if not any(entry.startswith(marker) for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")):
                return pid
            pid = _parent_of(pid)
    except (OSError, ValueError, IndexError):
        return None
    return None


def stop_with(pid: int | None) -> None:
    """Stop this process (a SIGTERM to itself: end_trials_on_signal's handler ends what it started) as soon as process
    `pid` ends. DVC ended by a signal leaves its stage's command running, orphaned, with a shell between them or not;
    a job system or CI that ends the `dvc repro` it started expects everything under it to end."""
    if pid is None or not hasattr(os, "pidfd_open"):
        return
    try:
        watched = os.pidfd_open(pid)
    except ProcessLookupError:  # ended already
        os.kill(os.getpid(), signal.SIGTERM)
        return
    except OSError:
        return

    def watch() -> None:
        select.select([watched], [], [])  # readable once the process has ended
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name=f"stop-with-{pid}", daemon=True).start()


def end_trials_on_signal() -> None:
    """On SIGTERM, SIGINT or SIGHUP (a closed terminal), end the running trials' groups (and an environment's
    builder's) before exiting: they run in sessions of their own and would otherwise go on measuring, and disturb
    whatever runs next."""

    def handler(signum: int, frame: object) -> None:
        STOPPING.set()  # first: a thread starting a group now ends it itself (track)
        for process in list(LIVE):
            end_group(process)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # under `nohup`, a closed terminal ends nothing
        signal.signal(signal.SIGHUP, handler)
