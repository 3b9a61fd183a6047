"""What one invocation measures, and in which order: trials from the selection, interleaved across environments.

A run is (environment, model, batch size, variant); it is measured by `replicates` trials, each a fresh process.
Trials go in rounds: round 0 compiles on an empty inductor cache (cold), later rounds on the cache the cold trial
left (warm), so a run's warm compile times and its replicated latencies come from the same processes. Within a
round the runs are shuffled (seeded), and the environments of each run follow one another in a balanced order:
with two environments, A B then B A then A B ..., so slow drift of the machine falls on both sides alike.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from compilebench import checkpoints
from compilebench.records import (
    CACHE_COLD,
    CACHE_SHARED,
    CACHE_WARM,
    EAGER,
    ModelSpec,
    TimingSpec,
    TrialSpec,
    VariantSpec,
)


@dataclass(frozen=True)
class Slot:
    """A run without its environment: one model at one batch size under one variant."""

    model: ModelSpec
    batch_size: int
    variant: VariantSpec


def environment_labels(names: list[str]) -> list[str]:
    """Labels of the compared environments, in order; a name given again (an A/A calibration) gets `#2`, `#3`."""
    labels, seen = [], {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        labels.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return labels


def slug(model_id: str) -> str:
    """A model id as one path component (a local folder's path too)."""
    return checkpoints.slug(model_id)


def slots(models: list[ModelSpec], batch_sizes: list[int], variants: list[VariantSpec]) -> list[Slot]:
    """Every run of a suite: the compiled variants (eager is timed inside each); eager alone if none is compiled."""
    compiled = [variant for variant in variants if variant.compile] or [v for v in variants if v.name == EAGER]
    return [Slot(model, batch, variant) for model in models for batch in batch_sizes for variant in compiled]


def balanced_order(labels: list[str], block: int) -> list[str]:
    """The environments' order in the `block`-th block: a rotation, so each holds each position equally often."""
    shift = block % len(labels)
    return labels[shift:] + labels[:shift]


def trials(
    slots_: list[Slot],
    labels: list[str],
    replicates: int,
    cold_replicates: int,
    shared_cache: bool,
    image: str,
    timing: TimingSpec,
    seed: int,
) -> list[TrialSpec]:
    """All trials of an invocation in run order: rounds of replicates, runs shuffled, environments interleaved."""
    rng = random.Random(seed)
    ordered, block = [], rng.randrange(len(labels))
    sizes = tuple(sorted({slot.batch_size for slot in slots_}))  # what a `serve` variant's model meets, in order
    for replicate in range(replicates):
        cache = CACHE_SHARED if shared_cache else (CACHE_COLD if replicate < cold_replicates else CACHE_WARM)
        round_slots = list(slots_)
        rng.shuffle(round_slots)
        for slot in round_slots:
            for label in balanced_order(labels, block):
                trial_id = f"{label}/{slug(slot.model.model_id)}/bs{slot.batch_size}/{slot.variant.name}/r{replicate}"
                ordered.append(
                    TrialSpec(
                        trial_id=trial_id,
                        environment=label,
                        model=slot.model,
                        batch_size=slot.batch_size,
                        variant=slot.variant,
                        replicate=replicate,
                        cache=cache,
                        image=image,
                        timing=timing,
                        serve_batch_sizes=sizes if slot.variant.serve else (),
                    )
                )
            block += 1
    return ordered


def selection(config: Any, specs: list[ModelSpec], project_pins: dict[str, str]) -> dict[str, Any]:
    """What the benchmark measures: models and their checkpoint folders, batch sizes, variants, environments.

    `config` is the params (config.Config), `specs` each selected model with its checkpoint folder, `project_pins`
    the project's own pins that each environment's pins go over.
    """
    from compilebench import environments

    suite = config.selected
    return {
        "suite": config.suite,
        "scale": suite.scale,
        "batch_sizes": list(suite.batch_sizes),
        "models": [asdict(spec) for spec in specs],
        "variants": [asdict(VariantSpec(name=name, **asdict(config.variants[name]))) for name in suite.variants],
        "environments": [
            {"label": label, "name": name, "pins": environments.resolve(project_pins, config.environments[name].pins)}
            for label, name in zip(environment_labels(config.compare), config.compare, strict=True)
        ],
    }
