"""Trials with real torch.compile on a tiny model of a real class, each in its own process started by the launcher."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import descendants, running

from compilebench.analysis import plan
from compilebench.harness import checks, compiling, groups, launcher, trial, trial_process
from compilebench.harness.names import trial_stem
from compilebench.records.formats import TimingSpec, TrialResult, TrialSpec, VariantSpec

# Each module fixture's tests are one xdist group (its fixture runs once, on one worker); the others go anywhere:
# a group of their own would be one worker's long tail.
FROZEN_AND_DEFAULT = pytest.mark.xdist_group("trial-frozen-and-default")
ONE_CELL = pytest.mark.xdist_group("trial-one-cell")
TOGETHER = pytest.mark.xdist_group("trial-together")

FAST = TimingSpec(min_iters=5, min_time_s=0.2, max_time_s=5.0, warmup_iters=1, memory_iters=1)
# what every kind of trial process has done, in order, by the time eager is measured (trial.start_process)
STARTED_MOMENTS = (
    "imported",
    "started",
    "model code imported",
    "checkpoint read",
    "on the device",
    "loaded",
    "eager measured",
)


def _spec(tiny, variant, replicate=0, cache="shared", **timing):
    model, image = tiny
    spec = TimingSpec(**{**FAST.__dict__, **timing})
    return TrialSpec(
        f"current/tiny/bs2/{variant.name}/r{replicate}", "current", model, 2, variant, replicate, cache, image, spec
    )


def _run(tmp_path, spec, timeout_s=600.0, cache_dir=None):
    return trial_process.run_trial_process(spec, sys.executable, tmp_path, cache_dir, timeout_s)


@pytest.fixture(scope="module")
def frozen_and_default(tiny_resnet, tmp_path_factory):
    """One real compiled trial per variant, shared by the tests that read them (a tiny model compiles in seconds
    on the session cache)."""
    work = tmp_path_factory.mktemp("trials")
    return {
        name: _run(work, _spec(tiny_resnet, variant))
        for name, variant in (
            ("default", VariantSpec("default")),
            ("freezing", VariantSpec("freezing", inductor={"freezing": True})),
        )
    }


@FROZEN_AND_DEFAULT
@pytest.mark.slow
def test_a_compiled_trial_measures_paired_samples(frozen_and_default):
    result = frozen_and_default["default"]
    assert result.status == "ok", result.error
    assert len(result.eager_ms) == len(result.compiled_ms) >= 5  # paired, same count
    assert result.compile_s > 0 and result.eager_first_call_s > 0 and result.wall_s > result.compile_s
    assert result.health.graph_count == 1 and result.health.graph_break_count == 0
    assert result.health.recompile_count == 0 and not result.health.fell_back_to_eager
    assert result.task_agreement == 1.0 and result.max_rel_diff < 1e-3
    assert result.input_shapes == {"pixel_values": [2, 3, 32, 32]}
    assert result.environment["torch_version"] and result.environment["machine_fingerprint"]


@FROZEN_AND_DEFAULT
@pytest.mark.slow
def test_freezing_really_changes_the_compilation(frozen_and_default):
    frozen, plain = frozen_and_default["freezing"].health, frozen_and_default["default"].health
    assert (
        frozen.inductor_counters.get("binary_folding", 0) > 0 and plain.inductor_counters.get("binary_folding", 0) == 0
    )
    assert frozen.inductor_counters.get("pattern_matcher_count", 0) > plain.inductor_counters.get(
        "pattern_matcher_count", 0
    )


@pytest.mark.xdist_group("detection")  # a group of one: handed out early (conftest)
@pytest.mark.slow
def test_a_detection_trial_checks_its_boxes(tmp_path, image_640x480):
    """DETR (the doc's detection family) through a trial: a pixel mask among its inputs, top boxes compared by IoU."""
    from compilebench.harness import models

    spec = models.random_checkpoint("facebook/detr-resnet-50", "tiny", tmp_path)
    image = tmp_path / "image.jpg"
    image_640x480.save(image)
    result = _run(tmp_path, _spec((spec, str(image)), VariantSpec("default")))
    assert result.status == "ok", result.error
    assert result.task_check.startswith("top-10 boxes") and result.task_agreement == 1.0
    assert set(result.input_shapes) == {"pixel_values", "pixel_mask"}


@pytest.mark.slow
def test_bfloat16_channels_last_variant_runs_in_its_dtype(tiny_resnet, tmp_path):
    variant = VariantSpec("bf16-cl", dtype="bfloat16", channels_last=True)
    result = _run(tmp_path, _spec(tiny_resnet, variant))
    assert result.status == "ok", result.error
    assert result.variant_dtype == "bfloat16" and 1e-6 < result.max_rel_diff < 5e-2  # really bf16, within tolerance


@pytest.mark.slow
def test_a_compile_error_is_recorded_and_eager_is_still_timed(tiny_resnet, tmp_path):
    variant = VariantSpec("broken", inductor={"cpp.cxx": ("/nonexistent/c++",), "fx_graph_cache": False})
    result = _run(tmp_path, _spec(tiny_resnet, variant), cache_dir=tmp_path / "empty-cache")
    assert result.status == "compile_error" and "nonexistent" in result.error
    assert len(result.eager_ms) >= 5 and not result.compiled_ms  # the eager baseline survives


@pytest.mark.slow
def test_an_option_this_torch_lacks_is_unsupported_and_eager_is_still_timed(tiny_resnet, tmp_path):
    """What an old stack cannot run (torch 2.0's inductor had no `freezing`) is `unsupported` with its reason: here an
    option no torch has, in a real trial process."""
    variant = VariantSpec("future", inductor={"option_of_a_later_release": True})
    result = _run(tmp_path, _spec(tiny_resnet, variant))
    assert result.status == "unsupported" and "has no option option_of_a_later_release" in result.error
    assert len(result.eager_ms) >= 5 and not result.compiled_ms


def test_timeout_ends_the_trial_and_its_group(tiny_resnet, tmp_path):
    result = _run(tmp_path, _spec(tiny_resnet, VariantSpec("default"), min_time_s=60.0, max_time_s=60.0), 1.0)
    assert result.status == "timeout" and not groups.LIVE


def test_missing_checkpoint_is_an_error(tiny_resnet, tmp_path):
    model, image = tiny_resnet
    spec = _spec(
        (model.__class__(**{**model.__dict__, "checkpoint": str(tmp_path / "nope")}), image), VariantSpec("default")
    )
    result = _run(tmp_path, spec)
    assert result.status == "error" and "nope" in result.error


@pytest.mark.slow
def test_a_trial_runs_on_the_malloc_it_was_given_and_records_it(tiny_resnet, tmp_path):
    try:
        trial_process.malloc_to_preload("jemalloc")
    except trial_process.MallocMissing as missing:
        pytest.skip(str(missing))  # tests/test_fingerprint.py checks the error itself
    result = _run(tmp_path, _spec(tiny_resnet, VariantSpec("eager", compile=False), malloc="jemalloc"))
    assert result.status == "ok", result.error
    assert result.environment["malloc"] == "jemalloc" and len(result.eager_ms) >= 5


def test_a_segfaulting_trial_is_recorded_as_crashed(tiny_resnet, tmp_path):
    """A real SIGSEGV sent to the trial process this test's launcher started, by its PID, mid-run."""
    spec = _spec(tiny_resnet, VariantSpec("default"), min_time_s=60.0, max_time_s=60.0)

    def segfault_our_trial():
        deadline = time.time() + 120
        while time.time() < deadline and not groups.LIVE:
            time.sleep(0.05)
        time.sleep(3)  # let it load and start
        for process in list(groups.LIVE):
            os.kill(process.pid, signal.SIGSEGV)

    killer = threading.Thread(target=segfault_our_trial)
    killer.start()
    result = _run(tmp_path, spec)
    killer.join()
    assert result.status == "crashed" and "SIGSEGV" in result.error


def test_a_trial_a_stop_ends_in_a_pools_thread_is_no_result_and_no_trial_starts_after_it(tiny_resnet, tmp_path):
    """The stop's handler as SIGTERM runs it (in the main thread) while a trial runs in another thread, as in the
    prime's pool and the slots' threads: the trial's group ends, and the thread raises rather than reporting a
    trial "crashed" by the stop, which a resume would take as its result."""
    spec = _spec(tiny_resnet, VariantSpec("default"), min_time_s=60.0, max_time_s=60.0)
    outcome = {}

    def in_a_pool():
        try:
            outcome["result"] = _run(tmp_path / "pool", spec)
        except groups.Stopped:
            outcome["stopped"] = True

    saved = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    groups.end_trials_on_signal()
    handler = signal.getsignal(signal.SIGTERM)
    for number, previous in saved.items():
        signal.signal(number, previous)
    worker = threading.Thread(target=in_a_pool)
    worker.start()
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not groups.LIVE:
            time.sleep(0.05)
        [process] = list(groups.LIVE)
        with pytest.raises(SystemExit):
            handler(signal.SIGTERM, None)
        worker.join(timeout=60)
        assert outcome == {"stopped": True} and not running(process.pid)
        with pytest.raises(groups.Stopped):
            _run(tmp_path / "after", spec)
        assert not (tmp_path / "after").exists()  # refused before anything was written
    finally:
        groups.STOPPING.clear()


def test_exit_statuses_name_their_cause():
    assert trial_process.exit_status(-9, oom_killed=True)[0] == "oom"
    status, why = trial_process.exit_status(-9, oom_killed=False)
    assert status == "killed" and "not by the OOM killer" in why
    assert trial_process.exit_status(-11, oom_killed=False) == ("crashed", "ended by signal 11 (SIGSEGV)")
    assert trial_process.exit_status(3, oom_killed=False) == ("crashed", "exited with 3")


def test_oom_kills_include_the_kernels_machine_wide_count():
    vmstat = Path("/proc/vmstat")
    if not vmstat.exists():
        pytest.skip("no /proc/vmstat on this system")
    [machine] = [int(line.split()[1]) for line in vmstat.read_text().splitlines() if line.startswith("oom_kill ")]
    assert trial_process.oom_kills() >= machine  # the machine's count, plus this cgroup's where it has one


def test_failed_first_trial_is_not_repeated(tiny_resnet, tmp_path):
    """The warm replicates of a run whose cold trial timed out are recorded without starting a process."""
    specs = [
        _spec(tiny_resnet, VariantSpec("default"), replicate=r, cache="cold" if r == 0 else "warm") for r in range(3)
    ]
    done = {specs[0].trial_id: TrialResult.failed(specs[0].trial_id, "timeout", "trial exceeded 1 s")}
    seen = []
    results = launcher.run_trials(
        specs,
        {"current": "/nonexistent/python"},
        tmp_path,
        60,
        done,
        lambda specs, ended, resumed: seen.append((specs[0].trial_id, resumed)),
    )
    assert [r.status for r in results] == ["timeout"] * 3 and "not run" in results[1].error
    assert seen == [(specs[0].trial_id, True), (specs[1].trial_id, False), (specs[2].trial_id, False)]


def test_oom_is_recognised_through_the_exception_chain():
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("backend='inductor' raised") from inner
    except RuntimeError as outer:
        assert trial.classify_error(outer, "compile") == "oom"
    assert trial.classify_error(RuntimeError("DefaultCPUAllocator: can't allocate memory"), "run") == "oom"
    assert trial.classify_error(ValueError("bad"), "compile") == "compile_error"
    assert trial.classify_error(ValueError("bad"), "run") == "error"


@pytest.mark.parametrize(
    ("mode", "cudagraphs"),
    [("default", False), ("reduce-overhead", True), ("max-autotune", True), ("max-autotune-no-cudagraphs", False)],
)
def test_cuda_graph_variants_are_marked_and_warmed_up(mode, cudagraphs):
    """max-autotune turns CUDA graphs on too; with warmup_iters 0 graph recording would be timed (CPU-checkable)."""
    variant = VariantSpec(mode, mode=mode)
    assert compiling.uses_cudagraphs(variant, "cuda") is cudagraphs
    assert compiling.uses_cudagraphs(variant, "cpu") is False
    assert compiling.warmup_calls(variant, TimingSpec(device="cuda", warmup_iters=0)) == (3 if cudagraphs else 0)
    assert compiling.uses_cudagraphs(VariantSpec("x", inductor={"triton.cudagraphs": True}), "cuda:1")


def test_tf32_tolerance():
    assert compiling.reduced_float32(TimingSpec(device="cuda", cudnn_allow_tf32=True))
    assert not compiling.reduced_float32(TimingSpec(device="cpu"))
    assert compiling.reduced_float32(TimingSpec(device="cpu", float32_matmul_precision="high"))
    assert checks.numeric_tolerance(1e-3, "float32", reduced_float32=True) == checks.numeric_tolerance(1e-3, "float16")
    assert checks.numeric_tolerance(1e-3, "float32") == 1e-3


def test_a_capped_trials_memory_is_its_whole_process_group(tmp_path):
    """The launcher's memory reading sums the group a trial leads (its compile workers too), PSS: a child holding
    300 MiB in a group this test starts reads as at least that."""
    code = "import subprocess, sys, time\nx = bytearray(300 * 2**20)\nx[::4096] = b'x' * len(x[::4096])\ntime.sleep(30)"
    holder = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.time() + 30
        reading = 0.0
        while time.time() < deadline and reading < 300:
            reading = trial_process.group_memory_mib(holder.pid)
            time.sleep(0.2)
        assert reading >= 300
    finally:
        groups.end_group(holder)


LAUNCH = """
import json, sys
from pathlib import Path
from compilebench.harness import trial_process
from compilebench.records.formats import TrialSpec
spec = TrialSpec.from_dict(json.loads(Path(sys.argv[1]).read_text()))
trial_process.run_trial_process(spec, sys.executable, Path(sys.argv[2]), None, 600.0)
"""


@pytest.mark.slow
def test_a_trial_does_not_outlive_its_killed_launcher(tiny_resnet, tmp_path):
    """kill -9 of the process that launched a trial (the benchmark) ends the trial too, not minutes later."""
    spec = _spec(tiny_resnet, VariantSpec("eager", compile=False), min_time_s=300.0, max_time_s=300.0)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec.to_dict()))
    launching = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, str(spec_path), str(tmp_path / "work")], start_new_session=True
    )
    children = Path(f"/proc/{launching.pid}/task/{launching.pid}/children")
    trial_pid, deadline = None, time.time() + 120
    while trial_pid is None and time.time() < deadline:
        listed = children.read_text().split() if children.exists() else []
        trial_pid = int(listed[0]) if listed else None
        time.sleep(0.1)
    assert trial_pid is not None, "the launcher started no trial"
    time.sleep(8)  # the trial is past its imports, timing for minutes
    assert running(trial_pid)
    os.kill(launching.pid, signal.SIGKILL)
    launching.wait()
    try:
        deadline = time.time() + 20
        while running(trial_pid) and time.time() < deadline:
            time.sleep(0.1)
        assert not running(trial_pid), "the trial outlived its launcher"
    finally:
        if running(trial_pid):
            os.kill(trial_pid, signal.SIGKILL)  # started by the launcher this test started


