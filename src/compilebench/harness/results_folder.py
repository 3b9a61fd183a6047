"""A plan's results folder (OUT): what the launcher appends there and a later window, `window` and ingest read back.

trials.jsonl holds every trial's result line (checked as it is read: reading.read_result_lines), added.jsonl the
blocks the plan's loop added, environment.json the interpreter, packages and plan of the last launcher that ran
there, finished.json that the plan and its loop ended. A folder holds one plan's results, measured on one machine and
stack: `output_problem` and `machine_problem` say why a launcher must not continue there. Standard library only.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

from compilebench.harness import fingerprint
from compilebench.harness.trial_process import trial_environment
from compilebench.records.formats import Plan, TrialResult, TrialSpec, processes
from compilebench.records.reading import read_result_lines
from compilebench.records.writing import append_lines

LOGGER = logging.getLogger(__name__)


ADDED_TRIALS = "added.jsonl"  # beside an exported plan's results: the specs of the blocks its loop added


FINISHED = "finished.json"  # beside them once the plan and its loop have ended: no block will be added any more


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def json_lines(path: Path) -> list[dict]:
    """The JSON objects of a file's lines; a torn one (a kill, a copy taken while it was written) is left out."""
    parsed = []
    for line in _lines(path):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return parsed


def append_results(path: Path, results: list[TrialResult]) -> None:
    """A process's result lines, in one write, on disk before the next process starts (files.append_lines)."""
    append_lines(path, [json.dumps(result.to_dict()) for result in results])


def read_results(path: Path, plan_sha256: str | None = None) -> dict[str, TrialResult]:
    """Results already in a trials.jsonl, by trial id, each line checked (reading.read_result_lines: with
    `plan_sha256`, a line of another plan is refused; a torn last line from a kill is left out; a line written again
    for a process run again replaces the earlier)."""
    return {result.trial_id: result for result in read_result_lines(path, plan_sha256)} if path.exists() else {}


def read_added(path: Path) -> tuple[TrialSpec, ...]:
    """The specs of the blocks an earlier run of this plan's loop added (a torn last line from a kill is ignored)."""
    added = []
    for raw in json_lines(path):
        try:
            added.append(TrialSpec.from_dict(raw))
        except (ValueError, TypeError):
            continue
    return tuple(added)


def plan_progress(plan: Plan, out: Path) -> tuple[int, int, int]:
    """Of the processes of `plan` and the blocks its loop added in `out`: how many have a result for every trial,
    how many there are, how many of them are added blocks."""
    added = read_added(out / ADDED_TRIALS)
    done = read_results(out / "trials.jsonl")
    groups = processes(list(plan.trials) + list(added))
    finished = sum(all(spec.trial_id in done for spec in group) for group in groups)
    return finished, len(groups), len(processes(list(added)))


ENVIRONMENT = "environment.json"  # in OUT: the interpreter and packages of the last run, and the plan it ran


def output_folder(plan_path: Path, out: Path) -> Path:
    """Where the launcher writes: OUT, relative to the plan's folder (where it works) unless absolute."""
    return out if out.is_absolute() else plan_path.resolve().parent / out


def results_plan(out: Path) -> str | None:
    """The invocation id of the plan whose results OUT holds, as the launcher recorded it; None where no launcher
    ran there (or one from before the record)."""
    try:
        return json.loads((out / ENVIRONMENT).read_text()).get("invocation_id")
    except (OSError, ValueError, AttributeError):
        return None


def output_problem(plan: Plan, out: Path) -> str | None:
    """Why `plan` must not run into OUT (it holds another plan's results, which a resume would take for its own
    wherever trial ids agree), or None."""
    owner = results_plan(out)
    if owner is None or owner == plan.invocation_id:
        return None
    return (
        f"{out} holds results of another plan (invocation {owner}; this plan is {plan.invocation_id}): a plan's "
        "results go in a folder of their own"
    )


def this_machine(python: str, device: str) -> dict[str, str] | None:
    """What a trial of `python` on `device` would record of this machine and its stack (fingerprint.collect, in a
    process of its own: the interpreter's imports and, on a GPU, CUDA's start); None, said, where that fails."""
    command = [python, "-m", "compilebench.harness.fingerprint", device]
    try:
        done = subprocess.run(
            command, env=trial_environment(None), capture_output=True, text=True, timeout=300, check=True
        )
        return json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        LOGGER.warning(
            "could not read this machine's record with %s (%s); its results are checked at ingest", command, error
        )
        return None


def measured_elsewhere(
    specs: list[TrialSpec], done: dict[str, TrialResult], pythons: dict[str, str], device: str
) -> str | None:
    """Why these results must not be continued here: an environment's were measured on another machine or software
    stack (another kind of GPU, another torch) than a trial of it on `device` would be here, and a run pools the
    processes of one only; None where nothing ran yet or this machine is the one they ran on."""
    recorded: dict[str, dict[str, dict]] = {}  # environment -> process -> its record (a timing process's arms: one)
    for spec in specs:
        result = done.get(spec.trial_id)
        if result is not None and result.environment:
            recorded.setdefault(spec.environment, {})[spec.process] = result.environment
    for label, records in recorded.items():
        here = this_machine(pythons[label], device)
        found = fingerprint.mixture(list(records.values()))
        if here is None or fingerprint.machine_and_stack(here) in found:
            continue
        return (
            f"results of environment {label!r} measured elsewhere ({fingerprint.counted(found)}), and this "
            f"machine is {fingerprint.described(here)}: a run pools the processes of one machine and stack only"
        )
    return None


def machine_problem(plan: Plan, out: Path, pythons: dict[str, str]) -> str | None:
    """Why this machine must not continue the plan whose results OUT holds (`measured_elsewhere`); None where it may."""
    specs = [*plan.trials, *read_added(out / ADDED_TRIALS)]
    problem = measured_elsewhere(specs, read_results(out / "trials.jsonl"), pythons, plan.trials[0].timing.device)
    if problem is None:
        return None
    return (
        f"{out} holds {problem}. Continue the plan on a machine like that one, or export it again into a folder "
        "of its own for this one"
    )
