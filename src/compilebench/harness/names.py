"""The names a trial process meets, beside the records: the variables it is started with, the files a run keeps,
a model entry's folder and slug, a trial's file stem; and the cores and threads it gets. Standard library only,
like records.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

LAUNCHER_PID = "COMPILEBENCH_LAUNCHER_PID"  # set for a trial process: the process it must not outlive
DEPLOY_DIR_ENV = "COMPILEBENCH_DEPLOY_DIR"  # set for a trial process: its run's artifacts / package folder
CACHE_STARTUP_ENV = "COMPILEBENCH_CACHE_STARTUP"  # set for the cold process that first fills a warm cache
SLOT_ENV = "COMPILEBENCH_SLOT"  # set by an executor: the slot (machine, GPU) a trial runs on, recorded in its state
CPUS_ENV = "COMPILEBENCH_CPUS"  # set by an executor running slots side by side: the cores a trial pins itself to
ARTIFACTS_FILE = "cache-artifacts.bin"  # torch.compiler.save_cache_artifacts() of the run's cold process
AOTI_PACKAGE = "model.pt2"  # the run's AOTInductor package


LOCAL_PREFIXES = ("/", "./", "../", "~")  # how a suite names a local checkpoint folder (anything else is a Hub id)


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity; every core where the system cannot say)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def thread_environment(threads: int, cores: list[int] | None = None) -> dict[str, str]:
    """The variables that give a trial process `threads` threads (torch's OpenMP pool, inductor's compile workers)
    and, with `cores`, pin it to them (CPUS_ENV, read by trial.pin_to_slot): what an executor's slot and the
    launcher's --cpus set."""
    variables = {"OMP_NUM_THREADS": str(threads), "TORCHINDUCTOR_COMPILE_THREADS": str(threads)}
    if cores:
        variables[CPUS_ENV] = ",".join(str(core) for core in cores)
    return variables


def is_local(model_id: str) -> bool:
    """Whether a suite's model entry names a local checkpoint folder rather than a Hub id."""
    return model_id.startswith(LOCAL_PREFIXES)


def local_folder(model_id: str) -> Path:
    """The absolute folder a local model entry names (`~` expanded, relative to the project)."""
    return Path(model_id).expanduser().resolve()


SLUG_NAME_CHARS = 64  # of a local folder's name in its slug: trial files add ~100 characters to it, and 255 is the cap


def slug(model_id: str) -> str:
    """One path component for a model entry: `owner--name` for a Hub id; `local--<folder>--<hash of its path>`
    for a local folder, so that two folders of the same name do not meet (the name cut to SLUG_NAME_CHARS: the
    hash keeps it unique, and a file system takes 255 bytes a name)."""
    if is_local(model_id):
        folder = local_folder(model_id)
        name = folder.name[:SLUG_NAME_CHARS]
        return f"local--{name}--{hashlib.sha256(str(folder).encode()).hexdigest()[:8]}"
    return model_id.replace("/", "--")


def trial_stem(trial_id: str) -> str:
    """A trial id (environment/model/batch/variant/replicate) as one file name."""
    return trial_id.replace("/", "__")