VARIANTS = [
    VariantSpec("eager", compile=False),
    VariantSpec("default"),
    VariantSpec("freezing", inductor={"freezing": True}),
]


@pytest.fixture(scope="module")
def one_cell(tiny_resnet, tmp_path_factory):
    """One cell as the pipeline runs it: a cold compile-only process per compiled variant, each on an empty cache
    merged into the cell's warm cache, then two timing processes (eager, default and freezing as arms)."""
    model, image = tiny_resnet
    timing = TimingSpec(**{**FAST.__dict__, "warmup_s": 0.1})
    specs = plan.trials([model], [2], VARIANTS, ["current"], 2, 1, False, image, timing, 0)
    work = tmp_path_factory.mktemp("cell")
    results = launcher.run_trials(specs, {"current": sys.executable}, work, 600)
    return specs, {result.trial_id: result for result in results}, work


@pytest.fixture(scope="module")
def together(tiny_resnet, tmp_path_factory):
    """A/A of one cell with its blocks run together (benchmark.together): two labels on this interpreter, a cold block
    of default (a cold process each, compiling on an empty cache, then timing) and a timing block (eager and default
    as arms, on each label's warm cache), each block's two processes taking turns; then the same plan again with one
    label's timing process missing from what was done, as a resumed invocation has it."""
    model, image = tiny_resnet
    timing = TimingSpec(**{**FAST.__dict__, "warmup_s": 0.1, "together": True})
    labels = ["current", "current#2"]
    specs = plan.trials([model], [2], VARIANTS[:2], labels, 1, 1, False, image, timing, 0)
    work = tmp_path_factory.mktemp("together")
    pythons = dict.fromkeys(labels, sys.executable)
    first = {result.trial_id: result for result in launcher.run_trials(specs, pythons, work, 600)}
    lost = {spec.trial_id for spec in specs if spec.environment == "current#2" and spec.kind == "arm"}
    ran_again: list[list[str]] = []
    done = {trial_id: result for trial_id, result in first.items() if trial_id not in lost}
    launcher.run_trials(
        specs,
        pythons,
        work,
        600,
        done,
        lambda group, ended, resumed: ran_again.append([s.trial_id for s in group]) if not resumed else None,
    )
    return specs, first, lost, ran_again


