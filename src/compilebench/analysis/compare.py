"""Environments compared: B against A per (model, batch size, variant) and metric, from paired blocks; noise learnt.

For each metric a run's processes each give one value (a median latency, a speedup, a compile time, a peak memory).
Inside one invocation A and B of a cell run in every block (a block's processes together, taking turns, where
`benchmark.together` is on; one after the other otherwise, in a balanced order), so B / A is the mean of the per-block
log differences. Where a block's processes took turns, its difference for latency and speedup pairs their rounds by turn
(`by_turn_differences`: A's k-th turn and B's k-th ran one right after the other, so the machine's state, which moves a
whole process by 10-30% on a 2-core VM and can switch within one, is nearly the same in both), rather than setting one
process's median against the other's; its noise is recorded apart (noise_record.py). The t-interval's variance pools the
cell's blocks with the cell's noise record on this machine (noise_record.py: what every earlier comparison and A/A run
of that cell on this machine and device measured, as a sum of squares with its degrees of freedom, never a maximum). Per
cell, not per machine: on a 2-core VM the spread of SegFormer's speedup was six times ResNet-50's, and one pooled
variance would make the one too sure and the other too shy. A cell an F-test finds much noisier than its record stands
on its own blocks and is flagged. Rows of separate invocations cannot be paired: Welch's t, labelled so.

Each (cell, metric) gets two answers: did it change (`{metric}_change`, a t-test at 5%) and does it matter
(`{metric}_relevance` against the user's margin: `equivalent`, `beyond margin`, `undecided`), and one word
(`{metric}_verdict`). The headline per row (`verdict`) uses Holm-adjusted p-values across the invocation's rows, so
a comparison of many cells does not flag one by chance. With three or more stacks (a series, e.g. successive torch
releases) each is compared with the first and with the previous one (`suite.series_steps` names the first step whose
change is significant and beyond the margin; `suite.summary` says what changed over the suite). Changes of compile
health (a status that differs, graph breaks gained or lost, a fall-back to eager, recompiles) are listed first: they
matter more than a few percent.
Pure functions from runs (`ComparedRun`: a RunRecord, or a run read back from MLflow) to `Comparison` objects;
`Comparison.row()` is a table's line.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compilebench.analysis import keys, noise_record, stats
from compilebench.analysis.per_process import ProcessRecord
from compilebench.analysis.run_record import RunRecord
from compilebench.records.formats import EAGER, STATUS_OK, TrialSpec, memory_before_timing

FIRST, PREVIOUS = "first", "previous"  # what a row compares B with: the baseline, or the stack before it in a series


@dataclass(frozen=True)
class Metric:
    """One compared quantity: its name, the words for B above / below A, and which width target applies."""

    name: str
    above: str
    below: str
    target: str | None  # key of benchmark.target (latency | speedup | compile), None: no target
    compiled_only: bool = False
    own_processes: bool = False  # each cell's values from processes of its own (its cold ones): the cells' errors are
    #                              independent, so a suite whose cells lack intervals takes one from their spread
    per_timing_process: bool = False  # one value a timing process: every compiled cell of its (model, batch size)
    #                                   has the same, so a suite counts one of them
    better_above: bool = False  # B above A is the favourable direction (speedup); below it, for the rest

    @property
    def better(self) -> str:
        """The word of the favourable direction (faster, less, higher)."""
        return self.above if self.better_above else self.below


METRICS = (
    Metric("eager_latency", "slower", "faster", "latency"),
    Metric("compiled_latency", "slower", "faster", "latency", compiled_only=True),
    Metric("speedup", "higher", "lower", "speedup", compiled_only=True, better_above=True),
    Metric("compile_cold", "slower", "faster", "compile", compiled_only=True, own_processes=True),
    Metric("compile_warm", "slower", "faster", "compile", compiled_only=True),
    Metric("inductor_startup", "slower", "faster", None, compiled_only=True, per_timing_process=True),  # before arms
    Metric("peak_memory", "more", "less", None),
)
METRIC_BY_NAME = {metric.name: metric for metric in METRICS}
CELL = ("model_id", "label", "task", "batch_size", "variant")


@dataclass(frozen=True)
class Judged:
    """One metric of one compared cell: B / A with its intervals and what they rest on, the two answers (did it
    change, does it matter) and the one word they give."""

    ratio: stats.Ratio
    change: str
    relevance: str
    verdict: str

    def columns(self, metric: str) -> dict[str, Any]:
        """Its columns in a comparison table, `{metric}_ratio` ... `{metric}_verdict` (keys.column)."""
        r = self.ratio
        values = {
            "ratio": r.value,
            "ci_low": r.low,
            "ci_high": r.high,
            "ci90_low": r.low90,
            "ci90_high": r.high90,
            "halfwidth": r.halfwidth,
            "detectable": r.detectable,
            "p": r.p_value,
            "blocks": r.blocks,
            "dof": r.dof,
            "method": r.method,
            "noise": r.noise,
            "noisy": r.noisy,
            "cell_ss": r.cell_noise.ss,
            "cell_dof": r.cell_noise.dof,
            "change": self.change,
            "relevance": self.relevance,
            "verdict": self.verdict,
        }
        assert tuple(values) == keys.JUDGED_FIELDS, "keys.JUDGED_FIELDS names these columns"
        return {keys.column(metric, key): value for key, value in values.items()}

    @classmethod
    def read(cls, row: dict[str, Any], metric: str) -> Judged | None:
        """Its columns read back from a table's row (a CSV's: NaN where a row has none); None where the row did not
        compare `metric`. The half-width and detectable change follow from the interval, as they were written."""

        def cell(key: str) -> Any:
            return row.get(keys.column(metric, key))

        word = cell("verdict")
        if not (isinstance(word, str) and word):
            return None
        numbers = ("ratio", "ci_low", "ci_high", "ci90_low", "ci90_high", "p", "blocks", "dof", "cell_ss", "cell_dof")
        value = {key: cell(key) for key in numbers}
        number = {key: math.nan if v is None else float(v) for key, v in value.items()}
        noisy = cell("noisy")
        ratio = stats.Ratio(
            number["ratio"],
            number["ci_low"],
            number["ci_high"],
            number["ci90_low"],
            number["ci90_high"],
            number["p"],
            _count(number["blocks"]),
            number["dof"],
            str(cell("method")),
            noise=str(cell("noise")),
            noisy=noisy is True or str(noisy) == "True",
            cell_noise=stats.Noise(number["cell_ss"], _count(number["cell_dof"])),
        )
        return cls(ratio, str(cell("change")), str(cell("relevance")), word)


def _count(value: float) -> int:
    return int(value) if math.isfinite(value) else 0


ABOUT = (
    "baseline",
    "candidate",
    "baseline_run_uid",
    "candidate_run_uid",
    "reference",
    "baseline_versions",
    "candidate_versions",
    "baseline_status",
    "candidate_status",
    "health_change",
    "interleaved",
    "calibrated",
    "margin",
)


@dataclass
class Comparison:
    """One compared cell: B against A, each metric judged, and the headline (the metric a row's one word is about:
    compiled latency for a compiled variant, eager latency for eager; Holm-adjusted across the invocation's rows by
    `adjust_headlines`). `row()` is its line of a comparison table, the one place it is flattened; `read` takes
    such a line back."""

    model_id: str
    label: str
    task: str
    batch_size: int
    variant: str
    baseline: str
    candidate: str
    baseline_run_uid: str | None
    candidate_run_uid: str | None
    reference: str
    baseline_versions: str
    candidate_versions: str
    baseline_status: str
    candidate_status: str
    health_change: str
    interleaved: bool
    calibrated: bool
    margin: float
    judged: dict[str, Judged]
    headline: str
    verdict: str
    p_adjusted: float | None = None  # set by adjust_headlines
    extra: dict[str, Any] = field(default_factory=dict)  # columns a table adds (versions.csv: device, invocations)

    @property
    def cell(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in CELL}

    def row(self) -> dict[str, Any]:
        """Its line of a comparison table."""
        line = {key: getattr(self, key) for key in (*CELL, *ABOUT)}
        for name, judged in self.judged.items():
            line.update(judged.columns(name))
        line.update(headline=self.headline, verdict=self.verdict)
        if self.p_adjusted is not None:
            line["p_adjusted"] = self.p_adjusted
        return {**line, **self.extra}

    @classmethod
    def read(cls, row: dict[str, Any]) -> Comparison:
        """A comparison table's line read back (comparison.csv as pandas reads it: no health change, an empty
        string written, comes back NaN)."""
        judged = {metric.name: found for metric in METRICS if (found := Judged.read(row, metric.name)) is not None}
        known = {*CELL, *ABOUT, "headline", "verdict", "p_adjusted"}
        extra = {
            key: value
            for key, value in row.items()
            if key not in known and not any(keys.is_column_of(key, m.name) for m in METRICS)
        }
        about = {key: row.get(key) for key in (*CELL, *ABOUT)}
        about["health_change"] = about["health_change"] if isinstance(about["health_change"], str) else ""
        return cls(
            **about,
            judged=judged,
            headline=str(row["headline"]),
            verdict=str(row["verdict"]),
            p_adjusted=row.get("p_adjusted"),
            extra=extra,
        )


FIELD_OF = {
    "eager_latency": "eager_ms_median",
    "compiled_latency": "compiled_ms_median",
    "speedup": "speedup",
    "peak_memory": "peak_mem_mib",
    "inductor_startup": "inductor_startup_s",
}  # a metric's ProcessRecord field


BY_TURN_METRICS = ("eager_latency", "compiled_latency", "speedup")  # what a block run together pairs by turn
MIN_TURNS = 3  # turns both processes of a block timed in, at least, for their rounds to be paired by turn


def turn_values(process: ProcessRecord) -> dict[str, dict[int, float]]:
    """A process's timed rounds by the turn they ran in (a block run together): per metric of BY_TURN_METRICS it
    has, per turn, the median over the turn's rounds of the log of a round's value (eager's latency, the compiled
    arm's, and the round's speedup: eager's over the compiled arm's, from the same round). Empty for a process alone."""
    if not process.round_turns or len(process.round_turns) != len(process.eager_ms):
        return {}
    logs = {"eager_latency": [math.log(ms) for ms in process.eager_ms]}
    if len(process.compiled_ms) == len(process.eager_ms):
        logs["compiled_latency"] = [math.log(ms) for ms in process.compiled_ms]
        logs["speedup"] = [e - c for e, c in zip(logs["eager_latency"], logs["compiled_latency"], strict=True)]
    found = {}
    for metric, values in logs.items():
        by_turn: dict[int, list[float]] = {}
        for turn, value in zip(process.round_turns, values, strict=True):
            by_turn.setdefault(turn, []).append(value)
        found[metric] = {turn: statistics.median(rounds) for turn, rounds in by_turn.items()}
    return found


def process_values(processes: Sequence[ProcessRecord]) -> dict[str, dict[str, float]]:
    """Per metric (METRICS order), one value per measured, undisturbed process of a run, by block (empty where there
    is none): compile time where the process was not busy while it compiled, the rest where it was not busy while it
    timed."""
    found = {}
    for cold, metric in ((True, "compile_cold"), (False, "compile_warm")):
        found[metric] = {
            p.block: p.compile_s
            for p in processes
            if p.compile_s and p.cold_compile is cold and not p.compile_disturbed
        }
    clean = [p for p in processes if not p.disturbed]
    measured_memory = [p for p in processes if memory_before_timing(p.kind) or not p.disturbed]
    for metric, name in FIELD_OF.items():
        kept = measured_memory if metric == "peak_memory" else clean
        values = {p.block: getattr(p, name) for p in kept}
        found[metric] = {block: value for block, value in values.items() if value}
    return {metric.name: found[metric.name] for metric in METRICS}


def process_turns(processes: Sequence[ProcessRecord]) -> dict[str, dict[str, dict[int, float]]]:
    """Per metric of BY_TURN_METRICS, each undisturbed process's rounds by turn (`turn_values`), by block; a process
    alone gives none."""
    found: dict[str, dict[str, dict[int, float]]] = {}
    for process in processes:
        if process.disturbed:
            continue
        for metric, by_turn in turn_values(process).items():
            found.setdefault(metric, {})[process.block] = by_turn
    return found


@dataclass(frozen=True)
class ComparedRun:
    """A run as a comparison reads it: its cell and environment, its stack and status, its compile health, and per
    metric one value per measured process by block. Made from a run record (`of`), or from a run read back from
    MLflow (tracking.stored_run), whose processes are there as their values only."""

    model_id: str
    label: str
    task: str
    batch_size: int
    variant: str
    environment: str
    environment_key: str
    run_uid: str | None
    invocation_id: str | None
    status: str
    compile: bool
    values: dict[str, dict[str, float]]  # metric -> block -> value (process_values; a metric left out: none)
    turns: dict[str, dict[str, dict[int, float]]] = field(default_factory=dict)  # metric -> block -> turn -> its
    #   rounds' median log value (process_turns): blocks run together only; none from MLflow (values only there)
    fullgraph: bool = False
    graph_count: float | None = None
    graph_break_count: float | None = None
    recompile_count: float | None = None
    fell_back_to_eager: bool | None = None
    torch_version: str | None = None
    transformers_version: str | None = None
    machine_fingerprint: str | None = None
    device: str | None = None
    device_name: str | None = None
    machine: str | None = None

    def own_values(self, metric: str) -> list[float]:
        """This run's own values of `metric`, one per block: latency and speedup from its timing blocks only (a cold
        block's processes do not time the run's own level, records.times_own_level; they are blocks of B/A), every
        block's otherwise."""
        return [
            value
            for block, value in self.values.get(metric, {}).items()
            if metric not in BY_TURN_METRICS or not TrialSpec.is_cold_block(block)
        ]

    @classmethod
    def of(cls, record: RunRecord) -> ComparedRun:
        """A run record as a comparison reads it: its processes' values by block (`process_values`)."""
        env = record.env.environment_fields
        return cls(
            model_id=record.cell.model_id,
            label=record.cell.label,
            task=record.cell.task,
            batch_size=record.cell.batch_size,
            variant=record.cell.variant,
            environment=record.env.environment,
            environment_key=record.env.environment_key,
            run_uid=record.identity.run_uid,
            invocation_id=record.identity.invocation_id,
            status=record.identity.status,
            compile=record.cell.compile,
            values=process_values(record.process_results),
            turns=process_turns(record.process_results),
            fullgraph=record.cell.fullgraph,
            graph_count=record.health.graph_count,
            graph_break_count=record.health.graph_break_count,
            recompile_count=record.health.recompile_count,
            fell_back_to_eager=record.health.fell_back_to_eager,
            torch_version=env.get("torch_version"),
            transformers_version=env.get("transformers_version"),
            machine_fingerprint=env.get("machine_fingerprint"),
            device=env.get("device"),
            device_name=env.get("device_name"),
            machine=record.identity.machine,
        )

    @property
    def cell(self) -> tuple[Any, ...]:
        return tuple(getattr(self, key) for key in CELL)

    @property
    def cell_key(self) -> str:
        return noise_record.cell_key(self.model_id, self.batch_size, self.variant)

    @property
    def calibration_key(self) -> str:
        return noise_record.calibration_key(self.machine_fingerprint, self.device)


