"""The published numbers: the committed CSV against the doc, anomaly detection, verdict rules."""

from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from compilebench import reference
from compilebench.config import Variant

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "data" / "reference" / "published.csv"
DOC = ROOT / "data" / "reference" / "perf_torch_compile.zh.md"  # the doc (Apache-2.0, Hugging Face), shipped


@pytest.fixture(scope="module")
def published():
    return reference.read_published(CSV)


def test_row_counts(published):
    # 9 main tables (A100/V100/T4 x batch 1/4/16) of 12 models, OwlViT's 6 batched rows being OOM per the doc's note;
    # nightly: 3 GPUs x 2 models x 3 batch sizes; reduce-overhead: 2 GPUs x 4 models x 2 batch sizes.
    assert len(published) == 142
    assert published["scenario"].value_counts().to_dict() == {
        "torch-2.0.1": 108,
        "nightly-2.1.0dev": 18,
        "nightly-2.1.0dev-reduce-overhead": 16,
    }


@pytest.mark.parametrize(
    ("scenario", "gpu", "batch", "label", "eager", "compiled"),
    [
        ("torch-2.0.1", "A100", 1, "ViT", 9.325, 7.584),
        ("torch-2.0.1", "V100", 1, "Maskformer", 95.532, 72.207),
        ("torch-2.0.1", "T4", 1, "ResNet", 6.031, 4.321),
        ("torch-2.0.1", "A100", 16, "Conditional-DETR", 180.491, 124.032),
        ("nightly-2.1.0dev", "A100", 1, "DETR", 30.484, 15.221),  # "Unbatched" is batch size 1
        ("nightly-2.1.0dev-reduce-overhead", "T4", 4, "MobileNet", 78.311, 50.983),
    ],
)
def test_spot_values_match_the_doc(published, scenario, gpu, batch, label, eager, compiled):
    row = published[
        (published["scenario"] == scenario)
        & (published["gpu"] == gpu)
        & (published["batch_size"] == batch)
        & (published["label"] == label)
    ]
    assert len(row) == 1
    assert row["eager_ms"].iloc[0] == eager and row["compiled_ms"].iloc[0] == compiled


def test_oom_is_a_value_not_a_missing_row(published):
    detr = published[
        (published["scenario"] == "nightly-2.1.0dev") & (published["label"] == "DETR") & (published["batch_size"] == 16)
    ]
    assert detr.set_index("gpu")["eager_oom"].to_dict() == {"A100": False, "T4": True, "V100": True}
    owl = published[(published["label"] == "OwlViT") & (published["batch_size"] > 1)]
    assert len(owl) == 6 and owl["eager_oom"].all() and owl["note"].str.contains("out of memory").all()


def test_labels_map_to_checkpoints(published):
    assert published["model_id"].nunique() == 12
    assert published.drop_duplicates("label").set_index("label")["model_id"]["Resnet-101"] == "facebook/detr-resnet-101"


def test_committed_csv_is_the_parsed_doc():
    parsed = reference.parse_doc(DOC.read_text())
    committed = pd.read_csv(CSV, keep_default_na=False, na_values=[""])
    pd.testing.assert_frame_equal(parsed.fillna({"note": ""}), committed.fillna({"note": ""}), check_dtype=False)


def test_known_anomaly_of_the_published_data_is_flagged(published):
    flagged = published[published["anomaly"] != ""]
    assert sorted(zip(flagged["scenario"], flagged["gpu"], flagged["batch_size"], flagged["label"], strict=True)) == [
        ("nightly-2.1.0dev", "A100", 16, "BeiT"),
        ("nightly-2.1.0dev", "T4", 16, "BeiT"),
    ]
    t4 = flagged[flagged["gpu"] == "T4"]["anomaly"].iloc[0]
    assert "identical to the A100 row" in t4 and "at batch 16 < 47.381 ms at batch 4" in t4


def _rows(*rows):
    columns = ["scenario", "gpu", "batch_size", "model_id", "eager_ms", "compiled_ms", "eager_oom", "compiled_oom"]
    return pd.DataFrame(rows, columns=columns)


def test_anomaly_rules_on_hand_made_rows():
    frame = _rows(
        ("s", "A100", 1, "m", 10.0, 5.0, False, False),
        ("s", "T4", 1, "m", 10.0, 5.0, False, False),  # copy of A100
        ("s", "V100", 1, "m", 20.0, 10.0, False, False),
        ("s", "V100", 4, "m", 19.0, 9.0, False, False),  # 5% faster at a larger batch: noise, not flagged
        ("s", "V100", 16, "m", 12.0, 9.0, False, False),  # 37% faster than batch 4: flagged
    )
    found = reference.anomalies(frame).set_index(["gpu", "batch_size"])["anomaly"].to_dict()
    assert set(found) == {("A100", 1), ("T4", 1), ("V100", 16)}


PUBLISHED = reference.with_anomalies(
    _rows(
        ("torch-2.0.1", "A100", 1, "m", 20.0, 10.0, False, False),  # 2.0x
        ("torch-2.0.1", "V100", 1, "m", 15.0, 10.0, False, False),  # 1.5x
        ("torch-2.0.1", "T4", 4, "m", None, None, True, True),
    )
)


def _measured(low, high, **extra):
    row = {
        "model_id": "m",
        "batch_size": 1,
        "compile_mode": "default",
        "inductor_options": "{}",
        "status": "ok",
        "speedup": (low + high) / 2,
        "speedup_ci_low": low,
        "speedup_ci_high": high,
        "device_name": "AMD EPYC",
        "eager_latency_ms_mean": 30.0,
        "latency_ms_mean": 15.0,
    }
    return pd.Series({**row, **extra})


