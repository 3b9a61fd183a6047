"""A bisect's decisions over judged steps (analysis/bisection.py): hand-made steps in, searches and rounds out."""

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import descendants

from compilebench.analysis import bisection
from compilebench.analysis.bisection import (
    OPEN,
    OUT_OF_TIME,
    PINNED,
    RETRY,
    SPREAD,
    UNRESOLVED,
    Headline,
    RoundPlan,
    RoundResult,
    Search,
    Spec,
    Step,
)
from compilebench.bisect import BisectError, release_names, with_definitions
from compilebench.config import releases
from compilebench.report.bisection import figure, report

RESNET = Headline("microsoft/resnet-50", "ResNet", 1, "default", "compiled_latency")
VIT = Headline("google/vit-base-patch16-224", "ViT", 1, "eager", "eager_latency")
NAMES = tuple(f"torch-2.{minor}.0" for minor in range(9))  # nine releases: positions 0..8
SPEC = Spec("torch-2.0.0-2.8.0", NAMES, bisection.HEADLINES, 0, False, 3, 60.0, "cpu")
INDEX = [
    "2.15.0",
    "2.14.1",
    "2.14.0",
    "2.13.0+cpu",
    "2.13.0",
    "2.12.1",
    "2.12.0",
    "2.11.0",
    "2.10.0",
    "2.9.1",
    "2.9.0",
    "2.3.1",
    "2.3.0",
    "2.2.2",
    "2.1.2",
    "2.0.1",
    "2.0.0",
    "2.4.0rc1",
]


def step(low, high, verdict, ratio=1.0, number=0):
    return Step(low, high, verdict, ratio, ratio * 0.95, ratio * 1.05, number)


def result(positions, cells, steps, number, wall_s=600.0, processes=10, replicates=3):
    return RoundResult(
        RoundPlan(positions, cells, replicates),
        f"r{number}",
        wall_s,
        tuple((h, step(*s, number=number)) for h, s in steps),
        (),
        processes,
    )


ENDS = result((0, 8), (), [(RESNET, (0, 8, "slower", 1.5)), (VIT, (0, 8, "equivalent"))], 0)


def test_only_headlines_whose_ends_changed_are_searched():
    searches = bisection.replay(SPEC, [ENDS])
    assert [(s.headline, s.low, s.high, s.direction, s.state) for s in searches] == [(RESNET, 0, 8, "slower", OPEN)]
    assert bisection.next_rounds(searches, SPEC) == [RoundPlan((0, 4, 8), (RESNET.cell,), 3)]


def test_ends_equivalent_cost_nothing_more_and_inconclusive_ones_are_measured_again():
    quiet = result((0, 8), (), [(RESNET, (0, 8, "equivalent")), (VIT, (0, 8, "equivalent"))], 0)
    assert bisection.replay(SPEC, [quiet]) == []
    plan, searches = bisection.next_plan(SPEC, [quiet], units=3)
    assert plan is None and searches == []
    unsure = result((0, 8), (), [(RESNET, (0, 8, "inconclusive")), (VIT, (0, 8, "equivalent"))], 0)
    (search,) = bisection.replay(SPEC, [unsure])
    assert (search.direction, search.state) == ("", RETRY)
    assert bisection.next_rounds([search], SPEC) == [RoundPlan((0, 8), (RESNET.cell,), 6)]  # the ends, twice the blocks
    again = [unsure, result((0, 8), (RESNET.cell,), [(RESNET, (0, 8, "equivalent"))], 1, replicates=6)]
    assert [s.state for s in bisection.replay(SPEC, again)] == [bisection.EQUIVALENT]
    changed = [unsure, result((0, 8), (RESNET.cell,), [(RESNET, (0, 8, "faster"))], 1, replicates=6)]
    assert [(s.state, s.direction) for s in bisection.replay(SPEC, changed)] == [(OPEN, "faster")]


