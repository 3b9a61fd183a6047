"""Your own model: any image checkpoint without a card, from a local folder or the HF cache, through the real
pipeline (Swin, YOLOS and DPT, none among the doc's 12) on your own image; each checkpoint that cannot run is
refused naming the model, before any timing."""

import json
import os
import shutil
import subprocess
import sys

import mlflow
import pandas as pd
import pytest
import transformers as tf
from conftest import init_project, make_project, project_env, run_ok, set_params, write_own_checkpoints
from PIL import Image

from compilebench import checkpoints, load_models
from compilebench.config import ConfigError, load_config
from compilebench.harness import models

pytestmark = pytest.mark.xdist_group("own_checkpoints")  # the module fixtures run once

EXPECTED = {  # folder: (task, class)
    "swin-tiny-cls": ("image-classification", "SwinForImageClassification"),
    "yolos-tiny-det": ("object-detection", "YolosForObjectDetection"),
    "dpt-tiny-seg": ("semantic-segmentation", "DPTForSemanticSegmentation"),
}


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    return write_own_checkpoints(tmp_path_factory.mktemp("own-checkpoints"))


def test_the_task_and_class_come_from_the_checkpoint_config(own):
    for name, folder in own.items():
        info = checkpoints.inspect(folder, name)
        assert (info.task, info.model_class) == EXPECTED[name]


def _bert(folder):
    config = tf.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    tf.BertForSequenceClassification(config).save_pretrained(folder)
    tf.ViTImageProcessor().save_pretrained(folder)  # even with an image processor, BERT is not a vision model


def _edit_config(**changes):
    def edit(folder):
        config = json.loads((folder / "config.json").read_text())
        config.update(changes)
        (folder / "config.json").write_text(json.dumps(config))

    return edit


def _pickle_weights(folder):
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 not loaded")


def _cut_weights(folder):
    weights = folder / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # a download cut short: the header's offsets run past the end


def _foreign_weights(folder):
    from safetensors.numpy import save_file

    save_file({"encoder.other.weight": __import__("numpy").zeros(2, "float32")}, str(folder / "model.safetensors"))


BAD = [  # (how the Swin folder is spoiled, what the error says)
    (lambda folder: (folder / "config.json").unlink(), "has no config.json"),
    (lambda folder: (folder / "preprocessor_config.json").unlink(), "has no preprocessor_config.json"),
    (_pickle_weights, "weights only as pytorch_model.bin; compilebench loads safetensors only"),
    (_edit_config(auto_map={"AutoModel": "modeling_mine.MyModel"}), "would need trust_remote_code"),
    (_edit_config(architectures=["MyCustomForImageClassification"]), "would need trust_remote_code"),
    (_edit_config(architectures=["SwinForMaskedImageModeling"]), "has no supported task"),
    (_edit_config(architectures=[]), "names no `architectures`"),
    ("bert", "model_type 'bert' is not a vision model"),
    (
        lambda folder: (folder / "model.safetensors").write_bytes(b""),
        "model.safetensors is not a readable "
        "safetensors file (SafetensorError: Error while deserializing header: header too small)",
    ),
    (
        lambda folder: (folder / "model.safetensors").write_bytes(b"not weights" * 99),
        "model.safetensors is not a "
        "readable safetensors file (SafetensorError: Error while deserializing header: header too large)",
    ),
    (_cut_weights, "incomplete metadata, file not fully covered"),
    (_foreign_weights, "its .safetensors files hold 1 tensor(s), none of them one of SwinForImageClassification's"),
]


@pytest.mark.parametrize(("spoil", "needle"), BAD, ids=[needle.split(";")[0] for _, needle in BAD])
def test_a_checkpoint_that_cannot_run_is_refused_naming_the_model(tmp_path, own, spoil, needle):
    folder = tmp_path / "my-model"
    if spoil == "bert":
        _bert(folder)
    else:
        shutil.copytree(own["swin-tiny-cls"], folder)
        spoil(folder)
    with pytest.raises(checkpoints.CheckpointError) as error:
        load_models.materialise_uncarded(str(folder), tmp_path / "checkpoints", "auto", online=False)
    assert str(error.value).startswith(f"{folder}: ") and needle in str(error.value)
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


