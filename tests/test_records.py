"""The typed records that cross processes and machines: JSON round trips, and stale or foreign files refused."""

import json
import re

import pytest

from compilebench.records.formats import (
    CompileHealth,
    ModelSpec,
    Plan,
    RecordError,
    TimingSpec,
    TrialResult,
    TrialSpec,
    VariantSpec,
)
from compilebench.records.reading import read_result_lines
from compilebench.records.writing import append_lines

SPEC = TrialSpec(
    "current/org--m/bs4/freezing/r1",
    "current",
    ModelSpec("org/m", "M", "zero-shot-object-detection", "OwlViTForObjectDetection", "ckpt", ("a cat",), ((1, 2),)),
    4,
    VariantSpec("freezing", inductor={"freezing": True}),
    1,
    "warm",
    "image.jpg",
    TimingSpec(device="cuda"),
)


def test_trial_spec_round_trips_through_json():
    assert TrialSpec.from_dict(json.loads(json.dumps(SPEC.to_dict()))) == SPEC
    assert SPEC.run_key == ("current", "org/m", 4, "freezing")
    assert SPEC.cache_key == "current/org--m/bs4/freezing"


def test_trial_result_round_trips_through_json():
    result = TrialResult("t", "ok", eager_ms=(1.0, 2.0), compiled_ms=(0.5, 0.6), health=CompileHealth(graph_count=1))
    assert TrialResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_plan_round_trips_and_unknown_fields_are_refused():
    plan = Plan("inv", (SPEC,))
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    raw = SPEC.to_dict()
    raw["timing"]["min_iterz"] = 3
    with pytest.raises(ValueError, match="min_iterz"):
        TrialSpec.from_dict(raw)


def test_a_plans_loop_is_typed_and_a_plan_of_before_reads_back_with_its_settings(repo_root):
    """The loop an exported plan carries comes back as the records the launcher hands to the analysis: the settings
    the config's section made, the invocation's context and its labels. A plan of 2026-11-27 (a committed window)
    carried the validity thresholds alone as its context: they come back with the plan's invocation id."""
    from compilebench.config import Benchmark
    from compilebench.records.invocation import Context, Loop

    section = Benchmark(replicates=4, max_replicates=6, min_iters=7)
    context = Context("inv", "cpu", "full", "vm", "abc", "download", "00", section.validity())
    plan = Plan("inv", (SPEC,), adaptive=Loop(section.loop(0.1, 10.0), context, ("current", "B")))
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan
    assert again.adaptive.settings.max_replicates == 6 and again.adaptive.settings.margin == 0.1
    assert again.adaptive.context.validity.min_iters == 7
    older = json.loads((repo_root / "tests/fixtures/h100-window/plan.json").read_text())
    loop = Plan.from_dict(older).adaptive
    assert loop.settings.replicates == older["adaptive"]["settings"]["replicates"] == 5
    assert loop.context.invocation_id == older["invocation_id"] and loop.context.validity.min_iters == 100
    assert loop.labels == ("current",)


def _lines(tmp_path, rows, torn=""):
    path = tmp_path / "trials.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + torn)
    return path


GOOD = TrialResult("a/m/bs1/default/r0", "ok", eager_ms=(1.0,), compiled_ms=(0.5,), compile_s=3.0).to_dict()


def test_result_lines_are_checked_where_they_are_read_naming_the_file_line_and_key(tmp_path):
    assert [r.trial_id for r in read_result_lines(_lines(tmp_path, [GOOD], torn='{"trial_id": "cut sh'))] == [
        GOOD["trial_id"]
    ]  # a torn last line (a kill mid-write) is left out, as its process runs again
    cases = [
        ({k: v for k, v in GOOD.items() if k != "status"}, "line 2: missing keys ['status']"),
        ({k: v for k, v in GOOD.items() if k != "eager_ms"}, "line 2: missing keys ['eager_ms']"),
        ({**GOOD, "compile_s": "3.0"}, "line 2: key 'compile_s' must be float | None, got str"),
        ({**GOOD, "eager_ms": 1.0}, "line 2: key 'eager_ms' must be tuple[float, ...], got float"),
        ({**GOOD, "status": "fine"}, "line 2: key 'status' must be one of"),
        ({**GOOD, "format": 9}, "line 2: result format 9 is not one this version reads"),
        ({**GOOD, "surprise": 1}, "line 2: unknown keys ['surprise']"),
    ]
    for bad, message in cases:
        path = _lines(tmp_path, [GOOD, bad])
        with pytest.raises(RecordError, match=re.escape(f"{path}, {message}")):
            read_result_lines(path)
    path = tmp_path / "middle.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(RecordError, match=r"middle.jsonl, line 2: not JSON"):  # torn only when last
        read_result_lines(path)


def test_a_result_line_of_the_earlier_format_is_read_with_defaults_and_still_type_checked(tmp_path):
    older = {"trial_id": "a/m/bs1/default/r0", "status": "ok", "eager_ms": [1.0], "compiled_ms": [0.5]}  # no format
    [result] = read_result_lines(_lines(tmp_path, [older]))
    assert result.compile_position is None and result.arms == () and result.eager_ms == (1.0,)
    with pytest.raises(RecordError, match="key 'compiled_ms'"):
        read_result_lines(_lines(tmp_path, [{**older, "compiled_ms": "0.5"}]))


def test_a_format_2_line_needs_every_field_but_the_timeline_added_since(tmp_path):
    format_2 = {**{k: v for k, v in GOOD.items() if k != "timeline_s"}, "format": 2}  # as the H100 windows wrote
    [result] = read_result_lines(_lines(tmp_path, [format_2]))
    assert result.timeline_s == {} and result.compile_s == 3.0
    for bad, missing in (
        ({k: v for k, v in format_2.items() if k != "arms"}, "arms"),
        ({k: v for k, v in GOOD.items() if k != "timeline_s"}, "timeline_s"),
    ):
        with pytest.raises(RecordError, match=re.escape(f"missing keys ['{missing}']")):
            read_result_lines(_lines(tmp_path, [bad]))


@pytest.mark.parametrize(
    ("before", "after"),
    [(None, "b\nc\n"), ("", "b\nc\n"), ("a\n", "a\nb\nc\n"), ('a\n{"torn', "a\nb\nc\n"), ('{"torn', "b\nc\n")],
)
def test_appended_lines_never_join_a_torn_last_line(tmp_path, before, after):
    path = tmp_path / "trials.jsonl"
    if before is not None:
        path.write_text(before)
    append_lines(path, ["b", "c"])
    assert path.read_text() == after
