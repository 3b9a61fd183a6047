"""Why it changed: one profiled process per environment for each compiled cell a comparison found changed, A beside B.

    python -m compilebench.explain                       # every changed compiled cell of the last comparison
    python -m compilebench.explain --b torch-2.14.1      # only its steps against that environment
    python -m compilebench.explain --cell "microsoft/resnet-50 1 default"   # this cell, changed or not (repeatable)
    python -m compilebench.explain --aa                  # B profiled twice: an A/A beside each A/B
    python -m compilebench.explain --cold                # on an empty cache: a cold compile's phases, A beside B
    make explain [B=NAME] [CELL="microsoft/resnet-50 1 default"] [AA=1] [COLD=1]   # the same, under the pipeline lock

Reads the last comparison (paths.comparison, paths.results, paths.selection) and runs, after and apart from its
timing blocks, a paired trial per side (A, then B) with `--profile` (harness/profiling.py) in that environment's own
interpreter: briefly timed, then the compiled call profiled in rounds with each generated kernel named, dynamo's
compile-time table and the generated code kept. It compiles on the comparison's warm inductor cache, where the
benchmark left it (under paths.journal, until the next benchmark: nothing is built again), unless the cell's cold
compile changed or --cold asks, then on an empty cache, whose compile-time table is a cold compile's. A cell is
explained where its compiled latency, speedup or cold or warm compile got a direction word (faster, slower), for each
step that did: B against A, and in a series each step (the first stack against the baseline, every later one against
the one before). Nothing changed: nothing runs (`make compare` runs this after every comparison). With --aa, B runs a
second profiled process: a category that moved no further from A than B's two processes differ is not called moved.

Writes paths.explain: per cell and side `trace.json` (Chrome trace format: Perfetto, chrome://tracing), `profile.json`,
`result.json` and `code/`, and `report.md` (report/explain.py: the categories A | B | B - A, the kernels that moved
most, the compile-time table, what the compiler made); each side's folder goes to its run in MLflow (`explain/`).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from compilebench import tracking
from compilebench.analysis import compare, explain
from compilebench.benchmark import recording
from compilebench.config import Config, ConfigError, stage_config
from compilebench.environments import venvs
from compilebench.harness import groups, trial_process
from compilebench.harness.launcher import WARM_CACHES
from compilebench.harness.names import trial_stem
from compilebench.records.formats import (
    CACHE_COLD,
    CACHE_SHARED,
    CACHE_WARM,
    EAGER,
    KIND_PAIRED,
    STATUS_OK,
    RecordError,
    TrialSpec,
)
from compilebench.records.reading import read_json, read_jsonl, read_selection
from compilebench.records.writing import write_atomic, write_json
from compilebench.report.explain import report
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)
AGAIN = " again"  # a second profiled process of B (--aa): the A/A the categories' moves are judged beside
EXPLAINED = ("compiled_latency", "speedup", "compile_cold", "compile_warm")  # a direction here: the cell is explained
COLD = "compile cold"  # a target's word that wants its compile-time table from an empty cache
BRIEF = {"min_iters": 3, "min_time_s": 0.5, "warmup_s": 0.5}  # the profiled trial's own timing: the comparison's
#                                                               timing blocks measured the latency
DIRECTIONS = ("faster", "slower", "more", "less", "higher", "lower")


class ExplainError(RuntimeError):
    """Nothing to explain as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    """A compiled cell and the step it is explained for: baseline -> candidate, and why (the words that moved)."""

    model_id: str
    label: str  # the model's short label
    batch_size: int
    variant: str
    baseline: str
    candidate: str
    why: tuple[str, ...]

    @property
    def cell(self) -> tuple[str, int, str]:
        return self.model_id, self.batch_size, self.variant

    @property
    def slug(self) -> str:
        return f"{self.model_id.replace('/', '--')}-bs{self.batch_size}-{self.variant}"


def _words(row: compare.Comparison) -> tuple[str, ...]:
    found = []
    for metric in EXPLAINED:
        judged = row.judged.get(metric)
        if judged is not None and judged.verdict in DIRECTIONS:
            r = judged.ratio
            found.append(f"{metric.replace('_', ' ')} {judged.verdict} {r.value:.3f} [{r.low:.3f}, {r.high:.3f}]")
    return tuple(found)