@TOGETHER
@pytest.mark.slow
def test_a_process_killed_in_a_block_run_together_costs_that_block_which_runs_again(tiny_resnet, tmp_path):
    """A `kill -9` of one process of a timing block run together: its partner finishes, the killed environment's
    next planned block still runs (a kill says nothing of the trial: not left out as a failure that would repeat),
    the loop measures the killed block again, and both environments' runs end ok with their blocks paired."""
    from compilebench.analysis import adaptive, run_record, runs
    from compilebench.records.invocation import Context, LoopSettings, Validity

    model, image = tiny_resnet
    timing = TimingSpec(**{**FAST.__dict__, "min_time_s": 2.0, "warmup_s": 0.1, "together": True})
    labels = ["current", "current#2"]
    specs = plan.trials([model], [2], VARIANTS[:2], labels, 2, 0, True, image, timing, 0)
    victim = next(s for s in specs if s.environment == "current#2" and s.replicate == 0 and s.kind == "arm")
    victim_spec = tmp_path / "trials" / f"{trial_stem(victim.process)}.spec.json"
    pythons = dict.fromkeys(labels, sys.executable)
    killed: list[int] = []

    def kill_the_victim() -> None:  # once its process runs (its spec file named on its command line), kill -9 it
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            for pid in descendants(os.getpid()):
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if str(victim_spec).encode() in command and time.time() - victim_spec.stat().st_mtime > 1.0:
                    os.kill(pid, signal.SIGKILL)  # a process this test's launcher started, by its PID
                    killed.append(pid)
                    break
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_the_victim)
    watcher.start()
    results: dict[str, TrialResult] = {}
    context = Context("inv", "t", "tiny", "test", "", "embedded-fallback", "a5" * 32, Validity(5, 0.2, 1e6))
    environments = {label: run_record.EnvironmentInfo(label, label, "k", {}) for label in labels}

    def run(pending):
        results.update((r.trial_id, r) for r in launcher.run_trials(pending, pythons, tmp_path, 600, dict(results)))
        return results

    settings = LoopSettings(2, 0, 4, 0.0, 0.0, 0.0, 0.0, 0.0)  # no target, no budget: planned blocks and re-runs
    try:
        trials, records, _ = adaptive.measure(
            specs,
            labels,
            settings,
            run,
            lambda t, r: runs.run_records(
                t, r, environments, {model.model_id: run_record.ModelInfo("", "", None)}, context
            ),
        )
    finally:
        watcher.join()
    assert killed, "the victim's process was never seen running"
    assert {results[s.trial_id].status for s in specs if s.process == victim.process} == {"killed"}
    ran = {(s.environment, s.replicate): results[s.trial_id].status for s in trials if s.variant.compile}
    assert ran == {
        ("current", 0): "ok",
        ("current#2", 0): "killed",
        ("current", 1): "ok",
        ("current#2", 1): "ok",
        ("current", 2): "ok",
        ("current#2", 2): "ok",
    }  # the killed block measured again, as r2
    assert all(record.identity.status == "ok" for record in records), [
        (r.identity.run_uid, r.identity.status, r.identity.error) for r in records
    ]
    compiled = {r.env.environment: r for r in records if r.cell.variant == "default"}
    assert [p.status for p in compiled["current#2"].process_results] == ["killed", "ok", "ok"]
    assert compiled["current#2"].identity.processes == compiled["current"].identity.processes - 1 == 2


