"""Stage benchmark: every run of the selection, in every compared environment, replicated in fresh processes.

    python -m compilebench.benchmark                # reads params.yaml and paths.selection; writes results, run_info
    python -m compilebench.benchmark --fresh        # ignore an interrupted invocation's journal
    python -m compilebench.benchmark --export DIR [--set KEY=VALUE ...]   # a plan for another machine; measures nothing
    python -m compilebench.benchmark --ingest DIR   # log and write what that machine measured (DIR/results/)

A run is (environment, model, batch size, variant). `plan` orders its trials (rounds of replicates; environments
interleaved in balanced blocks), `environments` builds or finds each environment's interpreter, `launcher` runs
every trial in a fresh process of that interpreter, `runs` pools each run's processes into one record, and
`tracking` logs each record as an MLflow run nested under one parent run of this invocation, as soon as its trials
are done. Completed trials are journaled first, so a killed benchmark resumes without measuring or logging twice.

--export writes DIR/plan.json (trials, and recipes to build their checkpoints with random weights), the image, and
a copy of the harness; on a machine with only torch and transformers, `cd DIR && python -m compilebench.harness.launcher
plan.json results` runs it. --ingest then turns DIR/results into results and MLflow runs like a local benchmark,
with that machine's device, versions and package list.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import shutil
import socket
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from compilebench import environments, executors, journal, reference, tracking
from compilebench.analysis import adaptive, compare, plan, runs
from compilebench.config import Benchmark, Config, ConfigError, stage_config
from compilebench.harness import fingerprint, groups, launcher, models, trial_process
from compilebench.harness.files import write_json, write_jsonl
from compilebench.harness.invocation import Context, Loop, LoopSettings
from compilebench.harness.records import (
    KIND_COLD,
    MEASURED_NOTHING,
    STATUS_OK,
    ModelSpec,
    Plan,
    RecordError,
    TrialResult,
    TrialSpec,
    VariantSpec,
    plan_digest,
    processes,
    read_json,
    read_plan,
    slug,
)
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)
CARRIED_CHECKPOINTS = "carried.json"  # in an exported plan: manifest entries of the models without a card

EXPORT_CONTEXT = "export.json"


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
                self.tracker.log_run(**tracking.run_payload(record.to_dict()))
                self.logged.add(record.run_uid)


def say_forecast(trials: list[TrialSpec], settings: LoopSettings, record: dict[str, Any] | None) -> None:
    """Log, before the first block, the smallest change each targeted metric will find (80% power) after the planned
    blocks and at the cap, from this machine's noise record; or that the machine has none yet."""
    cells = sorted({f"{s.model.model_id}|bs{s.batch_size}|{s.variant.name}" for s in trials})
    found = adaptive.forecast(compare.machine_noise(record), cells, settings)
    if not found:
        LOGGER.info("no noise record of this machine for these cells yet: how small a change this comparison can "
                    "find is known once it has run (its blocks start the record)")  # fmt: skip
        return
    for entry in found:
        (planned, low, high), (most, low_most, high_most) = entry["planned"], entry["most"]
        LOGGER.info("this machine's noise record (%d cells): %s finds a change of %.0f-%.0f%% after %d blocks, "
                    "%.0f-%.0f%% after %d (80%% power)", entry["cells"], entry["metric"].replace("_", " "),
                    100 * low, 100 * high, planned, 100 * low_most, 100 * high_most, most)  # fmt: skip


