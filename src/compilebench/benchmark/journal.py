"""What survives a crash of the benchmark stage: the trials of the current invocation that already completed.

The journal is a folder (paths.journal, outside DVC's outs, which DVC deletes before a stage runs) holding
`invocation.json` (the invocation id and the key of everything that defines it), one `results/<process>.json` per
completed process (the results of its trials, written atomically together: a timing process's arms are paired only
with each other), and the inductor caches the warm trials need. A benchmark killed mid-run
(kill -9, OOM, power) leaves the journal behind; the next run with the same invocation key resumes: it keeps the
invocation id (so MLflow runs are not duplicated) and skips completed trials. A benchmark that completes removes
its journal, so the next run measures afresh.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

from compilebench.harness.launcher import WARM_CACHES
from compilebench.harness.names import trial_stem
from compilebench.records.formats import RecordError, TrialResult
from compilebench.records.reading import check_result_row
from compilebench.records.writing import write_json

INVOCATION_FILE = "invocation.json"
RESULTS_DIR = "results"


def stable_hash(payload: Any) -> str:
    """A short hash of JSON-able data, independent of key order."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def open_journal(folder: Path, invocation_key: str, fresh: bool = False) -> tuple[str, dict[str, TrialResult], bool]:
    """(invocation id, completed trials by id, resumed?) — a new, empty journal unless one matches the key."""
    marker = folder / INVOCATION_FILE
    if not fresh and marker.exists():
        previous = json.loads(marker.read_text())
        if previous.get("invocation_key") == invocation_key:
            done = {}
            for path in (folder / RESULTS_DIR).glob("*.json"):
                try:
                    raw = json.loads(path.read_text())
                    for row in raw if isinstance(raw, list) else [raw]:  # a process's trials (one trial: a dict)
                        result = TrialResult.from_dict(check_result_row(row))
                        done[result.trial_id] = result
                except (json.JSONDecodeError, RecordError) as error:
                    raise RecordError(
                        f"{path}: {error} (the journal of an interrupted invocation; `python -m "
                        "compilebench.benchmark --fresh` starts afresh)"
                    ) from None
            return previous["invocation_id"], done, True
    shutil.rmtree(folder, ignore_errors=True)
    (folder / RESULTS_DIR).mkdir(parents=True)
    invocation_id = uuid.uuid4().hex
    write_json(marker, {"invocation_id": invocation_id, "invocation_key": invocation_key})
    return invocation_id, {}, False


def save_process(folder: Path, name: str, results: list[TrialResult]) -> None:
    """Record one completed process's trials (atomically: all of them in the journal, or none)."""
    write_json(folder / RESULTS_DIR / f"{trial_stem(name)}.json", [r.to_dict() for r in results], indent=None)


def close_journal(folder: Path, keep_caches: bool = False) -> None:
    """The invocation completed: nothing to resume. With `keep_caches`, its warm inductor caches stay where its
    processes used them (`WARM_CACHES`, until the next invocation opens the journal): inductor's cache keys hold those
    paths, so a process after it (`make explain`) runs the program the timing blocks ran without building it again."""
    if not keep_caches or not (folder / WARM_CACHES).is_dir():
        shutil.rmtree(folder, ignore_errors=True)
        return
    for entry in folder.iterdir():
        if entry.is_dir() and entry.name != WARM_CACHES:
            shutil.rmtree(entry, ignore_errors=True)
        elif not entry.is_dir():
            entry.unlink()
