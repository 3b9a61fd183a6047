"""What one invocation measures, and in which order: trials from the selection, interleaved across environments.

A run is (environment, model, batch size, variant). Per (environment, model, batch size) a timing process times eager
and every compiled variant the process can hold as its arms (`arms_and_singles`), each compiled on its own copy of the
model from the warm inductor cache; `replicates` such processes per environment, one per block. Cold compile time comes
from cold processes on an empty cache, `cold_replicates` per variant and environment, which run first (the cold rounds)
and whose caches become the warm cache of the timing processes; after compiling, each times eager and its variant: a
cold block (harness/trial.py run_cold). A variant a timing process cannot hold (a deploy way or served sizes, which
change what a fresh process is; a second variant whose compile would reuse another's graph) is measured in paired trials
of its own, as eager against it: `replicates` of them, the first `cold_replicates` on an empty cache. Within a round the
units are shuffled (seeded), and the environments of each follow one another in a balanced order (A B, then B A, ...; a
block's processes run together, taking turns, where `benchmark.together` says so: harness/turns.py), so slow drift of
the machine falls on both sides alike; the arms' compile order rotates from block to block (a Williams design), the same
for every environment of a block.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any

from compilebench.harness.names import slug
from compilebench.harness.records import (
    CACHE_COLD,
    CACHE_SHARED,
    CACHE_WARM,
    CURRENT,
    DEPLOY_JIT,
    KIND_ARM,
    KIND_COLD,
    KIND_PAIRED,
    ModelSpec,
    TimingSpec,
    TrialSpec,
    VariantSpec,
    environment_labels,
    processes,
    units,
    williams_orders,
)


def backend_key(variant: VariantSpec) -> str:
    """What dynamo tells compiled variants apart by when they share a process (mode and options, dynamic; see
    compiling.compile_kwargs), and what changes the inputs it guards on (dtype, memory format)."""
    return json.dumps(
        [variant.mode, variant.inductor, variant.dynamic, variant.dtype, variant.channels_last],
        sort_keys=True,
        default=str,
    )


def arms_and_singles(variants: list[VariantSpec]) -> tuple[list[VariantSpec], list[VariantSpec]]:
    """(the arms of a timing process: eager, then each compiled `jit` variant whose backend no earlier arm has;
    the variants measured in paired trials of their own: deploy ways, served sizes, and the variants left). No
    timing process when every compiled variant is single (each paired trial times eager itself)."""
    arms, singles, backends = [], [], set()
    for variant in variants:
        if not variant.compile:
            continue
        if variant.deploy == DEPLOY_JIT and not variant.serve and backend_key(variant) not in backends:
            backends.add(backend_key(variant))
            arms.append(variant)
        else:
            singles.append(variant)
    eager = [variant for variant in variants if not variant.compile]
    if arms or not singles:
        arms = eager + arms
    return arms, singles


def compile_order(arms: list[VariantSpec], block: int) -> list[VariantSpec]:
    """A timing process's arms in the order they compile in block `block`: eager first (it is loaded, not compiled),
    the compiled ones (by name, whatever order they come in) in the block's row of a Williams design, so each
    compiles first, second, ... equally often."""
    compiled = sorted((arm for arm in arms if arm.compile), key=lambda arm: arm.name)
    orders = williams_orders(len(compiled))
    return [arm for arm in arms if not arm.compile] + [compiled[i] for i in orders[block % len(orders)]]


def balanced_order(labels: list[str], block: int) -> list[str]:
    """The environments' order in the `block`-th block: a rotation, so each holds each position equally often."""
    shift = block % len(labels)
    return labels[shift:] + labels[:shift]


def cold_trial(
    label: str,
    model: ModelSpec,
    batch: int,
    variant: VariantSpec,
    replicate: int,
    image: str,
    timing: TimingSpec,
    timed: bool = True,
) -> TrialSpec:
    """A cold process of one variant: compiled on an empty inductor cache, then (`timed`: environments compared)
    timed against eager, a block of B/A."""
    return TrialSpec(
        f"{label}/{slug(model.model_id)}/bs{batch}/{variant.name}/c{replicate}",
        label,
        model,
        batch,
        variant,
        replicate,
        CACHE_COLD,
        image,
        timing,
        kind=KIND_COLD,
        timed=timed,
    )


def timing_process(
    label: str,
    model: ModelSpec,
    batch: int,
    arms: list[VariantSpec],
    replicate: int,
    shared: bool,
    image: str,
    timing: TimingSpec,
) -> list[TrialSpec]:
    """The arms of one timing process, in block `replicate`'s compile order, on the warm (or shared) cache."""
    process_id = f"{label}/{slug(model.model_id)}/bs{batch}/r{replicate}"
    cache = CACHE_SHARED if shared else CACHE_WARM
    return [
        TrialSpec(
            f"{label}/{slug(model.model_id)}/bs{batch}/{arm.name}/r{replicate}",
            label,
            model,
            batch,
            arm,
            replicate,
            cache,
            image,
            timing,
            kind=KIND_ARM,
            process_id=process_id,
        )
        for arm in compile_order(arms, replicate)
    ]