@TOGETHER
@pytest.mark.slow
def test_a_block_run_together_takes_turns_and_a_resumed_block_runs_only_what_it_lacks(together):
    specs, results, lost, ran_again = together
    pair = [results[spec.trial_id] for spec in specs if spec.variant.name == "default" and spec.kind == "arm"]
    assert [r.status for r in pair] == ["ok", "ok"], [r.error for r in pair]
    assert abs(pair[0].started_at - pair[1].started_at) < 5  # alive together: started at once
    assert all(r.turn_wait_s > 0.2 for r in pair)  # each waited while the other took its turns
    assert all(r.own_s == pytest.approx(r.wall_s - r.turn_wait_s) and r.own_s < r.wall_s for r in pair)
    # every timed round knows its turn: after the set-up's (1) and the warm-up's, never going back
    assert all(len(r.round_turns) == len(r.eager_ms) and r.round_turns[0] > 1 for r in pair)
    assert all(list(r.round_turns) == sorted(r.round_turns) for r in pair)
    # the machine is read during a process's own turns only: its window is its timed seconds, not the timing's span
    # with the other's turns in it (the other test worker's CPU, on the other hand, is in `others_cores`)
    assert all(r.disturbance["window_s"] == pytest.approx(r.timed_s, rel=0.25, abs=0.3) for r in pair)
    later = max(pair, key=lambda r: r.timeline_s["its turn"])  # its first turn came after the other's set-up
    assert 0 < later.startup_s < later.timeline_s["started"] - 1  # its start-up leaves that wait out
    assert all(len(r.compiled_ms) == len(r.eager_ms) >= 5 for r in pair)
    assert len(lost) == 2 and ran_again == [sorted(lost, key=[s.trial_id for s in specs].index)]  # partner's kept


