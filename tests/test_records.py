"""The typed records that cross processes and machines: JSON round trips, and stale or foreign files refused."""

import json

import pytest

from compilebench.harness.records import CompileHealth, ModelSpec, Plan, TimingSpec, TrialResult, TrialSpec, VariantSpec

SPEC = TrialSpec(
    "current/org--m/bs4/freezing/r1", "current",
    ModelSpec("org/m", "M", "zero-shot-object-detection", "OwlViTForObjectDetection", "ckpt", ("a cat",), ((1, 2),)),
    4, VariantSpec("freezing", inductor={"freezing": True}), 1, "warm", "image.jpg", TimingSpec(device="cuda"),
)  # fmt: skip


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
