"""Turns: the timing processes of one block alive together, taking turns on the machine. Standard library only.

A block is one timing process per compared environment. Timed one after the other, A and B meet different machine
states: on a 2-core VM a whole process runs fast or slow by 10-30%, and most of that is the machine's state over time,
which two processes alive at the same moment share (../shared/noise: per-round latencies of two live processes
correlate 0.56-0.88). So with `benchmark.together`, the launcher starts a block's processes at once and hands out
turns: each process's setup (load, eager's reference, inductor's start-up, the arms' compiles) is a turn of its own,
then every warm-up round and every timed round is one turn, the processes in strict alternation. Only the process
whose turn it is runs; the others wait on a pipe, using no CPU. Each process still decides for itself when its
warm-up and its timing are done; it says `over` with its last turn, and the others go on without it.

The protocol, a line each way on two pipes per process (COMPILEBENCH_TURNS names their descriptors): the launcher
writes `go` (the first carries the process groups of the block's other processes, whose CPU is not a disturbance),
the process answers `done` (it wants another turn) or `over` (it takes no more). End of file either way ends it: a
process that died is out of the block, and a process whose launcher is gone exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable

TURNS_ENV = "COMPILEBENCH_TURNS"  # "READ_FD,WRITE_FD": a trial process's end of its turn pipes
GO, DONE, OVER = "go", "done", "over"


class Solo:
    """A process alone: every turn is its own at once."""

    waited_s = 0.0
    partners: tuple[int, ...] = ()

    def take(self) -> None:
        """Wait for this process's turn (alone: no wait)."""

    def give(self, more: bool) -> None:
        """End this process's turn, saying whether it wants another."""


class Turns(Solo):
    """A trial process's side of the protocol: `take` blocks until the launcher says go, `give` answers."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.reader = os.fdopen(read_fd, "r", buffering=1)
        self.writer = os.fdopen(write_fd, "w", buffering=1)
        self.waited_s = 0.0  # seconds this process waited for its turns (while the others ran)
        self.partners: tuple[int, ...] = ()  # the process groups of the block's other processes

    def take(self) -> None:
        began = time.perf_counter()
        line = self.reader.readline()
        self.waited_s += time.perf_counter() - began
        words = line.split()
        if not words or words[0] != GO:  # the launcher is gone, or ended the block: nothing of this process counts
            os._exit(1)
        if len(words) > 1:
            self.partners = tuple(int(group) for group in words[1].split(",") if group)

    def give(self, more: bool) -> None:
        self.writer.write(f"{DONE if more else OVER}\n")


def of_this_process() -> Solo:
    """This trial process's turns: the pipes the launcher gave it, or Solo."""
    fds = os.environ.get(TURNS_ENV)
    if not fds:
        return Solo()
    read_fd, write_fd = (int(fd) for fd in fds.split(","))
    return Turns(read_fd, write_fd)


class Member:
    """The launcher's side of one process of a block: its pipes and whether it still takes turns."""

    def __init__(self) -> None:
        self.to_child_read, self.to_child_write = os.pipe()
        self.from_child_read, self.from_child_write = os.pipe()
        self.open = [self.to_child_read, self.to_child_write, self.from_child_read, self.from_child_write]
        self.group = 0  # the process group the launcher started it in (its pid)
        self.active = True
        self.turns = 0

    def child_fds(self) -> tuple[int, int]:
        """The descriptors the child keeps (pass_fds): it reads the first and writes the second."""
        return self.to_child_read, self.from_child_write

    def started(self, group: int) -> None:
        """The child runs: its ends are closed here, so that its death reads as end of file."""
        self.group = group
        self._close(self.to_child_read, self.from_child_write)

    def close(self) -> None:
        """Close every end still open here (the child, if alive, reads end of file and exits)."""
        self._close(*self.open)

    def _close(self, *fds: int) -> None:
        for fd in fds:
            if fd in self.open:
                self.open.remove(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)


def environment_value(member: Member) -> str:
    return ",".join(str(fd) for fd in member.child_fds())


def run_turns(members: list[Member], check: Callable[[], None], poll_s: float = 0.25) -> None:
    """Hand out turns to `members` in strict rotation until none wants another. `check()` runs every `poll_s` while a
    process holds its turn (memory caps, deadlines, a stop): it may mark members inactive, or raise to end the block.
    A member whose pipe ends (it died, or was ended) is out; the others go on."""
    while any(member.active for member in members):
        for member in members:
            if not member.active:
                continue
            partners = ",".join(str(other.group) for other in members if other is not member)
            message = f"{GO} {partners}\n" if member.turns == 0 else f"{GO}\n"
            try:
                os.write(member.to_child_write, message.encode())
            except BrokenPipeError:
                member.active = False
                continue
            member.turns += 1
            answer = _answer(member, check, poll_s)
            if answer != DONE:
                member.active = False


def _answer(member: Member, check: Callable[[], None], poll_s: float) -> str:
    """The member's answer to its turn (`done`, `over`, or "" at end of file), checking every `poll_s` meanwhile."""
    buffer = b""
    while member.active:
        ready, _, _ = select.select([member.from_child_read], [], [], poll_s)
        if not ready:
            check()
            continue
        chunk = os.read(member.from_child_read, 64)
        if not chunk:
            return ""
        buffer += chunk
        if b"\n" in buffer:
            return buffer.split(b"\n", 1)[0].decode().strip()
    return ""
