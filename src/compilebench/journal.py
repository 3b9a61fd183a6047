"""What survives a crash of the benchmark stage: the cells of the current invocation that already completed.

The journal is a folder (paths.journal, outside DVC's outs, which DVC deletes before a stage runs) holding
`invocation.json` (the invocation id and the key of everything that defines it) and one `<cell key>.json` per
completed cell, each written atomically. A benchmark killed mid-run (kill -9, OOM, power) leaves the journal behind;
the next run with the same invocation key resumes: it keeps the invocation id (so MLflow runs are not duplicated)
and skips completed cells. A benchmark that completes removes its journal, so the next run measures afresh.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

from compilebench.files import write_json

INVOCATION_FILE = "invocation.json"


def stable_hash(payload: Any) -> str:
    """A short hash of JSON-able data, independent of key order."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def open_journal(folder: Path, invocation_key: str, fresh: bool = False) -> tuple[str, dict[str, list[dict]], bool]:
    """(invocation id, completed cells by cell key, resumed?) — a new, empty journal unless one matches the key."""
    marker = folder / INVOCATION_FILE
    if not fresh and marker.exists():
        previous = json.loads(marker.read_text())
        if previous.get("invocation_key") == invocation_key:
            cells = {
                path.stem: json.loads(path.read_text())
                for path in folder.glob("*.json")
                if path.name != INVOCATION_FILE
            }
            return previous["invocation_id"], cells, True
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    invocation_id = uuid.uuid4().hex
    write_json(marker, {"invocation_id": invocation_id, "invocation_key": invocation_key})
    return invocation_id, {}, False


def save_cell(folder: Path, cell_key: str, records: list[dict[str, Any]]) -> None:
    """Record one completed cell (atomically: a cell is either whole in the journal or absent)."""
    write_json(folder / f"{cell_key}.json", records, indent=None)


def close_journal(folder: Path) -> None:
    """The invocation completed: nothing to resume."""
    shutil.rmtree(folder, ignore_errors=True)
