"""What produced a result: device and its name, library versions, git commit. Recorded with every run.

    python -m compilebench.environment      # write paths.environment (a dependency of the benchmark stage)

`make run` writes paths.environment before `dvc repro`, so a new torch, transformers, Python, CUDA or machine
re-runs the benchmark stage (DVC tracks code and params, not the interpreter it runs under).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def device_name(device: str) -> str:
    """The GPU's name on CUDA, the CPU model otherwise."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return cpu_model()


def git_commit(cwd: str | Path = ".") -> str:
    """HEAD's commit, with `-dirty` when tracked files changed; `unknown` outside git."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def collect(device: str) -> dict[str, Any]:
    """The environment of a benchmark run, as flat string-valued fields."""
    import torch
    import transformers

    return {
        "device": device,
        "device_name": device_name(device),
        "cpu_model": cpu_model(),
        "cpu_count": str(os.cpu_count()),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
        "cuda_version": torch.version.cuda or "none",
        "platform": platform.platform(),
        "git_commit": git_commit(),
    }


def main() -> None:
    from compilebench.config import ConfigError, load_config
    from compilebench.files import write_atomic

    try:
        config = load_config()
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    fields = collect(config.benchmark.device)
    fields.pop("git_commit")  # code changes reach DVC through the stages' code deps
    path = Path(config.paths.environment)
    text = json.dumps(fields, indent=2, sort_keys=True) + "\n"
    if not path.exists() or path.read_text() != text:
        write_atomic(path, text)
    versions = f"torch {fields['torch_version']}, transformers {fields['transformers_version']}"
    print(f"{path}: {versions}, {fields['device_name']}")


if __name__ == "__main__":
    main()
