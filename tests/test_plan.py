"""The run order: cold rounds first, then timing rounds; units shuffled by seed, environments in balanced blocks; a
timing process's arms, their compile order rotating in a Williams design; variants a process cannot hold, alone."""

import json
from collections import Counter
from dataclasses import replace

import pytest

from compilebench import costs
from compilebench.analysis import plan, pricing
from compilebench.records.formats import (
    CACHE_COLD,
    CACHE_SHARED,
    CACHE_WARM,
    KIND_ARM,
    KIND_COLD,
    KIND_PAIRED,
    ModelSpec,
    Plan,
    TimingSpec,
    TrialSpec,
    VariantSpec,
    environment_labels,
    processes,
    williams_orders,
)

MODELS = [ModelSpec(f"org/m{i}", f"M{i}", "image-classification", "X", f"ckpt/m{i}") for i in range(3)]
EAGER = VariantSpec("eager", compile=False)
DEFAULT = VariantSpec("default")
FREEZING = VariantSpec("freezing", inductor={"freezing": True})
VARIANTS = [EAGER, DEFAULT, FREEZING]


def _trials(labels, variants=VARIANTS, replicates=3, cold=1, shared=False, seed=0):
    return plan.trials(MODELS, [1, 4], variants, labels, replicates, cold, shared, "image.jpg", TimingSpec(), seed)


def test_labels_of_an_environment_named_twice():
    assert environment_labels(["current", "torch-2.14.1"]) == ["current", "torch-2.14.1"]
    assert environment_labels(["current", "current", "current"]) == ["current", "current#2", "current#3"]


def test_a_timing_process_per_block_holds_every_arm_and_cold_processes_compile_each_variant():
    trials = _trials(["current"])
    cells = 3 * 2  # models x batch sizes
    assert len({t.trial_id for t in trials}) == len(trials)
    cold = [t for t in trials if t.kind == KIND_COLD]
    assert len(cold) == cells * 2 and {t.cache for t in cold} == {CACHE_COLD}  # one per compiled variant
    timing = [group for group in processes(trials) if group[0].kind == KIND_ARM]
    assert len(timing) == cells * 3  # one per cell and block
    assert all(group[0].variant.name == "eager" for group in timing)  # eager is loaded first
    assert all(sorted(arm.variant.name for arm in group) == ["default", "eager", "freezing"] for group in timing)
    assert {arm.cache for group in timing for arm in group} == {CACHE_WARM}
    assert all(len({arm.process_id for arm in group}) == 1 for group in timing)


def test_cold_rounds_come_first():
    trials = _trials(["current"])
    kinds = [t.kind for t in trials]
    assert kinds.index(KIND_ARM) == kinds.count(KIND_COLD)  # every compile-only process before any timing
    assert {t.cache for t in _trials(["current"], shared=True)} == {CACHE_SHARED}
    assert not [t for t in _trials(["current"], shared=True) if t.kind == KIND_COLD]  # a shared cache is never cold


def test_compile_order_rotates_in_a_williams_design_and_both_sides_of_a_block_share_it():
    variants = [EAGER, DEFAULT, FREEZING, VariantSpec("autotune", mode="max-autotune")]
    trials = _trials(["a", "b"], variants, replicates=6)
    orders = {}
    for group in processes(trials):
        if group[0].kind == KIND_ARM:
            key = (group[0].model.model_id, group[0].batch_size, group[0].replicate)
            orders.setdefault(key, set()).add(tuple(arm.variant.name for arm in group[1:]))
    assert all(len(sides) == 1 for sides in orders.values())  # A and B of a block compile in one order
    firsts = Counter(next(iter(sides))[0] for key, sides in orders.items() if key[:2] == ("org/m0", 1))
    assert set(firsts.values()) == {2}  # 6 blocks, 3 compiled arms: each compiles first twice
    assert plan.compile_order([FREEZING, EAGER, DEFAULT], 0) == plan.compile_order([EAGER, DEFAULT, FREEZING], 0)


