"""What does `make ui` show a user? The README's route through the MLflow UI, clicked in a real (headless) browser.

    apt-get install -y chromium && pip install playwright   # Debian's Chromium and Playwright, once
    python scripts/check_ui.py                               # after a comparison; screenshots and page text: data/ui/

Starts `mlflow ui` on the project's store (127.0.0.1, a free port) and, in Chromium driven by Playwright, follows the
README: the address `make ui` prints (the runs table); the search the newest invocation's description gives, typed
into the search box; its parent opened to list the runs; the columns `vs_first/verdict` and `vs_first/peak_memory`
chosen in *Columns*; then the parent's page (its description: what changed) and a candidate's page (its tags). Each
step saves a screenshot and the page's text. Exit 1, naming the step, where the page does not show what the README
says it does: the invocation's runs by name, each candidate's verdict words, the description's "What changed".
Ends only the server it started.
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
COLUMNS = (VERDICT_TAG, keys.compared_key("first", "peak_memory"))  # the tags the README names, chosen in Columns


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def newest_invocation(configured_uri: str) -> tuple[str, object, list]:
    """The newest invocation's parent run and its measurement runs, as the store holds them."""
    mlflow_client = tracking.client(configured_uri)
    experiment = tracking.experiment_id(mlflow_client, tracking.EXPERIMENT)
    parents = mlflow_client.search_runs([experiment], "tags.role = 'pipeline'", order_by=["attributes.start_time DESC"],
                                        max_results=1)  # fmt: skip
    if not parents:
        raise SystemExit("the store holds no compilebench invocation: run `make run` or `make compare B=...` first")
    parent = parents[0]
    invocation = parent.data.tags[tracking.INVOCATION_TAG]
    query = f"tags.`{tracking.INVOCATION_TAG}` = '{invocation}' and tags.role = 'measurement'"
    return invocation, parent, mlflow_client.search_runs([experiment], query, max_results=1000)


def shot(page, out: Path, name: str) -> str:
    """A screenshot and the page's text, saved; the text returned."""
    page.screenshot(path=str(out / f"{name}.png"), full_page=True)
    text = page.inner_text("body")
    (out / f"{name}.txt").write_text(text)
    return text


def follow_readme(page, base: str, runs_url: str, invocation: str, parent, children: list, out: Path) -> list[str]:
    """The README's route, click by click; what did not show as it says."""
    problems = []
    page.goto(runs_url)
    search = page.get_by_test_id("search-box")
    search.wait_for(timeout=90_000)
    close = page.get_by_role("button", name="Close")
    if close.count():  # MLflow's assistant panel, open by default, takes a third of the page
        close.first.click()
    search.fill(f"tags.`{tracking.INVOCATION_TAG}` = '{invocation}'")
    search.press("Enter")
    parent_row = page.get_by_role("row").filter(has_text=parent.info.run_name).first
    parent_row.wait_for(timeout=30_000)
    parent_row.locator("button").first.click()  # unfold the parent: its runs listed under it
    page.get_by_role("button", name="Columns", exact=True).click()
    for column in COLUMNS:
        choice = page.get_by_text(column, exact=True)
        if choice.count():
            choice.first.click()
    page.keyboard.press("Escape")
    page.wait_for_timeout(2000)
    text = shot(page, out, "runs")
    missing = [run.info.run_name for run in children if run.info.run_name not in text]
    if missing:
        problems.append(
            f"runs table: {len(missing)} of the invocation's {len(children)} runs not listed ({missing[:3]})"
        )
    words = {run.data.tags.get(VERDICT_TAG) for run in children} - {None}
    if not words:
        problems.append("runs table: no run of the invocation carries vs_first/verdict (not a comparison?)")
    if any(word not in text for word in words):
        problems.append(f"runs table: the column vs_first/verdict does not show {sorted(words)[:2]}")
    page.goto(f"{base}/#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}")
    page.get_by_text("What changed").first.wait_for(timeout=60_000)
    shot(page, out, "parent")
    candidates = [run for run in children if VERDICT_TAG in run.data.tags]
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
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking.tracking_uri(config.paths.tracking_uri),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )  # fmt: skip
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
            page = browser.new_page(viewport={"width": 2400, "height": 1200})
            try:
                problems = follow_readme(page, base, runs_url, invocation, parent, children, args.out)
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
