"""The package index's releases: a torch or transformers an environment pins, checked before anything is built.

`make compare B=torch-9.9.9` built the 1.3 GB baseline before uv's resolver refused the release in one 724-character
line; the benchmark stage and `make forecast` now ask the index first (`pip index versions`, as pip is set up here)
and name the releases near the one asked for. Where the index cannot be read (offline), nothing is checked: the build
says what it cannot get.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from compilebench.config.releases import version_tuple
from compilebench.environments.venvs import CURRENT, is_built, project_pins

INDEX_CHECKED = ("torch", "transformers")  # what a release name pins: checked on the index before anything is built


def index_versions(package: str) -> list[str] | None:
    """The releases of `package` on the package index pip is set up with (`pip index versions`); None where it
    cannot be read (offline: the build itself says what it cannot get)."""
    try:
        command = [sys.executable, "-m", "pip", "index", "versions", package, "--timeout", "10", "--retries", "1"]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    except subprocess.TimeoutExpired:
        return None
    line = next((line for line in done.stdout.splitlines() if line.startswith("Available versions:")), None)
    if done.returncode != 0 or line is None:
        return None
    return [version.strip() for version in line.split(":", 1)[1].split(",")]


def unreleased(wanted: list[tuple[str, dict[str, str], str]], root: Path, cache_root: Path) -> list[str]:
    """Of the environments `wanted` ((name, pins, python) each), those not built yet that pin a torch or transformers
    the package index does not have: one line each, naming the releases of that minor series it has. Nothing where the
    index cannot be read."""
    project = project_pins(root)
    known: dict[str, list[str] | None] = {}
    problems = []
    for name, pins, python in wanted:
        if name == CURRENT or is_built(name, pins, cache_root, python):
            continue
        for package in INDEX_CHECKED:
            version = pins.get(package)
            if version is None or version == project.get(package):
                continue
            if package not in known:
                known[package] = index_versions(package)
            releases = known[package]
            if releases is None or version in releases:
                continue
            minor = version_tuple(version)[:2]
            near = [v for v in releases if version_tuple(v)[:2] == minor] or releases[:6]
            problems.append(
                f"environment {name!r}: {package} {version} is not a release on the package index; "
                f"its releases near it: {', '.join(near[:8])}"
            )
    return problems
