"""The explain report: per explained cell, where the compiled call's time went A beside B, the kernels that moved
most, dynamo's compile-time table and what the compiler made (analysis/explain.py's reading of two profiles)."""

from __future__ import annotations

from typing import Any

from compilebench.analysis import explain
from compilebench.harness import profiling

HOW = (
    "One profiled process per side, after and apart from the comparison's timing blocks, on the comparison's warm "
    "inductor cache (the program its timing blocks ran), or an empty one where the cold compile "
    "changed; each generated kernel timed by its name. Per call, ms: each event's "
    "self time on the calling thread, by category; `unrecorded` is the rest of the call's wall time (Python glue), "
    "so a side's categories sum to its profiled call. B − A with its 95% interval over {chunks} rounds of calls; "
    "*moved*: the interval leaves out zero, the change is beyond the margin (±{margin:.0%}) of the category and at "
    "least {share:.0%} of A's call. One process a side: a whole process running fast or slow is not in the interval. "
    "Open `trace.json` in Perfetto (ui.perfetto.dev) or chrome://tracing; `code/` holds the generated program."
)


# A side's profiled call this far off its timing blocks' latency did not run as they did: its split is not read
# (docs/findings.md, 2026-12-05: SegFormer-B0's explain on an idle machine and beside a pytest run)
FAR_OFF = 0.25


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _side_failed(label: str, row: dict[str, Any]) -> str:
    return f"{label}'s profiled process ended `{row.get('status')}`: {str(row.get('error') or '')[:300]}"


def _categories(
    a: explain.Side, b: explain.Side, margin: float, latency: dict[str, float | None], again: explain.Side | None
) -> list[str]:
    shifts, aa = explain.judged(a, b, margin, again)
    columns = ["per call, ms", a.label, b.label, "B − A [95% CI]", *([f"{again.label} − B"] if again else []), "moved"]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for shift in shifts:
        if shift.a_ms == 0 and shift.b_ms == 0:
            continue
        cells = [
            shift.category,
            f"{shift.a_ms:.2f}",
            f"{shift.b_ms:.2f}",
            f"{shift.delta_ms:+.2f} [{shift.low_ms:+.2f}, {shift.high_ms:+.2f}]",
        ]
        cells += [f"{aa[shift.category].delta_ms:+.2f}"] if again else []
        lines.append("| " + " | ".join([*cells, "**moved**" if shift.moved else ""]) + " |")
    total = ["**profiled call** (the sum)", f"{a.call_ms:.2f}", f"{b.call_ms:.2f}", f"{b.call_ms - a.call_ms:+.2f}"]
    total += [f"{again.call_ms - b.call_ms:+.2f}"] if again else []
    measured_a, measured_b = latency.get(a.label), latency.get(b.label)
    measured = ["compiled latency, timing blocks (median)", _ms(measured_a), _ms(measured_b), ""]
    measured += [""] if again else []
    lines += ["| " + " | ".join([*total, ""]) + " |", "| " + " | ".join([*measured, ""]) + " |", ""]
    off = {side.label: side.call_ms / value - 1 for side, value in ((a, measured_a), (b, measured_b)) if value}
    if off:
        said = ", ".join(f"{label} {gap:+.1%}" for label, gap in off.items())
        lines.append(f"Profiled call against the timing blocks' latency: {said}.")
    astray = [f"{label}'s ({gap:+.0%})" for label, gap in off.items() if abs(gap) > FAR_OFF]
    if astray:
        lines.append(
            f"**Not to be read:** {' and '.join(astray)} profiled call is more than ±{FAR_OFF:.0%} off its timing "
            "blocks' latency: the profiled process did not run as they did (a busy machine runs it slower). "
            "`make explain` again on an idle one."
        )
    moved = [shift.category for shift in shifts if shift.moved]
    lines.append(f"Moved: {', '.join(moved)}." if moved else "No category moved beyond its own spread and the margin.")
    if again:
        aa_moved = [shift.category for shift in aa.values() if shift.moved]
        lines.append(
            f"A/A, two processes of {b.label}: "
            + (f"moved: {', '.join(aa_moved)}." if aa_moved else "no category moved, as an A/A should.")
            + " A move no larger than this difference is not called one."
        )
    return lines


def _events(a: explain.Side, b: explain.Side) -> list[str]:
    lines = [
        "Moved most (kernels matched by name without their numbers):",
        "",
        f"| event | category | {a.label} | {b.label} | B − A |",
        "|---|---|---|---|---|",
    ]
    for name, category, a_ms, b_ms in explain.moved_events(a, b):
        lines.append(f"| `{name[:80]}` | {category} | {a_ms:.3f} | {b_ms:.3f} | {b_ms - a_ms:+.3f} |")
    return lines


