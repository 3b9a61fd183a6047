"""Stage plot: the doc's two figures, per device and batch size, as PNG and as DVC plot data.

    python -m compilebench.plot                   # reads params.yaml and paths.summary; writes paths.plots

1. Duration comparison: eager vs each compiled variant, mean latency in ms per model (the doc's bar charts).
2. Percentage improvement per model and variant, as the doc computes it: (eager - compiled) / eager * 100.
Both are logged to the pipeline's parent MLflow run.
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

from compilebench import tracking
from compilebench.aggregate import write_csv_atomic
from compilebench.config import ConfigError, load_config

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
    out_dir = Path(config.paths.plots)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for device, batch, rows in panels(table):
        stem = f"{_slug(device)}_bs{batch}"
        suffix = f" — {device}, batch size {batch}"
        for kind, draw in (("duration", duration_figure), ("improvement", improvement_figure)):
            fig = draw(
                rows, f"{'Duration' if kind == 'duration' else 'Percentage improvement'}{suffix}", config.plot.width_in
            )
            path = out_dir / f"{kind}_{stem}.png"
            fig.savefig(path, dpi=config.plot.dpi)
            plt.close(fig)
            written.append(path)
    write_csv_atomic(plot_data(table), Path(config.paths.plot_data))
    LOGGER.info("wrote %d figures to %s", len(written), out_dir)
    run_info = json.loads(Path(config.paths.run_info).read_text())
    client = tracking.client(config.paths.tracking_uri)
    tracking.log_files(client, run_info["parent_run_id"], written, "plots")


if __name__ == "__main__":
    main()
