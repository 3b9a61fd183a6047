"""Is the compiled model's output the eager model's output? Numerically, and for the task on the real image.

Numeric: the largest absolute difference over every floating-point output, relative to the eager output's largest
magnitude (the dynamo harness compares with tolerances by dtype in the same spirit). Task-level: the same top-5
classes, the same argmax segmentation map (within a fraction of pixels), the same boxes for the highest-scoring
detections (matched by IoU). Pure functions over tensors.
"""

from __future__ import annotations

from typing import Any

import torch

TOLERANCE_FACTOR = {"float32": 1.0, "bfloat16": 50.0, "float16": 50.0}  # x benchmark.rtol
MIN_PIXEL_AGREEMENT = 0.99  # segmentation: fraction of pixels with the same argmax class
MIN_BOX_IOU = 0.9  # detection: IoU of each top detection's box, compiled vs eager
BOX_ATOL = 1e-3  # detection: or every coordinate within this (normalised to the image): zero-area boxes have no IoU
TOP_DETECTIONS = 10  # detection: how many highest-scoring eager detections are compared


def flat_tensors(output: Any) -> list[torch.Tensor]:
    """The floating-point tensors of a model output, in a fixed order."""
    if isinstance(output, torch.Tensor):
        return [output] if output.is_floating_point() else []
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, list | tuple):
        return [tensor for item in output for tensor in flat_tensors(item)]
    return []


def compare_outputs(reference: Any, candidate: Any) -> dict[str, float]:
    """Max absolute difference, and that difference relative to the reference's largest magnitude."""
    ref, cand = flat_tensors(reference), flat_tensors(candidate)
    if len(ref) != len(cand) or any(a.shape != b.shape for a, b in zip(ref, cand, strict=True)):
        return {"max_abs_diff": float("inf"), "max_rel_diff": float("inf")}
    max_abs, scale = 0.0, 0.0
    for a, b in zip(ref, cand, strict=True):
        if a.numel() == 0:
            continue
        diff = (a.float() - b.float()).abs()
        if diff.isnan().any():  # NaN where the other has a number (Python's max() would silently drop it)
            return {"max_abs_diff": float("inf"), "max_rel_diff": float("inf")}
        max_abs = max(max_abs, diff.max().item())
        scale = max(scale, a.float().abs().max().item())
    return {"max_abs_diff": max_abs, "max_rel_diff": max_abs / scale if scale > 0 else max_abs}


def numeric_tolerance(rtol: float, dtype: str, reduced_float32: bool = False) -> float:
    """The allowed relative difference for `dtype`; float32 computed with TF32 (which keeps float16's 10-bit
    mantissa: cuDNN convolutions by default, matmuls below `highest` precision) is allowed what 16-bit types are."""
    if dtype == "float32" and reduced_float32:
        return rtol * TOLERANCE_FACTOR["float16"]
    return rtol * TOLERANCE_FACTOR[dtype]


def top5_agreement(reference: torch.Tensor, candidate: torch.Tensor, strict: bool = True) -> float:
    """Fraction of rows whose top-5 classes agree (strict: same set; else candidate's top-1 in reference's top-5)."""
    k = min(5, reference.shape[-1])
    ref_top = reference.float().topk(k, dim=-1).indices
    if strict:
        cand_top = candidate.float().topk(k, dim=-1).indices
        same = [set(a.tolist()) == set(b.tolist()) for a, b in zip(ref_top, cand_top, strict=True)]
    else:
        cand_top1 = candidate.float().argmax(dim=-1)
        same = [int(c) in set(r.tolist()) for r, c in zip(ref_top, cand_top1, strict=True)]
    return sum(same) / len(same)


def argmax_agreement(reference: torch.Tensor, candidate: torch.Tensor, dim: int) -> float:
    """Fraction of positions with the same argmax along `dim`."""
    return (reference.float().argmax(dim=dim) == candidate.float().argmax(dim=dim)).float().mean().item()


