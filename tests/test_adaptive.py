"""The adaptive loop: more blocks to the widest cells within the budget and the cap, a disturbed process re-run, a cold
block where cold compile is widest; on hand-made results, a real trial made busy on purpose, and a real `dvc repro`."""

import json
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import init_project, make_project, project_env, run_ok, set_params

from compilebench import report
from compilebench.analysis import adaptive, noise_record, pricing, run_record, runs, stats, validity
from compilebench.benchmark import forecast
from compilebench.harness import trial_process
from compilebench.records.formats import CompileHealth, ModelSpec, TimingSpec, TrialResult, TrialSpec, VariantSpec
from compilebench.records.invocation import Context, LoopSettings, Validity

CONTEXT = Context(
    "inv",
    "s",
    "full",
    "vm",
    "abc",
    "embedded-fallback",
    "00",
    Validity(min_iters=3, min_time_s=0.1, max_cv=1e6, disturbed_cores=0.5),
)
ENVIRONMENTS = {label: run_record.EnvironmentInfo(label, "current", "k", {}, ()) for label in ("A", "B")}


def _bench(target=None, **changes):
    """The loop's settings: two blocks planned, a cap of five, ten minutes, a speedup target of +-5%."""
    target = target or SimpleNamespace(speedup=0.05, compile=0.0, latency=0.0)
    values = {
        "replicates": 2,
        "cold_replicates": 1,
        "max_replicates": 5,
        "budget_min": 10.0,
        "disturbed_cores": 0.5,
        "target_speedup": target.speedup,
        "target_compile": target.compile,
        "target_latency": target.latency,
    }
    return LoopSettings(**{**values, **changes})


def _spec(label, model, replicate, cache="warm"):
    spec_model = ModelSpec(model, model.upper(), "image-classification", "X", "ckpt")
    return TrialSpec(
        f"{label}/{model}/bs1/default/r{replicate}",
        label,
        spec_model,
        1,
        VariantSpec("default"),
        replicate,
        cache,
        "i.jpg",
        TimingSpec(),
    )


def _result(spec, compiled_ms, compile_s=3.0, wall_s=10.0, **extra):
    return TrialResult(
        spec.trial_id,
        "ok",
        environment={"device": "cpu", "machine_fingerprint": "f"},
        eager_ms=(10.0,) * 5,
        compiled_ms=(compiled_ms,) * 5,
        compile_s=compile_s,
        timed_s=1.0,
        eager_first_call_s=0.1,
        peak_mem_mib=1.0,
        health=CompileHealth(graph_count=1),
        wall_s=wall_s,
        max_abs_diff=0.0,
        max_rel_diff=0.0,
        task_agreement=1.0,
        **extra,
    )


def _state(spreads, blocks=2, **per_trial):
    """Two stacks A and B, a model per spread: B's compiled latency moves by +-spread from block to block."""
    trials, results = [], {}
    for model, spread in spreads.items():
        for replicate in range(blocks):
            for label in ("A", "B"):
                spec = _spec(label, model, replicate, "cold" if replicate == 0 else "warm")
                wobble = 1 + (spread if replicate % 2 else -spread) if label == "B" else 1.0
                trials.append(spec)
                results[spec.trial_id] = _result(spec, 5.0 * wobble, **per_trial)
    return trials, results, _records(trials, results)


def _records(trials, results):
    models = {spec.model.model_id: run_record.ModelInfo("random-init", "card", 1) for spec in trials}
    return runs.run_records(trials, results, ENVIRONMENTS, models, CONTEXT)


def test_more_blocks_go_to_the_widest_cell_first_and_stop_at_the_budget():
    trials, results, records = _state({"narrow": 0.03, "wild": 0.2})  # 8 trials of 10 s: 80 s spent
    added = adaptive.extend(trials, results, records, ["A", "B"], _bench(budget_min=1.0), None)  # 60 s each
    assert [spec.model.model_id for spec in added] == ["wild", "wild", "narrow", "narrow"]  # the widest first
    assert {spec.replicate for spec in added} == {2} and {spec.environment for spec in added} == {"A", "B"}
    tight = adaptive.extend(trials, results, records, ["A", "B"], _bench(budget_min=50 / 60), None)
    assert [spec.model.model_id for spec in tight] == ["wild", "wild"]  # 80 s + a block of 20 s: one fits
    assert adaptive.extend(trials, results, records, ["A", "B"], _bench(budget_min=40 / 60), None) == []