def measure_adaptively(
    config: Config, recorder: Recorder, labels: list[str], run: Any, noise_record: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run the planned trials, then more blocks where the intervals are widest (`adaptive.measure`) until every run
    meets its target or the budget or the cap runs out; log each model's runs once they are final. Returns, per
    run and targeted interval, what it reached (for the report)."""
    settings = config.benchmark.loop(config.margin)
    recorder.open = {(spec.model.model_id, spec.batch_size) for spec in recorder.trials}
    if len(labels) > 1:
        machine = fingerprint.host()["machine_fingerprint"]  # what the trials will record (compare.calibration_key)
        say_forecast(recorder.trials, settings, noise_record.get(f"{machine}|{config.benchmark.device}"))

    def run_pending(pending: list[TrialSpec]) -> dict[str, TrialResult]:
        run(pending)
        return recorder.results

    def noise_of(rows: list[dict[str, Any]]) -> compare.CellNoise:
        record = noise_record.get(compare.calibration_key(rows[0])) if rows else None
        return compare.machine_noise(record, leave_out=recorder.context.invocation_id)

    def added(pending: list[TrialSpec]) -> None:  # the other models' runs are final: logged now
        recorder.trials += pending
        recorder.open = {(spec.model.model_id, spec.batch_size) for spec in pending}
        recorder.log_final()

    def records_of(trials: list[TrialSpec], results: dict[str, TrialResult]) -> list[dict[str, Any]]:
        return [record.to_dict() for record in recorder.records()]

    _, rows, noise = adaptive.measure(list(recorder.trials), labels, settings, run_pending, records_of, noise_of,
                                      added)  # fmt: skip
    recorder.open = set()  # no more blocks: every run is final
    recorder.log_final()
    return adaptive.shortfalls(rows, labels, settings, noise)


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
        "machine": run_context.machine,
        "git_commit": run_context.git_commit,
        "image_source": run_context.image_source,
        **{key: where.get(key) for key in ("device", "device_name", "machine_fingerprint", "cpu_model")},
    }


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
        problem = None if config.runner.executor == "ray" else launcher.measured_elsewhere(
            trials, done, pythons, config.benchmark.device)  # fmt: skip
        if problem:
            raise RecordError(f"{journal_dir} (the journal of interrupted invocation {invocation_id}) holds {problem}. "
                              "Resume it on that machine, or delete that folder to measure afresh here")  # fmt: skip
        LOGGER.info("resuming interrupted invocation %s: %d of %d trials already done", invocation_id, len(done),
                    len(trials))  # fmt: skip
    info = {label: runs.EnvironmentInfo(label, s.name, s.key, s.pins, s.freeze) for label, s in stacks.items()}
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
            config, recorder, list(stacks), run, compare.load_calibrations(config.paths.calibration)
        )
    finally:
        runner.close()
    progress.close()
    ran = len(processes(recorder.trials))
    extra = {"labels": tuple(stacks),
             "environments": {label: {"name": s.name, "key": s.key, "pins": s.pins} for label, s in stacks.items()},
             "trials": len(recorder.trials), "planned_trials": len(trials), "processes": ran,
             "planned_processes": len(processes(trials)), "targets": tuple(reached)}  # fmt: skip
    finish(config, recorder.records(), invocation_id, tracker, extra)
    journal.close_journal(journal_dir)


def export(config: Config, folder: Path) -> None:
    """A plan another machine can run with only torch and transformers: trials, checkpoint recipes, image, harness;
    into a new or empty folder only, written whole or not at all (built beside it, then renamed into place)."""
    folder = folder.resolve()
    if any(character.isspace() for character in str(folder)):
        raise ConfigError(f"--export {str(folder)!r} contains a space: the launcher compiles in that folder, and "
                          "torch's inductor passes its paths to the C++ compiler unquoted, so every compiled trial "
                          "would fail; export to a path without spaces")  # fmt: skip
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        held = " holds a plan (results measured from it would no longer match it)" if (
            folder / "plan.json").exists() else " is not an empty folder"  # fmt: skip
        raise FileExistsError(f"--export {folder}{held}: export into a new or empty folder")
    image = Path(config.paths.image)
    if not image.exists():
        raise FileNotFoundError(f"{image} does not exist: run `dvc repro fetch_image` first (the plan carries it)")
    exported, selection, carried = export_plan(config)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an export that failed before
    partial.mkdir(parents=True)
    try:
        write_export(config, partial, exported, selection, carried)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if folder.exists():
        folder.rmdir()  # empty, checked above
    partial.rename(folder)
    trials = list(exported.trials)
    LOGGER.info(
        "exported %d trials in %d processes to %s; on the other machine: cd %s && python -m "
        "compilebench.harness.launcher plan.json results", len(trials), len(processes(trials)), folder,
        shlex.quote(folder.name),
    )  # fmt: skip
    LOGGER.info("%s", estimate_line(trials, config))


def exported_checkpoint(model_id: str) -> str:
    """Where a model's checkpoint lies in an exported plan's folder (built there by recipe, or carried)."""
    return f"checkpoints/{slug(model_id)}"


def export_plan(config: Config) -> tuple[Plan, dict, list[dict]]:
    """The selected suite as a plan (checkpoints by recipe), its selection, and the manifest entries of the models
    without a card, whose checkpoints the export carries."""
    suite = config.selected
    cells = reference.selected_cells(config)
    paths = {model_id: exported_checkpoint(model_id) for model_id in suite.models}
    carded = [model_id for model_id in suite.models if model_id in models.registry()]
    loaded = {spec["model_id"]: spec for spec in read_json(config.paths.selection)["models"]} if (
        len(carded) < len(suite.models) and Path(config.paths.selection).exists()) else {}  # fmt: skip
    specs = []
    for model_id in suite.models:
        if model_id in carded:
            specs.append(models.model_spec(models.get_card(model_id), paths[model_id]))
        elif model_id in loaded:  # no card, so no recipe: the plan carries the checkpoint load_models made
            specs.append(replace(ModelSpec.from_dict(loaded[model_id]), checkpoint=paths[model_id]))
        else:
            raise FileNotFoundError(f"{model_id} has no card, so the plan must carry its checkpoint: run "
                                    "`dvc repro load_models` first")  # fmt: skip
    selection = plan.selection(config, specs, environments.resolved_pins(config, Path.cwd()), cells)
    trials = plan_trials(config.benchmark, selection, "image.jpg")
    recipes = [models.recipe(models.get_card(model_id), suite.scale, config.models.seed, paths[model_id])
               for model_id in carded]  # fmt: skip
    uncarded = set(suite.models) - set(carded)
    carried = [entry for entry in read_json(config.paths.manifest) if entry["model_id"] in uncarded] if uncarded else []
    invocation_id = uuid.uuid4().hex
    run_context = context(config, selection, invocation_id, read_json(config.paths.image_meta), config.runner.machine)
    loop = Loop(config.benchmark.loop(config.margin), run_context,
                tuple(entry["label"] for entry in selection["environments"]))  # fmt: skip
    return Plan(invocation_id, tuple(trials), tuple(recipes), loop), selection, carried


def write_export(config: Config, folder: Path, exported: Plan, selection: dict, carried: list[dict]) -> None:
    """The export's files in `folder`: the checkpoints it carries, the plan, the image, the run's context, the
    harness."""
    for entry in carried:
        shutil.copytree(entry["path"], folder / exported_checkpoint(entry["model_id"]))
    write_json(folder / CARRIED_CHECKPOINTS, carried)
    write_json(folder / "plan.json", exported.to_dict())
    shutil.copyfile(config.paths.image, folder / "image.jpg")
    write_json(folder / EXPORT_CONTEXT, {"context": exported.adaptive.context.to_dict(), "selection": selection,
                                         "plan_sha256": plan_digest(folder / "plan.json")})  # fmt: skip
    copy_harness(folder)


REMOTE_PACKAGES = ("harness", "analysis")  # what runs on the other machine: trials, and the loop that adds blocks


def copy_harness(folder: Path) -> None:
    """The packages a plan runs with on another machine (no stage, no MLflow, DVC, pandas or omegaconf), fresh."""
    package = trial_process.SRC_ROOT / "compilebench"
    target = folder / "compilebench"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    shutil.copyfile(package / "__init__.py", target / "__init__.py")
    for name in REMOTE_PACKAGES:
        shutil.copytree(package / name, target / name, ignore=shutil.ignore_patterns("__pycache__"))


def estimate_line(trials: list[TrialSpec], config: Config) -> str:
    """What the plan should cost on a GPU, from the per-model costs measured so far (paths.gpu_costs)."""
    costs_path = Path(config.paths.gpu_costs)
    if not config.benchmark.device.startswith("cuda") or not costs_path.exists():
        return f"no estimate of the plan's time: {costs_path} holds costs measured on a GPU, for benchmark.device cuda"
    costs = read_json(costs_path)
    found = plan.estimate(trials, costs)
    borrowed = f"; no measured cost for {len(found.borrowed)} (model, variant): {', '.join(found.borrowed[:6])}" + (
        " ..." if len(found.borrowed) > 6 else "") if found.borrowed else ""  # fmt: skip
    prime = ""
    if found.primes:
        prime = (f"; before them `launcher --prime N` compiles the plan's {found.primes} runs, "
                 f"{found.prime_s / 60:.0f} minutes one at a time (N at a time take less where the machine has the "
                 "cores)")  # fmt: skip
    return (f"estimated {found.seconds / 60:.0f} GPU minutes on {costs['device']} for {found.processes} processes "
            f"one after the other (from {costs_path}: {costs['stack']}{borrowed}){prime}; add the machine's "
            "start-up")  # fmt: skip


def reached(exported: Plan, recorder: Recorder) -> list[dict[str, Any]]:
    """Per run and targeted interval of an exported plan, what its results reached and the blocks each would still
    need: the launcher's loop judged them there on the same settings (so the next window can be sized)."""
    if exported.adaptive is None:
        return []
    rows = [record.to_dict() for record in recorder.records()]
    return adaptive.shortfalls(rows, list(exported.adaptive.labels), exported.adaptive.settings, None)


def plan_problem(folder: Path, saved: dict, remote: dict) -> str | None:
    """Why the results in `folder` must not be ingested as measurements of its plan.json (edited since it was
    exported, or since the launcher ran it); None where the plan is the one exported and run (an export or a launcher
    from before plans had a digest cannot say, and is taken as it is)."""
    digest = plan_digest(folder / "plan.json")
    if saved.get("plan_sha256") and saved["plan_sha256"] != digest:
        return (f"{folder / 'plan.json'} was edited after export (its digest {digest[:12]} is not the exported "
                f"{saved['plan_sha256'][:12]}, key 'plan_sha256' of {folder / EXPORT_CONTEXT}): its trials would be "
                "logged as what they are not; export again")  # fmt: skip
    if remote.get("plan_sha256") and remote["plan_sha256"] != digest:
        return (f"{folder / 'results' / launcher.ENVIRONMENT} says the launcher ran a plan of digest "
                f"{remote['plan_sha256'][:12]}, and {folder / 'plan.json'} is {digest[:12]}: the plan changed after "
                "it ran")  # fmt: skip
    return None


def unmeasured(specs: list[TrialSpec], results: dict[str, TrialResult], path: Path) -> str | None:
    """Why a result that says it measured lacks its samples (a trial that times eager with no `eager_ms`, a compiled
    arm with no `compiled_ms`), naming the file, trial and key; None where every one has them."""
    for spec in specs:
        result = results.get(spec.trial_id)
        if result is None or result.status in MEASURED_NOTHING or spec.kind == KIND_COLD:
            continue
        for key, needed in (("eager_ms", True), ("compiled_ms", spec.variant.compile and result.status == STATUS_OK)):
            if needed and not getattr(result, key):
                return f"{path}: trial {spec.trial_id} is {result.status!r} but its key {key!r} is empty or missing"
    return None


def ingest(config: Config, folder: Path) -> None:
    """Results measured elsewhere (an exported plan run by the launcher) as runs: logged once, written as results.
    Refused, with nothing logged, when the plan was edited since export or since it ran, a line is another plan's, or
    a result lacks the samples its status says it has."""
    exported = read_plan(folder / "plan.json")
    problem = launcher.output_problem(exported, folder / "results")
    if problem:
        raise RecordError(f"{problem}; nothing ingested")
    added = launcher.read_added(folder / "results" / launcher.ADDED_TRIALS)  # blocks its loop added there
    planned_processes = len(processes(exported.trials))
    exported = replace(exported, trials=exported.trials + added)
    saved = read_json(folder / EXPORT_CONTEXT)
    remote = read_json(folder / "results" / launcher.ENVIRONMENT)
    problem = plan_problem(folder, saved, remote)
    if problem:
        raise RecordError(f"{problem}; nothing ingested")
    results = launcher.read_results(folder / "results" / "trials.jsonl", plan_digest(folder / "plan.json"))
    problem = unmeasured(list(exported.trials), results, folder / "results" / "trials.jsonl")
    if problem:
        raise RecordError(f"{problem}; nothing ingested")
    missing = [spec.trial_id for spec in exported.trials if spec.trial_id not in results]
    if len(missing) == len(exported.trials):
        raise FileNotFoundError(f"{folder / 'results' / 'trials.jsonl'} holds no result of this plan")
    ended = folder / "results" / launcher.FINISHED
    finished = ended.exists() or exported.adaptive is None  # no loop: as it stands
    not_run = read_json(ended).get("processes_not_run", 0) if ended.exists() else 0  # ended by `window end`
    if missing:
        why = "the plan was ended with `window end`" if not_run else "rerun the launcher there to finish"
        LOGGER.warning("%d of %d trials have no result (%s): %s", len(missing), len(exported.trials), why,
                       missing[:5])  # fmt: skip
    not_logged = None if finished else (
        f"the launcher has not finished this plan ({len(exported.trials) - len(missing)} of {len(exported.trials)} "
        f"trials have results, and its loop may still add blocks): nothing is logged to MLflow until it has; run it "
        f"again there, bring {folder / 'results'} back and ingest again")  # fmt: skip
    selection = saved["selection"]
    first = next(result for result in results.values() if result.environment)
    machine = saved["context"]["machine"] or first.environment.get("hostname", "remote")
    run_context = replace(Context.from_dict(saved["context"]), machine=machine)
    freeze = tuple(remote["freeze"])
    key = journal.stable_hash(list(freeze))
    found = {  # that machine's own stack, as found: the project's pins do not apply there
        name: version
        for name, version in (line.split("==", 1) for line in freeze)
        if name.lower() in ("torch", "transformers")
    }
    info = {e["label"]: runs.EnvironmentInfo(e["label"], f"{e['name']} on {machine}", key, found, freeze)
            for e in selection["environments"]}  # fmt: skip
    tracker = None if not_logged else tracking.Tracker(
        config.paths.tracking_uri, exported.invocation_id, parent_name(selection, machine) + " (ingested)",
        parent_params(selection, config.benchmark, run_context, first.environment),
        {"suite": selection["suite"], "machine": machine, "machine_fingerprint": first.environment.get(
            "machine_fingerprint"), "environments": ",".join(info), "ingested_from": str(folder)},
    )  # fmt: skip
    checkpoints = read_json(folder / "results" / "checkpoints.json") + (
        read_json(folder / CARRIED_CHECKPOINTS) if (folder / CARRIED_CHECKPOINTS).exists() else [])  # fmt: skip
    measured = [spec for spec in exported.trials if spec.trial_id in results]  # the plan as far as it ran
    recorder = Recorder(measured, info, model_infos(checkpoints), run_context, tracker, None)
    for specs in processes(measured):
        recorder(specs, [results[spec.trial_id] for spec in specs], resumed=True)
    labels = {label: {"name": e.name, "key": e.key, "pins": e.pins} for label, e in info.items()}
    extra = {"ingested_from": str(folder), "trials": len(exported.trials), "trials_missing": len(missing),
             "planned_processes": planned_processes, "labels": tuple(info), "environments": labels,
             "targets": tuple(reached(exported, recorder)), "processes_not_run": not_run,
             "not_logged": not_logged or ""}  # fmt: skip
    finish(config, recorder.records(), exported.invocation_id, tracker, extra)
    if not_logged:
        LOGGER.warning("results written to %s; %s", config.paths.results, not_logged)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the benchmark stage.")
    parser.add_argument("--fresh", action="store_true", help="ignore an interrupted invocation's journal")
    parser.add_argument("--export", type=Path, metavar="DIR", help="write a plan for another machine; measure nothing")
    parser.add_argument("--ingest", type=Path, metavar="DIR", help="log and write the results of an exported plan")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a params value (with --export)")  # fmt: skip
    args = parser.parse_args()
    if args.set and not args.export:
        stage_config()  # logging
        LOGGER.error("--set only goes with --export: the pipeline itself measures what params.yaml says")
        sys.exit(2)
    config = stage_config(overrides=args.set, compiles=True)
    try:
        if args.export:
            export(config, args.export)
            return
        tracking.check_store(config.paths.tracking_uri)
        compare.load_calibrations(config.paths.calibration)  # a noise record that cannot be read: before any work
        if args.ingest:
            ingest(config, args.ingest)
            return
        selection = read_json(config.paths.selection)
        manifest = read_json(config.paths.manifest)
        image_meta = read_json(config.paths.image_meta)
    except (tracking.StoreError, OSError, json.JSONDecodeError, RecordError, ConfigError) as error:
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
