"""A linear evaluation keeps the encoder frozen: weights and batch-norm statistics.

The authors' code runs the frozen encoder of --fine_tune_after_block=4 with
training=True, so its BN moving statistics follow the fine-tuning data; ours sets
the frozen stages' `trainable = False`, which (Keras 3, and our fused
`layers.BatchNormalization`) normalises with the moving statistics and never
updates them, and builds every optimizer and every weight decay on the trainable
variables only. Checked here through the run's own assembly (`parts.build_model`,
`parts.build_trainer`) for each optimizer with a weight decay large enough to show,
and for feature extraction (kNN, probe, embed), which must touch no statistic. The
end-to-end version, a fine-tune from the session's tiny run, is in
tests/test_tiny_run.py.
"""
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.evaluation import features
from simclr_tf.run.modes import parts

from helpers.model_fixtures import randomise
from helpers.run_fixtures import RESNET, config

BATCH = 8


def _finetune_batches(steps, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.uniform(size=(steps * BATCH, 16, 16, 3)).astype(np.float32)
    labels = rng.integers(0, 10, size=steps * BATCH).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(BATCH)


def _values(variables):
    return {v.path: v.numpy().copy() for v in variables}


def _finetuned(strategy, steps=2, **overrides):
    """(encoder variables before, after, head before, after) of `steps` fine-tuning
    steps of a ResNet-18 (width 1/8) built and trained as a run would."""
    cfg = config(train_mode="finetune", train_batch_size=BATCH, train_steps=steps,
                 model_dir="/nonexistent/not_written", **RESNET,
                 **overrides)
    model = parts.build_model(cfg, strategy, 10)
    randomise(model, seed=1)  # moving statistics away from their 0 / 1 start
    trainer = parts.build_trainer(cfg, strategy, model)
    before, head_before = _values(model.encoder.weights), _values(model.supervised_head.weights)
    iterator = iter(strategy.experimental_distribute_dataset(_finetune_batches(steps)))
    trainer.train_steps(iterator, steps)
    return (before, _values(model.encoder.weights), head_before,
            _values(model.supervised_head.weights))


def _moving_statistics(values):
    return [path for path in values if "moving_mean" in path or "moving_variance" in path]


def _check_frozen(before, after, head_before, head_after):
    assert len(_moving_statistics(before)) > 10  # what a linear evaluation must keep
    changed = [path for path in before if not np.array_equal(before[path], after[path])]
    assert not changed, changed
    assert any(not np.array_equal(head_before[p], head_after[p]) for p in head_before)


@pytest.mark.large  # 8-12 s each (the default tier's fine-tune: tests/test_tiny_run.py)
@pytest.mark.parametrize("optimizer", ["lars", "momentum", "adam", "adamw"])
def test_linear_evaluation_changes_no_encoder_variable(optimizer):
    """--fine_tune_after_block=4 under each optimizer, weight decay 0.1 (LARS decays
    in its update, momentum and Adam through the loss, AdamW decoupled): every
    encoder variable, BN moving statistics included, is bit-equal after the steps;
    the supervised head trained."""
    _check_frozen(*_finetuned(tf.distribute.get_strategy(), optimizer=optimizer,
                              weight_decay=0.1, fine_tune_after_block=4))


@pytest.mark.large  # 17 s
def test_linear_evaluation_on_two_replicas_with_global_bn_changes_no_encoder_variable():
    """Synchronised BN on two replicas takes Keras' own path in training mode; a
    frozen layer takes the moving statistics there too."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    _check_frozen(*_finetuned(strategy, weight_decay=0.1, fine_tune_after_block=4,
                              global_bn=True))


@pytest.mark.large  # 37 s (two fine-tunes, one through the whole encoder)
def test_the_control_a_full_fine_tune_changes_weights_and_statistics():
    """The comparison can fail: fine-tuning everything (-1) moves the encoder's
    kernels and its BN moving statistics; freezing up to block group 2 keeps those of
    the stem and groups 1-2 and moves the others."""
    before, after, _, _ = _finetuned(tf.distribute.get_strategy(), fine_tune_after_block=-1)
    changed = {path for path in before if not np.array_equal(before[path], after[path])}
    assert set(_moving_statistics(before)) <= changed
    assert any("kernel" in path for path in changed)
    before, after, _, _ = _finetuned(tf.distribute.get_strategy(), fine_tune_after_block=2)
    changed = {path for path in before if not np.array_equal(before[path], after[path])}
    frozen = [p for p in before if "/stem/" in p or "block_group1" in p or "block_group2" in p]
    assert frozen and not changed & set(frozen)
    assert any("block_group4" in path and "moving_mean" in path for path in changed)


def test_feature_extraction_touches_no_batch_norm_statistic():
    """The probe's, the kNN monitor's and embed's features come from the model in
    inference mode: every variable of the model is bit-equal after an extraction
    (a call with training=True, the control, moves the moving statistics)."""
    cfg = config(model_dir="/nonexistent/not_written")
    strategy = tf.distribute.get_strategy()
    model = parts.build_model(cfg, strategy, 10)
    randomise(model, seed=2)
    before = _values(model.weights)
    from simclr_tf.run import preflight  # pylint: disable=import-outside-toplevel
    source = preflight.load_source(cfg)
    extracted = features.extract(strategy, model, source, "test[:40]", image_size=16,
                                 batch_size=16)
    assert extracted[features.H].shape[0] == 40
    after = _values(model.weights)
    assert all(np.array_equal(before[p], after[p]) for p in before)
    model(tf.zeros([4, 16, 16, 3]), training=True)
    trained = _values(model.weights)
    assert any(not np.array_equal(before[p], trained[p]) for p in _moving_statistics(before))
