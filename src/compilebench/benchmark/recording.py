"""What an invocation records, the pipeline's own or one measured elsewhere (exported.py's ingest): its trials in run
order, the context every run shares, each process journaled and its runs logged as their blocks end (`Recorder`),
then the results and the run info written and the parent run closed (`finish`).

The benchmark stage and the ingest of an exported plan both record through this module, so a run measured on another
machine is written and logged exactly as a run measured here.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from compilebench import tracking
from compilebench.analysis import plan, run_record, runs
from compilebench.benchmark import journal
from compilebench.config import Benchmark, Paths
from compilebench.environments import venvs
from compilebench.harness import fingerprint
from compilebench.logs import redact
from compilebench.records.formats import STATUS_OK, UNSUPPORTED, TimingSpec, TrialResult, TrialSpec
from compilebench.records.invocation import Context, Validity
from compilebench.records.selection import Selection
from compilebench.records.writing import write_json, write_jsonl
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)


def plan_trials(bench: Benchmark, timing: TimingSpec, selection: Selection, image: str) -> list[TrialSpec]:
    """Every trial of the selection, in run order: replicated as `benchmark` says, each timed as `timing` (the
    config's `timing()`: `benchmark` and top-level `settings`), an environment's own settings over them."""
    return plan.trials(
        list(selection.models),
        list(selection.batch_sizes),
        list(selection.variants),
        list(selection.labels),
        bench.replicates,
        bench.cold_replicates,
        bench.compile_cache == "shared",
        image,
        timing,
        bench.seed,
        None if selection.cells is None else frozenset(selection.cells),
        {entry.label: entry.settings for entry in selection.environments},
    )


def model_infos(entries: list[dict[str, Any]]) -> dict[str, run_record.ModelInfo]:
    """Where each model's checkpoint came from, by model id (load_models' manifest or a remote checkpoints.json)."""
    return {
        entry["model_id"]: run_record.ModelInfo(
            weights_source=entry["weights_source"],
            config_origin=entry["config_origin"],
            param_count=entry.get("param_count"),
            resolved_revision=entry.get("resolved_revision"),
        )
        for entry in entries
    }


def context(validity: Validity, selection: Selection, invocation_id: str, image_meta: dict, machine: str) -> Context:
    """What every run of this invocation shares."""
    return Context(
        invocation_id=invocation_id,
        suite=selection.suite,
        scale=selection.scale,
        machine=machine,
        git_commit=fingerprint.git_commit(),
        image_source=image_meta["image_source"],
        image_sha256=image_meta["sha256"],
        validity=validity,
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

    def records(self) -> list[run_record.RunRecord]:
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
            if (
                record.identity.run_uid not in self.logged
                and (record.cell.model_id, record.cell.batch_size) not in self.open
            ):
                self.tracker.log_run(**tracking.run_payload(record))
                self.logged.add(record.identity.run_uid)


def finish(paths: Paths, records: list[run_record.RunRecord], invocation_id: str, tracker, extra: dict) -> None:
    """Write the results and run info, close the parent run, say what failed and what was not logged. Without a
    tracker (an ingest of a plan not finished: extra says why, as `not_logged`) nothing is logged."""
    write_jsonl(paths.results, [record.to_dict() for record in records])
    failed = [
        f"{r.cell.model_id} bs{r.cell.batch_size} {r.cell.variant} [{r.env.environment}]: {r.identity.status}"
        for r in records
        if r.identity.status not in (STATUS_OK, UNSUPPORTED)
    ]  # unsupported: an answer, said apart
    parent = (
        {"name": tracker.parent_name, "params": tracker.parent_params, "tags": tracker.parent_tags} if (tracker) else {}
    )  # for sync
    # measured nothing: the parent FAILED
    crashed = any(record.identity.status in tracking.CRASHED for record in records)
    run_info = RunInfo(
        invocation_id, tracking.EXPERIMENT, failed_runs=tuple(failed), crashed=crashed, parent=parent, **extra
    )
    write_json(paths.run_info, run_info.to_dict())  # before the last call to the store: sync needs it
    if tracker is None:
        return
    tracker.log_parent(finish_failed=crashed, note=failures_note(tracker.parent_name, failed, len(records)))
    waited = replace(run_info, store_s=round(tracker.store_s, 3), store_calls=tracker.store_calls)
    write_json(paths.run_info, waited.to_dict())
    LOGGER.info(
        "MLflow store %s: this invocation waited %.1f s on it, over %d logging call(s)",
        redact(tracker.uri),
        tracker.store_s,
        tracker.store_calls,
    )
    if failed:
        LOGGER.warning(
            "%d of %d runs did not end ok (recorded in the tables and MLflow): %s", len(failed), len(records), failed
        )
    if tracker.failures:
        LOGGER.warning(
            "%d item(s) not logged to MLflow; results are in %s. `python -m compilebench.sync` logs them later.",
            len(tracker.failures),
            paths.results,
        )


def failures_note(name: str, failed: list[str], runs: int) -> str | None:
    """The parent run's description while the tables and report are not drawn yet: which runs did not end ok (the
    plot stage's description replaces it, and says them again); None where every run did."""
    if not failed:
        return None
    shown = "; ".join(failed[:10]) + ("; …" if len(failed) > 10 else "")
    return f"**compilebench** {name}: {len(failed)} of {runs} runs did not end ok: {shown}."


def parent_name(selection: Selection, machine: str) -> str:
    """What an invocation's parent run is called: its suite, the environments it compared, the machine."""
    labels = selection.labels
    compared = " vs ".join(labels) if len(labels) > 1 else labels[0]
    return f"{selection.suite}: {compared} on {machine}"


def parent_params(
    selection: Selection, bench: Benchmark, timing: TimingSpec, run_context: Context, where: dict
) -> dict:
    """The parent run's params: what this invocation ran, where."""
    return {
        "suite": selection.suite,
        "scale": selection.scale,
        "models": ",".join(m.model_id for m in selection.models),
        "batch_sizes": ",".join(map(str, selection.batch_sizes)),
        "variants": ",".join(v.name for v in selection.variants),
        "environments": ",".join(selection.labels),
        "replicates": bench.replicates,
        "cold_replicates": bench.cold_replicates,
        "together": bench.together,  # how a timing block ran: its processes alive together, taking turns
        "huge_pages": timing.huge_pages,
        "malloc": timing.malloc,
        "machine": run_context.machine,
        "git_commit": run_context.git_commit,
        "image_source": run_context.image_source,
        **{key: where.get(key) for key in ("device", "device_name", "machine_fingerprint", "cpu_model")},
    }


def environment_infos(
    selection: Selection, stacks: dict[str, venvs.BuiltEnvironment]
) -> dict[str, run_record.EnvironmentInfo]:
    """Each compared environment by label: its stack (interpreter, pins, package list) and its settings; the settings
    are part of its key, so one stack run two ways is two environments, never an A/A."""
    info = {}
    for entry in selection.environments:
        stack = stacks[entry.label]
        key = run_record.settings_key(stack.key, entry.settings)
        info[entry.label] = run_record.EnvironmentInfo(
            entry.label, entry.name, key, stack.pins, stack.freeze, entry.settings
        )
    return info
