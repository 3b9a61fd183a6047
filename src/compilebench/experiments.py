"""`make experiments`: every DVC experiment's comparison in a width a terminal holds.

    python -m compilebench.experiments     # what `make experiments` runs

Per experiment (DVC's name, when it ran) and compared environment, one line per metric: the suite's word, its
geometric-mean B/A with the 95% CI, and how many cells changed of those counted, compile time included. It reads
what `dvc exp show --json` reads: each experiment's metrics file (aggregate's `headline_metrics`). An experiment of
one environment says so in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compilebench import tracking
from compilebench.analysis import compare, keys
from compilebench.config import load_config

WORKSPACE = "workspace"  # `dvc exp show`'s row of the results in data/ now


@dataclass(frozen=True)
class Experiment:
    """One row of `dvc exp show`: its name (an experiment's, a branch's or `workspace`), when, its metrics."""

    name: str
    timestamp: str
    metrics: dict[str, Any]


def read_shown(shown: list[dict[str, Any]], metrics_path: str) -> list[Experiment]:
    """The experiments of `dvc exp show --json` whose metrics file was read, the workspace's only where it differs
    from every experiment's (DVC lists the newest experiment's results twice)."""
    found, workspace = [], None
    for entry in shown:
        for row in [entry, *(rev for group in entry.get("experiments") or () for rev in group.get("revs") or ())]:
            data = row.get("data") or {}
            metrics = ((data.get("metrics") or {}).get(metrics_path) or {}).get("data")
            if not metrics:
                continue
            name = row.get("name") or str(row.get("rev", ""))[:7]
            if row.get("rev") == WORKSPACE:
                name = f"{WORKSPACE} (data/ as it is now: no experiment of this commit has these results)"
            experiment = Experiment(name, data.get("timestamp") or "", metrics)
            if row.get("rev") == WORKSPACE:
                workspace = experiment
            else:
                found.append(experiment)
    if workspace and all(workspace.metrics != experiment.metrics for experiment in found):
        found.append(workspace)
    return sorted(found, key=lambda experiment: experiment.timestamp or "~")  # the workspace last


def stacks(metrics: dict[str, Any]) -> list[str]:
    """The compared environments' prefixes in a metrics file (`torch-2.14.1_vs_current`), in its order."""
    return [
        key.removesuffix("_changed")
        for key in metrics
        if key.endswith("_changed") and "_vs_" in key and not key.endswith("_cells_changed")
    ]


def lines(experiment: Experiment) -> list[str]:
    """An experiment's comparison as text: a heading, then per compared environment a line per metric."""
    when = experiment.timestamp.replace("T", " ")
    text = [f"{experiment.name}" + (f"  ({when})" if when else "")]
    prefixes = stacks(experiment.metrics)
    if not prefixes:
        return [*text, "  one environment: no comparison (`make compare B=...`)", ""]
    for prefix in prefixes:
        text.append(f"  {prefix.replace('_vs_', ' vs ')}")  # a stack's name may be long: a line of its own
        text.append(f"    {'metric':<24}{'word':<14}{'suite B/A [95% CI]':<24}cells changed")
        for metric in compare.METRICS:
            value = experiment.metrics.get(keys.metric_key(prefix, keys.column(metric.name, "geomean")))
            code = experiment.metrics.get(keys.metric_key(prefix, keys.column(metric.name, "verdict_code")))
            if value is None and code is None:
                continue
            low = experiment.metrics.get(keys.metric_key(prefix, keys.column(metric.name, "ci_low")))
            high = experiment.metrics.get(keys.metric_key(prefix, keys.column(metric.name, "ci_high")))
            ratio = (
                "" if value is None else f"{value:.3f} " + (f"[{low:.3f}, {high:.3f}]" if low and high else "[no CI]")
            )
            word = tracking.verdict_word(int(code), metric) if code is not None else "(older: no word)"
            cells = experiment.metrics.get(keys.metric_key(prefix, keys.column(metric.name, "cells")))
            changed = experiment.metrics.get(keys.metric_key(prefix, keys.column(metric.name, "cells_changed")))
            counted = f"{changed} of {cells}" if cells is not None else ""
            text.append(f"    {metric.name.replace('_', ' '):<24}{word:<14}{ratio:<24}{counted}")
    return [*text, ""]


def render(experiments: list[Experiment]) -> str:
    if not experiments:
        return "no experiment with results yet: `make run` or `make compare B=torch-2.14.1`\n"
    return "\n".join(line for experiment in experiments for line in lines(experiment))


def main() -> None:
    config = load_config()
    beside = Path(sys.executable).parent / "dvc"  # the project's own DVC, where the interpreter is the project's
    try:
        done = subprocess.run(
            [str(beside) if beside.exists() else "dvc", "exp", "show", "--json", "--no-pager"],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        print("no `dvc` found: run `make experiments` (it uses the project's .venv)", file=sys.stderr)
        sys.exit(2)
    if done.returncode != 0:
        print(f"`dvc exp show` failed (exit {done.returncode}): {done.stderr.strip()[-500:]}", file=sys.stderr)
        sys.exit(2)
    sys.stdout.write(render(read_shown(json.loads(done.stdout or "[]"), str(config.paths.metrics))))


if __name__ == "__main__":
    main()
