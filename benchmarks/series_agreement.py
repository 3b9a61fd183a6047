"""Two invocations of one release series, their steps judged again side by side: per cell, headline and step, the
word each gave (suite.series_steps, as the report does), and how many steps contradict (a direction in one, the
opposite in the other). What issue 79's second invocation is checked by.

    python benchmarks/series_agreement.py benchmarks/results/2026-12-02-xeon167-series \\
        benchmarks/results/2026-12-02-epyc17-series-seed1 [--series torch-2.0.1,...] [--margin 0.10]

Each argument is a folder holding an invocation's `runs.jsonl` (a record's, or a project's `data/results`). Both are
judged as their own report judged them: paired blocks, no noise record (each was its machine's first invocation),
the project's margin (params.yaml) unless `--margin`. `--series`: the stacks in order;
without it, the torch releases sorted by version (a release named twice after itself), as `make series` names them.
Invocations on two machines are judged each on its own; a step that changed on one machine and not on the other is
said, not counted as a contradiction (a machine can differ), and the machines are printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compilebench.analysis import compare, stats, suite
from compilebench.analysis.run_record import RunRecord
from compilebench.config import releases
from compilebench.records.reading import read_jsonl

DIRECTIONS = {metric.name: (metric.above, metric.below) for metric in compare.METRICS}


def read_runs(folder: Path) -> list[RunRecord]:
    """The invocation's runs (`folder/runs.jsonl`); an error names the folder when it holds none."""
    path = folder / "runs.jsonl"
    if not path.is_file():
        raise SystemExit(f"{folder}: no runs.jsonl (a record folder, or a project's data/results, is expected)")
    return [RunRecord.from_dict(row) for row in read_jsonl(path)]


def series_order(records: list[RunRecord]) -> list[str]:
    """The stacks of a release series in `make series`' order: by torch version of the environment each label names,
    a repeat (`torch-2.15.0#2`) after its first."""
    names = {record.env.environment: record.env.environment_name for record in records}

    def key(label: str) -> tuple:
        version = releases.torch_of(names[label])
        if version is None:
            raise SystemExit(f"{label!r} is no torch-X.Y.Z release: name the series' order with --series A,B,C")
        return releases.version_tuple(version), len(label), label

    return sorted(names, key=key)


def steps_of(records: list[RunRecord], labels: list[str], margin: float) -> dict[tuple, dict]:
    """Per (cell, metric, step): the step's entry from suite.series_steps, as the invocation's report judged it."""
    runs = [compare.ComparedRun.of(record) for record in records]
    compared = compare.comparison_rows(runs, None, labels, margin)
    found = {}
    for history in suite.series_steps(compared, labels, over_suite=True):  # the suite's steps too
        cell = (history["label"], history["batch_size"], history["variant"])
        for step in history["steps"]:
            found[(*cell, history["metric"], step["step"])] = step
    return found


def direction(metric: str, verdict: str) -> int:
    """+1 for B above A, -1 below, 0 for no direction (equivalent, inconclusive, a status)."""
    above, below = DIRECTIONS[metric]
    return 1 if verdict == above else -1 if verdict == below else 0


def agreement(first: dict[tuple, dict], second: dict[tuple, dict]) -> dict[str, list[tuple]]:
    """The steps both judged, sorted by what the two said: `contradict` (opposite directions), `both` (the same
    direction), `one` (a direction in one, none in the other), `quiet` (no direction in either)."""
    found: dict[str, list[tuple]] = {"contradict": [], "both": [], "one": [], "quiet": []}
    for key in sorted(first.keys() & second.keys(), key=str):
        a, b = (direction(key[3], side[key]["verdict"]) for side in (first, second))
        kind = "contradict" if a * b < 0 else "both" if a and a == b else "one" if a or b else "quiet"
        found[kind].append(key)
    return found


def said(step: dict) -> str:
    if step["ratio"] == step["ratio"]:  # not NaN
        return f"{step['verdict']} {step['ratio']:.3f} [{step['ci_low']:.3f}, {step['ci_high']:.3f}]"
    return step["verdict"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--series", help="the stacks in order, comma-separated (default: by torch version)")
    parser.add_argument("--margin", type=float, help="the margin (0.10 = +-10%%; default: params.yaml's)")
    args = parser.parse_args()
    if args.margin is None:
        from compilebench.config import stage_config

        args.margin = stage_config().margin
    if not 0 < args.margin < 1:
        parser.error(f"--margin {args.margin}: a fraction between 0 and 1 (0.10 = +-10%)")
    invocations = [read_runs(folder) for folder in (args.first, args.second)]
    stacks = [{record.env.environment for record in records} for records in invocations]
    if stacks[0] != stacks[1]:
        raise SystemExit(f"the two invocations ran different stacks: {sorted(stacks[0])} and {sorted(stacks[1])}")
    labels = args.series.split(",") if args.series else series_order(invocations[0])
    if set(labels) != stacks[0]:
        raise SystemExit(f"--series {labels} is not the stacks the invocations ran: {sorted(stacks[0])}")
    for folder, records in zip((args.first, args.second), invocations, strict=True):
        machine = records[0].env.environment_fields
        print(
            f"{folder}: invocation {records[0].identity.invocation_id}, {len(records)} runs, machine "
            f"{machine.get('machine_fingerprint')} ({machine.get('cpu_model')})"
        )
    print(f"series: {' -> '.join(labels)}; margin +-{args.margin:.0%}")
    first, second = (steps_of(records, labels, args.margin) for records in invocations)
    found = agreement(first, second)
    for kind, title in (("contradict", "CONTRADICT"), ("both", "changed in both"), ("one", "a direction in one")):
        for key in found[kind]:
            print(
                f"{title:>18}: {key[0]} bs{key[1]} {key[2]} {key[3]} {key[4]}: {said(first[key])} | {said(second[key])}"
            )
    changed = [sum(step["changed"] for step in side.values()) for side in (first, second)]
    print(
        f"{len(first.keys() & second.keys())} (cell, headline, step) judged in both: {len(found['contradict'])} "
        f"contradicting, {len(found['both'])} the same direction, {len(found['one'])} a direction in one only, "
        f"{len(found['quiet'])} no direction in either; changed beyond the margin: {changed[0]} and {changed[1]}"
    )
    words = {(key[3], first[key]["verdict"], second[key]["verdict"]) for key in found["quiet"]}
    quiet = {word for _, a, b in words for word in (a, b)}
    print(
        f"words where neither gave a direction: {sorted(quiet - {stats.EQUIVALENT, stats.INCONCLUSIVE}) or 'none'}"
        " beside equivalent and inconclusive"
    )
    sys.exit(1 if found["contradict"] else 0)


if __name__ == "__main__":
    main()