def test_two_environments_alternate_in_balanced_blocks():
    trials = _trials(["a", "b"])
    order = [group[0].environment for group in processes(trials)]
    blocks = [tuple(order[i : i + 2]) for i in range(0, len(order), 2)]
    assert all(set(block) == {"a", "b"} for block in blocks)  # each unit: both environments back to back
    assert all(blocks[i] != blocks[i + 1] for i in range(len(blocks) - 1))  # A B, B A, A B ...
    firsts = Counter(block[0] for block in blocks)
    assert abs(firsts["a"] - firsts["b"]) <= 1  # each goes first equally often


def test_three_environments_rotate():
    groups = processes(_trials(["a", "b", "c"], replicates=1, cold=0))
    order = [group[0].environment for group in groups]
    blocks = [tuple(order[i : i + 3]) for i in range(0, len(order), 3)]
    assert Counter(block[0] for block in blocks[:3]) == Counter("abc")


def test_order_is_seeded():
    ids = [t.trial_id for t in _trials(["a", "b"], seed=1)]
    assert ids == [t.trial_id for t in _trials(["a", "b"], seed=1)]
    assert ids != [t.trial_id for t in _trials(["a", "b"], seed=2)]


def test_variants_a_process_cannot_hold_are_paired_trials_of_their_own():
    fullgraph = VariantSpec("fullgraph", fullgraph=True)  # the same backend as default: it would reuse its graph
    aoti = VariantSpec("aoti", deploy="aoti", inductor={"freezing": True})
    served = VariantSpec("serve-auto", serve=True, dynamic=None)
    arms, singles = plan.arms_and_singles([EAGER, DEFAULT, fullgraph, aoti, served, FREEZING])
    assert [v.name for v in arms] == ["eager", "default", "freezing"]
    assert [v.name for v in singles] == ["fullgraph", "aoti", "serve-auto"]
    trials = _trials(["current"], [EAGER, DEFAULT, aoti], replicates=3, cold=1)
    paired = [t for t in trials if t.kind == KIND_PAIRED]
    assert {t.variant.name for t in paired} == {"aoti"}
    per_cell = Counter((t.model.model_id, t.batch_size) for t in paired)
    assert set(per_cell.values()) == {3}  # replicates of them, the first on an empty cache
    assert Counter(t.cache for t in paired) == {CACHE_COLD: 6, CACHE_WARM: 12}


def test_only_paired_trials_when_no_variant_can_be_an_arm_and_eager_alone_when_none_compiles():
    aoti = VariantSpec("aoti", deploy="aoti")
    assert {t.kind for t in _trials(["current"], [EAGER, aoti])} == {KIND_PAIRED}  # each pairs eager itself
    alone = _trials(["current"], [EAGER], replicates=2)
    assert {(t.kind, t.variant.name) for t in alone} == {(KIND_ARM, "eager")} and len(alone) == 3 * 2 * 2


def test_cells_leave_out_the_variants_a_cell_does_not_measure_and_the_cells_with_none():
    reduce = VariantSpec("reduce-overhead", mode="reduce-overhead")
    cells = frozenset({("org/m0", 1, "default"), ("org/m0", 1, "reduce-overhead"), ("org/m1", 1, "default")})
    trials = plan.trials(
        MODELS, [1, 4], [EAGER, DEFAULT, reduce], ["current"], 5, 1, True, "image.jpg", TimingSpec(), 0, cells
    )
    arms = {
        (group[0].model.model_id, group[0].batch_size): [spec.variant.name for spec in group]
        for group in processes(trials)
    }
    assert {key: sorted(names) for key, names in arms.items()} == {
        ("org/m0", 1): ["default", "eager", "reduce-overhead"],
        ("org/m1", 1): ["default", "eager"],
    }  # m2 and batch 4: nothing published, not run
    assert len(processes(trials)) == 2 * 5 and all(group[0].variant.name == "eager" for group in processes(trials))
    everything = plan.trials(
        MODELS, [1, 4], [EAGER, DEFAULT, reduce], ["current"], 5, 1, True, "image.jpg", TimingSpec(), 0
    )
    assert len(processes(everything)) == 6 * 5 and len(everything) == 6 * 5 * 3  # no cells: every cell, every arm


