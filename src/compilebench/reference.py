"""The published numbers: the doc's tables as tidy data, their anomalies, and verdicts of measured cells against them.

    python -m compilebench.reference DOC.md OUT.csv    # rebuild data/reference/published.csv from the doc's markdown

One row per (scenario, GPU, batch size, model) with eager and compiled ms ("OOM" kept as a flag, not dropped).
Scenarios: `torch-2.0.1` (default mode), `nightly-2.1.0dev` (default mode), `nightly-2.1.0dev-reduce-overhead`.
Anomalies are flagged by code and excluded from verdicts. Verdict rules (also in the README), by device:
- a measured run whose status is not ok, or a variant the doc did not measure, is `not comparable`;
- all published rows of the cell OOM: `published-OOM`;
- CPU: `informational`: the doc measured GPUs only, so its numbers are shown beside the CPU's, never judged;
- the same GPU model as a published one (A100, V100, T4 in the device name): the reference is that GPU's speedup,
  and absolute ms are compared too (`same-GPU`);
- another GPU: the reference is the median of the published GPUs' speedups (`cross-GPU`);
- then, with the band [reference / (1 + TOLERANCE), reference * (1 + TOLERANCE)]: the measured 95% CI lies wholly
  above it: `better`; wholly below: `worse`; overlaps it: `reproduced`, unless the CI is wider than the band itself
  (high / low > (1 + TOLERANCE)^2: two processes, say): then `inconclusive`, since so wide a CI overlaps almost any
  reference. The band does not widen when the doc's GPUs disagree with each other, nor when the measurement is loose.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd

from compilebench.config import Config, ConfigError
from compilebench.harness import models

SCENARIOS = {  # doc section -> (scenario, torch version, compile mode)
    "main": ("torch-2.0.1", "2.0.1", "default"),
    "nightly": ("nightly-2.1.0dev", "2.1.0dev", "default"),
    "reduce-overhead": ("nightly-2.1.0dev-reduce-overhead", "2.1.0dev", "reduce-overhead"),
}
GPUS = ("A100", "V100", "T4")
TOLERANCE = 0.10  # a measured speedup within +-10% of the reference (beyond its own CI) reproduces it
COLUMNS = [
    "scenario",
    "torch_version",
    "compile_mode",
    "gpu",
    "batch_size",
    "doc_task",
    "label",
    "model_id",
    "eager_ms",
    "compiled_ms",
    "eager_oom",
    "compiled_oom",
    "note",
]
# Models a scenario's tables omit at some batch sizes because, as the doc says in prose, they ran out of memory.
DOC_NOTED_OOM = {
    ("torch-2.0.1", "OwlViT"): "not in the table; the doc: OwlViT runs out of memory at larger batch sizes"
}
MIN_BATCH_DROP = 0.9  # eager ms at a larger batch below this fraction of a smaller batch's is an anomaly
_SECTION = re.compile(r"^##\s+(.*)$")
_TABLE_HEADING = re.compile(r"^###\s+(A100|V100|T4)(?:\s*\(batch size:\s*(\d+)\))?\s*$")


def _cell_value(text: str) -> tuple[float | None, bool]:
    """(ms, is_oom) of one table cell."""
    text = text.strip()
    if text.upper() == "OOM":
        return None, True
    return float(text), False


def parse_doc(markdown: str) -> pd.DataFrame:
    """Every latency table of the doc as tidy rows (the doc's headings name GPU, batch size and scenario)."""
    labels = {card.label: card.hub_id for card in models.registry().values()}
    rows, section, gpu, heading_batch = [], None, None, None
    for line in markdown.splitlines():
        if match := _SECTION.match(line):
            title = match.group(1).lower()
            section = (
                "nightly"
                if "nightly" in title
                else "reduce-overhead"
                if ("开销" in title or "overhead" in title)
                else "main"
            )
            continue
        if match := _TABLE_HEADING.match(line):
            gpu, heading_batch = match.group(1), match.group(2)
            continue
        if not line.startswith("|") or gpu is None or "**" in line or ":---" in line:
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        task_model = cells[0]
        if heading_batch is not None:
            batch, eager, compiled = int(heading_batch), cells[1], cells[2]
        else:
            batch = 1 if cells[1] == "Unbatched" else int(cells[1])  # the doc's "Unbatched" is batch size 1
            eager, compiled = cells[2], cells[3]
        doc_task, label = task_model.split("/", 1)
        if label not in labels:
            raise ValueError(f"doc row {task_model!r}: label {label!r} is not a registered card label {sorted(labels)}")
        scenario, torch_version, mode = SCENARIOS[section]
        eager_ms, eager_oom = _cell_value(eager)
        compiled_ms, compiled_oom = _cell_value(compiled)
        rows.append(
            [
                scenario,
                torch_version,
                mode,
                gpu,
                batch,
                doc_task,
                label,
                labels[label],
                eager_ms,
                compiled_ms,
                eager_oom,
                compiled_oom,
                "",
            ]
        )
    table = pd.DataFrame(rows, columns=COLUMNS)
    table = pd.concat([table, _noted_oom_rows(table)], ignore_index=True)
    return table.astype({"eager_ms": float, "compiled_ms": float, "eager_oom": bool, "compiled_oom": bool})


def _noted_oom_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Rows the doc leaves out of a table but states in prose were out of memory (DOC_NOTED_OOM)."""
    added = []
    for (scenario, label), note in DOC_NOTED_OOM.items():
        source = table[(table["scenario"] == scenario) & (table["label"] == label)].iloc[0]
        for (gpu, batch), group in table[table["scenario"] == scenario].groupby(["gpu", "batch_size"]):
            if label not in set(group["label"]):
                added.append(
                    [
                        scenario,
                        source["torch_version"],
                        source["compile_mode"],
                        gpu,
                        batch,
                        source["doc_task"],
                        label,
                        source["model_id"],
                        None,
                        None,
                        True,
                        True,
                        note,
                    ]
                )
    return pd.DataFrame(added, columns=COLUMNS)


def anomalies(published: pd.DataFrame) -> pd.DataFrame:
    """Rows the published data contradicts itself on, with the reason; excluded from verdicts.

    1. A row whose (eager, compiled) pair is identical to another GPU's row of the same scenario, batch and model:
       different GPUs do not measure to the microsecond alike, so one is a copy.
    2. Eager latency that falls by more than 10% as the batch grows (same scenario, GPU, model): 16 images cannot
       take clearly less time than 4 on the same GPU (small drops are launch-bound noise and are not flagged).
    """
    found = []
    ok = published[~published["eager_oom"] & ~published["compiled_oom"]]
    for (scenario, batch, model_id), group in ok.groupby(["scenario", "batch_size", "model_id"]):
        pairs = group.groupby(["eager_ms", "compiled_ms"])["gpu"].apply(list)
        for (eager, compiled), gpus in pairs.items():
            if len(gpus) > 1:
                for gpu in gpus:
                    others = ", ".join(g for g in gpus if g != gpu)
                    found.append(
                        (scenario, gpu, batch, model_id, f"identical to the {others} row ({eager} / {compiled} ms)")
                    )
    for (scenario, gpu, model_id), group in ok.groupby(["scenario", "gpu", "model_id"]):
        ordered = group.sort_values("batch_size")
        for (_, small), (_, large) in zip(ordered.iterrows(), ordered.iloc[1:].iterrows(), strict=False):
            if large["eager_ms"] < MIN_BATCH_DROP * small["eager_ms"]:
                found.append(
                    (
                        scenario,
                        gpu,
                        int(large["batch_size"]),
                        model_id,
                        f"eager {large['eager_ms']} ms at batch {large['batch_size']} < "
                        f"{small['eager_ms']} ms at batch {small['batch_size']}",
                    )
                )
    frame = pd.DataFrame(found, columns=["scenario", "gpu", "batch_size", "model_id", "anomaly"])
    return frame.groupby(["scenario", "gpu", "batch_size", "model_id"], as_index=False)["anomaly"].agg("; ".join)


def with_anomalies(published: pd.DataFrame) -> pd.DataFrame:
    """The published rows with an `anomaly` column (empty when none) and the published speedup."""
    flagged = published.merge(anomalies(published), on=["scenario", "gpu", "batch_size", "model_id"], how="left")
    flagged["anomaly"] = flagged["anomaly"].fillna("")
    flagged["speedup"] = flagged["eager_ms"] / flagged["compiled_ms"]
    return flagged


def read_published(path: str | Path) -> pd.DataFrame:
    """The committed reference CSV, with anomalies flagged."""
    return with_anomalies(pd.read_csv(path))


BATCH_RATIO_GPU = "A100"  # with the `default` scenario (torch 2.0.1), the doc measured every model at 1, 4 and 16 on it


def batch_ratios(published: pd.DataFrame) -> dict[str, dict[str, dict[str, float]]]:
    """Per model, how the doc's latency grows with the batch size (torch 2.0.1 on the A100): each batch size's eager
    and compiled (`default`) latency over batch 1's, keyed as a cost table's latencies are (`eager_ms`, `call_ms`,
    by batch size). What an estimate scales a latency measured at another batch size by (pricing.estimate)."""
    rows = published[(published["scenario"] == scenario_for("default")) & (published["gpu"] == BATCH_RATIO_GPU)]
    found: dict[str, dict[str, dict[str, float]]] = {}
    for model_id, group in rows.groupby("model_id"):
        by_batch = group.set_index("batch_size")
        for key, column in (("eager_ms", "eager_ms"), ("call_ms", "compiled_ms")):
            if 1 not in by_batch.index or not by_batch.loc[1, column] > 0:
                continue
            found.setdefault(str(model_id), {})[key] = {
                str(int(batch)): round(float(latency) / float(by_batch.loc[1, column]), 4)
                for batch, latency in by_batch[column].items()
                if latency > 0
            }
    return found


def scenario_for(compile_mode: str) -> str | None:
    """Which published scenario a measured compile mode is judged against (None: the doc did not measure it)."""
    return {"default": "torch-2.0.1", "reduce-overhead": "nightly-2.1.0dev-reduce-overhead"}.get(compile_mode)


def as_doc(no_options: bool, channels_last: bool, dtype: str | None) -> bool:
    """Whether a variant is what the doc ran: torch.compile(mode) alone, no inductor options, fp32, NCHW."""
    return no_options and not channels_last and dtype in (None, "float32")


def measured_as_doc(row: pd.Series) -> bool:
    """as_doc, of a measured run's row."""
    options, dtype = row.get("inductor_options"), row.get("variant_dtype")
    return as_doc(
        pd.isna(options) or options == "{}",
        str(row.get("channels_last")).lower() == "true",
        None if pd.isna(dtype) else dtype,
    )


def published_cells(
    published: pd.DataFrame, models: list[str], batch_sizes: list[int], variants: dict[str, Any], dtype: str
) -> list[tuple[str, int, str]]:
    """The (model id, batch size, variant) of `models` x `batch_sizes` x `variants` (name -> config.Variant) that a
    published number can judge: the variant is compiled as the doc did (as_doc, in its dtype or the benchmark's
    `dtype`) in a mode the doc measured, and the doc has a row for the model and batch size in that mode's scenario
    that is neither out of memory nor anomalous (what `verdict` compares against)."""
    usable = published[(published["anomaly"] == "") & ~published["eager_oom"] & ~published["compiled_oom"]]
    rows = set(zip(usable["scenario"], usable["model_id"], usable["batch_size"].astype(int), strict=True))
    cells = []
    for name, variant in variants.items():
        scenario = scenario_for(variant.mode) if variant.compile else None
        if scenario is None or not as_doc(not variant.inductor, variant.channels_last, variant.dtype or dtype):
            continue
        cells += [(model, batch, name) for model in models for batch in batch_sizes if (scenario, model, batch) in rows]
    return cells


def selected_cells(config: Config) -> list[tuple[str, int, str]] | None:
    """The cells the selected suite measures: None (all of them) for `cells: all`, published_cells for `published`.
    Raises ConfigError when the suite has no cell the doc's numbers can judge."""
    suite = config.selected
    if suite.cells == "all":
        return None
    variants = {name: config.variants[name] for name in suite.variants}
    published = read_published(config.paths.reference)
    cells = published_cells(published, suite.models, suite.batch_sizes, variants, config.benchmark.dtype)
    if not cells:
        raise ConfigError(
            f"`suites.{config.suite}.cells` is `published`, but no compiled variant of its models at batch sizes "
            f"{suite.batch_sizes} has a published number in {config.paths.reference} (the doc measured modes "
            "default and reduce-overhead, fp32, no inductor options): use `cells: all`"
        )
    return cells


def band_verdict(ci_low: float, ci_high: float, reference_speedup: float) -> str:
    """reproduced / better / worse / inconclusive: the measured CI against the band of +-TOLERANCE around the
    reference; a CI wider than the band cannot reproduce it."""
    low, high = reference_speedup / (1 + TOLERANCE), reference_speedup * (1 + TOLERANCE)
    if ci_low > high:
        return "better"
    if ci_high < low:
        return "worse"
    if ci_high / ci_low > (1 + TOLERANCE) ** 2:
        return "inconclusive"
    return "reproduced"


def verdict(measured: pd.Series, published: pd.DataFrame) -> dict:
    """The verdict of one measured compiled run against the published rows of its (model, batch size, mode)."""
    result = {f"published_speedup_{gpu}": None for gpu in GPUS}
    scenario = scenario_for(measured["compile_mode"]) if measured_as_doc(measured) else None
    rows = published[
        (published["scenario"] == scenario)
        & (published["model_id"] == measured["model_id"])
        & (published["batch_size"] == measured["batch_size"])
    ]
    result["published_scenario"] = scenario
    device = str(measured.get("device", ""))
    on_gpu = device.startswith("cuda")
    result["comparison"] = "CPU" if not on_gpu else None
    if not (published["model_id"] == measured["model_id"]).any():
        return {**result, "verdict": "not comparable", "reason": "no published numbers: not one of the doc's models"}
    if scenario is None:
        return {**result, "verdict": "not comparable", "reason": "variant not measured by the doc"}
    if rows.empty:
        return {**result, "verdict": "not comparable", "reason": "no published row for this model and batch size"}
    usable = rows[(rows["anomaly"] == "") & ~rows["eager_oom"] & ~rows["compiled_oom"]]
    for _, row in usable.iterrows():
        result[f"published_speedup_{row['gpu']}"] = row["speedup"]
    if measured["status"] != "ok":  # the doc's figures stay beside a run that failed
        return {**result, "verdict": "not comparable", "reason": f"measured status {measured['status']}"}
    if usable.empty:
        if (rows["eager_oom"] | rows["compiled_oom"]).all():
            return {**result, "verdict": "published-OOM", "reason": "every published GPU ran out of memory"}
        return {**result, "verdict": "not comparable", "reason": "published rows are all anomalous"}
    same_gpu = next((gpu for gpu in GPUS if gpu in str(measured.get("device_name", ""))), None)
    if on_gpu and same_gpu in set(usable["gpu"]):
        published_row = usable[usable["gpu"] == same_gpu].iloc[0]
        reference_speedup, comparison = float(published_row["speedup"]), f"same-GPU ({same_gpu})"
        result["eager_ms_vs_published"] = measured["eager_latency_ms_mean"] / published_row["eager_ms"]
        result["compiled_ms_vs_published"] = measured["latency_ms_mean"] / published_row["compiled_ms"]
    else:
        reference_speedup = float(usable["speedup"].median())
        comparison = "cross-GPU" if on_gpu else "CPU"
    ci_low, ci_high = measured["speedup_ci_low"], measured["speedup_ci_high"]
    result.update(
        reference_speedup=reference_speedup,
        comparison=comparison,
        speedup_vs_reference=measured["speedup"] / reference_speedup,
    )
    where = f"{len(usable)} published GPU(s), median" if comparison != f"same-GPU ({same_gpu})" else same_gpu
    reason = f"measured CI [{ci_low:.2f}, {ci_high:.2f}] vs {reference_speedup:.2f} ({where}) +-{TOLERANCE:.0%}"
    if not on_gpu:
        return {**result, "verdict": "informational", "reason": f"CPU run; the doc measured GPUs. {reason}"}
    return {**result, "verdict": band_verdict(ci_low, ci_high, reference_speedup), "reason": reason}


VERDICT_COLUMNS = (
    "environment",
    "model_id",
    "label",
    "batch_size",
    "variant",
    "compile_mode",
    "device",
    "device_name",
    "torch_version",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "status",
    *(f"published_speedup_{gpu}" for gpu in GPUS),
    "published_scenario",
    "comparison",
    "reference_speedup",
    "speedup_vs_reference",
    "eager_ms_vs_published",
    "compiled_ms_vs_published",
    "verdict",
    "reason",
)
MEASURED_COLUMNS = VERDICT_COLUMNS[:13]  # what a verdict row repeats of the summary's row


def verdicts(summary: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One verdict row per measured compiled run of the summary table; with none (an eager-only suite has no compiled
    run to judge against the doc), no row and every column."""
    rows = [
        {**{key: row.get(key) for key in MEASURED_COLUMNS}, **verdict(row, published)} for _, row in summary.iterrows()
    ]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(VERDICT_COLUMNS))


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m compilebench.reference", description="The doc's tables as rows.")
    parser.add_argument("doc", type=Path, help="the doc's markdown (data/reference/ holds the Chinese edition)")
    parser.add_argument("out", type=Path, help="the CSV to write (data/reference/published.csv)")
    args = parser.parse_args()
    doc, out = args.doc, args.out
    if not doc.is_file():
        parser.error(f"{doc}: no such file (the doc's markdown)")
    table = parse_doc(doc.read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(out, index=False)
    print(f"{len(table)} rows from {doc} -> {out}")


if __name__ == "__main__":
    main()
