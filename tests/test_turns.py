"""Turns between the processes of a block, with real child processes that take them (no torch: each child holds
its turn for a few rounds of sleeping and writes when each round ran), so the protocol itself is checked: the turns
alternate and never overlap, each process still stops when it decides, one that crashes leaves the block cleanly,
and one whose launcher is gone exits."""

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from compilebench.harness import turns

CHILD = """
import json, os, sys, time
from compilebench.harness import turns

rounds, crash_after, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
mine = turns.of_this_process()
mine.take()  # the set-up turn
spans = [("setup", time.monotonic(), time.monotonic(), mine.round_turn())]
mine.give(more=True)
for done in range(rounds):
    mine.round_begins()
    if done == crash_after:
        os._exit(3)
    began = time.monotonic()
    time.sleep(0.12)
    spans.append(("round", began, time.monotonic(), mine.round_turn()))
    mine.round_ends(last=done == rounds - 1)
with open(out, "w") as file:
    json.dump({"spans": spans, "waited_s": mine.waited_s}, file)
"""


def _block(tmp_path: Path, plans: list[tuple[int, int]]) -> tuple[list[subprocess.Popen], list[Path]]:
    """Start one child per (rounds, crash after that many) and hand out turns until none wants another."""
    members, children, outs = [], [], []
    for index, (rounds, crash_after) in enumerate(plans):
        member = turns.Member()
        out = tmp_path / f"child{index}.json"
        env = {**os.environ, turns.TURNS_ENV: turns.environment_value(member)}
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(rounds), str(crash_after), str(out)], env=env, pass_fds=member.child_fds()
        )
        member.started(lambda child=child: child.poll() is not None)
        members.append(member)
        children.append(child)
        outs.append(out)
    try:
        turns.run_turns(members, lambda: None, poll_s=0.05)
    finally:
        for member in members:
            member.close()
    for child in children:
        child.wait(timeout=60)
    return children, outs


def test_turns_alternate_never_overlap_and_each_process_stops_when_it_decides(tmp_path):
    children, outs = _block(tmp_path, [(8, -1), (12, -1)])
    assert [child.returncode for child in children] == [0, 0]
    a, b = (json.loads(out.read_text()) for out in outs)
    spans = sorted(
        [(begin, end, "a") for _, begin, end, _ in a["spans"]] + [(begin, end, "b") for _, begin, end, _ in b["spans"]]
    )
    assert all(first[1] <= second[0] for first, second in itertools.pairwise(spans))  # never together
    assert len(a["spans"]) == 9 and len(b["spans"]) == 13  # each ran all it wanted: set-up and its rounds
    runs = [(owner, len(list(group))) for owner, group in itertools.groupby(owner for _, _, owner in spans)]
    # set-ups a then b, then turns of turns.TURN_S (0.5 s: five 0.12 s rounds) alternating while a lasts, b alone after
    assert runs[:2] == [("a", 1), ("b", 1)] and [owner for owner, _ in runs[2:6]] == ["a", "b", "a", "b"]
    last = {owner: index for index, (owner, _) in enumerate(runs)}
    assert all(count >= 4 for index, (owner, count) in enumerate(runs[2:], 2) if index != last[owner])
    assert a["waited_s"] > 0.5 and b["waited_s"] > 0.5
    # each round knows its turn, counted from the set-up's (1): a's k-th turn runs right before b's k-th, b's k-th
    # right before a's (k+1)-th, so rounds of the same turn number are neighbours in time (compare.py pairs them)
    turn_of = {(owner, begin): turn for owner, rows in (("a", a), ("b", b)) for _, begin, _, turn in rows["spans"]}
    assert [turn_of[("a", begin)] for begin, _, owner in spans if owner == "a"][:2] == [1, 2]
    order = [(turn_of[(owner, begin)], owner) for begin, _, owner in spans]
    assert order == sorted(order)  # turn 1 a, turn 1 b, turn 2 a, turn 2 b, ..., then b's last turns alone


def test_a_process_that_crashes_leaves_the_block_and_the_other_goes_on(tmp_path):
    children, outs = _block(tmp_path, [(10, 2), (6, -1)])
    assert children[0].returncode == 3 and not outs[0].exists()
    assert children[1].returncode == 0 and len(json.loads(outs[1].read_text())["spans"]) == 7


def test_a_process_whose_launcher_is_gone_exits_at_its_next_turn(tmp_path):
    member = turns.Member()
    env = {**os.environ, turns.TURNS_ENV: turns.environment_value(member)}
    out = tmp_path / "child.json"
    child = subprocess.Popen([sys.executable, "-c", CHILD, "3", "-1", str(out)], env=env, pass_fds=member.child_fds())
    member.started(lambda: child.poll() is not None)
    member.close()  # the launcher's ends: as its death closes them
    assert child.wait(timeout=60) == 1 and not out.exists()


def test_a_process_alone_takes_every_turn_at_once():
    alone = turns.of_this_process()  # no pipes given: Solo
    began = time.monotonic()
    alone.take()
    alone.round_begins()
    alone.round_ends(last=True)
    alone.give(more=False)
    assert time.monotonic() - began < 0.1 and alone.waited_s == 0.0


def test_metering_counts_only_the_process_s_own_turns():
    """A metered process taking turns sums what the meter read over its turns; alone, the whole window."""
    readings = iter([(0.0, 0.0), (1.0, 0.5), (5.0, 3.0), (6.0, 3.25)])  # (clock, busy CPU): two turns of 1 s each
    read_fd, write_fd = os.pipe()
    answer_read, answer_write = os.pipe()
    mine = turns.Turns(read_fd, answer_write)
    mine.start_metering(lambda: next(readings))
    os.write(write_fd, b"go\ngo\n")
    for last in (False, True):
        mine.take()
        mine.give(more=not last)
    assert mine.metered() == ((0.0, 0.0), (2.0, 0.75))  # 4 s passed, 2 of them its own; the others' CPU not in it
    assert os.read(answer_read, 64) == b"done\nover\n"
    alone = turns.Solo()
    window = iter([(0.0, 1.0), (2.0, 2.5)])
    alone.start_metering(lambda: next(window))
    assert alone.metered() == ((0.0, 1.0), (2.0, 2.5))
