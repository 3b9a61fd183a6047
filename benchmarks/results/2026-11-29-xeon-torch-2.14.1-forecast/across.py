"""The Xeon's four comparisons of torch 2.14.1 against 2.13.0 (startnet, by-turn, cold-blocks, this one), per cell and
metric: each invocation's verdict and B/A where any of them said a direction, and CONTRADICT where two said opposite
directions (issue 51: two invocations never contradict).

    python benchmarks/results/2026-11-29-xeon-torch-2.14.1-forecast/across.py > \\
        benchmarks/results/2026-11-29-xeon-torch-2.14.1-forecast/across.txt
"""

from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parents[1]
PREFIX = "2026-11-29-xeon-torch-2.14.1-"  # the records' folders: PREFIX + name
RECORDS = ["startnet", "by-turn", "cold-blocks", "forecast"]  # PREFIX + name, oldest first
METRICS = ["eager_latency", "compiled_latency", "speedup", "compile_cold", "compile_warm", "inductor_startup",
           "peak_memory"]  # fmt: skip
DIRECTION = {"slower": 1, "faster": -1, "higher": 1, "lower": -1, "more": 1, "less": -1}


def main() -> None:
    said: dict[tuple, list[str]] = {}
    for name in RECORDS:
        table = pd.read_csv(RESULTS / f"{PREFIX}{name}" / "results" / "comparison.csv")
        for _, row in table[table["reference"] == "first"].iterrows():
            for metric in METRICS:
                word = row.get(f"{metric}_verdict")
                if isinstance(word, str):
                    key = (row["model_id"], int(row["batch_size"]), row["variant"], metric)
                    said.setdefault(key, []).append((name, word, row[f"{metric}_ratio"]))
    contradicting = 0
    for key, words in said.items():
        directions = {DIRECTION[word] for _, word, _ in words if word in DIRECTION}
        if directions:
            contradicting += len(directions) > 1
            text = ", ".join(f"{name} {word} {ratio:.3f}" for name, word, ratio in words)
            print(f"{' '.join(map(str, key))}: {text}{' CONTRADICT' if len(directions) > 1 else ''}")
    print(f"{len(said)} (cell, metric) verdicts compared across {len(RECORDS)} invocations; {contradicting} contradict")


if __name__ == "__main__":
    main()