def box_iou_cxcywh(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise IoU of two [..., 4] tensors of (center x, center y, width, height) boxes."""

    def corners(box: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cx, cy, w, h = box.float().unbind(-1)
        return cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2

    ax0, ay0, ax1, ay1 = corners(a)
    bx0, by0, bx1, by1 = corners(b)
    inter = (torch.minimum(ax1, bx1) - torch.maximum(ax0, bx0)).clamp(min=0) * (
        torch.minimum(ay1, by1) - torch.maximum(ay0, by0)
    ).clamp(min=0)
    union = (ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter
    return inter / union.clamp(min=1e-12)


def detection_agreement(
    ref_logits, ref_boxes, cand_logits, cand_boxes, background_last: bool, top: int = TOP_DETECTIONS
) -> float:
    """Fraction of the `top` eager detections whose compiled box overlaps with IoU >= MIN_BOX_IOU, or (a box of zero
    area, as random-init heads saturate to) has every coordinate within BOX_ATOL, per image."""
    scores = ref_logits.float()
    scores = scores[..., :-1] if background_last else scores  # DETR-style logits end with a no-object class
    best = scores.max(dim=-1).values  # [batch, queries]
    top_index = best.topk(min(top, best.shape[-1]), dim=-1).indices
    gather = top_index.unsqueeze(-1).expand(-1, -1, 4)
    ref_top, cand_top = ref_boxes.gather(1, gather), cand_boxes.gather(1, gather)
    close = (ref_top.float() - cand_top.float()).abs().amax(dim=-1) <= BOX_ATOL
    return ((box_iou_cxcywh(ref_top, cand_top) >= MIN_BOX_IOU) | close).float().mean().item()


TASK_OUTPUTS = {  # what each task's check reads from a model output
    "image-classification": ("logits",),
    "semantic-segmentation": ("logits",),
    "instance-segmentation": ("class_queries_logits", "masks_queries_logits"),
    "universal-segmentation": ("class_queries_logits", "masks_queries_logits"),
    "object-detection": ("logits", "pred_boxes"),
    "zero-shot-object-detection": ("logits", "pred_boxes"),
}


def task_agreement(task: str, reference: Any, candidate: Any, dtype: str = "float32") -> tuple[bool, float, str]:
    """(passed, agreement, what was compared) for the task's own reading of the output."""
    missing = [name for name in TASK_OUTPUTS.get(task, ()) if getattr(reference, name, None) is None]
    if missing:
        raise ValueError(f"no {task} check for a {type(reference).__name__}: it has no {missing}")
    if task == "image-classification":
        strict = dtype == "float32"
        agreement = top5_agreement(reference.logits, candidate.logits, strict=strict)
        return agreement == 1.0, agreement, "top-5 classes" if strict else "top-1 within eager top-5"
    if task == "semantic-segmentation":
        agreement = argmax_agreement(reference.logits, candidate.logits, dim=1)
        return agreement >= MIN_PIXEL_AGREEMENT, agreement, "argmax segmentation map"
    if task in ("instance-segmentation", "universal-segmentation"):
        classes = argmax_agreement(reference.class_queries_logits, candidate.class_queries_logits, dim=-1)
        masks = ((reference.masks_queries_logits > 0) == (candidate.masks_queries_logits > 0)).float().mean().item()
        agreement = min(classes, masks)
        return agreement >= MIN_PIXEL_AGREEMENT, agreement, "query classes and binary masks"
    if task in ("object-detection", "zero-shot-object-detection"):
        agreement = detection_agreement(
            reference.logits,
            reference.pred_boxes,
            candidate.logits,
            candidate.pred_boxes,
            background_last=task == "object-detection",
        )
        return agreement == 1.0, agreement, f"top-{TOP_DETECTIONS} boxes by IoU >= {MIN_BOX_IOU}"
    raise ValueError(f"no task check for task {task!r}")
