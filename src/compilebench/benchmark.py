"""Stage benchmark: every run of the selection, in every compared environment, replicated in fresh processes.

    python -m compilebench.benchmark                # reads params.yaml and paths.selection; writes results, run_info
    python -m compilebench.benchmark --fresh        # ignore an interrupted invocation's journal
    python -m compilebench.benchmark --export DIR [--set KEY=VALUE ...]   # a plan for another machine; measures nothing
    python -m compilebench.benchmark --export DIR --window-min M [--prime N] ...   # in windows DIR-w1, DIR-w2, ...
    python -m compilebench.benchmark --ingest DIR   # log and write what that machine measured (DIR/results/)

A run is (environment, model, batch size, variant). `plan` orders its trials (rounds of replicates; environments
interleaved in balanced blocks), `environments` builds or finds each environment's interpreter, `launcher` runs
every trial in a fresh process of that interpreter, `runs` pools each run's processes into one record, and
`tracking` logs each record as an MLflow run nested under one parent run of this invocation, as soon as its trials
are done. Completed trials are journaled first, so a killed benchmark resumes without measuring or logging twice.

--export and --ingest (a plan for another machine, and what it measured brought back) are exported.py's; they
record what that machine measured with this module's Recorder and finish, as a local benchmark does.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from compilebench import environments, executors, journal, tracking
from compilebench.analysis import adaptive, noise_record, plan, runs
from compilebench.config import Benchmark, Config, ConfigError, stage_config
from compilebench.harness import fingerprint, groups, results_folder, trial_process
from compilebench.harness.files import write_json, write_jsonl
from compilebench.harness.invocation import Context, LoopSettings
from compilebench.harness.records import (
    KIND_COLD,
    STATUS_OK,
    ModelSpec,
    RecordError,
    TrialResult,
    TrialSpec,
    VariantSpec,
    processes,
    read_json,
)
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)


def plan_trials(bench: Benchmark, selection: dict[str, Any], image: str) -> list[TrialSpec]:
    """Every trial of the selection, in run order."""
    return plan.trials(
        [ModelSpec.from_dict(m) for m in selection["models"]],
        selection["batch_sizes"],
        [VariantSpec.from_dict(v) for v in selection["variants"]],
        [entry["label"] for entry in selection["environments"]],
        bench.replicates,
        bench.cold_replicates,
        bench.compile_cache == "shared",
        image,
        bench.timing(),
        bench.seed,
        None if selection.get("cells") is None else frozenset(tuple(cell) for cell in selection["cells"]),
        {entry["label"]: entry.get("settings") or {} for entry in selection["environments"]},
    )


def model_infos(entries: list[dict[str, Any]]) -> dict[str, runs.ModelInfo]:
    """Where each model's checkpoint came from, by model id (load_models' manifest or a remote checkpoints.json)."""
    return {
        entry["model_id"]: runs.ModelInfo(
            weights_source=entry["weights_source"],
            config_origin=entry["config_origin"],
            param_count=entry.get("param_count"),
            resolved_revision=entry.get("resolved_revision"),
        )
        for entry in entries
    }


def context(config: Config, selection: dict[str, Any], invocation_id: str, image_meta: dict, machine: str) -> Context:
    """What every run of this invocation shares."""
    return Context(
        invocation_id=invocation_id,
        suite=selection["suite"],
        scale=selection["scale"],
        machine=machine,
        git_commit=fingerprint.git_commit(),
        image_source=image_meta["image_source"],
        image_sha256=image_meta["sha256"],
        validity=config.benchmark.validity(),
    )


def _result_line(spec: TrialSpec, result: TrialResult) -> str:
    medians = ""
    if result.eager_ms:
        medians = f"eager {sorted(result.eager_ms)[len(result.eager_ms) // 2]:.2f} ms"
    if result.compiled_ms:
        medians += f", {spec.variant.name} {sorted(result.compiled_ms)[len(result.compiled_ms) // 2]:.2f} ms"
        medians += f", first call {result.compile_s:.1f} s ({spec.cache})"
    return f"{spec.trial_id}: {result.status} {medians} [{result.wall_s:.0f} s]"


class Recorder:
    """Turns trial results into runs as they complete and logs each run once its blocks are final (the journal keeps
    the trials): a model's runs wait while the adaptive loop may still add blocks to them."""

    def __init__(self, trials, environment_info, model_info, run_context, tracker, journal_dir: Path | None):
        self.trials, self.environment_info, self.model_info = list(trials), environment_info, model_info
        self.context, self.tracker, self.journal_dir = run_context, tracker, journal_dir
        self.results: dict[str, TrialResult] = {}
        self.logged: set[str] = set()
        self.open: set[tuple[str, int]] = set()  # (model id, batch size) that may still get blocks: not logged yet

    def records(self) -> list[runs.RunRecord]:
        return runs.run_records(self.trials, self.results, self.environment_info, self.model_info, self.context)

    def __call__(self, specs: list[TrialSpec], ended: list[TrialResult], resumed: bool = False) -> None:
        if not resumed and self.journal_dir is not None:  # on disk before anything is logged
            journal.save_process(self.journal_dir, specs[0].process, ended)
        for spec, result in zip(specs, ended, strict=True):
            self.results[spec.trial_id] = result
            LOGGER.info("%s%s", _result_line(spec, result), " (from the journal)" if resumed else "")
        self.log_final()

    def log_final(self) -> None:
        """Log every complete run whose model gets no more blocks, once (by run uid); nothing without a tracker."""
        if self.tracker is None:
            return
        for record in self.records():
            if record.run_uid not in self.logged and (record.model_id, record.batch_size) not in self.open:
                self.tracker.log_run(**tracking.run_payload(record))
                self.logged.add(record.run_uid)


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
        LOGGER.info("this machine's noise record has these cells with fewer than %d degrees of freedom a metric: too "
                    "few to forecast from; this comparison's blocks add to it", adaptive.FORECAST_MIN_DOF)  # fmt: skip
        return True
    if not found:
        LOGGER.info("no noise record of this machine for these cells yet: how small a change this comparison can "
                    "find is known once it has run (its blocks start the record)")  # fmt: skip
        return False
    for entry in found:
        planned, most = entry["planned"], entry["most"]
        steps = [(planned, "")]
        if "budget" in entry and entry["budget"].blocks < most.blocks:
            steps.append((entry["budget"], " (what the budget leaves room for)"))
        if most.blocks > planned.blocks:
            capped = "budget" in entry and entry["budget"].blocks == most.blocks
            steps.append((most, " (the cap, which the budget leaves room for)" if capped else " (the cap)"))
        changes = ", ".join(f"{_percents(r.change)} after {r.blocks}{' blocks' if i == 0 else ''}{note}"
                            for i, (r, note) in enumerate(steps))  # fmt: skip
        of_the = f" of the {entry['cells']}"
        equivalent = ", ".join(f"{r.equivalent:.1f}{of_the if i == 0 else ''} after {r.blocks}"
                               for i, (r, _) in enumerate(steps))  # fmt: skip
        LOGGER.info("this machine's noise record (%d cells): %s finds a change of %s, with 80%% power; were nothing "
                    "to change, `equivalent` (within +-%.0f%%) in about %s", entry["cells"],
                    entry["metric"].replace("_", " "), changes, 100 * settings.margin, equivalent)  # fmt: skip
    unknown = [name.replace("_", " ") for name in adaptive.targeted(settings)
               if name not in {entry["metric"] for entry in found}]  # fmt: skip
    if unknown:
        LOGGER.info("no forecast for %s: no cell of this machine's noise record has %d degrees of freedom of it (one "
                    "block a side gives none)", ", ".join(unknown), adaptive.FORECAST_MIN_DOF)  # fmt: skip
    return True


