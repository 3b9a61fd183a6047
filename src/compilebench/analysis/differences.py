"""What two environments' runs differ in beside what was asked: B against A in a field neither's pins nor settings
name (a CUDA build against a CPU build, another Python, another malloc), said in the report's first lines and on
each candidate run, since a change may come from it too."""

from __future__ import annotations

import json
from typing import Any

from compilebench.analysis.run_record import RunRecord

# What an environment ran with that its pins or settings need not name; said where B differs from A without asking.
BESIDE_FIELDS = {
    "cuda_version": "torch build",
    "python_version": "Python",
    "torch_version": "torch",
    "transformers_version": "transformers",
    "malloc": "malloc",
    "threading_variables": "OpenMP and MKL variables",
    "transparent_hugepages": "transparent huge pages",
    "thp_mem_alloc": "huge pages at allocation",
    "num_threads": "threads",
    "float32_matmul_precision": "float32 matmul precision",
    "matmul_allow_tf32": "TF32 matmul",
    "cudnn_version": "cuDNN",
    "cudnn_allow_tf32": "cuDNN TF32",
    "cudnn_benchmark": "cuDNN benchmark",
    "cpu_capability": "CPU vector instructions",
}
SETTING_FIELDS = {
    "huge_pages": ("transparent_hugepages", "thp_mem_alloc"),
    "cpu_isa": ("cpu_capability",),
}  # a setting -> the fields it sets


def _asked_fields(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    """The fields B's pins or settings ask to differ from A's: a package pinned otherwise (its build too, where a pin
    names one), a setting set otherwise."""

    def parsed(row: dict[str, Any], key: str) -> dict[str, Any]:
        try:
            return json.loads(row.get(key) or "{}") or {}
        except (TypeError, ValueError):
            return {}

    asked = set()
    pins_a, pins_b = parsed(a, "environment_pins"), parsed(b, "environment_pins")
    for package in ("torch", "transformers"):
        if pins_a.get(package) != pins_b.get(package):
            asked.add(f"{package}_version")
            if package == "torch":
                asked.add("cpu_capability")  # which CPU kernels torch picks on this machine comes with its release
                if "+" in str(pins_a.get(package)) + str(pins_b.get(package)) or (_cuda(a) and _cuda(b)):
                    asked.add("cuda_version")  # a release's own CUDA build (cu121 -> cu124) comes with the release
    settings_a, settings_b = parsed(a, "environment_settings"), parsed(b, "environment_settings")
    for setting in set(settings_a) | set(settings_b):
        if settings_a.get(setting) != settings_b.get(setting):
            asked.update(SETTING_FIELDS.get(setting, (setting,)))
    return asked


def _cuda(row: dict[str, Any]) -> bool:
    return not unset(row.get("cuda_version"))


def build_word(cuda_version: Any) -> str:
    """How a torch was built, from the CUDA version its runs recorded: `CPU build` or `CUDA 13.0 build`."""
    cuda = str(cuda_version)
    return "CPU build" if unset(cuda) else f"CUDA {cuda} build"


def _first_runs(results: list[RunRecord]) -> dict[str, dict[str, Any]]:
    first: dict[str, dict[str, Any]] = {}
    for record in results:
        if record.env.environment not in first:  # each environment's first run, flattened once
            first[record.env.environment] = record.to_dict()
    return first


def beside_the_question(results: list[RunRecord], baseline: str, candidate: str) -> list[str]:
    """What B ran with that differs from A though neither's pins nor settings asked for it (a CUDA build against a
    CPU build, another Python, another malloc): each as 'torch build: CPU build → CUDA 13.0 build'."""
    first = _first_runs(results)
    if baseline not in first or candidate not in first:
        return []
    return _beside(first[baseline], first[candidate])


def step_changes(results: list[RunRecord], before: str, after: str) -> list[str]:
    """What a step of a series changes beside torch: each other pin that differs ('transformers 4.49.0 → 5.23.0',
    'numpy 1.26.4 → unpinned'), then what differs beside the question (`beside_the_question`)."""
    first = _first_runs(results)
    if before not in first or after not in first:
        return []
    a, b = first[before], first[after]

    def pins(row: dict[str, Any]) -> dict[str, Any]:
        try:
            return json.loads(row.get("environment_pins") or "{}") or {}
        except (TypeError, ValueError):
            return {}

    pins_a, pins_b = pins(a), pins(b)
    held_a, held_b = _held(a), _held(b)  # what an unpinned package resolved to
    changed = [
        f"{package} {pins_a.get(package) or held_a.get(package, '?')} → "
        f"{pins_b.get(package) or held_b.get(package, '?')}"
        for package in dict.fromkeys([*pins_a, *pins_b])
        if package != "torch" and pins_a.get(package) != pins_b.get(package)
    ]
    return changed + _beside(a, b)


def _held(row: dict[str, Any]) -> dict[str, str]:
    """An environment's installed versions by package name, from its exact package list (`name==version` lines)."""
    found = {}
    for line in row.get("environment_freeze") or ():
        name, _, version = str(line).partition("==")
        if version:
            found[name.strip().lower().replace("_", "-")] = version.strip()
    return found


def _beside(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """B's first run against A's in each field neither's pins nor settings asked to differ."""
    asked = _asked_fields(a, b)
    found = []
    for field, name in BESIDE_FIELDS.items():
        before, after = _said(a.get(field)), _said(b.get(field))
        if field in asked or before == after:
            continue
        if field == "cuda_version":
            builds = f"{build_word(a.get(field))} → {build_word(b.get(field))}"
            found.append(f"{name}: {builds} (torch {a.get('torch_version')} → {b.get('torch_version')})")
        else:
            found.append(f"{name}: {before} → {after}")
    return found


def unset(value: Any) -> bool:
    """Whether an environment field says nothing: empty, missing from a record made before the field was recorded, or
    torch's own word for none (a CPU build's `cudnn_version` is `None`, its `cuda_version` `none`)."""
    return value is None or str(value).strip().lower() in ("", "nan", "none")


def _said(value: Any) -> str:
    """A field's value in words: `none` where it is unset."""
    return "none" if unset(value) else str(value)
