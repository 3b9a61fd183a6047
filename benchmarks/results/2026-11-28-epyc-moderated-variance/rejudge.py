"""Every committed comparison record judged again, each cell alone (as main judges) and moderated by the other cells.

    git checkout 0805132 && python benchmarks/results/2026-11-28-epyc-moderated-variance/rejudge.py

Per record: the headline verdicts decided (a direction or `equivalent`) and, of those, directions; then every
(cell, metric) verdict likewise. No noise record is used (as a fresh clone's first comparison judges).
"""

import glob
import json
import os
from pathlib import Path

from compilebench.analysis import compare

QUIET = ("inconclusive", "equivalent")


def counts(compared: list[dict]) -> str:
    heads = [row["verdict"] for row in compared]
    every = [row[f"{m.name}_verdict"] for row in compared for m in compare.METRICS if row.get(f"{m.name}_verdict")]
    return (f"headlines {sum(v != 'inconclusive' for v in heads)}/{len(heads)} (directions "
            f"{sum(v not in QUIET for v in heads)}), verdicts {sum(v != 'inconclusive' for v in every)}/{len(every)} "
            f"(directions {sum(v not in QUIET for v in every)})")  # fmt: skip


for folder in sorted(glob.glob("benchmarks/results/*/results")):
    if not os.path.exists(f"{folder}/runs.jsonl"):
        continue
    rows = [json.loads(line) for line in Path(f"{folder}/runs.jsonl").read_text().splitlines()]
    labels = list(dict.fromkeys(row["environment"] for row in rows))
    if len(labels) < 2:
        continue
    info = json.loads(Path(f"{folder}/run_info.json").read_text())
    labels = list(info.get("environments") or labels)
    alone, moderated = (
        [row for row in compare.comparison_rows(rows, None, labels, 0.05, moderated=m) if row["reference"] == "first"]
        for m in (False, True)
    )
    print(f"{folder.split('/')[2]}: {' vs '.join(labels[1:])} against {labels[0]}")
    print(f"  alone:     {counts(alone)}")
    print(f"  moderated: {counts(moderated)}")
