"""The tests' compiler cache (tests/cxx_cache.py) with the real g++: a byte-identical compile is reused wherever its
files lie, any difference in source, included header or flags compiles again, and what it cannot key goes to g++."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from cxx_cache import cache_key, counts, install

GXX = shutil.which("g++")  # the real one: conftest points inductor (CXX) at the cache, not PATH
pytestmark = pytest.mark.skipif(GXX is None, reason="no g++ on this machine")

ANSWER = 'extern "C" int answer() { return VALUE; }\n'


def _compile(compiler: Path, folder: Path, value: int, *flags: str) -> tuple[int, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    source, output = folder / "kernel.cpp", folder / "kernel.so"
    source.write_text(ANSWER.replace("VALUE", str(value)))
    done = subprocess.run([str(compiler), str(source), "-shared", "-fPIC", *flags, "-o", str(output)])
    return done.returncode, output


def _answer(library: Path) -> int:
    return ctypes.CDLL(str(library)).answer()


def test_a_byte_identical_compile_elsewhere_is_reused_and_a_different_one_is_compiled(tmp_path):
    compiler = install(tmp_path / "cxx", GXX)
    assert _compile(compiler, tmp_path / "a", 42)[0] == 0
    status, reused = _compile(compiler, tmp_path / "b", 42)  # another (cold) folder, the same bytes
    assert status == 0 and _answer(reused) == 42
    assert counts(tmp_path / "cxx") == {"miss": 1, "hit": 1}
    status, other = _compile(compiler, tmp_path / "c", 43)  # one byte differs
    assert status == 0 and _answer(other) == 43
    assert _compile(compiler, tmp_path / "d", 42, "-O2")[0] == 0  # other flags
    assert counts(tmp_path / "cxx") == {"miss": 3, "hit": 1}


def test_an_included_header_counts_by_its_content(tmp_path):
    def key(folder: Path, text: str) -> str:
        folder.mkdir()
        (folder / "prefix.h").write_text(text)
        (folder / "k.cpp").write_text(ANSWER)
        return cache_key(GXX, [str(folder / "k.cpp"), "-include", str(folder / "prefix.h"), "-o", str(folder / "k.so")])

    assert key(tmp_path / "a", "#define VALUE 1\n") == key(tmp_path / "b", "#define VALUE 1\n")
    assert key(tmp_path / "a2", "#define VALUE 1\n") != key(tmp_path / "b2", "#define VALUE 2\n")


def test_the_script_carries_the_compilers_name(tmp_path):
    """Inductor tells gcc from clang by the compiler's name: the cache must not change which one it looks like."""
    assert install(tmp_path / "cxx", GXX).name == Path(GXX).name
    assert install(tmp_path / "cxx", "/usr/bin/clang++").name == "clang++"


def test_what_it_cannot_key_goes_to_the_compiler(tmp_path):
    (tmp_path / "beside.h").write_text("#define VALUE 7\n")
    (tmp_path / "k.cpp").write_text('#include "beside.h"\n' + ANSWER)
    assert cache_key(GXX, [str(tmp_path / "k.cpp"), "-o", str(tmp_path / "k.so")]) is None  # a file it would not hash
    assert cache_key(GXX, ["a.o", "b.o", "-shared", "-o", "model.so"]) is None  # a link of several objects
    assert cache_key(GXX, [str(tmp_path / "k.cpp"), "-E", "-o", "k.i"]) is None  # preprocessing
    compiler = install(tmp_path / "cxx", GXX)
    version = subprocess.run([str(compiler), "--version"], capture_output=True, text=True)
    assert (
        version.returncode == 0
        and version.stdout == subprocess.run([GXX, "--version"], capture_output=True, text=True).stdout
    )


def test_a_failed_compile_fails_and_stores_nothing(tmp_path):
    compiler = install(tmp_path / "cxx", GXX)
    (tmp_path / "bad.cpp").write_text("this is not C++\n")
    done = subprocess.run(
        [str(compiler), str(tmp_path / "bad.cpp"), "-o", str(tmp_path / "bad.so")], capture_output=True, text=True
    )
    assert done.returncode != 0 and "error" in done.stderr
    assert not (tmp_path / "bad.so").exists() and not list((tmp_path / "cxx").glob("store/*/*"))


def test_torch_headers_count_by_torch_build_not_by_where_the_environment_lies(tmp_path):
    """A comparison's environments install the same torch wheel in different folders: their kernels are one compile."""

    def key(environment: str, version: str) -> str:
        torch = tmp_path / environment / "lib/python3.11/site-packages/torch"
        (torch / "include").mkdir(parents=True, exist_ok=True)
        (torch / "version.py").write_text(version)
        (tmp_path / "k.cpp").write_text(ANSWER)
        return cache_key(GXX, [str(tmp_path / "k.cpp"), f"-I{torch}/include", "-L", f"{torch}/lib", "-o", "k.so"])

    assert key("venv", "__version__ = '2.13.0+cpu'\n") == key("other", "__version__ = '2.13.0+cpu'\n")
    assert key("venv", "__version__ = '2.13.0+cpu'\n") != key("other", "__version__ = '2.14.1'\n")
