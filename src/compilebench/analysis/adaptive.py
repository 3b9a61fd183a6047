"""How many blocks each run gets: the planned ones for every run, then more where the intervals are widest.

A block is one fresh process per compared environment, in a balanced order (`plan.balanced_order`; a block's processes
alive together, taking turns: harness/turns.py), in one of three units: a *timing* block of (model, batch size) is a
timing process per environment (eager and every compiled arm, warm); a *cold* block of (model, batch size, variant) is a
cold process per environment (compiled on an empty cache, then timed); a *paired* block of a variant measured alone (a
deploy way, served sizes) is a paired trial per environment, cold or warm. Once the planned blocks are done, `extend`
asks of every run how far each 95% interval is from its target (`benchmark.target`: speedup, compile time, latency; B/A
when stacks are compared, the run's own interval otherwise), gives each metric to the unit that measures it (cold
compile time to a cold block, the rest to a timing block), and adds a block to each unit short of its target, furthest
first (in a series of three stacks or more: each step's B/A of latency and speedup, and the block holds only the stacks
of its steps still short, so blocks go to the steps still undecided), while the blocks fit in `budget_min` (minutes of
the blocks' wall time per compared environment, the planned ones included: what the user waits for, a block run together
as long as its longest process) and a unit has fewer than `benchmark.max_replicates` blocks. A unit with fewer
undisturbed blocks than planned gets one first, budget or not (up to the cap): a disturbed process is re-run, never
silently dropped (the planned blocks always run). It stops on width, never on significance, so the error rates measured
by benchmarks/verdict_power.py hold. Every decision is a pure function of the results so far (the budget counts the
blocks' wall times as their processes' results give them), so a resumed invocation takes the same ones. `shortfalls`
tells the report, per run and targeted interval, what it reached and about how many more blocks it needs."""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from compilebench.analysis import compare, noise_record, plan, stats, suite
from compilebench.analysis.run_record import RunRecord
from compilebench.analysis.validity import compile_disturbed, timing_disturbed
from compilebench.records.formats import (
    CACHE_COLD,
    CACHE_SHARED,
    CACHE_WARM,
    ENDED_FROM_OUTSIDE,
    KIND_ARM,
    KIND_COLD,
    STATUS_OK,
    TrialResult,
    TrialSpec,
)
from compilebench.records.invocation import LoopSettings

LOGGER = logging.getLogger(__name__)
Cell = tuple[str, int, str]  # (model id, batch size, variant): a run without its environment
Unit = tuple[str, str, int, str]  # (timing | cold | paired, model id, batch size, variant or "" for timing)
EXTENDABLE = (STATUS_OK, "invalid")  # runs more blocks can help; a failure would repeat
MIXED = "mixed"  # an invalid run whose processes ran on several machines or stacks (validity.machine_problems)
# A noise record stops the loop only from this many degrees of freedom on: a variance from one or two is too often
# far too small (one cold block a side was taken on such a cell record, and two invocations' cold compile intervals
# of one cell missed each other); below it, the metric's record over every cell of the machine, else the cell's own.
MIN_RECORD_DOF = 4
# A forecast reads a cell's record from this many on: a first comparison's cells have 2 or 3, and such records forecast
# the next comparison's count of `equivalent` cells closely at +-10% (docs/findings.md, "The forecast's price").
FORECAST_MIN_DOF = 2


@dataclass(frozen=True)
class Width:
    """One interval of a run against its target: half-widths on the log scale (0.049 = +-5%)."""

    cell: Cell
    metric: str  # a compare.METRICS name
    halfwidth: float  # infinite without an interval
    target: float
    blocks: int
    dof: float  # of the interval (the cell's noise record pooled in, where it has one)
    environments: tuple[str, ...] = ()  # whose blocks narrow it: a series step's two stacks; () every one

    @property
    def met(self) -> bool:
        return self.halfwidth <= self.target

    @property
    def distance(self) -> float:
        """How far from the target: half-width / target (1 = reached)."""
        return self.halfwidth / self.target

    @property
    def more(self) -> int | None:
        """About how many more blocks would reach the target (None: cannot tell yet)."""
        return stats.more_blocks(self.halfwidth, self.target, self.blocks, self.dof)


