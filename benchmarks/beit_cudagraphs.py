"""Why BEiT fails under torch.compile(mode="reduce-overhead") on a GPU: a minimal reproduction, on torch and
transformers only (copy this file alone to a GPU machine).

    python benchmarks/beit_cudagraphs.py            # needs CUDA; prints a table and the versions
    python benchmarks/beit_cudagraphs.py --json OUT.json

Both H100 runs failed at BEiT's CUDA-graph recording with "storage data ptrs are not allocated in pool". The
suspect: BeitRelativePositionBias.generate_relative_position_index builds its index with torch.arange / meshgrid on
the default device (the CPU) in every forward, and the graph gathers a CUDA table with it. Four cases, each compiled
with mode="reduce-overhead", called five times (warm-up, recording, replays) and checked against eager:

  minimal-cpu-index     a module that gathers a CUDA table with an index built on the CPU in forward
  minimal-device-index  the same, the index built on the table's device
  beit                  BEiT-base as published (relative position bias), random weights
  beit-device-index     the same model, its index built on the model's device (the same values: a workaround
                        that keeps the measurement honest, if it runs)
  minimal-cpu-index-x12 twelve minimal modules in a row, each building its own CPU index (as BEiT's twelve layers do)
  beit-no-partition     BEiT as published, inductor's graph partitioning off (it splits CPU operations out of the
                        graphed parts; without it a graph with CPU operations is not graphed at all)

Each case records inductor's CUDA-graph counters (`cudagraph_skips`: graphs inductor ran without a CUDA graph), so
an `ok` says whether a graph was replayed. The first H100 run (docs/findings.md, 2026-11-27, before the last two
cases and the counters): BEiT fails, BEiT with its index on the device runs, a single minimal
CPU-index module runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

import torch
from torch import nn

CALLS = 5  # warm-up, recording, then replays


class CpuIndexGather(nn.Module):
    """Gathers a table on the model's device with an index it builds in forward, on `index_device` (None: the CPU)."""

    def __init__(self, index_device: str | None) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(64, 4))
        self.index_device = index_device

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        grid = torch.stack(torch.meshgrid(torch.arange(8, device=self.index_device),
                                          torch.arange(8, device=self.index_device), indexing="ij"))  # fmt: skip
        index = (grid[0] * 8 + grid[1]).flatten()
        return values + self.table[index].sum()


def beit(device: str, index_on_device: bool) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """BEiT-base (the doc's checkpoint's architecture, random weights) and a 224x224 input, on `device`."""
    from transformers import BeitConfig, BeitForImageClassification
    from transformers.models.beit import modeling_beit

    config = BeitConfig(use_relative_position_bias=True, use_absolute_position_embeddings=False, use_mean_pooling=True,
                        layer_scale_init_value=0.1, num_labels=1000)  # fmt: skip
    torch.manual_seed(0)
    model = BeitForImageClassification(config).eval().to(device)
    if index_on_device:  # the index's values, made once on the device: the same math, no CPU tensor in the graph
        for module in model.modules():
            if isinstance(module, modeling_beit.BeitRelativePositionBias):
                made = module.generate_relative_position_index(module.window_size).to(device)
                module.generate_relative_position_index = lambda window_size, made=made: made
    return model, {"pixel_values": torch.randn(1, 3, 224, 224, device=device)}


def graph_counters() -> dict[str, int]:
    """Inductor's CUDA-graph counters since the last reset (skips: graphs run without a CUDA graph)."""
    from torch._dynamo.utils import counters

    return {key: int(value) for key, value in counters["inductor"].items() if "cudagraph" in key}


def run_case(name: str, model: nn.Module, inputs: dict[str, torch.Tensor], partition: bool = True) -> dict:
    """Compile with reduce-overhead, call CALLS times, compare the last output with eager's."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad(), torch._inductor.config.patch(graph_partition=partition):
        result = call_case(name, model, inputs)
    return {**result, "graph_partition": partition, "counters": graph_counters()}


def call_case(name: str, model: nn.Module, inputs: dict[str, torch.Tensor]) -> dict:
    """`run_case`'s calls: what failed and where, or how far the last output is from eager's."""
    expected = model(**inputs)
    compiled = torch.compile(model, mode="reduce-overhead")
    try:
        for _ in range(CALLS):
            torch.compiler.cudagraph_mark_step_begin()
            output = compiled(**inputs)
        torch.cuda.synchronize()
    except Exception as error:  # the point of the script: what fails, and where
        last = traceback.extract_tb(error.__traceback__)[-1]
        return {"case": name, "status": "error", "error": str(error).splitlines()[0][:300],
                "where": f"{last.filename.rsplit('/', 2)[-1]}:{last.lineno}"}  # fmt: skip
    got = output.logits if hasattr(output, "logits") else output
    want = expected.logits if hasattr(expected, "logits") else expected
    return {"case": name, "status": "ok", "max_rel_diff": ((got - want).abs().max() / want.abs().max()).item()}


class Stack(nn.Module):
    """Modules applied one after another, each to the previous one's output."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            values = layer(values)
        return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("beit_cudagraphs: CUDA graphs need a CUDA device; this machine has none", file=sys.stderr)
        sys.exit(2)
    import transformers

    device = "cuda"
    cases = [
        ("minimal-cpu-index", CpuIndexGather(None).to(device), {"values": torch.randn(4, device=device)}),
        ("minimal-device-index", CpuIndexGather(device).to(device), {"values": torch.randn(4, device=device)}),
    ]
    results = [run_case(name, model, inputs) for name, model, inputs in cases]
    for name, on_device in (("beit", False), ("beit-device-index", True)):
        results.append(run_case(name, *beit(device, on_device)))
    stack = Stack([CpuIndexGather(None) for _ in range(12)]).to(device)
    results.append(run_case("minimal-cpu-index-x12", stack, {"values": torch.randn(4, device=device)}))
    results.append(run_case("beit-no-partition", *beit(device, False), partition=False))
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "device": torch.cuda.get_device_name(0),
                "graph_partition_default": bool(torch._inductor.config.graph_partition)}  # fmt: skip
    print(json.dumps(versions))
    for result in results:
        detail = result.get("error") or f"max_rel_diff {result['max_rel_diff']:.2e}"
        skips = result["counters"].get("cudagraph_skips", 0)
        print(f"{result['case']:22} {result['status']:6} cudagraph_skips {skips}  {detail} {result.get('where', '')}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({**versions, "results": results}, handle, indent=1)


if __name__ == "__main__":
    main()
