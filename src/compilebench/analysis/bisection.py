"""A bisect over releases, as decisions over judged steps: which headlines are searched, how a round's steps move a
search, which rounds come next and what they cost. Pure: the journal of finished rounds (`RoundResult`) is the only
state, so `replay` gives the same searches after a resume (compilebench/bisect.py runs the rounds).

A search follows one headline whose ends got a direction word, over a span of release positions. A round measures
the span's ends and its middle; a step with a direction narrows the span to it (two split it: the change came in two
steps), a step still `inconclusive` beside no changed one is measured again once with twice the blocks, all steps
`equivalent` leave it *spread* (the change is thinner than the margin at every step), else *unresolved* over its
undecided steps. Pinpoint's same / different / unknown, with compilebench's words: `equivalent`, a direction,
`inconclusive`.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from compilebench.analysis import compare, stats, suite
from compilebench.records.formats import EAGER, MEASURED_NOTHING

HEADLINES = ("eager_latency", "compiled_latency", "speedup")  # what a bisect searches; with --compile also:
COMPILE_HEADLINES = ("compile_warm", "compile_cold")
EXPLAINED = ("compiled_latency", "speedup", *COMPILE_HEADLINES)  # a step pinned on one is explained (explain.py)
OPEN, RETRY, PINNED, SPREAD, UNRESOLVED, OUT_OF_TIME = (
    "open",
    "retry",
    "pinned",
    "spread",
    "unresolved",
    "out of time",
)
EQUIVALENT = stats.EQUIVALENT  # the ends measured again: no change
UNSUPPORTED = "unsupported"  # the direction of an edge search: the older end cannot run the cell, the newer can
FIRST_SUPPORTED = "first supported"  # an edge search's end: its newer release is the first that runs the cell
LIVE = (OPEN, RETRY)  # a search that still needs a round
BUILD_S = 90.0  # building a release's venv from uv's cache (EPYC 17: two CUDA builds took 3 min with downloads)
FIRST_ROUND_GUESS_S = 40.0  # a process's wall in a block, before this bisect has timed one (the default suite here)
VALUE_FIELD = {
    "eager_latency": "latency_ms_median",
    "compiled_latency": "latency_ms_median",
    "speedup": "speedup",
    "compile_warm": "compile_s_warm",
    "compile_cold": "compile_s",
}
Cell = tuple[str, int, str]  # (model id, batch size, variant)


@dataclass(frozen=True)
class Headline:
    """One cell's metric: what a search follows."""

    model_id: str
    label: str
    batch_size: int
    variant: str
    metric: str

    @property
    def cell(self) -> Cell:
        return self.model_id, self.batch_size, self.variant

    def text(self) -> str:
        return f"{self.label} bs{self.batch_size} {self.variant} {self.metric.replace('_', ' ')}"


@dataclass(frozen=True)
class Step:
    """One step of a round (a release against the one measured before it), judged: positions in the release list."""

    low: int
    high: int
    verdict: str
    ratio: float
    ci_low: float
    ci_high: float
    round: int
    unsupported: tuple[int, ...] = ()  # the step's sides (positions) whose release cannot run the cell


@dataclass(frozen=True)
class Search:
    """A headline's change being located: the span of releases it lies in, the direction it had there."""

    headline: Headline
    low: int
    high: int
    direction: str
    state: str = OPEN
    retried: bool = False
    steps: tuple[Step, ...] = ()  # every step measured inside its span, in the order measured
    note: str = ""
    undecided: tuple[tuple[int, int], ...] = ()  # steps beside its changed one that stayed undecided (not searched)
    skipped: tuple[tuple[int, str], ...] = ()  # middles whose release could not run the cell: (position, its status)


@dataclass(frozen=True)
class RoundPlan:
    """What one round measures: release positions in order (an end twice for the A/A), cells, blocks."""

    positions: tuple[int, ...]
    cells: tuple[Cell, ...]  # () = the whole suite (the ends)
    replicates: int


