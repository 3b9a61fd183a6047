"""How close the forecast's price of a plan comes to what its processes took: each pair (pricing record, measured
record) of this Xeon's committed records, every process of the measured one priced at the pricing one's median for its
unit (adaptive.process_prices, as `python -m compilebench.forecast` prices a plan), against its own time.

    cd benchmarks/results/2026-11-29-xeon-forecast-check && python check.py > check.txt
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from compilebench.analysis import adaptive, runs

RESULTS = Path(__file__).resolve().parents[1]
MACHINE, DEVICE = "06d5d2a80322", "cpu"
PAIRS = [  # (priced at, measured), runs.jsonl files under benchmarks/results/
    # the user's path in time order, in one fresh clone: make run, make forecast, then make compare
    ("2026-11-29-xeon-torch-2.14.1-forecast/make-run", "2026-11-29-xeon-torch-2.14.1-forecast/results"),
    # the same path from committed records (that make run measured after the comparison)
    ("2026-11-29-xeon-make-run-cold-blocks/results", "2026-11-29-xeon-torch-2.14.1-cold-blocks/results"),
    ("2026-11-29-xeon-aa-cold-blocks/results", "2026-11-29-xeon-torch-2.14.1-cold-blocks/results"),
    ("2026-11-29-xeon-torch-2.14.1-cold-blocks/results", "2026-11-29-xeon-aa-cold-blocks/results"),
    ("2026-11-29-xeon-make-run-cold-blocks/results", "2026-11-29-xeon-make-run-9385e55/results"),
    ("2026-11-29-xeon-aa-by-turn/results", "2026-11-29-xeon-torch-2.14.1-by-turn/results"),
    ("2026-11-29-xeon-aa-startnet/results", "2026-11-29-xeon-torch-2.14.1-startnet/results"),
]


def records(folder: str) -> list[runs.RunRecord]:
    lines = (RESULTS / folder / "runs.jsonl").read_text().splitlines()
    return [runs.RunRecord.from_dict(json.loads(line)) for line in lines]


def main() -> None:
    print("priced at -> measured: processes, priced (unpriced), forecast s, measured s, forecast/measured; by kind")
    for pricing, measured in PAIRS:
        prices = adaptive.process_prices(records(pricing), MACHINE, DEVICE).seconds
        own = {unit: {name: process.own_s for name, process in found.items()}
               for unit, found in adaptive.unit_processes(records(measured), MACHINE, DEVICE).items()}  # fmt: skip
        forecast_s = measured_s = 0.0
        kinds: dict[str, list[float]] = {}
        stacks: dict[tuple[str, str], list[float]] = {}  # by environment label (a process id's first part) and kind
        unpriced = count = 0
        for unit, seconds in own.items():
            count += len(seconds)
            if unit not in prices:
                unpriced += len(seconds)
                continue
            forecast_s += prices[unit] * len(seconds)
            measured_s += sum(seconds.values())
            kinds.setdefault(unit[0], []).extend(prices[unit] / value for value in seconds.values())
            for process, value in seconds.items():
                stacks.setdefault((process.split("/")[0], unit[0]), []).append(prices[unit] / value)
        by_kind = ", ".join(f"{kind}: per process forecast/measured median {statistics.median(ratios):.2f} "
                            f"[{min(ratios):.2f}, {max(ratios):.2f}]"
                            for kind, ratios in sorted(kinds.items()))  # fmt: skip
        print(
            f"{pricing} -> {measured}: {count} processes, {count - unpriced} priced ({unpriced}), "
            f"{forecast_s:.0f} s, {measured_s:.0f} s, {forecast_s / measured_s:.3f}; {by_kind}"
        )
        print(
            "    by stack and kind, forecast/measured median: "
            + ", ".join(
                f"{label} {kind} {statistics.median(ratios):.2f}" for (label, kind), ratios in sorted(stacks.items())
            )
        )


if __name__ == "__main__":
    main()
