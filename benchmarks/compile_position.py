"""Does an arm's warm compile time depend on its position in the timing process? The harness's start-up against a
trivial one, interleaved in one run.

    python benchmarks/compile_position.py                        # SegFormer-B0 bs1, default and freezing, 5 rounds
    python benchmarks/compile_position.py --model microsoft/resnet-50 --rounds 3

A timing process starts inductor (compiling.start_inductor), then compiles its arms one after another from the cell's
warm cache; the plan rotates their order per block, so an arm's compile time is its own only if the start-up paid
every one-time cost. This script fills a warm cache with one cold process per variant, then runs rounds of real
timing processes (`compilebench.harness.trial`, both compile orders per round), each once with the harness's
start-up and once with a trivial one (a one-line function compiled, what the harness did before), alternating which
goes first. Per start-up and variant: compile time first / second (geometric means, Welch 95% CI), the spread of
log compile time over all its processes (what a warm-compile interval is made of), and the start-up's median. The
last line is `default_first_over_second_harness=.. trivial=..`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from compilebench.analysis import plan, stats
from compilebench.fetch_image import fallback_image
from compilebench.harness import models, trial_process
from compilebench.harness.records import TimingSpec, VariantSpec

VARIANTS = [VariantSpec("default"), VariantSpec("freezing", inductor={"freezing": True})]
TRIVIAL = """
import sys, time
from compilebench.harness import compiling, timing, trial

def trivial(device):
    import torch
    started = time.perf_counter()
    torch.compile(lambda value: (value * 2).sin())(torch.ones(8, device=device))
    timing.synchronize(device)
    return time.perf_counter() - started

compiling.start_inductor = trivial
sys.argv = [sys.argv[0], *sys.argv[3:]]  # what follows "-m compilebench.harness.trial"
trial.main()
"""


def trivial_python(work: Path) -> str:
    """An interpreter that runs the trial module with the trivial start-up (the launcher calls it as `python -m`)."""
    script, wrapper = work / "trivial_start.py", work / "python-trivial"
    script.write_text(TRIVIAL)
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def by_position(rows: list[dict], start: str, variant: str) -> tuple[list[float], list[float]]:
    """One start-up's and variant's compile times, (compiled first, compiled second)."""
    mine = [row for row in rows if row["start"] == start and row["variant"] == variant]
    return ([row["compile_s"] for row in mine if row["position"] == 0],
            [row["compile_s"] for row in mine if row["position"] == 1])  # fmt: skip


def summary(rows: list[dict], start: str, variant: str) -> str:
    """One start-up's and variant's compile times by position."""
    first, second = by_position(rows, start, variant)
    ratio = stats.welch_ratio(second, first)  # first / second
    spread = statistics.stdev(math.log(value) for value in first + second)
    return (f"{start} {variant}: first / second {ratio.value:.3f} [{ratio.low:.3f}, {ratio.high:.3f}] "
            f"(p {ratio.p_value:.3f}; {len(first)} and {len(second)} processes), first "
            f"{statistics.geometric_mean(first):.2f} s, second {statistics.geometric_mean(second):.2f} s, "
            f"sd of log compile time {spread:.3f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="nvidia/segformer-b0-finetuned-ade-512-512")
    parser.add_argument("--rounds", type=int, default=5, help="rounds: both compile orders with each start-up")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compilebench-position-"))
    model = models.random_checkpoint(args.model, "full", work)
    image = work / "image.jpg"
    image.write_bytes(fallback_image())
    timing = TimingSpec(min_iters=3, min_time_s=0.3, warmup_iters=1, warmup_s=0.2)
    cache = work / "cache"
    for variant in VARIANTS:
        cold = plan.cold_trial("current", model, 1, variant, 0, str(image), timing)
        result = trial_process.run_trial_process(cold, sys.executable, work / "trials", cache, 1800)
        if result.status != "ok":
            raise SystemExit(f"{cold.trial_id}: {result.status}: {result.error}")
    pythons = {"harness": sys.executable, "trivial": trivial_python(work)}
    rows = []
    for round_ in range(args.rounds):
        for block in (0, 1):  # the two compile orders
            for start in list(pythons)[:: 1 if (2 * round_ + block) % 2 == 0 else -1]:
                arms = plan.timing_process("current", model, 1, VARIANTS, block, False, str(image), timing)
                results = trial_process.run_trial_process(arms, pythons[start], work / "trials", cache, 1800)
                for arm, result in zip(arms, results, strict=True):
                    if result.status != "ok":
                        raise SystemExit(f"{start} {arm.trial_id}: {result.status}: {result.error}")
                    rows.append({"start": start, "variant": arm.variant.name, "position": result.compile_position,
                                 "compile_s": result.compile_s, "startup_s": result.inductor_startup_s})  # fmt: skip
                print(f"round {round_} {start}: " + ", ".join(
                    f"{arm.variant.name} {result.compile_s:.2f} s" for arm, result in zip(arms, results, strict=True)
                ) + f"; start-up {results[0].inductor_startup_s:.2f} s", flush=True)  # fmt: skip
    for start in pythons:
        for variant in VARIANTS:
            print(summary(rows, start, variant.name))
        startups = [row["startup_s"] for row in rows if row["start"] == start and row["position"] == 0]
        print(f"{start}: start-up median {statistics.median(startups):.2f} s")
    ratios = {}
    for start in pythons:
        first, second = by_position(rows, start, "default")
        ratios[start] = stats.welch_ratio(second, first).value
    print(f"default_first_over_second_harness={ratios['harness']:.3f} trivial={ratios['trivial']:.3f}")


if __name__ == "__main__":
    main()
