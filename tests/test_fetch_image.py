"""fetch_image against a real HTTP server on 127.0.0.1: checksum, size cap, non-images, unreachable network."""

import hashlib
import io
import socket

import pytest
from conftest import serve_files
from PIL import Image

from compilebench.fetch_image import SOURCE_DOWNLOAD, SOURCE_FALLBACK, FetchError, fallback_image, fetch

JPEG = fallback_image()


def _jpeg(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buffer, format="JPEG")
    return buffer.getvalue()


FILES = {
    "/cats.jpg": JPEG,
    "/text.jpg": b"<html>not an image</html>",
    "/truncated.jpg": JPEG[: len(JPEG) // 2],
    "/bomb.jpg": _jpeg(4000, 3000),
}


@pytest.fixture(scope="module")
def server():
    with serve_files(FILES) as url:
        yield url


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/cats.jpg"  # nothing listens there: connection refused


def _fetch(url, sha256=None, max_bytes=10_000_000, max_pixels=40_000_000, allow_fallback=True):
    return fetch(url, sha256, max_bytes, max_pixels, 5.0, allow_fallback)


def test_download_with_pinned_checksum(server):
    data, meta = _fetch(server + "/cats.jpg", sha256=hashlib.sha256(JPEG).hexdigest())
    assert data == JPEG
    assert meta["image_source"] == SOURCE_DOWNLOAD and meta["sha256_pinned"] is True
    assert (meta["width"], meta["height"]) == (640, 480)


def test_unpinned_download_records_its_digest(server):
    _, meta = _fetch(server + "/cats.jpg")
    assert meta["sha256"] == hashlib.sha256(JPEG).hexdigest() and meta["sha256_pinned"] is False


def test_checksum_mismatch_is_an_error_not_a_fallback(server):
    with pytest.raises(FetchError, match="does not match"):
        _fetch(server + "/cats.jpg", sha256="0" * 64)


@pytest.mark.parametrize(
    ("path", "kwargs", "needle"),
    [
        ("/text.jpg", {}, "not a readable image"),
        ("/truncated.jpg", {}, "not a readable image"),
        ("/bomb.jpg", {"max_pixels": 1_000_000}, "max_pixels"),
        ("/cats.jpg", {"max_bytes": 1000}, "max_bytes"),
        ("/missing.jpg", {}, "HTTP 404"),
    ],
)
def test_bad_downloads_are_errors(server, path, kwargs, needle):
    with pytest.raises(FetchError, match=needle):
        _fetch(server + path, **kwargs)


def test_unreachable_network_falls_back_only_when_allowed():
    data, meta = _fetch(_closed_port_url())
    assert meta["image_source"] == SOURCE_FALLBACK and data == fallback_image()
    assert (meta["width"], meta["height"]) == (640, 480)
    with pytest.raises(FetchError, match="allow_fallback is false"):
        _fetch(_closed_port_url(), allow_fallback=False)


def test_non_http_scheme_refused():
    with pytest.raises(FetchError, match="http"):
        _fetch("file:///etc/passwd")


def test_fallback_is_deterministic():
    assert hashlib.sha256(fallback_image()).digest() == hashlib.sha256(fallback_image()).digest()


@pytest.fixture
def image_files(tmp_path):
    """The same bytes as the server's, as local files (and a folder)."""
    for name, data in FILES.items():
        (tmp_path / name.lstrip("/")).write_bytes(data)
    (tmp_path / "a-folder").mkdir()
    return tmp_path


def test_a_local_file_is_used_instead_of_the_url_and_recorded(image_files):
    digest = hashlib.sha256(JPEG).hexdigest()
    data, meta = fetch(_closed_port_url(), digest, 10_000_000, 40_000_000, 5.0, False, str(image_files / "cats.jpg"))
    assert data == JPEG  # not the fallback, although the url is unreachable and fallback is off
    assert meta["image_source"] == "file" and meta["url"] is None
    assert meta["file"] == str((image_files / "cats.jpg").resolve()) and meta["sha256_pinned"] is True


@pytest.mark.parametrize(
    ("name", "kwargs", "needle"),
    [
        ("missing.jpg", {}, "does not exist"),
        ("a-folder", {}, "is a folder"),
        ("text.jpg", {}, "not a readable image"),
        ("truncated.jpg", {}, "not a readable image"),
        ("bomb.jpg", {"max_pixels": 1_000_000}, "image.max_pixels=1000000"),
        ("cats.jpg", {"max_bytes": 1000}, "image.max_bytes=1000"),
        ("cats.jpg", {"sha256": "0" * 64}, "does not match image.sha256"),
    ],
)
def test_bad_local_files_are_errors(image_files, name, kwargs, needle):
    args = {"sha256": None, "max_bytes": 10_000_000, "max_pixels": 40_000_000, **kwargs}
    with pytest.raises(FetchError, match=needle.replace("(", r"\(")) as error:
        fetch(
            _closed_port_url(),
            args["sha256"],
            args["max_bytes"],
            args["max_pixels"],
            5.0,
            True,
            str(image_files / name),
        )
    assert name in str(error.value)  # the message names the file