def test_a_model_folder_that_is_a_loop_of_links_is_refused_naming_it(tmp_path):
    folder, other = tmp_path / "my-model", tmp_path / "other"
    folder.symlink_to(other)
    other.symlink_to(folder)
    with pytest.raises(checkpoints.CheckpointError) as error:
        load_models.materialise_uncarded(str(folder), tmp_path / "checkpoints", "auto", online=False)
    assert str(error.value).startswith(f"{folder}: the folder cannot be resolved (Symlink loop")
    assert not (tmp_path / "checkpoints").exists()


def test_random_init_and_tiny_scale_need_a_card(tmp_path, own, repo_root):
    with pytest.raises(load_models.LoadError, match="has no card"):
        load_models.materialise_uncarded(str(own["swin-tiny-cls"]), tmp_path, "random-init", online=False)
    params = repo_root / "params.yaml"
    with pytest.raises(ConfigError, match="has no card, and `scale: tiny`"):
        load_config(params, ["suites.smoke.models=[/data/my-swin]"])
    with pytest.raises(ConfigError, match="neither a Hub id"):
        load_config(params, ["suites.cpu.models=[my model with spaces]"])
    assert load_config(params, ["suites.cpu.models=[acme/swin-ft,./ckpts/swin,~/dpt]"]).selected.models


def test_a_zero_shot_detector_without_a_card_needs_its_tokenizer(tmp_path):
    folder = tmp_path / "owlv2-tiny"
    config = tf.Owlv2Config(
        text_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 16,
        },
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 16,
        },
    )
    tf.Owlv2ForObjectDetection(config).save_pretrained(folder)
    tf.Owlv2ImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    entry = load_models.materialise_uncarded(str(folder), tmp_path / "checkpoints", "auto", online=False)
    assert entry["task"] == "zero-shot-object-detection"
    with pytest.raises(load_models.LoadError, match="needs its tokenizer"):
        load_models.uncarded_spec(entry, ["a photo of a cat"])


def test_a_hub_id_without_a_card_loads_from_the_hf_cache_offline(tmp_path, own):
    """Any Hub id: configs, then safetensors, from the HF cache with the Hub unreachable (a fresh process, as a
    user's run reads HF_HUB_CACHE at import)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "models--acme--swin-finetuned"
    shutil.copytree(own["swin-tiny-cls"], repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    code = (
        "import json, sys; from pathlib import Path; from compilebench import load_models\n"
        "print(json.dumps(load_models.materialise_uncarded('acme/swin-finetuned', Path(sys.argv[1]), 'auto', "
        "False)))"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    entry = json.loads(done.stdout.strip().splitlines()[-1])
    assert entry["weights_source"] == "hub" and entry["resolved_revision"] == commit
    assert (entry["task"], entry["config_origin"]) == ("image-classification", "hub:acme/swin-finetuned@main")
    assert (tmp_path / "ckpt" / "acme--swin-finetuned" / "model.safetensors").exists()


@pytest.fixture(scope="module")
def own_project(tmp_path_factory, own):
    """The real pipeline (`dvc repro`) on the three local folders and a 320x200 image of the user's."""
    root = tmp_path_factory.mktemp("own-project")
    image = root.parent / "my-image.png"
    Image.new("RGB", (320, 200), (40, 90, 160)).save(image)
    make_project(root, [str(folder) for folder in own.values()])
    set_params(root, **{"image.file": str(image), "suites.smoke.scale": "full"})
    env = project_env()
    init_project(root, env, commit=False)
    done = run_ok(["dvc", "repro"], root, env)
    rows = [json.loads(line) for line in (root / "data/results/runs.jsonl").read_text().splitlines()]
    return root, image, done, rows


