"""How often does one invocation's 95% CI contain the value pooled over many invocations of the same cell?

    python benchmarks/ci_coverage.py                          # ResNet-50 bs1 `freezing`, 8 invocations x 3 processes
    python benchmarks/ci_coverage.py --invocations 10 --variant default --out coverage.json

Each invocation is what `benchmark.replicates` fresh processes give compilebench for one run: per process, eager and
compiled calls interleaved; across processes, the between-process 95% CI (stats.speedup_estimate, median_estimate).
The pooled value is the same estimator over every process of every invocation. Coverage = the share of invocations
whose CI contains it (target >= 90%). For contrast, the within-process bootstrap CI of each invocation's first
process (what a single process can say about itself) is scored the same way. The invocations run one after another,
as repeated `make run`s would, on one warm inductor cache (compile time is not what is measured here).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from compilebench import launcher, models, stats
from compilebench.fetch_image import fallback_image
from compilebench.records import TimingSpec, TrialSpec, VariantSpec

VARIANTS = {"default": VariantSpec("default"), "freezing": VariantSpec("freezing", inductor={"freezing": True})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="microsoft/resnet-50")
    parser.add_argument("--variant", default="freezing", choices=sorted(VARIANTS))
    parser.add_argument("--invocations", type=int, default=8)
    parser.add_argument("--replicates", type=int, default=3, help="processes per invocation")
    parser.add_argument("--min-iters", type=int, default=10)
    parser.add_argument("--min-time-s", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=None, help="write every number as JSON here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compilebench-coverage-"))
    spec = models.random_checkpoint(args.model, "full", work)
    image = work / "image.jpg"
    image.write_bytes(fallback_image())
    timing = TimingSpec(min_iters=args.min_iters, min_time_s=args.min_time_s, warmup_iters=2)
    cache = work / "inductor-cache"
    invocations = []
    started = time.time()
    for invocation in range(args.invocations):
        processes = []
        for replicate in range(args.replicates):
            trial = TrialSpec(f"i{invocation}/r{replicate}", "current", spec, 1, VARIANTS[args.variant], replicate,
                              "warm", str(image), timing)  # fmt: skip
            result = launcher.run_trial_process(trial, sys.executable, work / "trials", cache, 1800)
            if result.status != "ok":
                raise SystemExit(f"{trial.trial_id}: {result.status}: {result.error}")
            processes.append((list(result.eager_ms), list(result.compiled_ms)))
        speedup = stats.speedup_estimate(processes)
        eager = stats.median_estimate([e for e, _ in processes])
        first = processes[0]
        within = stats.paired_bootstrap_ci(*first)
        invocations.append({"processes": processes, "speedup": speedup.__dict__, "eager_ms": eager.__dict__,
                            "first_process_speedup": stats.speedup(*first), "first_process_ci": within})  # fmt: skip
        print(f"invocation {invocation}: speedup {speedup.value:.3f} [{speedup.low:.3f}, {speedup.high:.3f}], "
              f"eager median {eager.value:.1f} ms [{eager.low:.1f}, {eager.high:.1f}]  "
              f"({time.time() - started:.0f} s)", flush=True)  # fmt: skip
    everything = [process for inv in invocations for process in inv["processes"]]
    pooled_speedup = stats.speedup_estimate(everything).value
    pooled_eager = stats.median_estimate([e for e, _ in everything]).value

    def covered(key: str, truth: float) -> float:
        return float(np.mean([inv[key]["low"] <= truth <= inv[key]["high"] for inv in invocations]))

    within = float(np.mean([inv["first_process_ci"][0] <= pooled_speedup <= inv["first_process_ci"][1]
                            for inv in invocations]))  # fmt: skip
    summary = {
        "model": args.model,
        "variant": args.variant,
        "invocations": args.invocations,
        "processes_per_invocation": args.replicates,
        "pooled_speedup": pooled_speedup,
        "pooled_eager_ms": pooled_eager,
        "speedup_coverage": covered("speedup", pooled_speedup),
        "eager_latency_coverage": covered("eager_ms", pooled_eager),
        "within_process_speedup_coverage": within,
        "median_speedup_ci_halfwidth": float(
            np.median([(i["speedup"]["high"] - i["speedup"]["low"]) / 2 / i["speedup"]["value"] for i in invocations])
        ),
        "wall_s": time.time() - started,
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({**summary, "detail": invocations}, indent=1, default=str))


if __name__ == "__main__":
    main()
