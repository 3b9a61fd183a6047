"""Why a compiled cell changed: two profiled processes (A and B, harness/profiling.py) read as categories a reader
knows, matched across releases whose kernel names differ, and their compile-time tables side by side. Pure.

A profiled call's time per call is split by the self time of what the profiler saw on the calling thread: inductor's
generated kernels, the library calls the compiled program keeps (convolution, matmul, attention), memory and view
ops, the compiled call's wrapper and guards, other library ops (extern calls and eager fallbacks); the rest of the
round's wall time, recorded by no event, is `unrecorded` (Python glue). So each side's categories sum to its profiled
wall time per call. Each category has CHUNKS values (rounds) a side; a category *moved* where the 95% interval of
B - A (Welch, over the rounds) leaves out zero, and the change is beyond `margin` of the category and at least
MIN_SHARE of A's call: one process a side cannot see a whole process running fast or slow, so small shifts are not
called moves.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, replace
from typing import Any

from compilebench.analysis import stats

GENERATED = "generated kernels"
UNRECORDED = "unrecorded (Python glue)"
CATEGORIES = (  # first match wins, on the event's name
    (GENERATED, re.compile(r"cpp_fused|kernel_cpp|^graph_\d+_|triton_|cpp_kernel")),
    ("convolution", re.compile(r"conv", re.IGNORECASE)),
    ("matmul", re.compile(r"::linear$|linear_pointwise|_mkl_linear|addmm|::mm$|::bmm$|matmul|gemm", re.IGNORECASE)),
    ("attention", re.compile(r"scaled_dot_product|attention|flash", re.IGNORECASE)),
    (
        "memory and views",
        re.compile(
            r"empty|as_strided|::view|reshape|resize_|::copy_|clone|contiguous|"
            r"reinterpret_tensor|alloc|::to$|_to_copy|::detach|::t$|transpose|permute"
        ),
    ),
    (
        "wrapper and guards",
        re.compile(
            r"Compiled|Cache Lookup|[Dd]ynamo|[Ii]nductor|wrapper|## Call|[Gg]uard|"
            r"Profiler|record_param"
        ),
    ),
    ("other library ops", re.compile(r".")),
)
ORDER = (*(name for name, _ in CATEGORIES), UNRECORDED)
LIBRARY = ("convolution", "matmul", "attention")  # the library calls a compiled program keeps
MIN_SHARE = 0.02  # a move smaller than this fraction of A's call is not called one
# Dynamo's timed functions (compile_times), by what their name says, first match wins; the table is nested.
PHASES = (
    ("freezing", re.compile(r"freez|constant_fold", re.IGNORECASE)),
    ("AOT autograd", re.compile(r"aot|create_joint|partition", re.IGNORECASE)),
    (
        "C++ / Triton build and load",
        re.compile(
            r"load_by_key_path|CodeCache|compile_file|async_compile|cpp_compile|"
            r"\.load|wait",
            re.IGNORECASE,
        ),
    ),
    ("code generation", re.compile(r"codegen|compile_to_module|Scheduler", re.IGNORECASE)),
    (
        "inductor lowering",
        re.compile(
            r"GraphLowering|lowering|_passes|post_grad|pre_grad|compile_fx_inner|"
            r"fx_codegen_and_compile|compile_fx",
            re.IGNORECASE,
        ),
    ),
    ("backend (AOT + inductor)", re.compile(r"call_user_compiler|backend", re.IGNORECASE)),
    (
        "dynamo trace",
        re.compile(
            r"_compile|convert_frame|bytecode|transform|InstructionTranslator|compile_subgraph|"
            r"guards|trace",
            re.IGNORECASE,
        ),
    ),
)


def category_of(name: str) -> str:
    return next(category for category, pattern in CATEGORIES if pattern.search(name))


def phase_of(name: str) -> str:
    return next((phase for phase, pattern in PHASES if pattern.search(name)), "other")


def kernel_key(name: str) -> str:
    """A kernel's name without what changes between compiles of the same program: the graph number, the kernel's
    running number (`graph_0_cpp_fused_add_relu_3` -> `cpp_fused_add_relu`)."""
    return re.sub(r"_\d+$", "", re.sub(r"^graph_\d+_", "", name))


@dataclass(frozen=True)
class Side:
    """One environment's profiled compiled call: per category, ms per call in each round; the events matched by
    kernel_key (ms per call over all rounds); its compile-time table and what the compiler made."""

    label: str
    torch: str
    calls_per_round: int
    wall_ms: tuple[float, ...]  # per call, each round: what the categories sum to
    categories: dict[str, tuple[float, ...]]
    events: dict[str, float]
    phases_s: dict[str, float]
    health: dict[str, Any]
    code: dict[str, Any]
    compile_s: float | None = None  # this process's first call (its compile and one call)
    cache: str = ""  # the inductor cache it compiled on: cold (empty) | warm (the comparison's)
    kernels_named: int | None = None  # generated kernels timed by name (0: none found; None: not recorded)

    @property
    def call_ms(self) -> float:
        return statistics.fmean(self.wall_ms)

    def category_ms(self, category: str) -> float:
        return statistics.fmean(self.categories.get(category, (0.0,)))

    @property
    def generated_kernels(self) -> int:
        return sum(1 for name in self.events if category_of(name) == GENERATED)

    @property
    def library_calls(self) -> list[str]:
        return sorted(name for name in self.events if category_of(name) in LIBRARY)


def side_of(label: str, profile: dict[str, Any], compile_s: float | None = None, cache: str = "") -> Side:
    """A side from a process's profile.json (harness/profiling.capture), its trial's compile time and the cache it
    compiled on."""
    device = profile.get("device", "cpu")
    key = "self_device_us" if device.startswith("cuda") else "self_cpu_us"
    walls, per_category, events = [], {name: [] for name in ORDER}, {}
    rounds = profile["rounds"]
    for entry in rounds:
        calls = entry["calls"]
        sums = dict.fromkeys(ORDER, 0.0)
        for name, event in entry["events"].items():
            ms = event[key] / 1000 / calls
            sums[category_of(name)] += ms
            matched = kernel_key(name) if category_of(name) == GENERATED else name
            events[matched] = events.get(matched, 0.0) + ms / len(rounds)
        wall = entry["wall_s"] * 1000 / calls
        sums[UNRECORDED] = wall - sum(sums.values())
        walls.append(wall)
        for name in ORDER:
            per_category[name].append(sums[name])
    calls = rounds[0]["calls"] if rounds else 0
    return Side(
        label,
        profile.get("torch", ""),
        calls,
        tuple(walls),
        {k: tuple(v) for k, v in per_category.items()},
        events,
        profile.get("compile_phases_s", {}),
        profile.get("health", {}),
        profile.get("code", {}),
        compile_s,
        cache,
        profile.get("kernels_named"),
    )


HEALTH_PARTS = {"graph_count": "graphs", "graph_break_count": "graph breaks", "recompile_count": "recompiles"}


def missing(side: Side) -> list[str]:
    """The parts of an explanation this side's release did not give (its profiler, dynamo or logs lack them)."""
    parts = [] if side.phases_s else ["dynamo's compile-time table"]
    if side.kernels_named == 0 and side.code.get("files"):
        parts.append("its generated kernels by name (their time is in `unrecorded`)")
    parts += [name for key, name in HEALTH_PARTS.items() if key not in side.health]
    return parts