def test_a_change_is_halved_down_to_one_step_between_adjacent_releases():
    rounds = [ENDS, result((0, 4, 8), (RESNET.cell,), [(RESNET, (0, 4, "equivalent")), (RESNET, (4, 8, "slower"))], 1)]
    (search,) = bisection.replay(SPEC, rounds)
    assert (search.low, search.high, search.state) == (4, 8, OPEN)
    rounds.append(result((4, 6, 8), (RESNET.cell,), [(RESNET, (4, 6, "slower")), (RESNET, (6, 8, "equivalent"))], 2))
    rounds.append(result((4, 5, 6), (RESNET.cell,), [(RESNET, (4, 5, "equivalent")), (RESNET, (5, 6, "slower"))], 3))
    (search,) = bisection.replay(SPEC, rounds)
    assert (search.low, search.high, search.state, search.direction) == (5, 6, PINNED, "slower")
    assert bisection.next_rounds([search], SPEC) == []
    text = report(SPEC, rounds, [search])
    assert len(figure(SPEC, rounds, [search]).axes) == 1
    with_values = [replace(rounds[-1], values=((RESNET, 5, 40.0), (RESNET, 6, 60.0)))]
    assert "torch-2.5.0 (40 ms), torch-2.6.0 (60 ms)" in report(SPEC, [*rounds[:-1], *with_values], [search])
    assert "| ResNet bs1 default | compiled latency | torch-2.5.0 → torch-2.6.0 | slower" in text and "pinned" in text


def test_a_change_in_two_steps_names_both():
    rounds = [ENDS, result((0, 4, 8), (RESNET.cell,), [(RESNET, (0, 4, "slower")), (RESNET, (4, 8, "faster"))], 1)]
    searches = bisection.replay(SPEC, rounds)
    assert [(s.low, s.high, s.direction) for s in searches] == [(0, 4, "slower"), (4, 8, "faster")]
    assert [plan.positions for plan in bisection.next_rounds(searches, SPEC)] == [(0, 2, 4), (4, 6, 8)]


def test_an_undecided_step_is_measured_again_once_with_twice_the_blocks_then_said_unresolved():
    undecided = [(RESNET, (0, 4, "inconclusive")), (RESNET, (4, 8, "equivalent"))]
    rounds = [ENDS, result((0, 4, 8), (RESNET.cell,), undecided, 1)]
    (search,) = bisection.replay(SPEC, rounds)
    assert search.state == RETRY
    assert bisection.next_rounds([search], SPEC) == [RoundPlan((0, 4, 8), (RESNET.cell,), 6)]
    rounds.append(result((0, 4, 8), (RESNET.cell,), undecided, 2, replicates=6))
    (search,) = bisection.replay(SPEC, rounds)
    assert (search.state, search.low, search.high) == (UNRESOLVED, 0, 4)  # the narrowest span found
    assert len(search.steps) == 5  # the ends' step and both rounds' two


def test_steps_all_equivalent_say_the_change_is_spread():
    rounds = [
        ENDS,
        result((0, 4, 8), (RESNET.cell,), [(RESNET, (0, 4, "equivalent")), (RESNET, (4, 8, "equivalent"))], 1),
    ]
    (search,) = bisection.replay(SPEC, rounds)
    assert search.state == SPREAD and (search.low, search.high) == (0, 8)


def test_a_round_that_does_not_fit_the_budget_ends_the_searches_with_their_price():
    spec = Spec(SPEC.name, NAMES, SPEC.metrics, 0, False, 3, 12.0, "cpu")  # 12 min; the ends took 10
    plan, searches = bisection.next_plan(spec, [ENDS], units=3)
    assert plan is None
    (search,) = searches
    assert search.state == OUT_OF_TIME and search.note.startswith("about 3 round(s), ~27 min")  # 60 s a process
    plan = RoundPlan((0, 4, 8), (RESNET.cell,), 3)
    assert bisection.round_price_s(plan, [ENDS], 3, {0, 8}) == 3 * 1 * 3 * 60 + bisection.BUILD_S  # 4 to build
    extended = result((0, 8), (), [(RESNET, (0, 8, "slower", 1.5))], 0, processes=36)  # twice the 18 planned
    assert bisection.round_price_s(plan, [extended], 3, {0, 8}) == 2 * 3 * 3 * (600 / 36) + bisection.BUILD_S


