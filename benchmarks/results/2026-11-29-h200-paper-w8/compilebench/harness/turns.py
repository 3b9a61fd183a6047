"""Turns: the processes of one block alive together, taking turns on the machine. Standard library only.

A block is one timing (or cold) process per compared environment. Timed one after the other, A and B meet different
machine states: on a 2-core VM a whole process runs fast or slow by 10-30%, and most of that is the machine's state over
time, which two processes alive at the same moment share (../shared/noise: per-round latencies of two live processes
correlate 0.56-0.88). So with `benchmark.together`, the launcher starts a block's processes at once and hands out turns:
each process's set-up (load, eager's reference, inductor's start-up, the arms' compiles; a cold process's compile on its
empty cache) is a turn of its own, then its warm-up and timed rounds, TURN_S seconds of them a turn, the processes in
strict alternation. Only the process whose turn it is runs; the others wait on a pipe, using no CPU. Each process still
decides for itself when its warm-up and its timing are done; it says `over` with its last turn, and the launcher lets it
write its result and exit before the others go on without it. The machine's disturbance of a process is read during its
own turns only (`metered`): the others' work is never in them.

The protocol, a line each way on two pipes per process (COMPILEBENCH_TURNS names their descriptors): the launcher
writes `go`, the process answers `done` (it wants another turn) or `over` (it takes no more). End of file either way
ends it: a process that died is out of the block, and a process whose launcher is gone exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable

TURNS_ENV = "COMPILEBENCH_TURNS"  # "READ_FD,WRITE_FD": a trial process's end of its turn pipes
GO, DONE, OVER = "go", "done", "over"
TURN_S = 0.5  # a timing turn holds rounds until it has lasted this long: fewer first calls after the other's turn
Snapshot = tuple[float, ...]  # what a meter reads (timing.cpu_snapshot: a clock, then CPU seconds by kind)


class Solo:
    """A process alone: every turn is its own at once. `round_begins` and `round_ends` bracket each warm-up and timed
    round; a metered stretch (`start_metering` to `metered`) is read once around its whole window."""

    waited_s = 0.0
    taken = 0  # turns this process has taken (alone: none; each timed round records it, `round_turn`)

    def __init__(self) -> None:
        self.meter: Callable[[], Snapshot | None] | None = None
        self.first: Snapshot | None = None

    def round_turn(self) -> int | None:
        """The turn the round running now is in, counted from the process's first (its set-up), or None alone. The
        launcher goes round its members in order, so A's k-th turn and B's k-th turn are neighbours in time: a
        comparison pairs their rounds by it (compare.py)."""
        return None

    def take(self) -> None:
        """Wait for this process's turn (alone: no wait)."""

    def give(self, more: bool) -> None:
        """End this process's turn, saying whether it wants another."""

    def round_begins(self) -> None:
        """A round is about to run: its turn must be held."""

    def round_ends(self, last: bool) -> None:
        """A round has run; `last`: this process wants no more turns."""

    def start_metering(self, meter: Callable[[], Snapshot | None]) -> None:
        """From now on, read the machine with `meter` while this process runs (what `metered` returns)."""
        self.meter, self.first = meter, meter()

    def metered(self) -> tuple[Snapshot | None, Snapshot | None]:
        """The meter's readings around what this process ran since `start_metering` (timing.disturbance takes them):
        alone, the whole window."""
        return self.first, self.meter() if self.meter else None


class Turns(Solo):
    """A trial process's side of the protocol: `take` blocks until the launcher says go, `give` answers. Rounds are
    held in one turn until it has lasted TURN_S; metering counts the machine only during this process's turns (the
    others wait on their pipes meanwhile), summed."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        super().__init__()
        self.reader = os.fdopen(read_fd, "r", buffering=1)
        self.writer = os.fdopen(write_fd, "w", buffering=1)
        self.waited_s = 0.0  # seconds this process waited for its turns (while the others ran)
        self.holding_since: float | None = None  # when the turn it holds began
        self.segment: Snapshot | None = None  # the meter's reading when the metered part of this turn began
        self.total: list[float] | None = None  # the metered turns' differences, summed
        self.taken = 0

    def take(self) -> None:
        began = time.perf_counter()
        line = self.reader.readline()
        self.holding_since = time.perf_counter()
        self.waited_s += self.holding_since - began
        self.taken += 1
        if line.split() != [GO]:  # the launcher is gone, or ended the block: nothing of this process counts
            os._exit(1)
        if self.meter is not None:
            self.segment = self.meter()

    def give(self, more: bool) -> None:
        if self.meter is not None and self.segment is not None:
            end = self.meter()
            if end is not None:
                differences = [after - before for before, after in zip(self.segment, end, strict=True)]
                self.total = (
                    differences if self.total is None else [a + b for a, b in zip(self.total, differences, strict=True)]
                )
        self.segment, self.holding_since = None, None
        self.writer.write(f"{DONE if more else OVER}\n")

    def round_turn(self) -> int | None:
        return self.taken

    def round_begins(self) -> None:
        if self.holding_since is None:
            self.take()

    def round_ends(self, last: bool) -> None:
        if last or time.perf_counter() - (self.holding_since or 0.0) >= TURN_S:
            self.give(more=not last)

    def start_metering(self, meter: Callable[[], Snapshot | None]) -> None:
        self.meter, self.total = meter, None
        self.segment = meter() if self.holding_since is not None else None

    def metered(self) -> tuple[Snapshot | None, Snapshot | None]:
        if self.total is None:
            return None, None
        return (0.0,) * len(self.total), tuple(self.total)


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
        self.exited: Callable[[], bool] | None = None  # whether its process has ended (set when it starts)
        self.active = True
        self.turns = 0

    def child_fds(self) -> tuple[int, int]:
        """The descriptors the child keeps (pass_fds): it reads the first and writes the second."""
        return self.to_child_read, self.from_child_write

    def started(self, exited: Callable[[], bool]) -> None:
        """The child runs (`exited` tells when it has ended): its ends are closed here, so that its death reads as
        end of file."""
        self.exited = exited
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
    A member that takes no more turns (`over`, or its pipe ended: it died, or was ended) is waited for until its
    process has exited, so that its writing and exit fall in no other's turn; the others go on."""
    while any(member.active for member in members):
        for member in members:
            if not member.active:
                continue
            try:
                os.write(member.to_child_write, f"{GO}\n".encode())
            except BrokenPipeError:
                member.active = False
            else:
                member.turns += 1
                member.active = _answer(member, check, poll_s) == DONE
            if not member.active:
                while member.exited is not None and not member.exited():
                    check()
                    time.sleep(0.01)


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
