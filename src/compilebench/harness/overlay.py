"""A second environment on a machine that has one stack and no network: this interpreter's packages with a few
carried wheels over them (another transformers release and what it needs of its own), for the launcher's `--python`.

    python -m compilebench.harness.overlay DIR WHEEL [WHEEL ...]    # prints DIR's interpreter, then what it imports

DIR becomes a venv whose site-packages holds the wheels, unpacked as they are (a wheel is a zip of what goes into
site-packages; no pip, no index, no dependencies: a GPU image may have no pip), and a `.pth` file that adds this
interpreter's own site directories after them, so the wheels shadow the packages of the same name and everything else
(torch with its CUDA libraries, the rest) is this machine's. A wheel's `.data/` scripts and headers are left out; its
purelib and platlib go into site-packages. Each compared environment's exact package list is recorded by the launcher
(environment.json), so the overlay's run says what it imported. A wheel that is missing, not a zip, or holds an entry
that would land outside site-packages (an absolute path, a `..`: a wheel is foreign input), or a DIR that holds
anything but an earlier overlay, is refused before anything is written, exit 2, naming the wheel and the entry; the
interpreter's check of what it imports names what failed. Standard library only: it travels.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

BASE_PTH = "_compilebench_base.pth"  # in DIR's site-packages: this interpreter's site directories, after DIR's own
MARKER = "compilebench-overlay.json"  # in DIR: what it was made of (a DIR with it may be made again)
CHECK = (
    "import json, torch, transformers\n"
    "print(json.dumps({'torch': torch.__version__, 'transformers': transformers.__version__}))"
)


def problem(folder: Path, wheels: list[Path]) -> str | None:
    """Why the overlay cannot be made as asked (None: it can): every wheel's every entry is read first."""
    missing = [str(wheel) for wheel in wheels if not wheel.is_file() or wheel.suffix != ".whl"]
    if missing:
        return f"not a wheel file: {', '.join(missing)}; give the .whl files to lay over this interpreter's packages"
    if folder.exists() and any(folder.iterdir()) and not (folder / MARKER).exists():
        return f"{folder} exists and is not an overlay made here: name a new or empty folder"
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as archive:
                names = archive.namelist()
        except (OSError, zipfile.BadZipFile) as error:
            return f"{wheel} is not a readable wheel ({error}); give the .whl files as pip downloads them"
        outside = [name for name in names if escapes(name)]
        if outside:
            return (
                f"{wheel} holds entries that would be written outside the overlay's site-packages: "
                f"{', '.join(map(repr, outside[:5]))}; a wheel's entries are relative paths inside it"
            )
    return None


def escapes(name: str) -> bool:
    """Whether a zip entry's name would land outside the folder it is unpacked into: absolute (on POSIX or Windows,
    a drive included), or climbing out through `..` (separators of either kind)."""
    normal = name.replace("\\", "/")
    if normal.startswith("/") or (len(normal) > 1 and normal[1] == ":"):
        return True
    return posixpath.normpath(normal).split("/")[0] == ".."


def base_sites() -> list[str]:
    """This interpreter's site directories, in its own order (a venv's: the venv's, then the ones it was made over)."""
    return [path for path in site.getsitepackages() if Path(path).is_dir()]


def unpack(wheel: Path, site_packages: Path) -> None:
    """A wheel's files into `site_packages`: its packages and .dist-info as they are, its `.data/purelib` and
    `.data/platlib` moved up; nothing outside `site_packages` is written."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if escapes(member.filename):  # problem() refused it before anything was written
                raise ValueError(f"{wheel}: entry {member.filename!r} lies outside the overlay")
            parts = Path(member.filename.replace("\\", "/")).parts
            if member.is_dir():
                continue
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue  # scripts, headers, data: not needed to import it
                parts = parts[2:]
            target = site_packages.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            mode = member.external_attr >> 16
            if mode:
                target.chmod(mode & 0o777)


def make(folder: Path, wheels: list[Path]) -> str:
    """The overlay at `folder`, made afresh; returns its interpreter."""
    shutil.rmtree(folder, ignore_errors=True)
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    own = Path(
        subprocess.run(
            [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for wheel in wheels:
        unpack(wheel, own)
    lines = [f"import site; site.addsitedir({path!r})" for path in base_sites()]
    (own / BASE_PTH).write_text("\n".join(lines) + "\n")
    (folder / MARKER).write_text(json.dumps({"base": sys.executable, "wheels": [wheel.name for wheel in wheels]}))
    return str(python)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where the overlay's venv goes (new, empty, or an earlier overlay)")
    parser.add_argument("wheels", type=Path, nargs="+", help="the .whl files to lay over this interpreter's packages")
    args = parser.parse_args()
    why = problem(args.folder, args.wheels)
    if why:
        parser.exit(2, f"overlay: {why}\n")
    try:
        python = make(args.folder.resolve(), [wheel.resolve() for wheel in args.wheels])
        found = subprocess.run([python, "-c", CHECK], capture_output=True, text=True)
    except (OSError, ValueError, subprocess.CalledProcessError, zipfile.BadZipFile) as error:
        shutil.rmtree(args.folder, ignore_errors=True)  # nothing half-made is left to be taken for an environment
        parser.exit(2, f"overlay: making {args.folder} failed ({error}); nothing is left there\n")
    if found.returncode != 0:
        lines = found.stderr.strip().splitlines() or ["no message"]
        why = next((line for line in reversed(lines) if "Error" in line), lines[-1])
        shutil.rmtree(args.folder, ignore_errors=True)
        parser.exit(
            2,
            f"overlay: its interpreter cannot import torch and transformers: {why.strip()}; carry the "
            "wheels that package needs too (e.g. its tokenizers and huggingface_hub)\n",
        )
    print(python)
    print(found.stdout.strip())


if __name__ == "__main__":
    main()
