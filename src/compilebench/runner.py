"""The runner: the one file that travels to another machine, and its command line there.

    python -m compilebench.runner build DIR        # DIR/runner.pyz from this commit's code; prints its SHA-256
    python runner.pyz PLAN.json OUT [--prime N] [--cpus 2-9] [--stop-after-min M] [--python ENV=PATH ...]
    python runner.pyz PLAN.json OUT --end          # the plan ends as it stands: no further window runs it
    python runner.pyz PLAN.json OUT --check-on-cpu # its first trial once on this CPU, in a scratch folder
    python runner.pyz --overlay DIR WHEEL [...]    # a second stack: carried wheels over this interpreter's packages

`runner.pyz` is a zipapp of `compilebench/records/` (the formats and their reading and writing),
`compilebench/harness/` (what a trial process imports, and the launcher) and `compilebench/analysis/` (the loop that
adds blocks), with this module as its entry point. The same code gives the
same bytes (entries in order, timestamps and modes fixed), so its SHA-256 names the code: an exported plan records it
(`Plan.runner_sha256`), the runner refuses a plan that names another, and every result line and the machine's
environment record carry it, so every run ingested from it says which code measured it.

On the machine that runs a plan it builds the plan's checkpoints (random weights, published architecture), runs every
trial with this interpreter (`--python ENV=PATH` for another environment's) and appends each result to
OUT/trials.jsonl as it completes: a killed run resumes where it stopped. Then, unless `--plan-only`, it runs the
pipeline's own adaptive loop on the results (analysis/adaptive.py), within the plan's budget or `--budget-min M`,
each added block written to OUT/added.jsonl before it runs. Needs torch and transformers (and the numpy and scipy
they bring); nothing of the pipeline's tools.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import sys
import tempfile
import time
import zipfile
from dataclasses import replace
from pathlib import Path

from compilebench.harness import launcher, overlay
from compilebench.harness.groups import end_trials_on_signal
from compilebench.harness.results_folder import (
    ADDED_TRIALS,
    FINISHED,
    machine_problem,
    output_folder,
    output_problem,
    plan_progress,
    read_results,
)
from compilebench.harness.trial_process import run_trial_process
from compilebench.records.formats import (
    CACHE_COLD,
    CURRENT,
    KIND_PAIRED,
    STATUS_OK,
    Plan,
    RecordError,
    TrialResult,
    TrialSpec,
)
from compilebench.records.reading import read_plan
from compilebench.records.writing import append_lines, write_json

LOGGER = logging.getLogger(__name__)

RUNNER = "runner.pyz"  # its name in an exported plan's folder
PACKAGES = ("records", "harness", "analysis")  # what travels of compilebench, besides its __init__ and this module
ENTRY = "from compilebench.runner import main\n\nmain()\n"  # the zipapp's __main__.py
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # every entry's timestamp: the same code, the same bytes


def archive() -> bytes:
    """The runner's bytes, from the compilebench package this module belongs to."""
    package = Path(__file__).resolve().parent
    members = [("compilebench/__init__.py", package / "__init__.py"), ("compilebench/runner.py", package / "runner.py")]
    for name in PACKAGES:
        for path in sorted((package / name).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".yaml"):
                members.append((f"compilebench/{path.relative_to(package).as_posix()}", path))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        for name, content in [("__main__.py", ENTRY.encode()), *((name, path.read_bytes()) for name, path in members)]:
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zipped.writestr(info, content, compresslevel=9)
    return buffer.getvalue()


def digest_of(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def build(folder: Path, content: bytes | None = None) -> str:
    """`folder`/runner.pyz (`content`, or this code's archive); its SHA-256."""
    content = archive() if content is None else content
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RUNNER).write_bytes(content)
    return digest_of(content)