def health_changes(a: ComparedRun, b: ComparedRun) -> list[str]:
    """What changed in how the model compiles, B against A (empty when nothing did)."""
    changes = []
    if a.status != b.status:
        changes.append(f"status {a.status} -> {b.status}")
    if not b.compile:
        return changes
    if a.fullgraph and (a.status == STATUS_OK) != (b.status == STATUS_OK):
        changes.append(f"fullgraph {'passes' if b.status == STATUS_OK else 'fails'} now")
    for key, what in (
        ("graph_break_count", "graph breaks"),
        ("recompile_count", "recompiles"),
        ("graph_count", "graphs"),
    ):
        before, after = getattr(a, key), getattr(b, key)
        if before is not None and after is not None and before == before and after == after and before != after:
            changes.append(f"{what} {int(before)} -> {int(after)}")
    if bool(a.fell_back_to_eager) != bool(b.fell_back_to_eager):
        changes.append("falls back to eager" if b.fell_back_to_eager else "no longer falls back to eager")
    return changes


def ratio_of(va: dict[str, float], vb: dict[str, float], paired: bool, noise: stats.Noise | None) -> stats.Ratio:
    """B / A for one metric from each side's values by block: paired by block inside one invocation (`paired`),
    Welch's t across invocations."""
    common = [block for block in va if block in vb]
    if paired and common:
        return stats.paired_ratio([va[k] for k in common], [vb[k] for k in common], noise)
    return stats.welch_ratio(list(va.values()), list(vb.values()))