H100 = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize(
    ("measured", "expected"),
    [
        (_measured(1.4, 1.6, **H100), "reproduced"),  # overlaps 1.75 (median of 2.0 and 1.5) +-10%
        (_measured(2.1, 2.3, **H100), "better"),
        (_measured(0.7, 0.9, **H100), "worse"),
        (_measured(1.30, 20.24, **H100), "inconclusive"),  # overlaps the band, but would overlap almost anything
        (_measured(2.0, 30.0, **H100), "better"),  # wide, yet wholly above the band
        (_measured(1.4, 1.6), "informational"),  # a CPU run is never judged against the doc's GPUs
        (_measured(0.7, 0.9), "informational"),
        (_measured(0.9, 1.1, batch_size=4, **H100), "published-OOM"),
        (_measured(1.4, 1.6, batch_size=16, **H100), "not comparable"),  # the doc has no such row
        (_measured(1.4, 1.6, inductor_options='{"freezing": true}', **H100), "not comparable"),  # not what it ran
        (_measured(1.4, 1.6, compile_mode="max-autotune", **H100), "not comparable"),
        (_measured(1.4, 1.6, status="accuracy_fail", **H100), "not comparable"),
    ],
)
def test_verdict_rules(measured, expected):
    assert reference.verdict(measured, PUBLISHED)["verdict"] == expected


def test_a_failed_run_is_not_judged_but_keeps_the_docs_figures_beside_it():
    failed = reference.verdict(_measured(1.4, 1.6, status="invalid", **H100), PUBLISHED)
    assert failed["verdict"] == "not comparable" and failed["reason"] == "measured status invalid"
    assert failed["published_speedup_A100"] == 2.0 and failed["published_speedup_V100"] == 1.5


def test_same_gpu_is_judged_against_that_gpus_row_with_absolute_ms():
    on_a100 = reference.verdict(_measured(1.4, 1.6, device="cuda", device_name="NVIDIA A100-SXM4-40GB"), PUBLISHED)
    assert on_a100["comparison"] == "same-GPU (A100)" and on_a100["reference_speedup"] == 2.0
    assert on_a100["verdict"] == "worse"  # 1.4-1.6 is below 2.0 -10%, although V100 published 1.5
    assert on_a100["eager_ms_vs_published"] == 1.5  # 30 ms vs 20 ms
    cross = reference.verdict(_measured(1.4, 1.6, **H100), PUBLISHED)
    assert cross["comparison"] == "cross-GPU" and "eager_ms_vs_published" not in cross


def test_reproduced_is_not_easier_when_the_published_gpus_disagree():
    """SegFormer's published speedups run from 1.12 to 2.27; touching that range is not enough to reproduce."""
    disagreeing = reference.with_anomalies(
        _rows(
            ("torch-2.0.1", "A100", 1, "m", 22.7, 10.0, False, False),
            ("torch-2.0.1", "T4", 1, "m", 11.2, 10.0, False, False),
            ("torch-2.0.1", "V100", 1, "m", 17.0, 10.0, False, False),
        )
    )
    result = reference.verdict(_measured(1.15, 1.30, **H100), disagreeing)
    assert result["reference_speedup"] == pytest.approx(1.7) and result["verdict"] == "worse"


def test_published_cells_are_what_a_published_number_judges(published):
    variants = {
        "eager": Variant(compile=False),
        "default": Variant(),
        "reduce-overhead": Variant(mode="reduce-overhead"),
        "max-autotune": Variant(mode="max-autotune"),
        "freezing": Variant(inductor={"freezing": True}),
        "bf16": Variant(dtype="bfloat16"),
    }
    models = sorted(set(published["model_id"]))
    cells = reference.published_cells(published, models, [1, 16], variants, "float32")
    by_variant = Counter(variant for _, _, variant in cells)
    assert by_variant == {"default": 12 + 11, "reduce-overhead": 4}  # OwlViT: no batch-16 row; reduce-overhead: 4
    assert ("google/owlvit-base-patch32", 16, "default") not in cells
    assert {model for model, _, variant in cells if variant == "reduce-overhead"} == {
        "facebook/convnext-large-224",
        "microsoft/resnet-50",
        "microsoft/conditional-detr-resnet-50",
        "google/deeplabv3_mobilenet_v2_1.0_513",
    }
    assert not reference.published_cells(published, models, [1], variants, "bfloat16")  # the doc ran fp32


def test_unknown_label_in_a_doc_table_is_an_error():
    lines = ["### A100 (batch size: 1)", "", "| **Task/Model** | a | b |", "|:---:|:---:|:---:|"]
    doc = "\n".join([*lines, "| Image Classification/Nope | 1 | 2 |"])
    with pytest.raises(ValueError, match="Nope"):
        reference.parse_doc(doc)


def test_the_docs_growth_over_batch_sizes_is_each_latency_over_batch_1s(repo_root):
    """What an estimate scales a batch-1 latency by at batch 4 and 16: the doc's own A100 numbers (torch 2.0.1)."""
    published = reference.read_published(repo_root / "data/reference/published.csv")
    ratios = reference.batch_ratios(published)
    assert len(ratios) == 12
    detr = ratios["facebook/detr-resnet-50"]  # 34.619, 48.657, 164.382 ms eager; 19.04, 32.418, 161.902 compiled
    assert detr["eager_ms"] == {
        "1": 1.0,
        "4": pytest.approx(48.657 / 34.619, abs=1e-4),
        "16": pytest.approx(164.382 / 34.619, abs=1e-4),
    }
    assert detr["call_ms"]["16"] == pytest.approx(161.902 / 19.04, abs=1e-4)
