"""A dated record of a measured run, made from the project's own outputs: what docs and notes quote by link.

    python benchmarks/record.py PROJECT benchmarks/results/DATE-MACHINE-WHAT --command "dvc exp run -S ..." \
        --wall-s 1205 [--note "what else ran on the machine"]

Copies PROJECT's results (every run with every process's raw samples, the tables, run_info.json where it was kept: DVC
does not cache it) and the machine's noise record into the record folder: data only (the report and figures are made
again from them by the aggregate and plot stages), and writes its README.md: the command, when it ended, the wall time,
the commit it measured, the machine (CPU or GPU name and fingerprint, from the runs), the stacks and what the folder
holds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from compilebench.analysis.run_record import settings_text
from compilebench.records.reading import read_jsonl


def machine(rows: list[dict]) -> str:
    """The machine the runs name: its device and fingerprint, as every run records them."""
    first = next((row for row in rows if row.get("machine_fingerprint")), rows[0])
    return f"`{first.get('device_name', '?')}` (fingerprint `{first.get('machine_fingerprint', '?')}`)"


def processes(rows: list[dict]) -> int:
    """How many fresh processes measured the runs (a timing process serves every run of its arms)."""
    return len(
        {process.get("process_id") or process["trial_id"] for row in rows for process in row.get("process_results", [])}
    )


def stacks(rows: list[dict]) -> list[str]:
    """Each environment measured, with the torch and transformers its runs recorded, and what it set in place of
    `benchmark` where it set anything (an environment of settings)."""
    seen = {}
    for row in rows:
        settings = json.loads(row.get("environment_settings") or "{}")
        way = f", run with {settings_text(settings)}" if settings else ""
        seen.setdefault(
            row["environment"], f"torch {row.get('torch_version')}, transformers {row.get('transformers_version')}{way}"
        )
    return [f"`{label}`: {versions}" for label, versions in seen.items()]


def planned(info: dict, measured: int) -> str:
    """How many of a run's processes its plan had, and how many the adaptive loop added."""
    if "planned_processes" not in info:  # an ingest from before the count was kept, or run_info.json not kept
        return "planned and added not told apart"
    count = info["planned_processes"]
    if measured < count:  # an ingest of a plan not run to its end
        return f"of {count} planned"
    return f"{count} planned, {measured - count} added by the adaptive loop"


def last_end(rows: list[dict]) -> datetime:
    """When the last of the runs' processes ended: what `ended` says where run_info.json was not kept."""
    return datetime.fromtimestamp(
        max(process["started_at"] + process["wall_s"] for row in rows for process in row.get("process_results", [])),
        UTC,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("record", type=Path)
    parser.add_argument("--command", required=True, help="what was run, as typed")
    parser.add_argument("--wall-s", type=float, required=True, help="its wall time, start to exit")
    parser.add_argument("--note", default="", help="anything a reader must know (what else ran, what was changed)")
    parser.add_argument("--data", type=Path, help="where its outputs were saved (default: PROJECT/data)")
    args = parser.parse_args()
    record = args.record
    if record.exists():
        raise SystemExit(f"{record} exists: a record is written once")
    data = args.data or args.project / "data"
    missing = [
        str(data / part) for part in ("results", "report", "plots", "results/runs.jsonl") if not (data / part).exists()
    ]
    if missing:
        raise SystemExit(f"not a finished run's outputs, missing: {', '.join(missing)}; nothing written")
    shutil.copytree(data / "results", record / "results", ignore=shutil.ignore_patterns("*.tmp"))
    if (data / "calibration.json").exists():
        shutil.copyfile(data / "calibration.json", record / "calibration.json")
    rows = read_jsonl(data / "results" / "runs.jsonl")
    run_info = data / "results" / "run_info.json"  # DVC does not cache it: an experiment run after takes its place
    info = json.loads(run_info.read_text()) if run_info.exists() else {}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=args.project, capture_output=True, text=True
    ).stdout.strip()
    ended = datetime.fromtimestamp(run_info.stat().st_mtime, UTC) if run_info.exists() else last_end(rows)
    minutes, seconds = divmod(int(args.wall_s), 60)
    measured = processes(rows)
    lines = [
        f"# {record.name}",
        "",
        f"Measured in a clone of compilebench at `{commit}`, ended {ended:%Y-%m-%dT%H:%M:%SZ}, on {machine(rows)}.",
        "",
        "```bash",
        args.command,
        "```",
        "",
        f"Wall time {int(args.wall_s)} s ({minutes} min {seconds} s); {measured} processes "
        f"({planned(info, measured)}), {len(rows)} runs.",
        "",
        "Stacks: " + "; ".join(stacks(rows)) + ".",
        "",
        *([args.note, ""] if args.note else []),
        "`results/` holds every run with every process's raw samples (`runs.jsonl`), the tables and `run_info.json`; "
        "`calibration.json` is the machine's noise record after this run.",
        "",
    ]
    (record / "README.md").write_text("\n".join(lines))
    print(f"wrote {record}")


if __name__ == "__main__":
    main()
