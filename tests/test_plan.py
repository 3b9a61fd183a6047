"""The run order: rounds of replicates (cold first), runs shuffled by seed, environments in balanced blocks."""

from collections import Counter

from compilebench import plan
from compilebench.records import CACHE_COLD, CACHE_SHARED, CACHE_WARM, ModelSpec, TimingSpec, VariantSpec

MODELS = [ModelSpec(f"org/m{i}", f"M{i}", "image-classification", "X", f"ckpt/m{i}") for i in range(3)]
VARIANTS = [
    VariantSpec("eager", compile=False),
    VariantSpec("default"),
    VariantSpec("freezing", inductor={"freezing": True}),
]


def _trials(labels, replicates=3, cold=1, shared=False, seed=0):
    slots = plan.slots(MODELS, [1, 4], VARIANTS)
    return plan.trials(slots, labels, replicates, cold, shared, "image.jpg", TimingSpec(), seed)


def test_labels_of_an_environment_named_twice():
    assert plan.environment_labels(["current", "torch-2.14.1"]) == ["current", "torch-2.14.1"]
    assert plan.environment_labels(["current", "current", "current"]) == ["current", "current#2", "current#3"]


def test_every_run_gets_its_replicates_one_process_each():
    trials = _trials(["current"])
    assert len(trials) == 3 * 2 * 2 * 3  # models x batch sizes x compiled variants x replicates
    assert len({t.trial_id for t in trials}) == len(trials)
    per_run = Counter(t.run_key for t in trials)
    assert set(per_run.values()) == {3}
    assert all(t.variant.compile for t in trials)  # eager is timed inside each trial, paired


def test_cold_round_comes_first_then_warm():
    trials = _trials(["current"], replicates=3, cold=1)
    caches = [t.cache for t in trials]
    first_round = len(trials) // 3
    assert set(caches[:first_round]) == {CACHE_COLD} and set(caches[first_round:]) == {CACHE_WARM}
    for run in {t.run_key for t in trials}:  # the cold trial of a run precedes its warm ones
        replicates = [t.replicate for t in trials if t.run_key == run]
        assert replicates == sorted(replicates)
    assert {t.cache for t in _trials(["current"], shared=True)} == {CACHE_SHARED}


def test_two_environments_alternate_in_balanced_blocks():
    trials = _trials(["a", "b"])
    order = [t.environment for t in trials]
    blocks = [tuple(order[i : i + 2]) for i in range(0, len(order), 2)]
    assert all(set(block) == {"a", "b"} for block in blocks)  # each run: both environments back to back
    assert all(blocks[i] != blocks[i + 1] for i in range(len(blocks) - 1))  # A B, B A, A B ...
    firsts = Counter(block[0] for block in blocks)
    assert abs(firsts["a"] - firsts["b"]) <= 1  # each goes first equally often
    for run in {(t.model.model_id, t.batch_size, t.variant.name, t.replicate) for t in trials}:
        sides = [t.environment for t in trials if (t.model.model_id, t.batch_size, t.variant.name, t.replicate) == run]
        assert sorted(sides) == ["a", "b"]


def test_three_environments_rotate():
    order = [t.environment for t in _trials(["a", "b", "c"], replicates=1)]
    blocks = [tuple(order[i : i + 3]) for i in range(0, len(order), 3)]
    assert Counter(block[0] for block in blocks[:3]) == Counter("abc")


def test_order_is_seeded():
    ids = [t.trial_id for t in _trials(["a", "b"], seed=1)]
    assert ids == [t.trial_id for t in _trials(["a", "b"], seed=1)]
    assert ids != [t.trial_id for t in _trials(["a", "b"], seed=2)]


def test_eager_only_suite_times_eager():
    slots = plan.slots(MODELS[:1], [1], VARIANTS[:1])
    assert [slot.variant.name for slot in slots] == ["eager"]
