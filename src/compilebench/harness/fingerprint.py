"""What produced a result: the machine (a fingerprint richer than its hostname), the device, the library versions.

    python -m compilebench.harness.fingerprint [cpu|cuda]     # print what a trial on this machine would record

A trial process reads its own versions (each environment has its own torch and transformers) and the machine it
runs on. Many machines share a hostname (`vm`) and a marketing CPU name; the fingerprint hashes what tells them
apart: CPU vendor, family, model, stepping and microcode, its feature flags, core count, memory, and on a GPU its
name, memory, compute capability, driver, power limit and clocks. Standard library only, torch imported lazily.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compilebench.records.formats import MALLOC_LIBRARIES

HARDWARE_FIELDS = (
    "cpu_model",
    "cpu_microcode",
    "cpu_flags_sha",
    "cpu_count",
    "memory_gib",
    "gpu_name",
    "gpu_memory_mib",
    "gpu_capability",
    "gpu_driver",
    "gpu_power_limit_w",
    "gpu_max_sm_clock_mhz",
    "gpu_max_memory_clock_mhz",
)
# What a run carries of where its processes ran: the one list `runs`, `tracking` and the report use.
RUN_FIELDS = (
    "device",
    "device_name",
    "machine_fingerprint",
    "cpu_model",
    "memory_gib",
    "hostname",
    "torch_version",
    "transformers_version",
    "python_version",
    "cuda_version",
    "cudnn_version",
    "gpu_driver",
    "gpu_memory_mib",
    "gpu_power_limit_w",
    "gpu_max_sm_clock_mhz",
    "platform",
    "float32_matmul_precision",
    "matmul_allow_tf32",
    "cudnn_allow_tf32",
    "cudnn_benchmark",
    "transparent_hugepages",
    "thp_mem_alloc",
    "malloc",
    "threading_variables",
    "cpu_capability",
)
# The OpenMP runtimes' (GNU's, Intel's) and MKL's own variables: threading_variables
THREADING_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_")
# With the hardware fingerprint, what one run's processes must share: the software stack that ran them.
STACK_FIELDS = ("torch_version", "transformers_version", "python_version", "cuda_version", "cudnn_version")
NVIDIA_SMI_FIELDS = {  # nvidia-smi --query-gpu name -> our field
    "driver_version": "gpu_driver",
    "power.limit": "gpu_power_limit_w",
    "clocks.max.sm": "gpu_max_sm_clock_mhz",
    "clocks.max.memory": "gpu_max_memory_clock_mhz",
}


def cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo, plus a hash of its flags (empty where there is none)."""
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return {}
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            if fields:
                break  # the first processor is enough
            continue
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_model(info: dict[str, str] | None = None) -> str:
    """The CPU's name; where the kernel gives none, vendor, family, model and stepping."""
    info = cpuinfo() if info is None else info
    name = info.get("model name")
    identity = (
        f"family {info.get('cpu family', '?')} model {info.get('model', '?')} stepping {info.get('stepping', '?')}"
    )
    if name:
        return f"{name} ({identity})"
    if info:
        return f"{info.get('vendor_id', 'unknown vendor')} {identity}"
    return platform.processor() or platform.machine()


def memory_gib() -> str:
    """Total memory, GiB (rounded to 0.1)."""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.1f}"
    return "unknown"


def nvidia_smi(index: int) -> dict[str, str]:
    """Driver, power limit and max clocks of GPU `index` from nvidia-smi; empty where it is not there."""
    query = ",".join(NVIDIA_SMI_FIELDS)
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--id={index}", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [value.strip() for value in done.stdout.strip().split(",")]
    return dict(zip(NVIDIA_SMI_FIELDS.values(), values, strict=False))