@dataclass(frozen=True)
class RoundResult:
    """A finished round: its plan, its DVC experiment, its wall time, every headline's steps and each release's
    values (the medians its runs measured: ms, x or s)."""

    plan: RoundPlan
    experiment: str
    wall_s: float
    steps: tuple[tuple[Headline, Step], ...]
    values: tuple[tuple[Headline, int, float], ...] = ()
    processes: int = 0
    explained: tuple[tuple[int, int], ...] = ()  # the steps it pinned that explain profiled, on its runs and caches
    explain_s: float = 0.0  # the wall time that took, after the round

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RoundResult:
        plan = raw["plan"]
        return cls(
            RoundPlan(tuple(plan["positions"]), tuple(tuple(cell) for cell in plan["cells"]), plan["replicates"]),
            raw["experiment"],
            raw["wall_s"],
            tuple(
                (Headline(**h), Step(**{**s, "unsupported": tuple(s.get("unsupported", ()))})) for h, s in raw["steps"]
            ),
            tuple((Headline(**headline), position, value) for headline, position, value in raw["values"]),
            raw.get("processes", 0),
            tuple(tuple(step) for step in raw.get("explained", ())),
            raw.get("explain_s", 0.0),
        )


@dataclass(frozen=True)
class Spec:
    """What a bisect searches: its releases (environment names, oldest first), what it measures, its budget."""

    name: str
    releases: tuple[str, ...]
    metrics: tuple[str, ...]
    seed: int
    aa: bool
    replicates: int
    budget_min: float
    suite: str


@dataclass
class Journal:
    """A bisect's record: its spec, params.yaml as it was, every round finished."""

    spec: Spec
    params_before: str
    rounds: list[RoundResult] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Journal:
        spec = raw["spec"]
        return cls(
            Spec(**{**spec, "releases": tuple(spec["releases"]), "metrics": tuple(spec["metrics"])}),
            raw["params_before"],
            [RoundResult.from_dict(entry) for entry in raw["rounds"]],
        )


def ends_plan(spec: Spec) -> RoundPlan:
    """The first round: both ends on the whole suite, the newer twice for an A/A step."""
    last = len(spec.releases) - 1
    return RoundPlan((0, last, last) if spec.aa else (0, last), (), spec.replicates)


def is_direction(word: str) -> bool:
    return word in suite.DIRECTIONS


def start(spec: Spec, first: RoundResult) -> list[Search]:
    """A search for every headline whose ends' step got a direction word (pinned at once where the ends are adjacent
    releases); the ends measured again with twice the blocks for every headline they left `inconclusive`. Headlines
    whose ends are `equivalent` (or whose runs measured nothing) are not searched."""
    last = len(spec.releases) - 1
    found = []
    for headline, step in first.steps:
        if (step.low, step.high) != (0, last) or headline.metric not in spec.metrics:
            continue
        if is_direction(step.verdict):
            found.append(Search(headline, 0, last, step.verdict, PINNED if last == 1 else OPEN, steps=(step,)))
        elif step.verdict == stats.INCONCLUSIVE:
            found.append(Search(headline, 0, last, "", RETRY, retried=True, steps=(step,)))
        elif step.unsupported == (0,):  # a variant the older end lacks (torch 2.0's freezing): where does it begin?
            found.append(Search(headline, 0, last, UNSUPPORTED, FIRST_SUPPORTED if last == 1 else OPEN, steps=(step,)))
    return found