@TOGETHER
@pytest.mark.slow
def test_a_cold_block_runs_together_each_compiling_alone_then_timing_in_turns(together):
    """Each cold process compiles in its set-up turn, while the other waits (its cold compile has the machine alone),
    then both time eager and the variant in alternating turns; each fills its label's warm cache, inductor's start-up
    network included, which the timing processes then compile from."""
    specs, results, _, _ = together
    cold = [results[spec.trial_id] for spec in specs if spec.kind == "cold"]
    assert [r.status for r in cold] == ["ok", "ok"], [r.error for r in cold]
    assert abs(cold[0].started_at - cold[1].started_at) < 5 and all(r.turn_wait_s > 0.2 for r in cold)
    first, later = sorted(cold, key=lambda r: r.timeline_s["its turn"])
    # the later one's set-up turn (load, compile) began once the first had compiled (the clocks of two processes'
    # timelines agree to a fraction of a second), so its wait covered that compile
    assert (
        later.timeline_s["its turn"] + later.started_at
        > first.timeline_s["default compiled"] + (first.started_at) - 0.5
        and later.timeline_s["its turn"] > first.compile_s > 1
    )
    assert later.startup_s < later.timeline_s["its turn"]  # its start-up leaves that wait out
    assert all(r.compile_s > 0 and r.health.inductor_counters.get("fxgraph_cache_hit", 0) == 0 for r in cold)
    assert all(
        len(r.compiled_ms) == len(r.eager_ms) == len(r.round_turns) >= 5 and r.round_turns[0] > 1 and r.peak_mem_mib > 0
        for r in cold
    )
    moments = [
        "its turn",
        *STARTED_MOMENTS,
        "default compiled",
        "compile workers stopped",
        "warmed up",
        "timed",
        "start-up network compiled",
        "measured",
    ]
    assert all(list(r.timeline_s) == moments for r in cold), [list(r.timeline_s) for r in cold]
    for label in ("current", "current#2"):  # each label's warm cache: its own cold process's kernels, the start-up's
        arm = next(
            results[s.trial_id] for s in specs if s.environment == label and s.kind == "arm" and s.variant.compile
        )
        assert arm.health.inductor_counters.get("fxgraph_cache_hit", 0) > 0