def by_turn_differences(a: ComparedRun, b: ComparedRun, metric: str) -> list[float] | None:
    """One invocation's per-block log B/A of `metric` from rounds paired by turn: per block, the median over the turns
    both processes timed in of B's turn value less A's (`turn_values`). A's k-th turn and B's k-th ran one right after
    the other, so what the machine's state does to both cancels, where each process's median lands on whichever speed
    most of its rounds met. None where the metric is not paired this way, or where any block both sides measured has
    fewer than MIN_TURNS turns in common (a cell's blocks are never a mix of two statistics)."""
    if metric not in BY_TURN_METRICS or a.invocation_id != b.invocation_id:
        return None
    blocks = [block for block in a.values.get(metric, {}) if block in b.values.get(metric, {})]
    turns_a, turns_b = a.turns.get(metric, {}), b.turns.get(metric, {})
    differences = []
    for block in blocks:
        mine, theirs = turns_a.get(block, {}), turns_b.get(block, {})
        common = [turn for turn in mine if turn in theirs]
        if len(common) < MIN_TURNS:
            return None
        differences.append(statistics.median(theirs[turn] - mine[turn] for turn in common))
    return differences or None


def compare_pair(
    a: ComparedRun, b: ComparedRun, noise: noise_record.CellNoise | None, margin: float, reference: str = FIRST
) -> Comparison:
    """B against A in one cell for each metric (ratio, 95% and 90% CIs, p, both answers, one word), health changes;
    `noise`: the machine's record (the cell's own entry is used)."""
    known = (noise or {}).get(a.cell_key, {})
    paired = a.invocation_id == b.invocation_id
    judged = {}
    for metric in METRICS:
        if metric.compiled_only and not a.compile:
            continue
        by_turn = by_turn_differences(a, b, metric.name)
        if by_turn is not None:
            recorded = noise_record.noise_name(metric.name, stats.PAIRED_BY_TURN)
            ratio = stats.paired_log_ratio(by_turn, known.get(recorded), stats.PAIRED_BY_TURN)
        else:
            values_a, values_b = a.values.get(metric.name, {}), b.values.get(metric.name, {})
            ratio = ratio_of(values_a, values_b, paired, known.get(metric.name))
        changed, relevant = stats.change(ratio, metric.above, metric.below), stats.relevance(ratio, margin)
        judged[metric.name] = Judged(ratio, changed, relevant, stats.verdict_of(changed, relevant))
    headline = "compiled_latency" if "compiled_latency" in judged else "eager_latency"
    return Comparison(
        **dict(zip(CELL, a.cell, strict=True)),
        baseline=a.environment,
        candidate=b.environment,
        baseline_run_uid=a.run_uid,
        candidate_run_uid=b.run_uid,
        reference=reference,
        baseline_versions=versions_text(a.torch_version, a.transformers_version),
        candidate_versions=versions_text(b.torch_version, b.transformers_version),
        baseline_status=a.status,
        candidate_status=b.status,
        health_change="; ".join(health_changes(a, b)),
        interleaved=paired,
        calibrated=bool(known),
        margin=margin,
        judged=judged,
        headline=headline,
        verdict=judged[headline].verdict,
    )


