"""What does `make ui` show a user? The MLflow UI on the project's store, opened in a real (headless) browser.

    apt-get install -y chromium          # Debian's Chromium, once
    python scripts/check_ui.py           # after a `make run`; screenshots and page text into data/ui/

Starts `mlflow ui` on the project's store (127.0.0.1, a free port), opens in headless Chromium, each in a fresh
profile: the address `make ui` prints (the compilebench runs table), the experiment's page as the experiment list
links it, and the home page; saves a screenshot and the rendered HTML of each. The address `make ui` prints must
show compilebench's runs table (its pipeline runs by name): exit 1 if not. Ends only the server it started.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from compilebench import tracking
from compilebench.config import load_config

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--virtual-time-budget=25000", "--window-size=1600,1000"]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("data/ui"))
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    config = load_config()
    uri = tracking.tracking_uri(config.paths.tracking_uri)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        runs_url = tracking.ui_url(config.paths.tracking_uri, base)
        mlflow_client = tracking.client(config.paths.tracking_uri)
        experiment = tracking.experiment_id(mlflow_client, tracking.EXPERIMENT)
        parents = mlflow_client.search_runs([experiment], filter_string="tags.role = 'pipeline'", max_results=5)
        names = [run.info.run_name for run in parents]  # what the runs table lists first (children fold under them)
        args.out.mkdir(parents=True, exist_ok=True)
        seen = {}
        pages = (("runs", runs_url), ("experiment", f"{base}/#/experiments/{experiment}"), ("home", base + "/"))
        for name, url in pages:
            profile = args.out / f"profile-{name}"
            shutil.rmtree(profile, ignore_errors=True)  # a fresh browser: nothing remembered from an earlier visit
            common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
            subprocess.run([*common, f"--screenshot={args.out / f'{name}.png'}", url], capture_output=True, timeout=120)
            dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
            (args.out / f"{name}.html").write_text(dom)
            seen[name] = [run_name for run_name in names if run_name and run_name in dom]
            shutil.rmtree(profile, ignore_errors=True)
            print(f"{name}: {url} -> {args.out / f'{name}.png'}; compilebench runs on the page: {len(seen[name])}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the UI server and its workers: the group started here
        server.wait(timeout=60)
    if not seen["experiment"]:
        print("note: the experiment page as the list links it opens on MLflow's GenAI overview in a fresh browser "
              "(MLflow 3.17 keeps its GenAI / Model training switch in the browser's local storage, whatever the "
              "experiment's kind); `make ui` prints the runs table's own address for that reason")  # fmt: skip
    if not seen["runs"]:
        raise SystemExit(f"the address `make ui` prints ({runs_url}) does not show compilebench's runs table")


if __name__ == "__main__":
    main()
