"""A plan for another machine, and what it measured brought back: the benchmark stage's --export and --ingest.

    python -m compilebench.benchmark --export DIR [--set KEY=VALUE ...]   # a plan for another machine; measures nothing
    python -m compilebench.benchmark --export DIR --window-min M [--prime N] ...   # in windows DIR-w1, DIR-w2, ...
    python -m compilebench.benchmark --ingest DIR   # log and write what that machine measured (DIR/results/)

--export writes DIR/plan.json (trials, recipes to build their checkpoints with random weights, and the loop that adds
blocks there, with the invocation's context), the image, and the runner (runner.py: one file, its SHA-256 in the
plan); on a machine with only torch and transformers, `cd DIR && python runner.pyz plan.json results` runs it.
--window-min M splits the plan into windows of at most M estimated GPU minutes each (a machine at hand for a fixed
time), each an invocation of its own, all sharing one runner. --ingest then turns DIR/results into results and
MLflow runs as the benchmark stage records its own (recording.py's Recorder and finish), with that machine's device,
versions and package list, and writes DIR/README.md from DIR's files (`window_readme`) in place of the one the export
left.
"""

from __future__ import annotations

import collections
import logging
import math
import shlex
import shutil
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from compilebench import reference, runner, tracking
from compilebench.analysis import adaptive, pricing, run_record
from compilebench.benchmark import journal, recording
from compilebench.config import Config, ConfigError
from compilebench.environments.pins import resolved_pins
from compilebench.harness import models, results_folder
from compilebench.harness.names import slug
from compilebench.records.formats import (
    CURRENT,
    KIND_COLD,
    MEASURED_NOTHING,
    STATUS_OK,
    Plan,
    RecordError,
    TrialResult,
    TrialSpec,
    processes,
)
from compilebench.records.invocation import Context, Loop
from compilebench.records.reading import plan_digest, read_json, read_jsonl, read_plan, read_selection
from compilebench.records.selection import Selection
from compilebench.records.writing import write_atomic, write_json

LOGGER = logging.getLogger(__name__)


CARRIED_CHECKPOINTS = "carried.json"  # in an exported plan: manifest entries of the models without a card


EXPORT_CONTEXT = "export.json"
README = "README.md"
NOT_RUN_YET = "This plan has not run yet."  # the line that marks an export's own README, replaced once results are back


def export(config: Config, folder: Path, window_min: float | None = None, prime_at_once: int = 1) -> None:
    """A plan another machine can run with only torch and transformers: trials, checkpoint recipes, image, harness;
    into a new or empty folder only, written whole or not at all (built beside it, then renamed into place).

    With `window_min`, the plan in as few windows of at most that many estimated minutes as `pricing.windows` packs it
    (its prime `prime_at_once` at a time, as the window's launcher --prime N), each a plan of its own in FOLDER-w1,
    FOLDER-w2, ...: all of them written, or none."""
    folder = folder.resolve()
    if any(character.isspace() for character in str(folder)):
        raise ConfigError(
            f"--export {str(folder)!r} contains a space: the launcher compiles in that folder, and "
            "torch's inductor passes its paths to the C++ compiler unquoted, so every compiled trial "
            "would fail; export to a path without spaces"
        )
    image = Path(config.paths.image)
    if not image.exists():
        raise FileNotFoundError(f"{image} does not exist: run `dvc repro fetch_image` first (the plan carries it)")
    content = runner.archive()  # one runner for every window: the same bytes, one digest
    whole, selection, carried = export_plan(config, runner.digest_of(content))
    costs = cost_table(config)
    if window_min is None:
        parts = [(folder, whole, selection, carried)]
    else:
        parts = split_export(config, costs, folder, whole, selection, carried, window_min, prime_at_once)
    for target, *_ in parts:
        _refuse_used(target)
    prime = prime_at_once if window_min is not None else None
    estimates = [estimate_line(list(exported.trials), config, costs, prime) for _, exported, _, _ in parts]
    built = []
    try:
        for number, (target, exported, chosen, taken) in enumerate(parts, start=1):
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)  # an export that failed before
            partial.mkdir(parents=True)
            built.append(partial)
            write_export(config, partial, exported, chosen, taken, content)
            window = None if window_min is None else f"{number} of {len(parts)}"
            readme = waiting_readme(target.name, exported, chosen, estimates[number - 1], window, prime)
            (partial / README).write_text(readme)
    except BaseException:
        for partial in built:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    for (target, exported, chosen, _), partial, estimate in zip(parts, built, estimates, strict=True):
        if target.exists():
            target.rmdir()  # empty, checked above
        partial.rename(target)
        trials = list(exported.trials)
        LOGGER.info(
            "exported %d trials in %d processes to %s; on the other machine: %s",
            len(trials),
            len(processes(trials)),
            target,
            launch_command(target.name, exported, chosen, prime),
        )
        if window_min is not None:
            LOGGER.info("%s: %s", target.name, ", ".join(plan_units(exported)))
        LOGGER.info("%s", estimate)


