"""The report's first screen: the answer per model, and what B differs in beside the question (issue 78)."""

import dataclasses
import json

import pandas as pd
import pytest

from compilebench import aggregate, reference, report
from compilebench.analysis import differences, suite
from compilebench.analysis.run_record import RunRecord
from compilebench.report import tables
from compilebench.run_info import RunInfo

COLD_TIMED = "tests/fixtures/cold-timed-2026-11-29"  # torch 2.14.1 (a CUDA build) against 2.13.0 (the CPU build)


@pytest.fixture
def recorded(repo_root):
    folder = repo_root / COLD_TIMED / "results"
    records = [RunRecord.from_dict(json.loads(line)) for line in (folder / "runs.jsonl").read_text().splitlines()]
    compared = pd.read_csv(folder / "comparison.csv")
    summary = aggregate.summarize(pd.DataFrame([record.to_dict() for record in records]))
    published = reference.read_published(repo_root / "data/reference/published.csv")
    return records, compared, summary, RunInfo.read(folder / "run_info.json"), published


def test_the_answer_per_model_comes_first_with_each_word_before_its_ratio(recorded):
    records, compared, summary, run_info, published = recorded
    verdicts = reference.verdicts(summary, published)
    text = report.render(records, summary, verdicts, compared, published, [], "data/report", run_info)
    assert text.index("## The answer, per model") < text.index("## What changed") < text.index("## Environment")
    assert "medians side by side are not their comparison" in text  # the doc-layout tables warn
    answer = text[text.index("## The answer, per model") : text.index("## What changed")]
    table = tables.answer_table(compared)
    cells = compared[compared["reference"] == "first"]
    assert len(table) == len(cells) + 1  # one row per cell, every model's rows together, its eager row first
    assert table["variant"].iloc[0] == "eager" and (table["model"] != "").sum() == cells["label"].nunique() + 1
    # then the suite's row: compile cold, warm and inductor start-up stand beside latency, as suite.summary says them
    suite_row = table.iloc[-1]
    over = {entry["metric"]: entry for entry in suite.summary(tables.read_comparisons(compared))}
    assert suite_row["model"] == tables.SUITE_ROW and suite_row["variant"] == "geomean"
    for metric in ("compile_cold", "inductor_startup", "compiled_latency"):
        entry = over[metric]
        assert suite_row[metric.replace("_", " ")].startswith(f"{entry['verdict']} {entry['geomean']:.2f} ["), metric
    assert table["inductor startup"].iloc[1]  # per compiled cell too
    for _, row in cells.iterrows():  # the word, then B/A [95% CI], as the comparison judged it
        if row["variant"] != "eager":
            cell = f"{row['speedup_verdict']} {row['speedup_ratio']:.2f} [{row['speedup_ci_low']:.2f}, "
            assert cell in answer, cell
    # the CUDA build against the CPU build: no pin asked for it, so it is named before any number
    assert "**Beside the question**" in answer and "torch build: CPU build → CUDA 13.0 build" in answer
    note = report.description(compared, summary, records, run_info)
    assert note.index("## The answer, per model") < note.index("## What changed") < note.index("in the runs table")
    # a few lines of verdict before the table, where MLflow's description shows them without "Show more"
    (line,) = [line for line in note.splitlines() if line.startswith("**torch-2.14.1 against current**: ")]
    assert note.index(line) < note.index("## The answer, per model") and note.count(line) == 1
    assert "0 of 9 cells changed" in line and "inductor startup faster 0.61" in line and line in answer
    assert len(note) <= report.DESCRIPTION_CHARS