def test_a_series_adds_blocks_only_to_its_steps_still_wide_and_prices_them_by_their_stacks():
    """A series A -> B -> C: B equals A in every block, C moves +-20% around B. The step B -> C is wide, A -> B is
    not: the added block holds B and C only (A is in no step still short), priced as two processes of the three of a
    planned block. A step one side of which measured nothing gets none."""
    labels = ["A", "B", "C"]
    environments = {label: run_record.EnvironmentInfo(label, "current", "k", {}, ()) for label in labels}
    models = {"m": run_record.ModelInfo("random-init", "card", 1)}
    trials, results = [], {}
    for replicate in range(2):
        for label in labels:
            spec = _spec(label, "m", replicate, "cold" if replicate == 0 else "warm")
            wobble = 1 + (0.2 if replicate % 2 else -0.2) if label == "C" else 1.0
            trials.append(spec)
            results[spec.trial_id] = _result(spec, 5.0 * wobble)
    records = runs.run_records(trials, results, environments, models, CONTEXT)
    widths = adaptive.widths(
        [adaptive.compare.ComparedRun.of(r) for r in records], labels, _bench().targets, None, 0.05
    )
    assert {(w.environments, w.met) for w in widths} == {(("A", "B"), True), (("B", "C"), False)}
    added = adaptive.extend(trials, results, records, labels, _bench(), None)
    assert {spec.environment for spec in added} == {"B", "C"} and {spec.replicate for spec in added} == {2}
    # 60 s spent (six processes of 10 s); a block of B and C costs 20 s: it fits 80 s, not 79
    assert adaptive.extend(trials, results, records, labels, _bench(budget_min=80 / 60 / 3), None) == added
    assert adaptive.extend(trials, results, records, labels, _bench(budget_min=79 / 60 / 3), None) == []
    failed = [
        replace(r, identity=replace(r.identity, status="compile_error")) if r.env.environment == "C" else r
        for r in records
    ]
    assert adaptive.extend(trials, results, failed, labels, _bench(), None) == []


