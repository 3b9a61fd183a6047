"""Does a variant's cold compile time depend on which variant compiled before it? Measured both ways.

    python benchmarks/compile_order.py                 # ResNet-50 bs1, default and freezing, 3 rounds per order
    python benchmarks/compile_order.py --rounds 4 --out order.json

compilebench's design: one fresh process and an empty inductor cache per compiled variant. This script runs rounds of
cold trials in order default -> freezing, and as many in order freezing -> default, and compares each variant's
compile time between the two orders (ratio, Welch 95% CI: agreement when it contains 1). For contrast it also times
the old harness's way, both variants compiled one after the other in one process on one cache, in both orders.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compilebench.analysis import stats
from compilebench.fetch_image import fallback_image
from compilebench.harness import models, trial_process
from compilebench.harness.records import TimingSpec, TrialSpec, VariantSpec

VARIANTS = {"default": VariantSpec("default"), "freezing": VariantSpec("freezing", inductor={"freezing": True})}
ONE_PROCESS = """
import json, sys, time, torch
from torch._inductor import config
from compilebench.harness import models
from compilebench.harness.records import ModelSpec
from PIL import Image
spec = ModelSpec(**json.loads(sys.argv[1]))
model = models.model_class(spec).from_pretrained(spec.checkpoint).eval()
image = Image.open(sys.argv[2]).convert("RGB")
inputs, _ = models.single_inputs(spec, models.load_processor(spec.checkpoint), image)
times = {}
with torch.no_grad():
    for name in sys.argv[3:]:
        torch._dynamo.reset()
        with config.patch({"freezing": name == "freezing"}):
            compiled = torch.compile(model)
            start = time.perf_counter()
            compiled(**inputs)
            times[name] = time.perf_counter() - start
print(json.dumps(times))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="microsoft/resnet-50")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per order")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compilebench-order-"))
    spec = models.random_checkpoint(args.model, "full", work)
    image = work / "image.jpg"
    image.write_bytes(fallback_image())
    timing = TimingSpec(min_iters=3, min_time_s=0.0, warmup_iters=0)
    orders = {"default->freezing": ["default", "freezing"], "freezing->default": ["freezing", "default"]}
    compile_s: dict[str, dict[str, list[float]]] = {order: {v: [] for v in VARIANTS} for order in orders}
    started = time.time()
    for round_ in range(args.rounds):
        for order, names in orders.items():
            for name in names:
                cache = work / "cache" / f"{order}-{round_}-{name}"
                trial = TrialSpec(f"{order}/r{round_}/{name}", "current", spec, 1, VARIANTS[name], 0, "cold",
                                  str(image), timing)  # fmt: skip
                result = trial_process.run_trial_process(trial, sys.executable, work / "trials", cache, 1800)
                shutil.rmtree(cache, ignore_errors=True)
                if result.status != "ok":
                    raise SystemExit(f"{trial.trial_id}: {result.status}: {result.error}")
                compile_s[order][name].append(result.compile_s)
                elapsed = time.time() - started
                print(
                    f"{order} round {round_} {name}: cold compile {result.compile_s:.1f} s ({elapsed:.0f} s)",
                    flush=True,
                )
    agreement = {}
    for name in VARIANTS:
        ratio = stats.welch_ratio(compile_s["default->freezing"][name], compile_s["freezing->default"][name])
        agreement[name] = {"ratio": ratio.value, "ci": [ratio.low, ratio.high], "agree": ratio.low <= 1.0 <= ratio.high,
                           "default_first_s": compile_s["default->freezing"][name],
                           "freezing_first_s": compile_s["freezing->default"][name]}  # fmt: skip
    one_process = {}
    for order, names in orders.items():
        cache = work / "cache" / f"one-process-{order}"
        env = trial_process.trial_environment(cache)
        done = subprocess.run([sys.executable, "-c", ONE_PROCESS, json.dumps(spec.__dict__), str(image), *names],
                              capture_output=True, text=True, env=env, check=True)  # fmt: skip
        one_process[order] = json.loads(done.stdout.strip().splitlines()[-1])
        shutil.rmtree(cache, ignore_errors=True)
    summary = {"model": args.model, "rounds_per_order": args.rounds, "one_process_per_variant": agreement,
               "old_harness_one_process_both_variants": one_process, "wall_s": time.time() - started}  # fmt: skip
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
