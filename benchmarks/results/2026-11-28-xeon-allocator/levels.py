"""Per model and malloc of `blocks.jsonl`: A's median latencies and speedup over its blocks, and B/A with a 95% CI
(t over the blocks' log B/A). `python levels.py blocks.jsonl > levels.txt`."""

import json
import math
import statistics
import sys
from pathlib import Path

T_975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}  # Student's t, 97.5%, by degrees of freedom


def medians(a: dict, b: dict) -> tuple[float, float, float, float]:
    return tuple(statistics.median(x) for x in (a["eager_ms"], a["compiled_ms"], b["eager_ms"], b["compiled_ms"]))


def interval(logs: list[float]) -> str:
    mean, half = statistics.mean(logs), T_975[len(logs) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"{math.exp(mean):.3f} [{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}]"


def main() -> None:
    blocks: dict[tuple[str, str], dict[str, dict[str, dict]]] = {}
    for line in Path(sys.argv[1]).read_text().splitlines():
        row = json.loads(line)
        label, _model, _batch, variant, replicate = row["trial_id"].split("/")
        if row["design"] != "cold" and variant != "eager":
            blocks.setdefault((row["model"].split("/")[1], row["design"]), {}).setdefault(replicate, {})[label] = row
    print("| model | malloc | A: eager ms / compiled ms / speedup | B/A eager [95% CI] | B/A compiled | B/A speedup |")
    print("|---|---|---|---|---|---|")
    for (model, design), replicates in blocks.items():
        levels, logs = [], {"eager": [], "compiled": [], "speedup": []}
        for pair in replicates.values():
            ea, ca, eb, cb = medians(pair["current"], pair["torch-2.14.1"])
            levels.append((ea, ca))
            logs["eager"].append(math.log(eb / ea))
            logs["compiled"].append(math.log(cb / ca))
            logs["speedup"].append(math.log((eb / cb) / (ea / ca)))
        malloc = design.split(":")[2] if design.count(":") > 1 else "libc"
        eager, compiled = (statistics.median(level[i] for level in levels) for i in (0, 1))
        speedup = statistics.median(e / c for e, c in levels)
        print(f"| {model} | {malloc} | {eager:.0f} / {compiled:.0f} / {speedup:.2f} | "
              + " | ".join(interval(logs[key]) for key in ("eager", "compiled", "speedup")) + " |")  # fmt: skip


if __name__ == "__main__":
    main()
