"""What a plan costs, before it runs; the one place a plan is priced.

On this machine: each unit's processes priced at this machine's earlier ones (their own seconds, and their share of
their block's wall time, what the adaptive loop's budget counts), and the room the budget leaves (`spend`): what
`forecast` says and `adaptive.forecast` counts blocks with. On another machine's device: each process priced from a
cost table measured there (compilebench.costs; `estimate`), and a plan split into windows of a fixed number of
estimated minutes for a machine at hand briefly (`windows`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from compilebench.analysis.adaptive import Unit, unit_of
from compilebench.analysis.per_process import ProcessRecord
from compilebench.analysis.run_record import RunRecord
from compilebench.records.formats import CACHE_COLD, CACHE_SHARED, KIND_ARM, KIND_COLD, TrialSpec, processes, units
from compilebench.records.invocation import LoopSettings


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
        if record.env.environment_fields.get("device", device) != device:
            continue
        for process in record.process_results:
            where = process.machine_fingerprint or record.env.environment_fields.get("machine_fingerprint")
            if where != machine or process.wall_s <= 0 or (process.kind != KIND_ARM and not record.cell.compile):
                continue  # an eager run lists the processes of its compiled runs' units again: taken from those
            if process.kind == KIND_ARM:
                unit: Unit = ("timing", record.cell.model_id, record.cell.batch_size, "")
            else:
                unit = (
                    process.kind if process.kind == KIND_COLD else "paired",
                    record.cell.model_id,
                    record.cell.batch_size,
                    record.cell.variant,
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


@dataclass(frozen=True)
class PlanCost:
    """What a plan should cost on the device a cost table was measured on (`estimate`)."""

    seconds: float
    processes: int
    borrowed: tuple[str, ...]  # "model variant" pairs the table had no cost for: the median of the others is used
    prime_s: float = 0.0  # a shared-cache plan's compile-only processes (launcher --prime), one after the other
    primes: int = 0  # how many (one per compiled run)


def _raw(entry: dict[str, Any], variant: str | None, key: str) -> Any:
    """One model's entry for `key` (a variant's where `variant` is given): a number, or a latency's {batch: ms}."""
    return entry.get("variants", {}).get(variant, {}).get(key) if variant else entry.get(key)


def _value(entry: dict[str, Any], variant: str | None, key: str, batch: int | None) -> float | None:
    """One model's cost `key`, a latency's at `batch`; None where the table has none."""
    value = _raw(entry, variant, key)
    return value.get(str(batch)) if isinstance(value, dict) else value


def _cost(
    costs: dict[str, Any], model: str, variant: str | None, key: str, borrowed: set[str], batch: int | None = None
) -> float:
    """A cost from the table: the model's own, else the median over the models that have it (and say so). A latency
    (`batch` given) that no model has at that batch size is taken at the nearest batch size one was measured at, and
    named as such: a batch's latency is no measure of another's, so the estimate is a guess there. Where the table
    carries `batch_ratios` (the doc's latencies of the model at each batch size over batch 1's, eager and compiled:
    reference.batch_ratios), that latency is scaled by the doc's growth from the one batch size to the other."""
    models = costs["models"]
    value = _value(models.get(model, {}), variant, key, batch)
    if value is not None:
        return float(value)
    others = [found for entry in models.values() if (found := _value(entry, variant, key, batch)) is not None]
    if others:
        borrowed.add(f"{model} {variant or ''}".strip())
        return float(statistics.median(others))
    latencies = [_raw(entry, variant, key) for entry in models.values()]
    measured = sorted({int(size) for value in latencies if isinstance(value, dict) for size in value})
    if batch is not None and measured:
        nearest = min(measured, key=lambda size: (abs(size - batch), size))
        growth = costs.get("batch_ratios", {}).get(model, {}).get(key, {})
        grown = str(batch) in growth and str(nearest) in growth
        scale = growth[str(batch)] / growth[str(nearest)] if grown else 1.0
        times = f" x {scale:.2f}, the doc's growth from batch {nearest}" if grown else ""
        borrowed.add(f"{model} {variant or 'eager'} at batch {batch} (latency of batch {nearest}{times})")
        return scale * _cost(costs, model, variant, key, borrowed, nearest)
    borrowed.add(f"{model} {variant or ''}".strip())
    if variant not in (None, "default"):  # a variant nobody measured: as `default`
        return _cost(costs, model, "default", key, borrowed, batch)
    return 0.0


