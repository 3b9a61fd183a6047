"""Where a trial process's wall time goes, per model: the phases of its timeline, from a launcher's records.

    python benchmarks/process_time.py benchmarks/results/2026-11-27-h100-paper-bs1-w2 [RECORD ...]
    python benchmarks/process_time.py data --kind arm     # the last pipeline run's timing processes (its runs.jsonl)

Reads each record's results/trials.jsonl (the processes that time, one after another; the compile-only ones that
prime a cache run side by side), or, where it has none, the runs of a record or of a project's data folder
(results/runs.jsonl: every process once, with its kind), and prints a Markdown table: per model and batch size, the
median seconds of each phase over its processes, and over all of them with each phase's share of the wall time. A
phase is named by what the process had just done (trial.mark): `imported` is the interpreter and the imports,
`started` the machine's record (versions, NVML, nvidia-smi) and the numerics set (in older timelines: both); `exit`
is the launcher's wall time after the result was written (the interpreter's teardown, where a process still paid it);
`its turn` (a block run together) the imports and the wait for the first turn. A record from before processes kept a
timeline (result format 2) shows its separately measured parts and the rest as `not accounted`. `own` is a process's
own time, what the budget counts: its wall time less its waits for turns. `--kind` keeps one kind of process (arm: a
timing process, cold, paired).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from compilebench.analysis.per_process import ProcessRecord
from compilebench.analysis.run_record import RunRecord
from compilebench.records.formats import MEASURED_NOTHING, RecordError, TrialResult
from compilebench.records.reading import read_result_lines


def phases_s(arms: list[TrialResult]) -> dict[str, float]:
    """One process's wall time in phases (its results share the process's timeline and wall time)."""
    first = arms[0]
    if first.timeline_s:
        phases, before = {}, 0.0
        for moment, age_s in first.timeline_s.items():
            phases[moment], before = age_s - before, age_s
        return {**phases, "exit": first.wall_s - before}
    compiles = [arm.compile_s for arm in arms if arm.compile_s is not None]
    parts = {
        "started": first.startup_s,
        "loaded": first.load_s,
        "eager first call": first.eager_first_call_s,
        "inductor started": first.inductor_startup_s,
        "compiled": sum(compiles) if compiles else None,
        "warmed up": first.warmup_s,
        "timed": first.timed_s,
    }
    measured = {name: seconds for name, seconds in parts.items() if seconds is not None}
    return {**measured, "not accounted": first.wall_s - sum(measured.values())}


OWN = "own"  # not a phase: the process's wall time less its waits for turns (what the budget counts)


def processes(results: list[TrialResult]) -> dict[tuple[str, str], list[dict[str, float]]]:
    """The phases of each process whose trials all measured, by (model, batch size) as their trial ids name them,
    with its own time under OWN."""
    grouped: dict[float, list[TrialResult]] = defaultdict(list)
    for result in results:
        grouped[result.started_at].append(result)  # a process's results share the moment the launcher started it
    found: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for arms in grouped.values():
        if all(arm.status not in MEASURED_NOTHING for arm in arms):
            _environment, model, batch, *_ = arms[0].trial_id.split("/")
            found[(model, batch)].append({**phases_s(arms), OWN: arms[0].own_s})
    return found


def table(found: dict[tuple[str, str], list[dict[str, float]]]) -> list[str]:
    """Markdown: median seconds per phase, a row per model and batch size, and a row over every process."""
    every = [process for group in found.values() for process in group]
    names = list(dict.fromkeys(name for process in every for name in process if name != OWN))

    def medians(group: list[dict[str, float]]) -> list[str]:
        cells = []
        for name in names:
            values = [process[name] for process in group if name in process]
            cells.append(f"{statistics.median(values):.2f}" if values else "")
        return cells

    def wall(group: list[dict[str, float]]) -> str:
        walls = [sum(seconds for name, seconds in process.items() if name != OWN) for process in group]
        return f"{statistics.median(walls):.1f} | {statistics.median(process[OWN] for process in group):.1f}"

    head = "| model | batch | processes | wall | own | " + " | ".join(names) + " |"
    lines = [head, "|---" * (len(names) + 5) + "|"]
    for (model, batch), group in sorted(found.items()):
        lines.append(f"| {model} | {batch} | {len(group)} | {wall(group)} | " + " | ".join(medians(group)) + " |")
    all_wall_s = sum(sum(s for name, s in process.items() if name != OWN) for process in every)
    shares = [f"{100 * sum(process.get(name, 0.0) for process in every) / all_wall_s:.0f}%" for name in names]
    lines.append(f"| all | | {len(every)} | {wall(every)} | " + " | ".join(medians(every)) + " |")
    lines.append("| share of all wall time | | | | | " + " | ".join(shares) + " |")
    return lines


def run_processes(path: Path) -> list[tuple[ProcessRecord, str]]:
    """Every process of a runs.jsonl once (the runs of one process list it each), with its model and batch size."""
    found: dict[tuple[str, str, float], tuple[ProcessRecord, str]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = RunRecord.from_dict(json.loads(line))
        for process in record.process_results:
            key = (record.env.environment, process.process_id or process.trial_id, process.started_at)
            found.setdefault(key, (process, f"{record.cell.model_id.split('/')[-1]}|bs{record.cell.batch_size}"))
    return list(found.values())


def as_result(process: ProcessRecord) -> TrialResult:
    """A run's process as the launcher's result line the table reads: its id, status, timeline and wall time."""
    return TrialResult(
        process.trial_id,
        process.status,
        started_at=process.started_at,
        wall_s=process.wall_s,
        timeline_s=process.timeline_s,
        turn_wait_s=process.turn_wait_s,
    )


def read_record(folder: Path, kind: str | None) -> list[TrialResult]:
    """A record's processes: its launcher's trials.jsonl, else the runs.jsonl of a record or a project's data."""
    trials = folder / "results" / "trials.jsonl"
    if trials.exists():
        if kind is not None:
            raise ValueError(f"{trials} holds results without their kinds (the plan has them): --kind reads runs")
        return read_result_lines(trials)
    for runs in (folder / "results" / "runs.jsonl", folder / "data" / "results" / "runs.jsonl"):
        if runs.exists():
            return [as_result(process) for process, _ in run_processes(runs) if kind is None or process.kind == kind]
    raise OSError(f"{folder}: neither results/trials.jsonl nor results/runs.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", type=Path, help="folders with results/trials.jsonl or runs.jsonl")
    parser.add_argument("--kind", choices=("arm", "cold", "paired"), help="only processes of this kind")
    args = parser.parse_args()
    try:
        results = [result for record in args.records for result in read_record(record, args.kind)]
    except (OSError, RecordError, ValueError, KeyError) as error:  # no such record, or a line that is not a result
        sys.exit(f"process_time: {error}; a record is a folder with results/trials.jsonl or results/runs.jsonl")
    found = processes(results)
    if not found:
        sys.exit(f"no process whose trials all measured in the records {', '.join(map(str, args.records))}")
    print("\n".join(table(found)))


if __name__ == "__main__":
    main()
