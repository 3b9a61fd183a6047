"""A bisect's answer in Markdown: per searched headline where it changed, why (the explained steps), the A/A step,
the rounds it took."""

from __future__ import annotations

import math

from compilebench.analysis import bisection, stats
from compilebench.analysis.bisection import PINNED, Headline, RoundResult, Search, Spec, Step, is_direction

UNITS = {"eager_latency": " ms", "compiled_latency": " ms", "speedup": "×", "compile_warm": " s", "compile_cold": " s"}


def latest_values(searches_of: Headline, rounds: list[RoundResult]) -> dict[int, float]:
    """A headline's value per release position, from the last round that measured it."""
    found: dict[int, float] = {}
    for result in rounds:
        for headline, position, value in result.values:
            if headline == searches_of:
                found[position] = value
    return found


def aa_steps(spec: Spec, rounds: list[RoundResult]) -> list[tuple[Headline, Step]]:
    """The first round's A/A steps (the newer end against itself)."""
    if not spec.aa or not rounds:
        return []
    return [(headline, step) for headline, step in rounds[0].steps if step.low == step.high]


def _ratio_text(step: Step) -> str:
    if not math.isfinite(step.ratio):
        return step.verdict
    return f"{step.verdict} {step.ratio:.3f} [{step.ci_low:.3f}, {step.ci_high:.3f}]"


def _why(spec: Spec, searches: list[Search], why: dict[tuple[int, int], list[dict]]) -> list[str]:
    """Per step a compiled headline was pinned to: the categories of the compiled call that moved there (explain's
    profiled processes), linked to its report; a pinned step not explained said so."""
    names = spec.releases
    pinned = sorted(
        {(s.low, s.high) for s in searches if s.state == PINNED and s.headline.metric in bisection.EXPLAINED}
    )
    if not pinned:
        return []
    lines = ["", "## Why it changed", ""]
    for low, high in pinned:
        step = f"{names[low]} → {names[high]}"
        entries = why.get((low, high))
        if entries is None:
            lines.append(f"- {step}: not explained (`--no-explain`, or its explain failed: the log says)")
            continue
        link = f"[report](explain/{names[low]}-{names[high]}/report.md)"
        for entry in entries:
            target = entry["target"]
            cell = f"{target['label']} bs{target['batch_size']} {target['variant']}"
            if not entry["profiled"]:
                said = "a side's profiled process failed (its report says why)"
            elif entry["moved"]:
                said = "moved: " + ", ".join(
                    f"{m['category']} {m['a_ms']:.2f} → {m['b_ms']:.2f} ms" for m in entry["moved"]
                )
            else:
                said = "no category of the compiled call moved beyond its own spread and the margin"
            lines.append(f"- {step}, {cell}: {said} ({link})")
    return lines


