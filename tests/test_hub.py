"""keras-hub backbones as encoders (simclr_tf.models.hub, `--encoder=hub:<spec>`).

Tiny backbones by class name (a 2-stack ResNet, a 2-layer ViT on 32 px images), so
each test takes a few seconds; presets are written to tmp_path, never downloaded.
Skipped when keras-hub (an optional extra) is not installed; when it is installed but
does not import (a missing requirement), every test errors, naming what is missing.
"""
import importlib.util
import json
import re
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.model_fixtures import randomise
from helpers.standin_model import random_batch
from simclr_tf.method import optimizers, train
from simclr_tf.config import Config
from simclr_tf.models import SimCLRModel, freeze_for_finetuning, hub

if importlib.util.find_spec("keras_hub") is None:
    pytest.skip(f"keras-hub is not installed (an optional extra): {hub.INSTALL_COMMAND}",
                allow_module_level=True)
try:
    keras_hub = hub.import_keras_hub()
except ImportError as error:  # installed but broken: every test here fails, saying why
    keras_hub, IMPORT_ERROR = None, str(error)
else:
    IMPORT_ERROR = None

IMAGE_SIZE = 32
# keras-hub's ResNet wants 64 filters in its first stack (and its stem to match).
TINY_RESNET = dict(input_conv_filters=[64], input_conv_kernel_sizes=[3],
                   stackwise_num_filters=[64, 16], stackwise_num_blocks=[1, 1],
                   stackwise_num_strides=[1, 2], block_type="basic_block")
TINY_VIT = dict(image_shape=[IMAGE_SIZE, IMAGE_SIZE, 3], patch_size=16, num_layers=2,
                num_heads=2, hidden_dim=16, mlp_dim=32)


@pytest.fixture(autouse=True)
def _keras_hub_imports():
    if IMPORT_ERROR:
        pytest.fail(IMPORT_ERROR, pytrace=False)


