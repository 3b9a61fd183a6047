"""Cold compile's noise per block on one machine, from the A/A comparisons recorded on it (truth: B / A = 1), and
what one cold block a side would decide with it: each record's compiled cells' cold compile B / A (one cold process a
side, so one block a cell), their rms log distance from 0 as one block's sd, and the comparison record's six cold
compile ratios judged against it (a t interval with the A/A cells' degrees of freedom; equivalent within ±5% at 90%).
Only the records of the comparison's machine (its fingerprint) count: cold compile's noise differs from machine to
machine of one kind, and the other Xeon records are listed with theirs, not pooled.

    python benchmarks/results/2026-11-29-xeon-what-decides/cold_compile_aa.py
"""

import glob
import json
import math
from pathlib import Path

import pandas as pd
from scipy import stats

RESULTS = Path(__file__).resolve().parents[1]
COMPARISON = RESULTS / "2026-11-29-xeon-torch-2.14.1-cold-blocks" / "results" / "comparison.csv"
MARGIN = 0.05


def fingerprints(runs: Path) -> set[str]:
    """The machine fingerprints of a record's runs."""
    return {json.loads(line)["machine_fingerprint"] for line in runs.read_text().splitlines() if line.strip()}


def main() -> None:
    machine = fingerprints(COMPARISON.parent / "runs.jsonl")
    logs = []
    for folder in sorted(glob.glob(str(RESULTS / "2026-11-2*-xeon-*aa*"))):
        table = Path(folder) / "results" / "comparison.csv"
        if not table.exists():
            print(f"{Path(folder).name}: no comparison table")
            continue
        frame = pd.read_csv(table)
        ratios = frame[(frame["reference"] == "first") & (frame["variant"] != "eager")]["compile_cold_ratio"].dropna()
        mine = [math.log(r) for r in ratios]
        rms = math.sqrt(sum(v * v for v in mine) / len(mine))
        theirs = fingerprints(table.parent / "runs.jsonl")
        print(
            f"{Path(folder).name} (machine {', '.join(sorted(theirs))}): {len(ratios)} cells, "
            f"B/A {[round(r, 3) for r in ratios]}, rms log {rms:.3f}"
        )
        if theirs == machine:
            logs += mine
    dof = len(logs)
    sd = math.sqrt(sum(v * v for v in logs) / dof)
    t95, t90 = stats.t.ppf(0.975, dof), stats.t.ppf(0.95, dof)
    print(
        f"machine {', '.join(sorted(machine))}, A/A cells {dof}: one cold block's sd of log B/A {sd:.4f}; "
        f"95% CI of one block x/÷ {math.exp(t95 * sd):.3f}"
    )
    need = ((stats.norm.ppf(0.95) + stats.norm.ppf(0.95)) * sd / MARGIN) ** 2  # two one-sided tests, power 0.9
    print(f"blocks for `equivalent` within ±{MARGIN:.0%} 9 times in 10 at no change (normal approximation): {need:.0f}")
    frame = pd.read_csv(COMPARISON)
    for _, row in frame[(frame["reference"] == "first") & (frame["variant"] != "eager")].iterrows():
        ratio = row["compile_cold_ratio"]
        low, high = ratio / math.exp(t95 * sd), ratio * math.exp(t95 * sd)
        low90, high90 = ratio / math.exp(t90 * sd), ratio * math.exp(t90 * sd)
        word = ("slower" if low > 1 else "faster" if high < 1
                else "equivalent" if low90 > 1 - MARGIN and high90 < 1 + MARGIN else "inconclusive")  # fmt: skip
        print(f"  {row['model_id'][:28]:28s} {row['variant']:9s} {ratio:.3f} [{low:.3f}, {high:.3f}] {word}")


if __name__ == "__main__":
    main()
