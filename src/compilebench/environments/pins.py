"""What an environment pins: the project's own pins of what a trial imports (constraints.txt pins torch,
requirements.txt the rest), an environment's over them, the key a built one is known by, and whether an install
holds them. venvs.py builds venvs from them."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

# What a trial process imports, directly or through transformers' model and processor classes.
# setuptools: inductor's C++ builds import it in older torch (2.6 among them), and a venv uv makes has none.
TRIAL_PACKAGES = ("torch", "transformers", "safetensors", "pillow", "numpy", "scipy", "pyyaml", "setuptools")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def normalize(package: str) -> str:
    """A package name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", package).lower()


def read_pins(*files: Path) -> dict[str, str]:
    """`name==version` lines of requirements or constraints files (later files win), by normalized name."""
    pins = {}
    for path in files:
        for line in path.read_text().splitlines():
            match = _PIN.match(line)
            if match:
                pins[normalize(match.group(1))] = match.group(2)
    return pins


def project_pins(root: Path) -> dict[str, str]:
    """The project's own pins of the packages a trial needs (constraints.txt pins torch, requirements.txt the rest)."""
    pins = read_pins(root / "requirements.txt", root / "constraints.txt")
    return {name: pins[name] for name in map(normalize, TRIAL_PACKAGES) if name in pins}


def resolve(project: dict[str, str], overrides: dict[str, str]) -> dict[str, str]:
    """The environment's pins: the project's, then its own over them."""
    return {**project, **{normalize(name): str(version) for name, version in overrides.items()}}


def resolved_pins(overrides: dict[str, dict[str, str]], root: Path) -> dict[str, dict[str, str]]:
    """Every compared environment's pins, by name: the project's (at `root`), then the environment's own over them
    (`overrides`: Config.compared_pins)."""
    project = project_pins(root)
    return {name: resolve(project, own) for name, own in overrides.items()}


def environment_key(pins: dict[str, str], python_version: str) -> str:
    """What identifies a built environment: its resolved pins and Python version."""
    payload = json.dumps({"pins": pins, "python": python_version, "packages": TRIAL_PACKAGES}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def mismatches(pins: dict[str, str], versions: dict[str, str]) -> list[str]:
    """Pins an environment does not hold (a local version label such as +cpu satisfies its public version)."""
    from packaging.specifiers import SpecifierSet

    wrong = []
    for name, version in pins.items():
        have = versions.get(name)
        if have is None or not SpecifierSet(f"=={version}").contains(have, prereleases=True):
            wrong.append(f"{name} {have or 'missing'} (pinned {version})")
    return wrong
