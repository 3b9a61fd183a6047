"""How many blocks each run gets: the first `replicates` for every run, then more where the intervals are widest.

A block of a run (model, batch size, variant) is one fresh process per compared environment, one after the other in
a balanced order (`plan.balanced_order`). Once the planned blocks are done, `extend` asks of every run how far its
widest 95% interval is from its target (`benchmark.target`: speedup, compile time, latency; B/A when stacks are
compared, the run's own interval otherwise) and adds a block to each run short of it, furthest first, while the
blocks fit in `benchmark.budget_min` (minutes of trial processes per compared environment, the planned blocks
included) and a run has fewer than `benchmark.max_replicates`. A block re-runs cold when cold compile time is the
widest interval; warm otherwise. A run with fewer undisturbed blocks than `replicates` gets a block first: a
disturbed process is re-run, never silently dropped. It stops on width, never on significance, so the tests' error
rates hold. Every decision is a pure function of the results so far (the budget counts the trials' own wall time),
so a resumed invocation takes the same ones. `widths` also tells the report, per run, what was reached and about how
many more blocks it needed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any

from compilebench import compare, plan, stats
from compilebench.records import CACHE_COLD, CACHE_SHARED, CACHE_WARM, STATUS_OK, TrialResult, TrialSpec
from compilebench.runs import is_disturbed

Slot = tuple[str, int, str]  # (model id, batch size, variant): a run without its environment
EXTENDABLE = (STATUS_OK, "invalid")  # runs more blocks can help; a failure would repeat
# A noise record stops the loop only from this many degrees of freedom on: a variance from one or two is too often
# far too small (one cold block a side was taken on such a cell record, and two invocations' cold compile intervals
# of one cell missed each other); below it, the metric's record over every cell of the machine, else the cell's own.
MIN_RECORD_DOF = 4


@dataclass(frozen=True)
class Width:
    """One interval of a run against its target: half-widths on the log scale (0.049 = +-5%)."""

    slot: Slot
    metric: str  # a compare.METRICS name
    halfwidth: float  # infinite without an interval
    target: float
    blocks: int
    dof: float  # of the interval (the cell's noise record pooled in, where it has one)

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


def _targets(bench: Any) -> dict[str, float]:
    """benchmark.target as the half-widths per kind of metric that compare.Metric.target names."""
    return {"speedup": bench.target.speedup, "compile": bench.target.compile, "latency": bench.target.latency}


def slot_of(spec: TrialSpec) -> Slot:
    return spec.model.model_id, spec.batch_size, spec.variant.name


def _log_halfwidth(estimate: stats.Estimate) -> float:
    if not estimate.has_interval or estimate.low <= 0:
        return math.inf
    return (math.log(estimate.high) - math.log(estimate.low)) / 2


def _own_intervals(row: dict[str, Any]) -> dict[str, stats.Estimate]:
    """A run's own intervals (one environment): between-process t on its per-process values."""
    names = ("speedup", "compiled_latency", "compile_cold", "compile_warm") if row["compile"] else ("eager_latency",)
    return {name: stats.geometric_interval(list(compare.process_values(row, name).values())) for name in names}


def _stopping_width(
    row: dict[str, Any], metric: str, noise: compare.CellNoise | None, pooled: dict[str, stats.Noise]
) -> tuple[float, float]:
    """What a compared cell's width is judged by, (half-width, degrees of freedom). Where the machine has a record
    the loop knows (at least MIN_RECORD_DOF degrees of freedom: the cell's own, else the metric's over every cell),
    the half-width that noise gives the cell's blocks (stats.expected_halfwidth): it does not look at this
    invocation's differences, so neither stopping nor the widest-first order can favour cells whose blocks happened
    to agree. Otherwise (no record yet, or a cell noisier than its record), the cell's own interval."""
    cell = (noise or {}).get(compare.cell_key(row), {}).get(metric)
    machine = cell if cell is not None and cell.dof >= MIN_RECORD_DOF else pooled.get(metric)
    blocks = int(row[f"{metric}_blocks"])
    trusted = machine is not None and machine.dof >= MIN_RECORD_DOF
    if not trusted or row[f"{metric}_noisy"] or row[f"{metric}_method"] != stats.PAIRED:
        return row[f"{metric}_halfwidth"], float(row[f"{metric}_dof"] or 0)
    return stats.expected_halfwidth(machine, blocks), float(machine.dof + blocks - 1)


def widths(
    records: list[dict[str, Any]],
    labels: list[str],
    targets: dict[str, float],
    noise: compare.CellNoise | None,
    margin: float,
) -> list[Width]:
    """Every targeted interval of every run: B/A against the baseline when stacks are compared, else the run's own.
    An eager row's widths count for every compiled run of its model (their processes time eager too)."""
    found: list[tuple[tuple, str, float, int, float]] = []  # (model, batch, variant), metric, half-width, blocks, dof
    if len(labels) >= 2:
        pooled = compare.pooled_by_metric(noise or {})
        for row in compare.comparison_rows(records, noise, labels, margin):
            if row["reference"] != compare.FIRST:
                continue
            for metric in compare.METRICS:
                if f"{metric.name}_ratio" in row:
                    halfwidth, dof = _stopping_width(row, metric.name, noise, pooled)
                    slot = (row["model_id"], row["batch_size"], row["variant"])
                    found.append((slot, metric.name, halfwidth, row[f"{metric.name}_blocks"], dof))
    else:
        for row in records:
            for name, estimate in _own_intervals(row).items():
                slot = (row["model_id"], row["batch_size"], row["variant"])
                found.append((slot, name, _log_halfwidth(estimate), estimate.processes, estimate.processes - 1))
    variants = {}
    for row in records:
        variants.setdefault((row["model_id"], row["batch_size"]), set()).add(row["variant"])
    result = []
    for (model_id, batch, variant), name, halfwidth, blocks, dof in found:
        target = targets.get(compare.METRIC_BY_NAME[name].target or "", 0.0)
        if target <= 0:
            continue
        slots = [variant]
        if variant == "eager" and len(variants.get((model_id, batch), ())) > 1:
            slots = sorted(variants[(model_id, batch)] - {"eager"})
        halfwidth = halfwidth if math.isfinite(halfwidth) else math.inf
        result += [Width((model_id, batch, v), name, halfwidth, math.log1p(target), int(blocks), dof) for v in slots]
    return result


