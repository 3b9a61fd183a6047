"""Correctness checks on hand-made tensors: exact expectations."""

from types import SimpleNamespace

import pytest
import torch

from compilebench.harness import checks


def test_compare_outputs_relative_to_largest_reference_value():
    ref = SimpleNamespace(to_tuple=lambda: (torch.tensor([1.0, -4.0]), torch.tensor([0, 1])))
    cand = SimpleNamespace(to_tuple=lambda: (torch.tensor([1.0, -3.0]), torch.tensor([5, 5])))
    assert checks.compare_outputs(ref, cand) == {"max_abs_diff": 1.0, "max_rel_diff": 0.25}  # ints are ignored


def test_compare_outputs_shape_mismatch_and_nan_are_infinite():
    assert checks.compare_outputs(torch.zeros(2), torch.zeros(3))["max_rel_diff"] == float("inf")
    assert checks.compare_outputs(torch.ones(2), torch.tensor([1.0, float("nan")]))["max_rel_diff"] == float("inf")


def test_numeric_tolerance_by_dtype():
    assert checks.numeric_tolerance(1e-3, "float32") == 1e-3
    assert checks.numeric_tolerance(1e-3, "bfloat16") == pytest.approx(5e-2)


def test_top5_agreement():
    ref = torch.tensor([[9.0, 8, 7, 6, 5, 0, 0], [1.0, 2, 3, 4, 5, 6, 7]])
    swapped_inside = torch.tensor([[8.0, 9, 7, 6, 5, 0, 0], [1.0, 2, 3, 4, 5, 6, 7]])  # same set
    new_member = torch.tensor([[9.0, 8, 7, 6, 0, 5, 0], [1.0, 2, 3, 4, 5, 6, 7]])  # class 5 replaces class 4
    assert checks.top5_agreement(ref, swapped_inside) == 1.0
    assert checks.top5_agreement(ref, new_member) == 0.5
    assert checks.top5_agreement(ref, new_member, strict=False) == 1.0  # top-1 still within eager top-5


def test_argmax_agreement_counts_pixels():
    ref = torch.zeros(1, 2, 2, 2)
    ref[:, 0] = 1.0  # class 0 everywhere
    cand = ref.clone()
    cand[0, 1, 0, 0] = 2.0  # one of four pixels flips to class 1
    assert checks.argmax_agreement(ref, cand, dim=1) == 0.75


def test_box_iou():
    a = torch.tensor([[0.5, 0.5, 1.0, 1.0]])
    assert checks.box_iou_cxcywh(a, a).item() == pytest.approx(1.0)
    half = torch.tensor([[0.75, 0.5, 0.5, 1.0]])  # right half of a
    assert checks.box_iou_cxcywh(a, half).item() == pytest.approx(0.5)


def test_detection_agreement_looks_at_top_scoring_boxes_only():
    logits = torch.tensor([[[5.0, 0.0], [4.0, 0.0], [-9.0, 9.0]]])  # last column: no-object
    boxes = torch.tensor([[[0.5, 0.5, 0.2, 0.2], [0.2, 0.2, 0.1, 0.1], [0.9, 0.9, 0.1, 0.1]]])
    moved = boxes.clone()
    moved[0, 2] = torch.tensor([0.1, 0.1, 0.1, 0.1])  # only the lowest-scoring query's box moves
    assert checks.detection_agreement(logits, boxes, logits, moved, background_last=True, top=2) == 1.0
    moved[0, 0] = torch.tensor([0.1, 0.1, 0.05, 0.05])
    assert checks.detection_agreement(logits, boxes, logits, moved, background_last=True, top=2) == 0.5


def test_identical_zero_area_boxes_agree_and_distant_ones_do_not():
    """Random-init OWL-ViT boxes saturate to 0 / 1 (zero area, no IoU): on an H100 its outputs matched eager to
    1e-6 and the IoU rule still failed every box. Coordinates within BOX_ATOL agree; a moved point does not."""
    logits = torch.tensor([[[3.0], [2.0], [1.0]]])
    boxes = torch.tensor([[[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]]])
    assert checks.box_iou_cxcywh(boxes, boxes).max().item() == 0.0  # why IoU alone cannot judge them
    nudged = boxes + 1e-4
    assert checks.detection_agreement(logits, boxes, logits, nudged, background_last=False, top=3) == 1.0
    moved = boxes.clone()
    moved[0, 1] = torch.tensor([0.5, 0.5, 0.0, 0.0])
    assert checks.detection_agreement(logits, boxes, logits, moved, background_last=False, top=3) == pytest.approx(
        2 / 3
    )


@pytest.mark.parametrize(
    ("task", "output"),
    [
        ("image-classification", {"logits": torch.randn(2, 10)}),
        ("semantic-segmentation", {"logits": torch.randn(2, 5, 4, 4)}),
        (
            "universal-segmentation",
            {"class_queries_logits": torch.randn(1, 3, 4), "masks_queries_logits": torch.randn(1, 3, 4, 4)},
        ),
        ("object-detection", {"logits": torch.randn(1, 12, 5), "pred_boxes": torch.rand(1, 12, 4)}),
        ("zero-shot-object-detection", {"logits": torch.randn(1, 12, 2), "pred_boxes": torch.rand(1, 12, 4)}),
    ],
)
def test_task_agreement_passes_identical_and_fails_scrambled(task, output):
    reference = SimpleNamespace(**output)
    passed, agreement, _ = checks.task_agreement(task, reference, reference)
    assert passed and agreement == 1.0
    scrambled = SimpleNamespace(**{key: -value for key, value in output.items()})
    assert checks.task_agreement(task, reference, scrambled)[0] is False


def test_unknown_task():
    with pytest.raises(ValueError, match="no task check"):
        checks.task_agreement("captioning", None, None)