def cell_of(spec: TrialSpec) -> Cell:
    return spec.model.model_id, spec.batch_size, spec.variant.name


def unit_of(spec: TrialSpec) -> Unit:
    """The unit of blocks a trial belongs to (see the module docstring)."""
    if spec.kind == KIND_ARM:
        return "timing", spec.model.model_id, spec.batch_size, ""
    if spec.kind == KIND_COLD:
        return "cold", spec.model.model_id, spec.batch_size, spec.variant.name
    return "paired", spec.model.model_id, spec.batch_size, spec.variant.name


def _log_halfwidth(estimate: stats.Estimate) -> float:
    if not estimate.has_interval or estimate.low <= 0:
        return math.inf
    return (math.log(estimate.high) - math.log(estimate.low)) / 2


def _own_intervals(run: compare.ComparedRun) -> dict[str, stats.Estimate]:
    """A run's own intervals (one environment): between-process t on its own per-process values
    (`ComparedRun.own_values`: latency and speedup from its timing processes only)."""
    names = ("speedup", "compiled_latency", "compile_cold", "compile_warm") if run.compile else ("eager_latency",)
    return {name: stats.geometric_interval(run.own_values(name)) for name in names}


def _stopping_width(
    row: compare.Comparison, metric: str, noise: noise_record.CellNoise | None, pooled: dict[str, stats.Noise]
) -> tuple[float, float]:
    """What a compared cell's width is judged by, (half-width, degrees of freedom). Where the machine has a record
    the loop knows (at least MIN_RECORD_DOF degrees of freedom: the cell's own, else the metric's over every cell),
    the half-width that noise gives the cell's blocks (stats.expected_halfwidth): it does not look at this
    invocation's differences, so neither stopping nor the widest-first order can favour cells whose blocks happened
    to agree. Otherwise (no record yet, or a cell noisier than its record), the cell's own interval."""
    ratio = row.judged[metric].ratio
    name = noise_record.noise_name(metric, ratio.method)  # the record of differences made as this cell's were
    cell = (noise or {}).get(noise_record.cell_key(row.model_id, row.batch_size, row.variant), {}).get(name)
    machine = cell if cell is not None and cell.dof >= MIN_RECORD_DOF else pooled.get(name)
    trusted = machine is not None and machine.dof >= MIN_RECORD_DOF
    if not trusted or ratio.noisy or ratio.method not in stats.PAIRED_METHODS:
        return ratio.halfwidth, float(ratio.dof or 0)
    return stats.expected_halfwidth(machine, int(ratio.blocks)), float(machine.dof + int(ratio.blocks) - 1)


def widths(
    runs: list[compare.ComparedRun],
    labels: list[str],
    targets: dict[str, float],
    noise: noise_record.CellNoise | None,
    margin: float,
) -> list[Width]:
    """Every targeted interval of every run: B/A against the baseline when two stacks are compared; in a series (three
    or more), each step's (a stack against the one before it: what the series answers per cell,
    suite.CELL_SERIES_METRICS), with the step's two stacks, so that more blocks go to the steps still wide and to no
    other stack, and none to a step a side of which measured nothing; else the run's own."""
    found: list[tuple[Cell, str, float, int, float, tuple[str, ...]]] = []  # cell, metric, half-width, blocks, dof
    if len(labels) >= 2:
        series = len(labels) >= 3
        pooled = noise_record.pooled_by_metric(noise or {})
        for row in compare.comparison_rows(runs, noise, labels, margin):
            step = row.reference == compare.PREVIOUS or row.candidate == labels[1]
            if not (step if series else row.reference == compare.FIRST):
                continue
            if series and not {row.baseline_status, row.candidate_status} <= set(EXTENDABLE):
                continue  # a side measured nothing: more blocks would not judge the step
            for name, judged in row.judged.items():
                if series and name not in suite.CELL_SERIES_METRICS:
                    continue  # compile time a series answers over the suite
                halfwidth, dof = _stopping_width(row, name, noise, pooled)
                cell = (row.model_id, row.batch_size, row.variant)
                sides = (row.baseline, row.candidate) if series else ()
                found.append((cell, name, halfwidth, judged.ratio.blocks, dof, sides))
    else:
        for run in runs:
            for name, estimate in _own_intervals(run).items():
                cell = (run.model_id, run.batch_size, run.variant)
                found.append((cell, name, _log_halfwidth(estimate), estimate.processes, estimate.processes - 1, ()))
    result = []
    for cell, name, halfwidth, blocks, dof, sides in found:
        target = targets.get(compare.METRIC_BY_NAME[name].target or "", 0.0)
        if target > 0:
            halfwidth = halfwidth if math.isfinite(halfwidth) else math.inf
            result.append(Width(cell, name, halfwidth, math.log1p(target), int(blocks), dof, sides))
    return result