def test_the_aa_step_of_the_first_round_never_starts_a_search():
    spec = Spec(SPEC.name, NAMES, SPEC.metrics, 0, True, 3, 60.0, "cpu")
    assert bisection.ends_plan(spec).positions == (0, 8, 8)
    first = result((0, 8, 8), (), [(RESNET, (0, 8, "equivalent")), (RESNET, (8, 8, "slower"))], 0)
    assert bisection.replay(spec, [first]) == []
    assert "**changed: ResNet bs1 default compiled latency**" in report(spec, [first], [])


def test_the_journal_reads_back_what_it_wrote():
    rounds = [ENDS, result((0, 4, 8), (RESNET.cell,), [(RESNET, (0, 4, "equivalent")), (RESNET, (4, 8, "slower"))], 1)]
    journal = bisection.Journal(SPEC, "suite: cpu\n", rounds)
    again = bisection.Journal.from_dict(json.loads(json.dumps(journal.to_dict())))
    assert again == journal and bisection.replay(SPEC, again.rounds) == bisection.replay(SPEC, rounds)


def test_two_ends_step_through_the_newest_patch_of_each_minor_release_between():
    assert releases.minor_releases(INDEX, "2.0.1", "2.15.0") == [
        "2.0.1",
        "2.1.2",
        "2.2.2",
        "2.3.1",
        "2.9.1",
        "2.10.0",
        "2.11.0",
        "2.12.1",
        "2.13.0",
        "2.14.1",
        "2.15.0",
    ]
    assert release_names("torch", ["2.9.1", "2.12.0"], INDEX) == [
        "torch-2.9.1",
        "torch-2.10.0",
        "torch-2.11.0",
        "torch-2.12.0",
    ]
    assert release_names("torch", ["2.0.1", "2.3.1", "2.9.1"], None) == ["torch-2.0.1", "torch-2.3.1", "torch-2.9.1"]


@pytest.mark.parametrize(
    ("versions", "said"),
    [
        (["2.15.0", "2.0.1"], "oldest first"),
        (["2.0.1", "9.9.9"], "9.9.9 is not a release on the package index"),
        (["2.3.1", "2.3.1"], "oldest first"),
    ],
)
def test_releases_out_of_order_or_not_on_the_index_are_refused_before_any_round(versions, said):
    with pytest.raises(BisectError, match=said):
        release_names("torch", versions, INDEX)


def test_fixed_companions_are_defined_in_params_with_its_comments_kept():
    text = "suite: cpu  # which\nenvironments:  # built on first use\n  current: {}\nsettings: {}\n"
    fixed = {"torch-2.0.1": releases.Release({"torch": "2.0.1", "transformers": "4.49.0"}, "3.10")}
    written = with_definitions(text, fixed)
    assert written.splitlines()[2].startswith(
        "  torch-2.0.1: {pins: {torch: '2.0.1', transformers: '4.49.0'}, python: '3.10'}"
    )
    assert written.replace(written.splitlines()[2] + "\n", "") == text
    import yaml

    assert yaml.safe_load(written)["environments"]["torch-2.0.1"]["python"] == "3.10"


def test_a_finished_search_is_priced_by_the_rounds_it_still_needs():
    assert bisection.rounds_left(Search(RESNET, 0, 15, "slower")) == 4
    assert bisection.rounds_left(Search(RESNET, 4, 6, "slower", RETRY)) == 2
    assert math.isclose(bisection.process_s([]), bisection.FIRST_ROUND_GUESS_S)


