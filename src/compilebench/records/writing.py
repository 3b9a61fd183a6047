"""Files a reader never sees half-written, even after a power loss: write a unique temporary file beside the
target, flush it to disk, rename it over the target (atomic on POSIX), then flush the folder's entry. Lines appended
to a JSON-lines file after cutting off a torn last line. And a lock on a file beside one that several processes
update (read, change, write)."""

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


def append_lines(path: str | Path, lines: list[str]) -> None:
    """Append `lines` (each without its newline) in one write, on disk once this returns. A last line without its
    newline (a write a kill cut short, or a copy taken while the file was written) is cut off first: appended after
    it, the first new line would join it and neither could be read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    with open(path, "r+b") as handle:
        end = handle.seek(0, os.SEEK_END)
        if end:
            handle.seek(end - 1)
            if handle.read(1) != b"\n":
                handle.seek(0)
                end = handle.read().rfind(b"\n") + 1
                handle.truncate(end)
        handle.seek(end)
        handle.write("".join(line + "\n" for line in lines).encode())
        handle.flush()
        os.fsync(handle.fileno())


def write_json(path: str | Path, payload: Any, indent: int | None = 2) -> None:
    """JSON, atomically."""
    write_atomic(path, json.dumps(payload, indent=indent, default=str))


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """JSON lines, atomically."""
    write_atomic(path, "".join(json.dumps(row, default=str) + "\n" for row in rows))
