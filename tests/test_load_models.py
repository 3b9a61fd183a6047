"""load_models: random-init checkpoints that round-trip through from_pretrained; Hub fallback rules."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from transformers import AutoImageProcessor

from compilebench import load_models
from compilebench.harness import models


def test_random_init_checkpoint_round_trips(tmp_path, image_640x480):
    card = models.get_card("facebook/detr-resnet-50")
    entry = load_models.materialise(card, tmp_path, "tiny", "random-init", seed=3, online=False)
    folder = tmp_path / card.slug("tiny")
    assert entry["weights_source"] == "random-init" and entry["seed"] == 3
    assert entry["config_origin"].startswith("card:detr-resnet-50.yaml")
    assert list(folder.glob("*.safetensors")) and not list(folder.glob("*.bin"))
    assert not (tmp_path / (card.slug("tiny") + ".partial")).exists()
    loaded = models.model_class(card).from_pretrained(folder, use_safetensors=True).eval()
    rebuilt = models.random_model(card, "tiny", seed=3)
    assert entry["param_count"] == models.count_params(loaded) == models.count_params(rebuilt)
    processor = AutoImageProcessor.from_pretrained(folder)
    inputs, _ = models.single_inputs(card, processor, image_640x480, folder)
    with torch.no_grad():
        assert torch.equal(loaded(**inputs).logits, rebuilt(**inputs).logits)  # same seed, same weights


def test_an_unchanged_checkpoint_is_kept_and_a_changed_one_rebuilt(tmp_path):
    card = models.get_card("microsoft/resnet-50")
    first = load_models.materialise(card, tmp_path, "tiny", "random-init", seed=0, online=False)
    weights = next((tmp_path / card.slug("tiny")).glob("*.safetensors"))
    stamp = weights.stat().st_mtime_ns
    again = load_models.materialise(card, tmp_path, "tiny", "random-init", seed=0, online=False)
    assert again == first and weights.stat().st_mtime_ns == stamp  # kept, not rebuilt
    reseeded = load_models.materialise(card, tmp_path, "tiny", "random-init", seed=1, online=False)
    assert (
        reseeded["seed"] == 1 and next((tmp_path / card.slug("tiny")).glob("*.safetensors")).stat().st_mtime_ns != stamp
    )


def test_auto_falls_back_to_random_init_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    assert load_models.hub_reachable() is False
    card = models.get_card("google/deeplabv3_mobilenet_v2_1.0_513")
    entry = load_models.materialise(card, tmp_path, "full", "auto", seed=0, online=False)
    assert entry["weights_source"] == "random-init"
    assert entry["param_count"] == card.params  # the full published architecture


def test_hub_only_fails_offline_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    card = models.get_card("microsoft/resnet-50")
    with pytest.raises(load_models.LoadError, match=r"models\.weights is 'hub'"):
        load_models.materialise(card, tmp_path, "full", "hub", seed=0, online=False)
    assert not any(tmp_path.glob("microsoft--resnet-50*"))


def test_hub_path_links_a_local_snapshot(tmp_path):
    source = tmp_path / "snapshot"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"x" * 1000)
    (source / "config.json").write_text(json.dumps({"a": 1}))
    load_models.link_tree(source, tmp_path / "ckpt")
    linked = tmp_path / "ckpt" / "model.safetensors"
    assert linked.read_bytes() == b"x" * 1000
    assert linked.stat().st_ino == (source / "model.safetensors").stat().st_ino  # a link, not a second copy


def _materialise_in_fresh_process(tmp_path, hf_cache, weights):
    """load_models.materialise in a new process, as a user's run sees HF_HUB_CACHE (read at import by the hub)."""
    code = (
        "import json, sys; from pathlib import Path; from compilebench import load_models\n"
        "from compilebench.harness import models\n"
        "card = models.get_card('microsoft/resnet-50')\n"
        "try:\n"
        f"    print(json.dumps(load_models.materialise(card, Path(sys.argv[1]), 'full', '{weights}', 0, False)))\n"
        "except load_models.LoadError as error:\n"
        "    print(error, file=sys.stderr); sys.exit(2)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hf_cache)}
    root = tmp_path / "ckpt"
    root.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-c", code, str(root)], env=env, capture_output=True, text=True), root


def _fake_cache(tmp_path, commit, files):
    repo = tmp_path / "hf" / "hub" / "models--microsoft--resnet-50"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    files(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return tmp_path / "hf" / "hub", snapshot


def test_local_hf_cache_snapshot_is_used_offline(tmp_path):
    """A checkpoint already in the HF cache loads by id and revision with the Hub unreachable, as `hub`."""
    card = models.get_card("microsoft/resnet-50")
    commit = "0123456789abcdef0123456789abcdef01234567"

    def files(snapshot):  # stands in for the files a download would have put there
        models.random_model(card, "tiny", seed=1).save_pretrained(snapshot)
        models.build_processor(card, "tiny").save_pretrained(snapshot)

    cache, snapshot = _fake_cache(tmp_path, commit, files)
    done, root = _materialise_in_fresh_process(tmp_path, cache, "auto")
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout.strip().splitlines()[-1])
    assert entry["weights_source"] == "hub" and entry["resolved_revision"] == commit
    assert entry["config_origin"] == "hub:microsoft/resnet-50@main"
    weights = root / card.slug("full") / "model.safetensors"
    assert weights.stat().st_ino == (snapshot / "model.safetensors").resolve().stat().st_ino  # linked, not copied
    loaded = models.model_class(card).from_pretrained(weights.parent, use_safetensors=True)
    assert models.count_params(loaded) == entry["param_count"]


def test_cache_without_safetensors_is_refused(tmp_path):
    cache, _ = _fake_cache(
        tmp_path, "f" * 40, lambda snapshot: (snapshot / "config.json").write_text(json.dumps({"model_type": "resnet"}))
    )
    done, root = _materialise_in_fresh_process(tmp_path, cache, "hub")
    assert done.returncode == 2 and "no safetensors" in done.stderr
    assert not any(root.iterdir())
    fallen_back, _ = _materialise_in_fresh_process(tmp_path, cache, "auto")  # says why it did not use the cache
    assert fallen_back.returncode == 0 and "no safetensors" in fallen_back.stderr, fallen_back.stderr[-2000:]
    assert "not in the local HF cache" not in fallen_back.stderr
    assert json.loads(fallen_back.stdout.splitlines()[-1])["weights_source"] == "random-init"


def test_a_link_loop_or_a_broken_link_in_a_model_folder_is_a_clear_error(tmp_path):
    """A folder of the user's whose files include a loop of symlinks, or a link to nowhere: a LoadError naming the
    file and the folder (the stage's one line, exit 2), not a RuntimeError traceback."""
    for name, make in (
        ("loop", lambda folder: ((folder / "a").symlink_to(folder / "b"), (folder / "b").symlink_to(folder / "a"))),
        ("broken", lambda folder: (folder / "a").symlink_to(folder / "nowhere")),
    ):
        source = tmp_path / name
        source.mkdir()
        (source / "config.json").write_text("{}")
        make(source)
        named = re.escape(f"{source}/") + "[ab]" + re.escape(f" in the model folder {source} cannot be read")
        with pytest.raises(load_models.LoadError, match=named):
            load_models.link_tree(source, tmp_path / f"{name}-linked")