def adjust_headlines(compared: list[Comparison]) -> None:
    """Holm-adjust the headline p-values across `compared` (in place): each row's `verdict` then says "changed"
    only where it holds for the family, so the headline flags nothing by chance in more than 5% of invocations."""
    adjusted = stats.holm([row.judged[row.headline].ratio.p_value for row in compared])
    for row, p_value in zip(compared, adjusted, strict=True):
        metric, judged = METRIC_BY_NAME[row.headline], row.judged[row.headline]
        changed = stats.change_word(judged.ratio.value, p_value, metric.above, metric.below)
        row.p_adjusted, row.verdict = p_value, stats.verdict_of(changed, judged.relevance)


def comparison_rows(
    runs: list[ComparedRun],
    noise: noise_record.CellNoise | None,
    labels: list[str] | None = None,
    margin: float = 0.05,
) -> list[Comparison]:
    """Every environment against the first of `labels` (the baseline: `compare`'s first) and, in a series of three
    or more, against the one before it; per (model, batch size, variant), compile-health changes first."""
    labels = labels or list(dict.fromkeys(run.environment for run in runs))
    if len(labels) < 2:
        return []
    pairs = [(labels[0], label, FIRST) for label in labels[1:]]
    pairs += [(before, after, PREVIOUS) for before, after in itertools.pairwise(labels[1:])]
    by_cell: dict[tuple, dict[str, ComparedRun]] = {}
    for run in runs:
        by_cell.setdefault(run.cell, {})[run.environment] = run
    compared = [
        compare_pair(cell[a], cell[b], noise, margin, reference)
        for cell in by_cell.values()
        for a, b, reference in pairs
        if a in cell and b in cell
    ]
    adjust_headlines(compared)
    compared.sort(
        key=lambda row: (
            row.health_change == "",
            row.reference != FIRST,
            row.variant == EAGER,
            row.label,
            row.batch_size,
        )
    )
    return compared


