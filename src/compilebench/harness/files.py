"""Files a reader never sees half-written, even after a power loss: write a unique temporary file beside the
target, flush it to disk, rename it over the target (atomic on POSIX), then flush the folder's entry. And a lock on
a file beside one that several processes update (read, change, write)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` to `path`: whole or not at all, durable once this returns."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a power loss
    finally:
        os.close(folder)


@contextlib.contextmanager
def locked(path: str | Path):
    """An exclusive lock on `path` (a file beside what it guards, made if missing): other processes wait for it."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def write_json(path: str | Path, payload: Any, indent: int | None = 2) -> None:
    """JSON, atomically."""
    write_atomic(path, json.dumps(payload, indent=indent, default=str))


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """JSON lines, atomically."""
    write_atomic(path, "".join(json.dumps(row, default=str) + "\n" for row in rows))
