"""The last differences from the authors' code (issue 14): each against their
behaviour, in closed form or recorded values."""
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf import experiment, official

from helpers.run_fixtures import config

REFERENCE_MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                               "reference", "official_r50_1x_sk0")


class _NoResume:
    def recover(self):
        return None


def _head_kernel(model):
    return model.supervised_head.weights[0].numpy()


def test_zero_init_logits_layer_zeroes_a_fitting_head_from_our_checkpoint(tmp_path):
    """Without the flag a head that fits is loaded (the authors' TF2 code keeps the
    pretraining run's online head); with it the head starts at zero (TF1, the paper)."""
    source = experiment.build_model(config(model_dir=str(tmp_path)),
                                    tf.distribute.get_strategy(), 10)
    for weight in source.supervised_head.weights:
        weight.assign(tf.ones_like(weight))
    prefix = tf.train.Checkpoint(model=source).write(str(tmp_path / "pretrain" / "ckpt-7"))
    for zero_init, expected in ((False, 1.0), (True, 0.0)):
        cfg = config(model_dir=str(tmp_path / "ft"), train_mode="finetune",
                     checkpoint=prefix, zero_init_logits_layer=zero_init)
        model = experiment.build_model(cfg, tf.distribute.get_strategy(), 10)
        assert experiment.initialize(cfg, model, _NoResume()) == prefix
        np.testing.assert_array_equal(_head_kernel(model),
                                      np.full(_head_kernel(model).shape, expected))
        np.testing.assert_array_equal(  # the encoder loads either way
            model.encoder.weights[0].numpy(), source.encoder.weights[0].numpy())
    # Another number of classes: never loaded, whatever the flag.
    other = config(model_dir=str(tmp_path / "ft"), train_mode="finetune", checkpoint=prefix)
    model = experiment.build_model(other, tf.distribute.get_strategy(), 7)
    experiment.initialize(other, model, _NoResume())
    assert np.abs(_head_kernel(model)).max() < 0.5  # its own random init


@pytest.mark.slow
def test_zero_init_logits_layer_zeroes_the_released_models_head(tmp_path):
    """The 1%/10% fine-tuning path (both flagfiles set the flag): the released
    1000-class head was loaded over the zeros before (kernel max 0.208)."""
    released = official.load_official(REFERENCE_MODEL)
    expected = _head_kernel(released)
    assert np.abs(expected).max() > 0.1
    common = dict(model_dir=str(tmp_path / "ft"), train_mode="finetune",
                  checkpoint=REFERENCE_MODEL, resnet_depth=50, width_multiplier=1,
                  num_proj_layers=3, proj_out_dim=128, stem="imagenet", image_size=32)
    for zero_init in (True, False):
        cfg = config(zero_init_logits_layer=zero_init, **common)
        model = experiment.build_model(cfg, tf.distribute.get_strategy(), 1000)
        experiment.initialize(cfg, model, _NoResume())
        if zero_init:
            assert not _head_kernel(model).any()
        else:
            np.testing.assert_array_equal(_head_kernel(model), expected)
        np.testing.assert_array_equal(model.encoder.weights[0].numpy(),
                                      released.encoder.weights[0].numpy())