def widest(found: list[Width], per_metric: bool = False) -> dict[Any, Width]:
    """Per run (per run and metric: keyed by (cell, metric)), the interval furthest from its target (met ones
    included)."""
    worst: dict[Any, Width] = {}
    for width in found:
        key = (width.cell, width.metric) if per_metric else width.cell
        if key not in worst or width.distance > worst[key].distance:
            worst[key] = width
    return worst


def units_of(width: Width, trials: list[TrialSpec]) -> list[Unit]:
    """The units whose next block narrows `width`: a cold block for cold compile time (a cold paired one for a
    variant measured alone), a timing block for the rest; an eager run's interval narrows with the blocks of every
    process that times eager (a timing one, else each paired variant's)."""
    model, batch, variant = width.cell
    mine = [spec for spec in trials if spec.model.model_id == model and spec.batch_size == batch]
    if any(unit_of(spec)[0] == "timing" for spec in mine if spec.variant.name == variant or variant == "eager"):
        if width.metric == "compile_cold":
            return [("cold", model, batch, variant)]
        return [("timing", model, batch, "")]
    if variant == "eager":
        return sorted({unit_of(spec) for spec in mine if unit_of(spec)[0] == "paired"})
    return [("paired", model, batch, variant)]


Block = tuple[Unit, int, bool]  # a unit's block: (unit, replicate, cold)


def block_of(spec: TrialSpec) -> Block:
    return unit_of(spec), spec.replicate, spec.cache == CACHE_COLD


def block_wall(windows: list[tuple[float, float]]) -> float:
    """A block's wall time from its processes' (start, wall seconds), what the user waits for: from the first start to
    the last end (a block run together lasts about as long as its longest process), never more than its processes one
    after another (a block resumed in a later invocation, or a process without a start time, 0: their walls added)."""
    summed = sum(wall for _, wall in windows)
    if not windows or any(not start for start, _ in windows):
        return summed
    return min(max(start + wall for start, wall in windows) - min(start for start, _ in windows), summed)


def block_walls(results: dict[str, TrialResult], trials: list[TrialSpec]) -> dict[Block, float]:
    """Each block's wall time (`block_wall`), each process once (a timing process's arms all carry it)."""
    windows: dict[Block, list[tuple[float, float]]] = {}
    seen: set[str] = set()
    for spec in trials:
        result = results.get(spec.trial_id)
        if result is None or spec.process in seen:
            continue
        seen.add(spec.process)
        windows.setdefault(block_of(spec), []).append((result.started_at, result.wall_s))
    return {block: block_wall(of) for block, of in windows.items()}


def _block_cost_s(
    trials: list[TrialSpec], results: dict[str, TrialResult], unit: Unit, cold: bool, processes: int
) -> float:
    """What a new block of `unit` with `processes` processes (one per environment it holds) costs, in seconds of wall
    time: the median over its blocks of the same kind (cold or warm, for a paired unit) where there is one of a
    block's wall per process, times `processes` (a series step's block holds two stacks of the series' several)."""
    sizes: dict[Block, set[str]] = {}
    for spec in trials:
        if spec.trial_id in results and unit_of(spec) == unit:
            sizes.setdefault(block_of(spec), set()).add(spec.process)
    walls = {block: wall / len(sizes[block]) for block, wall in block_walls(results, trials).items() if block in sizes}
    kind = [wall for block, wall in walls.items() if block[2] == cold and wall]
    kind = kind or [wall for wall in walls.values() if wall]
    return statistics.median(kind) * processes if kind else 0.0


