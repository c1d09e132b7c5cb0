"""`simclr_tf.SimCLR` under `model.fit` against the loop (`loop.run_steps`) as reference.

Same initial weights, same batches, LARS: fit's weights must equal the loop's and its
epoch logs the loop's means, on 1 and 2 replicas; BackupAndRestore must resume a fit
exactly; the errors for what fit cannot do must say so.
"""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import simclr_tf
from simclr_tf.method import optimizers, schedules, train
from simclr_tf.run import distribute, loop
from helpers.standin_model import make_model, random_batch

GLOBAL_BATCH = 8
IMAGE_SIZE = 8


def _strategy(num_replicas):
    if num_replicas == 1:
        return tf.distribute.get_strategy()
    # Collectives numbered apart from every earlier strategy's (`create_strategy`).
    return distribute.create_strategy("mirrored", num_devices=num_replicas)


def _parts(strategy, train_mode="pretrain", total_steps=4):
    """A fresh stand-in network (same initial weights every time), its optimizer and
    loss weight decay, built under `strategy`."""
    with strategy.scope():
        network = make_model(IMAGE_SIZE, head_stop_gradient=train_mode == "pretrain")
        schedule = schedules.WarmUpAndCosine(2.0, batch_size=GLOBAL_BATCH, warmup_steps=1,
                                             total_steps=total_steps)
        optimizer, decay = optimizers.build_optimization(
            "lars", schedule, model=network, weight_decay=1e-3)
    return network, optimizer, decay


def _dataset(train_mode, num_steps, seed=10):
    steps = [random_batch(GLOBAL_BATCH, IMAGE_SIZE, seed=seed + s) for s in range(num_steps)]
    view1, view2, labels = (np.concatenate(c) for c in zip(*steps))
    first = (view1, view2) if train_mode == "pretrain" else view1
    dataset = tf.data.Dataset.from_tensor_slices((first, labels))
    return dataset.batch(GLOBAL_BATCH, drop_remainder=True)  # static shapes (grad cache)


def _weights(network):
    return [w.numpy() for w in network.weights]


@pytest.mark.parametrize("num_replicas,train_mode,grad_cache_chunk", [
    pytest.param(1, "pretrain", 0, marks=pytest.mark.large),  # 4 s
    pytest.param(2, "pretrain", 0, marks=pytest.mark.large),  # 13 s
    pytest.param(1, "pretrain", 2, marks=pytest.mark.large),  # 5 s
    (1, "finetune", 0)])
def test_fit_equals_the_loop(num_replicas, train_mode, grad_cache_chunk):
    steps = 3
    dataset = _dataset(train_mode, steps)
    options = train.StepOptions(train_mode=train_mode, temperature=0.2,
                                grad_cache_chunk=grad_cache_chunk)

    strategy = _strategy(num_replicas)
    network, optimizer, decay = _parts(strategy, train_mode)
    trainer = train.Trainer(strategy, network, optimizer, options, weight_decay_loss=decay)
    expected = loop.run_steps(trainer, iter(strategy.experimental_distribute_dataset(dataset)),
                              steps)
    expected_weights = _weights(network)

    strategy = _strategy(num_replicas)
    network, optimizer, decay = _parts(strategy, train_mode)
    with strategy.scope():
        model = simclr_tf.SimCLR(network, options, weight_decay_loss=decay)
    model.compile(optimizer=optimizer)
    history = model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)

    assert int(optimizer.iterations.numpy()) == steps
    # The same step code, one step per call as the loop's default: the same floats.
    for variable, got, want in zip(network.weights, _weights(network), expected_weights):
        np.testing.assert_array_equal(got, want, err_msg=variable.path)
    logs = {name: values[0] for name, values in history.history.items()}
    # Less the loop's timings (speed, the wait for input: Keras reads the data itself).
    assert set(logs) == set(expected) - {"examples_per_sec", "data_wait", "input_share"}
    for name in logs:
        # float32 running means (Keras) against float64 ones (loop.Means).
        np.testing.assert_allclose(logs[name], expected[name], rtol=1e-6, err_msg=name)
    assert logs["num_examples"] == GLOBAL_BATCH  # the global batch, not a replica's
    assert logs["learning_rate"] == expected["learning_rate"]  # the last step's


def _blur(views, seed):
    """A stand-in blur that depends on its seed (the step's): a resumed run must
    blur as an uninterrupted one."""
    factor = 0.5 + 0.5 * tf.random.stateless_uniform([], seed)
    return [v * factor for v in views]


