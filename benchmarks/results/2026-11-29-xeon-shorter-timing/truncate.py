"""What a shorter `benchmark.min_time_s` would have measured, read off blocks that timed 10 s: each process's rounds
cut where its own timing would have stopped (`min_iters` rounds and T seconds of its own calls, as
timing.round_samples stops), then each block's log B/A made as block_noise.py makes it (per-process medians, and
rounds paired by turn through compare's own functions). Same blocks for every T, so the designs are compared paired.

    python truncate.py BLOCKS.jsonl [BLOCKS.jsonl ...]      # the blocks of design together:10 in them
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from block_noise import by_turn_logs

MIN_ROUNDS = 10  # params.yaml benchmark.min_iters
SECONDS = (2.0, 4.0, 6.0, 10.0)


def cut(line: dict, seconds: float) -> dict:
    """The process's first rounds up to where it would have stopped at `seconds` (a round's own time taken as its
    calls' time: the rest of a round is microseconds)."""
    elapsed, keep = 0.0, 0
    for eager, compiled in zip(line["eager_ms"], line["compiled_ms"], strict=True):
        elapsed += (eager + compiled) / 1000
        keep += 1
        if keep >= MIN_ROUNDS and elapsed >= seconds:
            break
    return {**line, "eager_ms": line["eager_ms"][:keep], "compiled_ms": line["compiled_ms"][:keep],
            "round_turns": line["round_turns"][:keep], "own_s": elapsed}  # fmt: skip


def blocks(paths: list[str]) -> dict[tuple[str, str, str], dict[str, dict]]:
    """(file, model, replicate) -> label -> the compiled arm's line of a block that timed 10 s together (A is
    `current`)."""
    found: dict[tuple[str, str, str], dict[str, dict]] = {}
    for path in paths:
        for text in Path(path).read_text().splitlines():
            line = json.loads(text)
            label, _model, _batch, variant, replicate = line["trial_id"].split("/")
            if line.get("design") == "together:10" and variant != "eager" and line["status"] == "ok":
                found.setdefault((path, line["model"], replicate), {})[label] = line
    return {
        key: pair for key, pair in found.items() if len(pair) == 2 and all(p.get("round_turns") for p in pair.values())
    }


def logs(a: dict, b: dict) -> dict[str, float]:
    ea, ca, eb, cb = (statistics.median(x) for x in (a["eager_ms"], a["compiled_ms"], b["eager_ms"], b["compiled_ms"]))
    found = {"eager": math.log(eb / ea), "compiled": math.log(cb / ca), "speedup": math.log((eb / cb) / (ea / ca))}
    found.update({f"{metric}@turns": value for metric, value in by_turn_logs(a, b).items()})
    return found


def main() -> None:
    pairs = blocks(sys.argv[1:])
    metrics = ("eager", "compiled", "speedup", "eager@turns", "compiled@turns", "speedup@turns")
    print(f"{len(pairs)} together blocks; per-block sd of log B/A pooled over (file, model) around their own means")
    print("| model | T s | df | " + " | ".join(metrics) + " | own s a process (median) | rounds (median) |")
    print("|---" * (len(metrics) + 5) + "|")
    models = [*sorted({model for _, model, _ in pairs}), "all"]
    for model in models:
        for seconds in SECONDS:
            groups: dict[tuple[str, str], dict[str, list[float]]] = {}
            own, rounds = [], []
            for (path, m, _), pair in pairs.items():
                if model not in ("all", m):
                    continue
                a, b = (cut(pair[label], seconds) for label in sorted(pair))  # `current` first
                own += [a["own_s"], b["own_s"]]
                rounds += [len(a["eager_ms"]), len(b["eager_ms"])]
                for metric, value in logs(a, b).items():
                    groups.setdefault((path, m), {}).setdefault(metric, []).append(value)
            sds, dof = [], 0
            for metric in metrics:
                ss = sum(sum((v - statistics.mean(vs)) ** 2 for v in vs) for g in groups.values()
                         if len(vs := g.get(metric, [])) >= 2)  # fmt: skip
                df = sum(len(g.get(metric, [])) - 1 for g in groups.values() if len(g.get(metric, [])) >= 2)
                dof = max(dof, df)
                sds.append(math.sqrt(ss / df) if df else math.nan)
            print(
                f"| {model.split('/')[-1]} | {seconds:g} | {dof} | "
                + " | ".join(f"{sd:.3f}" for sd in sds)
                + f" | {statistics.median(own):.1f} | {statistics.median(rounds):.0f} |"
            )


if __name__ == "__main__":
    main()