def test_a_block_run_together_counts_its_wall_time_against_the_budget_not_its_processes_seconds():
    """The budget is the user's wait: a block whose A and B overlap costs from the first start to the last end. The
    same 8 processes of 10 s, counted one after another, leave no room in 80 s; run together (12 s a block), they
    leave room for a block of each model."""
    trials, results, records = _state({"narrow": 0.03, "wild": 0.2})
    assert adaptive.extend(trials, results, records, ["A", "B"], _bench(budget_min=40 / 60), None) == []
    for index, spec in enumerate(trials):  # block i starts at 100 i; B two seconds after A
        start = 1000.0 + 100 * (index // 2) + 2 * (spec.environment == "B")
        results[spec.trial_id] = replace(results[spec.trial_id], started_at=start)
    walls = adaptive.block_walls(results, trials)
    assert sorted(walls.values()) == [12.0] * 4
    added = adaptive.extend(trials, results, records, ["A", "B"], _bench(budget_min=40 / 60), None)
    assert [spec.model.model_id for spec in added] == ["wild", "wild", "narrow", "narrow"]  # 48 s + 2 x 12 s <= 80 s
    resumed = {**results, trials[1].trial_id: replace(results[trials[1].trial_id], started_at=9000.0)}
    assert sorted(adaptive.block_walls(resumed, trials).values()) == [12.0, 12.0, 12.0, 20.0]  # never past the sum


def test_the_cap_and_a_met_target_end_the_loop():
    trials, results, records = _state({"wild": 0.2}, blocks=5)
    assert adaptive.extend(trials, results, records, ["A", "B"], _bench(max_replicates=5), None) == []
    trials, results, records = _state({"steady": 0.0}, blocks=3)  # identical blocks: a zero-width interval
    assert adaptive.extend(trials, results, records, ["A", "B"], _bench(), None) == []
    [reached] = adaptive.shortfalls(records, ["A", "B"], _bench(), None)
    assert reached["met"] and reached["more_blocks"] == 0


def test_the_report_shows_every_targeted_interval_of_a_run_not_only_its_widest():
    """A run whose cold compile has no interval yet still shows whether its speedup reached the target."""
    *_, records = _state({"steady": 0.0, "wild": 0.2}, blocks=3)
    every = SimpleNamespace(speedup=0.05, compile=0.05, latency=0.10)
    reached = adaptive.shortfalls(records, ["A", "B"], _bench(target=every), None)
    wild = {row["metric"]: row for row in reached if row["model_id"] == "wild" and row["variant"] == "default"}
    assert list(wild) == ["eager_latency", "compiled_latency", "speedup", "compile_cold", "compile_warm"]
    assert wild["compile_cold"]["halfwidth_pct"] is None and wild["compile_cold"]["blocks"] == 1
    assert not wild["speedup"]["met"] and wild["speedup"]["more_blocks"] > 0
    table = report.precision_table(reached).set_index(["model", "variant"])
    assert table.loc[("steady", "default"), "speedup (±5%)"] == "±0.0% (3 blocks)"
    assert table.loc[("wild", "default"), "speedup (±5%)"].startswith("±78.9% (3 blocks): ~")
    assert table.loc[("wild", "default"), "compile cold (±5%)"] == "no CI (1 block)"
    assert table.loc[("steady", "default"), "reached"] == "no" and table.loc[("steady", "eager"), "reached"] == "yes"
    assert pd.isna(table.loc[("steady", "eager"), "speedup (±5%)"])


def test_a_disturbed_block_is_re_run_and_a_failed_run_is_not_extended():
    trials, results, records = _state({"steady": 0.0}, blocks=2)
    busy = trials[-1]
    results[busy.trial_id] = replace(results[busy.trial_id], disturbance={"others_cores": 1.2, "steal_cores": 0.0})
    records = _records(trials, results)
    added = adaptive.extend(trials, results, records, ["A", "B"], _bench(), None)
    assert [(spec.model.model_id, spec.replicate) for spec in added] == [("steady", 2), ("steady", 2)]
    spent = adaptive.extend(trials, results, records, ["A", "B"], _bench(budget_min=0.0), None)
    assert spent == added  # the budget spent: a planned block disturbed still runs again
    failed = [replace(r, identity=replace(r.identity, status="compile_error")) for r in records]
    assert adaptive.extend(trials, results, failed, ["A", "B"], _bench(), None) == []
    invalid = [
        replace(r, identity=replace(r.identity, status="invalid")) for r in records
    ]  # too noisy: more blocks can help
    assert adaptive.extend(trials, results, invalid, ["A", "B"], _bench(), None) == added
    mixed = [
        replace(r, identity=replace(r.identity, status="invalid", machines=2)) for r in records
    ]  # two machines: no block unmixes it
    assert adaptive.extend(trials, results, mixed, ["A", "B"], _bench(), None) == []
    one_side = [
        replace(r, identity=replace(r.identity, status="compile_error")) if r.env.environment == "B" else r
        for r in records
    ]  # A alone ok
    assert adaptive.extend(trials, results, one_side, ["A", "B"], _bench(), None) == []


def test_a_cold_block_where_cold_compile_is_the_widest():
    trials, results, records = _state({"m": 0.0}, blocks=2)
    for spec in trials:  # cold compiles that disagree, everything else steady
        if spec.cache == "cold":
            results[spec.trial_id] = replace(
                results[spec.trial_id], compile_s=20.0 if spec.environment == "A" else 30.0
            )
    records = _records(trials, results)
    target = SimpleNamespace(speedup=0.05, compile=0.05, latency=0.0)
    added = adaptive.extend(trials, results, records, ["A", "B"], _bench(target=target), None)
    assert added and all(spec.cache == "cold" for spec in added)
    assert all(
        spec.cache == "warm"
        for spec in adaptive.extend(
            trials,
            results,
            records,
            ["A", "B"],
            _bench(target=SimpleNamespace(speedup=0.05, compile=0.0, latency=0.10)),
            None,
        )
    )


@pytest.mark.slow
def test_a_process_made_busy_on_purpose_is_recorded_as_disturbed(tiny_resnet, tmp_path):
    """A busy loop (started here, ended by its PID) shares the cores while a real trial times: the trial records
    the other processes' CPU, and the run leaves the process out."""
    model, image = tiny_resnet
    timing = TimingSpec(min_iters=5, min_time_s=1.5, max_time_s=5.0, warmup_iters=1, memory_iters=1, num_threads=1)
    spec = TrialSpec(
        "current/tiny/bs2/default/r0", "current", model, 2, VariantSpec("default"), 0, "shared", image, timing
    )
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        result = trial_process.run_trial_process(spec, sys.executable, tmp_path, None, 600.0)
    finally:
        busy.kill()
        busy.wait()
    assert result.status == "ok", result.error
    assert result.disturbance["others_cores"] >= 0.7 and result.disturbance["window_s"] >= 1.5
    assert result.disturbance["migrations_per_s"] >= 0 and result.disturbance["preempted_per_s"] >= 0  # recorded
    assert result.compile_disturbance["window_s"] > 0  # the compile is watched too (its time is a measurement)
    assert validity.is_disturbed(result, 0.5) and not validity.is_disturbed(result, 0.0)  # 0 turns the check off
    compiled_only = replace(result, disturbance={"others_cores": 0.0}, compile_disturbance={"others_cores": 0.9})
    assert validity.is_disturbed(compiled_only, 0.5)


@pytest.mark.xdist_group("adaptive-repro")  # a group of one: handed out early (conftest)
@pytest.mark.slow
def test_dvc_repro_adds_blocks_until_the_cap_and_reports_what_it_reached(tmp_path):
    root = make_project(
        tmp_path,
        ["microsoft/resnet-50"],
        replicates=1,
        max_replicates=2,
        budget_min=30,
        cold_replicates=1,
        compile_cache="cold",
    )
    set_params(
        root, **{"benchmark.target.speedup": 0.001, "benchmark.target.compile": 0.0, "benchmark.target.latency": 0.0}
    )
    env = project_env()
    init_project(root, env, commit=False)
    done = run_ok(["dvc", "repro"], root, env)
    assert "adaptive: 2 more trial(s)" in done.stdout + done.stderr  # a timing process: eager and default
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    compiled = next(row for row in rows if row["variant"] == "default")
    processes = compiled["process_results"]  # a cold one; a timing one planned, one added, the cap
    assert [(p["kind"], p["replicate"], p["cache"]) for p in processes] == [
        ("cold", 0, "cold"),
        ("arm", 0, "warm"),
        ("arm", 1, "warm"),
    ]
    info = json.loads((root / "data/results/run_info.json").read_text())
    assert (info["planned_trials"], info["trials"], info["planned_processes"], info["processes"]) == (3, 5, 2, 3)
    [reached] = info["targets"]
    assert reached["blocks"] == 2 and not reached["met"] and reached["metric"] == "speedup"  # one stack: timing only
    report = (root / "data/report/report.md").read_text()
    assert "## Precision reached" in report and "| speedup (±0.1%) | reached |" in report
    assert "each run timed in 2 fresh processes, each compiled variant's cold compile in 1 (" in report
    assert subprocess.run(["dvc", "status"], cwd=root, env=env, capture_output=True, text=True).returncode == 0


def test_a_thin_noise_record_does_not_stop_the_loop():
    """One cold block a side: a record of 1 degree of freedom (however small its variance) does not say the cell's
    cold compile is known; one of 4 or more does."""
    trials, results, records = _state({"m": 0.0}, blocks=2)
    target = SimpleNamespace(speedup=0.0, compile=0.05, latency=0.0)
    thin = {"m|bs1|default": {"compile_cold": stats.Noise(1e-8, 1)}}
    sure = {"m|bs1|default": {"compile_cold": stats.Noise(4 * 0.01**2, 4), "compile_warm": stats.Noise(4e-4, 4)}}
    assert adaptive.extend(trials, results, records, ["A", "B"], _bench(target=target), thin)
    assert adaptive.extend(trials, results, records, ["A", "B"], _bench(target=target), sure) == []


def _cell_state(cold_spread=0.0, speedup_spread=0.0, blocks=2, wall_s=10.0):
    """Two stacks A and B of one model planned as the pipeline plans it (a cold compile-only process per variant,
    then timing processes of eager, default and freezing), with made-up results: B's freezing arm moves by
    +-speedup_spread from block to block, B's cold compiles by +-cold_spread."""
    from compilebench.analysis import plan

    model = ModelSpec("m", "M", "image-classification", "X", "ckpt")
    variants = [
        VariantSpec("eager", compile=False),
        VariantSpec("default"),
        VariantSpec("freezing", inductor={"freezing": True}),
    ]
    trials = plan.trials([model], [1], variants, ["A", "B"], blocks, 1, False, "i.jpg", TimingSpec(), 0)
    results = {}
    for spec in trials:
        b_side = spec.environment == "B"
        wobble = (spec.replicate % 2 * 2 - 1) if b_side else 0
        if spec.kind == "cold":
            cold = _result(spec, 5.0, compile_s=20.0 * (1 + cold_spread * wobble), wall_s=wall_s)
            results[spec.trial_id] = replace(cold, eager_ms=(), compiled_ms=(), timed_s=None)
        elif not spec.variant.compile:
            results[spec.trial_id] = TrialResult(
                spec.trial_id,
                "ok",
                environment={"device": "cpu"},
                eager_ms=(10.0,) * 5,
                timed_s=1.0,
                eager_first_call_s=0.1,
                wall_s=wall_s,
            )
        else:
            factor = 1 + speedup_spread * wobble if spec.variant.name == "freezing" else 1.0
            results[spec.trial_id] = _result(spec, 5.0 * factor, wall_s=wall_s)
    return trials, results, _records(trials, results)


def test_an_environment_of_settings_runs_every_process_its_way_the_added_blocks_too():
    """Two settings on one stack (config.Settings): B's processes, planned and added, take B's settings; A's keep
    `benchmark`'s; nothing else differs."""
    from compilebench.analysis import plan

    model = ModelSpec("m", "M", "image-classification", "X", "ckpt")
    variants = [VariantSpec("eager", compile=False), VariantSpec("default")]
    settings = {"B": {"malloc": "tcmalloc", "num_threads": 1}}
    trials = plan.trials([model], [1], variants, ["A", "B"], 2, 1, False, "i.jpg", TimingSpec(), 0, None, settings)
    results = {
        spec.trial_id: replace(_result(spec, 5.0, compile_s=20.0), eager_ms=(), compiled_ms=(), timed_s=None)
        if spec.kind == "cold"
        else _result(spec, 5.0 * (1 + 0.2 * (spec.environment == "B") * (spec.replicate % 2 * 2 - 1)))
        for spec in trials
    }
    added = adaptive.extend(trials, results, _records(trials, results), ["A", "B"], _bench(budget_min=60), None)
    assert added and {spec.environment for spec in added} == {"A", "B"}
    for spec in trials + added:
        expected = replace(TimingSpec(), malloc="tcmalloc", num_threads=1) if spec.environment == "B" else TimingSpec()
        assert spec.timing == expected, spec.trial_id


def test_a_timing_block_adds_a_whole_timing_process_per_environment_and_its_wall_counts_once():
    trials, results, records = _cell_state(speedup_spread=0.2)
    # spent: 4 cold processes and 4 timing processes of 10 s: 80 s (counted per arm result, 160 s); a block: 20 s
    added = adaptive.extend(trials, results, records, ["A", "B"], _bench(budget_min=50 / 60), None)  # 100 s
    assert {spec.kind for spec in added} == {"arm"} and {spec.replicate for spec in added} == {2}
    assert sorted((s.environment, s.variant.name) for s in added) == sorted(
        (label, name) for label in "AB" for name in ("eager", "default", "freezing")
    )
    assert len({spec.process_id for spec in added}) == 2
    assert adaptive.extend(trials, results, records, ["A", "B"], _bench(budget_min=45 / 60), None) == []


def test_cold_compile_time_gets_a_cold_block():
    trials, results, records = _cell_state(cold_spread=0.2)
    target = SimpleNamespace(speedup=0.05, compile=0.05, latency=0.0)
    added = adaptive.extend(trials, results, records, ["A", "B"], _bench(target=target, cold_replicates=1), None)
    assert {(s.kind, s.cache, s.replicate) for s in added} == {("cold", "cold", 1)}
    assert {(s.environment, s.variant.name) for s in added} == {
        ("A", "default"),
        ("B", "default"),
        ("A", "freezing"),
        ("B", "freezing"),
    }


def test_a_cold_process_disturbed_while_compiling_is_re_run():
    trials, results, records = _cell_state()
    cold = next(spec for spec in trials if spec.kind == "cold" and spec.variant.name == "default")
    results[cold.trial_id] = replace(results[cold.trial_id], compile_disturbance={"others_cores": 1.5})
    records = _records(trials, results)
    bench = _bench(cold_replicates=1, target=SimpleNamespace(speedup=0.0, compile=0.0, latency=0.0))
    added = adaptive.extend(trials, results, records, ["A", "B"], bench, None)
    assert {(s.kind, s.variant.name, s.replicate) for s in added} == {("cold", "default", 1)}


def test_a_cold_process_that_will_time_is_priced_with_its_timing_from_cold_processes_that_did_not():
    """One stack's cold processes do not time (nothing to pair them with); a comparison's do. Priced from the first
    kind, a comparison's cold process costs its warm-up and timed seconds more, and the reverse less."""
    trials, results, _ = _cell_state()  # A and B; its cold processes made without samples, as one stack's are
    for spec in trials:
        results[spec.trial_id] = replace(
            results[spec.trial_id], environment={"device": "cpu", "machine_fingerprint": "f"}
        )
    prices = pricing.process_prices(_records(trials, results), "f", "cpu")
    cold_unit = ("cold", "m", 1, "default")
    assert prices.seconds[cold_unit] == 10.0 and cold_unit in prices.untimed
    timed = next(spec for spec in trials if spec.kind == "cold" and spec.variant.name == "default")
    extra = timed.timing.warmup_s + timed.timing.min_time_s
    assert timed.timed and prices.of(timed) == pytest.approx(10.0 + extra)
    assert prices.of(replace(timed, timed=False)) == 10.0
    timing = next(spec for spec in trials if spec.kind == "arm")
    assert prices.of(timing) == prices.seconds[adaptive.unit_of(timing)]  # a timing process: its price as it is
    timed_prices = replace(prices, untimed=frozenset())  # priced by cold processes that timed
    assert timed_prices.of(timed) == 10.0 and timed_prices.of(replace(timed, timed=False)) == pytest.approx(
        10.0 - extra
    )


def test_a_block_run_together_is_priced_at_its_longest_process():
    """Processes of a block run together overlap (set-up, compiles): the block lasts as long as its longest, so each
    adds the block's wall over its count; processes that ran alone add their own seconds. Measured on EPYC 17: a
    series' blocks took 0.61 of their processes' own seconds (docs/findings.md)."""
    from compilebench.analysis.per_process import ProcessRecord

    def process(block, wall_s, wait_s):
        return ProcessRecord(trial_id=f"{block}-{wall_s}", block=block, wall_s=wall_s, turn_wait_s=wait_s)

    together = [
        process("default/r0", 300.0, 200.0),
        process("default/r0", 290.0, 150.0),
        process("default/r1", 320.0, 180.0),
        process("default/r1", 310.0, 170.0),
    ]
    assert pricing.block_overlap(together) == pytest.approx(155.0 / 140.0)  # shares 150, 150, 160, 160; own 100-140
    alone = [process("default/r0", 100.0, None), process("default/r1", 120.0, None)]
    assert pricing.block_overlap(alone) == pytest.approx(1.0)
    ended_at_once = [process("freezing/c0", 400.0, 300.0), process("freezing/c0", 1.0, None)]  # an `unsupported` one
    assert pricing.block_overlap(ended_at_once) == pytest.approx(200.0 / 50.5)  # still a block run together


def test_a_plan_is_priced_at_this_machines_own_process_times_against_the_budget():
    """A unit's price is the median over this machine's processes of it of each one's own time (its wall time less its
    waits for turns), each process once; another machine's processes price nothing. The planned processes priced so,
    against the budget: what is left, in rounds of one more block of every unit of a kind."""
    trials, results, _ = _state({"m": 0.0, "n": 0.0})  # per model two blocks of A and B: paired processes
    own = iter([(10.0, None), (20.0, None), (30.0, None), (40.0, 5.0)])
    for spec in trials:
        if spec.model.model_id == "m":
            wall_s, wait_s = next(own)
            results[spec.trial_id] = replace(results[spec.trial_id], wall_s=wall_s, turn_wait_s=wait_s)
        else:  # measured on another machine
            elsewhere = {"device": "cpu", "machine_fingerprint": "g"}
            results[spec.trial_id] = replace(results[spec.trial_id], environment=elsewhere)
    prices = pricing.process_prices(_records(trials, results), "f", "cpu")
    assert prices.seconds == {("paired", "m", 1, "default"): 25.0}  # 10, 20, 30, 35: the eager run's copies not again
    assert prices.processes == 4 and prices.alone == 3  # one of m's waited for turns: a block run together
    assert pricing.process_prices(_records(trials, results), "f", "cuda").seconds == {}
    spent = pricing.spend(trials, ["A", "B"], _bench(budget_min=1.0), prices)
    assert spent.by_kind == {"paired": 8} and spent.planned_s == 100.0 and spent.priced == 4  # m's; n's unpriced
    assert spent.unpriced == (("paired", "n", 1, "default"),) and spent.budget_s == 120.0
    # the wall, which the budget counts: a process's share of its block (10, 20, 20, 20: median 20) over its own
    # seconds' median (25), 0.8, so a round of two processes of 25 s takes 40 s of wall
    assert spent.round_s == {"paired": 40.0} and spent.wall_s == 80.0
    assert pricing.spend(trials, ["A", "B"], _bench(budget_min=3.0), prices).rounds("paired") == 0  # n not known
    mine = [spec for spec in trials if spec.model.model_id == "m"]
    spent = pricing.spend(mine, ["A", "B"], _bench(budget_min=50 / 60), prices)
    assert spent.rounds("paired") == 0  # 20 s of wall left: not a round of 40 s
    assert pricing.spend(mine, ["A", "B"], _bench(budget_min=3.0), prices).rounds("paired") == 7  # 280 s left
    assert spent.rounds("cold") == 0  # no unit of that kind


def test_the_forecast_log_names_what_the_budget_buys_and_the_metrics_it_cannot_forecast(caplog):
    """The benchmark's log lines (and forecast.py's): per metric the record has, after the planned blocks, the budget's
    room and the cap; a targeted metric the record has too few degrees of freedom of is named, not left unsaid."""
    trials, _, _ = _state({"m": 0.0})
    record = noise_record.record_noise(None, "aa", {"m|bs1|default": {"speedup": stats.Noise(0.04**2 * 8, 8)}}, {})
    bench = _bench(SimpleNamespace(speedup=0.05, compile=0.05, latency=0.0))
    with caplog.at_level("INFO", logger="compilebench.benchmark.forecast"):
        forecast.say_forecast(trials, bench, record, {"timing": 1})
    assert "speedup finds a change of" in caplog.text and "after 3 (what the budget leaves room for)" in caplog.text
    assert "`equivalent` (within +-10%) in about " in caplog.text and " of the 1 after 2, " in caplog.text
    assert "no forecast for compile cold, compile warm:" in caplog.text


def test_the_forecast_says_what_the_planned_blocks_and_the_cap_can_find():
    """From a noise record alone: per targeted metric, the smallest change found with 80% power after the planned
    blocks and after the cap, the range over the cells the record has (with enough degrees of freedom)."""
    noise = {
        "m|bs1|default": {"speedup": stats.Noise(0.04**2 * 8, 8), "compiled_latency": stats.Noise(0.1**2 * 8, 8)},
        "n|bs1|default": {"speedup": stats.Noise(0.08**2 * 8, 8), "compiled_latency": stats.Noise(0.3, 1)},
    }
    found = {
        entry["metric"]: entry
        for entry in adaptive.forecast(
            noise, ["m|bs1|default", "n|bs1|default"], _bench(SimpleNamespace(speedup=0.05, compile=0.05, latency=0.1))
        )
    }
    assert set(found) == {"speedup", "compiled_latency"}  # no record of the others; latency of n: 1 dof, left out
    planned, most = found["speedup"]["planned"], found["speedup"]["most"]
    assert planned.blocks == 2 and most.blocks == 5 and found["speedup"]["cells"] == 2
    quiet = stats.Noise(0.04**2 * 8, 8)
    expected = stats.minimum_detectable(stats.expected_halfwidth(quiet, 2), 9)
    assert (
        planned.change[0] == pytest.approx(expected) and planned.change[0] < planned.change[1]
    )  # ResNet-like, noisier
    assert most.change[0] < planned.change[0] and most.change[1] < planned.change[1]  # more blocks find smaller changes
    # with no change: the cells expected `equivalent`, each cell's chance summed; more after more blocks
    chances = [
        stats.equivalence_chance(stats.expected_halfwidth(n, 2), n.dof + 1, 0.10)
        for n in (quiet, stats.Noise(0.08**2 * 8, 8))
    ]
    assert planned.equivalent == pytest.approx(sum(chances)) and chances[1] < chances[0]  # the noisy cell less often
    assert planned.equivalent < most.equivalent <= 2
    [alone] = adaptive.forecast(noise, ["m|bs1|default"], _bench())
    wide = adaptive.forecast(noise, ["m|bs1|default"], _bench(margin=0.20))[0]["planned"]
    assert wide.equivalent > alone["planned"].equivalent and wide.change == alone["planned"].change  # words only
    assert found["compiled_latency"]["cells"] == 1 and "budget" not in found["speedup"]  # n's latency: 1 dof
    thin = {"m|bs1|default": {"speedup": stats.Noise(0.04**2 * 2, 2)}}  # a first comparison's 3 blocks
    assert adaptive.forecast(thin, ["m|bs1|default"], _bench())[0]["planned"].blocks == 2  # forecast from 2 dof on
    [room] = adaptive.forecast(noise, ["m|bs1|default"], _bench(), added={"timing": 2, "cold": 9})
    budget = room["budget"]
    assert budget.blocks == 4 and most.change[0] < budget.change[0] < planned.change[0]  # 2 planned, 2 bought
    [capped] = adaptive.forecast(noise, ["m|bs1|default"], _bench(), added={"timing": 9})
    assert capped["budget"] == capped["most"]  # never past the cap
    [timed] = adaptive.forecast(noise, ["m|bs1|default"], _bench(), added={"timing": 1}, cold_timed=True)
    assert (timed["planned"].blocks, timed["budget"].blocks, timed["most"].blocks) == (3, 4, 6)  # + the cold block
    assert adaptive.forecast({}, ["m|bs1|default"], _bench()) == []  # no record yet: nothing to say
    by_turn = {"m|bs1|default": {"speedup@turns": stats.Noise(0.02**2 * 8, 8), **noise["m|bs1|default"]}}
    [speedup] = [
        e
        for e in adaptive.forecast(
            by_turn, ["m|bs1|default"], _bench(SimpleNamespace(speedup=0.05, compile=0.0, latency=0.0)), by_turn=True
        )
    ]
    assert speedup["planned"].change[0] < planned.change[0]  # blocks run together: the record paired by turn (quieter)