@dataclass(frozen=True)
class Shift:
    """A category, A beside B, ms per call: B - A with its 95% interval over the rounds, and whether it moved."""

    category: str
    a_ms: float
    b_ms: float
    low_ms: float
    high_ms: float
    moved: bool

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms


def _interval(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, float]:
    """Welch's 95% interval of mean(b) - mean(a)."""
    if len(a) < 2 or len(b) < 2:
        return -math.inf, math.inf
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    delta = statistics.fmean(b) - statistics.fmean(a)
    if se == 0:
        return delta, delta
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t_quantile(0.975, dof) * se
    return delta - half, delta + half


def shifts(a: Side, b: Side, margin: float) -> list[Shift]:
    """Every category, A beside B, in ORDER."""
    found = []
    for category in ORDER:
        a_values, b_values = a.categories.get(category, (0.0,)), b.categories.get(category, (0.0,))
        a_ms, b_ms = statistics.fmean(a_values), statistics.fmean(b_values)
        low, high = _interval(a_values, b_values)
        beyond = abs(b_ms - a_ms) > margin * max(abs(a_ms), abs(b_ms)) and abs(b_ms - a_ms) >= MIN_SHARE * a.call_ms
        found.append(Shift(category, a_ms, b_ms, low, high, beyond and (low > 0 or high < 0)))
    return found


def within_aa(found: list[Shift], aa: dict[str, Shift]) -> list[Shift]:
    """`found` (A against B) with a move no larger than B's two processes differ by in that category (`aa`: B
    against B again) not called one."""
    return [
        replace(shift, moved=False)
        if shift.moved and shift.category in aa and abs(shift.delta_ms) <= abs(aa[shift.category].delta_ms)
        else shift
        for shift in found
    ]


def judged(a: Side, b: Side, margin: float, again: Side | None = None) -> tuple[list[Shift], dict[str, Shift]]:
    """Every category A beside B, a move no larger than B's A/A (`again`, B's second process, where there is one)
    not called one; and that A/A by category ({} without one)."""
    aa = {shift.category: shift for shift in shifts(b, again, margin)} if again else {}
    return within_aa(shifts(a, b, margin), aa), aa


def moved(a: Side, b: Side, margin: float, again: Side | None = None) -> list[Shift]:
    """The categories that moved from A to B, beside B's A/A where there is one."""
    return [shift for shift in judged(a, b, margin, again)[0] if shift.moved]


def moved_events(a: Side, b: Side, count: int = 6) -> list[tuple[str, str, float, float]]:
    """The events (kernels matched by kernel_key) whose ms per call moved most: (name, category, A ms, B ms)."""
    names = set(a.events) | set(b.events)
    rows = [(name, category_of(name), a.events.get(name, 0.0), b.events.get(name, 0.0)) for name in names]
    rows.sort(key=lambda row: -abs(row[3] - row[2]))
    return rows[:count]


def phase_rows(a: Side, b: Side, count: int = 12) -> list[tuple[str, str, float | None, float | None]]:
    """Dynamo's timed functions, A beside B (name, phase, A s, B s; None where a side has no such function), those
    that moved most first."""
    names = set(a.phases_s) | set(b.phases_s)
    rows = [(name, phase_of(name), a.phases_s.get(name), b.phases_s.get(name)) for name in names]
    rows.sort(key=lambda row: -abs((row[3] or 0.0) - (row[2] or 0.0)))
    return rows[:count]