def clean_blocks(trials: list[TrialSpec], results: dict[str, TrialResult], limit_cores: float) -> dict[Unit, int]:
    """Per unit, the blocks none of whose processes was disturbed in what that unit measures (a cold process while
    it compiled, the others while they timed) or ended from outside (a kill: the block is measured again)."""
    blocks: dict[Unit, dict[tuple[int, bool], bool]] = {}
    for spec in trials:
        result = results.get(spec.trial_id)
        busy = (
            result is None
            or result.status in ENDED_FROM_OUTSIDE
            or (
                compile_disturbed(result, limit_cores)
                if spec.kind == KIND_COLD
                else timing_disturbed(result, limit_cores)
            )
        )
        per_unit = blocks.setdefault(unit_of(spec), {})
        key = (spec.replicate, spec.cache == CACHE_COLD)
        per_unit[key] = per_unit.get(key, True) and not busy
    return {unit: sum(per_unit.values()) for unit, per_unit in blocks.items()}


def _planned(unit: Unit, bench: LoopSettings) -> int:
    """How many clean blocks a unit is planned to have: `cold_replicates` cold blocks, `replicates` of the others."""
    return bench.cold_replicates if unit[0] == "cold" else bench.replicates


def _extendable(statuses: dict[tuple[str, Cell], str], labels: list[str], cell: Cell) -> bool:
    """Whether more blocks can help `cell` among the stacks `labels`: its run in every one of them ended ok or
    `invalid` (one that failed, or whose processes ran on several machines, would not change with more)."""
    return all(statuses.get((label, cell), STATUS_OK) in EXTENDABLE for label in labels)


def _next_block(trials: list[TrialSpec], unit: Unit, labels: list[str], cold: bool, statuses: dict) -> list[TrialSpec]:
    """One more block of `unit`: a process per environment of `labels` (all, or a series step's), in balanced order;
    a timing process times the compiled arms more blocks can help in every stack the block holds (`_extendable`)."""
    specs = [spec for spec in trials if unit_of(spec) == unit]
    replicate = max(spec.replicate for spec in specs) + 1
    kind, *_ = unit
    first = {spec.environment: spec for spec in specs if spec.replicate == specs[0].replicate}
    added = []
    for label in plan.balanced_order(labels, replicate):
        base = first[label]
        if kind == "timing":
            arms = [
                spec.variant
                for spec in specs
                if spec.replicate == base.replicate
                and spec.environment == label
                and (not spec.variant.compile or _extendable(statuses, labels, cell_of(spec)))
            ]
            added += plan.timing_process(
                label, base.model, base.batch_size, arms, replicate, base.cache == CACHE_SHARED, base.image, base.timing
            )
        elif kind == "cold":
            added.append(
                plan.cold_trial(
                    label, base.model, base.batch_size, base.variant, replicate, base.image, base.timing, base.timed
                )
            )
        else:
            cache = CACHE_SHARED if base.cache == CACHE_SHARED else (CACHE_COLD if cold else CACHE_WARM)
            trial_id = f"{base.trial_id.rsplit('/', 1)[0]}/r{replicate}"
            added.append(replace(base, trial_id=trial_id, replicate=replicate, cache=cache))
    return added


