"""Stage load_models: one local checkpoint folder per model of the selected suite, a manifest, and the selection.

    python -m compilebench.load_models    # reads params.yaml; writes paths.checkpoints, .manifest and .selection

With the Hub reachable (or the checkpoint in the local Hugging Face cache), files come from the Hub by id and
revision, safetensors only, and are linked (not copied) from the HF cache. Otherwise, if `models.weights` allows
it, the published architecture is built from the model card with random weights from `models.seed` and saved with
`save_pretrained` (latency depends on architecture and input shape, not on weight values). The benchmark loads
every folder with `from_pretrained(folder)` and `AutoImageProcessor.from_pretrained(folder)` either way.

A model without a card (any image checkpoint's Hub id, or a local folder: see `checkpoints`) is checked first: its
task and class come from its config, and what cannot run is refused naming the model, before any timing. A local
folder is linked as it is (`config_origin: local:<path>`); a Hub checkpoint is fetched configs first, then its
safetensors. With no card there is nothing to build offline, so such a Hub id needs the Hub or the HF cache.

A folder whose source has not changed (same card, scale, weights choice, seed and Hub reachability) is kept, not
rebuilt; folders of models no longer selected are removed. The selection (paths.selection) holds what the
benchmark measures: the models with their checkpoints, the batch sizes, the selected variants and the compared
environments with their resolved pins. The benchmark depends on it rather than on whole params sections, so an
edit of a suite, variant or environment that is not selected re-runs nothing expensive.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tqdm import tqdm

from compilebench import checkpoints, reference
from compilebench.config import ConfigError, stage_config
from compilebench.environments.pins import resolved_pins
from compilebench.harness import models
from compilebench.harness.names import is_local
from compilebench.records.formats import ModelSpec
from compilebench.records.writing import write_json

LOGGER = logging.getLogger(__name__)

HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model"]  # configs, weights, tokenizer files; never *.bin
SOURCE_FILE = "compilebench-source.json"  # in each checkpoint folder: what built it, and its manifest entry
WEIGHTS_HUB = "hub"
WEIGHTS_RANDOM = "random-init"


class LoadError(RuntimeError):
    """A model could not be materialised as the params require."""


def hub_reachable(timeout_s: float = 5.0) -> bool:
    """Whether the Hugging Face Hub answers; False at once under HF_HUB_OFFLINE=1."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint + "/api/health", method="HEAD"), timeout=timeout_s)
    except urllib.error.HTTPError:
        return True  # it answered
    except (urllib.error.URLError, OSError):
        return False
    return True


def link_tree(source: Path, target: Path) -> None:
    """Hard-link (else symlink) every file of `source` into `target`: no second copy of the weights."""
    target.mkdir(parents=True, exist_ok=True)
    for path in source.rglob("*"):
        if path.is_dir():
            continue
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError) as error:  # a link to nowhere, or a loop of links (RuntimeError on 3.11)
            raise LoadError(
                f"{path} in the model folder {source} cannot be read ({error}): remove or mend the link"
            ) from None
        try:
            os.link(real, destination)
        except OSError:
            destination.symlink_to(real)


def from_hub(card: models.Card, folder: Path, online: bool) -> dict[str, Any]:
    """Fetch the checkpoint by id and revision (from the HF cache when offline); returns provenance."""
    from huggingface_hub import snapshot_download

    snapshot = Path(
        snapshot_download(card.hub_id, revision=card.revision, allow_patterns=HUB_PATTERNS, local_files_only=not online)
    )
    if not list(snapshot.glob("*.safetensors")):
        raise LoadError(f"{card.hub_id}@{card.revision} has no safetensors weights; other formats are not loaded")
    link_tree(snapshot, folder)
    return {
        "weights_source": WEIGHTS_HUB,
        "config_origin": f"hub:{card.hub_id}@{card.revision}",
        "resolved_revision": snapshot.name,
    }


def from_card(card: models.Card, folder: Path, scale: str, seed: int) -> dict[str, Any]:
    """Build the published architecture from the card with seeded random weights and save it."""
    models.build_checkpoint(models.recipe(card, scale, seed, str(folder)), folder)
    return {
        "weights_source": WEIGHTS_RANDOM,
        "config_origin": f"card:{Path(card.path).name}" + (" (tiny)" if scale == "tiny" else ""),
        "resolved_revision": None,
    }


def source_key(card: models.Card, scale: str, weights: str, seed: int, online: bool) -> str:
    """What a checkpoint folder depends on: the card's bytes, scale, weights choice, seed, Hub reachability."""
    card_sha = hashlib.sha256(Path(card.path).read_bytes()).hexdigest()
    return hashlib.sha256(f"{card_sha}|{scale}|{weights}|{seed}|{online}".encode()).hexdigest()[:16]


