"""How much a block's B/A varies when its two timing processes run one after the other, and when they run together
taking turns (`benchmark.together`), and with how much timing: designs interleaved in one run, on real stacks.

    python benchmarks/block_noise.py --out RECORD/blocks.jsonl            # ResNet-50, SegFormer-B0; 4 blocks a design
    python benchmarks/block_noise.py --designs sequential:2 together:2 together:10:thp --out RECORD/blocks.jsonl

A design is `sequential` or `together` with the timed seconds per process at least (`benchmark.min_time_s`; the rest
of the timing as params.yaml says), `:thp` for torch's allocator on transparent huge pages (`settings.huge_pages`),
and `:jemalloc` or `:tcmalloc` for that malloc in place of the C library's (`settings.malloc`). Per model, one
cold process per variant and environment fills each environment's warm cache; then `--blocks` blocks of each
design, the designs in turn (block 0 the first design, block 1 the second, ...), each a timing process per
environment (eager and `default` as arms, the plan's balanced order of environments). Per design and model it prints
the sd over blocks of log B/A for eager latency, compiled latency and speedup (per-process medians, as a comparison
pairs them) with B/A itself, the processes' median latencies, the blocks' median wall time, and for together blocks
the correlation of A's and B's per-round eager latency. Every process's result (raw samples included) is written to
`--out`, a JSON line each. The last line is `sd_eager_latency DESIGN=.. ...`, pooled over the models.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from compilebench.analysis import compare, plan
from compilebench.analysis.per_process import ProcessRecord
from compilebench.config import load_config
from compilebench.environments import venvs
from compilebench.fetch_image import fallback_image
from compilebench.harness import launcher, models
from compilebench.records.formats import MALLOC_LIBRARIES, STATUS_OK, TrialResult, TrialSpec, VariantSpec

MODELS = ["microsoft/resnet-50", "nvidia/segformer-b0-finetuned-ade-512-512"]
ARMS = [VariantSpec("eager", compile=False), VariantSpec("default")]
DESIGNS = ("sequential:2", "together:2")


def design_of(text: str) -> tuple[bool, float, bool, str]:
    """`together:10:thp:jemalloc` -> (run together, timed seconds per process at least, transparent huge pages,
    the malloc: `libc`, the C library's, unless named)."""
    kind, seconds, *flags = text.split(":")
    mallocs = [flag for flag in flags if flag in MALLOC_LIBRARIES]
    unknown = set(flags) - {"thp", *MALLOC_LIBRARIES}
    if kind not in ("sequential", "together") or not seconds or unknown or len(mallocs) > 1:
        raise SystemExit(
            f"a design is sequential:SECONDS or together:SECONDS, then :thp for huge pages and one of "
            f":jemalloc or :tcmalloc for that malloc, got {text!r}"
        )
    return kind == "together", float(seconds), "thp" in flags, mallocs[0] if mallocs else "libc"


def median(values: tuple[float, ...]) -> float:
    return statistics.median(values)


def block_values(results: dict[str, TrialResult], specs: list[TrialSpec]) -> dict[str, float]:
    """One environment's process in a block: its median eager latency, and per arm compiled latency and speedup."""
    values: dict[str, float] = {}
    for spec in specs:
        result = results[spec.trial_id]
        values["eager_latency"] = median(result.eager_ms)
        if spec.variant.compile and result.compiled_ms:
            values[f"{spec.variant.name}_latency"] = median(result.compiled_ms)
            values[f"{spec.variant.name}_speedup"] = median(result.eager_ms) / median(result.compiled_ms)
    return values


BY_TURN = {"eager_latency": "eager", "compiled_latency": "compiled", "speedup": "speedup"}  # compare's names: ours


def by_turn_logs(a: dict, b: dict) -> dict[str, float]:
    """A together block's log B/A per metric with its rounds paired by turn, as a comparison makes it
    (compare.by_turn_differences), from A's and B's result lines; empty where the rounds have no turns recorded."""
    runs = []
    for side, line in (("a", a), ("b", b)):
        process = ProcessRecord.from_dict(
            {
                "trial_id": side,
                "block": "default/r0",
                "eager_ms": line["eager_ms"],
                "compiled_ms": line.get("compiled_ms", ()),
                "round_turns": line.get("round_turns", ()),
            }
        )
        runs.append(
            compare.ComparedRun(
                model_id="m",
                label="m",
                task="t",
                batch_size=1,
                variant="default",
                environment=side,
                environment_key=side,
                run_uid=None,
                invocation_id="block",
                status=STATUS_OK,
                compile=True,
                values=compare.process_values([process]),
                turns=compare.process_turns([process]),
            )
        )
    found = {}
    for metric, name in BY_TURN.items():
        differences = compare.by_turn_differences(*runs, metric)
        if differences:
            found[name] = differences[0]
    return found


def round_correlation(a: TrialResult, b: TrialResult) -> float | None:
    """Correlation of log eager latency, round by round, of two processes that took turns."""
    count = min(len(a.eager_ms), len(b.eager_ms))
    if count < 3:
        return None
    return statistics.correlation([math.log(v) for v in a.eager_ms[:count]], [math.log(v) for v in b.eager_ms[:count]])


def summary(rows: list[dict], design: str, model: str) -> dict[str, float]:
    """Per metric, the sd over blocks of log B/A; with the blocks' count and median wall time."""
    mine = [row for row in rows if row["design"] == design and row["model"] == model]
    found: dict[str, float] = {"blocks": len(mine), "wall_s": statistics.median(row["wall_s"] for row in mine)}
    for key, suffix in (("log_ratio", ""), ("log_ratio_by_turn", "@turns")):
        for metric in mine[0].get(key, {}) if mine else []:
            logs = [row[key][metric] for row in mine if metric in row.get(key, {})]
            if len(logs) >= 2:
                found[f"sd_{metric}{suffix}"] = statistics.stdev(logs)
                found[f"ratio_{metric}{suffix}"] = math.exp(statistics.mean(logs))  # the design's B/A over its blocks
    for side in ("a", "b"):
        for metric in ("eager_latency", "default_latency"):
            levels = [row["values"][side][metric] for row in mine if metric in row.get("values", {}).get(side, {})]
            if levels:
                found[f"{side}_{metric}_ms"] = statistics.median(levels)
    correlations = [row["round_correlation"] for row in mine if row.get("round_correlation") is not None]
    if correlations:
        found["round_correlation"] = statistics.median(correlations)
    return found


OLD_NAMES = {"sequential": "sequential:2", "together": "together:2"}  # the designs' names in the first runs' files


def pooled_table(files: list[str]) -> list[str]:
    """Markdown: per model and design, over the blocks of every file (FILE, or FILE:PREFIX to set its designs apart),
    the pooled sd of log B/A per metric (each file's blocks around their own mean: sums of squares over degrees of
    freedom), and the blocks' median wall time."""
    deviations: dict[tuple[str, str], dict[str, list[float]]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    for item in files:
        path, _, prefix = item.partition(":")
        blocks: dict[tuple, dict[str, dict]] = {}
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            label, _model, _batch, variant, replicate = row["trial_id"].split("/")
            if row.get("design") == "cold" or replicate.startswith("c") or variant == "eager":
                continue
            design = prefix + OLD_NAMES.get(row["design"], row["design"])
            blocks.setdefault((row["model"], design, replicate), {})[label] = row
        per_run: dict[tuple[str, str], dict[str, list[float]]] = {}
        for (model, design, _), pair in blocks.items():
            if len(pair) != 2 or any(row["status"] != STATUS_OK for row in pair.values()):
                continue
            a, b = pair.values() if next(iter(pair)) == "current" else reversed(pair.values())
            ea, ca, eb, cb = (
                median(a["eager_ms"]),
                median(a["compiled_ms"]),
                median(b["eager_ms"]),
                median(b["compiled_ms"]),
            )
            logs = {
                "eager": math.log(eb / ea),
                "compiled": math.log(cb / ca),
                "speedup": math.log((eb / cb) / (ea / ca)),
            }
            logs.update({f"{metric}@turns": value for metric, value in by_turn_logs(a, b).items()})
            for metric, value in logs.items():
                per_run.setdefault((model, design), {}).setdefault(metric, []).append(value)
            together = "together" in design
            wall = max(a["wall_s"], b["wall_s"]) if together else a["wall_s"] + b["wall_s"]
            walls.setdefault((model, design), []).append(wall)
        for key, metrics in per_run.items():
            for metric, values in metrics.items():
                mean = statistics.mean(values)
                deviations.setdefault(key, {}).setdefault(metric, []).extend(v - mean for v in values)
                deviations[key].setdefault(f"{metric}_dof", []).append(len(values) - 1)
    lines = [
        "| model | design | blocks | sd log B/A eager | compiled | speedup | by turn: eager | compiled | speedup "
        "| block wall s |",
        "|---" * 10 + "|",
    ]
    for (model, design), metrics in sorted(deviations.items()):
        dof = sum(metrics["eager_dof"])
        sds = []
        for metric in ("eager", "compiled", "speedup", "eager@turns", "compiled@turns", "speedup@turns"):
            own = sum(metrics.get(f"{metric}_dof", []))  # blocks without turns recorded have no by-turn value
            sds.append(math.sqrt(sum(v * v for v in metrics[metric]) / own) if own else math.nan)
        lines.append(
            f"| {model.split('/')[-1]} | {design} | {len(metrics['eager'])} ({dof} df) | "
            + " | ".join(f"{sd:.3f}" for sd in sds)
            + f" | {statistics.median(walls[(model, design)]):.0f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--blocks", type=int, default=4, help="blocks of each design per model")
    parser.add_argument(
        "--designs", nargs="+", default=list(DESIGNS), help="sequential:S or together:S, S timed seconds"
    )
    parser.add_argument("--b", default="torch-2.14.1", help="environment B (params.yaml); A is `current`")
    parser.add_argument("--out", type=Path, help="every process's result, a JSON line each (required to measure)")
    parser.add_argument("--scale", default="full", choices=("full", "tiny"), help="tiny: a quick check of the script")
    parser.add_argument("--summarize", nargs="+", metavar="FILE[:PREFIX]", help="only pool earlier runs' files")
    args = parser.parse_args()
    if args.summarize:
        print("\n".join(pooled_table(args.summarize)))
        return
    if args.out is None:
        parser.error("--out is required to measure")
    designs = [design_of(text) for text in args.designs]
    config = load_config("params.yaml")
    root, cache_root = Path.cwd(), Path(config.paths.environments)
    project = venvs.project_pins(root)
    pythons = {
        "current": venvs.build("current", project, cache_root).python,
        args.b: venvs.build(args.b, venvs.resolve(project, config.environments[args.b].pins), cache_root).python,
    }
    labels = list(pythons)
    timing = config.timing()
    work = Path(tempfile.mkdtemp(prefix="compilebench-blocks-"))
    image = work / "image.jpg"
    image.write_bytes(fallback_image())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with args.out.open("w") as out:
        for model_id in args.models:
            model = models.random_checkpoint(model_id, args.scale, work / "checkpoints")
            specs = plan.trials(
                [model], [1], ARMS, labels, len(designs) * args.blocks, 1, False, str(image), timing, seed=0
            )
            specs = [
                replace(
                    spec,
                    timing=replace(spec.timing, together=together, min_time_s=seconds, huge_pages=thp, malloc=malloc),
                )
                for spec in specs
                for together, seconds, thp, malloc in [
                    designs[spec.replicate % len(designs)]
                    if spec.kind == "arm"
                    else (False, timing.min_time_s, False, "libc")
                ]
            ]
            results: dict[str, TrialResult] = {}

            def keep(
                group: list[TrialSpec],
                ended: list[TrialResult],
                resumed: bool,
                model_id: str = model_id,
                results: dict[str, TrialResult] = results,
            ) -> None:
                for spec, result in zip(group, ended, strict=True):
                    results[spec.trial_id] = result
                    design = args.designs[spec.replicate % len(designs)] if spec.kind == "arm" else "cold"
                    out.write(
                        json.dumps({"model": model_id, "design": design, "label": spec.environment, **result.to_dict()})
                        + "\n"
                    )
                out.flush()
                first = ended[0]
                print(
                    f"{group[0].process}: {first.status} eager {median(first.eager_ms) if first.eager_ms else 0:.1f}"
                    f" ms, {first.wall_s:.0f} s",
                    flush=True,
                )

            launcher.run_trials(specs, pythons, work / "run", 1800.0, on_process=keep)
            for replicate in range(len(designs) * args.blocks):
                block = [spec for spec in specs if spec.kind == "arm" and spec.replicate == replicate]
                per_env = {label: [spec for spec in block if spec.environment == label] for label in labels}
                if not all(results[spec.trial_id].status == STATUS_OK for spec in block):
                    print(f"block r{replicate}: not every process ok; left out")
                    continue
                a, b = (block_values(results, per_env[label]) for label in labels)
                walls = {spec.process: results[spec.trial_id].wall_s for spec in block}
                together = designs[replicate % len(designs)][0]
                first_a, first_b = (results[per_env[label][0].trial_id] for label in labels)
                compiled = [
                    results[spec.trial_id].to_dict()
                    for label in labels
                    for spec in per_env[label]
                    if spec.variant.compile
                ]
                rows.append(
                    {
                        "model": model_id,
                        "design": args.designs[replicate % len(designs)],
                        "replicate": replicate,
                        "log_ratio": {key: math.log(b[key] / a[key]) for key in a if key in b},
                        "wall_s": max(walls.values()) if together else sum(walls.values()),
                        "values": {"a": a, "b": b},  # each process's medians: whether a design moves the level
                        "log_ratio_by_turn": by_turn_logs(*compiled),  # rounds paired by turn, as compare does
                        "round_correlation": round_correlation(first_a, first_b) if together else None,
                    }
                )
    totals: dict[str, list[float]] = {design: [] for design in args.designs}
    for model_id in args.models:
        for design in args.designs:
            found = summary(rows, design, model_id)
            print(f"{model_id} {design}: " + ", ".join(f"{key} {value:.3f}" for key, value in found.items()))
            if "sd_eager_latency" in found:
                totals[design].append(found["sd_eager_latency"] ** 2)
    pooled = {design: math.sqrt(statistics.mean(values)) if values else math.nan for design, values in totals.items()}
    print("sd_eager_latency " + " ".join(f"{design}={sd:.3f}" for design, sd in pooled.items()))


if __name__ == "__main__":
    main()