def extend(
    trials: list[TrialSpec],
    results: dict[str, TrialResult],
    records: list[RunRecord],
    labels: list[str],
    bench: LoopSettings,
    noise: noise_record.CellNoise | None,
) -> list[TrialSpec]:
    """The next blocks: for each unit short of its planned clean blocks or of a target, furthest first, one more block
    (a process per environment, in balanced order; in a series only the stacks of its steps short of a target) while
    it fits the budget and the cap. Empty when done."""
    units = list(dict.fromkeys(unit_of(spec) for spec in trials))
    short_of: dict[Unit, tuple[float, bool, set[str]]] = {}  # unit -> (distance, cold: a paired one re-runs cold, who)
    for width in widths([compare.ComparedRun.of(r) for r in records], labels, bench.targets, noise, bench.margin):
        if width.met:
            continue
        for unit in units_of(width, trials):
            if unit not in units:
                continue  # no cold process was planned (a shared cache, or cold_replicates 0): none is added
            cold = width.metric == "compile_cold" and unit[0] == "paired"
            distance, was_cold, who = short_of.get(unit, (0.0, False, set()))
            short_of[unit] = (max(distance, width.distance), was_cold or cold, who | set(width.environments or labels))
    statuses: dict[tuple[str, Cell], str] = {}  # (environment, cell) -> its run's status
    for record in records:
        mixed = record.identity.machines > 1  # invalid for good: more blocks would not unmix its processes
        statuses[(record.env.environment, (record.cell.model_id, record.cell.batch_size, record.cell.variant))] = (
            MIXED if mixed else record.identity.status
        )
    clean = clean_blocks(trials, results, bench.disturbed_cores)
    rerun = [unit for unit in units if clean.get(unit, 0) < _planned(unit, bench)]
    ranked = rerun + sorted((u for u in short_of if u not in rerun), key=lambda u: -short_of[u][0])
    budget_s = bench.budget_min * 60 * len(labels)
    spent_s = sum(block_walls(results, trials).values())
    added: list[TrialSpec] = []
    for unit in ranked:
        specs = [spec for spec in trials if unit_of(spec) == unit]
        _, cold, who = short_of.get(unit, (0.0, False, set()))
        cold = unit[0] == "cold" or cold
        holds = labels if unit in rerun else [label for label in labels if label in who]  # a rerun: every one
        compiled = {cell_of(spec) for spec in specs if spec.variant.compile} or {cell_of(specs[0])}
        if not any(_extendable(statuses, holds, cell) for cell in compiled):
            continue  # every cell it measures failed in a stack it holds: another block would fail alike
        if max(spec.replicate for spec in specs) + 1 >= bench.max_replicates:
            continue
        cost = _block_cost_s(trials, results, unit, cold, len(holds))
        if spent_s + cost > budget_s and unit not in rerun:  # a planned block always runs, a disturbed one again
            continue
        spent_s += cost
        added += _next_block(trials, unit, holds, cold, statuses)
    return added


def shortfalls(
    records: list[RunRecord], labels: list[str], bench: LoopSettings, noise: noise_record.CellNoise | None
) -> list[dict[str, Any]]:
    """Per run and targeted metric (in compare.METRICS order), its interval against its target (of several compared
    environments, the widest B/A): reached or not, and about how many more blocks it needs."""
    rows = []
    order = {metric.name: i for i, metric in enumerate(compare.METRICS)}
    runs = [compare.ComparedRun.of(record) for record in records]
    found = widest(widths(runs, labels, bench.targets, noise, bench.margin), per_metric=True).values()
    for width in sorted(found, key=lambda width: (width.cell, order[width.metric])):
        model_id, batch, variant = width.cell
        rows.append(
            {
                "model_id": model_id,
                "batch_size": batch,
                "variant": variant,
                "metric": width.metric,
                "halfwidth_pct": 100 * math.expm1(width.halfwidth) if math.isfinite(width.halfwidth) else None,
                "target_pct": 100 * math.expm1(width.target),
                "blocks": width.blocks,
                "met": width.met,
                "more_blocks": width.more,
            }
        )
    return rows


def targeted(bench: LoopSettings) -> list[str]:
    """The metrics the loop aims at (compare.METRICS whose kind has a target above 0), in their order."""
    return [metric.name for metric in compare.METRICS if metric.target and bench.targets.get(metric.target)]


@dataclass(frozen=True)
class Reach:
    """What a metric's intervals reach after `blocks` blocks a cell, from the machine's noise record alone: the
    smallest change found with 80% power (a fraction, stats.minimum_detectable) as (least, most) over the record's
    cells, and how many of those cells are expected to say `equivalent` against the margin when nothing changed (the
    sum of their stats.equivalence_chance)."""

    blocks: int
    change: tuple[float, float]
    equivalent: float