@pytest.mark.parametrize("arms", range(1, 7))
def test_williams_orders_balance_positions_and_what_follows_what(arms):
    orders = williams_orders(arms)
    assert all(sorted(order) == list(range(arms)) for order in orders)
    positions = Counter((arm, place) for order in orders for place, arm in enumerate(order))
    assert len(positions) == arms * arms and len(set(positions.values())) == 1
    follows = Counter((order[i], order[i + 1]) for order in orders for i in range(arms - 1))
    assert len(follows) == arms * (arms - 1) and len(set(follows.values())) <= 1


def test_a_spec_names_its_process_exactly_when_it_is_an_arm():
    with pytest.raises(ValueError, match="kind must be one of"):
        TrialSpec("a/m/bs1/default/r0", "a", MODELS[0], 1, DEFAULT, 0, CACHE_WARM, "i", TimingSpec(), kind="odd")
    with pytest.raises(ValueError, match="names its process"):
        TrialSpec("a/m/bs1/default/r0", "a", MODELS[0], 1, DEFAULT, 0, CACHE_WARM, "i", TimingSpec(), kind=KIND_ARM)


COSTS = {
    "device": "GPU-X",
    "stack": "torch 9",
    "models": {
        "org/m0": {
            "startup_s": 5.0,
            "load_s": 3.0,
            "eager_ms": {"1": 10.0},
            "variants": {
                "default": {"cold_compile_s": 20.0, "warm_compile_s": 4.0, "call_ms": {"1": 5.0}},
                "freezing": {"cold_compile_s": 30.0, "warm_compile_s": 6.0, "call_ms": {"1": 5.0}},
            },
        },
        "org/m1": {
            "startup_s": 7.0,
            "load_s": 5.0,
            "eager_ms": {"1": 30.0},
            "variants": {"default": {"cold_compile_s": 40.0, "warm_compile_s": 8.0, "call_ms": {"1": 15.0}}},
        },
    },
}


def test_a_plan_is_estimated_from_the_costs_of_itsprocesses():
    timing = TimingSpec(min_iters=100, min_time_s=4.0, max_time_s=60.0, warmup_s=1.0)
    trials = plan.trials(MODELS[:1], [1], VARIANTS, ["a"], 2, 1, False, "i.jpg", timing, 0)
    found = pricing.estimate(trials, COSTS)
    cold = 2 * (5 + 3) + 20 + 30 + 2 * (1.0 + 4.0)  # a cold process per variant: its compile, then eager and it timed
    timing_process = 5 + 3 + 4 + 6 + 1.0 + 4.0  # warm compiles, warm-up, 100 rounds of 20 ms: 2 s < 4 s
    assert found.processes == 4 and found.seconds == pytest.approx(cold + 2 * timing_process) and not found.borrowed
    slow = pricing.estimate(
        plan.trials(
            MODELS[:1],
            [1],
            VARIANTS,
            ["a"],
            1,
            0,
            True,
            "i.jpg",
            TimingSpec(min_iters=1000, min_time_s=4.0, max_time_s=60.0),
            0,
        ),
        COSTS,
    )
    assert slow.seconds == pytest.approx(5 + 3 + 4 + 6 + 1.0 + 20.0)  # 1000 rounds of 20 ms: 20 s timed
    assert slow.primes == 2 and slow.prime_s == pytest.approx(2 * (5 + 3) + 20 + 30)  # shared: primed, not cold
    assert found.primes == 0 and found.prime_s == 0  # cold processes of its own: nothing to prime


def test_a_model_or_variant_without_costs_borrows_the_median_of_the_others():
    timing = TimingSpec(min_iters=10, min_time_s=0.0, max_time_s=60.0, warmup_s=0.0)
    trials = plan.trials(MODELS[1:3], [1], VARIANTS[:2], ["a"], 1, 1, False, "i.jpg", timing, 0)
    found = pricing.estimate(trials, COSTS)
    assert found.borrowed == ("org/m2", "org/m2 default")  # m1's own costs; m2 has none
    m1 = (7 + 5 + 40) + (7 + 5 + 8) + 2 * (2 + 10) * 0.045  # each process two warm-up rounds, ten timed
    m2 = (6 + 4 + 30) + (6 + 4 + 6) + 2 * (2 + 10) * 0.030  # the medians of m0 and m1
    assert found.seconds == pytest.approx(m1 + m2)


