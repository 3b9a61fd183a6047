"""An exported plan run in windows, as on a machine lent for a few minutes a command: the launcher in the background
(`harness.window`), a window that ends between processes (`--stop-after-min`), a later window that resumes, priming
again on a machine whose primed cache is gone, and a launcher stopped by the id of what `start` started."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import descendants, make_project, project_env, run_ok, running

from compilebench.harness import results_folder, window

pytestmark = [pytest.mark.xdist_group("window")]


def _window(folder, env, *args, timeout=900):
    return subprocess.run([sys.executable, "-m", "compilebench.harness.window", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A one-model tiny plan on a shared cache (eager and default, two blocks), exported; the bare environment of a
    GPU box (the exported harness copy on the path, not the project's source)."""
    root = make_project(tmp_path_factory.mktemp("window"), ["microsoft/resnet-50"], replicates=2, max_replicates=2,
                        compile_cache="shared")  # fmt: skip
    env = project_env()
    run_ok([sys.executable, "-m", "compilebench.fetch_image"], root, env)
    folder = root / "gpu-run"
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--export", str(folder)], root, env)
    bare = {**env, "PYTHONPATH": str(folder)}
    bare.pop("VIRTUAL_ENV", None)
    return folder, bare


def _log_lines(results, text):
    return [line for line in (results / "launcher.log").read_text().splitlines() if text in line]


@pytest.mark.slow
def test_windows_end_between_processes_resume_and_prime_again_where_the_cache_is_gone(exported, tmp_path):
    folder, env = exported
    results, back = folder / "results", tmp_path / "back"
    for primed in (1, 0):  # the deadline has passed when the prime ends: no timing process starts
        started = _window(folder, env, "start", "plan.json", "results", "--prime", "1", "--stop-after-min", "0.001")
        assert started.returncode == 0, started.stderr
        waited = _window(folder, env, "wait", "results", "600", "--copy-to", str(back))
        assert waited.returncode == window.EXIT_ENDED, waited.stdout + waited.stderr
        assert "0 of 2 processes have results" in waited.stdout
        assert _log_lines(results, "primed ")[-1].split("INFO ")[1].startswith(f"primed {primed} runs")
    ended = _log_lines(results, "window ended")
    assert len(ended) == 2 and all("2 processes left" in line for line in ended)  # 2nd window: the cache, no prime
    assert not (results / "trials.jsonl").exists()
    assert sorted(path.name for path in back.iterdir()) == ["checkpoints.json", "environment.json", "launcher.log",
                                                           "prime.jsonl", "window.json"]  # fmt: skip

    shutil.rmtree(results / "shared-cache")  # the next window is a fresh machine: prime.jsonl came, the cache did not
    with open(results / "prime.jsonl", "a") as torn:  # and a line copied while it was being written
        torn.write('{"cache_key": "current/micro')
    core = max(os.sched_getaffinity(0))  # the timing processes pinned to one core
    third = run_ok([sys.executable, "-m", "compilebench.harness.launcher", "plan.json", "results", "--prime", "1",
                    "--cpus", str(core)], folder, env)  # fmt: skip
    assert "primed 1 runs" in third.stderr and "window ended" not in third.stderr
    assert json.loads((results / "finished.json").read_text())["trials"] == 4  # not after a window that ended
    primes = [json.loads(line) for line in (results / "prime.jsonl").read_text().splitlines()]  # the torn one cut
    assert len(primes) == 2 and len({line["boot_id"] for line in primes}) == 1 and primes[0]["status"] == "ok"
    trials = [json.loads(line) for line in (results / "trials.jsonl").read_text().splitlines()]
    assert sorted(t["trial_id"] for t in trials) == sorted(
        f"current/microsoft--resnet-50/bs1/{arm}/r{block}" for arm in ("eager", "default") for block in (0, 1)
    )  # every trial once
    assert {t["status"] for t in trials} == {"ok"}
    assert {(t["num_threads"], t["device_state"]["start"]["cpu_cores"]) for t in trials} == {(1, str(core))}
    before = window.read_state(results)
    again = _window(
        folder, env, "run", "plan.json", "results", "5", "--copy-to", str(tmp_path / "last"), "--prime", "1"
    )
    assert again.returncode == window.EXIT_ENDED and "the plan has finished" in again.stdout, again.stderr
    assert window.read_state(results) == before  # nothing started
    brought = {path.name for path in (tmp_path / "last").iterdir()}  # all a window brings back: 8 files at most
    assert brought == set(window.RESULT_FILES) - {"added.jsonl"} and len(window.RESULT_FILES) == 8  # no block added


