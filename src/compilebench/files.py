"""Files a reader never sees half-written: write beside the target, then rename over it (atomic on POSIX)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def write_json(path: str | Path, payload: Any, indent: int | None = 2) -> None:
    """JSON, atomically."""
    write_atomic(path, json.dumps(payload, indent=indent, default=str))


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """JSON lines, atomically."""
    write_atomic(path, "".join(json.dumps(row, default=str) + "\n" for row in rows))