def measure_adaptively(
    config: Config, recorder: Recorder, labels: list[str], run: Any, calibrations: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run the planned trials, then more blocks where the intervals are widest (`adaptive.measure`) until every run
    meets its target or the budget or the cap runs out; log each model's runs once they are final. Returns, per
    run and targeted interval, what it reached (for the report)."""
    settings = config.benchmark.loop(config.margin)
    recorder.open = {(spec.model.model_id, spec.batch_size) for spec in recorder.trials}
    if len(labels) > 1:
        machine = fingerprint.host()["machine_fingerprint"]  # what the trials will record
        say_forecast(
            recorder.trials, settings, calibrations.get(noise_record.calibration_key(machine, config.benchmark.device))
        )

    def run_pending(pending: list[TrialSpec]) -> dict[str, TrialResult]:
        run(pending)
        return recorder.results

    def noise_of(records: list[runs.RunRecord]) -> noise_record.CellNoise:
        if not records:
            return {}
        found = records[0].environment_fields  # the machine and device its trials recorded
        key = noise_record.calibration_key(found.get("machine_fingerprint"), found.get("device"))
        return noise_record.machine_noise(calibrations.get(key), leave_out=recorder.context.invocation_id)

    def added(pending: list[TrialSpec]) -> None:  # the other models' runs are final: logged now
        recorder.trials += pending
        recorder.open = {(spec.model.model_id, spec.batch_size) for spec in pending}
        recorder.log_final()

    def records_of(trials: list[TrialSpec], results: dict[str, TrialResult]) -> list[runs.RunRecord]:
        return recorder.records()

    _, records, noise = adaptive.measure(list(recorder.trials), labels, settings, run_pending, records_of, noise_of,
                                         added)  # fmt: skip
    recorder.open = set()  # no more blocks: every run is final
    recorder.log_final()
    return adaptive.shortfalls(records, labels, settings, noise)


def finish(config: Config, records: list[runs.RunRecord], invocation_id: str, tracker, extra: dict) -> None:
    """Write the results and run info, close the parent run, say what failed and what was not logged. Without a
    tracker (an ingest of a plan not finished: extra says why, as `not_logged`) nothing is logged."""
    write_jsonl(config.paths.results, [record.to_dict() for record in records])
    failed = [f"{r.model_id} bs{r.batch_size} {r.variant} [{r.environment}]: {r.status}" for r in records
              if r.status != STATUS_OK]  # fmt: skip
    parent = {"name": tracker.parent_name, "params": tracker.parent_params, "tags": tracker.parent_tags} if (
        tracker) else {}  # fmt: skip  # for sync
    crashed = any(record.status in tracking.CRASHED for record in records)  # measured nothing: the parent FAILED
    run_info = RunInfo(invocation_id, tracking.EXPERIMENT, failed_runs=tuple(failed), crashed=crashed, parent=parent,
                       **extra)  # fmt: skip
    write_json(config.paths.run_info, run_info.to_dict())
    if tracker is None:
        return
    tracker.log_parent(finish_failed=crashed)
    if failed:
        LOGGER.warning("%d of %d runs did not end ok (recorded in the tables and MLflow): %s", len(failed),
                       len(records), failed)  # fmt: skip
    if tracker.failures:
        LOGGER.warning(
            "%d item(s) not logged to MLflow; results are in %s. `python -m compilebench.sync` logs them later.",
            len(tracker.failures),
            config.paths.results,
        )


def parent_name(selection: dict[str, Any], machine: str) -> str:
    """What an invocation's parent run is called: its suite, the environments it compared, the machine."""
    labels = [entry["label"] for entry in selection["environments"]]
    compared = " vs ".join(labels) if len(labels) > 1 else labels[0]
    return f"{selection['suite']}: {compared} on {machine}"


def parent_params(selection: dict[str, Any], bench: Benchmark, run_context: Context, where: dict) -> dict:
    """The parent run's params: what this invocation ran, where."""
    return {
        "suite": selection["suite"],
        "scale": selection["scale"],
        "models": ",".join(m["model_id"] for m in selection["models"]),
        "batch_sizes": ",".join(map(str, selection["batch_sizes"])),
        "variants": ",".join(v["name"] for v in selection["variants"]),
        "environments": ",".join(e["label"] for e in selection["environments"]),
        "replicates": bench.replicates,
        "cold_replicates": bench.cold_replicates,
        "together": bench.together,  # how a timing block ran: its processes alive together, taking turns
        "huge_pages": bench.huge_pages,
        "malloc": bench.malloc,
        "machine": run_context.machine,
        "git_commit": run_context.git_commit,
        "image_source": run_context.image_source,
        **{key: where.get(key) for key in ("device", "device_name", "machine_fingerprint", "cpu_model")},
    }


def environment_infos(selection: dict, stacks: dict[str, environments.Stack]) -> dict[str, runs.EnvironmentInfo]:
    """Each compared environment by label: its stack (interpreter, pins, package list) and its settings; the settings
    are part of its key, so one stack run two ways is two environments, never an A/A."""
    info = {}
    for entry in selection["environments"]:
        label, stack, settings = entry["label"], stacks[entry["label"]], entry.get("settings") or {}
        info[label] = runs.EnvironmentInfo(label, entry["name"], runs.settings_key(stack.key, settings), stack.pins,
                                           stack.freeze, settings)  # fmt: skip
    return info


def measure(config: Config, selection: dict, manifest: list[dict], image_meta: dict, fresh: bool) -> None:
    """Build or find the environments, run every trial (resuming a journal), log runs, write results."""
    trials = plan_trials(config.benchmark, selection, config.paths.image)
    stacks = environments.stacks(selection["environments"], Path.cwd(), Path(config.paths.environments))
    for label, stack in stacks.items():
        environments.check_device(stack, label, config.benchmark.device)
    key = journal.stable_hash(
        {"trials": [t.to_dict() for t in trials], "stacks": {k: s.key for k, s in stacks.items()}}
    )
    journal_dir = Path(config.paths.journal)
    invocation_id, done, resumed = journal.open_journal(journal_dir, key, fresh=fresh)
    pythons = {label: stack.python for label, stack in stacks.items()}
    if resumed:
        # A copied project, a shared disk: refused, the journal kept, nothing logged or written. Not on Ray, whose
        # cells run on whichever node takes them (a run that spans two is `invalid` at analysis).
        problem = None if config.runner.executor == "ray" else results_folder.measured_elsewhere(
            trials, done, pythons, config.benchmark.device)  # fmt: skip
        if problem:
            raise RecordError(f"{journal_dir} (the journal of interrupted invocation {invocation_id}) holds {problem}. "
                              "Resume it on that machine, or delete that folder to measure afresh here")  # fmt: skip
        LOGGER.info("resuming interrupted invocation %s: %d of %d trials already done", invocation_id, len(done),
                    len(trials))  # fmt: skip
    info = environment_infos(selection, stacks)
    machine = config.runner.machine or socket.gethostname()
    run_context = context(config, selection, invocation_id, image_meta, machine)
    where = fingerprint.host()  # the orchestrating machine (no torch import); each trial records where it ran
    tracker = tracking.Tracker(
        config.paths.tracking_uri, invocation_id, parent_name(selection, machine),
        parent_params(selection, config.benchmark, run_context, where),
        {"suite": selection["suite"], "machine": machine, "machine_fingerprint": where["machine_fingerprint"],
         "environments": ",".join(info)},
    )  # fmt: skip
    LOGGER.info("invocation %s: %d trials -> MLflow %s", invocation_id, len(trials), tracking.redact(tracker.uri))
    recorder = Recorder(trials, info, model_infos(manifest), run_context, tracker, journal_dir)
    progress = tqdm(total=len(trials), desc="benchmark", unit="trial")

    def on_process(specs: list[TrialSpec], ended: list[TrialResult], was_done: bool) -> None:
        recorder(specs, ended, was_done)
        progress.update(len(specs))

    runner = executors.executor(config.runner, config.benchmark.device, pythons, journal_dir)

    def run(pending: list[TrialSpec]) -> None:
        progress.total = len(recorder.trials)
        progress.refresh()
        runner.run(pending, done, on_process)

    try:
        reached = measure_adaptively(
            config, recorder, list(stacks), run, noise_record.load_calibrations(config.paths.calibration)
        )
    finally:
        runner.close()
    progress.close()
    ran = len(processes(recorder.trials))
    extra = {"labels": tuple(stacks),
             "environments": {label: {"name": e.name, "key": e.key, "pins": e.pins, "settings": e.settings}
                              for label, e in info.items()},
             "trials": len(recorder.trials), "planned_trials": len(trials), "processes": ran,
             "planned_processes": len(processes(trials)), "targets": tuple(reached)}  # fmt: skip
    finish(config, recorder.records(), invocation_id, tracker, extra)
    journal.close_journal(journal_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the benchmark stage.")
    parser.add_argument("--fresh", action="store_true", help="ignore an interrupted invocation's journal")
    parser.add_argument("--export", type=Path, metavar="DIR", help="write a plan for another machine; measure nothing")
    parser.add_argument("--ingest", type=Path, metavar="DIR", help="log and write the results of an exported plan")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a params value (with --export)")  # fmt: skip
    parser.add_argument("--window-min", type=float, metavar="M",
                        help="with --export: the plan split into windows of at most M estimated GPU minutes, each a "
                             "plan of its own in DIR-w1, DIR-w2, ...")  # fmt: skip
    parser.add_argument("--prime", type=int, default=1, metavar="N",
                        help="with --window-min: the compile-only processes the window's launcher runs at once "
                             "(its --prime N); 1 by default")  # fmt: skip
    args = parser.parse_args()
    misplaced = (args.set or args.window_min is not None) and not args.export
    if misplaced or (args.prime != 1 and args.window_min is None):
        stage_config()  # logging
        LOGGER.error("--set and --window-min only go with --export (the pipeline itself measures what params.yaml "
                     "says), --prime only with --window-min")  # fmt: skip
        sys.exit(2)
    config = stage_config(overrides=args.set, compiles=True)
    from compilebench import exported  # its module imports this one (the recorder, finish): here, not at the top

    try:
        if args.export:
            exported.export(config, args.export, args.window_min, args.prime)
            return
        tracking.check_store(config.paths.tracking_uri)
        noise_record.load_calibrations(config.paths.calibration)  # a noise record that cannot be read: before any work
        trial_process.malloc_to_preload(config.benchmark.malloc)  # a malloc this machine lacks: before any work
        if args.ingest:
            exported.ingest(config, args.ingest)
            return
        selection = read_json(config.paths.selection)
        manifest = read_json(config.paths.manifest)
        image_meta = read_json(config.paths.image_meta)
    except (tracking.StoreError, OSError, json.JSONDecodeError, RecordError, ConfigError,
            trial_process.MallocMissing) as error:  # fmt: skip
        LOGGER.error("%s", error)
        sys.exit(2)
    groups.end_trials_on_signal()  # a stopped benchmark leaves no trial or builder running behind it
    groups.stop_with(groups.stage_runner())  # nor goes on when the `dvc repro` running it was ended
    try:
        measure(config, selection, manifest, image_meta, args.fresh)
    except (environments.StackError, RecordError, executors.ExecutorError) as error:  # raised before any timing
        LOGGER.error("%s", error)
        sys.exit(2)


if __name__ == "__main__":
    main()
