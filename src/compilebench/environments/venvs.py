"""Software stacks to compare: each environment is a set of pins over the project's own, built into a cached venv.

    python -m compilebench.environments torch-2.14.1 [...]    # build (or find) environments named in params.yaml
    python -m compilebench.environments --list                # what is built, its size, whether still used
    python -m compilebench.environments --remove-unused       # remove venvs neither params.yaml nor the last run use

`current` alone is the project's own environment (the interpreter running the pipeline, pinned by constraints.txt and
requirements.txt). Any other environment, and `current` too as soon as it is compared with anything, is a venv
holding only what a trial process needs (torch, transformers and their companions; no mlflow, dvc or pandas), built
by one recipe on first use under `paths.environments` in a folder keyed by
its resolved pins and Python version, and reused afterwards. Two pipelines building the same environment wait for
each other (a file lock). Its exact package list (`pip freeze`) goes with every run it measures. A build that
cannot work (no such version, no wheel for this platform or Python) is an error naming the environment, raised
before any timing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compilebench.environments import installer
from compilebench.environments.pins import TRIAL_PACKAGES, environment_key, mismatches, normalize, project_pins, resolve
from compilebench.harness import groups
from compilebench.harness.fingerprint import freeze
from compilebench.records.formats import CURRENT
from compilebench.records.selection import SelectedEnvironment

if TYPE_CHECKING:  # the config is read in main() only
    from compilebench.config.sections import Environment

LOGGER = logging.getLogger(__name__)

READY_MARKER = "compilebench-environment.json"


class BuildError(RuntimeError):
    """An environment that cannot be built or does not hold what it should; the message names it."""


@dataclass(frozen=True)
class BuiltEnvironment:
    """An environment built: its name, its stack (resolved pins, interpreter, key) and its exact package list."""

    name: str
    pins: dict[str, str]
    python: str
    key: str
    freeze: tuple[str, ...]


def _install(python: Path, args: list[str], log: Path, name: str, released: dict[str, str] | None = None) -> None:
    """Install into an environment (uv from pip's sources, or its own pip: `installer`); the output goes to `log`;
    an error names the environment. `released`: constraint files replaced by copies without the pinned packages."""
    command = installer.install_command(python, args, released=released or {})
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        returncode = groups.run_in_group(command, stdout=handle, stderr=subprocess.STDOUT)  # ends with the stage
    if returncode != 0:
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-6:])
        raise BuildError(f"environment {name!r}: `pip install {' '.join(args)}` failed: {tail}")


def installed_versions(python: str, packages: list[str]) -> dict[str, str]:
    """Versions of `packages` as an interpreter's environment sees them."""
    code = (
        "import json, sys\nfrom importlib import metadata\n"
        "print(json.dumps({p: metadata.version(p) for p in sys.argv[1:]}))"
    )
    done = subprocess.run([python, "-c", code, *packages], capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{python}: cannot read package versions: {done.stderr.strip()[-300:]}")
    return {normalize(name): version for name, version in json.loads(done.stdout).items()}


def current(root: Path) -> BuiltEnvironment:
    """The project's own environment, checked against its pins (a hand-installed torch would mislabel every run)."""
    pins = project_pins(root)
    versions = {normalize(name): metadata.version(name) for name in pins}
    wrong = mismatches(pins, versions)
    if wrong:
        raise BuildError(
            f"environment {CURRENT!r} ({sys.executable}) does not hold the project's pins: {', '.join(wrong)}. "
            "Run `make` to reinstall them, or name the stack you want as an environment in params.yaml"
        )
    frozen = freeze(sys.executable)
    key = hashlib.sha256("\n".join(frozen).encode()).hexdigest()[:12]
    return BuiltEnvironment(CURRENT, pins, sys.executable, key, frozen)


def interpreter(version: str, name: str = "") -> tuple[str, str]:
    """The interpreter an environment is built on and its full version: this one for '' (the project's), else
    pyenv's newest `version` (PYENV_ROOT, ~/.pyenv), else `python{version}` on PATH; an error names what is missing."""
    if not version:
        return sys.executable, platform.python_version()
    found = pyenv_versions(version)
    candidates = [str(found[-1])] if found else []
    on_path = shutil.which(f"python{'.'.join(version.split('.')[:2])}")
    candidates += [on_path] if on_path else []
    for candidate in candidates:
        done = subprocess.run(
            [candidate, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
        )
        full = done.stdout.strip()
        if done.returncode == 0 and (full == version or full.startswith(version + ".")):
            return candidate, full
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    raise BuildError(
        f"environment {name!r} asks for Python {version}: none found under {pyenv} or as "
        f"python{version} on PATH (e.g. `pyenv install {version}`)"
    )


def pyenv_versions(version: str) -> list[Path]:
    """pyenv's interpreters of `version` ('3.10': 3.10.x; PYENV_ROOT, else ~/.pyenv), oldest first."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = [
        path
        for path in pyenv.glob(f"{version}*/bin/python")
        if re.fullmatch(rf"{re.escape(version)}(\.\d+)*", path.parent.parent.name)
    ]
    return sorted(found, key=lambda path: _numbers(path.parent.parent.name))


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def _build(name: str, pins: dict[str, str], folder: Path, python: Path, base: str) -> None:
    """Create the venv on interpreter `base` and install torch first, alone (as `make` does), then the rest under
    the pins. A venv that uv fills needs no pip of its own (its package list is read without pip). A machine-wide
    pip constraint on a package the environment pins gives way to the pin (installer.released_constraints)."""
    own_pip = [] if installer.find_uv(sys.executable) is None else ["--without-pip"]
    subprocess.run([base, "-m", "venv", *own_pip, str(folder)], check=True)
    log = folder / "build.log"
    released = installer.released_constraints(sys.executable, set(pins), folder)
    if released:
        with open(log, "a") as handle:
            handle.write(f"machine-wide pip constraints on {sorted(set(pins) & set(released))} give way to the pins\n")
    if "torch" in pins:
        _install(python, [f"torch=={pins['torch']}"], log, name, released)
    constraints = folder / "constraints.txt"
    constraints.write_text("".join(f"{package}=={version}\n" for package, version in pins.items()))
    requirements = [
        f"{package}=={pins[package]}" if package in pins else package for package in map(normalize, TRIAL_PACKAGES)
    ]
    extra = [
        f"{package}=={version}" for package, version in pins.items() if package not in map(normalize, TRIAL_PACKAGES)
    ]
    _install(python, ["-c", str(constraints), *requirements, *extra], log, name, released)
    wrong = mismatches(pins, installed_versions(str(python), list(pins)))
    if wrong:
        raise BuildError(f"environment {name!r}: the install gave {', '.join(wrong)}")
    problem = subprocess.run([str(python), "-c", STACK_PROBE], capture_output=True, text=True)
    if problem.returncode != 0:
        raise BuildError(
            f"environment {name!r}: torch and transformers do not work together: "
            f"{(problem.stderr or problem.stdout).strip()[-400:]}"
        )


# What a built environment must do before it is kept: import torch with NumPy working under it, and transformers
# with torch enabled and its model code importable (a transformers whose torch floor is above this torch disables
# it, or calls what this torch lacks: torch.compiler in 4.50 on torch 2.0), else every model would fail.
STACK_PROBE = (
    "import numpy, torch\n"
    "torch.from_numpy(numpy.zeros(2))\n"
    "from transformers.utils import is_torch_available\n"
    "import transformers, transformers.modeling_utils\n"
    "assert is_torch_available(), f'transformers {transformers.__version__} disables torch {torch.__version__}'\n"
)


# What a trial process imports first, found without importing it (a few milliseconds, not torch's seconds).
INTACT_PROBE = (
    "import importlib.util, sys\n"
    "print(' '.join(m for m in ('torch', 'transformers', 'numpy') if importlib.util.find_spec(m) is None))\n"
)


def broken(python: Path) -> str:
    """What a built environment lacks of what every trial needs ('' when whole): its interpreter, or a package a
    trial imports."""
    if not python.exists():
        return f"its interpreter {python} is gone"
    done = subprocess.run([str(python), "-c", INTACT_PROBE], capture_output=True, text=True)
    if done.returncode != 0:
        return f"its interpreter {python} does not start: {(done.stderr or done.stdout).strip()[-200:]}"
    missing = done.stdout.split()
    return f"{', '.join(missing)} no longer installed in it" if missing else ""


def folder_of(name: str, pins: dict[str, str], cache_root: Path, python: str = "") -> Path:
    """Where the environment for `pins` is built: its name and key (resolved pins, its Python's full version) under
    `cache_root`; `python`: the version it asks for ('' = the project's)."""
    version = interpreter(python, name)[1] if python else platform.python_version()
    return (cache_root / f"{name}-{environment_key(pins, version)}").resolve()


def is_built(name: str, pins: dict[str, str], cache_root: Path, python: str = "") -> bool:
    """Whether the environment for `pins` was built to the end (`build` reuses it; nothing is built here)."""
    try:
        return (folder_of(name, pins, cache_root, python) / READY_MARKER).exists()
    except BuildError:
        return False


def build(name: str, pins: dict[str, str], cache_root: Path, python: str = "") -> BuiltEnvironment:
    """The environment for `pins` on Python `python` ('' = the project's), built into `cache_root` on first use
    (torch first, alone, as `make` does)."""
    base, version = interpreter(python, name)
    key, folder = environment_key(pins, version), folder_of(name, pins, cache_root, python)
    python = folder / "bin" / "python"
    marker = folder / READY_MARKER
    cache_root.mkdir(parents=True, exist_ok=True)
    with open(cache_root / f"{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second pipeline building the same environment waits for this one
        if not marker.exists():
            LOGGER.info("environment %s: building %s (first use; reused afterwards)", name, folder)
            shutil.rmtree(folder, ignore_errors=True)  # a build interrupted earlier
            try:
                _build(name, pins, folder, python, base)
            except BaseException:
                shutil.rmtree(
                    folder, ignore_errors=True
                )  # nothing half-built is left to be mistaken for an environment
                raise
            marker.write_text(json.dumps({"name": name, "pins": pins, "python": version}))
        elif damage := broken(python):  # built before, harmed since (a file deleted): every trial of it would fail
            raise BuildError(
                f"environment {name!r} ({folder}) is broken: {damage}; remove it (python -m compilebench.environments "
                f"--remove {name}) and it is built again on first use"
            )
    return BuiltEnvironment(name, pins, str(python), key, freeze(str(python)))


DEVICE_PROBE = (
    "import json, torch\n"
    "available = torch.cuda.is_available()\n"
    "print(json.dumps({'version': torch.__version__, 'built': torch.backends.cuda.is_built(),"
    " 'available': available, 'count': torch.cuda.device_count() if available else 0}))"
)


def device_problem(probe: dict, label: str, device: str) -> str | None:
    """Why `device` cannot run in an environment whose torch answered `probe` (None: it can)."""
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if not probe["built"]:
        return (
            f"`device` is {device!r}, but environment {label!r} has torch {probe['version']}, built without "
            "CUDA; use `cpu`, or compare an environment with a CUDA build of torch"
        )
    if not probe["available"]:
        return (
            f"`device` is {device!r}, but environment {label!r} (torch {probe['version']}) sees no GPU "
            "(no driver or no device); use `cpu`"
        )
    if index >= probe["count"]:
        return (
            f"`device` is {device!r}, but environment {label!r} sees {probe['count']} GPU(s): "
            f"use cuda:0 .. cuda:{probe['count'] - 1}"
        )
    return None


def check_device(stack: BuiltEnvironment, label: str, device: str) -> None:
    """`device` is usable in this environment's torch: a CUDA build that sees that GPU (before any work)."""
    if not device.startswith("cuda"):
        return
    done = subprocess.run([stack.python, "-c", DEVICE_PROBE], capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"environment {label!r}: torch does not import: {done.stderr.strip()[-300:]}")
    problem = device_problem(json.loads(done.stdout), label, device)
    if problem:
        raise BuildError(problem)


def stacks(selected: Sequence[SelectedEnvironment], root: Path, cache_root: Path) -> dict[str, BuiltEnvironment]:
    """The interpreter of each environment (by label), built or reused; an environment that pins nothing (it only
    sets settings) takes `current`'s, built or reused as `current` is. Alone, `current` is the project's own
    interpreter (checked against its pins); compared with anything (an A/A run included), it is built by the same
    recipe as the others, a minimal venv from the project's pins, so an A/B differs only in what the user pinned
    and not in the project's own tools (mlflow, dvc, pandas) sitting in one side's process."""
    built: dict[str, BuiltEnvironment] = {}
    by_label = {}
    compared = len(selected) > 1
    for entry in selected:
        name = entry.interpreter  # an environment that only sets settings runs on `current`'s
        if name not in built:
            own = name == CURRENT and not compared
            built[name] = current(root) if own else build(name, entry.pins, cache_root, entry.python)
            if not own:
                hold_in_use(Path(built[name].python).parent.parent)
        by_label[entry.label] = built[name]
    return by_label


IN_USE_SUFFIX = ".in-use"  # beside a venv: held shared by every process that runs trials on it (`remove` asks)
_HELD: dict[Path, Any] = {}  # venv folder -> its open in-use file, held until this process ends


def hold_in_use(folder: Path) -> None:
    """Say, until this process ends, that it runs trials on the venv in `folder`: a shared lock on the file beside
    it, which `remove` (from this project or another sharing `paths.environments`) finds held and then refuses."""
    if folder in _HELD:
        return
    handle = open(folder.with_name(folder.name + IN_USE_SUFFIX), "a")  # noqa: SIM115 (held for the process's life)
    fcntl.flock(handle, fcntl.LOCK_SH)
    _HELD[folder] = handle


@dataclass(frozen=True)
class Built:
    """An environment's venv on disk: its folder, what its marker says it holds, its size, whether it is still in use
    (params.yaml's environments map to it, same name, resolved pins and Python, or the last run ran on it)."""

    folder: Path
    name: str
    pins: dict[str, str]
    python: str
    disk_bytes: int  # the blocks its files take, each file once
    shared_bytes: int  # of those, files hard-linked elsewhere too (uv's wheel cache): not freed by removing it
    wanted: bool


def disk_use(folder: Path) -> tuple[int, int]:
    """The bytes a folder's files take on disk, each inode once, and those of them also linked from elsewhere."""
    seen, total, shared = set(), 0, 0
    for path in folder.rglob("*"):
        try:
            stat = path.lstat()
        except OSError:
            continue
        if not path.is_file() or path.is_symlink() or (stat.st_dev, stat.st_ino) in seen:
            continue
        seen.add((stat.st_dev, stat.st_ino))
        total += stat.st_blocks * 512
        shared += stat.st_blocks * 512 if stat.st_nlink > 1 else 0
    return total, shared


def wanted_folders(environments: Mapping[str, Environment], root: Path, cache_root: Path, results: Path) -> set[Path]:
    """The venvs under `cache_root` still in use by the project at `root`: those params.yaml's `environments` map to
    (each with pins its own; `current`, and every environment of settings alone, the project's pins) and those the
    last invocation ran on (its runs file `results`: a series or comparison of releases named on the command line,
    whose names params.yaml does not hold)."""
    project = project_pins(root)
    folders = {folder_of(CURRENT, resolve(project, {}), cache_root)}
    for name, entry in environments.items():
        if entry.pins:
            try:
                folders.add(folder_of(name, resolve(project, entry.pins), cache_root, entry.python))
            except BuildError:
                continue  # its Python is not on this machine: nothing of it can be built here
    return folders | last_run_folders(results, cache_root)


def last_run_folders(results: Path, cache_root: Path) -> set[Path]:
    """The venvs the runs in `results` (the last invocation's runs.jsonl) ran on: `{name}-{key}` under `cache_root`."""
    folders = set()
    for line in results.read_text().splitlines() if results.is_file() else []:
        try:
            run = json.loads(line)
        except ValueError:
            continue  # a line cut short: the rest still says what ran
        name, key = run.get("environment_name"), run.get("environment_key")
        if isinstance(name, str) and isinstance(key, str) and name and key:
            folders.add((cache_root / f"{name}-{key}").resolve())
    return folders


def built_environments(cache_root: Path, wanted: set[Path]) -> list[Built]:
    """Every environment built under `cache_root` (a folder with the marker a finished build writes), largest first."""
    found = []
    for marker in sorted(cache_root.glob(f"*/{READY_MARKER}")) if cache_root.is_dir() else []:
        try:
            about = json.loads(marker.read_text())
        except (OSError, ValueError):
            about = {}
        folder = marker.parent.resolve()
        total, shared = disk_use(folder)
        found.append(
            Built(
                folder,
                str(about.get("name", folder.name)),
                dict(about.get("pins") or {}),
                str(about.get("python", "")),
                total,
                shared,
                folder in wanted,
            )
        )
    return sorted(found, key=lambda built: -built.disk_bytes)


def listing(built: list[Built]) -> str:
    """`--list`: each built environment, its size, and whether params.yaml or the last run still uses it."""
    if not built:
        return "no environment built yet (each is built on first use)\n"
    lines = [
        f"{'environment':<24}{'torch':<16}{'transformers':<14}{'Python':<9}{'on disk':>9}{'shared':>9}  "
        "in use (params.yaml or the last run)"
    ]
    for entry in built:
        lines.append(
            f"{entry.name:<24}{entry.pins.get('torch', ''):<16}{entry.pins.get('transformers', ''):<14}"
            f"{entry.python:<9}"
            f"{entry.disk_bytes / 2**30:>7.1f} G{entry.shared_bytes / 2**30:>7.1f} G  "
            f"{'yes' if entry.wanted else 'no: ' + entry.folder.name}"
        )
    total = sum(entry.disk_bytes - entry.shared_bytes for entry in built)
    unused = sum(entry.disk_bytes - entry.shared_bytes for entry in built if not entry.wanted)
    lines.append(
        f"{total / 2**30:.1f} G of their own (the rest shared with uv's wheel cache); "
        f"{unused / 2**30:.1f} G in ones neither params.yaml nor the last run uses "
        "(`--remove-unused`)"
    )
    return "\n".join(lines) + "\n"


def remove(built: list[Built], names: list[str], unused: bool, lock: Path) -> list[Built]:
    """Remove the named environments' venvs (or, with `unused`, every one not in use: wanted_folders), while no
    pipeline of this project runs (it holds `lock`, as `make run` and `make compare` do); the removed returned."""
    chosen = [entry for entry in built if (unused and not entry.wanted) or entry.name in names]
    missing = sorted(set(names) - {entry.name for entry in built})
    if missing:
        raise BuildError(f"no built environment {missing}; built here: {sorted({e.name for e in built}) or 'none'}")
    if not lock.parent.parent.is_dir():  # not a DVC project: no pipeline of it can be running
        lock = Path(os.devnull)
    else:
        lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BuildError(
                f"a make run, compare or gpu runs in this project (it holds {lock}): nothing removed, "
                "since it may be using them"
            ) from None
        with contextlib.ExitStack() as users:
            busy = []
            for entry in chosen:
                user = users.enter_context(open(entry.folder.with_name(entry.folder.name + IN_USE_SUFFIX), "a"))
                try:
                    fcntl.flock(user, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    busy.append(entry.name)
            if busy:  # a benchmark runs on it, maybe another project's sharing this folder of environments
                raise BuildError(
                    f"environment(s) {busy} in use by a running benchmark (of this project or another whose "
                    f"paths.environments is {chosen[0].folder.parent}): nothing removed; remove them once it has ended"
                )
            for entry in chosen:
                shutil.rmtree(entry.folder)
                for suffix in (".lock", IN_USE_SUFFIX):
                    entry.folder.with_name(entry.folder.name + suffix).unlink(missing_ok=True)
    return chosen


PIPELINE_LOCK = ".dvc/tmp/pipeline.lock"  # what the Makefile's pipelines hold (ONE_PIPELINE)


def main() -> None:
    """Build (or find) the named environments and print each one's interpreter; with --device, also check that each
    one's torch can run there (`make gpu` asks this before any stage runs); with --list, what is built and its size;
    with --remove or --remove-unused, remove venvs."""
    import argparse

    from compilebench.config import stage_config

    parser = argparse.ArgumentParser(description="Build the named environments (all of params.yaml's by default).")
    parser.add_argument("names", nargs="*", metavar="NAME")
    parser.add_argument("--device", help="also check that each one's torch can run on this device, e.g. cuda")
    parser.add_argument("--list", action="store_true", help="each built environment, its size, whether still used")
    parser.add_argument("--remove", nargs="+", metavar="NAME", default=[], help="remove these environments' venvs")
    parser.add_argument(
        "--remove-unused", action="store_true", help="remove the venvs neither params.yaml nor the last run uses"
    )
    args = parser.parse_args()
    config = stage_config()
    try:
        if args.list or args.remove or args.remove_unused:
            cache_root = Path(config.paths.environments)
            wanted = wanted_folders(config.environments, Path.cwd(), cache_root, Path(config.paths.results))
            built = built_environments(cache_root, wanted)
            if args.remove or args.remove_unused:
                gone = remove(built, args.remove, args.remove_unused, Path(PIPELINE_LOCK))
                freed = sum(entry.disk_bytes - entry.shared_bytes for entry in gone)
                names = [entry.folder.name for entry in gone]
                print(f"removed {len(gone)} environment(s) {names}: {freed / 2**30:.1f} G freed")
                built = [entry for entry in built if entry not in gone]
            sys.stdout.write(listing(built))
            return
        names = args.names or list(config.environments)
        if set(names) - set(config.environments):  # short forms (torch-X.Y.Z) resolve as a series, as in `compare`
            config = stage_config(overrides=[f"compare=[{','.join(names)}]"])
        unknown = sorted(set(names) - set(config.environments))
        if unknown:
            raise BuildError(f"unknown environments {unknown}; params.yaml defines {sorted(config.environments)}")
        root = Path.cwd()
        project = project_pins(root)
        for name in names:
            pins, settings = config.environments[name].pins, config.environments[name].settings.given()
            python = config.environments[name].python
            stack = (
                current(root)
                if not pins
                else build(name, resolve(project, pins), Path(config.paths.environments), python)
            )
            if args.device:
                check_device(stack, name, args.device)
            run_as = f"; settings {settings}" if settings else ""  # an environment of settings runs current's
            pins = ", ".join(f"{k}=={v}" for k, v in stack.pins.items())
            print(f"{name}: {stack.python} ({pins}{run_as}; Python {python or platform.python_version()})")
    except BuildError as error:
        LOGGER.error("%s", error)
        sys.exit(2)


if __name__ == "__main__":
    main()
