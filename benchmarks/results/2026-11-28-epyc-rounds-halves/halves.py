"""Where a timing block's B/A noise lies: in the rounds, or in the processes themselves.

    python halves.py 2s:../2026-11-28-epyc-aa 2s:../2026-11-27-epyc-torch-2.14.1-together \
        10s:../2026-11-28-epyc-aa-10s 10s:../2026-11-28-epyc-torch-2.14.1-10s \
        10s:../2026-11-28-epyc-torch-2.14.1-10s-after-aa

Each argument is DESIGN:RECORD (a record folder holding results/runs.jsonl). Per timing block (the A and B processes
of one model and replicate) it takes log B/A of the medians over all rounds, over the even rounds and over the odd
rounds, for eager latency (once per model), compiled latency and speedup (per compiled cell), each less its cell's
mean over the record's blocks. If a block's B/A were all round-to-round noise, its two halves would be uncorrelated
and each about sqrt(2) times as spread as the whole; if it were the processes' own, the halves would agree and be as
spread as the whole. Pooled per model and metric, over the records of a design and over all of them.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HALVES = {"all": lambda i: True, "even": lambda i: i % 2 == 0, "odd": lambda i: i % 2 == 1}


def pairs(runs: list[dict]) -> list[tuple[str, str, dict, dict]]:
    """(model, variant, A's process, B's process) of every timing block with both processes ok."""
    found = {}
    for run in runs:
        for process in run["process_results"]:
            if process.get("kind") == "arm" and process.get("status") == "ok" and process.get("compiled_ms"):
                found[(run["model_id"], run["variant"], process["replicate"], run["environment"])] = process
    labels = list(dict.fromkeys(key[3] for key in found))  # the runs' order: the baseline first
    return [(model, variant, a, found[(model, variant, replicate, labels[1])])
            for (model, variant, replicate, label), a in found.items()
            if label == labels[0] and (model, variant, replicate, labels[1]) in found]  # fmt: skip


def median_of(samples: list[float], keep) -> float:
    return statistics.median(x for i, x in enumerate(samples) if keep(i))


def log_ratios(variant: str, a: dict, b: dict) -> dict[str, dict[str, float]]:
    """Per metric, log B/A over each half (and all) of the block's rounds."""
    out: dict[str, dict[str, float]] = {"compiled": {}, "speedup": {}}
    if variant == "default":  # eager once per model: every compiled cell of a block has the same eager samples
        out["eager"] = {}
    for half, keep in HALVES.items():
        if "eager" in out:
            out["eager"][half] = math.log(median_of(b["eager_ms"], keep) / median_of(a["eager_ms"], keep))
        out["compiled"][half] = math.log(median_of(b["compiled_ms"], keep) / median_of(a["compiled_ms"], keep))
        speed_a = median_of(a["eager_ms"], keep) / median_of(a["compiled_ms"], keep)
        speed_b = median_of(b["eager_ms"], keep) / median_of(b["compiled_ms"], keep)
        out["speedup"][half] = math.log(speed_b / speed_a)
    return out


def deviations(records: list[Path]) -> dict[tuple[str, str], dict]:
    """Per (model, metric): each block's log B/A less its cell's mean, per half; the degrees of freedom (blocks less
    cells) and the rounds each process timed."""
    pooled: dict[tuple[str, str], dict] = defaultdict(lambda: {**{h: [] for h in HALVES}, "dof": 0, "rounds": []})
    for record in records:
        runs = [json.loads(line) for line in (record / "results" / "runs.jsonl").read_text().splitlines() if line]
        cells: dict[tuple[str, str, str], list[dict[str, float]]] = defaultdict(list)
        for model, variant, a, b in pairs(runs):
            for metric, halves in log_ratios(variant, a, b).items():
                cells[(model, variant, metric)].append(halves)
                pooled[(model, metric)]["rounds"].append(len(a["eager_ms"]))
        for (model, _, metric), blocks in cells.items():
            for half in HALVES:
                mean = statistics.fmean(block[half] for block in blocks)
                pooled[(model, metric)][half] += [block[half] - mean for block in blocks]
            pooled[(model, metric)]["dof"] += len(blocks) - 1
    return pooled


def line(design: str, model: str, metric: str, found: dict) -> str:
    sd = {half: math.sqrt(sum(x * x for x in found[half]) / found["dof"]) for half in HALVES}
    halves = (sd["even"] + sd["odd"]) / 2 / sd["all"]
    r = statistics.correlation(found["even"], found["odd"])
    return (f"{design:4s} {model.split('/')[-1][:14]:14s} {metric:8s} {len(found['all']):3d} blocks "
            f"({found['dof']:2d} dof), {min(found['rounds'])}-{max(found['rounds'])} rounds: sd {sd['all']:.3f}, "
            f"halves {sd['even']:.3f} / {sd['odd']:.3f} (x{halves:.2f} the whole), r(even, odd) {r:+.2f}")  # fmt: skip


def main() -> None:
    designs: dict[str, list[Path]] = defaultdict(list)
    for argument in sys.argv[1:]:
        design, _, folder = argument.partition(":")
        if not folder or not (Path(folder) / "results" / "runs.jsonl").exists():
            raise SystemExit(f"{argument}: expected DESIGN:RECORD, a record folder with results/runs.jsonl")
        designs[design].append(Path(folder))
    for design, records in {**designs, "all": [r for rs in designs.values() for r in rs]}.items():
        for (model, metric), found in sorted(deviations(records).items()):
            print(line(design, model, metric, found))


if __name__ == "__main__":
    main()
