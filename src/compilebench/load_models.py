"""Stage load_models: one local checkpoint folder per model of the selected suite, a manifest, and the selection.

    python -m compilebench.load_models    # reads params.yaml; writes paths.checkpoints, .manifest and .selection

With the Hub reachable (or the checkpoint in the local Hugging Face cache), files come from the Hub by id and
revision, safetensors only, and are linked (not copied) from the HF cache. Otherwise, if `models.weights` allows
it, the published architecture is built from the model card with random weights from `models.seed` and saved with
`save_pretrained` (latency depends on architecture and input shape, not on weight values). The benchmark loads
every folder with `from_pretrained(folder)` and `AutoImageProcessor.from_pretrained(folder)` either way.

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

from compilebench import environments, models, plan
from compilebench.config import stage_config
from compilebench.files import write_json

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
        real = path.resolve()
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


def meta_param_count(card: models.Card, folder: Path) -> int:
    """Parameter count of the checkpoint's architecture, built on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        return models.count_params(models.model_class(card)(config))


def source_key(card: models.Card, scale: str, weights: str, seed: int, online: bool) -> str:
    """What a checkpoint folder depends on: the card's bytes, scale, weights choice, seed, Hub reachability."""
    card_sha = hashlib.sha256(Path(card.path).read_bytes()).hexdigest()
    return hashlib.sha256(f"{card_sha}|{scale}|{weights}|{seed}|{online}".encode()).hexdigest()[:16]


def materialise(card: models.Card, root: Path, scale: str, weights: str, seed: int, online: bool) -> dict[str, Any]:
    """One checkpoint folder under `root` (kept when its source is unchanged, else written to a temporary name
    first); its manifest entry."""
    folder = root / card.slug(scale)
    key = source_key(card, scale, weights, seed, online)
    recorded = folder / SOURCE_FILE
    if recorded.exists():
        previous = json.loads(recorded.read_text())
        if previous.get("key") == key:
            return previous["entry"]
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
        "param_count": meta_param_count(card, tmp),
        "card": Path(card.path).name,
        "card_sha256": hashlib.sha256(Path(card.path).read_bytes()).hexdigest(),
    }
    (tmp / SOURCE_FILE).write_text(json.dumps({"key": key, "entry": entry}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return entry


def main() -> None:
    config = stage_config(compiles=True)
    suite, root = config.selected, Path(config.paths.checkpoints)
    root.mkdir(parents=True, exist_ok=True)
    online = config.models.weights != WEIGHTS_RANDOM and suite.scale == "full" and hub_reachable()
    if config.models.weights != WEIGHTS_RANDOM and suite.scale == "full":
        LOGGER.info("Hugging Face Hub %s", "reachable" if online else "unreachable: only the local HF cache is used")
    manifest = []
    try:
        for model_id in tqdm(suite.models, desc="load_models", unit="model"):
            card = models.get_card(model_id)
            entry = materialise(card, root, suite.scale, config.models.weights, config.models.seed, online)
            LOGGER.info("%s: %s, %.2fM params", model_id, entry["weights_source"], entry["param_count"] / 1e6)
            manifest.append(entry)
    except (LoadError, models.CardError) as error:
        LOGGER.error("%s", error)
        sys.exit(2)
    kept = {Path(entry["path"]).name for entry in manifest}
    for folder in root.iterdir():
        if folder.is_dir() and folder.name not in kept:
            shutil.rmtree(folder)  # a model no longer selected
    write_json(config.paths.manifest, manifest)
    checkpoints = {entry["model_id"]: entry["path"] for entry in manifest}
    write_json(config.paths.selection, plan.selection(config, checkpoints, environments.project_pins(Path.cwd())))


if __name__ == "__main__":
    main()
