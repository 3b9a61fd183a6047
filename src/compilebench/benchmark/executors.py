"""Where the benchmark's processes run: one at a time on this machine, on this machine's GPUs as slots, or on the
slots of a Ray cluster (`runner.executor`: local | gpus | ray).

What is dispatched is a unit: every pending trial of one (model, batch size), across environments and blocks, in
the plan's order, on one slot. So the balanced order, the cold compile's cache becoming the warm one, and A and B of
every block stay on one GPU of one machine, and blocks added later may land on another slot (the analysis pairs
within blocks, so a slot's difference falls on both sides of each). A slot runs one unit at a time; its trials get
its GPU (`CUDA_VISIBLE_DEVICES`), threads (`OMP_NUM_THREADS`, inductor's compile threads, torch's through the cores
they may use) and, where slots share a machine, its own cores, and record the slot they ran on. Results come back to
the driver, which alone journals and logs them, in the order units finish. A Ray task that dies (a node or worker
lost) is retried whole by Ray, and its results counted once: the driver receives a unit's results only when it ends.

    runner: {executor: ray, ray_address: auto}      # on a Ray cluster's head node: every GPU of the cluster
    runner: {executor: gpus}                        # every GPU of this machine, no cluster, no new dependency
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compilebench.harness import launcher
from compilebench.harness.names import SLOT_ENV, thread_environment, usable_cores
from compilebench.records.formats import TrialResult, TrialSpec, units

LOGGER = logging.getLogger(__name__)
OnProcess = Callable[[list[TrialSpec], list[TrialResult], bool], None]
RAY_RETRIES = 2  # a unit whose task died (its worker or node lost) runs again, whole, at most this many times


class ExecutorError(RuntimeError):
    """`runner.executor` cannot run here (no GPU for `gpus`, Ray not installed): the message says what is allowed."""


def slot_environment(name: str, threads: int, cores: list[int] | None = None, gpu: str | None = None) -> dict:
    """A slot's variables for its trial processes (see the module docstring)."""
    slot = {SLOT_ENV: name, **thread_environment(threads, cores)}
    if gpu is not None:
        slot["CUDA_VISIBLE_DEVICES"] = gpu
    return slot


class Local:
    """One process at a time on this machine: the plan's order exactly."""

    def __init__(self, pythons: dict[str, str], workdir: Path, timeout_s: float):
        self.pythons, self.workdir, self.timeout_s = pythons, workdir, timeout_s

    def run(self, trials: list[TrialSpec], done: dict[str, TrialResult], on_process: OnProcess) -> None:
        launcher.run_trials(trials, self.pythons, self.workdir, self.timeout_s, done, on_process)

    def close(self) -> None:
        """Nothing to give back."""


class Slots:
    """This machine's GPUs (or, for tests of the dispatch, its cores) as slots: a thread per slot takes the next unit
    and runs its processes; the driver's `on_process` is called under a lock, one process at a time."""

    def __init__(self, pythons: dict[str, str], workdir: Path, timeout_s: float, slots: list[dict[str, str]]):
        self.pythons, self.workdir, self.timeout_s, self.slots = pythons, workdir, timeout_s, slots

    def run(self, trials: list[TrialSpec], done: dict[str, TrialResult], on_process: OnProcess) -> None:
        pending: queue.Queue[list[TrialSpec]] = queue.Queue()
        for unit in units(trials):
            pending.put(unit)
        lock = threading.Lock()
        failures: list[BaseException] = []

        def one_at_a_time(specs: list[TrialSpec], ended: list[TrialResult], resumed: bool) -> None:
            with lock:
                on_process(specs, ended, resumed)

        def work(slot: dict[str, str]) -> None:
            while not failures:
                try:
                    unit = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    launcher.run_trials(unit, self.pythons, self.workdir, self.timeout_s, done, one_at_a_time, slot)
                except BaseException as error:  # raised again in the driver's thread below
                    failures.append(error)

        threads = [threading.Thread(target=work, args=(slot,), daemon=True) for slot in self.slots]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]

    def close(self) -> None:
        """Nothing to give back: the slots' threads ended with `run`."""


def local_slots(gpus: list[int], cpus_per_slot: int, count: int | None = None) -> list[dict[str, str]]:
    """This machine's slots: a GPU each (`gpus`, or `count` without GPUs), its cores split evenly among them."""
    cores = usable_cores()
    names = [str(gpu) for gpu in gpus] or [None] * (count or 1)
    share = cpus_per_slot or max(len(cores) // len(names), 1)
    host = socket.gethostname()
    return [
        slot_environment(f"{host}:{name or f'cpu{i}'}", share, cores[i * share : (i + 1) * share] or None, name)
        for i, name in enumerate(names)
    ]


def run_unit(
    unit: list[dict[str, Any]],
    pythons: dict[str, str],
    workdir: str,
    timeout_s: float,
    done: dict[str, dict],
    threads: int,
) -> list[tuple[list[dict], list[dict], bool]]:
    """On a Ray worker: one unit's processes, on the GPU Ray gave this task (its CUDA_VISIBLE_DEVICES, which the
    trial processes inherit); returns (specs, results, resumed) per process, as plain data."""
    specs = [TrialSpec.from_dict(raw) for raw in unit]
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    slot = slot_environment(f"{socket.gethostname()}:{gpu or 'cpu'}", threads, gpu=gpu)
    collected: list[tuple[list[dict], list[dict], bool]] = []

    def keep(run_specs: list[TrialSpec], ended: list[TrialResult], resumed: bool) -> None:
        collected.append(([s.to_dict() for s in run_specs], [r.to_dict() for r in ended], resumed))

    results = {trial_id: TrialResult.from_dict(raw) for trial_id, raw in done.items()}
    launcher.run_trials(specs, pythons, Path(workdir), timeout_s, results, keep, slot)
    return collected


RAY_CONNECT_S = 5.0  # how long a cluster's address may take to answer before the run is refused
RAY_PORT = 6379  # Ray's head port, where an address names none


def unreachable(address: str) -> str | None:
    """Why a Ray cluster at `address` (`HOST:PORT`, `ray://HOST:PORT`; `auto` is Ray's own search of this machine)
    cannot be joined, found within RAY_CONNECT_S by a connection to its port; None where it answers. Ray's own
    join retries for minutes when nothing listens."""
    if address in ("auto", "") or ("://" in address and not address.startswith("ray://")):
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host, port = (host, port) if host and port.isdigit() else (address.removeprefix("ray://"), str(RAY_PORT))
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_S).close()
    except OSError as error:
        return (
            f"`runner.ray_address` {address!r}: nothing answers at {host}:{port} within {RAY_CONNECT_S:g} s "
            f"({error.strerror or error}); start the cluster there (`ray start --head`) or use `executor: local`"
        )
    return None