def launch_command(name: str, exported: Plan, selection: Selection, prime_at_once: int | None = None) -> str:
    """How the machine that runs the plan starts it, from the folder's parent (said by the log and the README): each
    environment but the machine's own needs --python LABEL=PATH, and one that only sets settings is the machine's own
    interpreter run its way."""
    used = dict.fromkeys(spec.environment for spec in exported.trials)
    stack = {entry.label: entry.interpreter for entry in selection.environments}
    others = [label for label in used if label != CURRENT and stack.get(label) != CURRENT]
    own = [label for label in used if label != CURRENT and stack.get(label) == CURRENT]
    pythons = "".join(f' --python {label}="$(command -v python)"' for label in own) + "".join(
        f" --python {label}=PATH" for label in others
    )
    prime = "" if prime_at_once is None else f" --prime {prime_at_once}"
    explained = (
        (
            f" (each PATH an interpreter of that stack, e.g. one that `python {runner.RUNNER} --overlay DIR "
            "WHEEL...` lays over that machine's own: docs/gpu.md)"
        )
        if others
        else ""
    )
    launcher = f"cd {shlex.quote(name)} && python {runner.RUNNER} plan.json results"
    return f"{launcher}{prime}{pythons}{explained}"


def compared(selection: Selection) -> str:
    """The environments a plan compares, as a reader names them: each label, with its pins or its settings."""
    said = []
    for entry in selection.environments:
        if entry.settings:
            settings = run_record.settings_text(entry.settings)
            said.append(f"`{entry.label}` (`{entry.interpreter}`'s interpreter with {settings})")
        else:
            said.append(f"`{entry.label}`")
    return ", ".join(said)


def plan_units(exported: Plan) -> list[str]:
    """The plan's units as a reader names them: each model and batch size, in the plan's order."""
    return list(dict.fromkeys(f"{spec.model.label} bs{spec.batch_size}" for spec in exported.trials))


def waiting_readme(
    name: str, exported: Plan, selection: Selection, estimate: str, window: str | None, prime_at_once: int | None
) -> str:
    """The README an export leaves in its folder until its results come back (`make ingest`, window_readme, then
    writes the record's in its place, recognising this one by NOT_RUN_YET): what the plan measures, what it should
    cost, and how to run it and bring it back."""
    commit = exported.adaptive.context.git_commit[:12] if exported.adaptive else "?"  # an export always has a loop
    cells = dict.fromkeys(
        f"{spec.model.label} bs{spec.batch_size} {spec.variant.name}"
        for spec in exported.trials
        if spec.variant.compile
    )
    trials = list(exported.trials)
    lines = [
        f"# {name}",
        "",
        NOT_RUN_YET,
        "",
        f"An exported plan of suite `{selection.suite}` (invocation `{exported.invocation_id}`), exported from "
        f"compilebench at `{commit}`{f', window {window}' if window else ''}: {len(trials)} trials "
        f"in {len(processes(trials))} processes, its units {', '.join(plan_units(exported))}; the compiled cells "
        f"{', '.join(cells)}.",
        "",
        *([f"Environments compared: {compared(selection)}.", ""] if len(selection.environments) > 1 else []),
        f"What it should cost: {estimate}.",
        "",
        f"On the machine that runs it, from this folder's parent: "
        f"`{launch_command(name, exported, selection, prime_at_once)}` "
        f"(docs/gpu.md; its runner, `{runner.RUNNER}`, is {exported.runner_sha256[:12]}). Back here, with what came "
        "back in `results/`: "
        "`make ingest FROM=<this folder>`, which also writes the record's README in place of this one.",
        "",
    ]
    return "\n".join(lines)


