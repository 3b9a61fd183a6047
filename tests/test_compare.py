"""Environments compared, on hand-made runs: ratios from per-process values, verdicts, health first, A/A."""

import math
import statistics

import pytest
from made_runs import runs_of

from compilebench import tracking
from compilebench.analysis import compare, noise_record, stats, suite
from compilebench.analysis.per_process import ProcessRecord
from compilebench.report import tables


def _row(environment, eager, compiled, key="k1", status="ok", breaks=0, invocation="inv", **extra):
    caches = zip(eager, compiled, (20.0, 3.0, 3.2), ("cold", "warm", "warm"), strict=False)
    processes = [
        {
            "eager_ms": [e] * 5,
            "compiled_ms": [c] * 5,
            "compile_s": cs,
            "cache": cache,
            "peak_mem_mib": 100.0,
            "block": f"default/r{i}",
        }
        for i, (e, c, cs, cache) in enumerate(caches)
    ]
    return {
        "model_id": "org/m",
        "label": "M",
        "task": "t",
        "batch_size": 1,
        "variant": "default",
        "compile": True,
        "environment": environment,
        "environment_key": key,
        "status": status,
        "graph_break_count": breaks,
        "invocation_id": invocation,
        "process_results": processes,
        **extra,
    }


def _comparison(label, variant, judged):
    """A comparison made by hand: B against A in one cell of model `label`, its metrics `judged`."""
    return compare.Comparison(
        model_id=f"org/{label}",
        label=label,
        task="t",
        batch_size=1,
        variant=variant,
        baseline="A",
        candidate="B",
        baseline_run_uid=None,
        candidate_run_uid=None,
        reference="first",
        baseline_versions="",
        candidate_versions="",
        baseline_status="ok",
        candidate_status="ok",
        health_change="",
        interleaved=True,
        calibrated=False,
        margin=0.05,
        judged=judged,
        headline=next(iter(judged)),
        verdict=next(iter(judged.values())).verdict,
    )


