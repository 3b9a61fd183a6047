"""How often the halves rule calls a recorded compiled run `invalid`, over every record's processes: by size alone
(the rule before 2026-11-25), where the median process's halves differ beyond its noise whichever way each process
drifted (2026-11-25), and where they do so one way in most processes (analysis.validity.halves_drift, signed: the rule).

    python benchmarks/halves_rule.py [RUNS.jsonl ...]    # default: benchmarks/results/*/results/runs.jsonl

Prints a line per run either rule flags, then the counts. Disturbed processes are left out, as validity leaves them.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from compilebench.analysis.validity import halves_drift, halves_p_value, halves_ratio

LIMIT = math.log1p(0.10)  # benchmark.max_halves_diff's default


def judged(run: dict) -> tuple[bool, bool, bool, list[str]] | None:
    """(flagged by size alone, beyond noise either way, beyond noise one way, each process's halves) of a compiled
    run; None if none timed."""
    by_size, beyond_noise, shown = [], [], []
    for row in run.get("process_results") or []:
        if not isinstance(row, dict) or row.get("disturbed") or not row.get("compiled_ms"):
            continue
        eager, compiled = tuple(row["eager_ms"]), tuple(row["compiled_ms"])
        ratio = halves_ratio(eager, compiled)
        if ratio is None:
            continue
        by_size.append(abs(math.log(ratio)))
        beyond_noise.append(halves_drift(eager, compiled))
        shown.append(f"{ratio:.3f} (p {halves_p_value(eager, compiled):.3f}, {len(compiled)} rounds)")
    if not by_size:
        return None
    either_way = statistics.median(abs(drift) for drift in beyond_noise) > LIMIT
    return statistics.median(by_size) > LIMIT, either_way, abs(statistics.median(beyond_noise)) > LIMIT, shown


def main() -> None:
    paths = [Path(arg) for arg in sys.argv[1:]] or sorted(Path("benchmarks/results").glob("*/results/runs.jsonl"))
    runs = flagged_size = flagged_either = flagged_one_way = 0
    for path in paths:
        for line in path.read_text().splitlines():
            run = json.loads(line)
            outcome = None if run.get("variant") == "eager" else judged(run)
            if outcome is None:
                continue
            runs += 1
            flagged_size += outcome[0]
            flagged_either += outcome[1]
            flagged_one_way += outcome[2]
            if any(outcome[:3]):
                print(f"{path.parent.parent.name} {run['environment']} {run['model_id']} {run['variant']}: by size "
                      f"{outcome[0]}, beyond noise either way {outcome[1]}, one way {outcome[2]}; halves "
                      f"{', '.join(outcome[3])}")  # fmt: skip
    print(f"{runs} compiled runs invalid: {flagged_size} by size alone, {flagged_either} beyond noise either way, "
          f"{flagged_one_way} beyond noise one way (the rule)")  # fmt: skip


if __name__ == "__main__":
    main()
