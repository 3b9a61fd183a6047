"""The runner: one file built from the commit (`runner.pyz`), named by its digest in every exported plan and in every
line and run it produces; an exported plan run by it alone, in windows that end between processes and resume,
priming again where the primed cache is gone; and what it refuses before it writes anything."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import descendants, make_project, project_env, run_ok, running

from compilebench import runner
from compilebench.harness import results_folder
from compilebench.records.formats import ModelSpec, Plan, TimingSpec, TrialResult, TrialSpec, VariantSpec

pytestmark = [pytest.mark.xdist_group("window")]
MODEL = ModelSpec("acme/m", "M", "image-classification", "X", "checkpoints/m")


def _run(folder, env, *args, timeout=900):
    return subprocess.run(
        [sys.executable, runner.RUNNER, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A one-model tiny plan on a shared cache (eager and default, two blocks), exported with its runner; the bare
    environment of a GPU box (no project on the path: the runner brings its own code)."""
    root = make_project(
        tmp_path_factory.mktemp("runner"),
        ["microsoft/resnet-50"],
        replicates=2,
        max_replicates=2,
        compile_cache="shared",
    )
    env = project_env()
    run_ok([sys.executable, "-m", "compilebench.fetch_image"], root, env)
    folder = root / "gpu-run"
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--export", str(folder)], root, env)
    bare = {key: value for key, value in env.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return folder, bare


def test_the_runner_is_the_same_bytes_for_the_same_code_and_holds_what_travels(tmp_path):
    first, second = runner.build(tmp_path / "a"), runner.build(tmp_path / "b")
    assert (
        first == second
        and (tmp_path / "a" / runner.RUNNER).read_bytes() == (tmp_path / "b" / runner.RUNNER).read_bytes()
    )
    names = zipfile.ZipFile(tmp_path / "a" / runner.RUNNER).namelist()
    assert names[0] == "__main__.py" and "compilebench/runner.py" in names
    assert "compilebench/harness/trial.py" in names and "compilebench/analysis/adaptive.py" in names
    assert not any(
        name.startswith("compilebench/")
        and name.count("/") == 1
        and name not in ("compilebench/__init__.py", "compilebench/runner.py")
        for name in names
    )  # no stage, no tracking
    assert not any("__pycache__" in name for name in names)


@pytest.mark.slow
def test_an_exported_plan_names_its_runner_and_every_line_the_runner_wrote_names_it_too(exported, tmp_path):
    """The plan, the export's context and README name the runner's digest; a window that ends between processes
    (`--stop-after-min`) writes nothing but its prime; the next resumes, and a window on a fresh machine primes again
    (prime.jsonl came back, the cache did not, a line torn); every trial runs once, pinned to one core."""
    folder, env = exported
    plan = json.loads((folder / "plan.json").read_text())
    digest = runner.digest_of((folder / runner.RUNNER).read_bytes())
    assert plan["runner_sha256"] == digest == json.loads((folder / "export.json").read_text())["runner_sha256"]
    assert plan["adaptive"]["context"]["runner_sha256"] == digest
    assert f"python {runner.RUNNER} plan.json results" in (folder / "README.md").read_text()
    assert not (folder / "compilebench").exists()  # no copy of the code: the one file
    results = folder / "results"
    for primed in (1, 0):  # the deadline has passed when the prime ends: no timing process starts
        ended = _run(folder, env, "plan.json", "results", "--prime", "1", "--stop-after-min", "0.001")
        assert ended.returncode == 0, ended.stderr
        assert f"primed {primed} runs" in ended.stderr and "window ended" in ended.stderr
        assert "2 processes left" in ended.stderr
    assert not (results / "trials.jsonl").exists()
    assert json.loads((results / "environment.json").read_text())["runner_sha256"] == digest
    shutil.rmtree(results / "shared-cache")  # a fresh machine: prime.jsonl came back, the cache did not
    with open(results / "prime.jsonl", "a") as torn:  # and a line copied while it was being written
        torn.write('{"cache_key": "current/micro')
    core = max(os.sched_getaffinity(0))
    third = _run(folder, env, "plan.json", "results", "--prime", "1", "--cpus", str(core))
    assert third.returncode == 0 and "primed 1 runs" in third.stderr and "window ended" not in third.stderr
    assert json.loads((results / "finished.json").read_text())["trials"] == 4
    primes = [json.loads(line) for line in (results / "prime.jsonl").read_text().splitlines()]  # the torn one cut
    assert len(primes) == 2 and len({line["boot_id"] for line in primes}) == 1 and primes[0]["status"] == "ok"
    trials = [json.loads(line) for line in (results / "trials.jsonl").read_text().splitlines()]
    assert sorted(t["trial_id"] for t in trials) == sorted(
        f"current/microsoft--resnet-50/bs1/{arm}/r{block}" for arm in ("eager", "default") for block in (0, 1)
    )  # every trial once
    assert {t["status"] for t in trials} == {"ok"} and {t["runner_sha256"] for t in trials} == {digest}
    assert {(t["num_threads"], t["device_state"]["start"]["cpu_cores"]) for t in trials} == {(1, str(core))}
    again = _run(folder, env, "plan.json", "results")  # a finished plan: every trial done before, none again
    assert again.returncode == 0 and "(done before)" in again.stderr and "primed" not in again.stderr
    assert len((results / "trials.jsonl").read_text().splitlines()) == 4

    other = tmp_path / "other"
    shutil.copytree(folder, other, ignore=shutil.ignore_patterns("results"))
    (other / runner.RUNNER).write_bytes((other / runner.RUNNER).read_bytes() + b"\n")  # not the plan's runner
    refused = _run(other, env, "plan.json", "results")
    assert refused.returncode == 2 and f"exported with runner {digest[:12]}" in refused.stderr
    assert not (other / "results").exists()


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
def test_a_runner_stopped_while_it_primes_starts_no_further_prime_and_its_results_are_its_plans_only(
    exported, tmp_path
):
    folder, env = exported
    two = tmp_path / "two"  # two compiled variants: two primes, one at a time
    run_ok(
        [
            sys.executable,
            "-m",
            "compilebench.benchmark",
            "--export",
            str(two),
            "--set",
            "suites.smoke.variants=[eager,default,freezing]",
        ],
        folder.parent,
        project_env(),
    )
    started = subprocess.Popen(
        [sys.executable, runner.RUNNER, "plan.json", "results", "--prime", "1"],
        cwd=two,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        trial, deadline = [], time.monotonic() + 300
        while not trial and started.poll() is None and time.monotonic() < deadline:
            trial = _trials(started.pid)  # the first prime's process
            time.sleep(0.05)
        assert trial, "no prime started"
        started.send_signal(signal.SIGTERM)
        assert started.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if started.poll() is None:
            started.kill()  # ours, by its id: not left behind by a failing test
            started.wait()
    primes = sorted(path.name for path in (two / "results" / "work" / "prime").glob("*.spec.json"))
    assert len(primes) == 1, primes  # the pool did not go on to the second prime
    assert not any(running(pid) for pid in trial)  # gone, or a zombie not yet reaped by whoever inherited it
    assert not (two / "results" / "prime.jsonl").exists()  # a stopped prime is no result
    before = {path.name: path.read_bytes() for path in (two / "results").iterdir() if path.is_file()}
    other = _run(two, env, str(folder / "plan.json"), str(two / "results"), timeout=120)
    assert other.returncode == 2 and "holds results of another plan" in other.stderr, other.stderr
    assert {path.name: path.read_bytes() for path in (two / "results").iterdir() if path.is_file()} == before


def _source(*args, timeout=60):
    """The runner from the project's source tree (`python -m compilebench.runner`), as its refusals need no file."""
    return subprocess.run(
        [sys.executable, "-m", "compilebench.runner", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [("1-0", "is not a core or a range"), ("x", "is not a core"), ("999999", "[999999] are not among")],
)
def test_cores_to_pin_must_be_cores_this_process_may_use(tmp_path, text, error):
    done = _source(tmp_path / "plan.json", tmp_path / "out", "--cpus", text)
    assert done.returncode == 2 and error in done.stderr and not (tmp_path / "out").exists()


def test_core_lists_read_as_taskset_writes_them():
    from compilebench.harness.launcher import parse_cpus
    from compilebench.harness.names import CPUS_ENV, thread_environment

    assert parse_cpus("0,2,4-6") == [0, 2, 4, 5, 6] and parse_cpus("3") == [3]
    assert thread_environment(2, [2, 3]) == {
        "OMP_NUM_THREADS": "2",
        "TORCHINDUCTOR_COMPILE_THREADS": "2",
        CPUS_ENV: "2,3",
    }


@pytest.mark.parametrize("minutes", ["0", "nan", "-1"])
def test_a_deadline_that_is_not_positive_is_refused(tmp_path, minutes):
    (tmp_path / "plan.json").write_text("{}")
    done = _source(tmp_path / "plan.json", tmp_path / "out", "--stop-after-min", minutes)
    assert done.returncode == 2 and "--stop-after-min must be a positive number of minutes" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("cache", "options", "error"),
    [
        ("warm", ["--prime", "2"], "--prime needs a plan exported with benchmark.compile_cache=shared"),
        ("shared", ["--python", "B"], "--python takes ENV=PATH"),
    ],
)
def test_a_plan_the_runner_cannot_run_as_asked_is_refused_before_anything_is_written(tmp_path, cache, options, error):
    spec = TrialSpec(
        "current/m/bs1/default/r0", "current", MODEL, 1, VariantSpec("default"), 0, cache, "i.jpg", TimingSpec()
    )
    (tmp_path / "plan.json").write_text(json.dumps(Plan("inv", (spec,), (), None).to_dict()))
    done = _source(tmp_path / "plan.json", tmp_path / "out", *options)
    assert done.returncode == 2 and error in done.stderr and not (tmp_path / "out").exists()


def test_a_plan_measured_on_another_machine_or_stack_is_not_continued_here(tmp_path):
    """A later window on another kind of machine (an H200 where the plan began on an H100) or stack would pool both
    into each run: the runner refuses before it writes anything; on the same machine, it goes on."""
    from compilebench.harness import fingerprint

    specs = tuple(
        TrialSpec(
            f"current/m/bs1/default/r{r}",
            "current",
            MODEL,
            1,
            VariantSpec("default"),
            r,
            "shared",
            "i.jpg",
            TimingSpec(),
        )
        for r in (0, 1)
    )
    plan = Plan("inv", specs, (), None)
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_dict()))
    out = tmp_path / "out"
    out.mkdir()
    here = fingerprint.collect("cpu")  # what this interpreter's trials record here
    for environment, refused in (
        (here, False),
        ({**here, "machine_fingerprint": "0a1b2c3d4e5f"}, True),
        ({**here, "torch_version": "2.11.0+cu130"}, True),
    ):
        row = TrialResult(specs[0].trial_id, "ok", environment=environment, eager_ms=(1.0,), compiled_ms=(0.5,))
        (out / "trials.jsonl").write_text(json.dumps(row.to_dict()) + "\n")
        problem = results_folder.machine_problem(plan, out, {"current": sys.executable})
        assert (problem is not None) == refused, problem
    assert "holds results of environment 'current' measured elsewhere (1 process on " in problem
    assert "torch 2.11.0+cu130, " in problem and f"), and this machine is {fingerprint.described(here)}: " in problem
    done = _source(tmp_path / "plan.json", out, timeout=300)
    assert done.returncode == 2 and "a run pools the processes of one machine and stack only" in done.stderr
    assert sorted(path.name for path in out.iterdir()) == ["trials.jsonl"]  # nothing written, nothing built