def _process_cost(costs: dict[str, Any], model: str, key: str, borrowed: set[str]) -> float:
    """A cost of a timing process of arms that older tables lack (`inductor_startup_s`, `other_s`): the model's own,
    else the median of the models that have it; none where no model has it."""
    if not any(entry.get(key) is not None for entry in costs["models"].values()):
        return 0.0
    own: set[str] = set()
    value = _cost(costs, model, None, key, own)
    borrowed.update(f"{name} (process of arms)" for name in own)
    return value


def estimate(trials: list[TrialSpec], costs: dict[str, Any]) -> PlanCost:
    """The seconds a plan's processes take one after the other on the device of `costs` (compilebench.costs): per
    process its start-up and load; a cold process its cold compile; a timing or paired one each arm's warm compile
    (as measured in a process of its own, so an upper bound for the arms after the first); every one its warm-up and
    its timed rounds (min_iters rounds or min_time_s, whichever is longer, at most max_time_s); a timing process of
    arms also inductor's start-up before its arms and the rest of its wall time (eager's first call, the checks,
    exit), where the table has them. For a shared-cache plan, apart: the prime's compile-only processes (start-up,
    load, cold compile), one after the other."""
    borrowed: set[str] = set()
    total = 0.0
    groups = processes(trials)
    for group in groups:
        first, timing = group[0], group[0].timing
        model = first.model.model_id
        seconds = _cost(costs, model, None, "startup_s", borrowed) + _cost(costs, model, None, "load_s", borrowed)
        compiled = [spec.variant.name for spec in group if spec.variant.compile]
        kind = "cold_compile_s" if first.kind == KIND_COLD or first.cache == CACHE_COLD else "warm_compile_s"
        seconds += sum(_cost(costs, model, variant, kind, borrowed) for variant in compiled)
        batch = first.batch_size  # every kind times eager and its compiled variants (a cold process after compiling)
        round_s = (
            _cost(costs, model, None, "eager_ms", borrowed, batch)
            + sum(_cost(costs, model, v, "call_ms", borrowed, batch) for v in compiled)
        ) / 1000
        seconds += max(timing.warmup_s, timing.warmup_iters * round_s)
        seconds += min(max(timing.min_iters * round_s, timing.min_time_s), timing.max_time_s)
        if first.kind == KIND_ARM:
            seconds += sum(_process_cost(costs, model, key, borrowed) for key in ("inductor_startup_s", "other_s"))
        total += seconds
    primed = {spec.cache_key: spec for spec in trials if spec.cache == CACHE_SHARED and spec.variant.compile}
    prime_s = sum(
        _cost(costs, spec.model.model_id, None, "startup_s", borrowed)
        + _cost(costs, spec.model.model_id, None, "load_s", borrowed)
        + _cost(costs, spec.model.model_id, spec.variant.name, "cold_compile_s", borrowed)
        for spec in primed.values()
    )
    return PlanCost(total, len(groups), tuple(sorted(borrowed)), prime_s, len(primed))


def window_seconds(found: PlanCost, prime_at_once: int) -> float:
    """A window's seconds on the device of a cost table: its processes one after the other, after its prime with
    `prime_at_once` compile-only processes at a time (launcher --prime N)."""
    return found.seconds + found.prime_s / max(1, min(prime_at_once, found.primes or 1))


