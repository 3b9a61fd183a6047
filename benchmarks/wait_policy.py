"""How OpenMP's wait policy changes a model's eager calls and the CPU they burn: fresh processes, the policies in turn.

    python benchmarks/wait_policy.py OUT.jsonl [--models resnet-50 tiny] [--rounds 3] [--seconds 10]

Each round starts one fresh process per model and policy (torch's default, whatever OMP_WAIT_POLICY it inherits
removed, then `PASSIVE`; the order flips every round, so a drift of the machine falls on both), each on every core
this process may use. A process builds its model with random weights (`resnet-50`: transformers' ResNet-50
architecture at batch 1, 224x224; `tiny`: the test suite's kind of small convolutional network, batch 2, 32x32),
warms it up for 2 s, then calls it for `--seconds` and writes one JSON line: the policy, its median call in ms, its
calls, and its CPU seconds per wall second while it called (the process's own, all its threads). The threads that
spin between torch's parallel regions show in the last: a second thread that spins keeps a second core busy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

POLICIES = ("default", "PASSIVE")
MODELS = ("resnet-50", "tiny")


def build(model: str) -> tuple[Any, Any]:
    import torch

    if model == "resnet-50":
        from transformers import ResNetConfig, ResNetForImageClassification

        return ResNetForImageClassification(ResNetConfig()).eval(), torch.randn(1, 3, 224, 224)
    layers = [torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3), torch.nn.AdaptiveAvgPool2d(1)]
    return torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval(), torch.randn(2, 3, 32, 32)


def time_calls(model: str, seconds: float) -> dict[str, Any]:
    """In this process: build, warm up for 2 s, call for `seconds`; the calls' milliseconds and the CPU they took."""
    import torch

    network, pixels = build(model)
    with torch.no_grad():
        started = time.perf_counter()
        while time.perf_counter() - started < 2.0:
            network(pixels)
        samples_ms, cpu_before, started = [], time.process_time(), time.perf_counter()
        while time.perf_counter() - started < seconds:
            begun = time.perf_counter()
            network(pixels)
            samples_ms.append((time.perf_counter() - begun) * 1e3)
        wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_before
    return {
        "median_ms": statistics.median(samples_ms),
        "calls": len(samples_ms),
        "cpu_per_wall_s": cpu_s / wall_s,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def child_environment(policy: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    return env


def run(out: Path, models: list[str], rounds: int, seconds: float) -> None:
    with out.open("a") as sink:
        for number in range(rounds):
            for model in models:
                for policy in POLICIES if number % 2 == 0 else POLICIES[::-1]:
                    command = [sys.executable, __file__, "--child", model, "--seconds", str(seconds)]
                    done = subprocess.run(
                        command, env=child_environment(policy), capture_output=True, text=True, check=True
                    )
                    row = {"round": number, "model": model, "policy": policy, **json.loads(done.stdout)}
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    print(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="the JSON lines file to add to")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--child", choices=MODELS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(time_calls(args.child, args.seconds)))
    elif args.out is None:
        parser.error("OUT.jsonl is required")
    else:
        run(args.out, args.models, args.rounds, args.seconds)


if __name__ == "__main__":
    main()
