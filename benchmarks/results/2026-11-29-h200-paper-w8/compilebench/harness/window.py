"""The launcher in the background, for machines lent in windows whose commands may each run a few minutes only.

    python -m compilebench.harness.window start PLAN.json OUT [LAUNCHER OPTIONS]   # returns at once
    python -m compilebench.harness.window wait OUT SECONDS [--copy-to DIR]        # until it ends, or SECONDS pass
    python -m compilebench.harness.window stop OUT                                # ends the launcher it started
    python -m compilebench.harness.window run PLAN.json OUT SECONDS [--copy-to DIR] [LAUNCHER OPTIONS]  # both
    python -m compilebench.harness.window end PLAN.json OUT                       # the plan ends as it stands

`start` runs `python -m compilebench.harness.launcher PLAN.json OUT [LAUNCHER OPTIONS]` under a keeper in a session
of its own, so the command that started it may end (and a hang-up does not reach it). The launcher's output goes to
OUT/launcher.log; OUT/window.json says what runs (the keeper's and the launcher's process ids, the command, when it
started) and, once it ended, its exit status. A second `start` on an OUT whose launcher still runs is refused.

`wait` returns when that launcher has ended or SECONDS have passed. It prints how far the plan got (processes with
results, of the plan's and the added blocks'), the last lines of the launcher's log where it ended with an error, and
with --copy-to it copies the result files (trials.jsonl, added.jsonl, prime.jsonl, checkpoints.json, environment.json,
finished.json, launcher.log, window.json: eight small files, as they are then: a line being written may come torn,
and readers leave a torn last line out) to DIR, the way back from a machine that keeps only a few files of each
command.
Exit status: 0 the launcher ended with 0; 1 it ended otherwise; 3 it still runs; 2 nothing was started on OUT.

`run` is `start` (unless a launcher runs on OUT already, or the plan has finished there), then `wait`: the one
command every call of a window can send, the first as the later ones, on the same machine or a fresh one.

`end` ends a plan as it stands where no further window will run it (on any machine, the results brought back
included): it writes OUT/finished.json, naming the processes that will not run, so `benchmark --ingest` logs its runs
with the processes they have. Refused while a launcher runs on OUT or before any process has results. Running the
launcher on OUT again resumes the plan (its runs, once logged, keep the numbers they were logged with).

`stop` sends SIGTERM to the keeper this module started (by its recorded process id, after checking that the id is
still the keeper's), which passes it on to the launcher: that ends its trial's process group and exits.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from compilebench.harness.files import write_json
from compilebench.harness.records import Plan, RecordError, read_plan
from compilebench.harness.results_folder import (
    ADDED_TRIALS,
    ENVIRONMENT,
    FINISHED,
    output_problem,
    plan_progress,
    read_results,
)
from compilebench.harness.trial_process import last_lines

STATE = "window.json"
LOG = "launcher.log"
RESULT_FILES = ("trials.jsonl", ADDED_TRIALS, "prime.jsonl", "checkpoints.json", ENVIRONMENT, FINISHED, LOG,
                STATE)  # fmt: skip
POLL_S = 1.0
LOG_TAIL_SHOWN = 20  # lines of the launcher's log `wait` prints when the launcher ended with an error
EXIT_ENDED, EXIT_FAILED, EXIT_NOTHING, EXIT_RUNNING = 0, 1, 2, 3
KEEPER = b"_keep"  # the verb in the keeper's command line


def keeper_alive(pid: int) -> bool:
    """Whether process `pid` is still this module's keeper: it runs (a zombie has ended) and its command line is the
    keeper's, so an id the system gave to another process after the keeper died is never taken for it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel whether the id is in use
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and KEEPER in command


def read_state(out: Path) -> dict | None:
    """OUT/window.json, or None when nothing was started there."""
    path = out / STATE
    return json.loads(path.read_text()) if path.exists() else None


def write_state(out: Path, state: dict) -> None:
    """OUT/window.json, replaced whole (a reader never sees half of it)."""
    write_json(out / STATE, state, indent=1)


def running(state: dict | None) -> bool:
    """Whether the launcher a state describes still runs: no exit status recorded, and its keeper alive."""
    return bool(state) and state.get("returncode") is None and bool(state.get("keeper_pid")) and keeper_alive(
        state["keeper_pid"])  # fmt: skip