@ONE_CELL
@pytest.mark.slow
def test_a_timing_process_pairs_every_arm_with_eager_and_each_arm_compiles_its_own_graph(one_cell):
    specs, results, _ = one_cell
    process = [spec for spec in specs if spec.process_id.endswith("/r0")]
    eager, *arms = [results[spec.trial_id] for spec in process]
    assert all(result.status == "ok" for result in (eager, *arms)), [r.error for r in (eager, *arms)]
    assert all(arm.eager_ms == eager.eager_ms and len(arm.compiled_ms) == len(eager.eager_ms) >= 5 for arm in arms)
    assert sorted(arm.compile_position for arm in arms) == [0, 1] and eager.arms[0] == "eager"
    assert eager.inductor_startup_s > 0 and eager.warmup_s >= 0.1 and eager.replay_max_rel_diff is None
    # the trial records how its OpenMP threads wait, as it inherited it (conftest.py: they sleep in the tests)
    assert f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}" in eager.environment["threading_variables"].split()
    by_name = {spec.variant.name: results[spec.trial_id] for spec in process}
    frozen, plain = by_name["freezing"].health, by_name["default"].health
    # Beside a default arm in one process, freezing still froze (dynamo reuses a graph for an equal backend, and a
    # config patch alone does not make the backends differ): inductor folded the weights for it, not for default.
    assert frozen.inductor_counters.get("binary_folding", 0) > 0 == plain.inductor_counters.get("binary_folding", 0)
    assert frozen.graph_count == plain.graph_count == 1 and frozen.recompile_count == 0
    assert not [reason for arm in arms for reason in arm.health.recompile_reasons]  # another arm's backend is none
    assert all(arm.replay_max_rel_diff < 1e-3 for arm in arms)  # a call after warm-up checked too
    compiled = [f"{name} compiled" for name in eager.arms[1:]]  # in the order the arms compiled
    moments = [
        *STARTED_MOMENTS,
        "inductor started",
        *compiled,
        "compile workers stopped",
        "warmed up",
        "timed",
        "measured",
    ]
    assert list(eager.timeline_s) == moments and all(arm.timeline_s == eager.timeline_s for arm in arms)
    ages = list(eager.timeline_s.values())
    assert ages == sorted(ages) and ages[1] == pytest.approx(eager.startup_s, abs=0.01) and ages[-1] < eager.wall_s


