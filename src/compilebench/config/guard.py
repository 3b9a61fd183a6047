"""params.yaml kept as the running pipeline's: a second `dvc exp run` beside it refused, its writes put back.

DVC's `exp run -S` writes its values into params.yaml, and moves its experiment references, before it finds a stage
busy; its stages lock only their own outputs. So a plain `dvc exp run` started beside `make compare` changed the
compare's params.yaml and broke DVC's end of it ("'NoneType' object is not subscriptable": no experiment saved).

Every stage's prologue (config.stage_config) calls `guard_stage` before it reads params.yaml. The first stage of a
DVC process (`dvc repro`, `dvc exp run`: found among the stage's ancestors) records params.yaml as that process's
(`.dvc/tmp/compilebench-params.json`); a later stage of the same process finding it changed puts it back, and a stage
of another DVC process while the recording one is alive is refused (exit 2, one line) after putting it back. After
`dvc exp run`, the make targets call `python -m compilebench.config.guard NAME STATUS`: params.yaml put back if it
changed, and where DVC failed only at its end (every stage's outputs in place, only params.yaml's recorded values
differ), the lock file recommitted and the experiment saved under NAME (`dvc exp save`), said in one line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from compilebench import logs
from compilebench.records.writing import write_atomic, write_json

LOGGER = logging.getLogger(__name__)
RECORD = Path(".dvc/tmp/compilebench-params.json")  # {"dvc": [pid, start], "command": argv, "text": params.yaml}
PARAMS = Path("params.yaml")


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, ... starttime at [19]); None: no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def dvc_ancestor(pid: int | None = None) -> tuple[tuple[int, str], list[str]] | None:
    """The DVC process this one runs under ((pid, start time), its argv), within a few generations; None: none
    (run by hand, or no /proc)."""
    pid = os.getppid() if pid is None else pid
    for _ in range(5):
        fields = _stat(pid)
        if pid <= 1 or fields is None:
            return None
        try:
            argv = [part.decode(errors="replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        except OSError:
            return None
        if any(Path(part).name == "dvc" for part in argv[:3] if part):
            return (pid, fields[19]), [part for part in argv if part]
        pid = int(fields[1])
    return None


def alive(process: tuple[int, str]) -> bool:
    fields = _stat(process[0])
    return fields is not None and fields[19] == process[1]


def changed_keys(before: str, after: str) -> list[str]:
    """The dotted keys whose values differ between two params.yaml texts (a text that does not parse: `params.yaml`)."""
    try:
        old, new = yaml.safe_load(before) or {}, yaml.safe_load(after) or {}
    except yaml.YAMLError:
        return ["params.yaml"]

    def walk(a: Any, b: Any, prefix: str) -> list[str]:
        if isinstance(a, dict) and isinstance(b, dict):
            return [
                key
                for name in sorted(set(a) | set(b), key=str)
                for key in walk(a.get(name), b.get(name), f"{prefix}{name}.")
            ]
        return [] if a == b else [f"{prefix[:-1]}: {a!r} -> {b!r}"]

    return walk(old, new, "")


def _read(record: Path) -> dict[str, Any] | None:
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return None


def _put_back(params: Path, text: str) -> list[str]:
    """params.yaml back to `text`; what had changed (nothing: [])."""
    now = params.read_text() if params.exists() else ""
    if now == text:
        return []
    write_atomic(params, text)
    return changed_keys(text, now) or ["its layout"]


def guard_stage(params: Path = PARAMS, record: Path = RECORD, dvc: tuple | None = None) -> None:
    """A stage's check before it reads params.yaml (see the module docstring); exit 2 where another DVC process's
    pipeline is running here."""
    found = dvc if dvc is not None else dvc_ancestor()
    if found is None or not record.parent.is_dir():
        return
    process, argv = found
    mine = [process[0], process[1]]
    held = _read(record)
    if held and held.get("dvc") != mine and alive(tuple(held["dvc"])):
        undone = _put_back(params, held["text"])
        LOGGER.error(
            "another DVC pipeline is running in this project (PID %s: %s); this one (%s) would change its "
            "params.yaml and break its experiment, so it stops before any work%s. Wait for it to end, or queue "
            "this one: `dvc exp run --queue ...` then `dvc queue start` once it has ended",
            held["dvc"][0],
            " ".join(held.get("command", [])[1:])[:200],
            " ".join(argv[1:])[:200],
            f" (params.yaml put back: {'; '.join(undone)})" if undone else "",
        )
        sys.exit(2)
    if not held or held.get("dvc") != mine:
        write_json(record, {"dvc": mine, "command": argv, "text": params.read_text()})  # whole: other stages read it
        return
    undone = _put_back(params, held["text"])
    if undone:
        LOGGER.warning("params.yaml changed while this pipeline ran (%s): put back as it began", "; ".join(undone))


def _dvc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["dvc", *args], capture_output=True, text=True)


def only_params_differ(status: dict[str, Any]) -> bool:
    """`dvc status --json` says every stage ran to its end: nothing but params.yaml's recorded values differ."""
    for entries in status.values():
        for entry in entries:
            if not (isinstance(entry, dict) and set(entry) == {"changed deps"}):
                return False
            if set(entry["changed deps"]) != {str(PARAMS)}:
                return False
    return True


def after(name: str, returncode: int, params: Path = PARAMS, record: Path = RECORD) -> int:
    """After `dvc exp run -n NAME` exited `returncode`: params.yaml as the experiment ran it, and the experiment
    saved where only DVC's end failed; the exit status the make target goes on with."""
    held = _read(record)
    if held is None or name not in held.get("command", []):
        return returncode  # no stage of this experiment ran (DVC stopped before, or nothing changed)
    undone = _put_back(params, held["text"])
    if undone:
        LOGGER.warning("params.yaml was changed while %s ran (%s): put back as it ran", name, "; ".join(undone))
    if returncode == 0:
        return 0
    status = _dvc("status", "--json")
    try:
        differs = json.loads(status.stdout or "{}")
    except ValueError:
        return returncode
    if not only_params_differ(differs):
        return returncode  # a stage did not end: the pipeline's own failure, said above by DVC
    from compilebench.config import load_config

    paths = load_config().paths
    if differs and _dvc("commit", "--force").returncode != 0:
        return returncode
    untracked = [item for path in (paths.metrics, paths.cells) for item in ("--include-untracked", path)]
    saved = _dvc("exp", "save", "--name", name, "--force", *untracked)
    if saved.returncode != 0:
        LOGGER.error("could not save %s as a DVC experiment: %s", name, saved.stderr.strip()[-500:])
        return returncode
    LOGGER.warning(
        "DVC could not end %s (a `dvc exp run` started beside it moved its references); every stage had ended, so "
        "it is saved as DVC experiment %s from the workspace, params.yaml as it ran",
        name,
        name,
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description="after `dvc exp run -n NAME`: params.yaml put back, NAME saved")
    parser.add_argument("name")
    parser.add_argument("returncode", type=int)
    args = parser.parse_args()
    logs.configure()
    sys.exit(after(args.name, args.returncode))


if __name__ == "__main__":
    main()