def test_a_plan_naming_an_environment_without_an_interpreter_is_refused():
    from compilebench.harness.launcher import plan_problem

    specs = tuple(
        TrialSpec(
            f"{label}/m/bs1/default/r0", label, MODEL, 1, VariantSpec("default"), 0, "shared", "i.jpg", TimingSpec()
        )
        for label in ("current", "B")
    )
    plan = Plan("inv", specs, (), None)
    assert "environments ['B']; give their interpreters with --python ENV=PATH" in plan_problem(
        plan, {"current": ""}, 0
    )
    assert plan_problem(plan, {"current": "", "B": "/b/python"}, 2) is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (None, "no plan readable at"),
        ("{", "not JSON"),
        ('{"a": 1}', "not a plan written by `compilebench.benchmark --export`"),
        ('{"invocation_id": "x", "trials": [{"trial_id": "t"}]}', "a trial or recipe lacks the key"),
    ],
)
def test_a_file_that_is_not_a_plan_is_refused_by_name(tmp_path, text, error):
    if text is not None:
        (tmp_path / "plan.json").write_text(text)
    done = _source(tmp_path / "plan.json", tmp_path / "out")
    assert done.returncode == 2 and error in done.stderr and str(tmp_path / "plan.json") in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_plan_ended_by_hand_names_the_processes_that_will_not_run(repo_root, tmp_path):
    """`runner.pyz --end` on a frozen window whose plan had five ResNet-50 processes and four came back."""
    record = tmp_path / "w1"
    shutil.copytree(repo_root / "tests/fixtures/h100-window", record)
    empty = _source(record / "plan.json", record / "elsewhere", "--end")
    assert empty.returncode != 0 and "no process of the plan has results" in empty.stderr
    assert not (record / "elsewhere" / "finished.json").exists()
    ended = _source(record / "plan.json", record / "results", "--end")
    assert ended.returncode == 0 and "with 4 of 5 processes; 1 will not run" in ended.stdout, ended.stderr
    finished = json.loads((record / "results" / "finished.json").read_text())
    assert (finished["trials"], finished["processes_not_run"], finished["ended"]) == (12, 1, "runner --end")
    assert "already" in _source(record / "plan.json", record / "results", "--end").stdout