@ONE_CELL
@pytest.mark.slow
def test_cold_processes_compile_alone_and_their_caches_warm_the_timing_processes(one_cell):
    specs, results, work = one_cell
    cold = [results[spec.trial_id] for spec in specs if spec.kind == "cold"]
    assert len(cold) == 2 and all(r.status == "ok" and r.compile_s > 0 for r in cold)
    # one environment: nothing to pair their rounds with, so they do not time (one stack's intervals are its timing
    # processes'); in a comparison they do (test_a_cold_block_runs_together_each_compiling_alone_then_timing_in_turns)
    assert not any(spec.timed for spec in specs if spec.kind == "cold")
    assert all(not r.compiled_ms and not r.eager_ms and r.timed_s is None and r.turn_wait_s is None for r in cold)
    moments = [[*STARTED_MOMENTS, f"{r.trial_id.split('/')[3]} compiled", "measured"] for r in cold]
    moments[0][-1:-1] = ["start-up network compiled"]  # the first to fill the cell's warm cache, measured first
    assert [list(r.timeline_s) for r in cold] == moments
    assert all(r.peak_mem_mib > 0 and r.health.inductor_counters.get("fxgraph_cache_hit", 0) == 0 for r in cold)
    default_arms = [results[spec.trial_id] for spec in specs if spec.kind == "arm" and spec.variant.name == "default"]
    assert all(r.health.inductor_counters.get("fxgraph_cache_hit", 0) > 0 for r in default_arms)  # merged, warm
    assert not (work / "inductor-cache-cold").exists() or not any((work / "inductor-cache-cold").rglob("*.so"))
    # The timing processes compiled no kernel: every one in the warm cache came from a cold process (merged with its
    # time kept), inductor's start-up network's too, so the first timing process's start-up is as warm as the later.
    first_timing = min(results[spec.trial_id].started_at for spec in specs if spec.kind == "arm")
    kernels = list((work / "inductor-cache" / specs[-1].warm_cache_key).rglob("*.so"))
    assert kernels and all(kernel.stat().st_mtime < first_timing for kernel in kernels), [
        kernel.name for kernel in kernels if kernel.stat().st_mtime >= first_timing
    ]


