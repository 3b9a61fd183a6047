"""What dispatching a plan through Ray costs per process, against the local launcher, on the same plan in one run.

    python benchmarks/dispatch_overhead.py                      # a tiny ResNet: 1 cold and 3 timing processes
    python benchmarks/dispatch_overhead.py --rounds 3 --blocks 5

Builds a tiny ResNet checkpoint, plans eager and default for it (one cold block, `--blocks` timing blocks), and runs
the plan alternately through the local executor and through Ray (a cluster of this machine alone, one slot), `--rounds`
times each, in the order L R R L ... Per run: the whole wall time, the processes' own wall times, and the overhead
per process (the difference, divided by the processes). Prints each run and the median ratio Ray / local of the wall
time per process; the last line is `overhead_ms_local=.. overhead_ms_ray=.. ratio=..`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from compilebench import executors
from compilebench.analysis import plan
from compilebench.harness import models
from compilebench.harness.records import TimingSpec, VariantSpec, processes


def run_once(kind: str, trials: list, work: Path) -> tuple[float, float, int]:
    """(whole wall s, sum of the processes' wall s, processes) of the plan through executor `kind`."""
    shutil.rmtree(work, ignore_errors=True)
    pythons = {"current": sys.executable}
    walls: dict[str, float] = {}

    def keep(specs, ended, resumed):
        walls[specs[0].process_id or specs[0].trial_id] = ended[0].wall_s

    runner = SimpleNamespace(ray_address="local", gpus=[0], cpus_per_slot=0, trial_timeout_s=600)
    chosen = executors.Ray(pythons, work, 600, runner, "cpu") if kind == "ray" else executors.Local(pythons, work, 600)
    started = time.perf_counter()
    try:
        chosen.run(trials, {}, keep)
    finally:
        if kind == "ray":
            chosen.close()
    return time.perf_counter() - started, sum(walls.values()), len(processes(trials))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dispatch-"))
    from compilebench.fetch_image import fallback_image

    (root / "image.jpg").write_bytes(fallback_image())
    model = models.random_checkpoint("microsoft/resnet-50", "tiny", root)
    timing = TimingSpec(min_iters=10, min_time_s=0.5, max_time_s=5.0, warmup_iters=1, warmup_s=0.2)
    variants = [VariantSpec("eager", compile=False), VariantSpec("default")]
    trials = plan.trials([model], [1], variants, ["current"], args.blocks, 1, False, str(root / "image.jpg"), timing, 0)
    overhead: dict[str, list[float]] = {"local": [], "ray": []}
    order = ["local", "ray", "ray", "local"] * ((args.rounds + 1) // 2)
    for kind in order[: 2 * args.rounds]:
        whole, own, count = run_once(kind, trials, root / f"work-{kind}")
        overhead[kind].append((whole - own) / count * 1000)
        print(f"{kind}: {whole:.1f} s for {count} processes ({own:.1f} s in them): {overhead[kind][-1]:.0f} ms each")
    local, ray = statistics.median(overhead["local"]), statistics.median(overhead["ray"])
    ratio = ray / local if local > 0 else float("inf")
    print(f"overhead_ms_local={local:.0f} overhead_ms_ray={ray:.0f} ratio={ratio:.2f}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