@pytest.mark.slow
def test_own_models_run_through_the_pipeline_like_the_twelve(own_project, own, image_640x480):
    root, image, _, rows = own_project
    meta = json.loads((root / "data/image/input.json").read_text())
    assert (meta["image_source"], meta["file"], meta["width"], meta["height"]) == ("file", str(image), 320, 200)
    assert {(row["label"], row["variant"]) for row in rows} == {(n, v) for n in own for v in ("eager", "default")}
    for row in rows:
        assert row["status"] == "ok", (row["label"], row.get("error"))
        assert (row["task"], row["weights_source"]) == (EXPECTED[row["label"]][0], "local")
        assert row["config_origin"] == f"local:{own[row['label']]}"
    compiled = {row["label"]: row for row in rows if row["variant"] == "default"}
    checked = {name: row["task_check"] for name, row in compiled.items() if row["task_agreement"] is not None}
    assert checked == {
        "swin-tiny-cls": "top-5 classes",
        "yolos-tiny-det": "top-10 boxes by IoU >= 0.9",
        "dpt-tiny-seg": "argmax segmentation map",
    }  # each task's own check, on the compiled output
    for name, folder in own.items():  # the shapes the checkpoint's own processor makes of the user's image
        processor = models.load_processor(folder)
        made = processor(images=Image.open(image).convert("RGB"), return_tensors="pt")
        assert json.loads(compiled[name]["input_shapes"]) == {"pixel_values": list(made["pixel_values"].shape)}
    fallback = models.load_processor(own["yolos-tiny-det"])(images=image_640x480, return_tensors="pt")
    assert json.loads(compiled["yolos-tiny-det"]["input_shapes"])["pixel_values"] != list(
        fallback["pixel_values"].shape
    )
    verdicts = pd.read_csv(root / "data/results/verdicts.csv")
    assert verdicts["reason"].str.startswith("no published numbers").all() and len(verdicts) == 3
    mlflow.set_tracking_uri(f"sqlite:///{root}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["compilebench"], filter_string="params.weights_source = 'local'")
    assert sorted(runs["params.model_id"]) == sorted(str(folder) for folder in own.values() for _ in range(2))
    assert set(runs["params.config_origin"]) == {f"local:{folder}" for folder in own.values()}
    report = (root / "data/report/report.md").read_text()
    assert all(name in report for name in own)
    assert sorted(p.name for p in (root / "data/plots").glob("speedup_*.png"))  # figures drawn for them


@pytest.mark.slow
def test_an_exported_plan_carries_the_checkpoints_without_a_card(own_project, own, tmp_path):
    """A GPU box builds carded models from recipes; a model without a card travels as its checkpoint folder."""
    root = own_project[0]
    run_ok([sys.executable, "-m", "compilebench.benchmark", "--export", str(tmp_path / "plan")], root, project_env())
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    carried = json.loads((tmp_path / "plan" / "carried.json").read_text())
    assert plan["recipes"] == [] and sorted(entry["label"] for entry in carried) == sorted(own)
    for entry in carried:
        folder = tmp_path / "plan" / "checkpoints" / checkpoints.slug(entry["model_id"])
        assert (folder / "model.safetensors").read_bytes() == (own[entry["label"]] / "model.safetensors").read_bytes()
    trial_models = {trial["model"]["checkpoint"] for trial in plan["trials"]}
    assert trial_models == {f"checkpoints/{checkpoints.slug(str(folder))}" for folder in own.values()}


def test_a_recipe_that_cannot_be_built_costs_its_model_not_the_window(tmp_path):
    from compilebench.harness import launcher, models
    from compilebench.records.formats import CheckpointRecipe, Plan

    good = models.recipe(models.get_card("microsoft/resnet-50"), "tiny", 0, "checkpoints/resnet")
    broken = CheckpointRecipe(
        "acme/broken", "checkpoints/broken", "NoSuchModel", "NoSuchConfig", {}, "NoSuchProcessor", {}, 0
    )  # a transformers without these classes
    built = launcher.build_checkpoints(Plan("x", (), (broken, good), {}), tmp_path)
    by_model = {entry["model_id"]: entry for entry in built}
    assert "NoSuchConfig" in by_model["acme/broken"]["error"] and by_model["acme/broken"]["param_count"] is None
    assert (
        not (tmp_path / "checkpoints" / "broken").exists()
        and not (tmp_path / "checkpoints" / "broken.partial").exists()
    )
    assert "error" not in by_model["microsoft/resnet-50"] and by_model["microsoft/resnet-50"]["param_count"] > 0
    assert (tmp_path / "checkpoints" / "resnet" / "compilebench-recipe.json").exists()