def test_an_undecided_step_beside_the_changed_one_is_said_not_searched():
    rounds = [
        ENDS,
        result((0, 4, 8), (RESNET.cell,), [(RESNET, (0, 4, "inconclusive")), (RESNET, (4, 8, "slower"))], 1),
    ]
    (search,) = bisection.replay(SPEC, rounds)
    assert (search.low, search.high, search.undecided) == (4, 8, ((0, 4),))
    assert "undecided beside it: torch-2.0.0 → torch-2.4.0" in report(SPEC, rounds, [search])


def test_a_variant_the_older_end_cannot_run_is_searched_from_the_first_release_that_runs_it():
    frozen = Headline("nvidia/segformer-b0-finetuned-ade-512-512", "SegFormer", 1, "freezing", "compiled_latency")

    def edge(low, high, verdict, unsupported, number):
        return frozen, Step(low, high, verdict, math.nan, math.nan, math.nan, number, unsupported)

    def one_round(positions, steps, number):
        return RoundResult(RoundPlan(positions, (frozen.cell,), 3), f"r{number}", 60.0, tuple(steps), (), 9)

    first = RoundResult(RoundPlan((0, 8), (), 3), "r0", 600.0, (edge(0, 8, "unsupported", (0,), 0),), (), 10)
    (search,) = bisection.replay(SPEC, [first])
    assert (search.direction, search.state) == (bisection.UNSUPPORTED, OPEN)
    faster = (frozen, Step(4, 8, "faster", 0.74, 0.7, 0.79, 1))
    rounds = [first, one_round((0, 4, 8), [edge(0, 4, "unsupported", (0,), 1), faster], 1)]
    searches = bisection.replay(SPEC, rounds)
    assert [(s.low, s.high, s.direction, s.state) for s in searches] == [
        (0, 4, bisection.UNSUPPORTED, OPEN),
        (4, 8, "faster", OPEN),
    ]
    rounds.append(one_round((0, 2, 4), [edge(0, 2, "unsupported", (0, 2), 2), edge(2, 4, "unsupported", (2,), 2)], 2))
    rounds.append(one_round((2, 3, 4), [edge(2, 3, "unsupported", (2,), 3), edge(3, 4, "equivalent", (), 3)], 3))
    by_direction = {s.direction: s for s in bisection.replay(SPEC, rounds) if s.low < 4}
    assert (by_direction[bisection.UNSUPPORTED].low, by_direction[bisection.UNSUPPORTED].high) == (2, 3)
    assert by_direction[bisection.UNSUPPORTED].state == bisection.FIRST_SUPPORTED


def test_a_round_runs_its_planned_blocks_and_no_more():
    from conftest import ROOT

    from compilebench.bisect import round_overrides
    from compilebench.config import load_config

    config = load_config(ROOT / "params.yaml")
    plan = RoundPlan((0, 4, 8), (RESNET.cell,), 6)  # a retry: twice the blocks
    values = [value.removeprefix("++") for value in round_overrides(SPEC, plan, config)]
    narrowed = load_config(ROOT / "params.yaml", values)  # every -S value is one the config takes
    assert narrowed.budget_min == 0  # the adaptive loop adds no block of its own: the round costs what it was priced
    assert narrowed.benchmark.replicates == 6 and narrowed.benchmark.max_replicates >= 6
    chosen = narrowed.suites[SPEC.suite]
    assert (list(chosen.models), list(chosen.variants)) == (["microsoft/resnet-50"], ["eager", "default"])
    assert narrowed.compare == ["torch-2.0.0", "torch-2.4.0", "torch-2.8.0"]


