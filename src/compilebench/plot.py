"""Stage plot: the doc's figures, the comparison with the published numbers, and the report that shows them.

    python -m compilebench.plot      # reads params.yaml and the aggregate tables; writes paths.plots and paths.report

Per device and batch size, like the doc: 1. duration, eager vs each compiled variant (mean ms per model);
2. percentage improvement, (eager - compiled) / eager * 100. Per device, beyond the doc: 3. measured speedup with its
95% CI beside the published speedup of each GPU, one panel per batch size; 4. speedup across the torch /
transformers versions in the MLflow store. Then `report.md`. Everything is logged to the parent MLflow run.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import pandas as pd

from compilebench import reference, report, tracking
from compilebench.aggregate import write_csv
from compilebench.config import ConfigError, load_config
from compilebench.files import write_atomic

LOGGER = logging.getLogger(__name__)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def panels(table: pd.DataFrame) -> list[tuple[str, int, pd.DataFrame]]:
    """One (device name, batch size, rows) panel per device and batch size, ok rows only."""
    ok = table[table["status"] == "ok"]
    return [(device, int(batch), group) for (device, batch), group in ok.groupby(["device_name", "batch_size"])]


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


def speedup_vs_published_figure(verdicts: pd.DataFrame, device: str, width_in: float) -> plt.Figure:
    """Measured speedup per model and variant with 95% CI bars; published GPUs as markers; a panel per batch size."""
    rows = verdicts[(verdicts["device_name"] == device) & (verdicts["status"] == "ok")]
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


def versions_figure(versions: pd.DataFrame, device: str, width_in: float) -> plt.Figure:
    """Speedup of each (model, batch size, variant) in each environment of the store, with 95% CI bars."""
    rows = versions[(versions["device_name"] == device) & versions["speedup"].notna()].copy()
    rows["cell"] = rows["label"] + " bs" + rows["batch_size"].astype(str) + " " + rows["variant"]
    rows["environment"] = (
        "torch " + rows["torch_version"].astype(str) + " / tf " + rows["transformers_version"].astype(str)
    )
    cells, environments = list(dict.fromkeys(rows["cell"])), list(dict.fromkeys(rows["environment"]))
    fig, ax = plt.subplots(figsize=(width_in, 1.5 + 0.45 * len(cells) * max(len(environments), 1) / 2))
    height = 0.8 / max(len(environments), 1)
    for i, environment in enumerate(environments):
        part = rows[rows["environment"] == environment].set_index("cell").reindex(cells)
        y = [cells.index(cell) + (i - (len(environments) - 1) / 2) * height for cell in cells]
        error = [part["speedup"] - part["speedup_ci_low"], part["speedup_ci_high"] - part["speedup"]]
        ax.barh(y, part["speedup"], height=height, xerr=error, capsize=2, label=environment)
        flagged = part[part["regression"].fillna("").astype(bool)]
        for cell in flagged.index:
            ax.annotate("regression", (flagged.loc[cell, "speedup"], y[cells.index(cell)]), fontsize=7, color="red")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(cells)), cells)
    ax.invert_yaxis()
    ax.set_xlabel("speedup (x), 95% CI")
    ax.set_title(f"{device}: speedup across the environments in the MLflow store")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_data(table: pd.DataFrame) -> pd.DataFrame:
    """Long-form rows for `dvc plots show`."""
    ok = table[table["status"] == "ok"].copy()
    ok["model"] = ok["label"] + " bs" + ok["batch_size"].astype(str) + " " + ok["variant"]
    return ok[["model", "label", "batch_size", "variant", "device_name", "speedup", "improvement_pct"]]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = load_config()
    except ConfigError as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    table = pd.read_csv(config.paths.summary)
    verdicts = pd.read_csv(config.paths.verdicts)
    versions = pd.read_csv(config.paths.versions)
    out_dir = Path(config.paths.plots)
    out_dir.mkdir(parents=True, exist_ok=True)
    width, written = config.plot.width_in, []

    def save(fig: plt.Figure, name: str) -> None:
        path = out_dir / name
        fig.savefig(path, dpi=config.plot.dpi)
        plt.close(fig)
        written.append(path)

    for device, batch, rows in panels(table):
        stem, suffix = f"{_slug(device)}_bs{batch}", f" — {device}, batch size {batch}"
        save(duration_figure(rows, "Duration" + suffix, width), f"duration_{stem}.png")
        save(improvement_figure(rows, "Percentage improvement" + suffix, width), f"improvement_{stem}.png")
    for device in sorted(verdicts.loc[verdicts["status"] == "ok", "device_name"].unique()):
        save(speedup_vs_published_figure(verdicts, device, width), f"speedup_vs_published_{_slug(device)}.png")
    for device in sorted(versions.loc[versions["speedup"].notna(), "device_name"].unique()):
        save(versions_figure(versions, device, width), f"versions_{_slug(device)}.png")
    write_csv(plot_data(table), Path(config.paths.plot_data))
    LOGGER.info("wrote %d figures to %s", len(written), out_dir)

    run_info = json.loads(Path(config.paths.run_info).read_text())
    results = [json.loads(line) for line in Path(config.paths.results).read_text().splitlines() if line.strip()]
    published = reference.read_published(config.paths.reference)
    report_path = Path(config.paths.report)
    text = report.render(config, results, table, verdicts, versions, published, written, report_path.parent, run_info)
    write_atomic(report_path, text)
    LOGGER.info("wrote %s", report_path)
    tracker = tracking.Tracker(config.paths.tracking_uri, run_info["invocation_id"])
    if not (tracker.log_parent(written, "plots") and tracker.log_parent([report_path], "report")):
        LOGGER.warning("figures and report are on disk; `python -m compilebench.sync` attaches them to MLflow later")


if __name__ == "__main__":
    main()