def _refuse_used(folder: Path) -> None:
    """A plan goes into a new or empty folder only (results measured from an earlier plan would no longer match it)."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        held = (
            " holds a plan (results measured from it would no longer match it)"
            if (folder / "plan.json").exists()
            else " is not an empty folder"
        )
        raise FileExistsError(f"--export {folder}{held}: export into a new or empty folder")


def split_export(
    config: Config,
    costs: dict[str, Any] | None,
    folder: Path,
    whole: Plan,
    selection: Selection,
    carried: list[dict],
    window_min: float,
    prime_at_once: int,
) -> list[tuple[Path, Plan, Selection, list[dict]]]:
    """The plan as windows of at most `window_min` estimated minutes (pricing.windows), each an invocation of its own
    with the models, cells, recipes and carried checkpoints its trials use, its suite named `SUITE-wN`, in
    FOLDER-wN; `costs` is cost_table's."""
    if costs is None:
        raise ConfigError(
            f"--window-min splits a plan by its estimated minutes, which come from "
            f"{config.paths.gpu_costs} (costs measured on a GPU): it needs device cuda and "
            "that table"
        )
    if not (math.isfinite(window_min) and window_min > 0) or prime_at_once < 1:
        raise ConfigError(
            f"--window-min must be a positive number of minutes (got {window_min}) and --prime at "
            f"least 1 (got {prime_at_once})"
        )
    parts = []
    split = pricing.windows(list(whole.trials), costs, window_min, prime_at_once)
    for number, trials in enumerate(split, start=1):
        window_s = pricing.window_seconds(pricing.estimate(trials, costs), prime_at_once)
        if window_s > window_min * 60:
            units = ", ".join(dict.fromkeys(f"{spec.model.label} bs{spec.batch_size}" for spec in trials))
            LOGGER.warning(
                "window %d (%s) is estimated at %.1f minutes, over --window-min %g: a (model, batch size) "
                "stays whole, so it has a window of its own; `--stop-after-min` ends it between processes "
                "and the next run resumes it",
                number,
                units,
                window_s / 60,
                window_min,
            )
        models = {spec.model.model_id for spec in trials}
        batches = {(spec.model.model_id, spec.batch_size) for spec in trials}
        chosen = replace(
            selection,
            suite=f"{selection.suite}-w{number}",
            models=tuple(m for m in selection.models if m.model_id in models),
            cells=None
            if selection.cells is None
            else tuple(cell for cell in selection.cells if (cell[0], cell[1]) in batches),
        )
        invocation_id = uuid.uuid4().hex
        context = replace(whole.adaptive.context, invocation_id=invocation_id, suite=chosen.suite)
        loop = replace(whole.adaptive, context=context)
        recipes = tuple(recipe for recipe in whole.recipes if recipe.model_id in models)
        exported = Plan(invocation_id, tuple(trials), recipes, loop, whole.runner_sha256)  # windows share the runner
        taken = [entry for entry in carried if entry["model_id"] in models]
        parts.append((folder.with_name(f"{folder.name}-w{number}"), exported, chosen, taken))
    return parts


def exported_checkpoint(model_id: str) -> str:
    """Where a model's checkpoint lies in an exported plan's folder (built there by recipe, or carried)."""
    return f"checkpoints/{slug(model_id)}"