def forecast(
    noise: noise_record.CellNoise,
    cells: list[str],
    bench: LoopSettings,
    by_turn: bool = False,
    added: dict[str, int] | None = None,
    cold_timed: bool = False,
) -> list[dict[str, Any]]:
    """Before any block runs, what the budget can resolve on this machine: per targeted metric the machine's noise
    record has for `cells` (noise_record.cell_key) with FORECAST_MIN_DOF degrees of freedom or more, a Reach after the
    planned blocks (`planned`) and after `max_replicates` (`most`); with `added` (by kind of unit, `timing` or
    `cold`: the blocks the budget leaves room for, `pricing.Spend.rounds`), also after the planned blocks and those
    (`budget`). With `by_turn` (blocks run together), latency and speedup from the record of blocks paired by turn.
    With `cold_timed` (the plan has cold processes, which time their variant and eager after compiling), latency and
    speedup count a cell's cold blocks too: at least `cold_replicates` more (an eager cell gets those of every
    variant). Empty for a machine without a record (the first comparison on it makes one)."""
    found = []
    for metric in (compare.METRIC_BY_NAME[name] for name in targeted(bench)):
        kind = "cold" if metric.name == "compile_cold" else "timing"  # the unit whose blocks measure it
        cold = bench.cold_replicates if cold_timed and metric.name in compare.BY_TURN_METRICS else 0
        planned = bench.cold_replicates if kind == "cold" else bench.replicates + cold
        paired_by_turn = by_turn and metric.name in compare.BY_TURN_METRICS
        name = noise_record.noise_name(metric.name, stats.PAIRED_BY_TURN if paired_by_turn else stats.PAIRED)
        records = [noise[cell][name] for cell in cells if name in noise.get(cell, {})]
        records = [record for record in records if record.dof >= FORECAST_MIN_DOF]
        if not records or planned < 1:
            continue
        entry: dict[str, Any] = {"metric": metric.name, "cells": len(records)}
        counts = [("planned", planned), ("most", bench.max_replicates + cold)]  # the cap is per unit
        if (added or {}).get(kind, 0) > 0:
            counts.append(("budget", min(planned + added[kind], bench.max_replicates + cold)))
        for name, blocks in counts:
            widths = [(stats.expected_halfwidth(record, blocks), record.dof + blocks - 1) for record in records]
            change = [stats.minimum_detectable(halfwidth, dof) for halfwidth, dof in widths]
            equivalent = [stats.equivalence_chance(halfwidth, dof, bench.margin) for halfwidth, dof in widths]
            entry[name] = Reach(blocks, (min(change), max(change)), sum(equivalent))
        found.append(entry)
    return found


def measure(
    trials: list[TrialSpec],
    labels: list[str],
    settings: LoopSettings,
    run: Callable[[list[TrialSpec]], dict[str, TrialResult]],
    records_of: Callable[[list[TrialSpec], dict[str, TrialResult]], list[RunRecord]],
    noise_of: Callable[[list[RunRecord]], noise_record.CellNoise | None] = lambda records: None,
    added: Callable[[list[TrialSpec]], None] = lambda specs: None,
) -> tuple[list[TrialSpec], list[RunRecord], noise_record.CellNoise | None]:
    """The loop, the same in the pipeline and on a machine that runs an exported plan: run `trials` (`run` returns
    every result so far, by trial id), then the blocks `extend` adds, until it adds none; `added` hears of each new
    batch first. Returns every trial, the final run records and the noise they were judged with."""
    trials, pending = list(trials), list(trials)
    records: list[RunRecord] = []
    noise = None
    while pending:
        results = run(pending)
        records = records_of(trials, results)
        noise = noise_of(records)
        pending = extend(trials, results, records, labels, settings, noise)
        if pending:
            LOGGER.info(
                "adaptive: %d more trial(s) for %s",
                len(pending),
                sorted({f"{s.model.label} bs{s.batch_size} {s.variant.name}" for s in pending}),
            )
            added(pending)
        trials += pending
    return trials, records, noise