def test_rounds_that_narrow_a_change_come_before_retries_of_undecided_steps():
    first = result((0, 8), (), [(VIT, (0, 8, "inconclusive")), (RESNET, (0, 8, "slower", 1.5))], 0)
    plans = bisection.next_rounds(bisection.replay(SPEC, [first]), SPEC)
    assert [(plan.positions, plan.cells, plan.replicates) for plan in plans] == [
        ((0, 4, 8), (RESNET.cell,), 3),
        ((0, 8), (VIT.cell,), 6),
    ]
    plan, _ = bisection.next_plan(SPEC, [first], units=3)
    assert plan.positions == (0, 4, 8)


def test_the_round_that_pins_a_compiled_headline_has_its_step_explained_once_and_counted():
    eager = Headline("microsoft/resnet-50", "ResNet", 1, "eager", "eager_latency")
    ends = result((0, 2), (), [(RESNET, (0, 2, "slower", 1.5)), (eager, (0, 2, "slower", 1.2))], 0)
    narrowed = [(RESNET, (0, 1, "equivalent")), (RESNET, (1, 2, "slower")), (eager, (0, 1, "slower"))]
    narrowed += [(eager, (1, 2, "equivalent"))]
    rounds = [ends, result((0, 1, 2), (RESNET.cell, eager.cell), narrowed, 1)]
    spec = replace(SPEC, releases=NAMES[:3])
    assert bisection.to_explain(spec, rounds[:1]) == []  # nothing pinned yet
    assert bisection.to_explain(spec, rounds) == [(1, 2)]  # ResNet default's step; the eager one is not compiled
    explained = replace(rounds[-1], explained=((1, 2),), explain_s=300.0)
    written = json.dumps(bisection.Journal(spec, "", [ends, explained]).to_dict())
    again = bisection.Journal.from_dict(json.loads(written))
    assert again.rounds[-1] == explained
    later = result((0, 1, 2), (VIT.cell,), [], 2)
    assert bisection.to_explain(spec, [ends, explained, later]) == []  # pinned before: explained with its own round
    halved = [ENDS, result((0, 4, 8), (RESNET.cell,), [(RESNET, (0, 4, "equivalent")), (RESNET, (4, 8, "slower"))], 1)]
    plan, _ = bisection.next_plan(SPEC, halved, 3)
    enough = replace(SPEC, budget_min=(1200 + bisection.round_price_s(plan, halved, 3, {0, 4, 8}) + 30) / 60)
    assert bisection.next_plan(enough, halved, 3)[0] == plan
    assert bisection.next_plan(enough, [ENDS, replace(halved[1], explain_s=60.0)], 3)[0] is None  # explains count
    moved = {"category": "generated kernels", "a_ms": 40.0, "b_ms": 60.0, "delta_ms": 20.0}
    entry = {"target": {"label": "ResNet", "batch_size": 1, "variant": "default"}, "profiled": True, "moved": [moved]}
    searches = bisection.replay(spec, [ends, explained])
    text = report(spec, [ends, explained], searches, why={(1, 2): [entry]})
    assert "## Why it changed" in text
    assert (
        "- torch-2.1.0 → torch-2.2.0, ResNet bs1 default: moved: generated kernels 40.00 → 60.00 ms "
        "([report](explain/torch-2.1.0-torch-2.2.0/report.md))" in text
    )
    assert "| 1 step(s), 300 s |" in text and "25.0 min of rounds, their explains included" in text
    unexplained = report(spec, [ends, rounds[-1]], searches)
    assert "- torch-2.1.0 → torch-2.2.0: not explained" in unexplained
    assert "torch-2.0.0 → torch-2.1.0: not explained" not in unexplained  # the eager step is not the compiler's


