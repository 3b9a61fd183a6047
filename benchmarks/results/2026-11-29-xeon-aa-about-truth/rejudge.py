"""Issue 51, item 3: the committed Xeon comparisons judged again with a noise record made of the A/A runs recorded on
their machine, under three rules for what an A/A adds: `single blocks about truth` (compilebench's from this record
on: a cell with one block a side, a cold compile, adds its one difference about B / A = 1; the others their spread
about their own mean), `all about truth` (every cell's blocks about B / A = 1: tried, not adopted) and `before` (about
the mean only: a single block adds nothing). Per machine: the record's degrees of freedom for cold compile, then per
comparison the headline verdicts decided, per metric, and every cold compile B / A with its 95% interval.

    python benchmarks/results/2026-11-29-xeon-aa-about-truth/rejudge.py

Only records of one machine (its fingerprint) are used together: noise differs from machine to machine of one kind.
"""

import json
from pathlib import Path

from compilebench.analysis import compare, noise_record, stats
from compilebench.analysis.runs import RunRecord

RESULTS = Path(__file__).resolve().parents[1]
HEADLINES = ("eager_latency", "compiled_latency", "speedup", "compile_cold")
MACHINES = {  # fingerprint: (its A/A records, its comparisons)
    "c77956ccca10": (["2026-11-24-xeon-aa"], ["2026-11-24-xeon-torch-2.14.1-a", "2026-11-24-xeon-torch-2.14.1-b"]),
    "ba45c91bfc9e": (["2026-11-28-xeon-aa-10s"], ["2026-11-28-xeon-torch-2.14.1-10s"]),
    "06d5d2a80322": (
        ["2026-11-29-xeon-aa-by-turn", "2026-11-29-xeon-aa-startnet", "2026-11-29-xeon-aa-cold-blocks"],
        [
            "2026-11-29-xeon-torch-2.14.1-by-turn",
            "2026-11-29-xeon-torch-2.14.1-startnet",
            "2026-11-29-xeon-torch-2.14.1-cold-blocks",
        ],
    ),
}


def runs_of(record: str) -> tuple[list[compare.ComparedRun], list[str], float]:
    """A record's runs as a comparison reads them, its environments in the order compared, its margin."""
    folder = RESULTS / record / "results"
    runs = [compare.ComparedRun.of(RunRecord.from_dict(json.loads(line)))
            for line in (folder / "runs.jsonl").read_text().splitlines() if line.strip()]  # fmt: skip
    machines = {run.machine_fingerprint for run in runs}
    labels = list(dict.fromkeys(json.loads((folder / "runs.jsonl").read_text().splitlines()[0]).get("compare") or []))
    if len(labels) < 2:
        import pandas as pd

        first = pd.read_csv(folder / "comparison.csv")
        first = first[first["reference"] == compare.FIRST]
        labels = [str(first["baseline"].iloc[0]), *dict.fromkeys(str(label) for label in first["candidate"])]
    return runs, labels, machines


RULES = ("single blocks about truth", "all about truth", "before")


def all_about_truth(rows: list[compare.Comparison]) -> noise_record.CellNoise:
    """What an A/A would add if every cell's blocks counted about B / A = 1 (not adopted)."""
    measured: noise_record.CellNoise = {}
    for row in rows:
        if row.reference != compare.FIRST or row.baseline_status != "ok" or row.candidate_status != "ok":
            continue
        for name, judged in row.judged.items():
            ratio = judged.ratio
            one = ratio.blocks == 1 and name not in compare.BY_TURN_METRICS and ratio.method == stats.SINGLE
            if ratio.noisy or not (one or ratio.method in stats.PAIRED_METHODS):
                continue
            method = stats.PAIRED if one else ratio.method
            cell = stats.noise_about_truth(ratio)
            if cell.dof:
                per_cell = measured.setdefault(noise_record.cell_key(row.model_id, row.batch_size, row.variant), {})
                recorded = noise_record.noise_name(name, method)
                per_cell[recorded] = per_cell.get(recorded, stats.Noise()) + cell
    return measured


def main() -> None:
    for machine, (aas, comparisons) in MACHINES.items():
        records = {}
        for rule in RULES:
            record = None
            for name in aas:
                runs, labels, machines = runs_of(name)
                assert machines == {machine}, (name, machines)
                rows = compare.comparison_rows(runs, None, labels, 0.05)
                if rule == "all about truth":
                    measured = all_about_truth(rows)
                else:
                    measured = compare.noise_measured(rows, aa=rule == "single blocks about truth")
                record = noise_record.record_noise(record, name, measured, {"aa": True})
            records[rule] = noise_record.machine_noise(record)
        print(f"machine {machine}: A/A records {', '.join(aas)}")
        for rule, noise in records.items():
            cold = [cell.get("compile_cold", stats.Noise()) for cell in noise.values()]
            print(f"  record {rule}: compile_cold degrees of freedom per cell {sorted({n.dof for n in cold})}")
        words_of: dict[
            tuple[str, str], list[str]
        ] = {}  # (rule, cell and metric) -> its words, comparison by comparison
        for name in comparisons:
            runs, labels, machines = runs_of(name)
            assert machines == {machine}, (name, machines)
            print(f"  {name}")
            for rule, noise in records.items():
                rows = [row for row in compare.comparison_rows(runs, noise, labels, 0.05)
                        if row.reference == compare.FIRST]  # fmt: skip
                decided = total = 0
                by_metric = {}
                for metric in HEADLINES:
                    for row in compare.suite_cells(rows, compare.METRIC_BY_NAME[metric]):
                        total += 1
                        decided += row.judged[metric].verdict != stats.INCONCLUSIVE
                        key = (rule, f"{row.label} {row.variant} {metric}")
                        words_of.setdefault(key, []).append(row.judged[metric].verdict)
                        by_metric[metric] = by_metric.get(metric, 0) + (
                            row.judged[metric].verdict != stats.INCONCLUSIVE
                        )
                cold = [row for row in rows if "compile_cold" in row.judged]
                words = [f"{row.label} {row.variant} {row.judged['compile_cold'].ratio.value:.3f} "
                         f"[{row.judged['compile_cold'].ratio.low:.3f}, {row.judged['compile_cold'].ratio.high:.3f}] "
                         f"{row.judged['compile_cold'].verdict}" for row in cold]  # fmt: skip
                print(f"    {rule}: {decided} of {total} headline verdicts decided {by_metric}")
                print(f"      cold compile: {'; '.join(words)}")
        for rule in RULES:  # what issue 51 asks: two invocations of the same stacks never contradict
            up, down = {"slower", "higher", "more"}, {"faster", "lower", "less"}
            clashes = [f"{key[1]} {words}" for key, words in words_of.items()
                       if key[0] == rule and up & set(words) and down & set(words)]  # fmt: skip
            print(f"  {rule}: {len(clashes)} (cell, metric) with opposite directions across these comparisons"
                  + (f": {'; '.join(clashes)}" if clashes else ""))  # fmt: skip


if __name__ == "__main__":
    main()
