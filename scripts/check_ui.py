"""What does `make ui` show a user? The address it prints, opened in a real (headless) browser.

    apt-get install -y chromium && pip install playwright   # Debian's Chromium and Playwright, once
    python scripts/check_ui.py                               # after a comparison; screenshots and page text: data/ui/

Starts `mlflow ui` on the project's store (127.0.0.1, a free port) and, in Chromium driven by Playwright, opens the
address `make ui` prints: the runs table of the newest invocation, its B runs alone where it is a comparison. There,
on the first screen (the window, not the page below it) and within 10 s of the check's own time, each B run's name
must show its model, variant and headline word. Then the parent's page (its description: the answer per model) and a
candidate's page (its tags). Each step saves a screenshot and the page's text. Exit 1, naming the step, where the page
does not show it. Ends only the server it started.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from compilebench import tracking
from compilebench.analysis import keys
from compilebench.config import load_config

CHROMIUM = "/usr/bin/chromium"
VERDICT_TAG = keys.compared_key("first", "verdict")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def newest_invocation(configured_uri: str) -> tuple[str, object, list]:
    """The newest invocation's parent run and its measurement runs, as the store holds them."""
    mlflow_client = tracking.client(configured_uri)
    experiment = tracking.experiment_id(mlflow_client, tracking.EXPERIMENT)
    parents = mlflow_client.search_runs(
        [experiment], "tags.role = 'pipeline'", order_by=["attributes.start_time DESC"], max_results=1
    )
    if not parents:
        raise SystemExit("the store holds no compilebench invocation: run `make run` or `make compare B=...` first")
    parent = parents[0]
    invocation = parent.data.tags[tracking.INVOCATION_TAG]
    query = f"tags.`{tracking.INVOCATION_TAG}` = '{invocation}' and tags.role = 'measurement'"
    return invocation, parent, mlflow_client.search_runs([experiment], query, max_results=1000)


def shot(page, out: Path, name: str, full_page: bool = True) -> str:
    """A screenshot (of the window alone where not `full_page`) and the page's text, saved; the text returned."""
    page.screenshot(path=str(out / f"{name}.png"), full_page=full_page)
    text = page.inner_text("body")
    (out / f"{name}.txt").write_text(text)
    return text


FIRST_SCREEN_S = 10.0  # the most the check's own time may take to find the answer on the first screen


def follow_readme(page, base: str, runs_url: str, parent, children: list, out: Path) -> list[str]:
    """The printed address, opened: what the first screen and the pages behind it did not show."""
    problems = []
    candidates = [run for run in children if VERDICT_TAG in run.data.tags]
    shown = candidates or children
    started = time.perf_counter()
    page.goto(runs_url)
    close = page.get_by_role("button", name="Close")
    first = page.get_by_text(shown[0].info.run_name).first
    first.wait_for(timeout=90_000)
    if close.count():  # MLflow's assistant panel, where it opens by default, takes a third of the window
        close.first.click()
    height = page.viewport_size["height"]
    hidden = []
    for run in shown:
        box = page.get_by_text(run.info.run_name, exact=True).first.bounding_box()
        if box is None or box["y"] + box["height"] > height:
            hidden.append(run.info.run_name)
    took_s = time.perf_counter() - started
    text = shot(page, out, "runs", full_page=False)
    if hidden:
        problems.append(f"first screen: {len(hidden)} of {len(shown)} runs not in view ({hidden[:3]})")
    if candidates and any(run.data.tags[VERDICT_TAG].split()[0] not in run.info.run_name for run in candidates):
        problems.append("first screen: a B run's name does not carry its headline word")
    if took_s > FIRST_SCREEN_S:
        problems.append(
            f"first screen: the answer took {took_s:.1f} s of the check's own time (at most {FIRST_SCREEN_S:.0f} s)"
        )
    others = [run.info.run_name for run in children if run not in shown and run.info.run_name in text]
    if candidates and others:
        problems.append(f"first screen: A runs listed beside the B runs ({others[:2]})")
    print(f"first screen: {len(shown) - len(hidden)} of {len(shown)} runs in view in {took_s:.1f} s")
    page.goto(f"{base}/#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}")
    page.get_by_text("The answer, per model").first.wait_for(timeout=60_000)
    shot(page, out, "parent")
    if candidates:
        run = candidates[0]
        page.goto(f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}")
        page.get_by_text(run.info.run_name).first.wait_for(timeout=60_000)
        page.wait_for_timeout(2000)
        text = shot(page, out, "candidate")
        if VERDICT_TAG not in text or run.data.tags[VERDICT_TAG] not in text:
            problems.append(f"candidate {run.info.run_name}: its page does not show vs_first/verdict")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("data/ui"))
    args = parser.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit("Playwright is not installed: pip install playwright") from None
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
    config = load_config()
    invocation, parent, children = newest_invocation(config.paths.tracking_uri)
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "ui",
            "--backend-store-uri",
            tracking.tracking_uri(config.paths.tracking_uri),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        runs_url = tracking.ui_url(config.paths.tracking_uri, base)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 900})  # a laptop's window
            try:
                problems = follow_readme(page, base, runs_url, parent, children, args.out)
            finally:
                browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the UI server and its workers: the group started here
        server.wait(timeout=60)
    print(f"{runs_url}: invocation {invocation}, {len(children)} runs; screenshots in {args.out}")
    if problems:
        raise SystemExit("the README's route does not hold:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