class _Interrupt(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
            raise KeyboardInterrupt("preempted")


def _fit_two_epochs(backup_dir, callbacks=()):
    network, optimizer, decay = _parts(tf.distribute.get_strategy(), total_steps=5)
    model = simclr_tf.SimCLR(network, train.StepOptions(temperature=0.2, blur_fn=_blur),
                             weight_decay_loss=decay)
    model.compile(optimizer=optimizer)
    # Two batches repeated: every epoch of 2 steps sees them in the same order, so a
    # resumed epoch reads what an uninterrupted one does.
    dataset = _dataset("pretrain", 2).repeat()
    history = model.fit(dataset, epochs=2, steps_per_epoch=2, verbose=0, callbacks=[
        keras.callbacks.BackupAndRestore(backup_dir), *callbacks])
    return model, history


@pytest.mark.large  # 4 s
def test_backup_and_restore_resumes_exactly(tmp_path):
    uninterrupted, _ = _fit_two_epochs(str(tmp_path / "a"))

    backup = str(tmp_path / "b")
    with pytest.raises(KeyboardInterrupt):
        _fit_two_epochs(backup, [_Interrupt()])
    with open(tmp_path / "b" / "training_metadata.json") as f:
        assert json.load(f)["epoch"] == 1
    # A fresh model and optimizer, as in a new process: the backup restores weights,
    # optimizer slots and step, and fit continues at epoch 1.
    checkpoint = str(tmp_path / "weights.weights.h5")
    resumed, history = _fit_two_epochs(backup, [
        keras.callbacks.TensorBoard(str(tmp_path / "tb")),
        keras.callbacks.ModelCheckpoint(checkpoint, save_weights_only=True),
        keras.callbacks.TerminateOnNaN()])

    assert len(history.history["loss"]) == 1  # epoch 1 only
    assert int(resumed.optimizer.iterations.numpy()) == 4
    for variable, got, want in zip(resumed.network.weights, _weights(resumed.network),
                                   _weights(uninterrupted.network)):
        np.testing.assert_array_equal(got, want, err_msg=variable.path)
    assert any(p.name.startswith("events") for p in (tmp_path / "tb" / "train").iterdir())
    # The weights checkpoint loads into a fresh model (network and optimizer).
    network, optimizer, decay = _parts(tf.distribute.get_strategy(), total_steps=5)
    fresh = simclr_tf.SimCLR(network, train.StepOptions(temperature=0.2), weight_decay_loss=decay)
    fresh.compile(optimizer=optimizer)
    fresh.load_weights(checkpoint)
    assert int(optimizer.iterations.numpy()) == 4
    for got, want in zip(_weights(network), _weights(resumed.network)):
        np.testing.assert_array_equal(got, want)


def test_terminate_on_nan_stops_at_the_first_nan_loss():
    network, optimizer, decay = _parts(tf.distribute.get_strategy())
    model = simclr_tf.SimCLR(network, train.StepOptions(temperature=0.2), weight_decay_loss=decay)
    model.compile(optimizer=optimizer)
    dataset = _dataset("pretrain", 3).map(lambda views, labels: (
        tf.nest.map_structure(lambda v: v * np.nan, views), labels))
    # Stopped by SimCLR's guard, which runs before TerminateOnNaN would only end the
    # epoch (and let the epoch-end callbacks save the NaN weights).
    with pytest.raises(simclr_tf.method.keras_fit.NonFiniteTrainingError, match="loss is nan"):
        model.fit(dataset, epochs=2, steps_per_epoch=3, verbose=0,
                  callbacks=[keras.callbacks.TerminateOnNaN()])
    assert int(optimizer.iterations.numpy()) == 1


def test_call_returns_the_networks_outputs():
    network = make_model(IMAGE_SIZE)
    model = simclr_tf.SimCLR(network)
    images = random_batch(4, IMAGE_SIZE)[0]
    got, want = model(images), network(images)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name].numpy(), want[name].numpy())