def is_aa(runs: list[ComparedRun]) -> bool:
    """Whether the environments compared are one and the same stack (an A/A calibration)."""
    keys = {run.environment_key for run in runs}
    return len({run.environment for run in runs}) >= 2 and len(keys) == 1


def noise_measured(compared: list[Comparison]) -> noise_record.CellNoise:
    """What this invocation adds to the machine's noise record, per cell and metric (a metric paired by turn under its
    own name, noise_record.noise_name): its paired blocks against the baseline (their spread around the cell's own
    mean, so a real difference adds nothing), leaving out cells with a run that is not ok (an `invalid` one included)
    and metrics the F-test found noisier than the cell's record."""
    measured: noise_record.CellNoise = {}
    for row in compared:
        if row.reference != FIRST or row.baseline_status != STATUS_OK or row.candidate_status != STATUS_OK:
            continue
        for name, judged in row.judged.items():
            if judged.ratio.method not in stats.PAIRED_METHODS or judged.ratio.noisy:
                continue
            cell, recorded = judged.ratio.cell_noise, noise_record.noise_name(name, judged.ratio.method)
            if cell.dof:
                per_cell = measured.setdefault(noise_record.cell_key(row.model_id, row.batch_size, row.variant), {})
                per_cell[recorded] = per_cell.get(recorded, stats.Noise()) + cell
    return measured


def flagged(compared: list[Comparison]) -> list[Comparison]:
    """Rows with a verdict of a difference (not equivalent or inconclusive) in any metric."""
    quiet = (stats.EQUIVALENT, stats.INCONCLUSIVE)
    return [row for row in compared if any(judged.verdict not in quiet for judged in row.judged.values())]


def versions_text(torch_version: Any, transformers_version: Any) -> str:
    """A stack's versions as a table shows them."""
    return f"torch {torch_version} / transformers {transformers_version}"