@pytest.mark.slow
def test_a_second_start_is_refused_and_stop_ends_the_launcher_it_started(exported, tmp_path):
    folder, env = exported
    out = tmp_path / "stopped"
    started = _window(folder, env, "start", "plan.json", str(out), "--prime", "1")
    assert started.returncode == 0, started.stderr
    state = window.read_state(out)
    assert window.running(state)
    again = _window(folder, env, "start", "plan.json", str(out))
    assert again.returncode != 0 and "a launcher still runs" in again.stderr
    stopped = _window(folder, env, "stop", str(out))
    assert stopped.returncode == window.EXIT_FAILED, stopped.stdout + stopped.stderr  # ended by SIGTERM, not 0
    state = window.read_state(out)
    assert state["returncode"] not in (None, 0) and not window.running(state)
    deadline = time.monotonic() + 30
    while window.keeper_alive(state["keeper_pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not window.keeper_alive(state["keeper_pid"])
    with pytest.raises(ProcessLookupError):
        os.kill(state["launcher_pid"], 0)


def _trials(pid):
    """The trial processes below `pid`."""
    found = []
    for child in descendants(pid):
        try:
            if b"compilebench.harness.trial" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue  # ended while we looked
    return found


@pytest.mark.slow
def test_a_launcher_stopped_while_it_primes_starts_no_further_prime_and_its_results_are_its_plans_only(
    exported, tmp_path
):
    folder, env = exported
    two = tmp_path / "two"  # two compiled variants: two primes, one at a time
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--export", str(two), "--set",
            "suites.smoke.variants=[eager,default,freezing]"], folder.parent, project_env())  # fmt: skip
    launcher = subprocess.Popen([sys.executable, "-m", "compilebench.harness.launcher", "plan.json", "results",
                                 "--prime", "1"], cwd=two, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        trial, deadline = [], time.monotonic() + 300
        while not trial and launcher.poll() is None and time.monotonic() < deadline:
            trial = _trials(launcher.pid)  # the first prime's process
            time.sleep(0.05)
        assert trial, "no prime started"
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if launcher.poll() is None:
            launcher.kill()  # ours, by its id: not left behind by a failing test
            launcher.wait()
    primes = sorted(path.name for path in (two / "results" / "work" / "prime").glob("*.spec.json"))
    assert len(primes) == 1, primes  # before the fix the pool went on to the second prime and waited for it
    assert not any(running(pid) for pid in trial)  # gone, or a zombie not yet reaped by whoever inherited it
    assert not (two / "results" / "prime.jsonl").exists()  # a stopped prime is no result

    before = {path.name: path.read_bytes() for path in (two / "results").iterdir() if path.is_file()}
    other = subprocess.run([sys.executable, "-m", "compilebench.harness.launcher", str(folder / "plan.json"),
                            str(two / "results")], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert other.returncode == 2 and "holds results of another plan" in other.stderr, other.stderr
    ran = _window(folder, env, "run", "plan.json", str(two / "results"), "5")
    assert ran.returncode != 0 and "holds results of another plan" in ran.stderr, ran.stdout + ran.stderr
    assert {path.name: path.read_bytes() for path in (two / "results").iterdir() if path.is_file()} == before


def test_wait_on_a_folder_where_nothing_started_says_so(tmp_path):
    done = subprocess.run([sys.executable, "-m", "compilebench.harness.window", "wait", str(tmp_path), "1"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == window.EXIT_NOTHING and "nothing was started" in done.stderr
    stop = subprocess.run([sys.executable, "-m", "compilebench.harness.window", "stop", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert stop.returncode == window.EXIT_NOTHING and "no launcher runs" in stop.stderr


@pytest.mark.parametrize(("text", "error"), [("1-0", "is not a core or a range"), ("x", "is not a core"),
                                              ("999999", "[999999] are not among")])  # fmt: skip
def test_cores_to_pin_must_be_cores_this_process_may_use(tmp_path, text, error):
    command = [
        sys.executable,
        "-m",
        "compilebench.harness.launcher",
        str(tmp_path / "plan.json"),
        str(tmp_path / "out"),
    ]
    done = subprocess.run([*command, "--cpus", text], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and error in done.stderr and not (tmp_path / "out").exists()


def test_core_lists_read_as_taskset_writes_them():
    from compilebench.harness.launcher import parse_cpus
    from compilebench.harness.records import CPUS_ENV, thread_environment

    assert parse_cpus("0,2,4-6") == [0, 2, 4, 5, 6] and parse_cpus("3") == [3]
    assert thread_environment(2, [2, 3]) == {"OMP_NUM_THREADS": "2", "TORCHINDUCTOR_COMPILE_THREADS": "2",
                                             CPUS_ENV: "2,3"}  # fmt: skip


def test_a_deadline_that_is_not_positive_is_refused(tmp_path):
    (tmp_path / "plan.json").write_text("{}")
    done = subprocess.run([sys.executable, "-m", "compilebench.harness.launcher", str(tmp_path / "plan.json"),
                           str(tmp_path / "out"), "--stop-after-min", "0"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 2 and "--stop-after-min must be a positive number of minutes" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("cache", "options", "error"), [
    ("warm", ["--prime", "2"], "--prime needs a plan exported with benchmark.compile_cache=shared"),
    ("shared", ["--python", "B"], "--python takes ENV=PATH"),
])  # fmt: skip
def test_a_plan_the_launcher_cannot_run_as_asked_is_refused_before_anything_is_written(tmp_path, cache, options,
                                                                                        error):  # fmt: skip
    from compilebench.harness.records import ModelSpec, Plan, TimingSpec, TrialSpec, VariantSpec

    model = ModelSpec("acme/m", "M", "image-classification", "X", "checkpoints/m")
    spec = TrialSpec("current/m/bs1/default/r0", "current", model, 1, VariantSpec("default"), 0, cache, "i.jpg",
                     TimingSpec())  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps(Plan("inv", (spec,), (), {}).to_dict()))
    done = subprocess.run([sys.executable, "-m", "compilebench.harness.launcher", str(tmp_path / "plan.json"),
                           str(tmp_path / "out"), *options], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and error in done.stderr and not (tmp_path / "out").exists()


def test_a_plan_measured_on_another_machine_or_stack_is_not_continued_here(tmp_path):
    """A later window on another kind of machine (the device tool falls back from an H100 to an H200) or stack
    would pool both into each run: the launcher refuses before it writes anything; on the same machine, it goes on."""
    from compilebench.harness import fingerprint
    from compilebench.harness.records import ModelSpec, Plan, TimingSpec, TrialResult, TrialSpec, VariantSpec

    model = ModelSpec("acme/m", "M", "image-classification", "X", "checkpoints/m")
    specs = tuple(TrialSpec(f"current/m/bs1/default/r{r}", "current", model, 1, VariantSpec("default"), r, "shared",
                            "i.jpg", TimingSpec()) for r in (0, 1))  # fmt: skip
    plan = Plan("inv", specs, (), {})
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_dict()))
    out = tmp_path / "out"
    out.mkdir()
    here = fingerprint.collect("cpu")  # what this interpreter's trials record here
    for environment, refused in ((here, False), ({**here, "machine_fingerprint": "0a1b2c3d4e5f"}, True),
                                 ({**here, "torch_version": "2.11.0+cu130"}, True)):  # fmt: skip
        row = TrialResult(specs[0].trial_id, "ok", environment=environment, eager_ms=(1.0,), compiled_ms=(0.5,))
        (out / "trials.jsonl").write_text(json.dumps(row.to_dict()) + "\n")
        problem = results_folder.machine_problem(plan, out, {"current": sys.executable})
        assert (problem is not None) == refused, problem
    assert "holds results of environment 'current' measured elsewhere (1 process on " in problem
    assert "torch 2.11.0+cu130, " in problem and f"), and this machine is {fingerprint.described(here)}: " in problem
    done = subprocess.run([sys.executable, "-m", "compilebench.harness.launcher", str(tmp_path / "plan.json"),
                           str(out)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2 and "a run pools the processes of one machine and stack only" in done.stderr
    assert sorted(path.name for path in out.iterdir()) == ["trials.jsonl"]  # nothing written, nothing built


def test_a_launcher_that_ends_with_an_error_is_explained_in_the_windows_own_output(tmp_path):
    from compilebench.harness.records import ModelSpec, Plan, TimingSpec, TrialSpec, VariantSpec

    model = ModelSpec("acme/m", "M", "image-classification", "X", "checkpoints/m")
    spec = TrialSpec("current/m/bs1/default/r0", "current", model, 1, VariantSpec("default"), 0, "shared", "i.jpg",
                     TimingSpec())  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps(Plan("inv", (spec,), (), {}).to_dict()))
    done = _window(tmp_path, None, "run", "plan.json", "out", "60", "--python", "B", timeout=120)
    assert done.returncode == window.EXIT_FAILED and "the launcher ended with 2" in done.stdout, done.stdout
    assert "--python takes ENV=PATH" in done.stderr, done.stderr  # the launcher's own error, from its log


def test_a_plan_naming_an_environment_without_an_interpreter_is_refused(tmp_path):
    from compilebench.harness.launcher import plan_problem
    from compilebench.harness.records import ModelSpec, Plan, TimingSpec, TrialSpec, VariantSpec

    model = ModelSpec("acme/m", "M", "image-classification", "X", "checkpoints/m")
    specs = tuple(TrialSpec(f"{label}/m/bs1/default/r0", label, model, 1, VariantSpec("default"), 0, "shared", "i.jpg",
                            TimingSpec()) for label in ("current", "B"))  # fmt: skip
    plan = Plan("inv", specs, (), {})
    assert "environments ['B']; give their interpreters with --python ENV=PATH" in plan_problem(
        plan, {"current": ""}, 0
    )
    assert plan_problem(plan, {"current": "", "B": "/b/python"}, 2) is None


@pytest.mark.parametrize(("text", "error"), [
    (None, "no plan readable at"),
    ("{", "not JSON"),
    ('{"a": 1}', "not a plan written by `compilebench.benchmark --export`"),
    ('{"invocation_id": "x", "trials": [{"trial_id": "t"}]}', "a trial or recipe lacks the key"),
])  # fmt: skip
def test_a_file_that_is_not_a_plan_is_refused_by_name(tmp_path, text, error):
    if text is not None:
        (tmp_path / "plan.json").write_text(text)
    done = subprocess.run([sys.executable, "-m", "compilebench.harness.launcher", str(tmp_path / "plan.json"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and error in done.stderr and str(tmp_path / "plan.json") in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_plan_ended_by_hand_names_the_processes_that_will_not_run_and_no_window_starts_it_again(repo_root, tmp_path):
    """`window end` here, on a copy of the first GPU window's record (16 of its 20 processes came back), with the
    project's harness (run from outside the record, whose frozen copy would come first on the path)."""
    record = tmp_path / "w1"
    shutil.copytree(repo_root / "benchmarks/results/2026-11-27-h100-paper-bs1-w1", record)
    kept = json.loads((record / "results" / "finished.json").read_text())  # what `window end` wrote there
    (record / "results" / "finished.json").unlink()  # the results as they came back, before the plan was ended
    plan, results = str(record / "plan.json"), str(record / "results")
    empty = _window(tmp_path, os.environ, "end", plan, str(record / "elsewhere"))
    assert empty.returncode != 0 and "no process of the plan has results" in empty.stderr
    assert not (record / "elsewhere" / "finished.json").exists()
    ended = _window(tmp_path, os.environ, "end", plan, results)
    assert ended.returncode == window.EXIT_ENDED and "with 16 of 20 processes; 4 will not run" in ended.stdout
    finished = json.loads((record / "results" / "finished.json").read_text())
    assert (finished["trials"], finished["processes_not_run"]) == (48, 4) == (kept["trials"], kept["processes_not_run"])
    again = _window(tmp_path, os.environ, "run", plan, results, "1")
    assert again.returncode == window.EXIT_ENDED and "the plan has finished" in again.stdout
    assert "already" in _window(tmp_path, os.environ, "end", plan, results).stdout
