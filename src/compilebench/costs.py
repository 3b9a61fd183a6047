"""Per-model costs of processes on a GPU, from measured records: what `benchmark --export` estimates a plan from.

    python -m compilebench.costs WINDOW [WINDOW ...] --out data/reference/gpu-costs.json

Each WINDOW an exported plan's folder that ran on the GPU and came back (its `results/` beside its plan.json): the
H100 windows' dated records gave the table shipped in data/reference/.

Reads each record's plan.json and results/trials.jsonl (an exported plan run by the launcher) and writes, per model,
the medians over its trials that measured (ok, accuracy_fail or invalid: their times are real) of: process start-up
(interpreter and imports), load (checkpoint, processor, inputs), per variant the compile time on an empty or cold
cache and on a warm one, and the latency of a call (eager, and each compiled variant) at each batch size measured
(`{"1": ms}`: a batch's latency says nothing of another's); of a timing process of arms,
inductor's one-time start-up before its arms and the rest of its wall time beyond the parts measured (`other_s`:
eager's first call, the checks, exit). Trials on a `shared` cache count as cold when inductor found none of their
graphs cached. The device, the stack and the records it came from go into the file.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from datetime import date
from pathlib import Path

from compilebench.records.formats import (
    CACHE_COLD,
    CACHE_SHARED,
    KIND_ARM,
    MEASURED_NOTHING,
    Plan,
    TrialResult,
    processes,
)
from compilebench.records.reading import read_json


def cold(cache: str, result: TrialResult) -> bool:
    """Whether the trial compiled without its graphs in the cache (as per_process.compiled_cold decides)."""
    if cache != CACHE_SHARED:
        return cache == CACHE_COLD
    counters = result.health.inductor_counters if result.health else {}
    return not (counters.get("fxgraph_cache_hit", 0) > 0 and counters.get("fxgraph_cache_miss", 0) == 0)


def other_seconds(arms: list[TrialResult]) -> float:
    """A timing process's wall time beyond its start-up, load, inductor's start-up, its arms' compiles, warm-up and
    timed rounds (the arms' results share those of the process)."""
    first = arms[0]
    parts = [first.startup_s, first.load_s, first.inductor_startup_s, first.warmup_s, first.timed_s]
    parts += [arm.compile_s for arm in arms if arm.compile_s is not None]
    return max(first.wall_s - sum(part or 0.0 for part in parts), 0.0)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def by_batch(samples: dict[int, list[float]]) -> dict[str, float]:
    """A latency's medians per batch size, smallest batch first."""
    return {str(batch): _median(samples[batch]) for batch in sorted(samples)}


def costs(records: list[Path]) -> dict:
    """The cost table of the trials in `records`."""
    seen: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    # a call's latencies, per model, variant (None: eager) and batch size: a batch's latency says nothing of another's
    latencies: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    devices, stacks = set(), set()
    for record in records:
        plan = Plan.from_dict(read_json(record / "plan.json"))
        specs = {spec.trial_id: spec for spec in plan.trials}
        results = {}
        for line in (record / "results" / "trials.jsonl").read_text().splitlines():
            result = TrialResult.from_dict(json.loads(line))
            results[result.trial_id] = result
            spec = specs.get(result.trial_id)
            if spec is None or result.status in MEASURED_NOTHING:
                continue
            model = seen[spec.model.model_id]
            devices.add(result.environment.get("device_name", "?"))
            stacks.add(f"torch {result.environment.get('torch_version')}")
            for key in ("startup_s", "load_s"):
                if getattr(result, key) is not None:
                    model[key].append(getattr(result, key))
            latency = latencies[spec.model.model_id]
            if result.eager_ms:
                latency[None][spec.batch_size].append(statistics.median(result.eager_ms))
            if spec.variant.compile and result.compile_s is not None:
                kind = "cold_compile_s" if cold(spec.cache, result) else "warm_compile_s"
                model[f"{spec.variant.name}:{kind}"].append(result.compile_s)
            if result.compiled_ms:
                latency[spec.variant.name][spec.batch_size].append(statistics.median(result.compiled_ms))
        for group in processes(list(plan.trials)):
            ended = [results[spec.trial_id] for spec in group if spec.trial_id in results]
            if group[0].kind == KIND_ARM and ended and all(result.status not in MEASURED_NOTHING for result in ended):
                process = seen[group[0].model.model_id]
                if ended[0].inductor_startup_s is not None:
                    process["inductor_startup_s"].append(ended[0].inductor_startup_s)
                process["other_s"].append(other_seconds(ended))
    table = {}
    for model_id, values in sorted(seen.items()):
        entry: dict = {key: _median(values[key]) for key in ("startup_s", "load_s")}
        entry["eager_ms"] = by_batch(latencies[model_id][None])
        entry |= {key: _median(values[key]) for key in ("inductor_startup_s", "other_s") if values[key]}
        variants: dict[str, dict] = defaultdict(dict)
        for key, found in values.items():
            if ":" in key:
                variant, what = key.split(":")
                variants[variant][what] = _median(found)
        for variant in variants.keys() | (latencies[model_id].keys() - {None}):
            variants[variant]["call_ms"] = by_batch(latencies[model_id][variant])
        entry["variants"] = dict(sorted(variants.items()))
        table[model_id] = entry
    made = date.today().isoformat()
    return {
        "device": " / ".join(sorted(devices)),
        "stack": " / ".join(sorted(stacks)),
        "made": made,
        "records": [str(record) for record in records],
        "models": table,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", type=Path, help="folders with plan.json and results/trials.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.write_text(json.dumps(costs(args.records), indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
