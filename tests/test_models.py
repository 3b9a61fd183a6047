"""The 12 published checkpoints: labels, parameter counts, input shapes, and a forward pass of each class.

Where each expected parameter count comes from: every card's `expected.params` is the count of the architecture
built from the card (transformers 5.23.0); `expected.paper_params_m` is the figure the model's paper publishes,
rounded as published (cited in the card). The built model must match the first within 0.5% and the second within
its rounding plus 2%: a drifted config (wrong depth, width or head) fails both.
"""

from pathlib import Path

import pytest
import torch

from compilebench import checkpoints
from compilebench.harness import models

# The doc's table labels for its 12 checkpoints (../shared/seeds/perf_torch_compile.zh.md).
DOC_LABELS = {
    "google/vit-base-patch16-224": "ViT",
    "microsoft/beit-base-patch16-224-pt22k-ft22k": "BeiT",
    "facebook/convnext-large-224": "ConvNeXT",
    "microsoft/resnet-50": "ResNet",
    "nvidia/segformer-b0-finetuned-ade-512-512": "Segformer",
    "facebook/mask2former-swin-tiny-coco-panoptic": "Mask2former",
    "facebook/maskformer-swin-base-ade": "Maskformer",
    "google/deeplabv3_mobilenet_v2_1.0_513": "MobileNet",
    "google/owlvit-base-patch32": "OwlViT",
    "facebook/detr-resnet-50": "DETR",
    "facebook/detr-resnet-101": "Resnet-101",
    "microsoft/conditional-detr-resnet-50": "Conditional-DETR",
}
CARDS = list(models.registry().values())
IDS = [card.label for card in CARDS]


def test_all_twelve_checkpoints_registered_with_doc_labels():
    assert {card.hub_id: card.label for card in CARDS} == DOC_LABELS


@pytest.mark.parametrize("card", CARDS, ids=IDS)
def test_card_is_complete(card):
    assert card.revision and card.sources and card.tiny_config and card.tiny_processor
    assert card.input_shapes and "pixel_values" in card.input_shapes


@pytest.mark.parametrize("card", CARDS, ids=IDS)
def test_full_size_param_count(card):
    with torch.device("meta"):  # the real architecture, without allocating its weights
        model = models.model_class(card)(models.build_config(card, "full"))
    built = models.count_params(model)
    assert abs(built / card.params - 1) <= 0.005, f"{card.hub_id}: built {built}, card says {card.params}"
    if card.paper_params_m is not None:
        decimals = len(str(card.paper_params_m).split(".")[1]) if "." in str(card.paper_params_m) else 0
        allowed = 0.5 * 10**-decimals + 0.02 * card.paper_params_m
        assert abs(built / 1e6 - card.paper_params_m) <= allowed, f"{card.hub_id}: {built / 1e6:.2f}M vs paper"


@pytest.mark.parametrize("card", CARDS, ids=IDS)
def test_processor_gives_published_input_shapes(card, image_640x480):
    inputs, text_source = models.single_inputs(card, models.build_processor(card, "full"), image_640x480)
    shapes = {key: list(value.shape) for key, value in inputs.items()}
    for key, expected in card.input_shapes.items():
        if key in ("input_ids", "attention_mask"):
            assert shapes[key] == expected
        else:
            assert shapes[key] == [1, *expected], f"{card.hub_id}: {key} {shapes[key]} != published {expected}"
    assert text_source == ("card-token-ids" if card.text_queries else "none")


def test_owlvit_queries_are_the_docs():
    card = models.get_card("google/owlvit-base-patch32")
    assert card.text_queries == ["a photo of a cat", "a photo of a dog"]
    text = models.card_text_inputs(card)
    assert text["input_ids"].shape == (2, 16)
    assert text["attention_mask"].sum(dim=1).tolist() == [7, 7]


@pytest.mark.parametrize("batch_size", [1, 4, 16])
@pytest.mark.parametrize("card", CARDS, ids=IDS)
def test_tiny_forward_each_batch_size(card, batch_size, image_640x480):
    model = models.random_model(card, "tiny", seed=0)
    single, _ = models.single_inputs(card, models.build_processor(card, "tiny"), image_640x480)
    inputs = models.forward_inputs(model, models.batch_inputs(single, batch_size))
    for key, value in inputs.items():
        per_item = 2 * batch_size if key in ("input_ids", "attention_mask") else batch_size  # two queries per image
        assert value.shape[0] == per_item, f"{key}: {tuple(value.shape)}"
    if "pixel_mask" in single:
        assert "pixel_mask" in inputs  # detection and mask models get the processor's pixel mask
    with torch.no_grad():
        output = model(**inputs)
    first = output.logits if hasattr(output, "logits") else output.to_tuple()[0]
    assert first.shape[0] == batch_size
    assert torch.isfinite(first).all()


