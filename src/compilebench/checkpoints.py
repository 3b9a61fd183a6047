"""Any image checkpoint, without a card: its task and model class from its own config, or a clear refusal.

    python -m compilebench.checkpoints FOLDER    # what the benchmark would run from this folder, or why not

A suite's `models` may name, besides the doc's 12 carded checkpoints, any Hub id or a local checkpoint folder
(a path starting with `/`, `./`, `../` or `~`). The task comes from the config's `architectures`, looked up in
transformers' own `AutoModelFor...` tables (image classification, semantic / instance / universal segmentation,
object detection, zero-shot object detection); the image processor and so the input shapes come from the
checkpoint's `preprocessor_config.json`. What cannot run is refused before any timing, naming the model: a folder
without a config or a processor config, a model that is not a vision model, an architecture with no supported
task, weights only as pickle `.bin` files, and anything that would need `trust_remote_code`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compilebench.harness import names
from compilebench.harness.models import REMOTE_CODE_KEYS
from compilebench.harness.names import is_local, slug  # noqa: F401 (slug: re-exported)

CONFIG_FILE = "config.json"
PROCESSOR_FILE = "preprocessor_config.json"
# The AutoModelFor... table of each task (transformers.models.auto.modeling_auto), in the order a class found in
# two tables is given its task (DetrForSegmentation-style classes come last: universal).
TASK_TABLES = {
    "image-classification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "semantic-segmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "instance-segmentation": "MODEL_FOR_INSTANCE_SEGMENTATION_MAPPING_NAMES",
    "universal-segmentation": "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES",
    "object-detection": "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "zero-shot-object-detection": "MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES",
}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")  # weights formats that unpickle (and so can run code) when loaded


class CheckpointError(ValueError):
    """A checkpoint the benchmark cannot run; the message names the model and what is allowed."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What the benchmark runs from a checkpoint folder, as its own config says."""

    task: str  # one of TASK_TABLES
    model_class: str  # the transformers class named in `architectures`, e.g. SwinForImageClassification
    model_type: str  # the config's model_type, e.g. swin
    processor_class: str  # the image processor named by preprocessor_config.json


def local_folder(model_id: str) -> Path:
    """The folder a local model entry names, resolved; a CheckpointError where it cannot be (a loop of links)."""
    try:
        return names.local_folder(model_id)
    except (OSError, RuntimeError) as error:  # a loop of symbolic links: RuntimeError on Python 3.11
        raise CheckpointError(
            f"{model_id}: the folder cannot be resolved ({error}): point the entry at the "
            "checkpoint folder itself, not at a loop of symbolic links"
        ) from None


def safetensors_problem(path: Path) -> str | None:
    """Why a .safetensors file cannot be loaded (empty, cut short, not safetensors, no tensor), as the safetensors
    library that transformers loads it with reads its header and checks its offsets against the file; or None."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as weights:
            count = len(list(weights.keys()))
    except Exception as error:  # safetensors raises its own SafetensorError, and OSError for an unreadable file
        return f"is not a readable safetensors file ({type(error).__name__}: {error})"
    return None if count else "holds no tensor"


def label(model_id: str) -> str:
    """How tables and figures name a model without a card: the Hub id, or the local folder's name."""
    return local_folder(model_id).name if is_local(model_id) else model_id


def _read_json(path: Path, model_id: str) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{model_id}: {path.name} cannot be read as JSON: {error}") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{model_id}: {path.name} must hold a JSON object, got {type(raw).__name__}")
    return raw


def task_of(class_name: str) -> str | None:
    """The task whose AutoModelFor... table lists `class_name`, or None."""
    from transformers.models.auto import modeling_auto

    for task, table in TASK_TABLES.items():
        names = getattr(modeling_auto, table, {}).values()
        if any(class_name == name or (isinstance(name, tuple) and class_name in name) for name in names):
            return task
    return None


def is_vision_model_type(model_type: str) -> bool:
    """Whether transformers knows an image processor for this model type, or one of its vision task tables does."""
    from transformers.models.auto import image_processing_auto, modeling_auto

    if model_type in image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES:
        return True
    return any(model_type in getattr(modeling_auto, table, {}) for table in TASK_TABLES.values())


def weights_problem(folder: Path, model_id: str) -> str | None:
    """Why the folder's weights cannot be loaded (safetensors only: pickle files can run code), or None."""
    weights = sorted(folder.glob("*.safetensors"))
    for path in weights:
        if problem := safetensors_problem(path):
            return f"{model_id}: {path} {problem}: save the checkpoint again with save_pretrained(folder)"
    if weights:
        return None
    pickles = sorted(path.name for path in folder.iterdir() if path.suffix in PICKLE_SUFFIXES)
    if pickles:
        return (
            f"{model_id}: weights only as {', '.join(pickles)}; compilebench loads safetensors only (a pickle "
            "file can run code when loaded): save it with save_pretrained(..., safe_serialization=True)"
        )
    return f"{model_id}: {folder} holds no *.safetensors weights"


def weight_names(folder: Path) -> set[str]:
    """The names of the tensors the folder's .safetensors files hold (read from their headers, not loaded)."""
    from safetensors import safe_open

    held: set[str] = set()
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="numpy") as weights:
            held.update(weights.keys())
    return held