def test_a_latency_is_taken_at_its_batch_size_and_one_from_another_batch_is_named():
    timing = TimingSpec(min_iters=1000, min_time_s=0.0, max_time_s=600.0, warmup_s=0.0)
    at_16 = plan.trials(MODELS[:2], [16], VARIANTS[:2], ["a"], 1, 0, False, "i.jpg", timing, 0)
    guessed = pricing.estimate(at_16, COSTS)  # no latency at batch 16 in the table: batch 1's, and the output says so
    assert guessed.borrowed == (
        "org/m0 default at batch 16 (latency of batch 1)",
        "org/m0 eager at batch 16 (latency of batch 1)",
        "org/m1 default at batch 16 (latency of batch 1)",
        "org/m1 eager at batch 16 (latency of batch 1)",
    )
    assert guessed.seconds == pytest.approx(pricing.estimate([replace(s, batch_size=1) for s in at_16], COSTS).seconds)
    grown = pricing.estimate(
        at_16, {**COSTS, "batch_ratios": {"org/m0": {"eager_ms": {"1": 1.0, "4": 1.5, "16": 4.0}}}}
    )
    assert "org/m0 eager at batch 16 (latency of batch 1 x 4.00, the doc's growth from batch 1)" in grown.borrowed
    assert "org/m0 default at batch 16 (latency of batch 1)" in grown.borrowed  # no compiled growth given: as it was
    rounds = 1000 + timing.warmup_iters
    assert grown.seconds - guessed.seconds == pytest.approx(rounds * (4.0 - 1.0) * 0.010)  # m0's eager: 10 ms a call
    costs = json.loads(json.dumps(COSTS))
    costs["models"]["org/m0"]["eager_ms"]["16"] = 100.0
    costs["models"]["org/m0"]["variants"]["default"]["call_ms"]["16"] = 60.0
    measured = pricing.estimate(
        at_16, costs
    )  # m0 measured at 16; m1 borrows m0's batch-16 latency, not its own batch 1
    assert measured.borrowed == ("org/m1", "org/m1 default")
    rounds = 1000 + timing.warmup_iters  # timed and warm-up rounds, each 160 ms at batch 16 instead of 15 and 45
    assert measured.seconds - guessed.seconds == pytest.approx(rounds * ((0.160 - 0.015) + (0.160 - 0.045)))


def test_a_process_of_arms_is_estimated_with_inductors_start_up_and_the_rest_of_its_wall():
    timing = TimingSpec(min_iters=100, min_time_s=4.0, max_time_s=60.0, warmup_s=1.0)
    trials = plan.trials(MODELS[:2], [1], VARIANTS[:2], ["a"], 1, 0, True, "i.jpg", timing, 0)
    older = pricing.estimate(trials, COSTS)  # a table from before processes of arms: nothing added, nothing borrowed
    costs = {
        **COSTS,
        "models": {
            **COSTS["models"],
            "org/m0": {**COSTS["models"]["org/m0"], "inductor_startup_s": 5.0, "other_s": 7.0},
        },
    }
    found = pricing.estimate(trials, costs)
    assert found.seconds == pytest.approx(older.seconds + 2 * (5 + 7))  # m1 borrows m0's, the only measured
    assert older.borrowed == () and found.borrowed == ("org/m1 (process of arms)",)


def _sized(sizes: list[float], labels=("a", "b")) -> tuple[list[TrialSpec], dict]:
    """A plan of one eager timing process per model and label, and a cost table in which model i's process takes
    sizes[i] minutes."""
    models = [ModelSpec(f"org/w{i}", f"W{i}", "image-classification", "X", f"ckpt/w{i}") for i in range(len(sizes))]
    table = {
        "device": "GPU-X",
        "stack": "torch 9",
        "models": {
            model.model_id: {"startup_s": 60.0 * size, "load_s": 0.0, "eager_ms": {"1": 0.0}}
            for model, size in zip(models, sizes, strict=True)
        },
    }
    timing = TimingSpec(min_iters=1, min_time_s=0.0, max_time_s=60.0, warmup_s=0.0)
    return plan.trials(models, [1], [EAGER], list(labels), 1, 0, False, "i.jpg", timing, 0), table