def materialise(card: models.Card, root: Path, scale: str, weights: str, seed: int, online: bool) -> dict[str, Any]:
    """One checkpoint folder under `root` (kept when its source is unchanged, else written to a temporary name
    first); its manifest entry."""
    folder = root / card.slug(scale)
    key = source_key(card, scale, weights, seed, online)
    if (kept := kept_entry(folder, key)) is not None:
        return kept
    tmp = root / (card.slug(scale) + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    provenance = None
    if weights in ("auto", WEIGHTS_HUB) and scale == "full":
        try:
            provenance = from_hub(card, tmp, online)
        except Exception as error:  # hub errors come as many types (offline, missing revision, HTTP)
            if weights == WEIGHTS_HUB:
                raise LoadError(f"{card.hub_id}: models.weights is 'hub' but the Hub failed: {error}") from None
            hub = "failed" if online else "unreachable and not in the local HF cache"
            # our own refusal of what the cache holds (no safetensors) is said as such, not as "unreachable"
            why = str(error) if isinstance(error, LoadError) else f"Hub {hub} ({type(error).__name__})"
            LOGGER.warning("%s: %s; building the published architecture with random weights", card.hub_id, why)
            shutil.rmtree(tmp, ignore_errors=True)
    elif weights == WEIGHTS_HUB:
        raise LoadError(f"{card.hub_id}: models.weights is 'hub' but the suite's scale is tiny (no Hub checkpoint)")
    if provenance is None:
        provenance = from_card(card, tmp, scale, seed)
    entry = {
        "model_id": card.hub_id,
        "label": card.label,
        "task": card.task,
        "scale": scale,
        "path": str(folder),
        "revision": card.revision,
        **provenance,
        "seed": seed if provenance["weights_source"] == WEIGHTS_RANDOM else None,
        "param_count": count_params_meta(card.model_class, tmp),
        "card": Path(card.path).name,
        "card_sha256": hashlib.sha256(Path(card.path).read_bytes()).hexdigest(),
    }
    return publish(tmp, folder, key, entry)


def kept_entry(folder: Path, key: str) -> dict[str, Any] | None:
    """The manifest entry of a checkpoint folder built from the same source (`key`), or None: build it again."""
    recorded = folder / SOURCE_FILE
    if not recorded.exists():
        return None
    previous = json.loads(recorded.read_text())
    return previous["entry"] if previous.get("key") == key else None


def publish(tmp: Path, folder: Path, key: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Record what built the complete folder `tmp`, then put it in place of `folder` (a reader never sees half a
    checkpoint); its manifest entry."""
    (tmp / SOURCE_FILE).write_text(json.dumps({"key": key, "entry": entry}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return entry


def materialise_uncarded(model_id: str, root: Path, weights: str, online: bool) -> dict[str, Any]:
    """A model without a card: a local folder linked as it is, or a Hub checkpoint (safetensors only), each checked
    (task from its config, processor config, weights, no remote code) before it is kept; its manifest entry."""
    if weights == WEIGHTS_RANDOM:
        raise LoadError(
            f"{model_id}: models.weights is 'random-init', which builds a card's architecture; this "
            f"model has no card (carded: {models.registered_ids()}): use weights auto or hub"
        )
    local = is_local(model_id)
    if local:
        source = checkpoints.local_folder(model_id)
        info = checkpoints.inspect(source, model_id)
        key = f"local|{source}|{checkpoints.digest(source)}"
    else:
        source, info = hub_snapshot(model_id, online)
        key = f"hub|{model_id}|{source.name}"  # the snapshot folder is named by the resolved commit
    folder = root / checkpoints.slug(model_id)
    if (kept := kept_entry(folder, key)) is not None:
        return kept
    tmp = root / (folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    link_tree(source, tmp)
    entry = {
        "model_id": model_id,
        "label": checkpoints.label(model_id),
        "task": info.task,
        "model_class": info.model_class,
        "scale": "full",
        "path": str(folder),
        "revision": None if local else "main",
        "weights_source": "local" if local else WEIGHTS_HUB,
        "config_origin": f"local:{source}" if local else f"hub:{model_id}@main",
        "resolved_revision": None if local else source.name,
        "seed": None,
        "param_count": count_params_meta(info.model_class, tmp),
        "card": None,
        "card_sha256": None,
    }
    return publish(tmp, folder, key, entry)


def hub_snapshot(model_id: str, online: bool) -> tuple[Path, checkpoints.CheckpointInfo]:
    """A Hub checkpoint without a card, from the Hub or the local HF cache: its configs first (checked before any
    weights are fetched), then its safetensors (checked too); the snapshot folder and what it is."""
    from huggingface_hub import snapshot_download

    try:
        configs = Path(snapshot_download(model_id, allow_patterns=["*.json"], local_files_only=not online))
        checkpoints.inspect(configs, model_id, need_weights=False)
        snapshot = Path(snapshot_download(model_id, allow_patterns=HUB_PATTERNS, local_files_only=not online))
    except checkpoints.CheckpointError:
        raise
    except Exception as error:  # hub errors come as many types (offline, unknown repo, HTTP)
        where = "the Hub failed" if online else "the Hub is unreachable and it is not in the local HF cache"
        raise LoadError(
            f"{model_id}: no card, and {where} ({type(error).__name__}: {error}); only the doc's 12 "
            "carded models can be built offline (a local checkpoint folder works too)"
        ) from None
    return snapshot, checkpoints.inspect(snapshot, model_id)


def count_params_meta(model_class_name: str, folder: Path) -> int:
    """Parameter count of a checkpoint's architecture, built on the meta device (no memory, no weights)."""
    return models.count_params(checkpoints.meta_model(model_class_name, folder))


def uncarded_spec(entry: dict[str, Any], text_queries: list[str]) -> ModelSpec:
    """What a trial needs to run a model without a card: zero-shot detectors get the params' text queries, padded
    to the text model's length (its tokenizer, which the folder must hold, makes the ids)."""
    folder = Path(entry["path"])
    zero_shot = entry["task"] == "zero-shot-object-detection"
    if zero_shot and not models.has_tokenizer(folder):
        raise LoadError(
            f"{entry['model_id']}: a zero-shot detector without a card needs its tokenizer in the "
            f"checkpoint (one of {list(models.TOKENIZER_FILES)}) to turn models.text_queries into ids"
        )
    text_config = json.loads((folder / checkpoints.CONFIG_FILE).read_text()).get("text_config") or {}
    return ModelSpec(
        model_id=entry["model_id"],
        label=entry["label"],
        task=entry["task"],
        model_class=entry["model_class"],
        checkpoint=entry["path"],
        text_queries=tuple(text_queries) if zero_shot else (),
        text_max_length=int(text_config.get("max_position_embeddings", 16)),
    )


def check_labels(specs: list[ModelSpec]) -> None:
    """Tables and figures name models by label: two selected models may not share one."""
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.label in seen:
            raise LoadError(
                f"{seen[spec.label]} and {spec.model_id} would both be labelled {spec.label!r} in "
                "tables and figures: rename one of the folders"
            )
        seen[spec.label] = spec.model_id


def main() -> None:
    config = stage_config(compiles=True)
    suite, root = config.selected, Path(config.paths.checkpoints)
    try:
        cells = reference.selected_cells(config)
    except ConfigError as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    root.mkdir(parents=True, exist_ok=True)
    online = config.models.weights != WEIGHTS_RANDOM and suite.scale == "full" and hub_reachable()
    if config.models.weights != WEIGHTS_RANDOM and suite.scale == "full":
        LOGGER.info("Hugging Face Hub %s", "reachable" if online else "unreachable: only the local HF cache is used")
    manifest, specs = [], []
    try:
        for model_id in tqdm(suite.models, desc="load_models", unit="model"):
            if model_id in models.registry():
                card = models.get_card(model_id)
                entry = materialise(card, root, suite.scale, config.models.weights, config.models.seed, online)
                spec = models.model_spec(card, entry["path"])
            else:
                entry = materialise_uncarded(model_id, root, config.models.weights, online)
                spec = uncarded_spec(entry, config.models.text_queries)
            LOGGER.info("%s: %s, %.2fM params", model_id, entry["weights_source"], entry["param_count"] / 1e6)
            manifest.append(entry)
            specs.append(spec)
        check_labels(specs)
    except (LoadError, models.CardError, checkpoints.CheckpointError) as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    kept = {Path(entry["path"]).name for entry in manifest}
    for folder in root.iterdir():
        if folder.is_dir() and folder.name not in kept:
            shutil.rmtree(folder)  # a model no longer selected
    write_json(config.paths.manifest, manifest)
    pins = resolved_pins(config.compared_pins(), Path.cwd())
    write_json(config.paths.selection, config.selection(specs, pins, cells).to_dict())


if __name__ == "__main__":
    main()