def start(plan: Path, out: Path, options: list[str]) -> dict:
    """Start the keeper, which starts the launcher, in a session of its own; say so, and return the state once
    the launcher runs."""
    plan, out = plan.resolve(), out.resolve()  # the launcher works in the plan's folder: no relative paths
    if not plan.is_file():
        raise SystemExit(f"window start: no plan at {plan}")
    out.mkdir(parents=True, exist_ok=True)
    state = read_state(out)
    if running(state):
        raise SystemExit(f"window start: a launcher still runs on {out} (process {state['launcher_pid']}); "
                         f"`window wait {out} SECONDS` for it, or `window stop {out}`")  # fmt: skip
    command = [sys.executable, "-m", "compilebench.harness.launcher", str(plan), str(out), *options]
    write_state(out, {"command": command, "plan": str(plan), "keeper_pid": None, "launcher_pid": None,
                      "started_at": time.time(), "returncode": None})  # fmt: skip
    keeper = subprocess.Popen([sys.executable, "-m", "compilebench.harness.window", KEEPER.decode(), str(out)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = read_state(out)
        if state and state.get("launcher_pid"):
            print(f"window: launcher {state['launcher_pid']} started on {plan}; output in {out / LOG}")
            return state
        if keeper.poll() is not None:
            raise SystemExit(f"window start: the keeper exited with {keeper.returncode} before the launcher started")
        time.sleep(0.05)
    raise SystemExit("window start: the keeper did not start the launcher within 30 s")


def keep(out: Path) -> None:
    """The keeper: run the launcher with its output in OUT/launcher.log; record its process id, then its exit
    status. SIGTERM is passed on to the launcher (which ends its trial's process group); a hang-up is ignored."""
    state = read_state(out)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with open(out / LOG, "a") as log:
        launcher = subprocess.Popen(state["command"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        signal.signal(signal.SIGTERM, lambda signum, _frame: launcher.send_signal(signum))
        write_state(out, {**state, "keeper_pid": os.getpid(), "launcher_pid": launcher.pid})
        returncode = launcher.wait()
    write_state(out, {**read_state(out), "returncode": returncode, "ended_at": time.time()})


def progress(out: Path, state: dict) -> str:
    """How far the plan got: processes whose every trial has a result, of the plan's and its added blocks'."""
    try:
        plan = read_plan(Path(state["plan"]))
    except RecordError as error:  # a state written on another machine, where the plan lay elsewhere
        return f"plan {state['plan']} unreadable here ({error})"
    finished, total, added = plan_progress(plan, out)
    return f"{finished} of {total} processes have results ({added} of them added blocks)"


def copy_results(out: Path, destination: Path) -> list[str]:
    """The result files that exist, copied whole to `destination`; their names."""
    destination.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in RESULT_FILES:
        if (out / name).is_file():
            shutil.copyfile(out / name, destination / name)
            copied.append(name)
    return copied


def wait(out: Path, seconds: float, copy_to: Path | None) -> int:
    """Wait for OUT's launcher to end, at most `seconds`; report, copy; the exit status (module docstring)."""
    out = out.resolve()
    state = read_state(out)
    if state is None:
        print(f"window wait: nothing was started on {out} (no {STATE})", file=sys.stderr)
        return EXIT_NOTHING
    deadline = time.monotonic() + seconds
    while running(state) and time.monotonic() < deadline:
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        state = read_state(out)
    ended = not running(state)
    returncode = state.get("returncode")
    where = f"ended with {returncode}" if ended else "still runs"
    if ended and returncode is None:
        where = "ended without an exit status (its keeper was killed)"
    print(f"window: the launcher {where}; {progress(out, state)}")
    if ended and returncode != 0:  # why, in this command's own output: a lent machine may not get another
        tail = "\n".join(last_lines(out / LOG, LOG_TAIL_SHOWN)) or "(empty or unreadable)"
        print(f"window: the last lines of {out / LOG}:\n{tail}", file=sys.stderr)
    if copy_to is not None:
        print(f"window: copied {', '.join(copy_results(out, copy_to))} to {copy_to}")
    if not ended:
        return EXIT_RUNNING
    return EXIT_ENDED if returncode == 0 else EXIT_FAILED


def plan_for(verb: str, plan: Path, out: Path) -> Plan:
    """The plan, where it reads and OUT holds no other plan's results; else SystemExit naming `verb` and why."""
    try:
        exported = read_plan(plan)
    except RecordError as error:
        raise SystemExit(f"window {verb}: {error}") from None
    problem = output_problem(exported, out.resolve())
    if problem:
        raise SystemExit(f"window {verb}: {problem}")
    return exported


def start_and_wait(plan: Path, out: Path, seconds: float, copy_to: Path | None, options: list[str]) -> int:
    """`start` unless a launcher runs on OUT or its plan has finished there; then `wait`."""
    plan_for("run", plan, out)
    if running(read_state(out.resolve())):
        print(f"window: a launcher runs on {out} already: waiting for it")
    elif (out / FINISHED).exists():
        print(f"window: the plan has finished on {out} ({FINISHED}): nothing started")
    else:
        start(plan, out, options)
    return wait(out, seconds, copy_to)


def end(plan: Path, out: Path) -> int:
    """The plan ends with the processes that have results: OUT/finished.json says so (module docstring)."""
    out = out.resolve()
    exported = plan_for("end", plan, out)
    state = read_state(out)
    if running(state):
        raise SystemExit(f"window end: a launcher still runs on {out} (process {state['launcher_pid']}); "
                         f"`window stop {out}` first")  # fmt: skip
    if (out / FINISHED).exists():
        print(f"window: the plan has finished on {out} already ({FINISHED}): nothing to end")
        return EXIT_ENDED
    finished, total, _ = plan_progress(exported, out)
    if not finished:
        raise SystemExit(f"window end: no process of the plan has results in {out}: nothing to end (run it first)")
    trials = len(read_results(out / "trials.jsonl"))
    write_json(out / FINISHED, {"finished_at": time.time(), "trials": trials, "ended": "window end",
                                "processes_not_run": total - finished})  # fmt: skip
    print(f"window: the plan ends on {out} with {finished} of {total} processes; {total - finished} will not run "
          "(`benchmark --ingest` logs it now)")  # fmt: skip
    return EXIT_ENDED


def stop(out: Path) -> int:
    """SIGTERM to the launcher OUT's keeper started, if it still runs; waits for the keeper to record its end."""
    out = out.resolve()
    state = read_state(out)
    if not running(state):
        print(f"window stop: no launcher runs on {out}", file=sys.stderr)
        return EXIT_NOTHING
    os.kill(state["keeper_pid"], signal.SIGTERM)  # the keeper passes it on to the launcher it started
    return wait(out, 60, None)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the launcher in the background; wait for it; stop it.")
    verbs = parser.add_subparsers(dest="verb", required=True)
    started = verbs.add_parser("start", help="start the launcher on PLAN, writing to OUT; returns at once")
    started.add_argument("plan", type=Path)
    started.add_argument("out", type=Path)
    waited = verbs.add_parser("wait", help="wait until OUT's launcher ends or SECONDS pass")
    waited.add_argument("out", type=Path)
    waited.add_argument("seconds", type=float)
    waited.add_argument("--copy-to", type=Path, default=None, metavar="DIR", help="copy the result files to DIR")
    stopped = verbs.add_parser("stop", help="end OUT's launcher (SIGTERM)")
    stopped.add_argument("out", type=Path)
    both = verbs.add_parser("run", help="start (unless one runs, or the plan finished), then wait")
    both.add_argument("plan", type=Path)
    both.add_argument("out", type=Path)
    both.add_argument("seconds", type=float)
    both.add_argument("--copy-to", type=Path, default=None, metavar="DIR", help="copy the result files to DIR")
    ended = verbs.add_parser("end", help="end the plan as it stands: no further process runs; ingest logs it")
    ended.add_argument("plan", type=Path)
    ended.add_argument("out", type=Path)
    kept = verbs.add_parser("_keep")  # the keeper, started by `start`
    kept.add_argument("out", type=Path)
    args, options = parser.parse_known_args()
    if options and args.verb not in ("start", "run"):
        parser.error(f"unrecognized arguments: {' '.join(options)}")
    if getattr(args, "seconds", 0) < 0:
        parser.error(f"SECONDS must be >= 0, got {args.seconds}")
    if args.verb == "start":
        start(args.plan, args.out, options)
    elif args.verb == "wait":
        sys.exit(wait(args.out, args.seconds, args.copy_to))
    elif args.verb == "run":
        sys.exit(start_and_wait(args.plan, args.out, args.seconds, args.copy_to, options))
    elif args.verb == "stop":
        sys.exit(stop(args.out))
    elif args.verb == "end":
        sys.exit(end(args.plan, args.out))
    else:
        keep(args.out)


if __name__ == "__main__":
    main()