def export_plan(config: Config, runner_sha256: str = "") -> tuple[Plan, Selection, list[dict]]:
    """The selected suite as a plan (checkpoints by recipe, run by the runner of `runner_sha256`, which its context
    names too, so every run it produces says which code measured it), its selection, and the manifest entries of the
    models without a card, whose checkpoints the export carries."""
    suite = config.selected
    cells = reference.selected_cells(config)
    paths = {model_id: exported_checkpoint(model_id) for model_id in suite.models}
    carded = [model_id for model_id in suite.models if model_id in models.registry()]
    loaded = (
        {spec.model_id: spec for spec in read_selection(config.paths.selection).models}
        if (len(carded) < len(suite.models) and Path(config.paths.selection).exists())
        else {}
    )
    specs = []
    for model_id in suite.models:
        if model_id in carded:
            specs.append(models.model_spec(models.get_card(model_id), paths[model_id]))
        elif model_id in loaded:  # no card, so no recipe: the plan carries the checkpoint load_models made
            specs.append(replace(loaded[model_id], checkpoint=paths[model_id]))
        else:
            raise FileNotFoundError(
                f"{model_id} has no card, so the plan must carry its checkpoint: run `dvc repro load_models` first"
            )
    selection = config.selection(specs, resolved_pins(config.compared_pins(), Path.cwd()), cells)
    trials = recording.plan_trials(config.benchmark, config.timing(), selection, "image.jpg")
    recipes = [
        models.recipe(models.get_card(model_id), suite.scale, config.models.seed, paths[model_id])
        for model_id in carded
    ]
    uncarded = set(suite.models) - set(carded)
    carried = [entry for entry in read_json(config.paths.manifest) if entry["model_id"] in uncarded] if uncarded else []
    invocation_id = uuid.uuid4().hex
    image_meta = read_json(config.paths.image_meta)
    run_context = replace(
        recording.context(config.validity(), selection, invocation_id, image_meta, config.runner.machine),
        runner_sha256=runner_sha256,
    )
    loop = Loop(config.loop(), run_context, selection.labels)
    return Plan(invocation_id, tuple(trials), tuple(recipes), loop, runner_sha256), selection, carried


def write_export(
    config: Config, folder: Path, exported: Plan, selection: Selection, carried: list[dict], content: bytes
) -> None:
    """The export's files in `folder`: the checkpoints it carries, the plan, the image, the run's context, and the
    runner (`content`: runner.archive()'s bytes, whose digest the plan names)."""
    for entry in carried:
        shutil.copytree(entry["path"], folder / exported_checkpoint(entry["model_id"]))
    write_json(folder / CARRIED_CHECKPOINTS, carried)
    write_json(folder / "plan.json", exported.to_dict())
    shutil.copyfile(config.paths.image, folder / "image.jpg")
    write_json(
        folder / EXPORT_CONTEXT,
        {
            "context": exported.adaptive.context.to_dict(),
            "selection": selection.to_dict(),
            "plan_sha256": plan_digest(folder / "plan.json"),
            "runner_sha256": exported.runner_sha256,
        },
    )
    digest = runner.build(folder, content)
    if digest != exported.runner_sha256:
        raise RuntimeError(f"{folder / runner.RUNNER} is {digest[:12]}, the plan names {exported.runner_sha256[:12]}")


def cost_table(config: Config) -> dict[str, Any] | None:
    """The GPU cost table (paths.gpu_costs), with the doc's growth of each model's latency over batch sizes beside it
    (reference.batch_ratios: the table's latencies were measured at batch 1 only so far); None where a plan's time
    cannot be estimated from it (a device other than cuda, or no table)."""
    if not config.device.startswith("cuda") or not Path(config.paths.gpu_costs).exists():
        return None
    table = read_json(config.paths.gpu_costs)
    return {**table, "batch_ratios": reference.batch_ratios(reference.read_published(config.paths.reference))}


def estimate_line(
    trials: list[TrialSpec], config: Config, costs: dict[str, Any] | None, prime_at_once: int | None = None
) -> str:
    """What the plan should cost on a GPU, from the per-model costs measured so far (`costs`: cost_table's); with
    `prime_at_once` (a window's), also its total: the prime that many at a time, then the processes."""
    costs_path = config.paths.gpu_costs
    if costs is None:
        return f"no estimate of the plan's time: {costs_path} holds costs measured on a GPU, for device cuda"
    found = pricing.estimate(trials, costs)
    borrowed = (
        f"; no measured cost for {len(found.borrowed)} (model, variant): {', '.join(found.borrowed[:6])}"
        + (" ..." if len(found.borrowed) > 6 else "")
        if found.borrowed
        else ""
    )
    prime = ""
    if found.primes:
        prime = (
            f"; before them `launcher --prime N` compiles the plan's {found.primes} runs, "
            f"{found.prime_s / 60:.0f} minutes one at a time (N at a time take less where the machine has the "
            "cores)"
        )
    window = (
        ""
        if prime_at_once is None
        else (
            f"; {pricing.window_seconds(found, prime_at_once) / 60:.1f} minutes in all with the prime "
            f"{prime_at_once} at a time"
        )
    )
    return (
        f"estimated {found.seconds / 60:.0f} GPU minutes on {costs['device']} for {found.processes} processes "
        f"one after the other (from {costs_path}: {costs['stack']}{borrowed}){prime}{window}; add the machine's "
        "start-up"
    )


