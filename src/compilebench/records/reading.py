"""Reading the records back, checked: a plan, a launcher's result lines (every field of its format present and of
its declared type; a torn last line left out), JSON and JSON-lines files. Each error is a RecordError naming the
file, the line and the key. Standard library only, like records.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from compilebench.records.formats import (
    RESULT_FIELDS_ADDED,
    RESULT_FORMAT,
    STATUSES,
    Plan,
    RecordError,
    TrialResult,
)
from compilebench.records.selection import Selection


def _type_ok(value: Any, hint: str) -> bool:
    """Whether a JSON value fits a field's annotation (as written in this module)."""
    options = [part.strip() for part in hint.split("|")]
    if value is None:
        return "None" in options
    for option in options:
        base = option.split("[")[0]
        if (base == "str" and isinstance(value, str)) or (base == "bool" and isinstance(value, bool)):
            return True
        if base == "int" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if base == "float" and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if base == "tuple" and isinstance(value, list | tuple):
            return True
        if base in ("dict", "CompileHealth") and isinstance(value, dict):
            return True
        if base == "Any":
            return True
    return False


def check_result_row(raw: Any) -> dict[str, Any]:
    """A TrialResult line as read from JSON, checked: an object, every field of its format present, each of the
    declared type. A line of format 1 (no `format`) lacks the fields added since: they take their defaults. Raises
    RecordError naming the key."""
    if not isinstance(raw, dict):
        raise RecordError(f"a result must be a JSON object, got {type(raw).__name__}")
    row = dict(raw)
    version = row.pop("format", 1)
    if version not in range(1, RESULT_FORMAT + 1):
        raise RecordError(f"result format {version!r} is not one this version reads (1 to {RESULT_FORMAT})")
    declared = {f.name: f for f in fields(TrialResult)}
    unknown = sorted(set(row) - set(declared))
    if unknown:
        raise RecordError(f"unknown keys {unknown}")
    later = {name for added, names in RESULT_FIELDS_ADDED.items() if added > version for name in names}
    required = set(declared) - later if version > 1 else {"trial_id", "status"}
    missing = sorted(required - set(row))
    if missing:
        raise RecordError(f"missing keys {missing}")
    for name, value in row.items():
        if not _type_ok(value, str(declared[name].type)):
            raise RecordError(f"key {name!r} must be {declared[name].type}, got {type(value).__name__} {value!r:.60}")
    if row["status"] not in STATUSES:
        raise RecordError(f"key 'status' must be one of {STATUSES}, got {row['status']!r}")
    return row


def plan_digest(path: str | Path) -> str:
    """The identity of a plan: the SHA-256 of its plan.json as written, which every result line a launcher writes
    for it carries (`plan_sha256`), so that lines of another plan, or a plan edited since, are told apart."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_result_lines(path: Path, plan_sha256: str | None = None) -> list[TrialResult]:
    """Every result of a JSON-lines file (a launcher's trials.jsonl), checked line by line (check_result_row); a
    torn last line, a write a kill cut short, is left out. With `plan_sha256`, a line that names another plan is
    refused (a line of an older format, which names none, is taken as it is). Raises RecordError naming the file,
    line and key."""
    text = Path(path).read_text()
    lines = text.splitlines()
    results = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) and not text.endswith("\n"):
                continue  # the last write, cut short by a kill: its process runs again
            raise RecordError(f"{path}, line {number}: not JSON ({error.msg})") from None
        try:
            result = TrialResult.from_dict(check_result_row(raw))
        except (RecordError, TypeError, ValueError) as error:
            raise RecordError(f"{path}, line {number}: {error}") from None
        if plan_sha256 and result.plan_sha256 and result.plan_sha256 != plan_sha256:
            raise RecordError(
                f"{path}, line {number}: key 'plan_sha256' names another plan ({result.plan_sha256[:12]}"
                f"; this plan is {plan_sha256[:12]}): a line of another plan's results"
            )
        results.append(result)
    return results


def read_json(path: str | Path) -> Any:
    """A JSON file's content."""
    return json.loads(Path(path).read_text())


def read_plan(path: str | Path) -> Plan:
    """An exported plan; RecordError naming the file and what is wrong with it."""
    try:
        raw = read_json(path)
    except OSError as error:
        raise RecordError(f"no plan readable at {path} ({error.strerror or error})") from None
    except json.JSONDecodeError as error:
        raise RecordError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(raw, dict) or "invocation_id" not in raw or "trials" not in raw:
        raise RecordError(
            f"{path}: not a plan written by `compilebench.benchmark --export` (a JSON object with "
            f"'invocation_id' and 'trials')"
        )
    try:
        return Plan.from_dict(raw)
    except KeyError as error:
        raise RecordError(f"{path}: a trial or recipe lacks the key {error}") from None
    except (TypeError, ValueError) as error:
        raise RecordError(f"{path}: a trial or recipe cannot be read ({error})") from None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file (blank lines skipped)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_selection(path: str | Path) -> Selection:
    """An invocation's selection (paths.selection, load_models' output); RecordError where it is not one."""
    try:
        return Selection.from_dict(read_json(path))
    except (KeyError, TypeError, ValueError) as error:
        raise RecordError(
            f"{path}: not a selection written by load_models ({error}): run `dvc repro load_models`"
        ) from None