class Ray:
    """The slots of a Ray cluster: a task per unit, a GPU each (`num_gpus=1`: Ray narrows CUDA_VISIBLE_DEVICES to
    it); a CPU benchmark's task takes a whole node's CPUs, so two never share a machine. Ray must be installed
    (`pip install -e '.[ray]'`); the cluster's nodes need the project's folder at the same path (a shared
    filesystem, or the same image) for its checkpoints and built environments."""

    def __init__(self, pythons: dict[str, str], workdir: Path, timeout_s: float, runner: Any, device: str):
        try:
            import ray
        except ImportError:
            raise ExecutorError(
                "`runner.executor: ray` needs Ray: pip install -e '.[ray]' (or use `executor: local` or `gpus`)"
            ) from None
        self.ray, self.pythons, self.workdir, self.timeout_s = ray, pythons, workdir, timeout_s
        if runner.ray_address == "local":  # a cluster of this machine alone, for this run (tests, one box)
            ray.init(
                num_cpus=os.cpu_count(),
                num_gpus=len(runner.gpus),
                include_dashboard=False,
                _temp_dir=os.environ.get("COMPILEBENCH_RAY_TMP"),
                log_to_driver=False,
            )
        else:
            address = os.environ.get("RAY_ADDRESS") or runner.ray_address
            problem = unreachable(address)
            if problem:
                raise ExecutorError(problem)
            try:
                ray.init(address=address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise ExecutorError(
                    f"`runner.ray_address` {address!r}: no Ray cluster joined ({error}); start one "
                    "(`ray start --head`) or use `executor: local`"
                ) from None
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        node_cpus = min(int(node["Resources"].get("CPU", 1)) for node in nodes)
        gpu = device.startswith("cuda") or (runner.ray_address == "local" and bool(runner.gpus))
        self.options = {"num_gpus": 1, "num_cpus": runner.cpus_per_slot or 1} if gpu else {"num_cpus": node_cpus}
        self.threads = runner.cpus_per_slot or (max(node_cpus // max(len(runner.gpus), 1), 1) if gpu else node_cpus)
        self.task = ray.remote(run_unit).options(max_retries=RAY_RETRIES, **self.options)
        LOGGER.info(
            "ray: %d node(s), a task per unit with %s, %d thread(s) per trial", len(nodes), self.options, self.threads
        )

    def run(self, trials: list[TrialSpec], done: dict[str, TrialResult], on_process: OnProcess) -> None:
        by_id = {spec.trial_id: spec for spec in trials}
        known = {trial_id: result.to_dict() for trial_id, result in done.items() if trial_id in by_id}
        refs = {}
        for unit in units(trials):
            payload = [spec.to_dict() for spec in unit]
            mine = {spec.trial_id: known[spec.trial_id] for spec in unit if spec.trial_id in known}
            refs[self.task.remote(payload, self.pythons, str(self.workdir), self.timeout_s, mine, self.threads)] = unit
        while refs:
            [ready], _ = self.ray.wait(list(refs), num_returns=1)
            unit = refs.pop(ready)
            try:
                processes = self.ray.get(ready)
            except self.ray.exceptions.RayError as error:  # the task failed after its retries: every trial says so
                why = f"its Ray task failed after {RAY_RETRIES} retries: {str(error).splitlines()[0][:300]}"
                processes = [
                    ([s.to_dict()], [TrialResult.failed(s.trial_id, "crashed", why).to_dict()], False) for s in unit
                ]
            for specs, ended, resumed in processes:
                on_process(
                    [by_id[raw["trial_id"]] for raw in specs], [TrialResult.from_dict(r) for r in ended], resumed
                )

    def close(self) -> None:
        self.ray.shutdown()


def executor(runner: Any, device: str, pythons: dict[str, str], workdir: Path) -> Local | Slots | Ray:
    """The executor `runner.executor` names."""
    if runner.executor == "ray":
        return Ray(pythons, workdir, runner.trial_timeout_s, runner, device)
    if runner.executor == "gpus":
        gpus = runner.gpus or list(range(_cuda_devices()))
        if not gpus:
            raise ExecutorError(
                "`runner.executor: gpus`: this machine has no GPU torch can see, and `runner.gpus` "
                "names none (use `executor: local`, or name the GPU indices in `runner.gpus`)"
            )
        return Slots(pythons, workdir, runner.trial_timeout_s, local_slots(gpus, runner.cpus_per_slot))
    return Local(pythons, workdir, runner.trial_timeout_s)


def _cuda_devices() -> int:
    """How many GPUs torch sees (0 without CUDA), asked in a fresh interpreter: the stage does not import torch."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True, text=True
    )
    return int(done.stdout.strip() or 0) if done.returncode == 0 else 0