def own_digest() -> str:
    """This runner's SHA-256 where it runs from its file (`python runner.pyz`); "" where it runs from a source tree."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if parent.is_file() and zipfile.is_zipfile(parent):
            return digest_of(parent.read_bytes())
    return ""


def run_plan_adaptively(plan: Plan, trials: list[TrialSpec], run, out: Path, budget_min: float | None) -> None:
    """The plan's trials, then the pipeline's own loop (adaptive.measure) on this machine's results: more blocks where
    the intervals are widest, within the plan's budget (or `budget_min`). Each added block's specs are appended to
    out/added.jsonl before it runs, so a later window resumes it and ingest knows it."""
    from compilebench.analysis import adaptive, run_record, runs

    settings, context, labels = plan.adaptive.settings, plan.adaptive.context, list(plan.adaptive.labels)
    if budget_min is not None:
        settings = replace(settings, budget_min=budget_min)
    environments = {label: run_record.EnvironmentInfo(label, label, "", {}) for label in labels}
    models = {spec.model.model_id: run_record.ModelInfo("", "", None) for spec in trials}

    def records_of(specs: list[TrialSpec], results: dict[str, TrialResult]) -> list[run_record.RunRecord]:
        return runs.run_records(specs, results, environments, models, context)

    def added(specs: list[TrialSpec]) -> None:
        append_lines(out / ADDED_TRIALS, [json.dumps(spec.to_dict()) for spec in specs])

    adaptive.measure(trials, labels, settings, run, records_of, added=added)


def end(plan: Plan, out: Path) -> None:
    """The plan ends with the processes that have results: OUT/finished.json names how many will not run, so
    `benchmark --ingest` logs its runs with the processes they have. Running the plan again on OUT resumes it."""
    if (out / FINISHED).exists():
        print(f"runner: the plan has finished on {out} already ({FINISHED}): nothing to end")
        return
    finished, total, _ = plan_progress(plan, out)
    if not finished:
        raise SystemExit(f"runner --end: no process of the plan has results in {out}: nothing to end (run it first)")
    write_json(
        out / FINISHED,
        {
            "finished_at": time.time(),
            "trials": len(read_results(out / "trials.jsonl")),
            "ended": "runner --end",
            "processes_not_run": total - finished,
        },
    )
    print(
        f"runner: the plan ends on {out} with {finished} of {total} processes; {total - finished} will not run "
        "(`benchmark --ingest` logs it now)"
    )


CPU_CHECK = {  # --check-on-cpu's timing: one brief pass, no device memory cap
    "device": "cpu",
    "min_iters": 2,
    "min_time_s": 0.0,
    "warmup_iters": 1,
    "warmup_s": 0.0,
    "memory_limit_mib": 0.0,
}


def check_on_cpu(plan: Plan, plan_path: Path, python: str, timeout_s: float) -> TrialResult:
    """The plan's first trial, once, on this machine's CPU: its checkpoint built from its recipe and its process run
    by this runner, as a window would run it first, with the device set to cpu and the timing brief, on an empty
    cache, in a scratch folder (nothing is written beside the plan). Run where the plan was made, before a GPU is
    lent, it shows that the plan, its recipes, its image and its runner work together."""
    first, home = plan.trials[0], plan_path.resolve().parent
    recipes = tuple(recipe for recipe in plan.recipes if recipe.model_id == first.model.model_id)
    if not recipes and not (home / first.model.checkpoint).is_dir():
        raise RecordError(
            f"the plan's first trial is of {first.model.model_id}, which has neither a checkpoint recipe in the plan "
            f"nor a checkpoint folder beside it ({first.model.checkpoint}): export the plan again"
        )
    with tempfile.TemporaryDirectory(prefix="compilebench-cpu-check-") as scratch:
        root = Path(scratch)
        built = launcher.build_checkpoints(replace(plan, recipes=recipes), root)
        failed = [entry["error"] for entry in built if entry.get("error")]
        if failed:
            raise RecordError(f"the checkpoint of {first.model.model_id} was not built from its recipe: {failed[0]}")
        folder = root / recipes[0].folder if recipes else home / first.model.checkpoint
        spec = replace(
            first,
            trial_id=f"{first.trial_id}/cpu-check",
            model=replace(first.model, checkpoint=str(folder)),
            image=str(home / first.image),
            cache=CACHE_COLD,
            kind=KIND_PAIRED,
            process_id="",
            timed=True,
            timing=replace(first.timing, **CPU_CHECK),
        )
        return run_trial_process(spec, python, root / "work", root / "cache", timeout_s)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=RUNNER,
        description="Run an exported plan's trials on this machine.",
        epilog=f"{RUNNER} --overlay DIR WHEEL [...]: a second stack, the carried wheels over this interpreter's "
        "packages in DIR; prints DIR's interpreter and what it imports (its --python ENV=DIR/bin/python)",
    )
    parser.add_argument("plan", type=Path, help="plan.json written by `compilebench.benchmark --export`")
    parser.add_argument("out", type=Path, help="folder for trials.jsonl and checkpoints.json")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per trial, seconds")
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="ENV=PATH",
        help="interpreter of an environment other than `current` (this one)",
    )
    parser.add_argument(
        "--prime", type=int, default=0, metavar="N", help="first compile every run, N at a time, into one shared cache"
    )
    parser.add_argument(
        "--budget-min",
        type=float,
        default=None,
        metavar="M",
        help="after the plan, add blocks where intervals are widest while they fit in M minutes of "
        "processes per environment (the plan's own budget if not given)",
    )
    parser.add_argument("--plan-only", action="store_true", help="run the plan's trials only: no blocks added")
    parser.add_argument(
        "--cpus",
        default=None,
        metavar="LIST",
        help="pin every timing process to these cores (e.g. 2-9), a torch thread per core; the prime "
        "keeps the whole machine",
    )
    parser.add_argument(
        "--stop-after-min",
        type=float,
        default=None,
        metavar="M",
        help="start no process that would end more than M minutes after the runner started (by "
        "the longest of its model so far); run again later to resume",
    )
    parser.add_argument("--end", action="store_true", help="end the plan as it stands: no further window runs it")
    parser.add_argument(
        "--check-on-cpu",
        action="store_true",
        help="run the plan's first trial once on this machine's CPU, briefly, in a scratch folder (before a GPU is "
        "lent: the plan, its recipes, image and runner work together); exit 0 if it ended ok",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--overlay"]:
        sys.argv = [f"{RUNNER} --overlay", *argv[1:]]
        overlay.main()
        return
    if argv[:1] == ["build"]:
        if len(argv) != 2:
            raise SystemExit("usage: python -m compilebench.runner build DIR")
        print(build(Path(argv[1])))
        return
    parser = arguments()
    args = parser.parse_args(argv)
    if args.stop_after_min is not None and not args.stop_after_min > 0:
        parser.error(f"--stop-after-min must be a positive number of minutes, got {args.stop_after_min}")
    try:
        pinned = launcher.pinned_slot(args.cpus)
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        plan = read_plan(args.plan)
    except RecordError as error:
        parser.error(str(error))
    mine = own_digest()
    if plan.runner_sha256 and mine and mine != plan.runner_sha256:
        parser.error(
            f"{args.plan} was exported with runner {plan.runner_sha256[:12]}, and this runner is "
            f"{mine[:12]}: run the {RUNNER} exported beside the plan"
        )
    if any("=" not in item for item in args.python):
        parser.error(f"--python takes ENV=PATH (an environment's name, its interpreter), got {args.python}")
    pythons = {CURRENT: sys.executable, **dict(item.split("=", 1) for item in args.python)}
    if args.check_on_cpu:
        if not plan.trials:
            parser.error(f"--check-on-cpu: {args.plan} holds no trial to check")
        first = plan.trials[0]
        if first.environment not in pythons:
            parser.error(f"--check-on-cpu: the plan's first trial is of {first.environment}: give its --python")
        try:
            result = check_on_cpu(plan, args.plan, pythons[first.environment], args.timeout_s)
        except RecordError as error:
            parser.error(str(error))
        said = f"{first.model.label} bs{first.batch_size} {first.variant.name} ({first.environment})"
        if result.status != STATUS_OK:
            sys.exit(f"check on the CPU: {said} ended {result.status}: {str(result.error or '')[-1500:]}")
        print(f"check on the CPU: {said} ended ok (compiled in {result.compile_s or 0:.1f} s): the plan runs")
        return
    out = output_folder(args.plan, args.out)
    problem = output_problem(plan, out)
    if args.end:
        if problem:
            parser.error(problem)
        end(plan, out)
        return
    problem = (
        launcher.path_problem(args.plan.resolve().parent, out)
        or launcher.plan_problem(plan, pythons, args.prime)
        or problem
        or machine_problem(plan, out, pythons)
    )
    if problem:
        parser.error(problem)
    end_trials_on_signal()
    loop = None if plan.adaptive is None or args.plan_only else run_plan_adaptively
    launcher.launch(
        plan,
        args.plan,
        out,
        pythons,
        pinned,
        args.timeout_s,
        args.prime,
        args.stop_after_min,
        args.budget_min,
        loop,
        mine,
    )


if __name__ == "__main__":
    main()
