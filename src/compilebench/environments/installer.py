"""Package installs, for the project's own venv (`make`) and for the environments it compares: uv where the venv
has it, pip otherwise.

    python src/compilebench/environments/installer.py VENV_PYTHON [pip install arguments...]

uv installs the same pins as pip several times faster, but it does not read pip's configuration. A machine whose
pip is pointed at local wheels, mirrors or a global constraint file gets the same sources under uv: pip's
`find-links`, `index-url`, `extra-index-url` and `constraint` settings (its config files and PIP_* variables, as `pip
config list` reports them) become uv's flags, with pip's rule of taking the best match across all indexes. Standard
library only: `make` runs this file before anything is installed.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

# pip's settings that say where packages come from, and the uv flag each becomes.
SOURCE_FLAGS = {
    "find-links": "--find-links",
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "constraint": "--constraint",
}
_SETTING = re.compile(r"^(?P<section>[^.]*)\.(?P<key>[a-z-]+)=(?P<quote>['\"])(?P<value>.*)(?P=quote)$")
# pip's own order of precedence: its environment variables, then the install command's section, then global.
_PRECEDENCE = (":env:", "install", "global")


def pip_sources(config_list: str) -> dict[str, list[str]]:
    """pip's package-source settings from `pip config list` output, each key from its highest-precedence section;
    a value holding several entries (whitespace-separated, as pip allows) is split into them."""
    found: dict[str, dict[str, list[str]]] = {}
    for line in config_list.splitlines():
        match = _SETTING.match(line.strip())
        if match and match["key"] in SOURCE_FLAGS:
            found.setdefault(match["key"], {})[match["section"]] = match["value"].split()
    return {
        key: next(sections[section] for section in _PRECEDENCE + tuple(sections) if section in sections)
        for key, sections in found.items()
    }


def uv_flags(sources: dict[str, list[str]]) -> list[str]:
    """uv flags that install as pip would: from pip's sources, the best match across indexes, and compiled to
    bytecode (uv does not by default; where PYTHONDONTWRITEBYTECODE is set, every process would recompile torch)."""
    flags = ["--compile-bytecode", "--index-strategy", "unsafe-best-match"]
    for key, values in sources.items():
        if key == "index-url":
            values = values[:1]  # one default index, as in pip
        for value in values:
            flags += [SOURCE_FLAGS[key], value]
    return flags


def find_uv(python: str | Path) -> str | None:
    """The uv next to an interpreter (the project's venv pins it), else one on PATH, else None."""
    beside = Path(python).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


def install_command(
    target: str | Path, args: list[str], runner: str | Path = sys.executable, released: dict[str, str] | None = None
) -> list[str]:
    """The command installing `args` (pip install arguments) into the environment of interpreter `target`: uv with
    pip's sources (read by `runner`'s pip), or `target`'s own pip where no uv is found. `released`: pip's
    constraint files to pass as other files instead (`released_constraints`)."""
    uv = find_uv(runner)
    if uv is None:
        prefix = []
        if released:  # pip reads its own constraint settings: point it at the copies instead
            prefix = ["env", f"PIP_CONSTRAINT={' '.join(released.get(path, path) for path in _constraints(runner))}"]
        return [*prefix, str(target), "-m", "pip", "install", "--quiet", *args]
    sources = dict(configured_sources(str(runner)))
    if released and "constraint" in sources:
        sources["constraint"] = [released.get(path, path) for path in sources["constraint"]]
    return [uv, "pip", "install", "--quiet", "--python", str(target), *uv_flags(sources), *args]


def _constraints(runner: str | Path) -> list[str]:
    return configured_sources(str(runner)).get("constraint", [])


def constraint_name(line: str) -> str | None:
    """The package a constraints-file line constrains (PEP 503-normalized), None for comments and options."""
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    if not match or line.lstrip().startswith(("#", "-")):
        return None
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def released_constraints(runner: str | Path, pinned: set[str], folder: Path) -> dict[str, str]:
    """For an environment that pins `pinned` by name: each machine-wide pip constraint file that also constrains one
    of them, copied into `folder` without those lines, by the path it replaces. An environment asks for its release
    by name, so a machine's cap (e.g. torch<=2.14.1 where those wheels lie on disk) gives way to it; every other
    constraint stays."""
    pinned = {re.sub(r"[-_.]+", "-", name).lower() for name in pinned}
    replaced = {}
    for index, path in enumerate(_constraints(runner)):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        kept = [line for line in lines if constraint_name(line) not in pinned]
        if len(kept) != len(lines):
            copy = folder / f"machine-constraints-{index}.txt"
            copy.write_text("".join(f"{line}\n" for line in kept))
            replaced[path] = str(copy)
    return replaced


@functools.cache
def configured_sources(runner: str) -> dict[str, list[str]]:
    """pip's package sources as `runner`'s pip reports them; asked once per process (an environment's build installs
    twice, torch first)."""
    listed = subprocess.run([runner, "-m", "pip", "config", "list"], capture_output=True, text=True)
    return pip_sources(listed.stdout) if listed.returncode == 0 else {}


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(
            "usage: python installer.py VENV_PYTHON PIP_INSTALL_ARGS...  (e.g. .venv/bin/python -r requirements.txt)"
        )
    target = sys.argv[1]
    sys.exit(subprocess.run(install_command(target, sys.argv[2:], runner=target)).returncode)


if __name__ == "__main__":
    main()
