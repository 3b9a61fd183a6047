"""What a planned invocation costs on this machine, before it runs: each unit's processes priced at this machine's
earlier ones (their own seconds, and their share of their block's wall time, what the adaptive loop's budget counts),
and the room the budget leaves. What `forecast` says and `adaptive.forecast` counts blocks with."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from compilebench.analysis.adaptive import Unit, unit_of
from compilebench.analysis.per_process import ProcessRecord
from compilebench.analysis.run_record import RunRecord
from compilebench.harness.invocation import LoopSettings
from compilebench.harness.records import KIND_ARM, KIND_COLD, TrialSpec, processes


@dataclass(frozen=True)
class Prices:
    """What a process of each unit cost on one machine and device (`process_prices`)."""

    seconds: dict[Unit, float]  # per unit, the median of its processes' own seconds
    processes: int  # the processes they come from
    alone: int  # of them, those that ran alone (no block run together: `make run`'s), without waits for turns
    untimed: frozenset[Unit] = frozenset()  # cold units priced by cold processes that did not time (one stack's)
    overlap: dict[Unit, float] = field(default_factory=dict)  # per unit, wall share / own seconds (block_overlap)

    def wall_of(self, spec: TrialSpec) -> float | None:
        """What a process of `spec` adds to the wall time (None: no price): its price, times its unit's overlap."""
        price = self.of(spec)
        return None if price is None else price * self.overlap.get(unit_of(spec), 1.0)

    def of(self, spec: TrialSpec) -> float | None:
        """What a process of `spec` costs (None: no price): its unit's price, with a cold process's timing (its
        warm-up and timed seconds, `warmup_s` and `min_time_s`) added where the price is of cold processes that did
        not time and it will, or taken out where the reverse."""
        unit = unit_of(spec)
        if unit not in self.seconds:
            return None
        timing_s = spec.timing.warmup_s + spec.timing.min_time_s if spec.kind == KIND_COLD else 0.0
        if spec.kind == KIND_COLD and spec.timed == (unit in self.untimed):
            return max(self.seconds[unit] + (timing_s if spec.timed else -timing_s), 0.0)
        return self.seconds[unit]


def unit_processes(records: list[RunRecord], machine: str, device: str) -> dict[Unit, dict[str, ProcessRecord]]:
    """The processes of `machine` (a fingerprint) and `device` in `records`, by unit and process id, each once.
    Processes of another machine or device are left out: one machine's times say nothing of another's."""
    found: dict[Unit, dict[str, ProcessRecord]] = {}
    for record in records:
        if record.environment_fields.get("device", device) != device:
            continue
        for process in record.process_results:
            where = process.machine_fingerprint or record.environment_fields.get("machine_fingerprint")
            if where != machine or process.wall_s <= 0 or (process.kind != KIND_ARM and not record.compile):
                continue  # an eager run lists the processes of its compiled runs' units again: taken from those
            if process.kind == KIND_ARM:
                unit: Unit = ("timing", record.model_id, record.batch_size, "")
            else:
                unit = (
                    process.kind if process.kind == KIND_COLD else "paired",
                    record.model_id,
                    record.batch_size,
                    record.variant,
                )
            found.setdefault(unit, {})[process.process_id or process.trial_id] = process
    return found


def process_prices(records: list[RunRecord], machine: str, device: str) -> Prices:
    """What a process of each unit costs on `machine` and `device`: per unit, the median of its processes' own
    seconds in `records` (`unit_processes`; ProcessRecord.own_s: what the budget counts)."""
    found = unit_processes(records, machine, device)
    every = [process for processes_of in found.values() for process in processes_of.values()]
    untimed = frozenset(
        unit for unit, of in found.items() if unit[0] == "cold" and not any(p.eager_ms for p in of.values())
    )
    seconds = {unit: statistics.median(p.own_s for p in of.values()) for unit, of in found.items()}
    overlap = {unit: block_overlap(list(of.values())) for unit, of in found.items()}
    return Prices(seconds, len(every), sum(process.turn_wait_s is None for process in every), untimed, overlap)


def block_overlap(processes_of: list[ProcessRecord]) -> float:
    """How much of its processes' own seconds a unit's block takes of the wall: a block run together lasts as long as
    its longest process (their set-up and compiles overlap on the machine's cores, measured: docs/findings.md, "The
    forecast prices blocks run together"), so each process's share of the wall is the block's wall over its
    processes (a block is run together when any of its processes waited for a turn: one that ended at once, say
    `unsupported`, did not); a process that ran alone takes its own seconds. The median share over the unit's
    processes, over the median of their own seconds (1 where they have none)."""
    blocks: dict[str, list[ProcessRecord]] = {}
    for process in processes_of:
        blocks.setdefault(process.block, []).append(process)
    shares = []
    for block in blocks.values():
        if any(process.turn_wait_s is not None for process in block):  # one that ended early need not have waited
            shares += [max(process.wall_s for process in block) / len(block)] * len(block)
        else:
            shares += [process.own_s for process in block]
    own = statistics.median(process.own_s for process in processes_of)
    return statistics.median(shares) / own if own > 0 else 1.0


@dataclass(frozen=True)
class Spend:
    """What an invocation's planned blocks cost, priced at this machine's earlier processes (`process_prices`), and
    the room the budget leaves the loop."""

    by_kind: dict[str, int]  # planned processes by kind of unit (timing, cold, paired), every environment's
    planned_s: float  # the priced ones' own seconds, one after another
    priced: int  # planned processes priced
    unpriced: tuple[Unit, ...]  # units no earlier process of this machine prices: left out of planned_s
    budget_s: float  # budget_min for every environment
    round_s: dict[str, float]  # by kind of unit: one more block of every priced unit of that kind, in wall time
    wall_s: float = 0.0  # the priced ones' wall time, what the budget counts: a block run together takes its longest
    #                      process's (Prices.wall_of)

    def rounds(self, kind: str) -> int:
        """How many more blocks of every unit of `kind` fit in what the planned blocks leave of the budget, were it
        spent on them alone (the loop shares it out, widest intervals first, to the units short of their targets);
        0 while any planned process is unpriced (what it leaves is not known)."""
        room_s, round_s = self.budget_s - self.wall_s, self.round_s.get(kind, 0.0)
        return int(room_s // round_s) if round_s > 0 and room_s > 0 and not self.unpriced else 0


def spend(trials: list[TrialSpec], labels: list[str], bench: LoopSettings, prices: Prices) -> Spend:
    """`trials`' processes priced (`process_prices`): what `extend` will count against the budget."""
    counts: dict[str, int] = {}
    planned_s, wall_s, priced, unpriced = 0.0, 0.0, 0, []
    for group in processes(trials):
        unit, price = unit_of(group[0]), prices.of(group[0])
        counts[unit[0]] = counts.get(unit[0], 0) + 1
        if price is not None:
            planned_s, priced = planned_s + price, priced + 1
            wall_s += prices.wall_of(group[0]) or 0.0
        elif unit not in unpriced:
            unpriced.append(unit)
    round_s: dict[str, float] = {}
    for spec in {unit_of(spec): spec for spec in trials}.values():  # a unit's last process: what a block repeats
        wall = prices.wall_of(spec)
        if wall is not None:
            round_s[unit_of(spec)[0]] = round_s.get(unit_of(spec)[0], 0.0) + wall * len(labels)
    return Spend(counts, planned_s, priced, tuple(unpriced), bench.budget_min * 60 * len(labels), round_s, wall_s)