@pytest.mark.slow
def test_an_arm_whose_variant_already_failed_is_left_out_of_later_processes(tiny_resnet, tmp_path):
    """The cold process of freezing ended compile_error: the timing process runs eager and default only."""
    model, image = tiny_resnet
    specs = plan.trials([model], [2], VARIANTS, ["current"], 1, 1, True, image, FAST, 0)  # shared: no cold ones
    first = next(spec for spec in specs if spec.variant.name == "freezing")
    seen = []
    failed_first = [plan.cold_trial("current", model, 2, first.variant, 0, image, FAST)]
    done = {failed_first[0].trial_id: TrialResult.failed(failed_first[0].trial_id, "compile_error", "no compiler")}

    def record(specs, ended, resumed):
        seen.extend((spec.variant.name, r.status, r.error) for spec, r in zip(specs, ended, strict=True))

    launcher.run_trials(failed_first + specs, {"current": sys.executable}, tmp_path, 600, done, record)
    by_arm = {name: (status, error) for name, status, error in seen[1:]}
    assert by_arm["freezing"][0] == "compile_error" and "not run" in by_arm["freezing"][1]
    assert by_arm["eager"][0] == by_arm["default"][0] == "ok", by_arm  # the process ran without the failed arm


def test_what_compiling_measured_is_named_as_the_result_names_it():
    """compile_variant's record is spread into TrialResult by name: a field renamed on one side only fails here, not in
    a trial process on another machine."""
    import dataclasses

    from compilebench.records.formats import TrialResult

    measured = {item.name for item in dataclasses.fields(compiling.Compiled)} - {"call"}
    assert measured <= {item.name for item in dataclasses.fields(TrialResult)}
    import torch

    assert set(checks.compare_outputs(torch.ones(2), torch.ones(2))) <= measured  # what the record copies of the checks