def meta_model(model_class: str, folder: Path) -> Any:
    """The checkpoint's architecture built from its config on the meta device: no memory, no weights."""
    import torch
    from transformers import AutoConfig

    from compilebench.harness.models import transformers_class

    with torch.device("meta"):
        return transformers_class(model_class)(AutoConfig.from_pretrained(folder))


def foreign_weights_problem(folder: Path, model_id: str, model_class: str) -> str | None:
    """Why the folder's weights are not this architecture's: none of the tensors its files hold is one of the
    model's parameters or buffers (by name, the base model's prefix on either side or not, as transformers matches
    them), so every weight would be initialised at random without a word; or None."""
    model = meta_model(model_class, folder)
    wanted = set(model.state_dict())
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    bare = lambda names: {name[len(prefix) :] if name.startswith(prefix) else name for name in names}  # noqa: E731
    held = weight_names(folder)
    if not wanted or bare(wanted) & bare(held):
        return None
    return (
        f"{model_id}: its .safetensors files hold {len(held)} tensor(s), none of them one of {model_class}'s "
        f"{len(wanted)} (it wants e.g. {sorted(wanted)[0]!r}, the files hold e.g. {sorted(held)[0]!r}): every weight "
        "would be random; save the checkpoint with model.save_pretrained(folder)"
    )


def inspect(folder: Path, model_id: str, need_weights: bool = True) -> CheckpointInfo:
    """What the benchmark runs from `folder`, or a CheckpointError naming `model_id` and what is allowed."""
    import transformers

    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{model_id}: {folder} is not a folder (a local model is a checkpoint folder)")
    if not (folder / CONFIG_FILE).is_file():
        raise CheckpointError(
            f"{model_id}: {folder} has no {CONFIG_FILE}: not a transformers checkpoint folder "
            "(write one with model.save_pretrained(folder))"
        )
    config = _read_json(folder / CONFIG_FILE, model_id)
    processor = _read_json(folder / PROCESSOR_FILE, model_id) if (folder / PROCESSOR_FILE).is_file() else None
    for name, raw in ((CONFIG_FILE, config), (PROCESSOR_FILE, processor or {})):
        remote = [key for key in REMOTE_CODE_KEYS if key in raw]
        if remote:
            raise CheckpointError(
                f"{model_id}: {name} sets {remote}: it would need trust_remote_code, and "
                "compilebench never runs code from a checkpoint"
            )
    model_type = str(config.get("model_type", ""))
    architectures = config.get("architectures") or []
    custom = [name for name in architectures if not hasattr(transformers, name)]
    if custom:
        raise CheckpointError(
            f"{model_id}: architecture {custom[0]} is not in transformers "
            f"{transformers.__version__}: it would need trust_remote_code, which compilebench "
            "never uses"
        )
    if not model_type or not is_vision_model_type(model_type):
        raise CheckpointError(
            f"{model_id}: model_type {model_type!r} is not a vision model; compilebench runs image "
            f"models of the tasks {list(TASK_TABLES)}"
        )
    if not architectures:
        raise CheckpointError(
            f"{model_id}: {CONFIG_FILE} names no `architectures`, so its task cannot be told; a "
            "checkpoint saved from a task model (e.g. SwinForImageClassification) names it"
        )
    found = [(name, task_of(name)) for name in architectures]
    supported = [(name, task) for name, task in found if task is not None]
    if not supported:
        raise CheckpointError(
            f"{model_id}: architecture {architectures[0]} has no supported task; supported: "
            f"{list(TASK_TABLES)} (an AutoModelFor... class of one of them)"
        )
    if processor is None:
        raise CheckpointError(
            f"{model_id}: {folder} has no {PROCESSOR_FILE}: the image processor, and so the "
            "input shapes, come from it (write it with image_processor.save_pretrained(folder))"
        )
    if need_weights and (problem := weights_problem(folder, model_id)):
        raise CheckpointError(problem)
    model_class, task = supported[0]
    if need_weights and (problem := foreign_weights_problem(folder, model_id, model_class)):
        raise CheckpointError(problem)
    return CheckpointInfo(
        task=task,
        model_class=model_class,
        model_type=model_type,
        processor_class=str(processor.get("image_processor_type") or processor.get("processor_class") or ""),
    )


def digest(folder: Path) -> str:
    """What a copy of a local folder depends on: its configs' bytes and each other file's name, size and mtime."""
    hasher = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        stat = path.stat()
        hasher.update(str(path.relative_to(folder)).encode())
        if path.suffix == ".json":
            hasher.update(path.read_bytes())
        else:
            hasher.update(f"{stat.st_size}|{stat.st_mtime_ns}".encode())
    return hasher.hexdigest()[:16]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m compilebench.checkpoints", description="What the benchmark would run from a checkpoint folder."
    )
    parser.add_argument("folder", help="a local checkpoint folder: config.json, preprocessor_config.json, weights")
    folder = parser.parse_args().folder
    try:
        info = inspect(Path(folder), folder)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(info.__dict__, indent=1))


if __name__ == "__main__":
    main()
