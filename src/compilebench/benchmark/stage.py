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
record what that machine measured with recording.py's Recorder and finish, as a local benchmark does.
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

from compilebench import tracking
from compilebench.analysis import adaptive, noise_record, run_record
from compilebench.benchmark import executors, exported, forecast, journal, recording
from compilebench.config import Config, ConfigError, stage_config
from compilebench.environments import package_index, venvs
from compilebench.harness import fingerprint, groups, results_folder, trial_process
from compilebench.records.formats import RecordError, TrialResult, TrialSpec, processes
from compilebench.records.invocation import LoopSettings
from compilebench.records.reading import read_json, read_selection
from compilebench.records.selection import Selection

LOGGER = logging.getLogger(__name__)


def measure_adaptively(
    settings: LoopSettings,
    device: str,
    recorder: recording.Recorder,
    labels: list[str],
    run: Any,
    calibrations: dict[str, Any],
) -> list[dict[str, Any]]:
    """Run the planned trials, then more blocks where the intervals are widest (`adaptive.measure`) until every run
    meets its target or the budget or the cap runs out; log each model's runs once they are final. Returns, per
    run and targeted interval, what it reached (for the report)."""
    recorder.open = {(spec.model.model_id, spec.batch_size) for spec in recorder.trials}
    if len(labels) > 1:
        machine = fingerprint.host()["machine_fingerprint"]  # what the trials will record
        forecast.say_forecast(
            recorder.trials, settings, calibrations.get(noise_record.calibration_key(machine, device))
        )

    def run_pending(pending: list[TrialSpec]) -> dict[str, TrialResult]:
        run(pending)
        return recorder.results

    def noise_of(records: list[run_record.RunRecord]) -> noise_record.CellNoise:
        if not records:
            return {}
        found = records[0].env.environment_fields  # the machine and device its trials recorded
        key = noise_record.calibration_key(found.get("machine_fingerprint"), found.get("device"))
        return noise_record.machine_noise(calibrations.get(key), leave_out=recorder.context.invocation_id)

    def added(pending: list[TrialSpec]) -> None:  # the other models' runs are final: logged now
        recorder.trials += pending
        recorder.open = {(spec.model.model_id, spec.batch_size) for spec in pending}
        recorder.log_final()

    def records_of(trials: list[TrialSpec], results: dict[str, TrialResult]) -> list[run_record.RunRecord]:
        return recorder.records()

    _, records, noise = adaptive.measure(
        list(recorder.trials), labels, settings, run_pending, records_of, noise_of, added
    )
    recorder.open = set()  # no more blocks: every run is final
    recorder.log_final()
    return adaptive.shortfalls(records, labels, settings, noise)


