"""Where the MLflow UI shows compilebench's runs, and the UI itself (make ui).

    python -m compilebench.tracking --ui-url http://127.0.0.1:5000    # prints the runs table's address
    python -m compilebench.tracking --ui-url http://127.0.0.1:5000 --serve sqlite:///mlruns/mlflow.db

With --serve it starts MLflow's UI on that store, its own output into `mlruns/ui.log` (MLflow prints an address of
its own, its Home in GenAI mode: one address is printed here, the runs table's), and prints the address once the UI
answers; Ctrl-C ends the UI it started.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from compilebench.tracking.store import LOGGER, StoreError, ui_url


def port_taken(base: str) -> bool:
    """Whether another program already listens where the UI at `base` would (a bind fails there, as the UI's
    would; SO_REUSEADDR as a server sets it, so a port only in TIME_WAIT counts as free)."""
    address = urllib.parse.urlsplit(base)
    with socket.socket(socket.AF_INET6 if ":" in (address.hostname or "") else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address.hostname or "127.0.0.1", address.port or 80))
        except OSError:
            return True
    return False


def port_problem(base: str) -> str | None:
    """Why `base` names no port a UI can serve on (None: it does): a whole number from 1 to 65535."""
    try:
        port = urllib.parse.urlsplit(base).port
    except ValueError:
        port = None
    if port is None or not 1 <= port <= 65535:
        given = base.rsplit(":", 1)[-1] if base.count(":") > 1 else "none"
        return f"the UI's port must be a whole number from 1 to 65535 (make ui PORT=5001), got {given!r} in {base}"
    return None


UI_LOG = Path("mlruns/ui.log")
UI_START_S = 180.0  # the most MLflow's UI may take to answer (its workers import MLflow: ~10 s on two cores)


def start_ui(store: str, base: str, log: Path = UI_LOG) -> subprocess.Popen:
    """MLflow's UI on `store` at `base`, in a process group of its own, its output into `log`; returned once it
    answers. SystemExit(2) naming the log where it ends or does not answer first."""
    address = urllib.parse.urlsplit(base)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        host, port = address.hostname or "127.0.0.1", str(address.port)
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", store, "--host", host, "--port", port],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
    deadline = time.monotonic() + UI_START_S
    while time.monotonic() < deadline and server.poll() is None:
        try:
            urllib.request.urlopen(f"{base.rstrip('/')}/health", timeout=2)
            return server
        except OSError:
            time.sleep(0.5)
    stop_ui(server)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-5:])
    LOGGER.error("MLflow's UI did not start at %s (its log, %s, ends):\n%s", base, log, tail)
    raise SystemExit(2)


def stop_ui(server: subprocess.Popen) -> None:
    """End the UI started by start_ui: its process group (the server and its workers), by its PID."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def main() -> None:
    import argparse

    from compilebench.config import stage_config

    parser = argparse.ArgumentParser(description="Print where the MLflow UI shows compilebench's runs table.")
    parser.add_argument("--ui-url", required=True, metavar="BASE", help="the UI's address, e.g. http://127.0.0.1:5000")
    parser.add_argument("--serve", metavar="STORE", help="start MLflow's UI on this store first (make ui)")
    args = parser.parse_args()
    problem = port_problem(args.ui_url)
    if problem:
        parser.error(problem)
    config = stage_config()
    try:
        url = ui_url(config.paths.tracking_uri, args.ui_url)
    except StoreError as error:
        LOGGER.error("%s", error)
        raise SystemExit(2) from None
    if port_taken(args.ui_url):
        port = urllib.parse.urlsplit(args.ui_url).port
        LOGGER.error(
            "%s is taken: another program listens there, so the UI cannot start; pick a free port, e.g. "
            "`make ui PORT=%d`",
            args.ui_url,
            (port or 5000) + 1,
        )
        raise SystemExit(2)
    if not args.serve:
        print(f"compilebench runs: {url}")
        return
    server = start_ui(args.serve, args.ui_url)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # ended from outside: the UI goes with it (finally)
    try:
        print(f"compilebench runs: {url}", flush=True)
        print(f"(MLflow's UI, its log in {UI_LOG}; Ctrl-C ends it)", file=sys.stderr, flush=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_ui(server)


if __name__ == "__main__":
    main()
