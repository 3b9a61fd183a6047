"""The model registry: one card per published checkpoint (`cards/*.yaml`, data), and how to build, load and feed it.

    python -m compilebench.harness.models            # list the registered checkpoints: task, label, params, input shape
    python -m compilebench.harness.models --count    # also build each full-size model to count its parameters (slow)

A card holds the architecture config fields that differ from the transformers defaults, the published image
processor settings, the doc's table label, the Hub id and revision, and a tiny config of the same classes for tests.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from compilebench.records.formats import CheckpointRecipe, ModelSpec, Unsupported

LOGGER = logging.getLogger(__name__)

CARDS_DIR = Path(__file__).with_name("cards")
TASKS = (
    "image-classification",
    "semantic-segmentation",
    "instance-segmentation",
    "universal-segmentation",
    "object-detection",
    "zero-shot-object-detection",
)
DOC_TASK_TITLES = {  # how the doc's tables name each task ("Image Classification/ViT")
    "image-classification": "Image Classification",
    "semantic-segmentation": "Image Segmentation",
    "instance-segmentation": "Image Segmentation",
    "universal-segmentation": "Image Segmentation",
    "object-detection": "Object Detection",
    "zero-shot-object-detection": "Object Detection",
}
_REQUIRED = ("hub_id", "revision", "label", "task", "model_class", "config_class", "processor_class", "expected")
_OPTIONAL = (
    "config",
    "processor",
    "sources",
    "tiny",
    "text_queries",
    "text_input_ids",
    "text_max_length",
    "text_pad_id",
)
_EXPECTED_KEYS = ("params", "paper_params_m", "input_shapes")
_TINY_KEYS = ("config", "processor")
# Config or processor keys that would run code from a checkpoint repository: never accepted.
REMOTE_CODE_KEYS = ("trust_remote_code", "auto_map", "custom_pipelines")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer_config.json")


class CardError(ValueError):
    """A model card that cannot be read or does not hold what a card must."""


class MissingClass(CardError, Unsupported):
    """A model or processor class the installed transformers does not have (an older release)."""


@dataclass(frozen=True)
class Card:
    """One published checkpoint, as shipped in `cards/`."""

    hub_id: str
    revision: str
    label: str
    task: str
    model_class: str
    config_class: str
    processor_class: str
    config: dict[str, Any]
    processor: dict[str, Any]
    params: int  # parameter count of the published architecture
    paper_params_m: float | None  # the paper's rounded figure, millions
    input_shapes: dict[str, list[int]]  # per image / per query set, without the batch dimension
    sources: list[str]
    tiny_config: dict[str, Any]
    tiny_processor: dict[str, Any]
    text_queries: list[str] = field(default_factory=list)
    text_input_ids: list[list[int]] = field(default_factory=list)
    text_max_length: int = 16
    text_pad_id: int = 0
    path: str = ""

    def slug(self, scale: str) -> str:
        """Folder name of this card's checkpoint at `scale`."""
        return self.hub_id.replace("/", "--") + ("--tiny" if scale == "tiny" else "")