def windows(
    trials: list[TrialSpec], costs: dict[str, Any], minutes: float, prime_at_once: int = 1, search_nodes: int = 20_000
) -> list[list[TrialSpec]]:
    """A plan's trials in as few windows of at most `minutes` estimated minutes each (`estimate`, `window_seconds`)
    as can be found: for a machine at hand for a fixed time, each window a plan of its own. Each unit (records.units: a
    (model, batch size) with every environment, block and variant of it) stays whole, so that each window's blocks
    pair A with B, its loop adds blocks to cells it holds, and its prime compiles what its processes load.
    First-fit decreasing packs them; then fewer windows are searched for, and among packings into that many the one
    whose longest window is shortest (each search exhaustive up to `search_nodes` steps). A unit estimated over
    `minutes` gets a window alone (the launcher's --stop-after-min and resume carry it over). The windows come in
    the order of the compiled cells each judges per estimated minute, most first, so a machine lent briefly judges
    most in its first window; each window keeps the plan's order."""
    if not (math.isfinite(minutes) and minutes > 0):
        raise ValueError(f"a window must be a positive number of minutes, got {minutes}")
    grouped = {(unit[0].model.model_id, unit[0].batch_size): unit for unit in units(trials)}
    parts = {key: estimate(unit, costs) for key, unit in grouped.items()}  # additive: processes, prime seconds, primes
    limit = minutes * 60

    def seconds(keys: list[tuple[str, int]]) -> float:
        found = [parts[key] for key in keys]
        total = PlanCost(
            sum(e.seconds for e in found), 0, (), sum(e.prime_s for e in found), sum(e.primes for e in found)
        )
        return window_seconds(total, prime_at_once)

    order = sorted(grouped, key=lambda key: -seconds([key]))  # stable: the plan's order among equals
    fits = [key for key in order if seconds([key]) <= limit]  # a unit over the limit gets a window alone
    bins: list[list[tuple[str, int]]] = []
    for key in fits:  # first-fit decreasing
        room = next((keys for keys in bins if seconds([*keys, key]) <= limit), None)
        if room is None:
            bins.append([key])
        else:
            room.append(key)
    fewest = max(1, math.ceil(seconds(fits) / limit)) if fits else 0  # the prime shared best in one window
    for count in range(fewest, len(bins)):
        found = _pack(fits, count, seconds, limit, search_nodes)
        if found is not None:
            bins = found
            break
    low, high = min(limit, max([seconds([key]) for key in fits] + [seconds(fits) / max(1, len(bins))])), limit
    for _ in range(8 if bins else 0):  # the same number of windows, their longest as short as can be found
        middle = (low + high) / 2
        found = _pack(fits, len(bins), seconds, middle, search_nodes)
        if found is not None and len(found) == len(bins):
            bins, high = found, middle
        else:
            low = middle
    bins += [[key] for key in order if key not in fits]

    def judged_per_s(keys: list[tuple[str, int]]) -> float:
        cells = {
            (spec.model.model_id, spec.batch_size, spec.variant.name)
            for key in keys
            for spec in grouped[key]
            if spec.variant.compile
        }
        return len(cells) / max(seconds(keys), 1.0)

    bins.sort(key=lambda keys: -judged_per_s(keys))  # stable: the window that judges most cells a minute runs first
    return [[spec for spec in trials if (spec.model.model_id, spec.batch_size) in keys] for keys in bins]


def _pack(keys: list, count: int, seconds: Any, limit: float, nodes: int) -> list[list] | None:
    """`keys` (largest first) in `count` windows of at most `limit` seconds each (`seconds` of a window's keys), by
    depth-first search; None where there is no such packing or none was found within `nodes` steps."""
    bins: list[list] = [[] for _ in range(count)]
    steps = 0

    def place(index: int) -> bool:
        nonlocal steps
        if index == len(keys):
            return True
        tried_empty = False
        for keys_in in bins:
            steps += 1
            if steps > nodes:
                return False
            if (not keys_in and tried_empty) or seconds([*keys_in, keys[index]]) > limit:
                continue  # an empty window is one choice, however many there are
            tried_empty = tried_empty or not keys_in
            keys_in.append(keys[index])
            if place(index + 1):
                return True
            keys_in.pop()
        return False

    return [keys_in for keys_in in bins if keys_in] if place(0) else None
