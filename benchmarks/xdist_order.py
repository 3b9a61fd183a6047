"""In which order should `make test` hand its xdist groups to the two workers, so that both end together?

    pytest -q -n 2 --dist loadgroup --cov=compilebench --junitxml=/tmp/times.xml    # per-test seconds, one run
    python benchmarks/xdist_order.py /tmp/times.xml [/tmp/other-run.xml ...]

`--dist loadgroup` runs each group whole on one worker, and hands a worker the next group (in collection order,
pyproject turns off xdist's reordering) as soon as no more than two of its tests are pending: a group can wait
behind a long last test of another. This replays that policy, test by test, over the per-test seconds of real runs
(junit XML: setup, call and teardown of each test, its group after the `@` of its name), for the order in
`tests/conftest.py` (`HAND_OUT_ORDER`) and for every other order of the groups named there. The groups' costs move
between runs (this machine's speed moves by 10%, a fresh clone also builds the compared environment), so each order
is scored over 200 draws: every group's seconds times a factor in [0.85, 1.15], and 0 or 25 s more for the group that
builds the environment. The score is the seconds the later worker ends after a perfect split (half of all seconds):
mean, 90th percentile and worst. It prints the current order's score and the five best orders'.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import random
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PENDING_BEFORE_MORE = 2  # xdist's LoadScopeScheduling: a worker with this many tests pending or fewer gets a group
ENVIRONMENT_GROUP, ENVIRONMENT_BUILD_S = "compared_project", 25.0  # a fresh clone builds transformers 4.57.6 there
DRAWS, SPREAD = 200, 0.15


@dataclass(frozen=True)
class Test:
    group: str | None  # None: a test of no group (its own unit of work)
    seconds: float


def read_junit(path: Path) -> list[Test]:
    """The tests of one run in report order (a group's tests in their collection order: one worker runs them)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        message = f"{path}: not a junit XML file that can be read ({error}); write one with pytest --junitxml"
        raise SystemExit(message) from None
    tests = []
    for case in root.iter("testcase"):
        name = case.get("name", "")
        tests.append(Test(name.rpartition("@")[2] if "@" in name else None, float(case.get("time", 0))))
    if not tests:
        raise SystemExit(f"{path}: no <testcase> in it; write one with pytest --junitxml")
    return tests


def hand_out_order(conftest: Path = ROOT / "tests" / "conftest.py") -> tuple[str, ...]:
    """`HAND_OUT_ORDER` as written in the tests' conftest (read, not imported: importing it sets up a test run)."""
    for node in ast.parse(conftest.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "HAND_OUT_ORDER" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit(f"{conftest}: no HAND_OUT_ORDER")


def units(tests: list[Test], order: tuple[str, ...]) -> list[list[float]]:
    """The units of work in the order xdist hands them out: the named groups in `order`, then everything else in
    report order (conftest sorts the rest after them, each test of no group a unit of its own)."""
    grouped: OrderedDict[str, list[float]] = OrderedDict((group, []) for group in order)
    rest: list[list[float]] = []
    other: OrderedDict[str, list[float]] = OrderedDict()
    for test in tests:
        if test.group in grouped:
            grouped[test.group].append(test.seconds)
        elif test.group is not None:
            other.setdefault(test.group, []).append(test.seconds)
        else:
            rest.append([test.seconds])
    return [seconds for seconds in grouped.values() if seconds] + list(other.values()) + rest


def finish_s(work: list[list[float]], workers: int = 2) -> list[float]:
    """When each worker ends, under xdist's loadgroup policy."""
    queue = list(work)
    pending: list[list[float]] = [[] for _ in range(workers)]
    clock = [0.0] * workers

    def top_up(worker: int) -> None:
        if queue and len(pending[worker]) <= PENDING_BEFORE_MORE:
            pending[worker].extend(queue.pop(0))

    for worker in range(workers):
        if queue:
            pending[worker].extend(queue.pop(0))
    for worker in range(workers):
        top_up(worker)
    while any(pending):
        _, worker = min((clock[w] + pending[w][0], w) for w in range(workers) if pending[w])
        clock[worker] += pending[worker].pop(0)
        top_up(worker)
    return clock


def draws(runs: list[list[Test]], groups: tuple[str, ...], seed: int = 0) -> list[list[Test]]:
    """The measured runs with every named group's seconds scaled by a random factor, and the environment build."""
    rng = random.Random(seed)
    drawn = []
    for _ in range(DRAWS):
        tests, factor = rng.choice(runs), {group: rng.uniform(1 - SPREAD, 1 + SPREAD) for group in groups}
        extra = rng.choice((0.0, ENVIRONMENT_BUILD_S))
        scaled, first = [], True
        for test in tests:
            seconds = test.seconds * factor.get(test.group, 1.0)
            if test.group == ENVIRONMENT_GROUP and first:
                seconds, first = seconds + extra, False
            scaled.append(Test(test.group, seconds))
        drawn.append(scaled)
    return drawn


def score(drawn: list[list[Test]], order: tuple[str, ...]) -> tuple[float, float, float]:
    """Seconds the later worker ends after a perfect split: mean, 90th percentile and worst over the draws."""
    late = sorted(max(finish_s(units(tests, order))) - sum(t.seconds for t in tests) / 2 for tests in drawn)
    return sum(late) / len(late), late[int(0.9 * len(late))], late[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", nargs="+", type=Path, help="junit XML of `make test`'s pytest (--junitxml)")
    args = parser.parse_args()
    runs = [read_junit(path) for path in args.junit]
    current = hand_out_order()
    for path, tests in zip(args.junit, runs, strict=True):
        ends = finish_s(units(tests, current))
        print(f"{path}: {sum(t.seconds for t in tests):.0f} s of tests; replayed in the current order the workers "
              f"end at {', '.join(f'{end:.0f} s' for end in ends)}")  # fmt: skip
    drawn = draws(runs, current)
    line = "mean {:.1f} s, p90 {:.1f} s, worst {:.1f} s after a perfect split"
    print("current order:", ", ".join(current), "\n   ", line.format(*score(drawn, current)))
    ranked = sorted((score(drawn, order), order) for order in itertools.permutations(current))
    for found, order in ranked[:5]:
        print("order:", ", ".join(order), "\n   ", line.format(*found))


if __name__ == "__main__":
    sys.exit(main())
