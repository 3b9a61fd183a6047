"""How steady a block's B/A is when each process's rounds are summarised another way: from committed records only.

    python estimators.py FILE[@DESIGN] ...   # a pipeline record's results/runs.jsonl, or a block_noise.py file

Per block (one timing process per stack, alive together, taking turns) and compiled cell, log B/A of eager latency,
compiled latency and speedup, with each process's rounds summarised by its median (what main uses), mean, 25%-trimmed
mean, first quartile or minimum; and `pairidx`: the median over i of the log ratio of B's i-th round to A's i-th
round (rounds of the two processes near in time, as their turns alternate). Printed: the sd over a cell's blocks,
pooled over cells around each cell's own mean, per file and pooled over all files.
"""

import json
import math
import statistics
import sys
from pathlib import Path

SUMMARIES = ("median", "mean", "trim25", "p25", "min", "pairidx")


def summary(name: str, values: list[float]) -> float:
    ordered = sorted(values)
    if name == "median":
        return statistics.median(values)
    if name == "mean":
        return statistics.mean(values)
    if name == "trim25":
        cut = len(ordered) // 4
        return statistics.mean(ordered[cut : len(ordered) - cut])
    if name == "p25":
        return ordered[len(ordered) // 4]
    return ordered[0]


def blocks_of(item: str) -> dict[tuple[str, str, str], dict[str, tuple[list[float], list[float]]]]:
    """(model, variant, block) -> {stack: (eager ms, compiled ms)} of the compiled cells' timing processes."""
    path, _, design = item.partition("@")
    found: dict[tuple[str, str, str], dict[str, tuple[list[float], list[float]]]] = {}
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        if path.endswith("runs.jsonl"):
            if row["variant"] == "eager":
                continue
            for process in row["process_results"]:
                if process["kind"] == "arm" and process["compiled_ms"]:
                    key = (row["label"], row["variant"], process["block"])
                    found.setdefault(key, {})[row["environment"]] = (process["eager_ms"], process["compiled_ms"])
        elif row["design"] != "cold" and (not design or row["design"] == design) and row["compiled_ms"]:
            label, model, _batch, variant, replicate = row["trial_id"].split("/")
            found.setdefault((model, variant, replicate), {})[label] = (row["eager_ms"], row["compiled_ms"])
    return found


def log_ratios(name: str, a: tuple[list[float], list[float]], b: tuple[list[float], list[float]]) -> list[float]:
    """Eager latency, compiled latency and speedup: log B/A of one block."""
    if name == "pairidx":
        count = min(len(a[0]), len(b[0]))
        eager = [math.log(b[0][i] / a[0][i]) for i in range(count)]
        compiled = [math.log(b[1][i] / a[1][i]) for i in range(count)]
        return [statistics.median(eager), statistics.median(compiled),
                statistics.median(e - c for e, c in zip(eager, compiled, strict=True))]  # fmt: skip
    ea, ca, eb, cb = (summary(name, values) for values in (*a, *b))
    return [math.log(eb / ea), math.log(cb / ca), math.log((eb / cb) / (ea / ca))]


def squares(name: str, blocks: dict) -> tuple[list[float], int]:
    """Sums of squared deviations of each cell's blocks around the cell's mean, per metric, and their df."""
    cells: dict[tuple[str, str], list[list[float]]] = {}
    for (model, variant, _block), stacks in blocks.items():
        if len(stacks) == 2:
            a, b = (stacks[label] for label in sorted(stacks))  # `current` first
            cells.setdefault((model, variant), []).append(log_ratios(name, a, b))
    sums, dof = [0.0, 0.0, 0.0], 0
    for values in cells.values():
        if len(values) >= 2:
            dof += len(values) - 1
            for j in range(3):
                mean = statistics.mean(v[j] for v in values)
                sums[j] += sum((v[j] - mean) ** 2 for v in values)
    return sums, dof


def line(name: str, sums: list[float], dof: int) -> str:
    sds = " / ".join(f"{math.sqrt(s / dof):.3f}" for s in sums)
    return f"| {name} | {sds} | {dof} |"


def main() -> None:
    total = {name: ([0.0, 0.0, 0.0], 0) for name in SUMMARIES}
    for item in sys.argv[1:]:
        blocks = blocks_of(item)
        print(f"\n{item}\n\n| summary | sd of log B/A: eager / compiled / speedup | df |\n|---|---|---|")
        for name in SUMMARIES:
            sums, dof = squares(name, blocks)
            print(line(name, sums, dof))
            total[name] = ([x + y for x, y in zip(total[name][0], sums, strict=True)], total[name][1] + dof)
    print("\npooled over the files\n\n| summary | sd of log B/A: eager / compiled / speedup | df |\n|---|---|---|")
    for name, (sums, dof) in total.items():
        print(line(name, sums, dof))


if __name__ == "__main__":
    main()
