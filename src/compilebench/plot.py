"""Stage plot: the doc's figures, environments compared, the published numbers, and the report that shows them.

    python -m compilebench.plot                 # reads the aggregate tables; writes paths.plots and paths.report
    python -m compilebench.plot --from-mlflow   # the versions figure of the whole store (after aggregate
                                                # --from-mlflow), into paths.store; not a DVC output

Per environment, device and batch size, like the doc: 1. duration, eager vs each compiled variant (mean ms per
model); 2. percentage improvement, (eager - compiled) / eager * 100. Beyond the doc: 3. per device, measured speedup
with its 95% CI beside the published speedup of each GPU; 4. with two or more environments, B / A per metric with
95% CIs and the A/A margin; 5. time to first inference in a fresh process against steady-state latency. Then
`report.md`. Everything is logged to the parent MLflow run.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import matplotlib.ticker
import pandas as pd

from compilebench import reference, report, tracking
from compilebench.analysis import compare, stats, suite
from compilebench.analysis.run_record import RunRecord
from compilebench.config import Config, stage_config
from compilebench.records.reading import read_jsonl
from compilebench.records.writing import write_atomic
from compilebench.run_info import RunInfo

LOGGER = logging.getLogger(__name__)
RATIO_TICKS = (0.33, 0.5, 0.67, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0)  # B / A axis labels


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def panels(table: pd.DataFrame) -> list[tuple[str, str, int, pd.DataFrame]]:
    """One (environment, device name, batch size, rows) panel each, ok rows only."""
    ok = table[table["status"] == "ok"]
    groups = ok.groupby(["environment", "device_name", "batch_size"], sort=False)
    return [(environment, device, int(batch), group) for (environment, device, batch), group in groups]


def duration_figure(rows: pd.DataFrame, title: str, width_in: float) -> plt.Figure:
    """Grouped horizontal bars: eager and each compiled variant's mean latency per model."""
    labels = list(dict.fromkeys(rows["label"]))
    variants = list(dict.fromkeys(rows["variant"]))
    series = {"eager": rows.drop_duplicates("label").set_index("label")["eager_latency_ms_mean"]}
    for variant in variants:
        series[f"compile {variant}"] = rows[rows["variant"] == variant].set_index("label")["latency_ms_mean"]
    frame = pd.DataFrame(series).reindex(labels)
    fig, ax = plt.subplots(figsize=(width_in, 0.6 * len(labels) * len(series) / 2 + 1.5))
    frame.plot.barh(ax=ax)
    ax.set_xlabel("mean latency per batch (ms)")
    ax.set_title(title)
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def improvement_figure(rows: pd.DataFrame, title: str, width_in: float) -> plt.Figure:
    """Horizontal bars of the doc's percentage improvement per model and variant."""
    frame = rows.pivot_table(index="label", columns="variant", values="improvement_pct", sort=False)
    fig, ax = plt.subplots(figsize=(width_in, 0.5 * len(frame) * max(len(frame.columns), 1) / 2 + 1.5))
    frame.plot.barh(ax=ax)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("improvement with torch.compile (%)")
    ax.set_title(title)
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


GPU_MARKERS = {"A100": "^", "V100": "s", "T4": "o"}