def gpu_facts(device: str) -> dict[str, str]:
    """Name, memory, compute capability, CUDA runtime, cuDNN, driver, power limit and clocks of a CUDA device."""
    import torch

    index = torch.device(device).index or 0
    properties = torch.cuda.get_device_properties(index)
    return {
        "gpu_name": properties.name,
        "gpu_memory_mib": str(properties.total_memory // 2**20),
        "gpu_capability": f"{properties.major}.{properties.minor}",
        "cudnn_version": str(torch.backends.cudnn.version()),
        **nvidia_smi(index),
    }


def library_versions() -> dict[str, str]:
    """Versions of the libraries a trial runs on."""
    import torch
    import transformers

    return {
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
        "cuda_version": torch.version.cuda or "none",
    }


def numerics() -> dict[str, str]:
    """The float32 settings in effect: TF32 for matmuls and cuDNN, matmul precision, cuDNN autotuning; the vector
    instructions torch's CPU kernels run (`cpu_capability`)."""
    import torch

    return {
        "cpu_capability": cpu_capability(torch),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "matmul_allow_tf32": str(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": str(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": str(torch.backends.cudnn.benchmark),
    }


def cpu_capability(torch: Any) -> str:
    """The vector instructions torch's own CPU kernels run: AVX512, AVX2, DEFAULT (none), as torch names them (before
    torch.backends.cpu, 2.0: from its build summary, where `NO AVX` is DEFAULT)."""
    backends = getattr(torch.backends, "cpu", None)
    if backends is not None and hasattr(backends, "get_cpu_capability"):
        return backends.get_cpu_capability()
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            word = line.split(":", 1)[1].strip()
            return "DEFAULT" if word == "NO AVX" else word
    return "unknown"


def transparent_hugepages() -> str:
    """The kernel's transparent huge page mode (always | madvise | never; `unknown` where it does not say): with
    `madvise`, only memory asked for them gets them (torch's allocator does with THP_MEM_ALLOC_ENABLE=1)."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unknown"
    chosen = [word.strip("[]") for word in text.split() if word.startswith("[")]
    return chosen[0] if chosen else "unknown"


def malloc_of_process(maps: str = "/proc/self/maps") -> str:
    """Whose malloc this process runs on: `jemalloc` or `tcmalloc` when that library is mapped into it (preloaded),
    else `libc` (`unknown` where the map cannot be read)."""
    try:
        text = Path(maps).read_text()
    except OSError:
        return "unknown"
    names = {Path(line.split()[-1]).name for line in text.splitlines() if "/" in line}
    for malloc in MALLOC_LIBRARIES:  # libtcmalloc_minimal and libtcmalloc alike
        if any(name.startswith(f"lib{malloc}") for name in names):
            return malloc
    return "libc"


def threading_variables(environ: Mapping[str, str]) -> str:
    """The variables that steer the OpenMP and MKL runtimes' threads (how they wait, spin, bind), as sorted
    `NAME=value` words, since they change latency: `OMP_WAIT_POLICY=PASSIVE` slows a small model's calls (findings
    2026-12-05, OMP_WAIT_POLICY). OMP_NUM_THREADS aside (each process records its own); "" where none is set."""
    return " ".join(
        f"{name}={value}"
        for name, value in sorted(environ.items())
        if name.startswith(THREADING_PREFIXES) and name != "OMP_NUM_THREADS"
    )


def host() -> dict[str, str]:
    """The CPU machine this process runs on, with its fingerprint, without importing torch: what the benchmark stage
    records of the machine that orchestrates (its trials record their own, with `collect`)."""
    info = cpuinfo()
    fields: dict[str, str] = {
        "device": "cpu",
        "cpu_model": cpu_model(info),
        "cpu_microcode": info.get("microcode", "unknown"),
        "cpu_flags_sha": hashlib.sha256(" ".join(sorted(info.get("flags", "").split())).encode()).hexdigest()[:12],
        "cpu_count": str(os.cpu_count()),
        "cpu_affinity": str(len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else "unknown",
        "memory_gib": memory_gib(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "transparent_hugepages": transparent_hugepages(),
        "thp_mem_alloc": os.environ.get("THP_MEM_ALLOC_ENABLE", ""),  # torch's allocator on huge pages, if "1"
        "malloc": malloc_of_process(),
        "threading_variables": threading_variables(os.environ),
    }
    fields["device_name"] = fields["cpu_model"]
    fields["machine_fingerprint"] = fingerprint(fields)
    return fields


def collect(device: str) -> dict[str, str]:
    """Everything a trial records about where it ran, as flat strings, with the machine fingerprint."""
    fields = {**host(), "device": device, **library_versions(), **numerics()}
    if device.startswith("cuda"):
        fields.update(gpu_facts(device))
        fields["device_name"] = fields["gpu_name"]
    fields["machine_fingerprint"] = fingerprint(fields)
    return fields


def fingerprint(fields: dict[str, Any]) -> str:
    """A short hash of the hardware fields: equal on identical machines, different where hardware differs."""
    hardware = {key: str(fields.get(key, "")) for key in HARDWARE_FIELDS}
    return hashlib.sha256(json.dumps(hardware, sort_keys=True).encode()).hexdigest()[:12]


def machine_and_stack(fields: dict[str, Any]) -> tuple[str, ...]:
    """The machine (its hardware fingerprint) and the software stack a process ran on, from its record."""
    return tuple(str(fields.get(key, "")) for key in ("machine_fingerprint", *STACK_FIELDS))


def described(fields: dict[str, Any]) -> str:
    """A machine and stack in words: `NVIDIA H100 80GB HBM3 (machine 5ec15378526d), torch 2.11.0+cu130, ...`."""
    stack = ", ".join(f"{key.removesuffix('_version')} {fields[key]}" for key in STACK_FIELDS if fields.get(key))
    name = fields.get("device_name") or fields.get("cpu_model") or "unknown device"
    return f"{name} (machine {fields.get('machine_fingerprint') or 'unknown'}), {stack or 'no versions recorded'}"


def mixture(records: list[dict[str, Any]]) -> dict[tuple[str, ...], tuple[int, str]]:
    """Processes' records by machine and stack: how many ran on each, and each in words (the most first)."""
    counts = Counter(machine_and_stack(record) for record in records)
    words = {machine_and_stack(record): described(record) for record in records}
    return {key: (count, words[key]) for key, count in counts.most_common()}


def counted(found: dict[tuple[str, ...], tuple[int, str]]) -> str:
    """A mixture in words: `3 processes on ...; 1 process on ...`."""
    return "; ".join(f"{count} process{'' if count == 1 else 'es'} on {words}" for count, words in found.values())


FREEZE_CODE = (
    "import json, re\nfrom importlib import metadata\nfound = {}\n"
    "for d in metadata.distributions():\n"
    "    found.setdefault(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(), f\"{d.metadata['Name']}=={d.version}\")\n"
    "print(json.dumps(sorted(found.values())))"
)  # `pip freeze` without pip (a GPU image may have none); of a package found twice (a venv over the system's site
# packages, e.g. a second stack from a carried wheel), the one imports find first, in sys.path order


def freeze(python: str) -> tuple[str, ...]:
    """The exact package list of an interpreter's environment (name==version, sorted)."""
    done = subprocess.run([python, "-c", FREEZE_CODE], capture_output=True, text=True, check=True)
    return tuple(json.loads(done.stdout))


def git_commit(cwd: str | Path = ".") -> str:
    """HEAD's commit, with `-dirty` when tracked files other than dvc.lock changed; `unknown` outside git.

    dvc.lock is left out: `dvc repro` rewrites it while the pipeline runs, so a clean checkout would otherwise
    record itself as dirty.
    """
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)dvc.lock"],
            cwd=cwd,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    print(json.dumps(collect(device), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
