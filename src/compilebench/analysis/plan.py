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
import random
from dataclasses import replace
from typing import Any

from compilebench.harness.names import slug
from compilebench.records.formats import (
    CACHE_COLD,
    CACHE_SHARED,
    CACHE_WARM,
    DEPLOY_JIT,
    KIND_ARM,
    KIND_COLD,
    KIND_PAIRED,
    ModelSpec,
    TimingSpec,
    TrialSpec,
    VariantSpec,
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