def advance_edge(search: Search, steps: list[Step]) -> list[Search]:
    """An edge search after a round: narrowed to the two measured releases where the cell begins to run (its end when
    they are adjacent); every step past it with a direction a search of its own, one `inconclusive` its ends measured
    again. So a change after a variant appeared is found from the first release that runs it."""
    ordered = sorted(steps, key=lambda step: step.low)
    seen = (*search.steps, *steps)
    runs = [step for step in ordered if step.low not in step.unsupported]
    if not runs:  # the newest measured before the newer end cannot run it either
        low = ordered[-1].low if ordered else search.low
        return [replace(search, low=low, state=FIRST_SUPPORTED if search.high - low == 1 else OPEN, steps=seen)]
    first = runs[0].low
    low = max((step.low for step in ordered if step.low < first), default=search.low)
    found = [replace(search, low=low, high=first, state=FIRST_SUPPORTED if first - low == 1 else OPEN, steps=seen)]
    for step in runs:
        if is_direction(step.verdict):
            state = PINNED if step.high - step.low == 1 else OPEN
            found.append(Search(search.headline, step.low, step.high, step.verdict, state, steps=(step,)))
        elif step.verdict == stats.INCONCLUSIVE:
            found.append(Search(search.headline, step.low, step.high, "", RETRY, retried=True, steps=(step,)))
    return found


def _unless_untried(search: Search) -> Search:
    """An open search whose releases between its ends were all skipped: unresolved, nothing left to measure."""
    if search.state in LIVE and search.high - search.low > 1 and not untried(search):
        return replace(search, state=UNRESOLVED, note="no release between its ends could run the cell")
    return search


def advance(search: Search, steps: list[Step]) -> list[Search]:
    """A search after a round measured `steps` inside its span (consecutive, covering it): narrowed to each step with
    a direction (pinned where that step joins adjacent releases), measured again once where no step has one and some
    are `inconclusive`, spread where all are `equivalent`, else unresolved over its undecided steps. A middle release
    that could not run the cell (both its steps a status that measured nothing: `error`, `unsupported`, ...) is
    skipped, as `git bisect skip` does: the next round measures another (`middle`); unresolved when none is left."""
    if search.direction == UNSUPPORTED:
        return advance_edge(search, steps)
    seen = (*search.steps, *steps)
    measured = middle(search)
    beside = [step for step in steps if measured in (step.low, step.high)]
    if search.direction and len(beside) == 2 and all(step.verdict in MEASURED_NOTHING for step in beside):
        return [_unless_untried(replace(search, steps=seen, skipped=(*search.skipped, (measured, beside[0].verdict))))]
    changed = [step for step in steps if is_direction(step.verdict)]
    undecided = [step for step in steps if not is_direction(step.verdict) and step.verdict != stats.EQUIVALENT]
    if changed:
        return [
            _unless_untried(
                Search(
                    search.headline,
                    step.low,
                    step.high,
                    step.verdict,
                    PINNED if step.high - step.low == 1 else OPEN,
                    steps=seen,
                    undecided=tuple((s.low, s.high) for s in undecided),
                    skipped=tuple(skip for skip in search.skipped if step.low < skip[0] < step.high),
                )
            )
            for step in changed
        ]
    if not search.direction:  # the ends measured again found no direction
        return [replace(search, state=EQUIVALENT if not undecided else UNRESOLVED, steps=seen)]
    if not undecided:
        return [replace(search, state=SPREAD, steps=seen)]
    if not search.retried:
        return [replace(search, state=RETRY, retried=True, steps=seen)]
    low, high = min(step.low for step in undecided), max(step.high for step in undecided)
    return [replace(search, low=low, high=high, state=UNRESOLVED, steps=seen)]


def untried(search: Search) -> list[int]:
    """The releases strictly between a search's ends that it has not skipped."""
    skipped = {position for position, _ in search.skipped}
    return [position for position in range(search.low + 1, search.high) if position not in skipped]


def middle(search: Search) -> int:
    """The release a search measures between its ends: the middle one; once releases were skipped, the middle of the
    widest run of releases between the ends and the skipped ones (the older on a tie). A release that cannot run a
    cell rarely stands alone (transformers 5.10 to 5.12 all need torchvision for an image processor), so the next try
    goes where the fewest failures are, not next door; any release inside a span halves it or nearly."""
    blocked = sorted({search.low, search.high, *(p for p, _ in search.skipped if search.low < p < search.high)})
    gaps = [(low, high) for low, high in itertools.pairwise(blocked) if high - low > 1]
    if not gaps:  # nothing left between (the search is unresolved)
        return (search.low + search.high) // 2
    low, high = max(gaps, key=lambda gap: (gap[1] - gap[0], -gap[0]))  # with nothing skipped: the whole span
    return (low + high) // 2