def measure(
    config: Config,
    selection: Selection,
    manifest: list[dict],
    image_meta: dict,
    calibrations: dict[str, Any],
    fresh: bool,
) -> None:
    """Build or find the environments, run every trial (resuming a journal), log runs, write results. The config's
    sections this takes are read here, once."""
    paths, device, runner_settings, bench, timing = (
        config.paths,
        config.device,
        config.runner,
        config.benchmark,
        config.timing(),
    )
    trials = recording.plan_trials(bench, timing, selection, paths.image)
    wanted = {entry.interpreter: (entry.pins, entry.python) for entry in selection.environments}
    problems = package_index.unreleased(
        [(name, *value) for name, value in wanted.items()], Path.cwd(), Path(paths.environments)
    )
    if problems:  # before any environment is built
        raise venvs.BuildError("; ".join(problems) + " (nothing was built)")
    stacks = venvs.stacks(selection.environments, Path.cwd(), Path(paths.environments))
    for label, stack in stacks.items():
        venvs.check_device(stack, label, device)
    key = journal.stable_hash(
        {"trials": [t.to_dict() for t in trials], "stacks": {k: s.key for k, s in stacks.items()}}
    )
    journal_dir = Path(paths.journal)
    invocation_id, done, resumed = journal.open_journal(journal_dir, key, fresh=fresh)
    pythons = {label: stack.python for label, stack in stacks.items()}
    if resumed:
        # A copied project, a shared disk: refused, the journal kept, nothing logged or written. Not on Ray, whose
        # cells run on whichever node takes them (a run that spans two is `invalid` at analysis).
        problem = (
            None
            if runner_settings.executor == "ray"
            else results_folder.measured_elsewhere(trials, done, pythons, device)
        )
        if problem:
            raise RecordError(
                f"{journal_dir} (the journal of interrupted invocation {invocation_id}) holds {problem}. "
                "Resume it on that machine, or delete that folder to measure afresh here"
            )
        LOGGER.info(
            "resuming interrupted invocation %s: %d of %d trials already done", invocation_id, len(done), len(trials)
        )
    info = recording.environment_infos(selection, stacks)
    machine = runner_settings.machine or socket.gethostname()
    run_context = recording.context(config.validity(), selection, invocation_id, image_meta, machine)
    where = fingerprint.host()  # the orchestrating machine (no torch import); each trial records where it ran
    tracker = tracking.Tracker(
        paths.tracking_uri,
        invocation_id,
        recording.parent_name(selection, machine),
        recording.parent_params(selection, bench, timing, run_context, where),
        {
            "suite": selection.suite,
            "machine": machine,
            "machine_fingerprint": where["machine_fingerprint"],
            "environments": ",".join(info),
        },
    )
    LOGGER.info("invocation %s: %d trials -> MLflow %s", invocation_id, len(trials), tracking.redact(tracker.uri))
    recorder = recording.Recorder(trials, info, recording.model_infos(manifest), run_context, tracker, journal_dir)
    progress = tqdm(total=len(trials), desc="benchmark", unit="trial")

    def on_process(specs: list[TrialSpec], ended: list[TrialResult], was_done: bool) -> None:
        recorder(specs, ended, was_done)
        progress.update(len(specs))

    runner = executors.executor(runner_settings, device, pythons, journal_dir)

    def run(pending: list[TrialSpec]) -> None:
        progress.total = len(recorder.trials)
        progress.refresh()
        runner.run(pending, done, on_process)

    try:
        reached = measure_adaptively(config.loop(), device, recorder, list(stacks), run, calibrations)
    finally:
        runner.close()
    progress.close()
    ran = len(processes(recorder.trials))
    extra = {
        "labels": tuple(stacks),
        "environments": {
            label: {"name": e.name, "key": e.key, "pins": e.pins, "settings": e.settings} for label, e in info.items()
        },
        "trials": len(recorder.trials),
        "planned_trials": len(trials),
        "processes": ran,
        "planned_processes": len(processes(trials)),
        "targets": tuple(reached),
    }
    recording.finish(paths, recorder.records(), invocation_id, tracker, extra)
    journal.close_journal(journal_dir, keep_caches=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the benchmark stage.")
    parser.add_argument("--fresh", action="store_true", help="ignore an interrupted invocation's journal")
    parser.add_argument("--export", type=Path, metavar="DIR", help="write a plan for another machine; measure nothing")
    parser.add_argument("--ingest", type=Path, metavar="DIR", help="log and write the results of an exported plan")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a params value (with --export)"
    )
    parser.add_argument(
        "--window-min",
        type=float,
        metavar="M",
        help="with --export: the plan split into windows of at most M estimated GPU minutes, each a "
        "plan of its own in DIR-w1, DIR-w2, ...",
    )
    parser.add_argument(
        "--prime",
        type=int,
        default=1,
        metavar="N",
        help="with --window-min: the compile-only processes the window's launcher runs at once "
        "(its --prime N); 1 by default",
    )
    args = parser.parse_args()
    misplaced = (args.set or args.window_min is not None) and not args.export
    if misplaced or (args.prime != 1 and args.window_min is None):
        stage_config()  # logging
        LOGGER.error(
            "--set and --window-min only go with --export (the pipeline itself measures what params.yaml "
            "says), --prime only with --window-min"
        )
        sys.exit(2)
    config = stage_config(overrides=args.set, compiles=True)

    try:
        if args.export:
            exported.export(config, args.export, args.window_min, args.prime)
            return
        tracking.check_store(config.paths.tracking_uri)
        # a noise record that cannot be read: before any work
        calibrations = noise_record.load_calibrations(config.paths.calibration)
        for name in dict.fromkeys(config.compare):  # a malloc this machine lacks, an environment's too: before any work
            own = config.environments[name].settings.malloc is not None
            trial_process.malloc_to_preload(
                config.timing(name).malloc, f"environments.{name}.settings.malloc" if own else "settings.malloc"
            )
        if args.ingest:
            exported.ingest(config, args.ingest)
            return
        selection = read_selection(config.paths.selection)
        manifest = read_json(config.paths.manifest)
        image_meta = read_json(config.paths.image_meta)
    except (
        tracking.StoreError,
        OSError,
        json.JSONDecodeError,
        RecordError,
        ConfigError,
        trial_process.MallocMissing,
    ) as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    groups.end_trials_on_signal()  # a stopped benchmark leaves no trial or builder running behind it
    groups.stop_with(groups.stage_runner())  # nor goes on when the `dvc repro` running it was ended
    try:
        measure(config, selection, manifest, image_meta, calibrations, args.fresh)
    except (venvs.BuildError, RecordError, executors.ExecutorError) as error:  # raised before any timing
        LOGGER.error("%s", error)
        sys.exit(2)


if __name__ == "__main__":
    main()
