"""The verdict rule's error rates: false flags on equal stacks and power for a real 10% change, through our own code.

    python benchmarks/verdict_power.py                  # sigma from this machine's noise record, if it has one
    python benchmarks/verdict_power.py --sigma 0.07 --trials 400 --cells 6

Synthetic comparisons with a known answer, judged by compilebench's own verdict code (`compare.comparison_rows`: paired
blocks, the machine's pooled noise, the F-test, equivalence against the margin, Holm across cells) and extended by its
own stop rule (`adaptive.widths`: a block more to every cell whose 95% CI is wider than its target, widest first, while
`--budget-min` minutes of blocks' wall time per stack and `--max-blocks` allow). Per block, A and B of a cell share
a drift of the machine (sd `--drift`, which pairing must cancel) and each process adds its own noise: the per-block log
difference has sd `sigma` (per metric kind), times a cell's own factor where `--spread` makes cells differ (the factors'
logs evenly spaced normal quantiles of sd `spread`: at 0.5 the noisiest of 6 cells has 4.0 times the quietest one's sd).
Before each comparison, `--history` A/A runs of the same design give each cell's noise record, as
`compare=[current,current]` does; `--history 0` is a fresh clone's first comparison. Each kind starts from the design's
first blocks, the config schema's defaults unless told: `--cold-blocks` cold ones (benchmark.cold_replicates, 1: one
cold process a stack has no interval, so a cold compile is decided only where blocks are added), which give compile time
and, their processes timing after the compile, speedup and latency too; and `--blocks` timing blocks for speedup and
latency (`--cold-untimed`: the design before cold processes timed). The cap, `--max-blocks`, counts timing blocks, as
benchmark.max_replicates does. Each kind is given the whole budget alone; in an invocation timing and cold blocks share
it, so what is printed is the most the budget could buy.

Printed per metric kind: the share of (cell, metric) verdicts that flag a change on equal stacks (target <= 0.05),
the same share for the noisiest cell alone (a rule that borrows from other cells can fail there only), the share of
invocations whose Holm-adjusted headline flags anything, the share of cells where a real +10% is flagged slower
(power; target >= 0.80), how often equal stacks are called `equivalent`, and the blocks used; then the same of the
suite's verdict (`suite.summary`: the geometric mean over the cells, one per invocation). The last line is
`fpr=<largest per-verdict false-flag rate (with --spread, the noisiest cell's too)> power10=<smallest power of
speedup, compile time and latency>`.

Priced at what blocks really took: `--runs data/results/runs.jsonl` (a comparison's results) sets the seconds of a
timing block (speedup, latency) and of a cold block (compile time), each the median over its kind's blocks of their
wall time, which the budget counts (a block run together as long as its longest process), instead of two processes of
`--trial-s` one after the other.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

from compilebench.analysis import adaptive, compare, noise_record, stats, suite
from compilebench.config import Benchmark, Config
from compilebench.harness import fingerprint

DEFAULTS = Benchmark()  # the design simulated unless told otherwise: the config schema's (params.yaml's) defaults

DEFAULT_SIGMA = {"speedup": 0.07, "compile": 0.07, "latency": 0.10}  # sd of a per-block log difference, assumed
KIND_METRIC = {"speedup": "speedup", "compile": "compile_cold", "latency": "compiled_latency"}
TARGET = {"speedup": 0.05, "compile": 0.05, "latency": 0.10}  # params.yaml's benchmark.target defaults
FLAGS = ("slower", "faster", "higher", "lower")


def block_costs(runs: Path) -> dict[str, float]:
    """Per metric kind, the median wall time of a block of the kind that measures it in a results file (timing blocks
    for speedup and latency, cold blocks for compile time), as the adaptive loop's budget counts it
    (adaptive.block_wall)."""
    windows: dict[tuple, list[tuple[float, float]]] = {}  # (kind, model, batch size, block) -> its processes'
    seen = set()
    for line in runs.read_text().splitlines():
        row = json.loads(line)
        for process in row.get("process_results", []):
            name = process.get("process_id") or process["trial_id"]
            if name in seen:  # a timing process is listed by each of its arms' runs
                continue
            seen.add(name)
            kind = "cold" if process.get("kind") == "cold" else "timing"
            key = (kind, row.get("model_id"), row.get("batch_size"), process.get("block") or name)
            windows.setdefault(key, []).append((process.get("started_at") or 0.0, process["wall_s"]))
    walls: dict[str, list[float]] = {}
    for (kind, *_), of in windows.items():
        walls.setdefault(kind, []).append(adaptive.block_wall(of))
    found = {}
    if walls.get("timing"):
        found["speedup"] = found["latency"] = statistics.median(walls["timing"])
    if walls.get("cold"):
        found["compile"] = statistics.median(walls["cold"])
    return found


def measured_sigma(calibration: Path) -> dict[str, float]:
    """Per metric kind, the sd of a per-block log difference in this machine's noise record (where it has one):
    for latency and speedup, of blocks paired by turn where the record has enough of those (noise_record.noise_name),
    as a comparison of blocks run together makes them."""
    key = f"{fingerprint.host()['machine_fingerprint']}|cpu"
    noise = noise_record.pooled_by_metric(
        noise_record.machine_noise(noise_record.load_calibrations(calibration).get(key))
    )
    found = {}
    for kind, metric in KIND_METRIC.items():
        for name in (noise_record.noise_name(metric, stats.PAIRED_BY_TURN), metric):
            if name in noise and noise[name].dof >= 5:
                found[kind] = math.sqrt(noise[name].variance)
                break
    return found


def cell_factors(cells: int, spread: float) -> list[float]:
    """Each cell's factor on sigma: exp of evenly spaced normal quantiles of sd `spread` (all 1 at 0), the last the
    noisiest."""
    from scipy import stats as scipy_stats

    return [math.exp(spread * float(scipy_stats.norm.ppf((i + 0.5) / cells))) for i in range(cells)]


def rows(
    seed: int, blocks: list[int], metric: str, sigmas: list[float], drift: float, truth: float, invocation: str
) -> list[compare.ComparedRun]:
    """A and B runs of one cell per entry of `sigmas` (its sd of a per-block log difference), each with its values by
    block of `metric`; a cell's draws depend on (seed, cell) only, so a cell given more blocks keeps the values of
    the blocks it had."""
    made = []
    for cell, sigma in enumerate(sigmas):
        rng = np.random.default_rng([seed, cell])
        values_a, values_b = {}, {}
        for block in range(blocks[cell]):
            shared = rng.normal(0, drift)
            values_a[f"default/r{block}"] = math.exp(shared + rng.normal(0, sigma / math.sqrt(2)))
            values_b[f"default/r{block}"] = truth * math.exp(shared + rng.normal(0, sigma / math.sqrt(2)))
        for label, key, values in (("A", "k", values_a), ("B", "k2", values_b)):
            made.append(
                compare.ComparedRun(
                    model_id=f"m{cell}",
                    label=f"M{cell}",
                    task="t",
                    batch_size=1,
                    variant="default",
                    environment=label,
                    environment_key=key,
                    run_uid=None,
                    invocation_id=invocation,
                    status="ok",
                    compile=True,
                    values={metric: values},
                )
            )
    return made


def one_comparison(
    rng, args, kind: str, sigma: float, truth: float, trial: int, block_s: float
) -> tuple[list[compare.Comparison], list[int]]:
    """An A/A run for the machine's noise, then an adaptive comparison; its rows and the blocks each cell used."""
    metric = KIND_METRIC[kind]
    cold = 0 if args.cold_untimed else args.cold_blocks  # the cold blocks' speedup and latency
    first = args.cold_blocks if kind == "compile" else args.blocks + cold  # cold compile: by cold blocks only
    cap = args.max_blocks + (0 if kind == "compile" else cold)  # max_replicates counts a unit's blocks
    sigmas = [sigma * factor for factor in cell_factors(args.cells, args.spread)]
    record = None
    for earlier in range(args.history):  # the machine's noise record: earlier invocations of the same cells
        aa_rows = rows(
            int(rng.integers(1 << 31)), [first] * args.cells, metric, sigmas, args.drift, 1.0, f"aa{trial}-{earlier}"
        )
        measured = compare.noise_measured(compare.comparison_rows(aa_rows, None, ["A", "B"], args.margin))
        record = noise_record.record_noise(record, f"aa{trial}-{earlier}", measured, {})
    noise = noise_record.machine_noise(record)
    seed = int(rng.integers(1 << 31))
    blocks = [first] * args.cells
    budget_s, spent_s = 2 * args.budget_min * 60, args.cells * first * block_s
    while True:
        made = rows(seed, blocks, metric, sigmas, args.drift, truth, f"ab{trial}")
        widths = adaptive.widest(adaptive.widths(made, ["A", "B"], {kind: TARGET[kind]}, noise, args.margin))
        short = sorted((cell for cell, width in widths.items() if not width.met), key=lambda c: -widths[c].distance)
        added = 0
        for index in (int(cell[0][1:]) for cell in short):  # widest first, while the budget and the cap allow
            if blocks[index] < cap and spent_s + block_s <= budget_s:
                blocks[index] += 1
                spent_s += block_s
                added += 1
        if not added:
            return compare.comparison_rows(made, noise, ["A", "B"], args.margin), blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sigma", type=float, help="sd of a per-block log difference, every kind (default: measured)")
    parser.add_argument("--calibration", type=Path, default=Path("data/calibration.json"))
    parser.add_argument("--cells", type=int, default=6, help="cells per comparison (the default suite: 6)")
    parser.add_argument(
        "--blocks",
        type=int,
        default=DEFAULTS.replicates,
        help="first timing blocks a cell (benchmark.replicates): speedup's, latency's",
    )
    parser.add_argument(
        "--cold-blocks",
        type=int,
        default=DEFAULTS.cold_replicates,
        help="first cold blocks per cell (benchmark.cold_replicates): compile time's, and speedup's and latency's",
    )
    parser.add_argument(
        "--cold-untimed",
        action="store_true",
        help="cold blocks give compile time only (the design before cold processes timed)",
    )
    parser.add_argument("--max-blocks", type=int, default=DEFAULTS.max_replicates, help="benchmark.max_replicates")
    parser.add_argument(
        "--budget-min",
        type=float,
        default=Config.budget_min,
        help="budget_min (per environment; each kind is given all of it)",
    )
    parser.add_argument("--trial-s", type=float, default=20.0, help="seconds a trial process takes")
    parser.add_argument("--runs", type=Path, help="price blocks at what those of this runs.jsonl took, per kind")
    parser.add_argument("--drift", type=float, default=0.15, help="sd of the machine's drift per block (log scale)")
    parser.add_argument("--margin", type=float, default=Config.margin, help="margin (the config schema's default)")
    parser.add_argument("--trials", type=int, default=300, help="comparisons simulated per kind and truth")
    parser.add_argument("--history", type=int, default=1, help="earlier invocations in the noise record (A/A runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spread", type=float, default=0.0, help="sd of the log of the cells' sigma factors")
    args = parser.parse_args()
    measured = {} if args.sigma else measured_sigma(args.calibration)
    costs = block_costs(args.runs) if args.runs else {}
    rng = np.random.default_rng(args.seed)
    fprs, powers = [], []
    for kind in ("speedup", "compile", "latency"):
        sigma = args.sigma or measured.get(kind, DEFAULT_SIGMA[kind])
        source = "given" if args.sigma else ("this machine's noise record" if kind in measured else "assumed")
        metric = KIND_METRIC[kind]
        outcome = {}
        for truth in (1.0, 1.1):
            verdicts, headlines, used, noisiest, suite_words = [], [], [], [], []
            last = f"m{args.cells - 1}"
            for trial in range(args.trials):
                compared, blocks = one_comparison(
                    rng, args, kind, sigma, truth, trial, costs.get(kind, 2 * args.trial_s)
                )
                verdicts += [row.judged[metric].verdict for row in compared]
                noisiest += [row.judged[metric].verdict for row in compared if row.model_id == last]
                headlines.append(any(row.verdict in FLAGS for row in compared))
                suite_words += [e["verdict"] for e in suite.summary(compared) if e["metric"] == metric]
                used += blocks
            outcome[truth] = (verdicts, headlines, used, noisiest, suite_words)
        aa, real = outcome[1.0], outcome[1.1]
        fpr = sum(v in FLAGS for v in aa[0]) / len(aa[0])
        fpr_noisiest = sum(v in FLAGS for v in aa[3]) / len(aa[3])
        headline = "headline (compiled latency) n/a"  # the headline of a compiled cell is its compiled latency
        if metric == "compiled_latency":
            headline = f"headline {sum(aa[1]) / len(aa[1]):.3f} per invocation"
        power = sum(v in ("slower", "higher") for v in real[0]) / len(real[0])
        print(
            f"{kind:8s} ({metric}, sigma {sigma:.3f}: {source}, target +-{TARGET[kind]:.0%}): "
            f"A/A flags {fpr:.3f} per verdict ({fpr_noisiest:.3f} in the noisiest cell), {headline}, "
            f"equivalent {sum(v == stats.EQUIVALENT for v in aa[0]) / len(aa[0]):.2f}; "
            f"+10% flagged {power:.3f}; blocks per cell {statistics.mean(aa[2]):.1f} "
            f"(max {max(aa[2] + real[2])}; {costs.get(kind, 2 * args.trial_s):.0f} s a block); over the suite: "
            f"A/A flags {sum(v in FLAGS for v in aa[4]) / len(aa[4]):.3f}, equivalent "
            f"{sum(v == stats.EQUIVALENT for v in aa[4]) / len(aa[4]):.2f}, +10% flagged "
            f"{sum(v in ('slower', 'higher') for v in real[4]) / len(real[4]):.3f}"
        )
        fprs.append(max(fpr, fpr_noisiest) if args.spread else fpr)
        powers.append(power)
    print(f"fpr={max(fprs):.3f} power10={min(powers):.3f}")
    sys.exit(0)


if __name__ == "__main__":
    main()