def positions_of(search: Search) -> tuple[int, ...]:
    """The releases a search's next round measures: its span's ends and middle; the ends alone when measured again
    for want of a direction there."""
    return (search.low, middle(search), search.high) if search.direction else (search.low, search.high)


def serves(plan: RoundPlan, search: Search) -> bool:
    """Whether a round measured a search's span: its ends and its middle, on its cell."""
    return set(positions_of(search)) <= set(plan.positions) and search.headline.cell in plan.cells


def replay(spec: Spec, rounds: list[RoundResult]) -> list[Search]:
    """Every search after the rounds finished so far: a pure function of the journal."""
    if not rounds:
        return []
    searches = start(spec, rounds[0])
    for result in rounds[1:]:
        by_headline: dict[Headline, list[Step]] = {}
        for headline, step in result.steps:
            by_headline.setdefault(headline, []).append(step)
        after = []
        for search in searches:
            if search.state in LIVE and serves(result.plan, search):
                inside = [
                    s for s in by_headline.get(search.headline, []) if search.low <= s.low < s.high <= search.high
                ]
                after += (
                    advance(search, inside)
                    if inside
                    else [replace(search, state=UNRESOLVED, note="its cell measured nothing in the round")]
                )
            else:
                after.append(search)
        searches = after
    return searches


def next_rounds(searches: list[Search], spec: Spec) -> list[RoundPlan]:
    """The rounds the live searches need: one per set of releases, over the cells that need it; a retry with twice
    the blocks. Rounds that narrow a change come first, retries of undecided steps after: a budget spent on
    narrowing locates what is known to have changed (the first bisect's retry of three undecided ends would have
    taken 36 processes before any change was narrowed)."""
    grouped: dict[tuple[tuple[int, ...], int], list[Cell]] = {}
    for search in searches:
        if search.state in LIVE:
            replicates = spec.replicates * (2 if search.state == RETRY else 1)
            cells = grouped.setdefault((positions_of(search), replicates), [])
            if search.headline.cell not in cells:
                cells.append(search.headline.cell)
    plans = [RoundPlan(positions, tuple(sorted(cells)), reps) for (positions, reps), cells in grouped.items()]
    return sorted(plans, key=lambda plan: plan.replicates > spec.replicates)  # stable: narrowing first


def timing_units(plan: RoundPlan, all_units: int) -> int:
    """(model, batch size) pairs a round times: its cells', or the whole suite's for the ends."""
    return len({(model, batch) for model, batch, _ in plan.cells}) if plan.cells else all_units


def process_s(rounds: list[RoundResult]) -> float:
    """What one process of a round's blocks costs in wall time, from the rounds so far (their builds included)."""
    rates = [result.wall_s / result.processes for result in rounds if result.processes]
    return statistics.median(rates) if rates else FIRST_ROUND_GUESS_S


def planned_processes(plan: RoundPlan, all_units: int) -> int:
    """A round's planned timing processes: stacks x (model, batch size) units x blocks."""
    return len(plan.positions) * timing_units(plan, all_units) * plan.replicates


def extension(rounds: list[RoundResult], all_units: int) -> float:
    """How many processes a round ran for each one planned, the most of the rounds so far: a round runs its planned
    blocks (`budget_min` 0), and a disturbed block again."""
    ratios = [result.processes / planned_processes(result.plan, all_units) for result in rounds if result.processes]
    return max([1.0, *ratios])


def round_price_s(plan: RoundPlan, rounds: list[RoundResult], all_units: int, built: set[int] = frozenset()) -> float:
    """A round's wall time, priced at this bisect's own rounds: its planned processes, extended as the rounds so
    far were, at their median wall per process, and BUILD_S for each release no round has built yet."""
    new = {position for position in plan.positions if position not in built}
    return planned_processes(plan, all_units) * extension(rounds, all_units) * process_s(rounds) + BUILD_S * len(new)


