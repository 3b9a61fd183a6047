"""What does `make ui` show a user? The address it prints, opened in a real (headless) browser.

    apt-get install -y chromium && pip install playwright   # Debian's Chromium and Playwright, once
    python scripts/check_ui.py                               # after a comparison; screenshots and page text: printed

Runs `make ui`'s own command (`python -m compilebench.tracking --ui-url BASE --serve STORE`, 127.0.0.1, a free port)
and, in Chromium driven by Playwright, opens the one address it prints: the runs table of the newest invocation, its
B runs alone where it is a comparison, in MLflow's machine-learning mode. There, on the first screen (the window, not
the page below it) and within 10 s of the check's own time, each B run's name must show its headline word whole at
MLflow's default column width (a name cut after its word and model is counted, not failed). Then the parent's page
(its description: the answer per model) and a candidate's page (its tags). Each step saves a screenshot and the page's
text, into a fresh folder outside the project's data/ (or --out). Exit 1, naming each step, where the page does not
show it: more or fewer than one printed address, GenAI mode, a run out of view, a cut word. Ends only what it started.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
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


ADDRESS = re.compile(r"https?://\S+")
# Where a name's text ends on screen: the right edge of `word` in it, and of the boxes that clip it (an ellipsis
# takes the last ~12 px of a cut box).
WORD_BOX = """(el, word) => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  let node, wordRight = null;
  while ((node = walker.nextNode())) {
    const at = node.data.indexOf(word);
    if (at >= 0) { const r = document.createRange(); r.setStart(node, at); r.setEnd(node, at + word.length);
                   wordRight = r.getBoundingClientRect().right; break; }
  }
  let right = Infinity, cut = false, box = el;
  for (let i = 0; i < 5 && box; i++, box = box.parentElement) {
    if (getComputedStyle(box).overflow !== "visible") {
      right = Math.min(right, box.getBoundingClientRect().right);
      cut = cut || box.scrollWidth > box.clientWidth;
    }
  }
  return {wordRight, right, cut};
}"""
ELLIPSIS_PX = 12
# Whether an element is shown whole: inside every box above it that clips (a collapsed description clips its end).
IN_VIEW = """el => {
  const mine = el.getBoundingClientRect();
  for (let box = el.parentElement; box; box = box.parentElement) {
    if (getComputedStyle(box).overflow !== "visible" && mine.bottom > box.getBoundingClientRect().bottom + 1)
      return false;
  }
  return mine.height > 0;
}"""
SERVE_S = 240.0  # the most `make ui`'s command may take to print its address (it waits for the UI to answer)
MODE = "workflowType=machine_learning"  # a run's page as the runs table opens it, not in GenAI mode


def serve(store: str, base: str, err: Path) -> tuple[subprocess.Popen, list[str]]:
    """`make ui`'s command on `store` at `base`, in a process group of its own; with what it printed to stdout up to
    and with the runs table's address (its `compilebench runs:` line)."""
    with err.open("w") as stream:
        process = subprocess.Popen(
            [sys.executable, "-m", "compilebench.tracking", "--ui-url", base, "--serve", store],
            stdout=subprocess.PIPE,
            stderr=stream,
            text=True,
            start_new_session=True,
        )
    lines, deadline = [], time.monotonic() + SERVE_S
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            lines.append(process.stdout.readline())
            if lines[-1].startswith("compilebench runs:"):
                return process, lines
    end(process)
    raise SystemExit(
        f"make ui's command printed no runs address within {SERVE_S:.0f} s: {lines} {err.read_text()[-2000:]}"
    )


