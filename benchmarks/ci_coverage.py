"""How often does one invocation's 95% CI contain the value pooled over many invocations of the same cell?

    python benchmarks/ci_coverage.py                          # ResNet-50 bs1 `freezing`, 8 invocations x 3 processes
    python benchmarks/ci_coverage.py --invocations 10 --variant default --out coverage.json
    python benchmarks/ci_coverage.py --results a/runs.jsonl b/runs.jsonl ...   # invocations already measured

Each invocation is what `benchmark.replicates` fresh processes give compilebench for one run: per process, eager and
compiled calls interleaved; across processes, the between-process 95% CI (stats.speedup_estimate, median_estimate).
The pooled value is the same estimator over every process of every invocation of that cell. Coverage = the share of
invocations whose CI contains it (target >= 90%). For contrast, the within-process bootstrap CI of each
invocation's first process (what a single process can say about itself) is scored the same way.

Live (the default): the invocations run one after another, as repeated `make run`s would, on one warm inductor cache
(compile time is not what is measured here). `--results`: every compiled run of the given `runs.jsonl` files is an
invocation of its cell (model, batch size, variant, environment key, machine); an environment named twice in one
invocation (an A/A) gives two. Cells with fewer than three invocations are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from compilebench.analysis import stats
from compilebench.fetch_image import fallback_image
from compilebench.harness import models, sample_stats, trial_process
from compilebench.records.formats import TimingSpec, TrialSpec, VariantSpec
from compilebench.records.reading import read_jsonl

VARIANTS = {"default": VariantSpec("default"), "freezing": VariantSpec("freezing", inductor={"freezing": True})}
Processes = list[tuple[list[float], list[float]]]  # one invocation: each process's (eager, compiled) samples, ms


def score(invocations: list[Processes]) -> dict:
    """Coverage of the pooled speedup and eager median by each invocation's between-process CI (and, for contrast,
    by its first process's within-process bootstrap CI)."""
    everything = [process for processes in invocations for process in processes]
    pooled_speedup = stats.speedup_estimate(everything).value
    pooled_eager = stats.median_estimate([eager for eager, _ in everything]).value
    speedups = [stats.speedup_estimate(processes) for processes in invocations]
    eagers = [stats.median_estimate([eager for eager, _ in processes]) for processes in invocations]
    within = [sample_stats.paired_bootstrap_ci(*processes[0]) for processes in invocations]
    return {
        "invocations": len(invocations),
        "pooled_speedup": pooled_speedup,
        "pooled_eager_ms": pooled_eager,
        "speedup_covered": [e.low <= pooled_speedup <= e.high for e in speedups],
        "eager_covered": [e.low <= pooled_eager <= e.high for e in eagers],
        "within_process_covered": [low <= pooled_speedup <= high for low, high in within],
        "speedup_ci_halfwidths": [e.halfwidth for e in speedups],
        "speedups": [[e.value, e.low, e.high] for e in speedups],
    }


def summarize(cells: dict[str, dict]) -> dict:
    """Coverage over every invocation of every cell."""

    def share(key: str) -> float:
        flags = [flag for cell in cells.values() for flag in cell[key]]
        return float(np.mean(flags)) if flags else float("nan")

    halfwidths = [h for cell in cells.values() for h in cell["speedup_ci_halfwidths"]]
    return {
        "cells": len(cells),
        "invocations": sum(cell["invocations"] for cell in cells.values()),
        "speedup_coverage": share("speedup_covered"),
        "eager_latency_coverage": share("eager_covered"),
        "within_process_speedup_coverage": share("within_process_covered"),
        "median_speedup_ci_halfwidth": float(np.median(halfwidths)) if halfwidths else float("nan"),
    }


def from_results(paths: list[Path]) -> dict[str, list[Processes]]:
    """Invocations per cell from the runs.jsonl files of earlier benchmarks."""
    cells: dict[str, list[Processes]] = defaultdict(list)
    for path in paths:
        for run in read_jsonl(path):
            if not run.get("compile") or run.get("status") != "ok":
                continue
            cell = (
                f"{run['label']} bs{run['batch_size']} {run['variant']} "
                f"[{run['environment_key'][:8]} on {run['machine_fingerprint']}]"
            )
            cells[cell].append([(p["eager_ms"], p["compiled_ms"]) for p in run["process_results"]])
    return {cell: invocations for cell, invocations in cells.items() if len(invocations) >= 3}


def live(args: argparse.Namespace) -> dict[str, list[Processes]]:
    """Invocations measured now, one after another, of one cell."""
    work = Path(tempfile.mkdtemp(prefix="compilebench-coverage-"))
    spec = models.random_checkpoint(args.model, "full", work)
    image = work / "image.jpg"
    image.write_bytes(fallback_image())
    timing = TimingSpec(min_iters=args.min_iters, min_time_s=args.min_time_s, warmup_iters=2)
    cache = work / "inductor-cache"
    invocations, started = [], time.time()
    for invocation in range(args.invocations):
        processes = []
        for replicate in range(args.replicates):
            trial = TrialSpec(
                f"i{invocation}/r{replicate}",
                "current",
                spec,
                1,
                VARIANTS[args.variant],
                replicate,
                "warm",
                str(image),
                timing,
            )
            result = trial_process.run_trial_process(trial, sys.executable, work / "trials", cache, 1800)
            if result.status != "ok":
                raise SystemExit(f"{trial.trial_id}: {result.status}: {result.error}")
            processes.append((list(result.eager_ms), list(result.compiled_ms)))
        estimate = stats.speedup_estimate(processes)
        print(
            f"invocation {invocation}: speedup {estimate.value:.3f} [{estimate.low:.3f}, {estimate.high:.3f}] "
            f"({time.time() - started:.0f} s)",
            flush=True,
        )
        invocations.append(processes)
    return {f"{spec.label} bs1 {args.variant}": invocations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="microsoft/resnet-50")
    parser.add_argument("--variant", default="freezing", choices=sorted(VARIANTS))
    parser.add_argument("--invocations", type=int, default=8)
    parser.add_argument("--replicates", type=int, default=3, help="processes per invocation")
    parser.add_argument("--min-iters", type=int, default=10)
    parser.add_argument("--min-time-s", type=float, default=2.0)
    parser.add_argument("--results", type=Path, nargs="+", default=None, help="runs.jsonl files: measure nothing")
    parser.add_argument("--out", type=Path, default=None, help="write every number as JSON here")
    args = parser.parse_args()
    invocations = from_results(args.results) if args.results else live(args)
    if not invocations:
        raise SystemExit("no cell has three or more invocations in these results")
    cells = {cell: score(runs) for cell, runs in invocations.items()}
    for cell, scored in cells.items():
        print(
            f"{cell}: {scored['invocations']} invocations, pooled speedup {scored['pooled_speedup']:.3f}, "
            f"covered {sum(scored['speedup_covered'])}/{scored['invocations']}, "
            f"within-process {sum(scored['within_process_covered'])}/{scored['invocations']}"
        )
    summary = summarize(cells)
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({**summary, "detail": cells}, indent=1, default=str))


if __name__ == "__main__":
    main()