def rounds_left(search: Search) -> int:
    """Rounds a live search needs at most to be pinned: halving its span, one more for a retry."""
    return math.ceil(math.log2(max(search.high - search.low, 2))) + (search.state == RETRY)


def out_of_time(searches: list[Search], spec: Spec, rounds: list[RoundResult], units: int) -> list[Search]:
    """The live searches ended for the budget, each noting what finishing it would cost here."""
    ended = []
    for search in searches:
        if search.state not in LIVE:
            ended.append(search)
            continue
        price = rounds_left(search) * 3 * spec.replicates * process_s(rounds) * extension(rounds, units)
        ended.append(
            replace(
                search,
                state=OUT_OF_TIME,
                note=f"about {rounds_left(search)} round(s), ~{price / 60:.0f} min, would finish it",
            )
        )
    return ended


def steps_of(
    compared: list[compare.Comparison], labels: list[str], positions: tuple[int, ...], metrics: tuple[str, ...]
) -> list[tuple[Headline, Step]]:
    """A round's steps per headline (suite.series_steps: Holm-adjusted over the round's cells and steps), with the
    releases' positions for its labels; a repeated end's A/A step keeps the same position on both sides."""
    position = dict(zip(labels, positions, strict=True))
    found = []
    for history in suite.series_steps(compared, labels):
        if history["metric"] not in metrics:
            continue
        headline = Headline(
            history["model_id"], history["label"], int(history["batch_size"]), history["variant"], history["metric"]
        )
        for entry in history["steps"]:
            before, after = entry["step"].split(" -> ")
            found.append(
                (
                    headline,
                    Step(
                        position[before],
                        position[after],
                        entry["verdict"],
                        entry["ratio"],
                        entry["ci_low"],
                        entry["ci_high"],
                        0,
                        tuple(sorted({position[label] for label in entry["unsupported"]})),
                    ),
                )
            )
    return found


def values_of(rows: list[dict[str, Any]], labels: list[str], positions: tuple[int, ...], metrics: tuple[str, ...]):
    """Each release's measured value per headline (a run's median), from the round's runs.jsonl."""
    position = dict(zip(labels, positions, strict=True))
    found = []
    for row in rows:
        for metric in metrics:
            value = row.get(VALUE_FIELD[metric])
            compiled = row["variant"] != EAGER
            if value is None or (metric != "eager_latency") != compiled or row["environment"] not in position:
                continue
            headline = Headline(row["model_id"], row["label"], int(row["batch_size"]), row["variant"], metric)
            found.append((headline, position[row["environment"]], float(value)))
    return found


def to_explain(spec: Spec, rounds: list[RoundResult]) -> list[tuple[int, int]]:
    """The steps the last round pinned a compiled headline to (compiled latency, speedup, compile time) that no
    earlier round had: each is explained right after that round, while its runs and warm caches are the workspace's."""
    if not rounds:
        return []
    before = {(s.headline, s.low, s.high) for s in replay(spec, rounds[:-1]) if s.state == PINNED}
    return sorted(
        {
            (s.low, s.high)
            for s in replay(spec, rounds)
            if s.state == PINNED and s.headline.metric in EXPLAINED and (s.headline, s.low, s.high) not in before
        }
    )


def next_plan(spec: Spec, rounds: list[RoundResult], units: int) -> tuple[RoundPlan | None, list[Search]]:
    """The next round to run (None: done, or none fits the budget) and the searches as they stand."""
    if not rounds:
        return ends_plan(spec), []
    searches = replay(spec, rounds)
    spent_s = sum(result.wall_s + result.explain_s for result in rounds)
    built = {position for result in rounds for position in result.plan.positions}
    for plan in next_rounds(searches, spec):
        if spent_s + round_price_s(plan, rounds, units, built) <= spec.budget_min * 60:
            return plan, searches
    return None, out_of_time(searches, spec, rounds, units)
