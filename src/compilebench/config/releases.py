"""Torch releases a user can name without defining them: `torch-2.6.0` in `compare` is that release of torch with the
companions it needs, so `compare=[torch-2.0.1, torch-2.6.0, torch-2.15.0]` is a release series as typed.

A release the project's own transformers supports runs with the project's pins and Python, so a step between two
such releases changes torch alone. The older ones of a series (below that transformers' torch floor) share one set of
companions, chosen for the oldest of them: the newest transformers that still supports it, the newest Python its
`torch.compile` supports, NumPy 1 where its wheels were built against NumPy 1. So a series changes companions at one
step only, and the report says which (`analysis.differences`). Pure: the facts below were read off the published
wheels (transformers' `utils/import_utils.py` and `dependency_versions_table.py`, torch's release notes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SHORT_FORM = re.compile(r"^torch-(?P<version>\d+\.\d+\.\d+)$")
TRANSFORMERS_FORM = re.compile(r"^transformers-(?P<version>\d+\.\d+\.\d+)$")  # that transformers on the project's torch

# The first transformers release that refuses torch older than the floor (it disables torch: "Disabling PyTorch because
# PyTorch >= 2.6 is required", or its model code fails to import), oldest first; the floors only rise.
TRANSFORMERS_TORCH_FLOORS = (
    ("4.50.0", "2.1"),  # its modeling code calls torch.compiler (torch 2.1); 4.49.0 runs on torch 2.0.1
    ("5.0.0", "2.2"),
    ("5.1.0", "2.4"),
    ("5.15.0", "2.5"),
    ("5.20.0", "2.7"),  # through 5.24.0. It says 2.6, but its compiled forward calls torch.compiler.is_exporting
    #                     (torch 2.7): on torch 2.6.0, 5.23.0 failed to compile ViT-B/16 and SegFormer-B0 (2026-12-02)
)
# The newest transformers release that each floor admits, and the Python it requires at least.
NEWEST_FOR_FLOOR = {
    "2.0": ("4.49.0", "3.9"),
    "2.1": ("4.57.6", "3.9"),
    "2.2": ("5.0.0", "3.10"),
    "2.4": ("5.14.1", "3.10"),
    "2.5": ("5.19.0", "3.10"),
    "2.7": ("5.24.0", "3.11"),
}
# The newest Python each torch release's torch.compile (dynamo) supports, by minor release; later ones: the last.
COMPILE_PYTHON = {(2, 0): "3.10", (2, 1): "3.11", (2, 2): "3.11", (2, 3): "3.12", (2, 4): "3.12", (2, 5): "3.13"}
NEWEST_COMPILE_PYTHON = "3.13"
NUMPY_1 = "1.26.4"  # the last NumPy 1, for torch built against it (before 2.3: with NumPy 2, from_numpy fails)
NUMPY_2_FROM = (2, 3)
# torch 2.0's inductor imports pkg_resources, which setuptools 81 removed; later releases run on the newest.
SETUPTOOLS_WITH_PKG_RESOURCES = "75.8.0"
PKG_RESOURCES_FREE_FROM = (2, 1)


class ReleaseError(ValueError):
    """A short form that cannot be resolved; the message names it."""


@dataclass(frozen=True)
class Release:
    """What a short form resolves to: its pins over the project's and the Python it runs on ('' = the project's)."""

    pins: dict[str, str] = field(default_factory=dict)
    python: str = ""


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.6.0' -> (2, 6, 0); a local label or pre-release suffix is dropped ('2.13.0+cpu' -> (2, 13, 0))."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def torch_of(name: str) -> str | None:
    """The torch release a short form names (`torch-2.6.0` -> '2.6.0'), None for any other name."""
    match = SHORT_FORM.match(name)
    return match.group("version") if match else None


def transformers_of(name: str) -> str | None:
    """The transformers release a short form names (`transformers-5.0.0` -> '5.0.0'), None for any other name."""
    match = TRANSFORMERS_FORM.match(name)
    return match.group("version") if match else None


def minor_releases(versions: list[str], low: str, high: str) -> list[str]:
    """The releases a bisect steps through from `low` to `high` (both included, as given): of `versions` (a package
    index's list), the newest patch of each minor release strictly between them, oldest first. Pre-releases and
    local builds (`2.13.0+cpu`) are left out; ReleaseError when `low` is not older than `high`."""
    if version_tuple(low) >= version_tuple(high):
        raise ReleaseError(f"{low} and {high}: name the older release first (a bisect runs from old to new)")
    newest: dict[tuple[int, ...], str] = {}
    for version in versions:
        if not re.fullmatch(r"\d+\.\d+\.\d+", version):
            continue
        found = version_tuple(version)
        if version_tuple(low)[:2] < found[:2] < version_tuple(high)[:2]:
            minor = found[:2]
            if minor not in newest or found > version_tuple(newest[minor]):
                newest[minor] = version
    return [low, *(newest[minor] for minor in sorted(newest)), high]


def torch_floor(transformers: str) -> str:
    """The oldest torch (major.minor) a transformers release works with (`TRANSFORMERS_TORCH_FLOORS`)."""
    floor = "2.0"
    for first, its_floor in TRANSFORMERS_TORCH_FLOORS:
        if version_tuple(transformers) >= version_tuple(first):
            floor = its_floor
    return floor


def supports(transformers: str, torch: str) -> bool:
    """Whether a transformers release runs with a torch release (rather than disabling it)."""
    return version_tuple(torch)[:2] >= version_tuple(torch_floor(transformers))


def newest_transformers(torch: str) -> tuple[str, str]:
    """The newest transformers release that runs with `torch`, and the oldest Python it needs."""
    admitted = [floor for floor in NEWEST_FOR_FLOOR if version_tuple(torch)[:2] >= version_tuple(floor)]
    if not admitted:
        raise ReleaseError(f"torch {torch}: older than any transformers release this project knows (torch >= 2.0)")
    return NEWEST_FOR_FLOOR[max(admitted, key=version_tuple)]


def compile_python(torch: str) -> str:
    """The newest Python whose torch.compile a torch release supports."""
    return COMPILE_PYTHON.get(version_tuple(torch)[:2], NEWEST_COMPILE_PYTHON)


def older_companions(oldest: str, project_python: str) -> Release:
    """What every release of a series below the project's transformers floor runs with: chosen for the oldest."""
    transformers, python_at_least = newest_transformers(oldest)
    newest_python = compile_python(oldest)
    python = project_python if version_tuple(project_python)[:2] <= version_tuple(newest_python) else newest_python
    if version_tuple(python)[:2] < version_tuple(python_at_least):
        raise ReleaseError(
            f"torch {oldest}: transformers {transformers} needs Python >= {python_at_least}, but "
            f"torch {oldest}'s torch.compile supports Python <= {newest_python}"
        )
    pins = {"torch": oldest, "transformers": transformers}
    if version_tuple(oldest)[:2] < NUMPY_2_FROM:
        pins["numpy"] = NUMPY_1
    if version_tuple(oldest)[:2] < PKG_RESOURCES_FREE_FROM:
        pins["setuptools"] = SETUPTOOLS_WITH_PKG_RESOURCES
    same_python = version_tuple(python)[:2] == version_tuple(project_python)[:2]
    return Release(pins, "" if same_python else python)


def resolve_series(
    names: list[str], defined: set[str], project_transformers: str, project_python: str
) -> dict[str, Release]:
    """Each short form in `names` that `defined` (params.yaml's environments) does not define, resolved as a series:
    the releases the project's transformers supports with the project's pins and Python (torch alone changes), the
    older ones with the oldest one's companions (`older_companions`); each `transformers-X.Y.Z`, that transformers
    over the project's pins."""
    resolved = {
        name: Release({"transformers": version})
        for name in dict.fromkeys(names)
        if name not in defined and (version := transformers_of(name))
    }
    releases = {name: torch_of(name) for name in dict.fromkeys(names) if name not in defined and torch_of(name)}
    if not releases:
        return resolved
    older = [torch for torch in releases.values() if not supports(project_transformers, torch)]
    companions = older_companions(min(older, key=version_tuple), project_python) if older else None
    for name, torch in releases.items():
        if companions is None or supports(project_transformers, torch):
            resolved[name] = Release({"torch": torch})
        else:
            resolved[name] = Release({**companions.pins, "torch": torch}, companions.python)
    return resolved
