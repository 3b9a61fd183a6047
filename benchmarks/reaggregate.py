"""The kept records aggregated again by two versions of the code, their tables compared file by file: what a
restructuring must leave unchanged (issue 87's check). Each record's runs, run info and noise record go into a
project folder of each version's own params.yaml and reference data, and that version's `python -m
compilebench.aggregate` (its `src/` first on the path) writes the tables there. An exported window brought back (a
folder with plan.json and results/trials.jsonl, such as the H100 windows) is first ingested by each version
(`python -m compilebench.benchmark --ingest`, into a store of its own), and its runs are compared too, line by line
as JSON (key order aside).

    python benchmarks/reaggregate.py --old 19171dc                      # every kept record, that commit against HEAD
    python benchmarks/reaggregate.py --old 19171dc --new HEAD~2 benchmarks/results/2026-12-05-epyc49-make-compare

A record is a folder holding `runs.jsonl` and `run_info.json` (in it or in its `results/`), or a window's folder;
one without a run info is named and passed over (aggregate needs the stacks' order). Exit 0 when every file of every
record is identical, 1 when any differs (the first differing line of each is printed), 2 on bad input.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("summary", "verdicts", "comparison", "metrics", "cells")  # paths.* keys of what aggregate writes


@dataclass(frozen=True)
class Record:
    name: str
    runs: Path | None  # None: a window, ingested first
    run_info: Path | None
    calibration: Path | None
    window: Path | None = None


def is_window(folder: Path) -> bool:
    return (folder / "plan.json").is_file() and (folder / "results" / "trials.jsonl").is_file()


def find_records(folders: list[Path]) -> tuple[list[Record], list[str]]:
    """The records among `folders` (each a record, or a folder of records), and the names of those passed over."""
    found, passed = [], []

    def is_record(folder: Path) -> bool:
        return is_window(folder) or any((where / "runs.jsonl").is_file() for where in (folder, folder / "results"))

    candidates = [f for folder in folders for f in ([folder] if is_record(folder) else sorted(folder.iterdir()))]
    for folder in candidates:
        if not folder.is_dir():
            continue
        if is_window(folder):
            found.append(Record(folder.name, None, None, None, window=folder))
            continue
        for where in (folder, folder / "results"):
            if (where / "runs.jsonl").is_file():
                if not (where / "run_info.json").is_file():
                    passed.append(f"{folder.name} (no run_info.json)")
                    break
                calibration = next(
                    (p for p in (where / "calibration.json", folder / "calibration.json") if p.is_file()), None
                )
                found.append(Record(folder.name, where / "runs.jsonl", where / "run_info.json", calibration))
                break
    return found, passed


def checkout(commit: str, into: Path) -> Path:
    """`commit`'s tree in `into` (git archive: no worktree left behind); its root."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def aggregate(tree: Path, record: Record, project: Path) -> dict[str, bytes]:
    """`tree`'s aggregate over `record` in a fresh `project` folder: each table's bytes (b"" where it wrote none);
    a window's, after `tree` ingested it, with its runs ("runs": each line as sorted JSON)."""
    params = yaml.safe_load((tree / "params.yaml").read_text())
    paths = params["paths"]
    project.mkdir(parents=True)
    shutil.copytree(tree / "data" / "reference", project / "data" / "reference")
    for key, source in (("results", record.runs), ("run_info", record.run_info), ("calibration", record.calibration)):
        if source is not None:
            (project / paths[key]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, project / paths[key])
    paths["tracking_uri"] = f"sqlite:///{project}/mlruns.db"  # never the user's store
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    found = {}
    if record.window is not None:
        window = project / record.name
        shutil.copytree(record.window, window)
        _run(
            ["compilebench.benchmark", "--ingest", str(window)],
            project,
            env,
            (0,),
            f"{record.name}: ingest at {tree.name}",
        )
        lines = (project / paths["results"]).read_text().splitlines()
        found["runs"] = "\n".join(json.dumps(json.loads(line), sort_keys=True) for line in lines).encode()
    _run(["compilebench.aggregate"], project, env, (0, 4), f"{record.name}: aggregate at {tree.name}")  # 4: an answer
    return found | {
        table: (project / paths[table]).read_bytes() if (project / paths[table]).exists() else b"" for table in TABLES
    }


def _run(module: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...], what: str) -> None:
    done = subprocess.run([sys.executable, "-m", *module], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode not in ok:
        raise SystemExit(f"{what} exited {done.returncode}:\n{done.stderr[-2000:]}")


def first_difference(old: bytes, new: bytes) -> str:
    lines = difflib.unified_diff(old.decode().splitlines(), new.decode().splitlines(), lineterm="", n=0)
    changed = [line for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    return " | ".join(line[:160] for line in changed[:2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="*", type=Path, default=[ROOT / "benchmarks" / "results"])
    parser.add_argument("--old", required=True, help="the commit whose code aggregates first")
    parser.add_argument("--new", default="HEAD", help="the commit it is compared with (default HEAD)")
    args = parser.parse_args()
    for commit in (args.old, args.new):
        if subprocess.run(
            ["git", "rev-parse", "--verify", "-q", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True
        ).returncode:
            parser.error(f"--old/--new {commit!r}: no such commit in {ROOT}")
    missing = [str(folder) for folder in args.records if not folder.is_dir()]
    if missing:
        parser.error(f"not a folder: {', '.join(missing)} (a record, or a folder of records)")
    records, passed = find_records(args.records)
    if not records:
        parser.error("no record with runs.jsonl and run_info.json among them")
    differ = counted = 0
    with tempfile.TemporaryDirectory(prefix="reaggregate-") as scratch:
        trees = {
            side: checkout(commit, Path(scratch) / side) for side, commit in (("old", args.old), ("new", args.new))
        }
        for record in records:
            tables = {
                side: aggregate(tree, record, Path(scratch) / f"{side}-{record.name}") for side, tree in trees.items()
            }
            compared = (("runs",) if record.window else ()) + TABLES
            for table in compared:
                old, new = tables["old"][table], tables["new"][table]
                same = old == new
                differ += not same
                counted += 1
                print(
                    f"{record.name:50s} {table:11s} {'identical' if same else 'DIFFERS: ' + first_difference(old, new)}"
                )
    for name in passed:
        print(f"passed over: {name}")
    print(f"{len(records)} record(s), {counted} files: {differ} differ ({args.old} -> {args.new})")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
