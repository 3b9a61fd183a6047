"""Does compilebench's timer agree with torch.utils.benchmark.Timer, and what does the harness itself cost?

    python benchmarks/timer_fidelity.py                  # ResNet-50 (random init) at batch 1, fp32, CPU
    python benchmarks/timer_fidelity.py --rounds 7 --model facebook/detr-resnet-50

1. Fidelity: the same model and input timed in one process, in alternating rounds, by compilebench's paired timer
   (`timing.round_samples`, eager against itself) and by `torch.utils.benchmark.Timer.blocked_autorange`; prints the
   ratio of medians (target: within 3%).
2. Overhead: the harness's per-iteration cost on a no-op callable (target: below 20 µs).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.utils.benchmark as torch_benchmark

from compilebench.fetch_image import fallback_image
from compilebench.harness import models, timing


def _inputs(model_id: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    import io

    from PIL import Image

    card = models.get_card(model_id)
    model = models.random_model(card, "full", seed=0)
    image = Image.open(io.BytesIO(fallback_image())).convert("RGB")
    single, _ = models.single_inputs(card, models.build_processor(card, "full"), image)
    return model, models.forward_inputs(model, models.batch_inputs(single, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="microsoft/resnet-50")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of each timer")
    parser.add_argument("--seconds", type=float, default=3.0, help="time per round, per timer")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    model, inputs = _inputs(args.model)
    call = lambda: model(**inputs)  # noqa: E731
    ours, theirs = [], []
    with torch.no_grad():
        for _ in range(3):
            call()
        for _ in range(args.rounds):
            (a, b), _, _ = timing.round_samples([call, call], "cpu", 5, args.seconds / 2, args.seconds)
            ours.append(statistics.median(a + b))
            timer = torch_benchmark.Timer(stmt="call()", globals={"call": call}, num_threads=torch.get_num_threads())
            theirs.append(timer.blocked_autorange(min_run_time=args.seconds).median * 1000)
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"model {args.model}, threads {torch.get_num_threads()}, {args.rounds} alternating rounds")
    print(
        f"compilebench median {statistics.median(ours):.3f} ms | torch Timer median {statistics.median(theirs):.3f} ms"
    )
    print(f"fidelity ratio {ratio:.4f} (|ratio - 1| = {abs(ratio - 1) * 100:.2f}%, target <= 3%)")

    noop = lambda: None  # noqa: E731
    iterations = 20000
    start = time.perf_counter()
    for _ in range(iterations):
        timing.time_call_ms(noop, "cpu")
    per_call_us = (time.perf_counter() - start) / iterations * 1e6
    (a, b), elapsed, _ = timing.round_samples([noop, noop], "cpu", 20000, 0.0, 10.0)
    per_iter_us = elapsed / (len(a) + len(b)) * 1e6
    print(f"harness overhead on a no-op: time_call_ms {per_call_us:.2f} µs/call, paired loop {per_iter_us:.2f} µs/call")
    print(f"measured no-op latency median {statistics.median(a + b) * 1000:.2f} µs (target overhead < 20 µs)")


if __name__ == "__main__":
    main()
