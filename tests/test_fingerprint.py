"""Where a result was measured: the orchestrating machine's record (no torch) agrees with a trial's."""

import json
import os
import subprocess
import sys

import pytest

from compilebench.harness import fingerprint

NO_TORCH = """
import json, sys
from compilebench.harness import fingerprint
print(json.dumps(fingerprint.host()))
assert "torch" not in sys.modules and "transformers" not in sys.modules, "host() imported torch"
"""


def test_the_host_record_is_a_trials_without_torch():
    """The benchmark stage records its machine without torch's 2 s import; a trial on the same machine, which has
    imported torch, records the same hardware and so the same fingerprint."""
    done = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    host = json.loads(done.stdout)
    trial = fingerprint.collect("cpu")
    assert {key: trial[key] for key in host} == host
    assert trial["torch_version"] and trial["transformers_version"]  # what only a trial records


def test_the_fingerprint_tells_hardware_apart_and_ignores_names():
    record = fingerprint.host()
    assert fingerprint.fingerprint({**record, "hostname": "another-name"}) == record["machine_fingerprint"]
    assert fingerprint.fingerprint({**record, "cpu_count": "999"}) != record["machine_fingerprint"]
    assert fingerprint.fingerprint({**record, "gpu_name": "NVIDIA H100"}) != record["machine_fingerprint"]


MALLOC = """
from compilebench.harness import fingerprint
print(fingerprint.malloc_of_process())
"""


def test_a_process_records_whose_malloc_it_runs_on():
    """`malloc` reads the process's own memory map: the C library's unless a malloc library was preloaded."""
    from compilebench.harness import trial_process

    alone = subprocess.run([sys.executable, "-c", MALLOC], capture_output=True, text=True, timeout=120)
    assert alone.stdout.strip() == "libc", alone.stderr[-2000:]
    for name in ("jemalloc", "tcmalloc"):
        try:
            library = trial_process.malloc_to_preload(name)
        except trial_process.MallocMissing as missing:  # this machine lacks it: the error says what to install
            assert "apt install" in str(missing) and f"settings.malloc {name}" in str(missing)
            continue
        env = {**os.environ, "LD_PRELOAD": library}
        preloaded = subprocess.run([sys.executable, "-c", MALLOC], capture_output=True, text=True, timeout=120, env=env)
        assert preloaded.stdout.strip() == name, preloaded.stderr[-2000:]


def test_an_unknown_malloc_is_refused_by_name():
    from compilebench.harness import trial_process

    assert trial_process.malloc_to_preload("libc") is None
    with pytest.raises(trial_process.MallocMissing, match="libc or one of"):
        trial_process.malloc_to_preload("mimalloc")


def test_the_variables_that_steer_openmp_and_mkl_threads_are_recorded_and_nothing_else():
    """How torch's thread pools wait, spin and bind changes latency; each process records the variables it saw,
    sorted, its thread count aside (recorded per process), and no other variable."""
    environ = {
        "OMP_WAIT_POLICY": "PASSIVE",
        "KMP_BLOCKTIME": "1",
        "OMP_NUM_THREADS": "2",
        "GOMP_SPINCOUNT": "0",
        "MKL_NUM_THREADS": "1",
        "HOME": "/root",
        "COMP_WORDBREAKS": ":",
    }
    assert fingerprint.threading_variables(environ) == (
        "GOMP_SPINCOUNT=0 KMP_BLOCKTIME=1 MKL_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE"
    )
    assert fingerprint.threading_variables({"OMP_NUM_THREADS": "2"}) == ""
    # the tests' processes sleep instead of spinning (conftest.py): the host record says so
    assert f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}" in fingerprint.host()["threading_variables"].split()