def widest(found: list[Width]) -> dict[Slot, Width]:
    """Per run, the interval furthest from its target (met ones included, so a run's state can be reported)."""
    worst: dict[Slot, Width] = {}
    for width in found:
        if width.slot not in worst or width.distance > worst[width.slot].distance:
            worst[width.slot] = width
    return worst


def clean_blocks(trials: list[TrialSpec], results: dict[str, TrialResult], limit_cores: float) -> dict[Slot, int]:
    """Per run, the blocks none of whose processes was disturbed."""
    blocks: dict[Slot, dict[int, bool]] = {}
    for spec in trials:
        result = results.get(spec.trial_id)
        clean = result is not None and not is_disturbed(result, limit_cores)
        per_slot = blocks.setdefault(slot_of(spec), {})
        per_slot[spec.replicate] = per_slot.get(spec.replicate, True) and clean
    return {slot: sum(per_slot.values()) for slot, per_slot in blocks.items()}


def _block_cost_s(trials: list[TrialSpec], results: dict[str, TrialResult], slot: Slot, cold: bool) -> float:
    """What a new block of `slot` will cost, in seconds of trial processes: its trials' median wall time (of the same
    kind, cold or warm, where there is one) times the environments."""
    mine = [(s, results[s.trial_id]) for s in trials if slot_of(s) == slot and s.trial_id in results]
    kind = [r.wall_s for s, r in mine if (s.cache == CACHE_COLD) == cold and r.wall_s] or [r.wall_s for _, r in mine]
    return statistics.median(kind) if kind else 0.0


def extend(
    trials: list[TrialSpec],
    results: dict[str, TrialResult],
    records: list[dict[str, Any]],
    labels: list[str],
    bench: Any,
    noise: compare.CellNoise | None,
    margin: float,
) -> list[TrialSpec]:
    """The next blocks: for each run short of `replicates` clean blocks or of its target, furthest first, one more
    block (a trial per environment, in balanced order) while it fits the budget and the cap. Empty when done."""
    targets = _targets(bench)
    worst = {slot: width for slot, width in widest(widths(records, labels, targets, noise, margin)).items()
             if not width.met}  # fmt: skip
    clean = clean_blocks(trials, results, bench.disturbed_cores)
    status = {}
    for row in records:
        status.setdefault((row["model_id"], row["batch_size"], row["variant"]), set()).add(row["status"])
    by_slot: dict[Slot, list[TrialSpec]] = {}
    for spec in trials:
        by_slot.setdefault(slot_of(spec), []).append(spec)
    short = [slot for slot in by_slot if clean.get(slot, 0) < bench.replicates]
    ranked = short + sorted((s for s in worst if s not in short), key=lambda s: -worst[s].distance)
    budget_s, spent_s = bench.budget_min * 60 * len(labels), sum(result.wall_s for result in results.values())
    added: list[TrialSpec] = []
    for slot in ranked:
        specs = by_slot[slot]
        blocks = max(spec.replicate for spec in specs) + 1
        if blocks >= bench.max_replicates or not status.get(slot, set()) <= set(EXTENDABLE):
            continue
        shared = specs[0].cache == CACHE_SHARED
        cold = not shared and slot in worst and worst[slot].metric == "compile_cold"
        cost = _block_cost_s(trials, results, slot, cold) * len(labels)
        if spent_s + cost > budget_s:
            continue
        spent_s += cost
        cache = CACHE_SHARED if shared else (CACHE_COLD if cold else CACHE_WARM)
        first = {spec.environment: spec for spec in specs if spec.replicate == 0}
        for label in plan.balanced_order(labels, blocks):
            base = first[label]
            trial_id = f"{base.trial_id.rsplit('/', 1)[0]}/r{blocks}"
            added.append(replace(base, trial_id=trial_id, replicate=blocks, cache=cache))
    return added


def shortfalls(
    records: list[dict[str, Any]], labels: list[str], bench: Any, noise: compare.CellNoise | None, margin: float
) -> list[dict[str, Any]]:
    """Per run, its widest interval against its target: reached or not, and about how many more blocks it needs."""
    targets = _targets(bench)
    rows = []
    for (model_id, batch, variant), width in sorted(widest(widths(records, labels, targets, noise, margin)).items()):
        rows.append({"model_id": model_id, "batch_size": batch, "variant": variant, "metric": width.metric,
                     "halfwidth_pct": 100 * math.expm1(width.halfwidth) if math.isfinite(width.halfwidth) else None,
                     "target_pct": 100 * math.expm1(width.target), "blocks": width.blocks, "met": width.met,
                     "more_blocks": width.more})  # fmt: skip
    return rows