def startup_figure(rows: pd.DataFrame, title: str, width_in: float) -> plt.Figure:
    """Per model: time to first inference in a fresh process (x) against steady-state latency (y), for eager and
    each variant, cold (filled) and warm (hollow, joined to cold): what a deployer trades."""
    labels = list(dict.fromkeys(rows["label"]))
    fig, axes = plt.subplots(1, len(labels), figsize=(width_in, 4.0), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, label in zip(axes[0], labels, strict=True):
        group = rows[rows["label"] == label]
        first = group.iloc[0]
        ax.scatter(
            [first["eager_first_inference_s"]],
            [first["eager_latency_ms_median"]],
            color="black",
            marker="D",
            label="eager",
        )
        for index, (_, row) in enumerate(group.iterrows()):
            colour = colours[index % len(colours)]
            cold, warm, latency = row["first_inference_s"], row["first_inference_s_warm"], row["latency_ms_median"]
            ax.scatter([cold], [latency], color=colour, label=row["variant"])
            if pd.notna(warm):
                ax.scatter([warm], [latency], facecolors="none", edgecolors=colour)
                ax.plot([cold, warm], [latency, latency], color=colour, linewidth=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("time to first inference, fresh process (s)")
        ax.set_title(label, fontsize=9)
    axes[0][0].set_ylabel("steady-state latency, median (ms)")
    axes[0][-1].legend(fontsize=7, title="filled: cold, hollow: warm", title_fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def speedup_vs_published_figure(verdicts: pd.DataFrame, device: str, width_in: float) -> plt.Figure:
    """Measured speedup per model and variant with 95% CI bars; published GPUs as markers; a panel per batch size."""
    rows = verdicts[(verdicts["device_name"] == device) & (verdicts["status"] == "ok")].copy()
    if rows["environment"].nunique() > 1:
        rows["variant"] = rows["variant"] + " [" + rows["environment"] + "]"
    batches = sorted(rows["batch_size"].unique())
    fig, axes = plt.subplots(
        len(batches), 1, figsize=(width_in, 2.2 + 0.5 * rows["label"].nunique() * len(batches)), squeeze=False
    )
    for ax, batch in zip(axes[:, 0], batches, strict=True):
        panel = rows[rows["batch_size"] == batch]
        labels = list(dict.fromkeys(panel["label"]))
        variants = list(dict.fromkeys(panel["variant"]))
        height = 0.8 / max(len(variants), 1)
        for i, variant in enumerate(variants):
            part = panel[panel["variant"] == variant].set_index("label").reindex(labels)
            y = [labels.index(label) + (i - (len(variants) - 1) / 2) * height for label in labels]
            error = [part["speedup"] - part["speedup_ci_low"], part["speedup_ci_high"] - part["speedup"]]
            ax.barh(y, part["speedup"], height=height, xerr=error, capsize=2, label=f"measured {variant}")
        for gpu, marker in GPU_MARKERS.items():
            column = f"published_speedup_{gpu}"
            published = panel.drop_duplicates("label").set_index("label").reindex(labels)[column].astype(float)
            ax.scatter(published, range(len(labels)), marker=marker, color="black", zorder=3, label=f"published {gpu}")
        ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_yticks(range(len(labels)), labels)
        ax.invert_yaxis()
        ax.set_title(f"{device}, batch size {batch}: speedup (eager / compiled), 95% CI; published: torch 2.0.1 GPUs")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1, 0].set_xlabel("speedup (x)")
    fig.tight_layout()
    return fig


def cell_names(compared: pd.DataFrame) -> pd.Series:
    """How a comparison row is named in a figure: model, batch size, variant, and which environments where it
    compares more than one pair (one pair: the figure's title names it)."""
    names = compared["label"] + " bs" + compared["batch_size"].astype(str) + " " + compared["variant"]
    if compared[["candidate", "baseline"]].drop_duplicates().shape[0] > 1:
        names = names + " (" + compared["candidate"] + " / " + compared["baseline"] + ")"
    return names


RATIO_AXIS = (1 / 3, 3.0)  # the widest a ratio axis gets: an interval beyond it is cut at the edge and marked


def ratio_axis(ratios: pd.Series) -> tuple[float, float]:
    """A log axis that holds every ratio and +-25% around 1, at most RATIO_AXIS: an interval past it is drawn to the
    edge with a red arrowhead instead of squeezing every other cell into a sliver."""
    present = ratios.dropna()
    low = min(0.8, present.min() / 1.15) if not present.empty else 0.8
    high = max(1.25, present.max() * 1.15) if not present.empty else 1.25
    return max(low, RATIO_AXIS[0]), min(high, RATIO_AXIS[1])


VERDICT_COLOURS = {stats.EQUIVALENT: "C2", stats.INCONCLUSIVE: "0.55"}
FAVOURABLE, UNFAVOURABLE = "C0", "C3"  # a direction: blue where B is better (faster, less, higher), red where worse
SUITE_NAME = "over the suite"
NO_CI = "no CI (one process)"
LEGEND_COLUMNS = 6  # entries a line of the comparison figure's legend holds


def word_colour(metric: compare.Metric, word: str) -> str:
    """A point's colour: its word's, a direction by whether it is favourable for this metric."""
    if word in VERDICT_COLOURS:
        return VERDICT_COLOURS[word]
    return FAVOURABLE if word == metric.better else UNFAVOURABLE


def suite_rows(read: list[compare.Comparison], several: bool) -> dict[str, dict[str, tuple[float, float, float, str]]]:
    """Per metric, each comparison's suite row (suite.summary): its name, B/A geomean, 95% CI and word."""
    found: dict[str, dict[str, tuple[float, float, float, str]]] = {}
    for entry in suite.summary(read):
        name = SUITE_NAME + (f" ({entry['candidate']} / {entry['baseline']})" if several else "")
        found.setdefault(entry["metric"], {})[name] = (
            entry["geomean"],
            entry["ci_low"],
            entry["ci_high"],
            entry["verdict"],
        )
    return found


def comparison_figure(compared: pd.DataFrame, names: pd.Series, width_in: float) -> plt.Figure:
    """B / A per named row for each compared metric, with 95% CIs (cut at the axis and marked where wider; a point
    without one hollow), each point coloured by its word (`equivalent` green, a favourable direction blue, an
    unfavourable one red, `inconclusive` grey); a panel lists the rows that have its metric, a model's rows together,
    then the suite's row (a diamond); the margin shaded; the title names the stacks and their builds."""
    read = report.read_comparisons(compared)
    pairs = list(dict.fromkeys((row.candidate, row.baseline) for row in read))
    over = suite_rows(read, len(pairs) > 1)
    first: dict[str, compare.Comparison] = {}  # a name's first row
    for name, row in zip(names, read, strict=True):
        first.setdefault(name, row)
    variants = list(dict.fromkeys(row.variant for row in read))

    def order(cell: tuple) -> tuple:
        row = first[cell]
        return row.label, row.batch_size, row.variant != "eager", variants.index(row.variant), row.candidate

    cells = sorted(first, key=order)
    metrics = [m for m in compare.METRICS if any(pd.notna(_interval(row, m)[0]) for row in read)]
    shown_cells = {m.name: [cell for cell in cells if pd.notna(_interval(first[cell], m)[0])] for m in metrics}
    columns = max(1, min(3, len(metrics)))
    lines = max(1, -(-len(metrics) // columns))
    tallest = max((len(v) + len(over.get(k, {})) for k, v in shown_cells.items()), default=1)
    fig, axes = plt.subplots(lines, columns, figsize=(width_in * 1.3, 1.4 + 0.35 * tallest * lines), squeeze=False)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        suite_row = over.get(metric.name, {})
        mine = shown_cells[metric.name] + list(suite_row)
        values = [_interval(first[cell], metric) for cell in shown_cells[metric.name]]
        values += [value[:3] for value in suite_row.values()]
        ratio, low, high = (pd.Series(v, index=mine, dtype=float) for v in zip(*values, strict=True))
        words = [first[cell].judged[metric.name].verdict for cell in shown_cells[metric.name]]
        words = pd.Series(words + [value[3] for value in suite_row.values()], index=mine)
        is_suite = pd.Series([cell in suite_row for cell in mine], index=mine)
        left, right = ratio_axis(ratio)
        shown = ratio.clip(lower=left, upper=right)  # a ratio past the axis sits on its edge, marked like its interval
        shown_low, shown_high = low.clip(lower=left, upper=right), high.clip(lower=left, upper=right)
        below, above = (shown - shown_low).clip(lower=0).fillna(0), (shown_high - shown).clip(lower=0).fillna(0)
        y = pd.Series(range(len(mine)), index=ratio.index)
        bare = ratio.notna() & (low.isna() | high.isna())  # one process a side: a value, no interval
        for word in dict.fromkeys(words):
            for suite_point in (False, True):
                chosen = (words == word) & (is_suite == suite_point)
                if not chosen.any():
                    continue
                marker, colour = "D" if suite_point else "o", word_colour(metric, word)
                ax.errorbar(
                    shown[chosen],
                    y[chosen],
                    xerr=[below[chosen], above[chosen]],
                    fmt=marker,
                    capsize=3,
                    color=colour,
                    label=word,
                )
                hollow = chosen & bare
                ax.plot(shown[hollow], y[hollow], marker, mec=colour, mfc="white", markersize=6, zorder=3)
        if bare.any():
            ax.plot([], [], "o", color="black", mfc="white", label=NO_CI)  # the legend's mark for them
        if suite_row:
            ax.axhline(len(mine) - len(suite_row) - 0.5, color="black", linewidth=0.5, linestyle=":")
        cut_left, cut_right = (low < left) | (ratio < left), (high > right) | (ratio > right)
        ax.plot(shown_low[cut_left], y[cut_left], "<", color="black", markersize=6, label="CI past the axis")
        ax.plot(shown_high[cut_right], y[cut_right], ">", color="black", markersize=6, label="CI past the axis")
        margin = pd.Series([first[cell].margin for cell in shown_cells[metric.name]], dtype=float).dropna()
        if not margin.empty:
            bound = 1 + float(margin.iloc[0])
            ax.axvspan(1 / bound, bound, color="grey", alpha=0.2, label=f"margin ±{bound - 1:.0%}")
        ax.set_xscale("log")  # ratios: 0.5x and 2x equally far from 1
        ax.set_xlim(left, right)
        low_x, high_x = ax.get_xlim()
        crowded = (0.95, 1.05) if high_x / low_x >= 1.3 else ()  # a narrow axis gets the ticks at +-5% too
        crowded += (0.9, 1.1) if high_x / low_x >= 2.0 else ()  # a wide one only the coarse ones
        ticks = [tick for tick in RATIO_TICKS if low_x <= tick <= high_x and tick not in crowded]
        ax.set_xticks(ticks or [1.0])
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(mine)), mine, fontsize=7)
        ax.set_ylim(tallest - 0.5, -0.5)  # every panel's rows from the top, at one spacing
        ax.set_title(f"{metric.name.replace('_', ' ')}: B / A ({metric.above} above 1)", fontsize=9)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.set_visible(False)
    legend = {}  # one legend for every panel: the words drawn, the marks, and the margin
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            drawn = getattr(handle, "get_xdata", None)
            if drawn is None or len(drawn()) or label == NO_CI:  # a mark no point got is not in the legend
                legend.setdefault(label, handle)
    title = None
    if len(pairs) == 1 and not names.str.contains(" / ", regex=False).any():
        row = read[0]
        title = f"B / A: {row.candidate} ({row.candidate_versions}) / {row.baseline} ({row.baseline_versions})"
    if legend:  # none where no cell has an interval (every run of a stack failed or was unsupported)
        columns = min(len(legend), LEGEND_COLUMNS)
        fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=columns, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=9)
    legend_lines = -(-len(legend) // LEGEND_COLUMNS) if legend else 0
    fig.tight_layout(rect=(0, 0.035 * legend_lines, 1, 1))
    return fig


def _interval(row: compare.Comparison, metric: compare.Metric) -> tuple[float, float, float]:
    """A row's B/A for `metric` and its 95% CI bounds (NaN where it has none)."""
    judged = row.judged.get(metric.name)
    return (judged.ratio.value, judged.ratio.low, judged.ratio.high) if judged else (math.nan,) * 3


# A series' headline as each stack measured it: the summary's column, its 95% CI's columns (None: none), the unit.
SERIES_VALUES = {
    "eager_latency": ("eager_latency_ms_median", None, None, "ms"),
    "compiled_latency": ("latency_ms_median", "latency_ms_median_ci_low", "latency_ms_median_ci_high", "ms"),
    "speedup": ("speedup", "speedup_ci_low", "speedup_ci_high", "×"),
    "compile_warm": ("compile_s_warm", None, None, "s"),
    "compile_cold": ("compile_s", None, None, "s"),
}


def series_figure(table: pd.DataFrame, compared: pd.DataFrame, labels: list[str], width_in: float) -> plt.Figure:
    """A series of stacks, one panel per headline: what each stack measured (the summary's median with its 95% CI
    where it has one), one line per (model, batch size, variant), a ring where the step into that stack
    changed the headline (suite.series_steps: paired blocks, Holm-adjusted, beyond the margin), an x on the axis
    where that stack measured nothing of it (`unsupported`, or a failure such as `compile_error`)."""
    from compilebench.analysis import suite
    from compilebench.report.tables import SERIES_METRIC_NAMES, read_comparisons

    history = suite.series_steps(read_comparisons(compared), labels)
    metrics = [metric for metric in SERIES_VALUES if any(entry["metric"] == metric for entry in history)]
    columns = max(1, min(3, len(metrics)))
    lines = max(1, -(-len(metrics) // columns))
    fig, axes = plt.subplots(lines, columns, figsize=(width_in * 1.3, 3.3 * lines), squeeze=False)
    rows = table
    legend: dict[str, Any] = {}
    names = list(dict.fromkeys(f"{e['label']} bs{e['batch_size']} {e['variant']}" for e in history))  # one colour each
    for ax, metric in zip(axes.flat, metrics, strict=False):
        unit = SERIES_VALUES[metric][3]
        entries = [entry for entry in history if entry["metric"] == metric]
        for number, entry in enumerate(entries):
            values, lows, highs = zip(*(_series_point(rows, entry, label, metric) for label in labels), strict=True)
            value = pd.Series(values, dtype=float)
            below = (value - pd.Series(lows, dtype=float)).clip(lower=0).fillna(0)
            above = (pd.Series(highs, dtype=float) - value).clip(lower=0).fillna(0)
            name = f"{entry['label']} bs{entry['batch_size']} {entry['variant']}"
            colour = f"C{names.index(name) % 10}"
            offset = [position + 0.05 * (number - (len(entries) - 1) / 2) for position in range(len(labels))]
            handle = ax.errorbar(
                offset, value, yerr=[below, above], fmt="o-", color=colour, capsize=2, markersize=3, linewidth=1
            )
            legend.setdefault(name, handle)
            for step in entry["steps"]:
                after = labels.index(step["step"].split(" -> ")[1])
                if step["changed"] and pd.notna(value[after]):
                    ax.plot(
                        offset[after],
                        value[after],
                        "o",
                        markersize=11,
                        markerfacecolor="none",
                        markeredgecolor=colour,
                        markeredgewidth=1.5,
                    )
            for label in entry["not_measured_in"]:  # unsupported or failed: an x at the axis
                ax.plot(
                    offset[labels.index(label)],
                    0.02,
                    "x",
                    color=colour,
                    markersize=8,
                    transform=ax.get_xaxis_transform(),
                    clip_on=False,
                )
        finite = pd.Series([_series_point(rows, e, label, metric)[0] for e in entries for label in labels], dtype=float)
        finite = finite[finite > 0]
        if not finite.empty:  # the axis spans the values (an interval past it is cut, not the values)
            spread = max(finite.max() - finite.min(), 0.05 * finite.max())
            ax.set_ylim(max(0.0, finite.min() - 0.6 * spread), finite.max() + 0.6 * spread)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(unit, fontsize=8)
        ax.set_title(SERIES_METRIC_NAMES.get(metric, metric), fontsize=9)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.set_visible(False)
    if legend:
        fig.legend(
            list(legend.values()), list(legend), loc="lower center", ncol=min(len(legend), 5), fontsize=7, frameon=False
        )
    fig.suptitle(
        "Across the series (medians, 95% CIs): a ring where the step into that stack changed it, "
        "an x where the stack measured nothing (unsupported or failed)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    return fig


def _series_point(table: pd.DataFrame, entry: dict[str, Any], label: str, metric: str) -> tuple[float, float, float]:
    """What one stack measured for one line of the series figure: value, 95% CI bounds (the value where it has no
    interval); NaN where that stack's run is not ok. Eager latency: any compiled run's of that timing process (eager
    has no summary row of its own; its samples are the same process's)."""
    column, low_column, high_column, _ = SERIES_VALUES[metric]
    if table.empty:
        return (math.nan,) * 3
    mine = table[
        (table["environment"] == label)
        & (table["model_id"] == entry["model_id"])
        & (table["batch_size"] == entry["batch_size"])
        & (table["status"] == "ok")
    ]
    if metric != "eager_latency":
        mine = mine[mine["variant"] == entry["variant"]]
    mine = mine[mine[column].notna()]
    if mine.empty:
        return (math.nan,) * 3
    row = mine.iloc[0]
    value = float(row[column])
    bounds = [float(row[name]) if name and pd.notna(row.get(name)) else value for name in (low_column, high_column)]
    return value, bounds[0], bounds[1]


def versions_figure(versions: pd.DataFrame, width_in: float) -> plt.Figure:
    """Across invocations in the store: each software stack against the previous one (not interleaved)."""
    names = (
        versions["label"]
        + " bs"
        + versions["batch_size"].astype(str)
        + " "
        + versions["variant"]
        + " "
        + versions["device_name"].astype(str)
        + ": "
        + versions["candidate_versions"]
        + " vs "
        + versions["baseline_versions"]
    )
    return comparison_figure(versions, names, width_in)


def save_figure(fig: plt.Figure, path: Path, dpi: int) -> Path:
    """A figure as PNG, closed afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def write_figures(
    table: pd.DataFrame,
    verdicts: pd.DataFrame,
    compared: pd.DataFrame,
    out_dir: Path,
    width: float,
    dpi: int,
    labels: list[str] | None = None,
) -> list[Path]:
    """Per (environment, device, batch size): durations, improvements and, where measured, start-up; per device the
    speedups against the published ones; the comparison of environments. The paths written."""
    written = []
    for environment, device, batch, rows in panels(table):
        stem = f"{_slug(environment)}_{_slug(device)}_bs{batch}"
        suffix = f" — {device}, batch size {batch}, {environment}"
        written.append(
            save_figure(duration_figure(rows, "Duration" + suffix, width), out_dir / f"duration_{stem}.png", dpi)
        )
        written.append(
            save_figure(
                improvement_figure(rows, "Percentage improvement" + suffix, width),
                out_dir / f"improvement_{stem}.png",
                dpi,
            )
        )
        if rows["first_inference_s"].notna().any():
            written.append(
                save_figure(
                    startup_figure(rows, "Start-up against steady state" + suffix, width),
                    out_dir / f"startup_{stem}.png",
                    dpi,
                )
            )
    for device in sorted(verdicts.loc[verdicts["status"] == "ok", "device_name"].unique()):
        written.append(
            save_figure(
                speedup_vs_published_figure(verdicts, device, width),
                out_dir / f"speedup_vs_published_{_slug(device)}.png",
                dpi,
            )
        )
    if not compared.empty:
        figure = comparison_figure(compared, cell_names(compared), width)
        written.append(save_figure(figure, out_dir / "comparison.png", dpi))
    if not compared.empty and len(labels or []) > 2:
        figure = series_figure(table, compared, list(labels), width)
        written.append(save_figure(figure, out_dir / "series.png", dpi))
    return written


def plot(
    config: Config,
    table: pd.DataFrame,
    verdicts: pd.DataFrame,
    compared: pd.DataFrame,
    run_info: RunInfo,
    results: list[RunRecord],
) -> None:
    """The figures, their data for `dvc plots` and the report, written and logged to the parent run."""
    out_dir = Path(config.paths.plots)
    out_dir.mkdir(parents=True, exist_ok=True)  # a run where every trial failed has no figure: an empty folder
    written = write_figures(
        table, verdicts, compared, out_dir, config.plot.width_in, config.plot.dpi, list(run_info.labels)
    )
    LOGGER.info("wrote %d figures to %s", len(written), out_dir)
    published = reference.read_published(config.paths.reference)
    report_path = Path(config.paths.report)
    text = report.render(results, table, verdicts, compared, published, written, report_path.parent, run_info)
    write_atomic(report_path, text)
    LOGGER.info("wrote %s", report_path)
    if run_info.not_logged:
        LOGGER.info("figures and report written, not logged to MLflow: %s", run_info.not_logged)
        return
    tracker = tracking.Tracker.of_invocation(config.paths.tracking_uri, run_info)
    note = report.description(compared, table, results, run_info)
    if not (tracker.log_parent(written, "plots") and tracker.log_parent([report_path], "report", note=note)):
        LOGGER.warning("figures and report are on disk; `python -m compilebench.sync` attaches them to MLflow later")


def plot_versions(config: Config, versions: pd.DataFrame) -> None:
    """The versions figure of the whole MLflow store (`--from-mlflow`), where it holds more than one stack."""
    if versions.empty:
        LOGGER.info("the MLflow store holds one software stack per machine and cell: no versions to compare")
        return
    path = save_figure(
        versions_figure(versions, config.plot.width_in), Path(config.paths.store) / "versions.png", config.plot.dpi
    )
    LOGGER.info("wrote %s", path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-mlflow", action="store_true", help="the versions figure of the whole MLflow store")
    args = parser.parse_args()
    config = stage_config()
    try:
        if args.from_mlflow:
            versions = pd.read_csv(Path(config.paths.store) / "versions.csv")
        else:
            table = pd.read_csv(config.paths.summary)
            verdicts = pd.read_csv(config.paths.verdicts)
            compared = pd.read_csv(config.paths.comparison)
            run_info = RunInfo.read(config.paths.run_info)
            results = [RunRecord.from_dict(row) for row in read_jsonl(config.paths.results)]
    except (OSError, ValueError) as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    if args.from_mlflow:
        plot_versions(config, versions)
    else:
        plot(config, table, verdicts, compared, run_info, results)


if __name__ == "__main__":
    main()