def reached(exported: Plan, recorder: recording.Recorder) -> list[dict[str, Any]]:
    """Per run and targeted interval of an exported plan, what its results reached and the blocks each would still
    need: the launcher's loop judged them there on the same settings (so the next window can be sized)."""
    if exported.adaptive is None:
        return []
    return adaptive.shortfalls(recorder.records(), list(exported.adaptive.labels), exported.adaptive.settings, None)


def plan_problem(folder: Path, saved: dict, remote: dict) -> str | None:
    """Why the results in `folder` must not be ingested as measurements of its plan.json (edited since it was
    exported, or since the launcher ran it); None where the plan is the one exported and run (an export or a launcher
    from before plans had a digest cannot say, and is taken as it is)."""
    digest = plan_digest(folder / "plan.json")
    if saved.get("plan_sha256") and saved["plan_sha256"] != digest:
        return (
            f"{folder / 'plan.json'} was edited after export (its digest {digest[:12]} is not the exported "
            f"{saved['plan_sha256'][:12]}, key 'plan_sha256' of {folder / EXPORT_CONTEXT}): its trials would be "
            "logged as what they are not; export again"
        )
    if remote.get("plan_sha256") and remote["plan_sha256"] != digest:
        return (
            f"{folder / 'results' / results_folder.ENVIRONMENT} says the launcher ran a plan of digest "
            f"{remote['plan_sha256'][:12]}, and {folder / 'plan.json'} is {digest[:12]}: the plan changed after "
            "it ran"
        )
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


def other_runner(exported: Plan, results: dict[str, TrialResult], path: Path) -> str | None:
    """Why lines a runner wrote cannot be the plan's: they name another runner than the one exported with it (a
    line of an older runner names none); None where every line that names one names the plan's."""
    if not exported.runner_sha256:
        return None
    for result in results.values():
        if result.runner_sha256 and result.runner_sha256 != exported.runner_sha256:
            return (
                f"{path}: trial {result.trial_id} was measured by runner {result.runner_sha256[:12]}, and the "
                f"plan was exported with runner {exported.runner_sha256[:12]} (key 'runner_sha256')"
            )
    return None


def outside_the_plan(exported: Plan, results: dict[str, TrialResult], built: list[dict], folder: Path) -> str | None:
    """Why lines brought back name what the plan does not hold: a result whose trial id is none of the plan's (a
    `../..` path among them), or a checkpoint the launcher built (`built`) whose folder is outside the export's
    `checkpoints/`; None where all are the plan's."""
    planned = {spec.trial_id for spec in exported.trials}
    for trial_id in results:
        if trial_id not in planned:
            return (
                f"{folder / 'results' / 'trials.jsonl'}: key 'trial_id' {trial_id!r} names no trial of the plan "
                "(a trial id is environment/model/bsN/variant/block, as plan.json lists them)"
            )
    for entry in built:
        where = PurePosixPath(str(entry.get("folder", "")))
        if where.is_absolute() or ".." in where.parts or where.parts[:1] != ("checkpoints",):
            return (
                f"{folder / 'results' / 'checkpoints.json'}: model {entry.get('model_id')!r} has key 'folder' "
                f"{str(where)!r}; a checkpoint's folder is checkpoints/<model> inside the export"
            )
    return None


def found_environments(selection: Selection, remote: dict, machine: str) -> dict[str, run_record.EnvironmentInfo]:
    """Each compared environment as the launcher found it on that machine: its own interpreter's package list
    (environment.json's `environments`; a launcher before they were recorded apart gave its own for all), the list's
    hash its key, its torch and transformers its pins (the project's pins do not apply there)."""
    own = remote.get("environments") or {}
    info = {}
    for entry in selection.environments:
        freeze = tuple((own.get(entry.label) or remote)["freeze"])
        pins = {
            name: version
            for name, version in (line.split("==", 1) for line in freeze)
            if name.lower() in ("torch", "transformers")
        }
        key = run_record.settings_key(journal.stable_hash(list(freeze)), entry.settings)
        info[entry.label] = run_record.EnvironmentInfo(
            entry.label, f"{entry.name} on {machine}", key, pins, freeze, entry.settings
        )
    return info


class WindowError(ValueError):
    """A folder that is not an exported plan's with its results back; the message names what is missing."""


WINDOW_FILES = {  # an exported plan's folder, its results back: what each file holds
    "plan.json": "the exported plan: every process, its trials and recipes",
    "export.json": "what the plan was exported with (invocation, suite, timing settings, the models)",
    "carried.json": "what was carried to the machine (checkpoints, the image, the harness)",
    "image.jpg": "the input image the processes used",
    "results/trials.jsonl": "one line per process that came back, with every raw sample",
    "results/environment.json": "the machine's Python and full package list",
    "results/checkpoints.json": "the checkpoints the processes loaded",
    "results/prime.jsonl": "the shared inductor cache's priming processes",
    "results/window.json": "the machine window's start, budget and stop",
    "results/finished.json": "which processes finished, for a resumed window",
    "ingested": "its tables, report and figures as `make ingest` made them (its own README)",
}


def window_readme(folder: Path) -> str:
    """The README's text for `folder`, an exported plan's folder with its results back (WindowError naming what is
    missing where it is not)."""
    missing = [name for name in ("plan.json", "export.json", "results/trials.jsonl") if not (folder / name).exists()]
    if missing:
        raise WindowError(f"{folder}: not an exported plan's folder, missing {', '.join(missing)}; nothing written")
    plan = read_json(folder / "plan.json")
    context = read_json(folder / "export.json")["context"]
    trials = read_jsonl(folder / "results/trials.jsonl")
    if not trials:
        raise WindowError(f"{folder}: results/trials.jsonl holds no process; nothing written")
    env = next((t["environment"] for t in trials if isinstance(t.get("environment"), dict)), {})
    started = [t["started_at"] for t in trials if t.get("started_at")]
    ended = [t["started_at"] + (t.get("wall_s") or 0) for t in trials if t.get("started_at")]
    first, last = (datetime.fromtimestamp(min(started), UTC), datetime.fromtimestamp(max(ended), UTC))
    statuses = collections.Counter(t.get("status", "?") for t in trials)
    summed_s = sum(t.get("wall_s") or 0 for t in trials)
    files = [f"- `{name}`: {what}" for name, what in WINDOW_FILES.items() if (folder / name).exists()]
    files += [f"- `results/{log.name}`: a log the machine wrote" for log in sorted((folder / "results").glob("*.log"))]
    lines = [
        f"# {folder.name}",
        "",
        f"An exported plan of suite `{context.get('suite')}` (invocation `{context.get('invocation_id')}`), exported "
        f"from compilebench at `{str(context.get('git_commit', '?'))[:12]}` and run by the launcher on "
        f"`{env.get('device_name', '?')}` (fingerprint `{env.get('machine_fingerprint', '?')}`) with torch "
        f"{env.get('torch_version', '?')} and transformers {env.get('transformers_version', '?')}.",
        "",
        f"Its processes ran {first:%Y-%m-%d %H:%M}–{last:%H:%M} UTC{'' if first.date() == last.date() else ' (+1 day)'}"
        f" ({summed_s:.0f} s of processes summed). {len(trials)} of the plan's {len(plan.get('trials', []))} trials "
        f"came back: " + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items())) + ".",
        "",
        "Files:",
        "",
        *files,
        "",
        f"Tables, report and figures from it: `make ingest FROM={folder.as_posix()}`, which wrote this README from the "
        "files above.",
        "",
    ]
    return "\n".join(lines)