def test_what_fit_cannot_do_is_refused_clearly(tmp_path):
    network, optimizer, _ = _parts(tf.distribute.get_strategy())
    model = simclr_tf.SimCLR(network)
    with pytest.raises(ValueError, match=r"own loss.*compile\(optimizer=\.\.\.\) only.*loss='mse'"):
        model.compile(optimizer=optimizer, loss="mse")
    with pytest.raises(ValueError, match="metrics=\\['accuracy'\\]"):
        model.compile(optimizer=optimizer, metrics=["accuracy"])
    with pytest.raises(ValueError, match="temperature=0"):
        simclr_tf.SimCLR(network, train.StepOptions(temperature=0))
    with pytest.raises(ValueError, match="built"):
        simclr_tf.SimCLR(keras.Sequential([keras.layers.Dense(2)]))
    model.compile(optimizer=optimizer)
    with pytest.raises(ValueError, match="no evaluation step.*simclr_tf.evaluation"):
        model.evaluate(_dataset("pretrain", 1), verbose=0)
    with pytest.raises(NotImplementedError, match="save_weights_only=True"):
        model.save(str(tmp_path / "model.keras"))


def test_multiworker_strategy_is_refused_with_the_way_out():
    # A MultiWorkerMirroredStrategy object without a cluster: only its type matters
    # (a real one would need workers, see tests/test_multiworker.py).
    multiworker = tf.distribute.MultiWorkerMirroredStrategy.__new__(
        tf.distribute.MultiWorkerMirroredStrategy)
    message = r"MultiWorkerMirroredStrategy.*keras-team/keras#20585.*run\.py --strategy=multiworker"
    network, optimizer, _ = _parts(tf.distribute.get_strategy())
    model = simclr_tf.SimCLR(network)
    model._distribute_strategy = multiworker
    with pytest.raises(ValueError, match=message):
        model.compile(optimizer=optimizer)
    model._distribute_strategy = None
    model.compile(optimizer=optimizer)
    model._distribute_strategy = multiworker
    with pytest.raises(ValueError, match=message):
        model.fit(_dataset("pretrain", 1), verbose=0)



def _all_finite_h5(path):
    import h5py  # pylint: disable=import-outside-toplevel
    arrays = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: arrays.append(item[()])
                     if isinstance(item, h5py.Dataset) and item.dtype.kind == "f" else None)
    return arrays and all(np.isfinite(a).all() for a in arrays)


class _Poison(keras.callbacks.Callback):
    """Makes a weight infinite after the last step of epoch 1 (a finite step can leave
    infinite weights, e.g. an infinite rate)."""

    def __init__(self, network):
        super().__init__()
        self.network = network

    def on_train_batch_end(self, batch, logs=None):
        if batch == 1:
            self.network.proj.kernel.assign(self.network.proj.kernel * np.inf)


def test_fit_never_lets_a_callback_save_non_finite_weights(tmp_path):  # 8 s
    """The README's callbacks: a NaN step stops fit with NonFiniteTrainingError before
    TerminateOnNaN ends the epoch, so ModelCheckpoint keeps the last finite weights and
    BackupAndRestore its backup; infinite weights at an epoch's end stop it too."""
    network, optimizer, decay = _parts(tf.distribute.get_strategy(), total_steps=6)
    model = simclr_tf.SimCLR(network, train.StepOptions(temperature=0.2), weight_decay_loss=decay)
    model.compile(optimizer=optimizer)
    finite = _dataset("pretrain", 2)
    poisoned = finite.map(lambda views, labels: ((views[0] * np.nan, views[1]), labels))
    checkpoint, backup = tmp_path / "last.weights.h5", tmp_path / "backup"
    callbacks = [keras.callbacks.TerminateOnNaN(),
                 keras.callbacks.ModelCheckpoint(str(checkpoint), save_weights_only=True),
                 keras.callbacks.BackupAndRestore(str(backup))]
    with pytest.raises(simclr_tf.method.keras_fit.NonFiniteTrainingError,
                       match=r"loss is nan by step 3.*No callback has seen"):
        model.fit(finite.concatenate(poisoned), epochs=2, steps_per_epoch=2, verbose=0,
                  callbacks=callbacks)
    assert _all_finite_h5(checkpoint)  # epoch 1's
    assert os.listdir(backup)  # kept: a rerun resumes from epoch 1

    network, optimizer, decay = _parts(tf.distribute.get_strategy(), total_steps=6)
    model = simclr_tf.SimCLR(network, train.StepOptions(temperature=0.2), weight_decay_loss=decay)
    model.compile(optimizer=optimizer)
    later = tmp_path / "later.weights.h5"
    with pytest.raises(simclr_tf.method.keras_fit.NonFiniteTrainingError,
                       match=r"after step 2 \(epoch 1\), 1 weight.*" + network.proj.kernel.path):
        model.fit(finite, epochs=1, steps_per_epoch=2, verbose=0, callbacks=[
            _Poison(network), keras.callbacks.ModelCheckpoint(str(later),
                                                              save_weights_only=True)])
    assert not later.exists()
