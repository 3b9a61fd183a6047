"""The selection: what an invocation measures, as load_models writes it (paths.selection) and the benchmark stage,
the forecast, explain and an export read it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from compilebench.records.formats import ModelSpec, VariantSpec, _build


@dataclass(frozen=True)
class SelectedEnvironment:
    """One compared environment as an invocation names it: its label there (`current#2` for a repeat), its name in
    params, its resolved pins, its own settings, whose interpreter runs it (`stack`: `current` for one that only sets
    settings) and the Python it is built on ('' = the project's)."""

    label: str
    name: str
    pins: dict[str, str]
    settings: dict[str, Any] = field(default_factory=dict)
    stack: str = ""
    python: str = ""

    @property
    def interpreter(self) -> str:
        """The environment whose interpreter runs it."""
        return self.stack or self.name


@dataclass(frozen=True)
class Selection:
    """What an invocation measures (paths.selection, written by load_models; an export keeps its own): the suite and
    its scale, batch sizes, models with their checkpoint folders, variants, the compared environments and, for a
    suite with `cells: published`, the (model id, batch size, variant) cells measured (None: every one)."""

    suite: str
    scale: str
    batch_sizes: tuple[int, ...]
    models: tuple[ModelSpec, ...]
    variants: tuple[VariantSpec, ...]
    environments: tuple[SelectedEnvironment, ...]
    cells: tuple[tuple[str, int, str], ...] | None = None

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(entry.label for entry in self.environments)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Selection:
        cells = raw.get("cells")
        return _build(
            cls,
            {
                **raw,
                "batch_sizes": tuple(raw["batch_sizes"]),
                "models": tuple(ModelSpec.from_dict(m) for m in raw["models"]),
                "variants": tuple(VariantSpec.from_dict(v) for v in raw["variants"]),
                "environments": tuple(
                    _build(SelectedEnvironment, {**e, "settings": e.get("settings") or {}}) for e in raw["environments"]
                ),
                "cells": None if cells is None else tuple((m, int(b), v) for m, b, v in cells),
            },
        )