def _phases(a: explain.Side, b: explain.Side) -> list[str]:
    rows = explain.phase_rows(a, b)
    if not rows:
        return ["Compile: neither release's dynamo gave its compile-time table."]
    caches = " and ".join(dict.fromkeys(side.cache for side in (a, b) if side.cache)) or "an unrecorded"
    lines = [
        f"Compile, s (dynamo's timed functions, nested: a phase includes those it calls; on the {caches} cache: "
        "an empty one times a cold compile, a warm one what reading the cache costs):",
        "",
        f"| function | phase | {a.label} | {b.label} | B − A |",
        "|---|---|---|---|---|",
    ]
    for name, phase, a_s, b_s in rows:
        delta = f"{(b_s or 0.0) - (a_s or 0.0):+.2f}" if a_s is not None and b_s is not None else "–"
        lines.append(f"| `{name[:70]}` | {phase} | {_ms(a_s)} | {_ms(b_s)} | {delta} |")
    lines.append(f"| first call of this process (its compile) | | {_ms(a.compile_s)} | {_ms(b.compile_s)} | |")
    return lines


def _made(a: explain.Side, b: explain.Side) -> list[str]:
    def health(side: explain.Side, key: str) -> Any:
        return side.health.get(key, "not given")

    def reasons(side: explain.Side) -> str:
        found = side.health.get("graph_break_reasons") or []
        return "; ".join(str(reason)[:80] for reason in found[:3]) or "none"

    def code(side: explain.Side) -> str:
        kept = side.code.get("kept")
        return f"{side.code.get('files', 0)} files" + ("" if kept or not side.code.get("files") else " (not kept)")

    rows = [
        ("torch", a.torch, b.torch),
        ("graphs", health(a, "graph_count"), health(b, "graph_count")),
        ("graph breaks", health(a, "graph_break_count"), health(b, "graph_break_count")),
        ("break reasons", reasons(a), reasons(b)),
        ("recompiles", health(a, "recompile_count"), health(b, "recompile_count")),
        ("fell back to eager", health(a, "fell_back_to_eager"), health(b, "fell_back_to_eager")),
        ("generated kernels (distinct)", a.generated_kernels, b.generated_kernels),
        ("library calls kept", ", ".join(a.library_calls)[:160] or "none", ", ".join(b.library_calls)[:160] or "none"),
        ("generated code", code(a), code(b)),
    ]
    lines = [f"| what the compiler made | {a.label} | {b.label} |", "|---|---|---|"]
    lines += [f"| {name} | {left} | {right} |" for name, left, right in rows]
    return lines


def report(explained: list[tuple[Any, dict[str, Any], dict[str, float | None]]], margin: float) -> str:
    """The report of every explained target: (Target, {label: Side or a failed result row}, {label: latency})."""
    lines = ["# Why it changed", "", HOW.format(chunks=profiling.CHUNKS, margin=margin, share=explain.MIN_SHARE), ""]
    if not explained:
        lines.append("No compiled cell changed: nothing to explain.")
    for target, sides, latency in explained:
        a, b = sides[target.baseline], sides[target.candidate]
        again = sides.get(f"{target.candidate} again")
        lines += [
            f"## {target.label} bs{target.batch_size} {target.variant}: {target.baseline} → {target.candidate}",
            "",
        ]
        lines += [f"Changed: {'; '.join(target.why)}." if target.why else "Asked for (no word moved).", ""]
        failed = [_side_failed(label, side) for label, side in sides.items() if not isinstance(side, explain.Side)]
        lines += [*failed, ""] if failed else []
        if not isinstance(a, explain.Side) or not isinstance(b, explain.Side):
            continue
        again = again if isinstance(again, explain.Side) else None
        lines += [*_categories(a, b, margin, latency, again), "", *_events(a, b), ""]
        lines += [*_phases(a, b), "", *_made(a, b), ""]
        for side in (a, b):
            parts = explain.missing(side)
            lines += (
                [f"{side.label} (torch {side.torch or '?'}) did not give: {'; '.join(parts)}.", ""] if parts else []
            )
        lines += [
            f"Files: `{target.slug}/{a.label}/` and `{target.slug}/{b.label}/` (trace.json, profile.json, code/).",
            "",
        ]
    return "\n".join(lines)