def report(
    spec: Spec,
    rounds: list[RoundResult],
    searches: list[Search],
    finished: bool = True,
    why: dict[tuple[int, int], list[dict]] | None = None,
) -> str:
    """The bisect's answer in Markdown: per searched headline, where it changed, why (where a compiled headline's
    step was explained: `why`, each explained step's explain.json entries), and the rounds it took."""
    names = spec.releases
    wall = sum(result.wall_s + result.explain_s for result in rounds)
    lines = [
        f"# Bisect {spec.name}",
        "",
        f"{names[0]} → {names[-1]}: {len(names)} releases, {len(rounds)} round(s), {wall / 60:.1f} min of "
        f"rounds, their explains included (budget {spec.budget_min:g} min), seed {spec.seed}. "
        f"Releases: {', '.join(names)}.",
        "",
    ]
    if not finished:
        lines += [f"**Stopped after {len(rounds)} round(s): run the same command again to resume.**", ""]
    last = len(names) - 1
    ends = [(h, s) for h, s in (rounds[0].steps if rounds else ()) if (s.low, s.high) == (0, last)]
    words = [s.verdict for h, s in ends if h.metric in spec.metrics]
    lines += [
        f"Headlines at the ends: {len(words)}; {sum(map(is_direction, words))} changed (searched), "
        f"{words.count(stats.INCONCLUSIVE)} inconclusive (the ends measured again with twice the blocks), "
        f"{words.count(stats.EQUIVALENT)} equivalent (nothing more measured).",
        "",
    ]
    checks = aa_steps(spec, rounds)
    if checks:
        flagged = [h.text() for h, s in checks if is_direction(s.verdict)]
        lines += [
            f"A/A step ({names[-1]} twice in the first round): {len(checks)} headline(s), "
            + (f"**changed: {', '.join(flagged)}**" if flagged else "none changed")
            + ".",
            "",
        ]
    if searches:
        lines += [
            "| cell | metric | where | B/A [95% CI] | state | releases measured (value) |",
            "|---|---|---|---|---|---|",
        ]
    for search in searches:
        h = search.headline
        last = next((s for s in reversed(search.steps) if (s.low, s.high) == (search.low, search.high)), None)
        where = f"{names[search.low]} → {names[search.high]}"
        values = latest_values(h, rounds)
        unit = UNITS[h.metric]
        measured = ", ".join(f"{names[p]} ({values[p]:.3g}{unit})" for p in sorted(values))
        beside = ", ".join(f"{names[low]} → {names[high]}" for low, high in search.undecided)
        skipped = ", ".join(f"{names[position]} ({word})" for position, word in search.skipped)
        notes = [search.note] + ([f"undecided beside it: {beside}"] if beside else [])
        notes += [f"skipped, its runs not ok: {skipped}"] if skipped else []
        state = search.state + "".join(f"; {note}" for note in notes if note)
        ratio = _ratio_text(last) if last else search.direction
        lines.append(
            f"| {h.label} bs{h.batch_size} {h.variant} | {h.metric.replace('_', ' ')} | {where} | {ratio} | "
            f"{state} | {measured} |"
        )
    if searches:
        lines += ["", "![bisect](bisect.png)"]
    lines += _why(spec, searches, why or {})
    lines += [
        "",
        "| round | releases | cells | blocks | wall | explain | DVC experiment |",
        "|---|---|---|---|---|---|---|",
    ]
    for number, result in enumerate(rounds):
        cells = ", ".join(f"{model.split('/')[-1]} bs{b} {v}" for model, b, v in result.plan.cells) or "the suite"
        lines.append(
            f"| {number} | {' '.join(names[p] for p in result.plan.positions)} | {cells} | "
            f"{result.plan.replicates} | {result.wall_s / 60:.1f} min | "
            + (f"{len(result.explained)} step(s), {result.explain_s:.0f} s" if result.explain_s else "")
            + f" | `{result.experiment}` |"
        )
    return "\n".join(lines) + "\n"


def figure(spec: Spec, rounds: list[RoundResult], searches: list[Search], width_in: float = 10.0):
    """One panel per search: each release the bisect measured, its value (from the last round that measured it) on
    the release axis, the span the search ended on shaded: where it changed, or what is left to search."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = spec.releases
    shown = searches[:12]
    columns = max(1, min(3, len(shown)))
    lines = max(1, -(-len(shown) // columns))
    fig, axes = plt.subplots(lines, columns, figsize=(width_in * 1.3, 3.0 * lines), squeeze=False)
    for ax, search in zip(axes.flat, shown, strict=False):
        values = latest_values(search.headline, rounds)
        measured = sorted(values)
        ax.plot(measured, [values[p] for p in measured], "o-", color="C0", markersize=4, linewidth=1)
        colour = "C3" if search.state == "pinned" else "C7"
        ax.axvspan(search.low, search.high, color=colour, alpha=0.15, linewidth=0)
        ax.set_xticks(range(len(names)), [name.split("-", 1)[-1] for name in names], rotation=45, fontsize=6)
        ax.set_xlim(-0.5, len(names) - 0.5)
        unit = UNITS[search.headline.metric].strip()
        ax.set_ylabel(unit, fontsize=8)
        ax.set_title(f"{search.headline.text()}: {search.direction or 'ends again'}, {search.state}", fontsize=8)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"Bisect {spec.name}: each release's median as last measured; shaded, the span each search ended on "
        "(red: pinned to one step)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig
