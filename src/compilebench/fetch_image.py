"""Stage fetch_image: the image the published benchmark used (COCO val2017 000000039769, 640x480), or your own.

    python -m compilebench.fetch_image            # reads params.yaml; writes paths.image and paths.image_meta

`image.file` set: that local file is used instead of the download, with the same checks (size cap, pixel cap,
pinned sha256, a non-image is an error); input size drives latency for detection and segmentation.

Downloads over http(s) with a timeout and a size cap, checks the pinned sha256 (when set) and that the bytes decode
to an image of bounded size. Only when the network is unreachable, and only if `image.allow_fallback`, it writes a
deterministic embedded 640x480 image instead, so every processor still produces the published input shapes.
A checksum mismatch, an HTTP error or a non-image is an error, never a fallback. The source used is recorded.
"""

from __future__ import annotations

import hashlib
import io
import logging
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from compilebench.config import stage_config
from compilebench.records.writing import write_atomic, write_json

LOGGER = logging.getLogger(__name__)

FALLBACK_SIZE = (640, 480)  # width, height of the published image
SOURCE_DOWNLOAD = "download"
SOURCE_FALLBACK = "embedded-fallback"
SOURCE_FILE = "file"


class FetchError(RuntimeError):
    """The image could not be fetched and no fallback applies."""


class NetworkUnreachable(FetchError):
    """No answer from the network (DNS failure, refused connection, timeout)."""


def download(url: str, max_bytes: int, timeout_s: float) -> bytes:
    """The body at `url`, refusing more than `max_bytes`; NetworkUnreachable when nothing answers."""
    if not url.startswith(("http://", "https://")):
        raise FetchError(f"image url must be http(s), got {url!r}")
    request = urllib.request.Request(url, headers={"User-Agent": "compilebench"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            declared = response.headers.get("Content-Length")
            if declared is not None and int(declared) > max_bytes:
                raise FetchError(f"{url}: {declared} bytes declared, more than image.max_bytes={max_bytes}")
            body = response.read(max_bytes + 1)
    except urllib.error.HTTPError as error:
        raise FetchError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        raise NetworkUnreachable(f"{url}: network unreachable ({reason})") from None
    if len(body) > max_bytes:
        raise FetchError(f"{url}: more than image.max_bytes={max_bytes} bytes")
    return body


def check_image(data: bytes, max_pixels: int) -> tuple[int, int]:
    """(width, height) of encoded image bytes; FetchError for a non-image, a truncated file or a pixel bomb."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise FetchError(f"image is {width}x{height}, more than image.max_pixels={max_pixels}")
            image.load()  # decodes fully: catches truncated files
    except FetchError:
        raise
    except Exception as error:  # PIL raises several types for undecodable data
        raise FetchError(f"the bytes are not a readable image: {type(error).__name__}: {error}") from None
    return width, height


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def fallback_image() -> bytes:
    """A deterministic 640x480 JPEG: smooth colour fields and two ellipses (no randomness, no network)."""
    width, height = FALLBACK_SIZE
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    red = 128 + 100 * np.sin(x / 53.0) * np.cos(y / 71.0)
    green = 128 + 90 * np.sin((x + y) / 97.0)
    blue = 128 + 80 * np.cos(np.hypot(x - 320, y - 240) / 41.0)
    pixels = np.stack([red, green, blue], axis=-1)
    for cx, cy, rx, ry, colour in ((200, 260, 150, 110, (200, 140, 90)), (460, 230, 140, 120, (90, 80, 70))):
        inside = ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 <= 1.0
        pixels[inside] = colour
    buffer = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def read_file(path: str, max_bytes: int) -> bytes:
    """The bytes of a local image file, refusing a missing file, a folder or more than `max_bytes`."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FetchError(
            f"image.file {path!r}: {'is a folder' if file.is_dir() else 'does not exist'}; "
            "give an image file (JPEG, PNG, ...) or null to use image.url"
        )
    size = file.stat().st_size
    if size > max_bytes:
        raise FetchError(f"image.file {path!r}: {size} bytes, more than image.max_bytes={max_bytes}")
    return file.read_bytes()


def fetch(
    url: str,
    sha256: str | None,
    max_bytes: int,
    max_pixels: int,
    timeout_s: float,
    allow_fallback: bool,
    file: str | None = None,
):
    """The image bytes and their provenance record: a local `file` when given, else the download of `url`."""
    origin = url
    if file is not None:
        data, source, origin = read_file(file, max_bytes), SOURCE_FILE, str(Path(file).expanduser().resolve())
    else:
        try:
            data = download(url, max_bytes, timeout_s)
            source = SOURCE_DOWNLOAD
        except NetworkUnreachable as error:
            if not allow_fallback:
                raise FetchError(f"{error}; image.allow_fallback is false, so there is no image to benchmark") from None
            LOGGER.warning("%s: using the embedded deterministic 640x480 fallback image", error)
            data, source = fallback_image(), SOURCE_FALLBACK
    digest = sha256_hex(data)
    if source != SOURCE_FALLBACK:
        if sha256 is not None and digest != sha256:
            raise FetchError(f"{origin}: sha256 {digest} does not match image.sha256 {sha256}")
        if sha256 is None:
            LOGGER.warning("image.sha256 is not set: %s has sha256 %s; pin it in params.yaml", origin, digest)
    try:
        width, height = check_image(data, max_pixels)
    except FetchError as error:
        raise FetchError(f"{origin if source != SOURCE_FALLBACK else 'fallback image'}: {error}") from None
    meta: dict[str, Any] = {
        "image_source": source,
        "url": url if file is None else None,
        "file": origin if file is not None else None,
        "sha256": digest,
        "sha256_pinned": sha256 is not None and source != SOURCE_FALLBACK,
        "width": width,
        "height": height,
        "bytes": len(data),
    }
    return data, meta


def main() -> None:
    config = stage_config()
    try:
        cfg = config.image
        data, meta = fetch(
            cfg.url, cfg.sha256, cfg.max_bytes, cfg.max_pixels, cfg.timeout_s, cfg.allow_fallback, cfg.file
        )
    except FetchError as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    write_atomic(Path(config.paths.image), data)
    write_json(config.paths.image_meta, meta)
    LOGGER.info("image: %s %dx%d sha256 %s", meta["image_source"], meta["width"], meta["height"], meta["sha256"])


if __name__ == "__main__":
    main()
