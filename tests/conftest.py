"""Shared fixtures: the repo root, the default params, the embedded 640x480 test image."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from compilebench.fetch_image import fallback_image

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def image_640x480() -> Image.Image:
    """The embedded fallback image: the published image's size, so processors give the published shapes."""
    return Image.open(io.BytesIO(fallback_image())).convert("RGB")
