"""A compiler cache for the test run (what ccache does, in the standard library): inductor's C++ compiler, for tests.

Tests that check cold compiles give each trial process an empty inductor cache, so the same tiny model's kernels are
compiled again by g++ in every such process, and each builds its precompiled header again. Those seconds are not
what the tests check (they count graphs, cache hits and statuses), so `conftest.py` points inductor's `CXX`
at `install()`'s script, which calls this module: a compile of one source file into one output is looked up by the
compiler, its arguments (the source, output and `-include`d header by content, not path; torch's headers and
libraries by torch's build, so a comparison's second environment reuses the first's) and the source's bytes;
a hit copies the stored output where the compiler would have written it, a miss runs the real compiler and stores
what it wrote. Everything else (`--version`, preprocessing, links of several objects) goes to the real compiler
untouched. Inductor still generates, writes and loads every kernel into each trial's own cache; only g++'s work on a
byte-identical source is not repeated. The store lives in the session's folder and goes with it.

Standard library only: the script starts Python without site-packages (`-S`), so a hit costs far less than g++'s
compile of a kernel or a header (docs/development.md has the measurements).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".h", ".hpp")
PASS_THROUGH_FLAGS = {"-E", "-M", "-MM", "-v", "--version", "-dumpversion", "-dumpmachine"}
CALLS = "calls.log"
TORCH = "/site-packages/torch"
TAKES_A_VALUE = {"-D", "-U", "-I", "-L", "-x", "-isystem", "-iquote", "-idirafter", "-Xlinker", "-MF", "-MT", "-MQ"}


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _torch_by_build(path: str) -> str:
    """A path into an installed torch (its headers, its libraries) as that torch's build, not where it lies: the
    environments a comparison builds install the same torch wheel elsewhere, and compile the same kernels."""
    head, marker, tail = path.partition(TORCH)
    version = Path(head + marker, "version.py")  # __version__ and git_version: which build this is
    if not marker or tail[:1] not in ("", "/") or not version.is_file():
        return path
    return f"torch[{_digest(str(version))}]{tail}"


def cache_key(compiler: str, args: list[str]) -> str | None:
    """The key of a compile of one source into one output, or None where the call is not one (it is passed on)."""
    keyed = _key_and_output(compiler, args)
    return None if keyed is None else keyed[0]


def _key_and_output(compiler: str, args: list[str]) -> tuple[str, Path] | None:
    """`cache_key`, and the output it keyed (the last `-o`, which the compiler writes), or None."""
    if PASS_THROUGH_FLAGS.intersection(args):
        return None
    parts, sources, output = [compiler], [], None
    arguments = iter(args)
    for arg in arguments:
        if arg == "-o":
            output = next(arguments, None)
            parts.append("-o OUTPUT" + Path(output or "").suffix)
        elif arg == "-include":
            header = next(arguments, "")
            if not os.path.isfile(header):
                return None
            parts.append("-include " + _digest(header))
        elif arg in TAKES_A_VALUE:
            parts.append(f"{arg} {_torch_by_build(next(arguments, ''))}")
        elif arg.startswith(("-I", "-L")):
            parts.append(arg[:2] + _torch_by_build(arg[2:]))
        elif not arg.startswith("-") and arg.endswith(SOURCE_SUFFIXES):
            sources.append(arg)
            parts.append("SOURCE" + Path(arg).suffix)
        elif not arg.startswith("-"):
            return None  # an object, archive or anything else this does not hash: not a single compile
        else:
            parts.append(arg)
    if len(sources) != 1 or not output or not os.path.isfile(sources[0]):
        return None
    text = Path(sources[0]).read_bytes()
    if b'#include "' in text:
        return None  # it includes a file beside it, whose bytes this key would not cover
    parts.append(hashlib.sha256(text).hexdigest())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest(), Path(output)


def _place(source: Path, target: Path) -> None:
    """Copy `source` to `target` atomically (a unique temporary name beside it, then a rename). Not
    `compilebench.records.writing.write_atomic`: that reads the whole file into memory and fsyncs it, for results that
    must survive a power loss; these are copies in a store that goes with the test run, executable as a compiler
    leaves them."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(handle)
    try:
        shutil.copyfile(source, temporary)
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def compile_cached(compiler: str, store: Path, args: list[str]) -> int:
    """Run `compiler args` through the store; the exit status the compiler gave (or would have)."""
    keyed = _key_and_output(compiler, args)
    if keyed is None:
        return subprocess.call([compiler, *args])
    key, output = keyed
    stored = store / key[:2] / key
    if stored.is_file():
        _place(stored, output)
        _count(store, "hit")
        return 0
    status = subprocess.call([compiler, *args])
    if status == 0 and output.is_file():
        stored.parent.mkdir(parents=True, exist_ok=True)
        _place(output, stored)
    _count(store, "miss")
    return status


def _count(store: Path, outcome: str) -> None:
    with open(store.parent / CALLS, "a") as calls:  # one short append a call: whole lines from concurrent callers
        calls.write(outcome + "\n")


def counts(folder: Path) -> dict[str, int]:
    """Hits and misses so far of the cache installed in `folder`."""
    lines = (folder / CALLS).read_text().split() if (folder / CALLS).exists() else []
    return {outcome: lines.count(outcome) for outcome in ("hit", "miss")}


def install(folder: Path, compiler: str) -> Path:
    """Write the executable that inductor calls as its compiler (into `folder`, with its store); return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    # By the real compiler's name: inductor decides by the name whether a compiler is gcc or clang (and with it the
    # flags, and whether to precompile headers), so the script must not change which one it looks like.
    script = folder / Path(compiler).name
    script.write_text(
        f"#!{sys.executable} -S\n"
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from cxx_cache import compile_cached\n"
        "from pathlib import Path\n"
        f"sys.exit(compile_cached({compiler!r}, Path({str(folder / 'store')!r}), sys.argv[1:]))\n"
    )
    script.chmod(0o755)
    return script
