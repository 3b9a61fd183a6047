"""Before spending: what an invocation would run on this machine, what it costs, and what it can resolve.

    python -m compilebench.benchmark.forecast                                        # params.yaml as it is
    python -m compilebench.benchmark.forecast --set 'compare=[current,torch-2.14.1]' [--set budget_min=20 ...]
    make forecast B=torch-2.14.1 [A=current]                               # the same, as `make compare` would run it

Builds nothing and measures nothing. It plans the invocation's trials as the benchmark stage would (the selected
suite, `compare`, `benchmark.replicates` and `cold_replicates`) and says:
- which compared environments are built already, and which the benchmark would build first;
- the planned processes by kind, and what they cost here: each unit's processes priced at the median own time of
  this machine's processes of that unit in the last results (paths.results: `make run` leaves the default suite's),
  and the blocks' wall time at each process's share of its block's (what the budget counts), against `budget_min`,
  and how many more blocks of every unit the budget leaves room for (the adaptive loop gives them to the widest
  intervals first);
- per targeted metric, the smallest change a comparison finds with 80% power after the planned blocks, after those
  the budget leaves room for and at `max_replicates`, from this machine's noise record (paths.calibration); or that
  the machine has none yet (an A/A, `make compare B=current`, starts it).
Times of another machine or device are never used: machines of one kind differ threefold.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from compilebench import reference
from compilebench.analysis import adaptive, noise_record, pricing, run_record
from compilebench.benchmark import recording
from compilebench.config import Config, ConfigError, stage_config
from compilebench.environments import package_index, venvs
from compilebench.environments.pins import resolved_pins
from compilebench.harness import fingerprint, models
from compilebench.records.formats import KIND_COLD, ModelSpec, RecordError, TrialSpec
from compilebench.records.invocation import LoopSettings
from compilebench.records.reading import read_selection

LOGGER = logging.getLogger(__name__)
UNITS_SHOWN = 4  # unpriced units named in the log line; the rest counted


def _percents(pair: tuple[float, float]) -> str:
    """(least, most) fractions as percents: `8%` when they round alike, else `8-12%`."""
    low, high = (f"{100 * value:.0f}" for value in pair)
    return f"{low}%" if low == high else f"{low}-{high}%"


def say_forecast(
    trials: list[TrialSpec], settings: LoopSettings, record: dict[str, Any] | None, added: dict[str, int] | None = None
) -> bool:
    """Log, before the first block, the smallest change each targeted metric will find (80% power) and how many of its
    cells would say `equivalent` were nothing to change, after the planned blocks and at the cap (and with `added`,
    after the blocks the budget leaves room for: forecast.py), from this machine's noise record; or that the machine
    has none yet, or none for a metric. Returns whether the record holds any of the trials' cells."""
    cells = sorted({noise_record.cell_key(s.model.model_id, s.batch_size, s.variant.name) for s in trials})
    by_turn = any(spec.timing.together for spec in trials)  # its timing blocks' rounds are paired by turn
    cold_timed = any(spec.kind == KIND_COLD and spec.timed for spec in trials)  # cold blocks of latency and speedup
    noise = noise_record.machine_noise(record)
    found = adaptive.forecast(noise, cells, settings, by_turn, added, cold_timed)
    if not found and any(cell in noise for cell in cells):
        LOGGER.info(
            "this machine's noise record has these cells with fewer than %d degrees of freedom a metric: too "
            "few to forecast from; this comparison's blocks add to it",
            adaptive.FORECAST_MIN_DOF,
        )
        return True
    if not found:
        LOGGER.info(
            "no noise record of this machine for these cells yet: how small a change this comparison can "
            "find is known once it has run (its blocks start the record)"
        )
        return False
    for entry in found:
        planned, most = entry["planned"], entry["most"]
        steps = [(planned, "")]
        if "budget" in entry and entry["budget"].blocks < most.blocks:
            steps.append((entry["budget"], " (what the budget leaves room for)"))
        if most.blocks > planned.blocks:
            capped = "budget" in entry and entry["budget"].blocks == most.blocks
            steps.append((most, " (the cap, which the budget leaves room for)" if capped else " (the cap)"))
        changes = ", ".join(
            f"{_percents(r.change)} after {r.blocks}{' blocks' if i == 0 else ''}{note}"
            for i, (r, note) in enumerate(steps)
        )
        of_the = f" of the {entry['cells']}"
        equivalent = ", ".join(
            f"{r.equivalent:.1f}{of_the if i == 0 else ''} after {r.blocks}" for i, (r, _) in enumerate(steps)
        )
        LOGGER.info(
            "this machine's noise record (%d cells): %s finds a change of %s, with 80%% power; were nothing "
            "to change, `equivalent` (within +-%.0f%%) in about %s",
            entry["cells"],
            entry["metric"].replace("_", " "),
            changes,
            100 * settings.margin,
            equivalent,
        )
    unknown = [
        name.replace("_", " ")
        for name in adaptive.targeted(settings)
        if name not in {entry["metric"] for entry in found}
    ]
    if unknown:
        LOGGER.info(
            "no forecast for %s: no cell of this machine's noise record has %d degrees of freedom of it (one "
            "block a side gives none)",
            ", ".join(unknown),
            adaptive.FORECAST_MIN_DOF,
        )
    return True


