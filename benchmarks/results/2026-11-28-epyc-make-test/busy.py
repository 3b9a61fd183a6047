"""Per xdist worker: its busy seconds, and per test module the seconds it held that worker (from timeline.jsonl)."""

import collections
import json
from pathlib import Path

rows = [json.loads(line) for line in (Path(__file__).parent / "timeline.jsonl").read_text().splitlines()]
start = min(row["start"] for row in rows)
for worker in sorted({row["w"] for row in rows}):
    mine = [row for row in rows if row["w"] == worker]
    busy = sum(row["end"] - row["start"] for row in mine)
    print(f"{worker}: {len(mine)} tests, busy {busy:.0f} s, last end at {max(r['end'] for r in mine) - start:.0f} s")
    modules = collections.Counter()
    for row in mine:
        modules[row["id"].split("::")[0]] += row["end"] - row["start"]
    for module, seconds in modules.most_common():
        if seconds >= 5:
            print(f"  {seconds:5.0f} s  {module}")