def end(process: subprocess.Popen) -> str:
    """End the process group started by serve (by its PID); what it printed to stdout after the address."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    rest, _ = process.communicate(timeout=90)
    return rest or ""


def printed_addresses(stdout: str, stderr: str) -> list[str]:
    """Every address `make ui` printed, on either stream."""
    return ADDRESS.findall(stdout) + ADDRESS.findall(stderr)


def word_cut(page, name: str, word: str) -> bool | None:
    """Whether the runs table shows `name` with `word` cut off (None: the name is not on the page)."""
    found = page.get_by_text(name, exact=True)
    if not found.count():
        return None
    box = found.first.evaluate(WORD_BOX, word)
    if box["wordRight"] is None:
        return True
    return box["cut"] and box["wordRight"] > box["right"] - ELLIPSIS_PX


def name_cut(page, name: str) -> bool:
    found = page.get_by_text(name, exact=True)
    return bool(found.count()) and found.first.evaluate(WORD_BOX, name[:1])["cut"]


FIRST_SCREEN_S = 10.0  # the most the check's own time may take to find the answer on the first screen


def follow_readme(page, base: str, runs_url: str, parent, children: list, out: Path) -> list[str]:
    """The printed address, opened: what the first screen and the pages behind it did not show."""
    problems = []
    candidates = [run for run in children if VERDICT_TAG in run.data.tags]
    shown = candidates or children
    started = time.perf_counter()
    page.goto(runs_url)
    close = page.get_by_role("button", name="Close")
    try:
        page.get_by_text(shown[0].info.run_name).first.wait_for(timeout=90_000)
    except Exception:  # Playwright's timeout: the screen is still shot and judged below
        problems.append(f"first screen: {shown[0].info.run_name!r} not shown within 90 s")
    if close.count():  # MLflow's assistant panel, where it opens by default, takes a third of the window
        close.first.click()
    if page.get_by_text("Judges", exact=True).count():  # MLflow 3's GenAI sidebar, not the runs table's
        problems.append("first screen: MLflow opened in GenAI mode, not machine learning (Model training)")
    height = page.viewport_size["height"]
    hidden = []
    for run in shown:
        found = page.get_by_text(run.info.run_name, exact=True)
        box = found.first.bounding_box() if found.count() else None
        if box is None or box["y"] + box["height"] > height:
            hidden.append(run.info.run_name)
    cut = [run.info.run_name for run in candidates if word_cut(page, run.info.run_name, headline_word(run))]
    after = [run.info.run_name for run in shown if run.info.run_name not in cut and name_cut(page, run.info.run_name)]
    took_s = time.perf_counter() - started
    text = shot(page, out, "runs", full_page=False)
    if hidden:
        problems.append(f"first screen: {len(hidden)} of {len(shown)} runs not in view ({hidden[:3]})")
    if candidates and any(headline_word(run) not in run.info.run_name for run in candidates):
        problems.append("first screen: a B run's name does not carry its headline word")
    if cut:
        problems.append(f"first screen: {len(cut)} of {len(candidates)} B runs' words cut by the column ({cut[:3]})")
    if took_s > FIRST_SCREEN_S:
        problems.append(
            f"first screen: the answer took {took_s:.1f} s of the check's own time (at most {FIRST_SCREEN_S:.0f} s)"
        )
    others = [run.info.run_name for run in children if run not in shown and run.info.run_name in text]
    if candidates and others:
        problems.append(f"first screen: A runs listed beside the B runs ({others[:2]})")
    print(
        f"first screen: {len(shown) - len(hidden)} of {len(shown)} runs in view in {took_s:.1f} s; words whole in "
        f"{len(candidates) - len(cut)} of {len(candidates)} B runs' names; {len(after)} names cut after their word"
    )
    page.goto(f"{base}/#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}?{MODE}")
    page.get_by_text("The answer, per model").first.wait_for(timeout=60_000)
    if candidates:  # the answer's first line, readable without "Show more"
        verdict = page.get_by_text(f"{candidates[0].data.params.get('environment', '')} against").first
        if not verdict.count() or not verdict.evaluate(IN_VIEW):
            problems.append("parent: its answer's first line is hidden behind Show more")
    if page.get_by_text("Judges", exact=True).count():
        problems.append("parent: its page opened in GenAI mode")
    shot(page, out, "parent")
    if candidates:
        run = candidates[0]
        page.goto(f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}?{MODE}")
        page.get_by_text(run.info.run_name).first.wait_for(timeout=60_000)
        page.wait_for_timeout(2000)
        text = shot(page, out, "candidate")
        if VERDICT_TAG not in text or run.data.tags[VERDICT_TAG] not in text:
            problems.append(f"candidate {run.info.run_name}: its page does not show vs_first/verdict")
    return problems


def headline_word(run) -> str:
    return run.data.tags[VERDICT_TAG].split()[0]


def address_problems(addresses: list[str], runs_url: str) -> list[str]:
    """What is wrong with what `make ui` printed: one address, the runs table's, in machine-learning mode."""
    problems = []
    if len(addresses) != 1:
        problems.append(f"make ui printed {len(addresses)} addresses, not one: {addresses[:4]}")
    if "/runs?" not in runs_url or "workflowType=machine_learning" not in runs_url:
        problems.append(f"make ui's address is not the runs table in machine-learning mode: {runs_url}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where the screenshots and page texts go (default: a fresh folder)")
    args = parser.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit("Playwright is not installed: pip install playwright") from None
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
    config = load_config()
    invocation, parent, children = newest_invocation(config.paths.tracking_uri)
    out = args.out or Path(tempfile.mkdtemp(prefix="compilebench-ui-"))
    out.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{free_port()}"
    server, printed = serve(tracking.tracking_uri(config.paths.tracking_uri), base, out / "make-ui.stderr")
    runs_url = printed[-1].split(":", 1)[1].strip()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 900})  # a laptop's window
            try:
                problems = follow_readme(page, base, runs_url, parent, children, out)
            finally:
                browser.close()
    finally:
        rest = end(server)
    stdout = "".join(printed) + rest
    problems = address_problems(printed_addresses(stdout, (out / "make-ui.stderr").read_text()), runs_url) + problems
    print(f"{runs_url}: invocation {invocation}, {len(children)} runs; screenshots in {out}")
    if problems:
        raise SystemExit("the README's route does not hold:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