def test_a_middle_release_that_cannot_run_the_cell_is_skipped_for_the_middle_of_the_widest_untried_run():
    """transformers 5.11.0 builds no image processor without torchvision: a real bisect of 4.57.6 → 5.24.0 measured it
    as the middle twice and would have ended unresolved. Now the middle is skipped, as `git bisect skip` does."""
    cell = (RESNET.cell,)
    error = [(RESNET, (0, 4, "error")), (RESNET, (4, 8, "error"))]
    rounds = [ENDS, result((0, 4, 8), cell, error, 1)]
    (search,) = bisection.replay(SPEC, rounds)
    assert (search.low, search.high, search.state, search.skipped) == (0, 8, OPEN, ((4, "error"),))
    assert bisection.next_rounds([search], SPEC) == [RoundPlan((0, 2, 8), cell, 3)]  # runs 0-4 and 4-8: the older
    assert "skipped, its runs not ok: torch-2.4.0 (error)" in report(SPEC, rounds, [search])
    rounds.append(result((0, 2, 8), cell, [(RESNET, (0, 2, "equivalent")), (RESNET, (2, 8, "slower"))], 2))
    (search,) = bisection.replay(SPEC, rounds)
    assert (search.low, search.high, search.skipped) == (2, 8, ((4, "error"),))  # still inside: not measured again
    assert bisection.next_rounds([search], SPEC) == [RoundPlan((2, 6, 8), cell, 3)]  # the run 4-8, not 2-4
    rounds.append(result((2, 6, 8), cell, [(RESNET, (2, 6, "slower")), (RESNET, (6, 8, "equivalent"))], 3))
    rounds.append(result((2, 3, 6), cell, [(RESNET, (2, 3, "equivalent")), (RESNET, (3, 6, "slower"))], 4))
    (search,) = bisection.replay(SPEC, rounds)
    assert (search.low, search.high, search.skipped) == (3, 6, ((4, "error"),)) and bisection.middle(search) == 5
    rounds.append(result((3, 5, 6), cell, [(RESNET, (3, 5, "slower")), (RESNET, (5, 6, "equivalent"))], 5))
    (search,) = bisection.replay(SPEC, rounds)  # the one release between is the skipped one: nothing to measure
    assert (search.low, search.high, search.state, search.skipped) == (3, 5, UNRESOLVED, ((4, "error"),))
    assert search.note == "no release between its ends could run the cell" and not bisection.next_rounds([search], SPEC)
    two = [ENDS, result((0, 4, 8), cell, [(RESNET, (0, 4, "slower")), (RESNET, (4, 8, "equivalent"))], 1)]
    two.append(result((0, 2, 4), cell, [(RESNET, (0, 2, "unsupported")), (RESNET, (2, 4, "unsupported"))], 2))
    two.append(result((0, 1, 4), cell, [(RESNET, (0, 1, "timeout")), (RESNET, (1, 4, "timeout"))], 3))
    (search,) = bisection.replay(SPEC, two)
    assert search.skipped == ((2, "unsupported"), (1, "timeout")) and bisection.middle(search) == 3
    two.append(result((0, 3, 4), cell, [(RESNET, (0, 3, "error")), (RESNET, (3, 4, "error"))], 4))
    (search,) = bisection.replay(SPEC, two)
    assert (search.low, search.high, search.state) == (0, 4, UNRESOLVED)


def test_a_bisect_stopped_by_sigterm_ends_the_round_it_was_running_first():
    """A killed bisect once left its `dvc exp run` running, orphaned, holding the workspace (EPYC 49, 2026-12-05)."""
    code = (
        "import sys; from compilebench.bisect import run_to_end; "
        "sys.exit(run_to_end([sys.executable, '-c', 'import time; print(\"ready\", flush=True); time.sleep(120)']))"
    )
    bisect = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    round_pid = None
    try:
        assert bisect.stdout.readline() == "ready\n"
        (round_pid,) = descendants(bisect.pid)
        os.kill(bisect.pid, signal.SIGTERM)
        assert bisect.wait(timeout=30) == -signal.SIGTERM  # ended by the signal, as before
        assert not Path(f"/proc/{round_pid}").exists()  # its round ended first and was reaped
    finally:
        for pid in (round_pid, bisect.pid):
            if pid and Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
        bisect.wait()