def test_only_what_no_pin_or_setting_asked_for_is_beside_the_question(recorded):
    records = recorded[0]
    a, b = "current", "torch-2.14.1"
    assert differences.beside_the_question(records, a, b) == [
        "torch build: CPU build → CUDA 13.0 build (torch 2.13.0+cpu → 2.14.1+cu130)"
    ]

    def changed(record: RunRecord, **fields) -> RunRecord:
        if record.env.environment != b:
            return record
        env = dataclasses.replace(record.env, environment_fields={**record.env.environment_fields, **fields})
        return dataclasses.replace(record, env=env)

    same_build = [changed(record, cuda_version="none") for record in records]
    assert differences.beside_the_question(same_build, a, b) == []
    other_python = [changed(record, cuda_version="none", python_version="3.10.14") for record in records]
    assert differences.beside_the_question(other_python, a, b) == ["Python: 3.11.7 → 3.10.14"]
    # a record from before a field was recorded lacks it: `none`, like an empty one, not a difference
    assert "threading_variables" not in next(r for r in records if r.env.environment == a).env.environment_fields
    assert (
        differences.beside_the_question(
            [changed(r, cuda_version="none", threading_variables="") for r in records], a, b
        )
        == []
    )
    passive = [changed(r, cuda_version="none", threading_variables="OMP_WAIT_POLICY=PASSIVE") for r in records]
    assert differences.beside_the_question(passive, a, b) == [
        "OpenMP and MKL variables: none → OMP_WAIT_POLICY=PASSIVE"
    ]
    asked = [
        dataclasses.replace(
            r,
            env=dataclasses.replace(
                r.env, environment_pins=r.env.environment_pins.replace('"2.14.1"', '"2.14.1+cu130"')
            ),
        )
        if r.env.environment == b
        else r
        for r in records
    ]
    assert differences.beside_the_question(asked, a, b) == []  # a pin that names the build asks for it


def test_a_step_of_a_series_says_what_else_it_changes(recorded):
    """A step's other pins (an unpinned package by the version it resolved to) and what differs beside the question;
    a release's own CUDA build (12.8 -> 13.0 between two CUDA builds) comes with the release."""
    records = recorded[0]
    a, b = "current", "torch-2.14.1"
    held = dict(
        line.split("==", 1)
        for line in next(r for r in records if r.env.environment == b).env.environment_freeze
        if "==" in line
    )

    def older(record: RunRecord) -> RunRecord:
        if record.env.environment != a:
            return record
        pins = {**json.loads(record.env.environment_pins), "transformers": "4.49.0", "numpy": "1.26.4"}
        fields = {**record.env.environment_fields, "cuda_version": "12.8"}
        env = dataclasses.replace(record.env, environment_pins=json.dumps(pins), environment_fields=fields)
        return dataclasses.replace(record, env=env)

    changed = [older(record) for record in records]
    assert differences.beside_the_question(changed, a, b) == []
    theirs = json.loads(next(r for r in records if r.env.environment == b).env.environment_pins)["transformers"]
    assert differences.step_changes(changed, a, b) == [
        f"transformers 4.49.0 → {theirs}",
        f"numpy 1.26.4 → {held['numpy']}",
    ]
    assert differences.step_changes(records, a, b) == [
        "torch build: CPU build → CUDA 13.0 build (torch 2.13.0+cpu → 2.14.1+cu130)"
    ]


def test_a_field_none_in_every_environment_is_named_once_not_a_row_of_blanks(recorded):
    """A CPU build against a CUDA build on a CPU machine: the GPU fields are empty on both sides and are named after
    the table; a field one side has (cuda_version) stays a row."""
    records, compared, summary, run_info, published = recorded
    verdicts = reference.verdicts(summary, published)
    text = report.render(records, summary, verdicts, compared, published, [], "data/report", run_info)
    section = text[text.index("## Environment\n") :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    (unset,) = [line for line in section.splitlines() if line.startswith("None in every environment: ")]
    named = unset.removeprefix("None in every environment: ").rstrip(".").split(", ")
    assert {"gpu_driver", "gpu_memory_mib", "thp_mem_alloc", "threading_variables"} <= set(named)
    rows = {line.split(" | ")[0].strip("| ") for line in section.splitlines() if line.startswith("| ")}
    assert not rows & set(named) and {"cuda_version", "torch_version", "malloc"} <= rows
    # torch's own words for none (a CPU build's cuDNN) are none, as a field a record from before lacks is
    assert differences.unset("None") and differences.unset(None) and differences.unset("") and not differences.unset(0)