def targets(
    compared: list[compare.Comparison], candidate: str | None, cells: list[tuple[str, int, str]], labels: list[str]
) -> list[Target]:
    """What to explain: the asked cells (each against the baseline, or `candidate`), else every compiled cell with a
    direction word in EXPLAINED, per step (of `candidate` only, where given)."""
    found: dict[tuple, Target] = {}
    steps = set(itertools.pairwise(labels))
    for row in compared:
        if row.variant == EAGER or (candidate and row.candidate != candidate):
            continue
        if not cells and (row.baseline, row.candidate) not in steps:
            continue  # in a series, its steps: a change from the baseline to a later stack is made of them
        cell = (row.model_id, int(row.batch_size), row.variant)
        words = _words(row)
        if (cells and cell in cells and row.reference == compare.FIRST) or (not cells and words):
            target = Target(
                row.model_id, row.label, int(row.batch_size), row.variant, row.baseline, row.candidate, words
            )
            found.setdefault((cell, row.baseline, row.candidate), target)
    missing = [cell for cell in cells if not any(key[0] == cell for key in found)]
    if missing:
        raise ExplainError(
            f"no compiled cell {missing[0]} in the last comparison of {', '.join(labels)}"
            + (f" against {candidate}" if candidate else "")
            + "; its cells are: "
            + ", ".join(sorted({f"{r.model_id} {r.batch_size} {r.variant}" for r in compared if r.variant != EAGER}))
        )
    return list(found.values())


def profiled_spec(trials: list[TrialSpec], target: Target, label: str, cold: bool) -> tuple[TrialSpec, str]:
    """The cell's trial in `label` as one briefly timed paired trial of its own, on an empty cache (`cold`) or the
    comparison's warm one (a comparison on the user's shared cache: that cache); and the key of the comparison's warm
    cache."""
    model, batch, variant = target.cell
    for spec in trials:
        if (spec.environment, spec.model.model_id, spec.batch_size, spec.variant.name) == (
            label,
            model,
            batch,
            variant,
        ):
            warm = CACHE_SHARED if spec.cache == CACHE_SHARED else CACHE_WARM  # the user's cache, or ours
            profiled = replace(
                spec,
                trial_id=f"{label}/{target.slug}/explain",
                kind=KIND_PAIRED,
                process_id="",
                replicate=0,
                cache=CACHE_COLD if cold else warm,
                timed=True,
                timing=replace(spec.timing, **BRIEF),
            )
            return profiled, spec.warm_cache_key
    raise ExplainError(
        f"the plan has no trial of {model} bs{batch} {variant} in {label}: was params.yaml changed "
        "since the comparison ran? Run the comparison again, then explain it"
    )


def run_side(spec: TrialSpec, python: str, folder: Path, timeout_s: float, warm: Path | None = None) -> dict:
    """One profiled process, on the `warm` cache where given (in place: inductor's keys hold its path), the user's
    (a shared-cache spec) or an empty one; its profile folder kept as `folder` (trace.json, profile.json, code/), its
    result in `folder`/result.json. Returns the result's row."""
    with tempfile.TemporaryDirectory(prefix="compilebench-explain-") as scratch:
        work, empty = Path(scratch) / "work", Path(scratch) / "cache"
        empty.mkdir()
        cache = None if spec.cache == CACHE_SHARED else (warm or empty)
        began = time.monotonic()
        result = trial_process.run_trial_process(spec, python, work, cache, timeout_s, "--profile")
        LOGGER.info("explain: %s ran %.0f s: %s", spec.trial_id, time.monotonic() - began, result.status)
        if folder.exists():
            shutil.rmtree(folder)
        profiled = next(work.glob(f"{trial_stem(spec.trial_id)}*.profile"), None)  # beside its OUT.json
        if profiled is not None and profiled.is_dir():
            shutil.copytree(profiled, folder)
        else:
            folder.mkdir(parents=True)
            log = next(iter(work.glob("*.log")), None)
            (folder / "trial.log").write_text(log.read_text() if log else "")
        row = {**result.to_dict(), "cache": spec.cache}  # what it compiled on: cold (empty) | warm | shared
        write_json(folder / "result.json", row)
        return row


def _run_of(rows: list[dict], label: str, target: Target) -> dict:
    for row in rows:
        if (row["environment"], row["model_id"], int(row["batch_size"]), row["variant"]) == (label, *target.cell):
            return row
    return {}


def measured_latency(rows: list[dict], label: str, target: Target) -> float | None:
    """The cell's compiled latency (median, ms) in the comparison's runs."""
    return _run_of(rows, label.removesuffix(AGAIN), target).get("latency_ms_median")


def run_uid(rows: list[dict], label: str, target: Target) -> str | None:
    """The uid of the cell's run in `label`: what finds it in MLflow."""
    return _run_of(rows, label, target).get("run_uid")


def attach(config: Config, run_uids: dict[str, str | None], folders: dict[str, Path]) -> None:
    """Each side's folder as artifacts (`explain/<cell>`) of its run in MLflow; a store that cannot be reached is
    said and skipped: the files stand beside the report."""
    try:
        client = tracking.client(config.paths.tracking_uri)
        experiment = tracking.experiment_id(client, tracking.EXPERIMENT)
        for key, folder in folders.items():
            uid = run_uids.get(key)
            run_id = tracking.find_run(client, experiment, tracking.RUN_UID_TAG, uid) if uid else None
            if run_id:
                client.log_artifacts(run_id, str(folder), f"explain/{folder.parent.name}")
    except Exception as error:  # the store is an extra here
        LOGGER.warning("explain: not attached to MLflow (%s); the files are in %s", error, config.paths.explain)