def load_card(path: Path) -> Card:
    """Read and check one card file."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise CardError(f"model card {path}: cannot be read (a card is UTF-8 YAML): {error}") from None
    if not isinstance(raw, dict):
        raise CardError(f"model card {path}: must be a YAML mapping, got {type(raw).__name__}")
    missing = [key for key in _REQUIRED if key not in raw]
    if missing:
        raise CardError(f"model card {path}: missing keys {missing}; a card needs {list(_REQUIRED)}")
    _check_keys(path, "", raw, (*_REQUIRED, *_OPTIONAL))
    if raw["task"] not in TASKS:
        raise CardError(f"model card {path}: `task` must be one of {TASKS}, got {raw['task']!r}")
    expected = raw["expected"]
    if not isinstance(expected, dict):
        raise CardError(f"model card {path}: `expected` must be a mapping, got {type(expected).__name__}")
    _check_keys(path, "expected.", expected, _EXPECTED_KEYS)
    if not isinstance(expected.get("params"), int) or not isinstance(expected.get("input_shapes"), dict):
        raise CardError(f"model card {path}: `expected` needs an integer `params` and an `input_shapes` mapping")
    tiny = raw.get("tiny") or {}
    _check_keys(path, "tiny.", tiny, _TINY_KEYS)
    for where, mapping in (
        ("config", raw.get("config")),
        ("processor", raw.get("processor")),
        ("tiny.config", tiny.get("config")),
        ("tiny.processor", tiny.get("processor")),
    ):
        if mapping is not None and not isinstance(mapping, dict):
            raise CardError(f"model card {path}: `{where}` must be a mapping, got {type(mapping).__name__}")
        remote = [key for key in REMOTE_CODE_KEYS if key in (mapping or {})]
        if remote:
            raise CardError(f"model card {path}: `{where}` sets {remote}: code from a checkpoint is never run")
    return Card(
        hub_id=raw["hub_id"],
        revision=str(raw["revision"]),
        label=raw["label"],
        task=raw["task"],
        model_class=raw["model_class"],
        config_class=raw["config_class"],
        processor_class=raw["processor_class"],
        config=raw.get("config") or {},
        processor=raw.get("processor") or {},
        params=expected["params"],
        paper_params_m=expected.get("paper_params_m"),
        input_shapes=expected["input_shapes"],
        sources=raw.get("sources") or [],
        tiny_config=tiny.get("config") or {},
        tiny_processor=tiny.get("processor") or {},
        text_queries=raw.get("text_queries") or [],
        text_input_ids=raw.get("text_input_ids") or [],
        text_max_length=raw.get("text_max_length", 16),
        text_pad_id=raw.get("text_pad_id", 0),
        path=str(path),
    )


def _check_keys(path: Path, prefix: str, raw: dict, allowed: tuple[str, ...]) -> None:
    """Refuse keys a card does not define (a typo, or a flag such as trust_remote_code that would be ignored)."""
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        keys = ", ".join(f"`{prefix}{key}`" for key in unknown)
        raise CardError(f"model card {path}: unknown key(s) {keys}; allowed: {sorted(allowed)}")


@functools.cache
def registry(cards_dir: Path = CARDS_DIR) -> dict[str, Card]:
    """All cards, by Hub id."""
    cards = [load_card(path) for path in sorted(cards_dir.glob("*.yaml"))]
    by_id = {card.hub_id: card for card in cards}
    if len(by_id) != len(cards):
        raise CardError(f"{cards_dir}: two cards share a hub_id")
    return by_id


def registered_ids() -> list[str]:
    """Hub ids of every registered card."""
    return sorted(registry())


def get_card(model_id: str) -> Card:
    """The card of `model_id`, or an error listing the registered ids."""
    cards = registry()
    if model_id not in cards:
        raise CardError(f"unknown model {model_id!r}; registered: {sorted(cards)}")
    return cards[model_id]


def transformers_class(name: str) -> Any:
    """A class of the installed transformers, by name; a CardError naming the version when it has none."""
    import transformers

    if not hasattr(transformers, name):
        raise MissingClass(f"transformers {transformers.__version__} has no {name!r}")
    return getattr(transformers, name)


def dtype_argument(dtype: Any) -> dict[str, Any]:
    """from_pretrained's dtype argument in the installed transformers: `dtype` from 4.56, `torch_dtype` before (an
    older one passes an unknown `dtype` into the model's config)."""
    import transformers

    major_minor = tuple(int(part) for part in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if major_minor >= (4, 56) else {"torch_dtype": dtype}


def config_fields(card: Card, scale: str = "full") -> dict[str, Any]:
    """The architecture config's fields that differ from the class defaults (plus the tiny ones at tiny scale)."""
    fields = dict(card.config)
    if scale == "tiny":
        fields.update(card.tiny_config)
    return fields


def build_config(card: Card, scale: str = "full") -> Any:
    """The architecture config: class defaults, then the card's fields (then the tiny fields at tiny scale)."""
    return transformers_class(card.config_class)(**config_fields(card, scale))


def processor_kwargs(card: Card, scale: str = "full") -> dict[str, Any]:
    """The image-processor settings at `scale`."""
    kwargs = dict(card.processor)
    if scale == "tiny":
        kwargs.update(card.tiny_processor)
    return kwargs


def processor_from(class_name: str, kwargs: dict[str, Any]) -> Any:
    """An image processor of `class_name`, its PIL backend where there is one (it needs no torchvision)."""
    import transformers

    cls = getattr(transformers, class_name + "Pil", None) or transformers_class(class_name)
    return cls(**kwargs)


def build_processor(card: Card, scale: str = "full") -> Any:
    """The published image processor."""
    return processor_from(card.processor_class, processor_kwargs(card, scale))


def model_class(card: Card | ModelSpec) -> Any:
    """The transformers model class of a card or a model spec."""
    return transformers_class(card.model_class)


def random_model(card: Card, scale: str, seed: int) -> Any:
    """The published architecture with random weights drawn from `seed` (latency does not depend on weights)."""
    return _random_model(card.model_class, card.config_class, config_fields(card, scale), seed)


def _random_model(model_class_name: str, config_class_name: str, fields: dict[str, Any], seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    config = transformers_class(config_class_name)(**fields)
    return transformers_class(model_class_name)(config).eval()


def recipe(card: Card, scale: str, seed: int, folder: str) -> CheckpointRecipe:
    """How to build this card's checkpoint with random weights anywhere torch and transformers are installed."""
    return CheckpointRecipe(
        model_id=card.hub_id,
        folder=folder,
        model_class=card.model_class,
        config_class=card.config_class,
        config=config_fields(card, scale),
        processor_class=card.processor_class,
        processor=processor_kwargs(card, scale),
        seed=seed,
    )


def build_checkpoint(recipe: CheckpointRecipe, folder: Path) -> int:
    """Write a random-init checkpoint (config, safetensors, processor config) into `folder`; its parameter count."""
    model = _random_model(recipe.model_class, recipe.config_class, recipe.config, recipe.seed)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    processor_from(recipe.processor_class, recipe.processor).save_pretrained(folder)
    readable_by_transformers_4(folder / "config.json")
    return count_params(model)


def readable_by_transformers_4(config_path: Path) -> None:
    """Make a checkpoint saved by transformers 5 load in 4.x too: 5.x no longer writes the backbone flags, and 4.x
    then defaults DETR and MaskFormer to a timm backbone beside the native one in `backbone_config` (and fails).
    The flags say what the checkpoint is; transformers 5 ignores them."""
    config = json.loads(config_path.read_text())

    def add_flags(node: Any) -> bool:  # nested configs too (MaskFormer's DETR decoder_config)
        if not isinstance(node, dict):
            return False
        changed = any([add_flags(value) for value in node.values()])
        if "backbone_config" in node and "use_timm_backbone" not in node:
            node.update(use_timm_backbone=False, backbone=None, use_pretrained_backbone=False)
            changed = True
        return changed

    if add_flags(config):
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def load_processor(folder: Path) -> Any:
    """The checkpoint's image processor, as its config names it.

    transformers 5 saves its PIL-backend processors as `XImageProcessorPil`; a transformers without that class
    (4.x) reads such a config with `XImageProcessor`, which takes the same settings.
    """
    from transformers import AutoImageProcessor

    config_path = Path(folder) / "preprocessor_config.json"
    name = json.loads(config_path.read_text()).get("image_processor_type", "") if config_path.exists() else ""
    if name.endswith("Pil"):
        import transformers

        if not hasattr(transformers, name):
            return transformers_class(name.removesuffix("Pil")).from_pretrained(folder)
    return AutoImageProcessor.from_pretrained(folder)


def model_spec(card: Card, checkpoint: str) -> ModelSpec:
    """What a trial needs to run this card's checkpoint in `checkpoint`."""
    return ModelSpec(
        model_id=card.hub_id,
        label=card.label,
        task=card.task,
        model_class=card.model_class,
        checkpoint=checkpoint,
        text_queries=tuple(card.text_queries),
        text_input_ids=tuple(tuple(ids) for ids in card.text_input_ids),
        text_max_length=card.text_max_length,
        text_pad_id=card.text_pad_id,
    )


def random_checkpoint(hub_id: str, scale: str, root: Path, seed: int = 0) -> ModelSpec:
    """Build a registered model's checkpoint with random weights under `root`; what a trial needs to run it."""
    card = get_card(hub_id)
    folder = root / card.slug(scale)
    build_checkpoint(recipe(card, scale, seed, str(folder)), folder)
    return model_spec(card, str(folder))


def count_params(model: Any) -> int:
    """Number of parameters (buffers excluded)."""
    return sum(parameter.numel() for parameter in model.parameters())


def card_text_inputs(source: Card | ModelSpec) -> dict[str, Any]:
    """Text query ids recorded in a card, padded as the published processor pads them (one row per query)."""
    import torch

    rows, masks = [], []
    for ids in source.text_input_ids:
        pad = source.text_max_length - len(ids)
        rows.append(list(ids) + [source.text_pad_id] * pad)
        masks.append([1] * len(ids) + [0] * pad)
    return {"input_ids": torch.tensor(rows), "attention_mask": torch.tensor(masks)}


def tokenizer_text_inputs(source: Card | ModelSpec, folder: Path) -> dict[str, Any]:
    """Text query ids from the checkpoint's own tokenizer (present when loaded from the Hub)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    encoded = tokenizer(
        list(source.text_queries), padding="max_length", max_length=source.text_max_length, return_tensors="pt"
    )
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}


def has_tokenizer(folder: Path) -> bool:
    """Whether the checkpoint folder holds tokenizer files."""
    return any((folder / name).exists() for name in TOKENIZER_FILES)


def single_inputs(
    source: Card | ModelSpec, processor: Any, image: Any, folder: Path | None = None
) -> tuple[dict[str, Any], str]:
    """Inputs for one image, as the published processor makes them, and where the text ids came from."""
    features = processor(images=image, return_tensors="pt")
    inputs = {key: value for key, value in features.items() if hasattr(value, "shape")}
    text_source = "none"
    if source.text_queries:
        if folder is not None and has_tokenizer(Path(folder)):
            inputs.update(tokenizer_text_inputs(source, Path(folder)))
            text_source = "tokenizer"
        else:
            inputs.update(card_text_inputs(source))
            text_source = "card-token-ids"
    return inputs, text_source


def batch_inputs(single: dict[str, Any], batch_size: int) -> dict[str, Any]:
    """Replicate one image's inputs to `batch_size` images; text queries are repeated per image."""
    return {key: value.repeat(batch_size, *([1] * (value.dim() - 1))) for key, value in single.items()}


def forward_inputs(model: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """Keep only the inputs the model's forward takes (e.g. SegFormer takes no pixel_mask)."""
    accepted = inspect.signature(model.forward).parameters
    return {key: value for key, value in inputs.items() if key in accepted}


def describe(card: Card) -> dict[str, Any]:
    """One row for the `models` listing."""
    shapes = "; ".join(f"{key} {'x'.join(map(str, shape))}" for key, shape in card.input_shapes.items())
    return {
        "model_id": card.hub_id,
        "label": card.label,
        "task": card.task,
        "params_m": round(card.params / 1e6, 2),
        "input": shapes,
        "class": card.model_class,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="List the registered checkpoints.")
    parser.add_argument("--count", action="store_true", help="build each full-size model and count its parameters")
    parser.add_argument("--manifest", default=None, help="a load_models manifest.json: show each weights source")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sources = {}
    if args.manifest and Path(args.manifest).exists():
        sources = {entry["model_id"]: entry["weights_source"] for entry in json.loads(Path(args.manifest).read_text())}
    rows = []
    for card in registry().values():
        row = describe(card)
        row["weights"] = sources.get(card.hub_id, "not loaded")
        if args.count:
            row["built_params_m"] = round(count_params(random_model(card, "full", 0)) / 1e6, 2)
        rows.append(row)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    widths = {key: max(len(key), *(len(str(row.get(key, ""))) for row in rows)) for key in columns}
    for line in [dict(zip(columns, columns, strict=True)), *rows]:  # a plain table: this module travels without pandas
        print("  ".join(str(line.get(key, "")).rjust(widths[key]) for key in columns))


if __name__ == "__main__":
    main()