def images(batch=2, seed=0):
    return np.random.default_rng(seed).uniform(
        size=(batch, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")


def hub_model(spec, hub_config=None, vit_pool="token", **kwargs):
    model = SimCLRModel(encoder=f"hub:{spec}", num_proj_layers=2, proj_out_dim=8,
                        encoder_options=dict(vit_pool=vit_pool, hub_config=hub_config or {}),
                        **kwargs)
    model.build((None, IMAGE_SIZE, IMAGE_SIZE, 3))
    return model


def test_resnet_by_class_name_pools_the_backbones_own_output():
    model = hub_model("ResNetBackbone", TINY_RESNET, num_classes=3)
    encoder = model.encoder
    randomise(encoder)
    assert isinstance(encoder, hub.HubEncoder)
    assert isinstance(encoder.backbone, keras_hub.models.ResNetBackbone)
    assert encoder.feature_names == ("P2", "P3", "final_avg_pool")
    assert encoder.output_dim == 16
    x = images()
    outputs = model(x, training=False)
    h = outputs["final_avg_pool"]
    assert h.dtype == tf.float32 and h.shape == (2, 16)
    feature_map = encoder.backbone(x, training=False).numpy()  # [B, h, w, 16]
    np.testing.assert_allclose(h, feature_map.mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)
    assert outputs["P3"].shape == feature_map.shape
    assert outputs["logits_sup"].shape == (2, 3)


@pytest.mark.parametrize("pool", ["token", "mean"])
def test_vit_by_class_name_takes_the_class_token_or_the_mean(pool):
    model = hub_model("ViTBackbone", TINY_VIT, vit_pool=pool)
    encoder = model.encoder
    randomise(encoder)
    assert encoder.feature_names == ("final_avg_pool",)
    assert encoder.output_dim == 16
    x = images()
    tokens = encoder.backbone(x, training=False).numpy()  # [B, 1 + 4, 16]
    expected = tokens[:, 0] if pool == "token" else tokens[:, 1:].mean(axis=1)
    h = model(x, training=False)["final_avg_pool"]
    np.testing.assert_allclose(h, expected, rtol=1e-5, atol=1e-6)


def test_vit_no_decay_variables_are_its_class_token_position_embedding_and_1d():
    encoder = hub_model("ViTBackbone", TINY_VIT).encoder
    excluded = {w.path for w in encoder.no_decay_variables()}
    embedding = "vit_patching_and_embedding"
    assert f"{embedding}/class_token" in excluded
    assert f"{embedding}/position_embedding/embeddings" in excluded
    assert not any(path.endswith("kernel") for path in excluded)
    # Everything else it excludes is a norm or a bias; every matrix decays.
    assert all(len(w.shape) == 1 for w in encoder.no_decay_variables()
               if w.path not in (f"{embedding}/class_token",
                                 f"{embedding}/position_embedding/embeddings"))


def test_preset_directory_loads_identical_weights_and_its_converter(tmp_path):
    source = hub_model("ResNetBackbone", TINY_RESNET).encoder.backbone
    randomise(source, seed=3)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    source.save_to_preset(str(tmp_path))
    keras_hub.layers.ResNetImageConverter(
        scale=list(1 / (255 * std)), offset=list(-mean / std)).save_to_preset(str(tmp_path))

    model = hub_model(str(tmp_path))
    loaded = model.encoder.backbone
    assert [w.path for w in loaded.weights] == [w.path for w in source.weights]
    for a, b in zip(loaded.weights, source.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    # The converter's map of [0, 255] pixels, applied to [0, 1] images.
    x = images()
    normalised = ((x - mean) / std).astype("float32")
    expected = source(normalised, training=False).numpy().mean(axis=(1, 2))
    np.testing.assert_allclose(model(x, training=False)["final_avg_pool"], expected,
                               rtol=1e-4, atol=1e-5)
    assert model.encoder.get_config()["spec"] == str(tmp_path)


@pytest.mark.large  # 7.2 s
def test_config_round_trip_rebuilds_the_same_architecture():
    encoder = hub_model("ViTBackbone", TINY_VIT, vit_pool="mean").encoder
    config = json.loads(json.dumps(keras.saving.serialize_keras_object(encoder)))
    copy = keras.saving.deserialize_keras_object(config)
    copy.build((None, IMAGE_SIZE, IMAGE_SIZE, 3))
    assert (copy.spec, copy.hub_config, copy.pool) == ("ViTBackbone", TINY_VIT, "mean")
    assert [(w.path, tuple(w.shape)) for w in copy.weights] == [
        (w.path, tuple(w.shape)) for w in encoder.weights]


def test_checkpoint_restores_every_backbone_variable(tmp_path):
    model = hub_model("ResNetBackbone", TINY_RESNET)
    randomise(model, seed=5)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    restored = hub_model("ResNetBackbone", TINY_RESNET)
    tf.train.Checkpoint(model=restored).read(path).assert_consumed()
    for a, b in zip(restored.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_fine_tune_after_block_4_freezes_the_whole_backbone():
    model = hub_model("ResNetBackbone", TINY_RESNET, num_classes=3,
                      supervised_head_stop_gradient=False)
    assert freeze_for_finetuning(model, 4) == [model.encoder.backbone]
    assert model.encoder.trainable_weights == []
    trainable = {id(w) for w in model.trainable_weights}
    assert trainable == {id(w) for w in model.projection_head.trainable_weights
                         + model.supervised_head.trainable_weights}
    # Frozen batch norm runs in inference mode: training=True leaves its statistics.
    before = [w.numpy() for w in model.encoder.non_trainable_weights]
    model(images(), training=True)
    for w, value in zip(model.encoder.non_trainable_weights, before):
        np.testing.assert_array_equal(w.numpy(), value, err_msg=w.path)
    with pytest.raises(ValueError, match="has 1"):
        freeze_for_finetuning(hub_model("ResNetBackbone", TINY_RESNET), 2)


@pytest.mark.large  # 12 s
def test_lars_pretraining_step_changes_the_weights():
    strategy = tf.distribute.get_strategy()
    keras.utils.set_random_seed(0)
    model = hub_model("ViTBackbone", TINY_VIT, num_classes=5)
    optimizer, decay = optimizers.build_optimization("lars", 0.5, model=model,
                                                     weight_decay=1e-4)
    trainer = train.Trainer(strategy, model, optimizer, train.StepOptions(temperature=0.5),
                            weight_decay_loss=decay)
    before = [w.numpy() for w in model.encoder.trainable_weights]
    v1, v2, labels = random_batch(8, IMAGE_SIZE, seed=1)
    data = tf.data.Dataset.from_tensors(((v1, v2), labels)).repeat()
    logs = trainer.train_steps(iter(data), 1)
    assert np.isfinite(float(logs["loss"]))
    moved = [np.abs(w.numpy() - b).max() for w, b in
             zip(model.encoder.trainable_weights, before)]
    assert min(moved) > 0, "every backbone variable trains"


@pytest.mark.bfloat16  # 0.2 s beside the file's tests since 075168f (3.4 s before)
def test_mixed_precision_backbone_computes_in_bfloat16_and_h_is_float32():
    model = hub_model("ResNetBackbone", TINY_RESNET, dtype="mixed_bfloat16")
    assert model.encoder.backbone.dtype_policy.name == "mixed_bfloat16"
    assert all(w.dtype == "float32" for w in model.weights)
    outputs = model(images(), training=False)
    assert outputs["P3"].dtype == tf.bfloat16
    assert outputs["final_avg_pool"].dtype == tf.float32


@pytest.mark.parametrize("spec, match", [
    ("ResNetBackbon", "not a backbone class of keras_hub.models; did you mean ResNetBackbone"),
    ("ResNetImageClassifier", "not a backbone class"),
    ("/no/such/preset", "not a keras-hub preset directory"),
])
def test_bad_specs_fail_clearly_without_downloading(spec, match):
    with pytest.raises(ValueError, match=match):
        hub_model(spec)


def test_bad_class_arguments_name_the_class_and_the_flag():
    with pytest.raises(ValueError, match=r"ViTBackbone\(.*--encoder_config.*image_shape"):
        hub_model("ViTBackbone", {k: v for k, v in TINY_VIT.items() if k != "image_shape"})
    with pytest.raises(ValueError, match="applies to a backbone class"):
        hub.load_backbone("resnet_50_imagenet", {"depth": 1})


def test_config_passes_encoder_config_to_the_backbone():
    config = Config.from_dict(dict(encoder="hub:ViTBackbone", encoder_config=json.dumps(TINY_VIT),
                                   vit_pool="mean", image_size=IMAGE_SIZE, model_dir="/tmp/unused",
                                   proj_out_dim=8, num_proj_layers=2))
    model = SimCLRModel(**config.model_kwargs())
    model.build((None, IMAGE_SIZE, IMAGE_SIZE, 3))
    assert model.encoder.backbone.num_layers == 2 and model.encoder.pool == "mean"


def test_missing_keras_hub_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras_hub", None)  # as if not installed
    with pytest.raises(ImportError, match="keras-hub is not installed. Install it with "
                       + re.escape(f"`{hub.INSTALL_COMMAND}`")):
        hub_model("ResNetBackbone", TINY_RESNET)