def ingest(config: Config, folder: Path) -> None:
    """Results measured elsewhere (an exported plan run by the launcher) as runs: logged once, written as results.
    Refused, with nothing logged, when the plan was edited since export or since it ran, a line is another plan's, or
    a result lacks the samples its status says it has."""
    exported = read_plan(folder / "plan.json")
    problem = results_folder.output_problem(exported, folder / "results")
    if problem:
        raise RecordError(f"{problem}; nothing ingested")
    added = results_folder.read_added(folder / "results" / results_folder.ADDED_TRIALS)  # blocks its loop added there
    planned_processes = len(processes(exported.trials))
    exported = replace(exported, trials=exported.trials + added)
    saved = read_json(folder / EXPORT_CONTEXT)
    remote = read_json(folder / "results" / results_folder.ENVIRONMENT)
    problem = plan_problem(folder, saved, remote)
    if problem:
        raise RecordError(f"{problem}; nothing ingested")
    results = results_folder.read_results(folder / "results" / "trials.jsonl", plan_digest(folder / "plan.json"))
    built = read_json(folder / "results" / "checkpoints.json")  # what the launcher built there, by recipe
    checkpoints = built + (read_json(folder / CARRIED_CHECKPOINTS) if (folder / CARRIED_CHECKPOINTS).exists() else [])
    problem = (
        outside_the_plan(exported, results, built, folder)
        or unmeasured(list(exported.trials), results, folder / "results" / "trials.jsonl")
        or other_runner(exported, results, folder / "results" / "trials.jsonl")
    )
    if problem:
        raise RecordError(f"{problem}; nothing ingested")
    missing = [spec.trial_id for spec in exported.trials if spec.trial_id not in results]
    if len(missing) == len(exported.trials):
        raise FileNotFoundError(f"{folder / 'results' / 'trials.jsonl'} holds no result of this plan")
    ended = folder / "results" / results_folder.FINISHED
    finished = ended.exists() or exported.adaptive is None  # no loop: as it stands
    not_run = read_json(ended).get("processes_not_run", 0) if ended.exists() else 0  # ended by `runner.pyz --end`
    if missing:
        why = "the plan was ended with `runner.pyz --end`" if not_run else "rerun the runner there to finish"
        LOGGER.warning("%d of %d trials have no result (%s): %s", len(missing), len(exported.trials), why, missing[:5])
    not_logged = (
        None
        if finished
        else (
            f"the launcher has not finished this plan ({len(exported.trials) - len(missing)} of "
            f"{len(exported.trials)} trials have results, and its loop may still add blocks): nothing is logged to "
            f"MLflow until it has; run it again there, bring {folder / 'results'} back and ingest again"
        )
    )
    selection = Selection.from_dict(saved["selection"])
    first = next(result for result in results.values() if result.environment)
    machine = saved["context"]["machine"] or first.environment.get("hostname", "remote")
    run_context = replace(Context.from_dict(saved["context"]), machine=machine)
    info = found_environments(selection, remote, machine)
    tracker = (
        None
        if not_logged
        else tracking.Tracker(
            config.paths.tracking_uri,
            exported.invocation_id,
            recording.parent_name(selection, machine) + " (ingested)",
            recording.parent_params(selection, config.benchmark, config.timing(), run_context, first.environment),
            {
                "suite": selection.suite,
                "machine": machine,
                "machine_fingerprint": first.environment.get("machine_fingerprint"),
                "environments": ",".join(info),
                "ingested_from": str(folder),
            },
        )
    )
    measured = [spec for spec in exported.trials if spec.trial_id in results]  # the plan as far as it ran
    recorder = recording.Recorder(measured, info, recording.model_infos(checkpoints), run_context, tracker, None)
    for specs in processes(measured):
        recorder(specs, [results[spec.trial_id] for spec in specs], resumed=True)
    labels = {
        label: {"name": e.name, "key": e.key, "pins": e.pins, "settings": e.settings} for label, e in info.items()
    }
    extra = {
        "ingested_from": str(folder),
        "trials": len(exported.trials),
        "trials_missing": len(missing),
        "planned_processes": planned_processes,
        "labels": tuple(info),
        "environments": labels,
        "targets": tuple(reached(exported, recorder)),
        "processes_not_run": not_run,
        "not_logged": not_logged or "",
    }
    recording.finish(config.paths, recorder.records(), exported.invocation_id, tracker, extra)
    readme = folder / README
    if not readme.exists() or NOT_RUN_YET in readme.read_text().splitlines():  # the export's own: results are back
        write_atomic(readme, window_readme(folder))
    if not_logged:
        LOGGER.warning("results written to %s; %s", config.paths.results, not_logged)
