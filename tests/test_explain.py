"""Reading two profiles A beside B (analysis/explain.py, report/explain.py): categories that sum to the profiled call,
kernels matched across releases whose names differ, a move called only beyond the rounds' spread and the margin, and
which compiled cells of a comparison are explained."""

import random

import pytest

from compilebench.analysis import explain
from compilebench.report.explain import report

# Event names as torch 2.0.1 and 2.15 name them on a CPU, with inductor's kernel profiling on.
NAMES_OLD = {
    "graph_0_cpp_fused_add_relu_0": "generated kernels",
    "graph_0_cpp_fused_mean_12": "generated kernels",
    "mkldnn::_convolution_pointwise": "convolution",
    "aten::addmm": "matmul",
    "aten::empty_strided": "memory and views",
    "TorchDynamo Cache Lookup": "wrapper and guards",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::upsample_bilinear2d": "other library ops",
    "mkldnn::_linear_pointwise": "matmul",
}


@pytest.mark.parametrize(("name", "category"), NAMES_OLD.items())
def test_an_event_gets_the_category_a_reader_knows(name, category):
    assert explain.category_of(name) == category


def test_kernels_match_across_compiles_without_their_numbers():
    assert explain.kernel_key("graph_0_cpp_fused_add_relu_0") == explain.kernel_key("graph_3_cpp_fused_add_relu_17")
    assert explain.kernel_key("aten::addmm") == "aten::addmm"


def profile(generated_us, conv_us, wall_ms, seed, rounds=5, calls=10, torch="2.0.1"):
    """A profile.json as harness/profiling.capture writes it, its rounds drawn with 1% noise."""
    rng = random.Random(seed)
    entries = []
    for _ in range(rounds):
        jitter = 1 + rng.gauss(0, 0.01)
        events = {
            "graph_0_cpp_fused_add_relu_0": {
                "count": calls,
                "self_cpu_us": generated_us * calls * jitter,
                "self_device_us": 0.0,
            },
            "mkldnn::_convolution_pointwise": {
                "count": calls,
                "self_cpu_us": conv_us * calls * jitter,
                "self_device_us": 0.0,
            },
        }
        entries.append({"calls": calls, "wall_s": wall_ms * calls * jitter / 1000, "events": events})
    return {
        "torch": torch,
        "device": "cpu",
        "rounds": entries,
        "compile_phases_s": {"_compile.compile_inner": 3.0},
        "health": {"graph_count": 1, "graph_break_count": 0, "recompile_count": 0},
        "code": {"files": 4, "kept": True},
        "kernels_named": 1,
    }


def test_categories_sum_to_the_profiled_call_each_round():
    side = explain.side_of("A", profile(10_000, 20_000, 35.0, seed=1))
    for index, wall in enumerate(side.wall_ms):
        assert sum(values[index] for values in side.categories.values()) == pytest.approx(wall)
    assert side.category_ms("generated kernels") == pytest.approx(10.0, rel=0.02)
    assert side.category_ms(explain.UNRECORDED) == pytest.approx(5.0, rel=0.2)  # 35 - 10 - 20


def test_an_aa_moves_nothing_and_a_real_change_moves_its_category():
    a = explain.side_of("A", profile(10_000, 20_000, 35.0, seed=1))
    again = explain.side_of("A'", profile(10_000, 20_000, 35.0, seed=2))
    assert not any(shift.moved for shift in explain.shifts(a, again, margin=0.1))
    slower = explain.side_of("B", profile(16_000, 20_000, 41.0, seed=3, torch="2.15.0"))
    moved = {shift.category: shift for shift in explain.shifts(a, slower, margin=0.1)}
    assert moved["generated kernels"].moved and moved["generated kernels"].delta_ms == pytest.approx(6.0, rel=0.1)
    assert not moved["convolution"].moved
    (_, category, a_ms, b_ms), *_ = explain.moved_events(a, slower)
    assert (category, round(b_ms - a_ms)) == ("generated kernels", 6)


def test_a_small_shift_within_the_margin_is_not_called_a_move():
    a = explain.side_of("A", profile(10_000, 20_000, 35.0, seed=1, rounds=5))
    b = explain.side_of("B", profile(10_500, 20_000, 35.5, seed=4, rounds=5))  # +5%: clear, but within +-10%
    assert not next(s for s in explain.shifts(a, b, margin=0.1) if s.category == "generated kernels").moved