def summary(target: Target, sides: dict[str, Any], latency: dict[str, float | None], margin: float) -> dict:
    """A target's line of explain.json: the step and cell, each side's measured latency, whether both sides were
    profiled, and the categories that moved (what a bisect's report names beside the step it pinned)."""
    a, b = sides[target.baseline], sides[target.candidate]
    again = sides.get(f"{target.candidate}{AGAIN}")
    profiled = isinstance(a, explain.Side) and isinstance(b, explain.Side)
    moved = explain.moved(a, b, margin, again if isinstance(again, explain.Side) else None) if profiled else []
    return {
        "target": target.__dict__,
        "latency_ms": latency,
        "profiled": profiled,
        "moved": [asdict(shift) for shift in moved],
        "folder": target.slug,  # its sides' files, beside report.md
    }


def parse_cell(text: str) -> tuple[str, int, str]:
    parts = text.split()
    if len(parts) != 3 or not parts[1].isdigit():
        raise ExplainError(f"--cell takes 'MODEL BATCH VARIANT', e.g. 'microsoft/resnet-50 1 default'; got {text!r}")
    return parts[0], int(parts[1]), parts[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--b", metavar="NAME", help="only the steps to this compared environment")
    parser.add_argument(
        "--cell",
        action="append",
        default=[],
        metavar="'MODEL BATCH VARIANT'",
        help="explain this compiled cell against the baseline, changed or not (repeatable)",
    )
    parser.add_argument("--aa", action="store_true", help="profile B twice: an A/A beside each A/B (one process more)")
    parser.add_argument(
        "--cold", action="store_true", help="compile on an empty cache: a cold compile's phases (minutes a side)"
    )
    args = parser.parse_args()
    config = stage_config(compiles=True)
    paths = config.paths
    try:
        cells = [parse_cell(text) for text in args.cell]
        info = RunInfo.read(paths.run_info)
        labels = list(info.labels)
        if args.b and args.b not in labels[1:]:
            raise ExplainError(
                f"--b {args.b}: the last comparison compared {', '.join(labels)}; name one after "
                f"the baseline {labels[0] if labels else ''}"
            )
        import pandas as pd

        compared = [compare.Comparison.read(r) for r in pd.read_csv(paths.comparison).to_dict("records")]
        chosen = targets(compared, args.b, cells, labels)
        selection = read_selection(paths.selection)
        rows = read_jsonl(paths.results)
    except FileNotFoundError as error:
        LOGGER.error("explain: no comparison to explain (%s): run `make compare B=NAME` first", error.filename)
        sys.exit(2)
    except (ExplainError, ConfigError, RecordError, OSError, ValueError) as error:
        LOGGER.error("explain: %s", error)
        sys.exit(2)
    if not chosen:
        LOGGER.info("explain: no compiled cell of the last comparison changed; nothing to explain (--cell asks)")
        return
    groups.end_trials_on_signal()  # a stopped explain leaves no profiled trial running behind it
    trials = recording.plan_trials(config.benchmark, config.timing(), selection, paths.image)
    stacks = venvs.stacks(selection.environments, Path.cwd(), Path(paths.environments))
    out = Path(paths.explain)
    out.mkdir(parents=True, exist_ok=True)
    explained = []
    for target in chosen:
        sides, uids, folders = {}, {}, {}
        runs = [(target.baseline, target.baseline), (target.candidate, target.candidate)]
        runs += [(f"{target.candidate}{AGAIN}", target.candidate)] if args.aa else []
        cold = args.cold or any(word.startswith(COLD) for word in target.why)
        for side, label in runs:
            folder = out / target.slug / side.replace(" ", "-")
            spec, key = profiled_spec(trials, target, label, cold)
            warm = None if spec.cache != CACHE_WARM else Path(paths.journal) / WARM_CACHES / key
            if warm is not None and not warm.is_dir():
                LOGGER.warning("explain: no warm cache of %s kept (%s): it compiles on an empty one", key, warm)
                spec, warm = replace(spec, cache=CACHE_COLD), None
            row = run_side(spec, stacks[label].python, folder, config.runner.trial_timeout_s, warm)
            folders[side], uids[side] = folder, run_uid(rows, label, target)
            profile = folder / "profile.json"
            ok = row["status"] == STATUS_OK and profile.exists()
            sides[side] = explain.side_of(side, read_json(profile), row.get("compile_s"), spec.cache) if ok else row
        explained.append((target, sides, {label: measured_latency(rows, label, target) for label in sides}))
        attach(config, uids, folders)
    text = report(explained, config.margin)
    write_atomic(out / "report.md", text)
    write_json(out / "explain.json", [summary(*entry, config.margin) for entry in explained])
    print(text)
    LOGGER.info("explain: %s", out / "report.md")


if __name__ == "__main__":
    main()