def model_specs(config: Config) -> list[ModelSpec]:
    """The selected suite's models as the benchmark would get them: from load_models' selection where it lists them,
    else from their cards (registered checkpoints need nothing read to be planned). A model neither has (a folder or
    Hub id load_models has not read yet) raises ConfigError naming the command that reads it."""
    listed = {}
    if Path(config.paths.selection).exists():
        listed = {spec.model_id: spec for spec in read_selection(config.paths.selection).models}
    cards = models.registry()
    specs = []
    for model_id in config.selected.models:
        if model_id in listed:
            specs.append(listed[model_id])
        elif model_id in cards:
            folder = Path(config.paths.checkpoints) / cards[model_id].slug(config.selected.scale)
            specs.append(models.model_spec(cards[model_id], str(folder)))
        else:
            raise ConfigError(
                f"{model_id}: not a registered checkpoint, and load_models has not read it yet: "
                "run `dvc repro load_models` (it checks the folder or Hub id) first"
            )
    return specs


def earlier_runs(path: str | Path) -> list[run_record.RunRecord]:
    """The runs of the last results (paths.results), to price processes with; none before the first."""
    path = Path(path)
    if not path.exists():
        return []
    return [run_record.RunRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def minutes(seconds: float) -> str:
    """A duration as the log lines give it: whole minutes from a minute on, else seconds."""
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def unit_text(unit: adaptive.Unit) -> str:
    """A unit as a log line names it: `microsoft/resnet-50 bs1 freezing (cold)`."""
    kind, model_id, batch_size, variant = unit
    return f"{model_id} bs{batch_size}{' ' + variant if variant else ''} ({kind})"


def say_spend(
    spent: pricing.Spend, prices: pricing.Prices, labels: list[str], budget_min: float, results: str, together: bool
) -> None:
    """Log what the planned blocks cost here and what the budget leaves (or that nothing prices them yet); where the
    plan's blocks run together and processes that ran alone price them, that a block together costs more."""
    kinds = ", ".join(f"{count} {kind}" for kind, count in spent.by_kind.items())
    planned = sum(spent.by_kind.values())
    LOGGER.info("planned: %d processes (%s) for %d environment(s)", planned, kinds, len(labels))
    priced_by = prices.processes
    if not priced_by:
        LOGGER.info(
            "no earlier process of this machine in %s to price them: a run of the same suite here (`make "
            "run` for the default one) tells what a process costs",
            results,
        )
        return
    budget = f"budget_min {budget_min:g} min an environment, {minutes(spent.budget_s)} in all"
    if spent.unpriced:
        shown = ", ".join(unit_text(unit) for unit in spent.unpriced[:UNITS_SHOWN])
        more = f" and {len(spent.unpriced) - UNITS_SHOWN} more" if len(spent.unpriced) > UNITS_SHOWN else ""
        LOGGER.info(
            "priced at this machine's %d earlier processes (%s): %d of the %d planned take about %s; %d "
            "unit(s) have no earlier process here (%s%s), so how the plan stands against the budget (%s) is "
            "not known",
            priced_by,
            results,
            spent.priced,
            planned,
            minutes(spent.planned_s),
            len(spent.unpriced),
            shown,
            more,
            budget,
        )
        return
    LOGGER.info(
        "priced at this machine's %d earlier processes (%s): the planned blocks take about %s of wall time, "
        "which the budget counts (a block run together lasts about as long as its longest process: their "
        "set-up and compiles overlap; %s of the processes' own time)",
        priced_by,
        results,
        minutes(spent.wall_s),
        minutes(spent.planned_s),
    )
    if together and prices.alone:
        LOGGER.info(
            "%d of those processes ran alone, and this plan's blocks run together: on our records such "
            "blocks took from 8%% less to 20%% more than processes alone priced them at, as the machine's "
            "hour went (docs/comparing.md)",
            prices.alone,
        )
    room = {kind: spent.rounds(kind) for kind in spent.round_s}
    rounds = "; ".join(
        f"{kind} blocks: {minutes(seconds)} a round, room for {room[kind]}" for kind, seconds in spent.round_s.items()
    )
    if any(room.values()):
        LOGGER.info(
            "the budget (%s) leaves room for more blocks of every unit of a kind, were it spent on that kind "
            "alone (the loop gives them to the widest intervals first): %s",
            budget,
            rounds,
        )
    else:
        LOGGER.info(
            "the planned blocks alone use the budget (%s): the loop adds no block but to re-run a disturbed "
            "process. One more block of every unit: %s (`--set budget_min=...`)",
            budget,
            rounds,
        )


def forecast(config: Config) -> None:
    """Plan the invocation of `config`, then log its environments, its cost here and what it can resolve."""
    specs = model_specs(config)
    root, cache_root = Path.cwd(), Path(config.paths.environments)
    pins = resolved_pins(config.compared_pins(), root)
    selection = config.selection(specs, pins, reference.selected_cells(config))
    trials = recording.plan_trials(config.benchmark, config.timing(), selection, config.paths.image)
    labels = list(selection.labels)
    machine, device = fingerprint.host()["machine_fingerprint"], config.device
    LOGGER.info(
        "forecast of suite %s, %s, on machine %s (%s): nothing is built or measured",
        config.suite,
        " against ".join(labels),
        machine,
        device,
    )
    if len(labels) > 1:  # alone, `current` is the project's own interpreter
        for entry in selection.environments:
            name, stack, settings = entry.name, entry.interpreter, entry.settings
            if entry.label != name:
                continue  # an A/A's second label: the same environment
            built = venvs.is_built(stack, pins[name], cache_root, entry.python)
            shared = f"`{stack}`'s interpreter run with settings {settings}; " if stack != name else ""
            venv = f"`{stack}`'s venv first, under" if shared else "it first, into its own venv under"
            LOGGER.info(
                "environment %s: %s%s",
                name,
                shared,
                "built" if built else f"not built yet: the benchmark builds {venv} {config.paths.environments}",
            )
    settings = config.loop()
    prices = pricing.process_prices(earlier_runs(config.paths.results), machine, device)
    spent = pricing.spend(trials, labels, settings, prices)
    together = any(spec.timing.together for spec in trials)  # benchmark.together, as the plan's specs carry it
    say_spend(spent, prices, labels, settings.budget_min, config.paths.results, together and len(labels) > 1)
    if len(labels) < 2:
        LOGGER.info("one environment: its own intervals, no comparison to forecast (`--set 'compare=[A,B]'`)")
        return
    calibrations = noise_record.load_calibrations(config.paths.calibration)
    record = calibrations.get(noise_record.calibration_key(machine, device))
    timing = "timing" if "timing" in spent.round_s else "paired"  # variants measured alone: their blocks time them
    recorded = say_forecast(trials, settings, record, {"timing": spent.rounds(timing), "cold": spent.rounds("cold")})
    baseline = config.compare[0]
    if not recorded and baseline != config.compare[-1]:
        aa = f"make compare B={baseline}" if baseline == venvs.CURRENT else f"make compare A={baseline} B={baseline}"
        LOGGER.info(
            "an A/A first (`%s`: the same processes, so about the same time) starts this machine's noise "
            "record; forecast again after it",
            aa,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a params value, as `dvc exp run -S` sets it: 'compare=[A,B]'",
    )
    args = parser.parse_args()
    config = stage_config(overrides=args.set)
    pins = resolved_pins(config.compared_pins(), Path.cwd())
    wanted = [(name, pins[name], config.environments[name].python) for name in pins if config.environments[name].pins]
    problems = package_index.unreleased(wanted, Path.cwd(), Path(config.paths.environments))
    if problems:
        LOGGER.error("%s", "; ".join(problems))
        sys.exit(2)
    try:
        forecast(config)
    except (ConfigError, RecordError, OSError, json.JSONDecodeError) as error:
        LOGGER.error("%s", error)
        sys.exit(2)


if __name__ == "__main__":
    main()