def paired_trial(
    label: str,
    model: ModelSpec,
    batch: int,
    variant: VariantSpec,
    replicate: int,
    cache: str,
    image: str,
    timing: TimingSpec,
    sizes: tuple[int, ...],
) -> TrialSpec:
    """Eager against one variant in a process of its own."""
    return TrialSpec(
        f"{label}/{slug(model.model_id)}/bs{batch}/{variant.name}/r{replicate}",
        label,
        model,
        batch,
        variant,
        replicate,
        cache,
        image,
        timing,
        serve_batch_sizes=sizes if variant.serve else (),
        kind=KIND_PAIRED,
    )


def trials(
    models: list[ModelSpec],
    batch_sizes: list[int],
    variants: list[VariantSpec],
    labels: list[str],
    replicates: int,
    cold_replicates: int,
    shared_cache: bool,
    image: str,
    timing: TimingSpec,
    seed: int,
    cells: frozenset[tuple[str, int, str]] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
) -> list[TrialSpec]:
    """All trials of an invocation in run order: the cold rounds (cold processes, and the singles' cold
    paired trials), then `replicates` timing rounds; units shuffled per round, environments in balanced blocks.
    `cells`, when given, are the (model id, batch size, variant) measured: a compiled variant outside them is left
    out of that model and batch size, and a (model, batch size) left without a compiled variant is not run.
    `settings`: by label, what an environment's processes set in place of `timing`'s (config.Settings.given)."""
    rng = random.Random(seed)
    timings = {label: replace(timing, **(settings or {}).get(label, {})) for label in labels}
    block = rng.randrange(len(labels))
    sizes = tuple(sorted(set(batch_sizes)))  # what a `serve` variant's model meets, in order
    arms, singles = arms_and_singles(variants)

    def kept(model: ModelSpec, batch: int, variant: VariantSpec) -> bool:
        return cells is None or not variant.compile or (model.model_id, batch, variant.name) in cells

    def cell_arms(model: ModelSpec, batch: int) -> list[VariantSpec]:
        own = [arm for arm in arms if kept(model, batch, arm)]
        return own if any(arm.compile for arm in own) or cells is None else []

    pairs = [
        (m, b)
        for m in models
        for b in batch_sizes
        if cells is None or any(v.compile and kept(m, b, v) for v in variants)
    ]
    cold_rounds = 0 if shared_cache else cold_replicates  # a shared cache is never cold
    rounds: list[list[tuple]] = []  # units of each round: (kind, model, batch size, variant, replicate)
    for replicate in range(cold_rounds):
        cold = [("cold", m, b, v, replicate) for m, b in pairs for v in cell_arms(m, b) if v.compile]
        rounds.append(cold + [("single", m, b, v, replicate) for m, b in pairs for v in singles if kept(m, b, v)])
    for replicate in range(replicates):
        units = [("timing", m, b, None, replicate) for m, b in pairs if cell_arms(m, b)]
        if replicate >= cold_rounds:  # a single's first replicates were its cold trials
            units += [("single", m, b, v, replicate) for m, b in pairs for v in singles if kept(m, b, v)]
        rounds.append(units)

    def make(label: str, kind: str, model: ModelSpec, batch: int, variant: Any, replicate: int) -> list[TrialSpec]:
        timing = timings[label]
        if kind == "cold":  # alone, its rounds would pair with nothing: one stack's intervals are its timing processes'
            return [cold_trial(label, model, batch, variant, replicate, image, timing, timed=len(labels) > 1)]
        if kind == "timing":
            return timing_process(label, model, batch, cell_arms(model, batch), replicate, shared_cache, image, timing)
        cache = CACHE_SHARED if shared_cache else (CACHE_COLD if replicate < cold_rounds else CACHE_WARM)
        return [paired_trial(label, model, batch, variant, replicate, cache, image, timing, sizes)]

    ordered: list[TrialSpec] = []
    for units in rounds:
        rng.shuffle(units)
        for unit in units:
            for label in balanced_order(labels, block):
                ordered += make(label, *unit)
            block += 1
    return ordered


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


def selection(
    config: Any, specs: list[ModelSpec], pins: dict[str, dict[str, str]], cells: list[tuple[str, int, str]] | None
) -> dict[str, Any]:
    """What the benchmark measures: models and their checkpoint folders, batch sizes, variants, environments, and
    (for a suite with `cells: published`) the (model id, batch size, variant) cells measured.

    `config` is the params (config.Config), `specs` each selected model with its checkpoint folder, `pins` each
    environment's resolved pins by name (pins.resolved_pins), `cells` reference.published_cells's or None.
    """
    suite = config.selected
    return {
        "suite": config.suite,
        "scale": suite.scale,
        "batch_sizes": list(suite.batch_sizes),
        "cells": None if cells is None else [list(cell) for cell in sorted(cells)],
        "models": [asdict(spec) for spec in specs],
        "variants": [asdict(VariantSpec(name=name, **asdict(config.variants[name]))) for name in suite.variants],
        "environments": [
            {
                "label": label,
                "name": name,
                "pins": pins[name],
                "settings": config.environments[name].settings.given(),
                "stack": name if config.environments[name].pins else CURRENT,  # whose interpreter runs it
                "python": config.environments[name].python,  # the Python it is built on ('' = the project's)
            }
            for label, name in zip(environment_labels(config.compare), config.compare, strict=True)
        ],
    }
