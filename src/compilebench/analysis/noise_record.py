"""A machine's noise record (paths.calibration): per machine and device, each invocation's paired blocks as a sum of
squares with its degrees of freedom per cell and metric; read, summed and written here.

Every comparison and A/A run adds the spread of its per-block log differences of each (cell, metric) it judged
(`compare.noise_measured`), and a later comparison of that cell on that machine and device pools it with its own
blocks (`machine_noise`, leaving out the invocation being judged). Sums, never a maximum, so an A/A's lucky or
unlucky blocks count as their degrees of freedom say. A block's difference made another way is another quantity
with its own noise: a metric whose blocks paired their rounds by turn (stats.PAIRED_BY_TURN) is recorded under
`{metric}@turns` (`noise_name`), never summed with the same metric's per-process medians (records made before turns
were recorded hold those only). Pure functions over the record (JSON) and `stats.Noise`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compilebench.analysis import stats
from compilebench.records.formats import RecordError

CALIBRATION_VERSION = 2  # 1 held a margin (the largest A/A deviation): not used any more
CellNoise = dict[str, dict[str, stats.Noise]]  # cell_key -> metric -> noise of its paired differences


BY_TURN = "@turns"  # a metric's name in a record, where its blocks' differences paired rounds by turn


def noise_name(metric: str, method: str) -> str:
    """A metric's name in a noise record, by how its blocks' differences were made (`stats.Ratio.method`)."""
    return f"{metric}{BY_TURN}" if method == stats.PAIRED_BY_TURN else metric


def cell_key(model_id: str, batch_size: int, variant: str) -> str:
    """A cell in a noise record: model, batch size and variant (what one row of a comparison is about)."""
    return f"{model_id}|bs{batch_size}|{variant}"


def load_calibrations(path: str | Path) -> dict[str, Any]:
    """Every machine's noise record in paths.calibration, by machine fingerprint and device ({} before the first).
    A file that is not such a record (cut short, edited, another file) raises RecordError naming it and what is wrong:
    it is never read as empty, which would write a fresh record over it."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RecordError(
            f"{path}: the noise record is not JSON ({error}); mend or delete it (paths.calibration)"
        ) from None
    problem = None
    if not isinstance(found, dict):
        problem = f"a JSON object by machine is expected, got {type(found).__name__}"
    else:
        for key, record in found.items():
            if not isinstance(record, dict) or not isinstance(record.get("invocations", {}), dict):
                problem = f"the record of {key!r} is not an object with `invocations`"
                break
            bad = [
                name
                for name, entry in record.get("invocations", {}).items()
                if not isinstance(entry, dict) or not isinstance(entry.get("noise", {}), dict)
            ]
            if bad:
                problem = f"the record of {key!r} has invocations without a `noise` object: {bad[:3]}"
                break
    if problem:
        raise RecordError(f"{path}: not a noise record: {problem}; mend or delete it (paths.calibration)")
    return found


def calibration_key(machine_fingerprint: str | None, device: str | None) -> str:
    """Noise records hold per machine (its fingerprint) and device."""
    return f"{machine_fingerprint}|{device}"


def machine_noise(record: dict[str, Any] | None, leave_out: str | None = None) -> CellNoise:
    """A machine's noise per cell and metric from its record in paths.calibration: the sum over every invocation
    that measured the cell, except `leave_out` (the invocation being judged, which must not count its blocks twice).
    An older record (version 1, a margin) holds no variance and gives nothing."""
    if not record or record.get("version") != CALIBRATION_VERSION:
        return {}
    total: CellNoise = {}
    for invocation, entry in record.get("invocations", {}).items():
        if invocation == leave_out:
            continue
        for cell, metrics in entry["noise"].items():
            per_cell = total.setdefault(cell, {})
            for metric, (ss, dof) in metrics.items():
                per_cell[metric] = per_cell.get(metric, stats.Noise()) + stats.Noise(float(ss), int(dof))
    return total


def record_noise(record: dict[str, Any] | None, invocation: str, measured: CellNoise, about: dict) -> dict[str, Any]:
    """The machine's record with this invocation's contribution set (replacing an earlier one of the same
    invocation: judging it again adds nothing twice); older records are started afresh."""
    if not record or record.get("version") != CALIBRATION_VERSION:
        record = {"version": CALIBRATION_VERSION, "invocations": {}}
    invocations = dict(record["invocations"])
    noise = {cell: {m: [n.ss, n.dof] for m, n in metrics.items()} for cell, metrics in measured.items()}
    invocations[invocation] = {**about, "noise": noise}
    return {**record, "invocations": invocations}


def pooled_by_metric(noise: CellNoise) -> dict[str, stats.Noise]:
    """A record summed over its cells, per metric (what a log line or a power estimate reports)."""
    total: dict[str, stats.Noise] = {}
    for metrics in noise.values():
        for metric, value in metrics.items():
            total[metric] = total.get(metric, stats.Noise()) + value
    return total