def test_a_plan_splits_into_the_fewest_windows_that_hold_it_each_model_and_batch_whole():
    """Units of 10, 8, 6, 6, 6 and 4 minutes (a model's A and B process) in windows of 20: first-fit decreasing needs
    three (10+8, 6+6+6, 4); two hold them (10+6+4, 8+6+6), and the search finds them."""
    trials, table = _sized([5, 4, 3, 3, 3, 2])
    split = pricing.windows(trials, table, 20)
    assert len(split) == 2 and sorted(s.trial_id for w in split for s in w) == sorted(s.trial_id for s in trials)
    assert [pricing.estimate(w, table).seconds for w in split] == [20 * 60, 20 * 60]
    for window in split:
        assert window == [spec for spec in trials if spec in window]  # the plan's order
        held = {spec.model.model_id for spec in window}
        assert all(spec in window for spec in trials if spec.model.model_id in held)  # A and B together
    assert len(pricing.windows(trials, table, 20, search_nodes=1)) == 3  # no search: first-fit decreasing's
    assert len(pricing.windows(trials, table, 60)) == 1


def test_a_unit_over_the_window_gets_one_alone_and_the_prime_is_counted_at_the_launchers_pace():
    trials, table = _sized([6, 2, 2])
    split = pricing.windows(trials, table, 10)  # 12 minutes for W0's two processes: alone, after the others
    assert [sorted({s.model.model_id for s in w}) for w in split] == [["org/w1", "org/w2"], ["org/w0"]]
    found = pricing.PlanCost(600.0, 4, (), prime_s=300.0, primes=3)
    assert pricing.window_seconds(found, 1) == 900 and pricing.window_seconds(found, 8) == 700  # 3 at once: 300 / 3
    with pytest.raises(ValueError, match="a window must be a positive number of minutes, got 0"):
        pricing.windows(trials, table, 0)


def ran(record):
    """A window record's processes whose every trial came back, how many the plan had, and their summed wall time."""
    exported = Plan.from_dict(json.loads((record / "plan.json").read_text()))
    walls = {row["trial_id"]: row["wall_s"] for row in map(json.loads, (record / "results/trials.jsonl").open())}
    planned = processes(list(exported.trials))
    done = [group for group in planned if all(spec.trial_id in walls for spec in group)]
    return done, len(planned), sum(walls[group[0].trial_id] for group in done)


def test_the_cost_table_accounts_for_the_whole_wall_of_the_gpu_windows_processes(repo_root):
    """compilebench.costs over an H100 window's ResNet-50 processes (tests/fixtures/h100-window: four timing
    processes, eager, `default` and `reduce-overhead`) estimates their summed wall time within 5%: start-up, load,
    inductor's start-up, each arm's compile, warm-up, timing and the rest of a process are all in the table."""
    record = repo_root / "tests/fixtures/h100-window"
    done, _, measured = ran(record)
    table = costs.costs([record])
    found = pricing.estimate([spec for group in done for spec in group], table)
    assert len(done) == 4 and found.seconds == pytest.approx(measured, rel=0.05)
    primed = {f"{spec.model.model_id} {spec.variant.name}" for group in done for spec in group if spec.variant.compile}
    assert set(found.borrowed) == primed  # only the prime's cold compiles (a shared cache: none in trials.jsonl)
    assert all(entry["inductor_startup_s"] > 0 and entry["other_s"] > 0 for entry in table["models"].values())
    assert all(set(entry["eager_ms"]) == {"1"} for entry in table["models"].values())  # batch 1 only, said so
    assert all(set(v["call_ms"]) == {"1"} for entry in table["models"].values() for v in entry["variants"].values())