def test_b_slower_than_a_is_flagged_with_its_ratio():
    a = _row("current", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("torch-new", [10.0, 10.1, 9.9], [6.0, 6.1, 5.9], key="k2")
    compared = compare.comparison_rows(runs_of([a, b]), noise=None)
    [row] = [comparison.row() for comparison in compared]  # its line of comparison.csv
    assert row["compiled_latency_ratio"] == pytest.approx(1.2, rel=1e-3) and row["compiled_latency_verdict"] == "slower"
    assert row["compiled_latency_method"] == stats.PAIRED and row["compiled_latency_blocks"] == 3
    assert row["compiled_latency_relevance"] == stats.BEYOND_MARGIN and row["margin"] == 0.05
    assert row["speedup_verdict"] == "lower" and row["verdict"] == "slower" and row["p_adjusted"] < 0.05
    assert row["eager_latency_ratio"] == pytest.approx(1.0)
    assert row["interleaved"] and not row["calibrated"] and row["candidate"] == "torch-new"
    assert compare.flagged(compared) == compared
    back = compare.Comparison.read(row).row()  # the line read back is the comparison
    assert list(back) == list(row) and all(back[k] == row[k] or (back[k] != back[k] and row[k] != row[k]) for k in row)


def test_equivalent_needs_the_90_percent_interval_inside_the_margin():
    a = _row("current", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("current#2", [10.05, 10.0, 9.95], [5.02, 5.03, 4.98])
    [row] = compare.comparison_rows(runs_of([a, b]), noise=None, margin=0.05)
    assert row.judged["compiled_latency"].verdict == stats.EQUIVALENT and row.verdict == stats.EQUIVALENT
    [row] = compare.comparison_rows(runs_of([a, b]), noise=None, margin=0.001)  # a margin no interval fits inside
    assert row.judged["compiled_latency"].relevance != stats.EQUIVALENT


def test_the_headline_is_holm_adjusted_across_cells():
    """Ten cells, one with p under 5% (about 1%): significant alone, not for the family of ten."""
    rows = []
    for index in range(10):
        shift = (1.10, 1.12, 1.14) if index == 0 else (1.0, 1.0, 1.0)
        a = {**_row("current", [10.0] * 3, [5.0, 5.1, 4.9]), "label": f"M{index}", "model_id": f"org/m{index}"}
        b = {
            **_row("new", [10.0] * 3, [5.0 * shift[0], 5.1 * shift[1], 4.9 * shift[2]], key="k2"),
            "label": f"M{index}",
            "model_id": f"org/m{index}",
        }
        rows += [a, b]
    compared = compare.comparison_rows(runs_of(rows), noise=None)
    first = next(row for row in compared if row.label == "M0")
    judged = first.judged["compiled_latency"]
    assert judged.ratio.p_value < 0.05 and judged.verdict == "slower"
    assert first.p_adjusted > 0.05 and first.verdict != "slower"


def test_a_series_compares_each_stack_with_the_previous_and_names_the_first_step():
    a = _row("2.12", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("2.13", [10.0, 10.1, 9.9], [5.01, 5.04, 4.96], key="k2")
    c = _row("2.14", [10.0, 10.1, 9.9], [6.0, 6.1, 5.9], key="k3")
    compared = compare.comparison_rows(runs_of([a, b, c]), noise=None, labels=["2.12", "2.13", "2.14"])
    pairs = {(row.baseline, row.candidate, row.reference) for row in compared}
    assert pairs == {("2.12", "2.13", "first"), ("2.12", "2.14", "first"), ("2.13", "2.14", "previous")}
    history = {entry["metric"]: entry for entry in suite.series_steps(compared, ["2.12", "2.13", "2.14"])}
    latency = history["compiled_latency"]
    assert latency["first_step"] == "2.13 -> 2.14" and latency["verdict"] == "slower" and latency["ratio"] > 1.15
    assert [step["step"] for step in latency["steps"]] == ["2.12 -> 2.13", "2.13 -> 2.14"]
    assert history["speedup"]["first_step"] == "2.13 -> 2.14" and history["speedup"]["verdict"] == "lower"
    assert history["eager_latency"]["first_step"] == "" and history["eager_latency"]["across"] == stats.EQUIVALENT
    assert set(history) == set(suite.SERIES_METRICS)


def test_a_series_step_is_judged_for_the_family_of_its_metric():
    """Ten cells, one step of one with p about 1%: significant alone, not for the ten cells' steps."""
    runs = []
    for index in range(10):
        shift = (1.10, 1.12, 1.14) if index == 0 else (1.0, 1.0, 1.0)
        cell = {"label": f"M{index}", "model_id": f"org/m{index}"}
        runs += [
            {**_row("a", [10.0] * 3, [5.0, 5.1, 4.9]), **cell},
            {**_row("b", [10.0] * 3, [5.0, 5.1, 4.9], key="k2"), **cell},
            {**_row("c", [10.0] * 3, [5.0 * shift[0], 5.1 * shift[1], 4.9 * shift[2]], key="k3"), **cell},
        ]
    compared = compare.comparison_rows(runs_of(runs), noise=None, labels=["a", "b", "c"])
    [first] = [
        e
        for e in suite.series_steps(compared, ["a", "b", "c"])
        if e["label"] == "M0" and e["metric"] == "compiled_latency"
    ]
    step = first["steps"][1]
    row = next(r for r in compared if r.label == "M0" and r.baseline == "b" and r.candidate == "c")
    assert row.judged["compiled_latency"].ratio.p_value < 0.05 and row.judged["compiled_latency"].verdict == "slower"
    assert step["verdict"] != "slower" and first["first_step"] == ""


def test_a_series_answers_each_step_over_the_suite_in_a_family_of_its_own():
    """Six cells whose compiled latency each moves 6% at b -> c: over the suite the step is `slower`, each cell alone
    not beyond the margin; a step where nothing moved is `equivalent`. The cells' words are the same with the suite's
    histories as without them (a family of their own), and a cell that failed on one side is left out of the mean."""
    runs = []
    for index in range(6):
        cell = {"label": f"M{index}", "model_id": f"org/m{index}"}
        shifts = (1.05, 1.06, 1.07) if index % 2 else (1.07, 1.06, 1.05)
        runs += [
            {**_row("a", [10.0] * 3, [5.0, 5.1, 4.9]), **cell},
            {**_row("b", [10.0] * 3, [5.01, 5.09, 4.91], key="k2"), **cell},
            {**_row("c", [10.0] * 3, [5.0 * shifts[0], 5.1 * shifts[1], 4.9 * shifts[2]], key="k3"), **cell},
        ]
    failed = {**_row("c", [10.0] * 3, [5.0] * 3, key="k3", status="compile_error"), "label": "M6", "model_id": "x/m6"}
    failed["process_results"] = []
    runs += [
        {**_row("a", [10.0] * 3, [5.0, 5.1, 4.9]), "label": "M6", "model_id": "x/m6"},
        {**_row("b", [10.0] * 3, [5.0, 5.1, 4.9], key="k2"), "label": "M6", "model_id": "x/m6"},
        failed,
    ]
    compared = compare.comparison_rows(runs_of(runs), noise=None, labels=["a", "b", "c"], margin=0.05)
    both = suite.series_steps(compared, ["a", "b", "c"], over_suite=True)
    cells = [entry for entry in both if not entry.get("over_suite")]
    assert cells == suite.series_steps(compared, ["a", "b", "c"])
    over = {entry["metric"]: entry for entry in both if entry.get("over_suite")}
    assert set(over) == set(suite.SERIES_METRICS)
    latency = over["compiled_latency"]
    assert latency["label"] == suite.SUITE_LABEL and [s["verdict"] for s in latency["steps"]] == [
        "equivalent",
        "slower",
    ]
    assert latency["first_step"] == "b -> c" and 1.055 < latency["ratio"] < 1.065
    assert latency["steps"][1]["left_out"] == ["M6 bs1 default"] and latency["steps"][0]["left_out"] == []
    per_cell = [e for e in cells if e["metric"] == "compiled_latency" and e["label"] != "M6"]
    assert per_cell and all(entry["steps"][1]["verdict"] != "equivalent" for entry in per_cell)


def test_a_stack_that_cannot_run_a_cell_is_said_and_the_series_goes_on():
    a = _row("2.0", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95], status="unsupported")
    a["process_results"] = []
    b = _row("2.3", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95], key="k2")
    c = _row("2.6", [10.0, 10.1, 9.9], [4.0, 4.04, 3.96], key="k3")
    compared = compare.comparison_rows(runs_of([a, b, c]), noise=None, labels=["2.0", "2.3", "2.6"])
    latency = next(e for e in suite.series_steps(compared, ["2.0", "2.3", "2.6"]) if e["metric"] == "compiled_latency")
    assert latency["unsupported_in"] == ["2.0"] and latency["steps"][0]["verdict"] == "unsupported"
    assert latency["first_step"] == "2.3 -> 2.6" and latency["verdict"] == "faster"


def test_a_stack_whose_run_failed_is_said_with_its_status_in_the_series():
    a = _row("2.3", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("2.6", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95], key="k2", status="compile_error")
    b["process_results"] = []
    c = _row("2.9", [10.0, 10.1, 9.9], [4.0, 4.04, 3.96], key="k3")
    d = _row("2.12", [10.0, 10.1, 9.9], [3.0, 3.03, 2.97], key="k4")
    labels = ["2.3", "2.6", "2.9", "2.12"]
    compared = compare.comparison_rows(runs_of([a, b, c, d]), noise=None, labels=labels)
    latency = next(e for e in suite.series_steps(compared, labels) if e["metric"] == "compiled_latency")
    assert latency["not_measured_in"] == {"2.6": "compile_error"} and latency["unsupported_in"] == []
    assert [step["verdict"] for step in latency["steps"][:2]] == ["compile_error", "compile_error"]
    assert latency["first_step"] == "2.9 -> 2.12" and latency["verdict"] == "faster"
    [row] = tables.series_table([latency]).to_dict("records")
    assert row["not measured in"] == "2.6 (compile_error)"


def test_disturbed_processes_are_left_out_of_the_pairs():
    a = _row("current", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("new", [10.0, 10.1, 9.9], [5.0, 9.0, 4.95], key="k2")
    b["process_results"][1]["disturbed"] = True
    [row] = compare.comparison_rows(runs_of([a, b]), noise=None)
    ratio = row.judged["compiled_latency"].ratio
    assert ratio.blocks == 2 and ratio.value == pytest.approx(1.0)


def test_health_changes_come_first():
    a = _row("current", [10.0] * 3, [5.0] * 3)
    b = _row("new", [10.0] * 3, [5.0] * 3, key="k2", breaks=2)
    other_a = {**_row("current", [10.0] * 3, [5.0] * 3), "label": "A-first"}
    other_b = {**_row("new", [10.0] * 3, [5.0] * 3, key="k2"), "label": "A-first"}
    rows = compare.comparison_rows(runs_of([other_a, a, other_b, b]), noise=None)
    assert rows[0].health_change == "graph breaks 0 -> 2" and rows[1].health_change == ""
    failed = compare.health_changes(*runs_of([a, {**b, "status": "compile_error"}]))
    assert "status ok -> compile_error" in failed


def test_the_machines_noise_record_accumulates_per_cell_and_never_counts_an_invocation_twice():
    a = _row("current", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("current#2", [10.3, 10.2, 10.4], [5.0, 5.1, 5.0])
    assert compare.is_aa(runs_of([a, b])) and not compare.is_aa(runs_of([a, {**b, "environment_key": "k2"}]))
    [(cell, measured)] = compare.noise_measured(compare.comparison_rows(runs_of([a, b]), noise=None)).items()
    assert cell == "org/m|bs1|default" and measured["eager_latency"].dof == 2 and "compile_cold" not in measured
    record = noise_record.record_noise(None, "inv1", {cell: measured}, {"aa": True})
    record = noise_record.record_noise(record, "inv2", {cell: measured}, {"aa": False})
    record = noise_record.record_noise(record, "inv2", {cell: measured}, {"aa": False})  # judged again: replaced
    pooled = noise_record.machine_noise(record)[cell]
    assert pooled["eager_latency"].dof == 4 and pooled["eager_latency"].ss == pytest.approx(
        2 * measured["eager_latency"].ss
    )
    assert noise_record.machine_noise(record, leave_out="inv2")[cell]["eager_latency"].dof == 2
    assert noise_record.pooled_by_metric(noise_record.machine_noise(record))["eager_latency"].dof == 4
    assert noise_record.machine_noise({"deltas": {"speedup": 0.1}}) == {}  # a version-1 margin holds no variance
    invalid = compare.noise_measured(compare.comparison_rows(runs_of([a, {**b, "status": "invalid"}]), noise=None))
    assert invalid == {}  # an invalid run adds nothing
    [row] = compare.comparison_rows(runs_of([a, b]), noise=noise_record.machine_noise(record))
    assert row.calibrated and row.judged["compiled_latency"].ratio.noise == "cell+machine"
    other = {**a, "model_id": "org/other"}, {**b, "model_id": "org/other"}
    [row] = compare.comparison_rows(runs_of(list(other)), noise=noise_record.machine_noise(record))
    assert not row.calibrated and row.judged["compiled_latency"].ratio.noise == "cell"  # not another cell's noise


def _together(environment, slowdown, turns, key="k1", turns_of_block=None):
    """A run whose 3 blocks ran together: 2 rounds a turn over `turns`, the machine 30% slower in turns 2-5 (a speed
    both processes of a block meet), B's compiled arm `slowdown` times A's (a little more in each later block)."""
    processes = []
    for block in range(3):
        mine = (turns_of_block or {}).get(block, turns)
        state = [1.3 if turn <= 5 else 1.0 for turn in mine for _ in range(2)]
        factor = slowdown * (1 + 0.01 * block) if slowdown != 1 else 1.0
        processes.append(
            {
                "eager_ms": [10.0 * s for s in state],
                "compiled_ms": [5.0 * s * factor for s in state],
                "round_turns": [turn for turn in mine for _ in range(2)],
                "block": f"default/r{block}",
                "compile_s": 3.0,
                "cache": "warm",
            }
        )
    return {
        "model_id": "org/m",
        "label": "M",
        "task": "t",
        "batch_size": 1,
        "variant": "default",
        "compile": True,
        "environment": environment,
        "environment_key": key,
        "status": "ok",
        "invocation_id": "inv",
        "process_results": processes,
    }


def test_blocks_run_together_pair_their_rounds_by_turn():
    """A timed turns 2-7 and B turns 2-9 (it went on longer, on a faster machine): each process's median lands on
    a different speed, the rounds paired by turn do not."""
    a, b = _together("current", 1.0, range(2, 8)), _together("new", 1.1, range(2, 10), key="k2")
    [row] = compare.comparison_rows(runs_of([a, b]), noise=None)
    latency, eager, speedup = (row.judged[name].ratio for name in ("compiled_latency", "eager_latency", "speedup"))
    assert latency.method == stats.PAIRED_BY_TURN and latency.value == pytest.approx(1.1 * 1.01, rel=1e-3)
    assert eager.value == pytest.approx(1.0) and speedup.value == pytest.approx(1 / (1.1 * 1.01), rel=1e-3)
    medians = compare.ratio_of(*(run.values["compiled_latency"] for run in runs_of([a, b])), True, None)
    assert medians.value < 1.0  # each process's median alone: B "faster", on its extra fast turns
    assert row.judged["compile_warm"].ratio.method == stats.PAIRED  # one value a process: by block as before
    [(cell, measured)] = compare.noise_measured([row]).items()
    assert {"compiled_latency@turns", "speedup@turns", "compile_warm"} <= set(measured)
    assert "compiled_latency" not in measured  # never summed with per-process medians' noise
    calibrated = compare.comparison_rows(runs_of([a, b]), noise={cell: {"compiled_latency": stats.Noise(9.0, 3)}})
    assert calibrated[0].judged["compiled_latency"].ratio.noise == "cell"  # a record of medians is not this noise
    calibrated = compare.comparison_rows(runs_of([a, b]), noise={cell: measured})
    assert calibrated[0].judged["compiled_latency"].ratio.noise == "cell+machine"


def test_a_cell_whose_blocks_share_too_few_turns_is_paired_by_process_medians():
    a = _together("current", 1.0, range(2, 8), turns_of_block={1: [2, 3]})  # block r1: two turns only
    b = _together("new", 1.1, range(2, 10), key="k2")
    [row] = compare.comparison_rows(runs_of([a, b]), noise=None)
    assert (
        row.judged["compiled_latency"].ratio.method == stats.PAIRED and row.judged["compiled_latency"].ratio.blocks == 3
    )
    alone = [{**process, "round_turns": []} for process in b["process_results"]]  # processes alone: no turns
    [row] = compare.comparison_rows(runs_of([a, {**b, "process_results": alone}]), noise=None)
    assert row.judged["speedup"].ratio.method == stats.PAIRED


def test_values_read_back_from_mlflow_are_used_as_they_are():
    stored = {
        "model_id": "org/m",
        "batch_size": 1,
        "variant": "default",
        "environment": "A",
        "status": "ok",
        "compile": True,
        "fullgraph": False,
        "fell_back_to_eager": "False",
    }
    run = tracking.stored_run({**stored, "process_values": {"speedup": {"default/r0": 2.0, "default/r1": 2.2}}})
    assert run.values["speedup"] == {"default/r0": 2.0, "default/r1": 2.2} and run.fell_back_to_eager is False
    older = tracking.stored_run({**stored, "process_values": {"speedup": [2.0, 2.2]}})  # before blocks: cannot pair
    assert older.values["speedup"] == {"p0": 2.0, "p1": 2.2} and older.values["compile_cold"] == {}


def _values(processes):
    """Per metric, the values by block of processes as runs.jsonl lists them."""
    return compare.process_values([ProcessRecord.from_dict(raw, i) for i, raw in enumerate(processes)])


def test_compile_times_go_cold_or_warm_by_what_each_process_found_in_its_cache():
    """With a shared cache (a GPU machine's plan) the process row says whether its graphs came from the cache;
    a row written before that was recorded goes by its cache: `cold` and `shared` as cold."""
    shared = [
        {"eager_ms": [10.0], "compiled_ms": [5.0], "compile_s": s, "cache": "shared", "cold_compile": cold}
        for s, cold in ((12.6, True), (3.5, False))
    ]
    assert list(_values(shared)["compile_cold"].values()) == [12.6]
    assert list(_values(shared)["compile_warm"].values()) == [3.5]
    older = [{**process, "cache": cache} for process, cache in zip(shared, ("shared", "warm"), strict=True)]
    for process in older:
        del process["cold_compile"]
    assert list(_values(older)["compile_cold"].values()) == [12.6]
    assert list(_values(older)["compile_warm"].values()) == [3.5]


def test_inductors_start_up_in_a_timing_process_is_compared_too():
    """Warm compile time in a timing process excludes inductor's one-time start-up (paid before its arms compile);
    the start-up itself, which a new torch may change, is compared on its own."""
    a = _row("current", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95])
    b = _row("new", [10.0, 10.1, 9.9], [5.0, 5.05, 4.95], key="k2")
    for row, seconds in ((a, (2.0, 2.1, 1.9)), (b, (1.6, 1.7, 1.5))):
        for process, value in zip(row["process_results"], seconds, strict=True):
            process["inductor_startup_s"] = value
    [row] = compare.comparison_rows(runs_of([a, b]), noise=None)
    judged = row.judged["inductor_startup"]
    assert judged.ratio.value == pytest.approx(0.8, rel=0.01) and judged.verdict == "faster"
    assert compare.METRIC_BY_NAME["inductor_startup"].target is None  # reported, not a target of more blocks


def test_the_suite_summary_counts_verdicts_and_pools_the_cells_geomean_with_its_interval():
    """Two cells with a ratio and a third that failed on one side: the geomean of the two with a CI from their
    standard errors (Welch-Satterthwaite), the third named as left out; verdicts counted per metric."""
    t = stats.t_quantile(0.975, 5)

    def row(label, ratio, halfwidth, verdict, metric="compiled_latency", variant="default"):
        interval = stats.Ratio(
            ratio,
            ratio * math.exp(-halfwidth),
            ratio * math.exp(halfwidth),
            math.nan,
            math.nan,
            math.nan,
            3,
            5.0,
            stats.PAIRED,
        )
        return _comparison(label, variant, {metric: compare.Judged(interval, "", "", verdict)})

    rows = [
        row("R", 1.1, 0.04, "slower"),
        row("V", 0.9, 0.02, "equivalent"),
        row("S", math.nan, math.inf, "inconclusive"),
    ]
    [entry] = suite.summary(rows)
    assert (entry["changed"], entry["equivalent"], entry["inconclusive"], entry["cells"]) == (1, 1, 1, 3)
    assert entry["left_out"] == ["S bs1 default"] and entry["chance_flags"] == pytest.approx(0.1)
    assert entry["geomean"] == pytest.approx(math.sqrt(1.1 * 0.9))
    variance = ((0.04 / t) ** 2 + (0.02 / t) ** 2) / 4
    dof = ((0.04 / t) ** 2 + (0.02 / t) ** 2) ** 2 / (((0.04 / t) ** 4 + (0.02 / t) ** 4) / 5)
    expected = stats.t_quantile(0.975, dof) * math.sqrt(variance)
    assert math.log(entry["ci_high"] / entry["geomean"]) == pytest.approx(expected)
    assert entry["verdict"] == stats.EQUIVALENT  # 0.995, its 90% CI about ±2%: inside the ±5% margin
    wide = [row("R", 1.01, 0.3, "inconclusive"), row("V", 1.0, 0.3, "inconclusive")]
    assert suite.summary(wide)[0]["verdict"] == stats.INCONCLUSIVE
    tight = [row("R", 1.02, 0.06, "inconclusive"), row("V", 1.0, 0.06, "inconclusive")]  # R alone is not inside ±5%
    assert suite.summary(tight)[0]["verdict"] == stats.EQUIVALENT  # the suite decides what no cell did
    eager = [row("R", 1.1, 0.04, "slower", "eager_latency", "eager"), row("R", 1.1, 0.04, "slower", "eager_latency")]
    assert [e["cells"] for e in suite.summary(eager) if e["metric"] == "eager_latency"] == [1]  # eager's own
    startup = [
        row(label, 0.9, 0.04, "faster", "inductor_startup", variant)
        for label in ("R", "V")
        for variant in ("default", "freezing")
    ]
    [entry] = suite.summary(startup)  # both arms of a timing process have its start-up: a model counts once
    assert (entry["cells"], entry["changed"]) == (2, 2)
    assert suite.summary([]) == []


def test_a_suite_whose_cells_have_one_process_a_side_gets_its_interval_from_their_spread():
    """Cold compile with one cold process a stack: no cell has an interval, so the suite's comes from the spread of
    the cells' ratios (a one-sample t over the cells), which a known answer checks; so where the loop gave some cells
    a second cold block. Not below three cells, nor for a metric whose cells share processes (peak memory: an eager
    cell's and a compiled cell's come from the same cold process)."""

    def single(label, ratio, metric="compile_cold"):
        value = stats.Ratio(ratio, *(math.nan,) * 5, 1, 0.0, stats.SINGLE)
        return _comparison(label, "default", {metric: compare.Judged(value, "", "", stats.INCONCLUSIVE)})

    ratios = [1.03, 0.98, 1.01, 1.00, 0.99, 1.02]
    rows = [single(f"M{i}", ratio) for i, ratio in enumerate(ratios)]
    [entry] = suite.summary(rows)
    logs = [math.log(ratio) for ratio in ratios]
    center, sd = statistics.fmean(logs), statistics.stdev(logs)
    halfwidth = stats.t_quantile(0.975, 5) * sd / math.sqrt(6)
    assert entry["geomean"] == pytest.approx(math.exp(center))
    assert entry["ci_low"] == pytest.approx(math.exp(center - halfwidth))
    assert entry["ci_high"] == pytest.approx(math.exp(center + halfwidth))
    assert entry["verdict"] == stats.EQUIVALENT and entry["inconclusive"] == 6  # the suite answers, no cell does
    apart = [single(f"M{i}", ratio) for i, ratio in enumerate([1.3, 0.8, 1.1])]  # cells that disagree: wide
    assert suite.summary(apart)[0]["verdict"] == stats.INCONCLUSIVE
    slower = [single(f"M{i}", ratio) for i, ratio in enumerate([1.12, 1.10, 1.14, 1.11])]
    assert suite.summary(slower)[0]["verdict"] == "slower"
    assert math.isnan(suite.summary(rows[:2])[0]["ci_low"])  # two cells: too few to see a spread
    paired = stats.Ratio(1.0, 0.98, 1.02, 0.985, 1.015, 0.9, 3, 4.0, stats.PAIRED)
    mixed = [*rows, _comparison("P", "default", {"compile_cold": compare.Judged(paired, "", "", "equivalent")})]
    logs.append(0.0)
    halfwidth = stats.t_quantile(0.975, 6) * statistics.stdev(logs) / math.sqrt(7)
    assert suite.summary(mixed)[0]["ci_high"] == pytest.approx(math.exp(statistics.fmean(logs) + halfwidth))
    memory = [single(f"M{i}", ratio, "peak_memory") for i, ratio in enumerate(ratios)]
    assert math.isnan(suite.summary(memory)[0]["ci_low"])