def test_batch_inputs_repeats_every_tensor():
    single = {"pixel_values": torch.ones(1, 3, 4, 4), "pixel_mask": torch.ones(1, 4, 4), "input_ids": torch.ones(2, 16)}
    batched = models.batch_inputs(single, 3)
    assert [tuple(v.shape) for v in batched.values()] == [(3, 3, 4, 4), (3, 4, 4), (6, 16)]


def test_unknown_model_lists_registered():
    with pytest.raises(models.CardError, match="registered"):
        models.get_card("acme/nope")


def test_unreadable_card_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hub_id: [unclosed")
    with pytest.raises(models.CardError, match="cannot be read"):
        models.load_card(bad)
    bad.write_text("hub_id: a/b\n")
    with pytest.raises(models.CardError, match="missing keys"):
        models.load_card(bad)
    bad.write_bytes("label: Caf\u00e9\n".encode("latin-1"))  # not UTF-8: an error naming the file, no traceback
    with pytest.raises(models.CardError, match=r"bad\.yaml: cannot be read \(a card is UTF-8 YAML\)"):
        models.load_card(bad)


def test_a_local_folder_with_a_long_name_gets_a_bounded_unique_slug(tmp_path):
    """A folder name of 250 characters would make trial files longer than the 255 a file system takes."""
    long_a, long_b = tmp_path / ("m" * 250), tmp_path / "other" / ("m" * 250)
    slug_a, slug_b = checkpoints.slug(str(long_a)), checkpoints.slug(str(long_b))
    assert len(slug_a) <= 90 and slug_a != slug_b  # the path's hash keeps two such folders apart
    assert checkpoints.slug(str(tmp_path / "short")).startswith("local--short--")


def test_models_command_lists_all_twelve(repo_root):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "compilebench.harness.models"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for hub_id, label in DOC_LABELS.items():
        assert hub_id in done.stdout and label in done.stdout
    assert "800x1066" in done.stdout and "not loaded" in done.stdout


def test_a_broken_card_in_the_registry_is_a_clear_error(tmp_path):
    import shutil

    for card in CARDS[:2]:
        shutil.copy(card.path, tmp_path)
    (tmp_path / "broken.yaml").write_text("hub_id: [unclosed")
    with pytest.raises(models.CardError, match=r"broken\.yaml: cannot be read"):
        models.registry(tmp_path)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda card: card.update(trust_remote_code=True), "unknown key(s) `trust_remote_code`"),
        (lambda card: card.update(weights_file="pytorch_model.bin"), "unknown key(s) `weights_file`"),
        (lambda card: card["config"].update(trust_remote_code=True), "code from a checkpoint is never run"),
        (lambda card: card["config"].update(auto_map={"AutoModel": "x.Y"}), "code from a checkpoint is never run"),
        (lambda card: card["expected"].update(parms=1), "unknown key(s) `expected.parms`"),
        (lambda card: card["tiny"].update(confg={}), "unknown key(s) `tiny.confg`"),
    ],
)
def test_cards_are_validated_like_params(tmp_path, edit, needle):
    """A card is data that builds code: an unknown key (a typo, or a flag that would be ignored) or anything that
    would run code from a checkpoint is an error naming the key, before any model is built."""
    import yaml

    raw = yaml.safe_load(Path(models.get_card("facebook/detr-resnet-50").path).read_text())
    edit(raw)
    path = tmp_path / "card.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(models.CardError) as error:
        models.load_card(path)
    assert needle in str(error.value) and "card.yaml" in str(error.value)


def test_checkpoints_saved_here_carry_the_backbone_flags_transformers_4_needs(tmp_path):
    import json

    for hub_id in ("facebook/detr-resnet-50", "facebook/maskformer-swin-base-ade", "microsoft/resnet-50"):
        card = models.get_card(hub_id)
        folder = tmp_path / card.slug("tiny")
        models.build_checkpoint(models.recipe(card, "tiny", 0, str(folder)), folder)
        config = json.loads((folder / "config.json").read_text())
        if "backbone_config" in config:
            assert config["use_timm_backbone"] is False and config["backbone"] is None
            nested = config.get("decoder_config") or {}
            assert "backbone_config" not in nested or nested["use_timm_backbone"] is False
        else:
            assert "use_timm_backbone" not in config
