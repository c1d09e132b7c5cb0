"""--mixed_precision: bfloat16 / float16 train steps keep the loss and BN statistics in
float32 and track the float32 step (same weights, same batch) within a loose tolerance."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.method import optimizers, train
from simclr_tf.config import Config
from simclr_tf.run.modes.parts import POLICIES, build_model
from helpers.standin_model import random_batch

IMAGE_SIZE = 16
BATCH = 8


def _config(precision, encoder="resnet"):
    return Config.from_dict(dict(encoder=encoder, resnet_depth=18, width_multiplier=0.125,
                                 image_size=IMAGE_SIZE, num_proj_layers=2,
                                 mixed_precision=precision, model_dir="/tmp/unused",
                                 train_steps=1))


def _step(precision, weights=None):
    """One training step of the tiny encoder (conv, BN, ReLU, the heads: what a policy
    sets; the ResNet's outputs and BN under bfloat16 are the test below): the model,
    its weights before the step and the step's logs."""
    config = _config(precision, encoder="tiny")
    strategy = tf.distribute.get_strategy()
    keras.utils.set_random_seed(0)
    model = build_model(config, strategy, num_classes=5)
    if weights is not None:
        model.set_weights(weights)
    initial = model.get_weights()
    optimizer = optimizers.build_optimizer("lars", 0.3, weight_decay=1e-4, model=model)
    if precision == "float16":
        # A moderate initial scale: the default (2**15) overflows on the first step,
        # which dynamic loss scaling then skips (correctly, but nothing to compare).
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=2.0**8)
    trainer = train.Trainer(strategy, model, optimizer, train.StepOptions(temperature=0.5),
                            weight_decay_loss=optimizers.weight_decay_loss(model, "lars", 1e-4))
    v1, v2, labels = random_batch(BATCH, IMAGE_SIZE, seed=3)
    data = tf.data.Dataset.from_tensors(((v1, v2), labels)).repeat()
    logs = trainer.train_steps(iter(data), 1)
    return model, initial, logs


@pytest.fixture(scope="module")
def float32_step():
    model, initial, logs = _step("none")
    return initial, [w.numpy() for w in model.weights], logs


@pytest.mark.large  # 2-3 s; 6-7 s with the float32 fixture (20 and 30 s on ResNet-18)
@pytest.mark.parametrize("precision", [pytest.param("bfloat16", marks=pytest.mark.bfloat16),
                                       "float16"])
def test_low_precision_step_tracks_float32(precision, float32_step):
    initial, after_fp32, logs_fp32 = float32_step
    model, _, logs = _step(precision, weights=initial)
    assert model.dtype_policy.name == POLICIES[precision]
    assert model.dtype_policy.compute_dtype == precision
    # Variables (BN moving statistics included) and the loss stay float32.
    assert all(w.dtype == "float32" for w in model.weights)
    moving = [w for w in model.non_trainable_weights if "moving" in w.path]
    assert moving and all(w.dtype == "float32" for w in moving)
    for name in ("loss", "contrast_loss", "supervised_loss"):
        assert logs[name].dtype == np.float32 and np.isfinite(logs[name])
        np.testing.assert_allclose(logs[name], logs_fp32[name], rtol=0.03, err_msg=name)
    # The weight updates point the same way as float32's (cosine > 0.9 per tensor
    # with a non-trivial update), and BN statistics move alike.
    for w, start, want in zip(model.weights, initial, after_fp32):
        got, ref = w.numpy() - start, want - start
        if np.linalg.norm(ref) < 1e-6:
            continue
        cosine = np.sum(got * ref) / (np.linalg.norm(got) * np.linalg.norm(ref) + 1e-12)
        assert cosine > 0.9, (w.path, cosine)


@pytest.mark.bfloat16
def test_model_outputs_float32_and_bn_computes_in_float32():
    keras.utils.set_random_seed(0)
    model = build_model(_config("bfloat16"), tf.distribute.get_strategy(), 5)
    outputs = model(tf.random.uniform([4, IMAGE_SIZE, IMAGE_SIZE, 3]), training=True)
    for name in ("final_avg_pool", "proj_head_output", "logits_sup"):
        assert outputs[name].dtype == tf.float32, name
    assert outputs["block_group1"].dtype == tf.bfloat16