def test_the_report_lays_a_beside_b_and_says_what_moved():
    from compilebench.explain import Target

    target = Target(
        "microsoft/resnet-50",
        "ResNet",
        1,
        "default",
        "torch-2.0.1",
        "torch-2.15.0",
        ("compiled latency slower 1.170 [1.10, 1.24]",),
    )
    a = explain.side_of("torch-2.0.1", profile(10_000, 20_000, 35.0, seed=1), compile_s=40.0)
    b = explain.side_of("torch-2.15.0", profile(16_000, 20_000, 41.0, seed=3, torch="2.15.0"), compile_s=30.0)
    text = report([(target, {"torch-2.0.1": a, "torch-2.15.0": b}, {"torch-2.0.1": 34.0, "torch-2.15.0": 40.0})], 0.1)
    assert "## ResNet bs1 default: torch-2.0.1 → torch-2.15.0" in text
    assert "Changed: compiled latency slower 1.170 [1.10, 1.24]." in text
    line = next(row for row in text.splitlines() if row.startswith("| generated kernels |"))
    assert "**moved**" in line and "| 10.0" in line
    assert "Moved: generated kernels." in text and "| `_compile.compile_inner` | dynamo trace | 3.00 | 3.00 |" in text
    assert "| torch | 2.0.1 | 2.15.0 |" in text and "Profiled call against the timing blocks' latency" in text
    assert "did not give" not in text and "Not to be read" not in text
    busy = report([(target, {"torch-2.0.1": a, "torch-2.15.0": b}, {"torch-2.0.1": 34.0, "torch-2.15.0": 6.0})], 0.1)
    assert "**Not to be read:** torch-2.15.0's (+585%) profiled call is more than ±25% off" in busy
    bare = profile(10_000, 20_000, 35.0, seed=1)
    bare.update(compile_phases_s={}, health={"graph_count": 1}, kernels_named=0)  # a release that gives less
    old = explain.side_of("torch-2.0.1", bare)
    text = report([(target, {"torch-2.0.1": old, "torch-2.15.0": b}, {})], 0.1)
    assert (
        "torch-2.0.1 (torch 2.0.1) did not give: dynamo's compile-time table; its generated kernels by name (their "
        "time is in `unrecorded`); graph breaks; recompiles." in text
    )
    assert "| graph breaks | not given | 0 |" in text and "torch-2.15.0 (torch 2.15.0) did not give" not in text
    failed = report([(target, {"torch-2.0.1": a, "torch-2.15.0": {"status": "crashed", "error": "boom"}}, {})], 0.1)
    assert "torch-2.15.0's profiled process ended `crashed`: boom" in failed


def test_with_an_aa_a_move_no_larger_than_b_s_two_processes_differ_is_not_called_one():
    from compilebench.explain import Target

    a = explain.side_of("A", profile(10_000, 20_000, 35.0, seed=1))
    b = explain.side_of("B", profile(13_000, 20_000, 38.0, seed=3))  # +3 ms of generated kernels
    loud = explain.side_of("B again", profile(16_500, 20_000, 41.5, seed=5))  # B's second process: +3.5 ms
    quiet = explain.side_of("B again", profile(13_000, 20_000, 38.0, seed=6))
    assert next(s for s in explain.shifts(a, b, 0.1) if s.category == "generated kernels").moved
    aa = {shift.category: shift for shift in explain.shifts(b, loud, 0.1)}
    assert not next(
        s for s in explain.within_aa(explain.shifts(a, b, 0.1), aa) if s.category == "generated kernels"
    ).moved
    target = Target("m", "M", 1, "default", "A", "B", ())
    text = report([(target, {"A": a, "B": b, "B again": quiet}, {})], 0.1)
    assert "| per call, ms | A | B | B − A [95% CI] | B again − B | moved |" in text
    assert (
        "A/A, two processes of B: no category moved, as an A/A should." in text and "Moved: generated kernels." in text
    )
    text = report([(target, {"A": a, "B": b, "B again": {"status": "crashed", "error": "x"}}, {})], 0.1)
    assert "B again's profiled process ended `crashed`" in text and "Moved: generated kernels." in text


def test_a_series_is_explained_step_by_step_and_an_asked_cell_against_the_baseline():
    import pandas as pd
    from conftest import ROOT

    from compilebench.analysis import compare
    from compilebench.explain import ExplainError, targets

    table = pd.read_csv(ROOT / "tests/fixtures/series-comparison.csv")  # a bisect's round of three releases
    compared = [compare.Comparison.read(row) for row in table.to_dict("records")]
    labels = ["torch-2.0.1", "torch-2.7.1", "torch-2.15.0"]
    found = {(t.model_id, t.variant, t.baseline, t.candidate) for t in targets(compared, None, [], labels)}
    assert ("microsoft/resnet-50", "default", "torch-2.0.1", "torch-2.7.1") in found
    assert all((a, b) in {("torch-2.0.1", "torch-2.7.1"), ("torch-2.7.1", "torch-2.15.0")} for _, _, a, b in found)
    asked = targets(compared, "torch-2.15.0", [("microsoft/resnet-50", 1, "default")], labels)
    assert [(t.baseline, t.candidate) for t in asked] == [("torch-2.0.1", "torch-2.15.0")]
    with pytest.raises(ExplainError, match="no compiled cell"):
        targets(compared, None, [("microsoft/resnet-50", 1, "nope")], labels)
