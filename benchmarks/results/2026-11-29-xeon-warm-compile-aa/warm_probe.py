"""Why an A/A's second-named environment compiled `freezing` warm slower in every block: run an A/A of one model
(eager and `freezing` arms, its blocks together, as `make compare B=current` runs them) with the labels in the order
given, keep the work folder, and print per process its warm compile, its turn order and its cache's new files.

    python warm_probe.py --labels current current#2 --blocks 4 --work /tmp/probe1
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from compilebench import environments
from compilebench.analysis import plan
from compilebench.config import load_config
from compilebench.fetch_image import fallback_image
from compilebench.harness import launcher, models
from compilebench.harness.records import TimingSpec, TrialResult, TrialSpec, VariantSpec

ARMS = [VariantSpec("eager", compile=False), VariantSpec("freezing", inductor={"freezing": True})]


def files_since(folder: Path, since: float) -> int:
    """Files under `folder` modified at or after `since` (what a warm process added to its cache)."""
    return sum(1 for path in folder.rglob("*") if path.is_file() and path.stat().st_mtime >= since)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", nargs=2, default=["current", "current#2"])
    parser.add_argument("--model", default="microsoft/resnet-50")
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument(
        "--min-time-s", type=float, default=2.0, help="timed seconds per process (short: compile is what is probed)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[3]
    config = load_config(str(root / "params.yaml"))
    python = environments.current(root).python
    pythons = dict.fromkeys(args.labels, python)
    timing = TimingSpec(**{key: getattr(config.benchmark, key) for key in TimingSpec.__dataclass_fields__})
    timing = replace(timing, together=True, min_time_s=args.min_time_s)
    args.work.mkdir(parents=True, exist_ok=False)
    image = args.work / "image.jpg"
    image.write_bytes(fallback_image())
    model = models.random_checkpoint(args.model, "full", args.work / "checkpoints")
    specs = plan.trials([model], [1], ARMS, args.labels, args.blocks, 1, False, str(image), timing, seed=args.seed)
    out = (args.work / "probe.jsonl").open("w")

    def keep(group: list[TrialSpec], ended: list[TrialResult], resumed: bool) -> None:
        for spec, result in zip(group, ended, strict=True):
            if not spec.variant.compile:
                continue
            cache = args.work / "run" / "inductor-cache" / spec.warm_cache_key
            added = files_since(cache, result.started_at) if spec.kind == "arm" else None
            line = {
                "trial": spec.trial_id,
                "label": spec.environment,
                "kind": spec.kind,
                "replicate": spec.replicate,
                "compile_s": result.compile_s,
                "compile_position": result.compile_position,
                "started_at": result.started_at,
                "timeline_s": result.timeline_s,
                "turn_wait_s": result.turn_wait_s,
                "inductor_startup_s": result.inductor_startup_s,
                "wall_s": result.wall_s,
                "counters": result.health.inductor_counters if result.health else None,
                "cache_files_added": added,
            }
            out.write(json.dumps(line) + "\n")
            out.flush()
            print(
                json.dumps(
                    {k: line[k] for k in ("trial", "compile_s", "inductor_startup_s", "wall_s", "cache_files_added")}
                ),
                flush=True,
            )

    launcher.run_trials(specs, pythons, args.work / "run", 1800.0, on_process=keep)


if __name__ == "__main__":
    main()
