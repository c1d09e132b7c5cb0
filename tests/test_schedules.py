"""Step arithmetic and the warmup + cosine schedule, as tables of numbers."""
import math

import keras
import numpy as np
import pytest

from simclr_tf.method import schedules


@pytest.mark.parametrize("kwargs,expected", [
    # CIFAR-10, the authors' command: 50000 examples, batch 512, 1000 epochs, warmup 10.
    (dict(num_examples=50000, batch_size=512, train_epochs=1000, warmup_epochs=10),
     (97657, 976, 98, 0)),
    # ImageNet, batch 4096, 100 epochs: 1281167 * 100 // 4096 + 1; 12811670 // 4096.
    (dict(num_examples=1281167, batch_size=4096, train_epochs=100, warmup_epochs=10,
          eval_examples=50000, eval_batch_size=256),
     (31279, 3127, 313, 196)),
    # train_steps overrides epochs; the 313-step checkpoint interval is clipped to it.
    (dict(num_examples=1281167, batch_size=4096, train_epochs=100, train_steps=100,
          warmup_epochs=10),
     (100, 3127, 100, 0)),
    # Fractional warmup: 0.5 * 50000 // 512 = 48.0 (floor before round, as the reference).
    (dict(num_examples=50000, batch_size=512, train_epochs=1, warmup_epochs=0.5),
     (98, 48, 98, 0)),
    # 2.5 * 1000 // 300 = 8.0; 1000 * 3 // 300 + 1 = 11; checkpoint every 2.5 epochs.
    (dict(num_examples=1000, batch_size=300, train_epochs=3, warmup_epochs=2.5,
          checkpoint_epochs=2.5),
     (11, 8, 8, 0)),
    # Explicit checkpoint and eval steps win.
    (dict(num_examples=1000, batch_size=100, train_epochs=5, checkpoint_steps=7,
          eval_examples=999, eval_batch_size=100, eval_steps=3),
     (51, 0, 7, 3)),
    # A tiny checkpoint_epochs still checkpoints every step, not every 0.
    (dict(num_examples=1000, batch_size=100, train_epochs=1, checkpoint_epochs=0.01,
          eval_examples=1000, eval_batch_size=100),
     (11, 0, 1, 10)),
])
def test_step_table(kwargs, expected):
    plan = schedules.compute_steps(**kwargs)
    assert tuple(plan) == expected
    assert all(isinstance(v, int) for v in plan)


@pytest.mark.parametrize("bad,match", [
    (dict(num_examples=0), "num_examples=0"),
    (dict(batch_size=-1), "batch_size=-1"),
    (dict(train_epochs=0, train_steps=0), "train_steps=0, train_epochs=0"),
    (dict(warmup_epochs=-1), "warmup_epochs=-1"),
    (dict(eval_batch_size=0), "eval_batch_size=0"),
])
def test_step_arguments_are_validated(bad, match):
    kwargs = dict(num_examples=100, batch_size=10, train_epochs=1)
    kwargs.update(bad)
    with pytest.raises(ValueError, match=match):
        schedules.compute_steps(**kwargs)


def _lr(schedule, step):
    return float(schedule(step))


@pytest.mark.parametrize("scaling,base,batch", [("linear", 0.3, 4096), ("sqrt", 0.075, 4096)])
def test_learning_rate_table(scaling, base, batch):
    # Both are the paper's 4.8 peak at batch 4096.
    schedule = schedules.WarmUpAndCosine(base, batch_size=batch, warmup_steps=10,
                                         total_steps=110, scaling=scaling)
    table = [
        (0, 0.0), (1, 0.48), (5, 2.4), (9, 4.32),  # linear warmup
        (10, 4.8),  # peak, start of the cosine
        (35, 4.8 * 0.5 * (1 + math.cos(math.pi / 4))),  # 4.0970...
        (60, 2.4),  # half-way through the decay
        (109, 4.8 * 0.5 * (1 + math.cos(math.pi * 0.99))),
        (110, 0.0), (500, 0.0),  # stays at 0 after the end
    ]
    for step, expected in table:
        assert _lr(schedule, step) == pytest.approx(expected, abs=1e-5), step


def test_scalings():
    assert schedules.scaled_learning_rate(1.0, 512, "linear") == 2.0
    assert schedules.scaled_learning_rate(0.3, 256, "linear") == pytest.approx(0.3)
    assert schedules.scaled_learning_rate(0.075, 1024, "sqrt") == pytest.approx(2.4)
    with pytest.raises(ValueError, match="scaling='log'"):
        schedules.scaled_learning_rate(1.0, 512, "log")


def test_no_warmup_starts_at_peak():
    schedule = schedules.WarmUpAndCosine(1.0, batch_size=512, warmup_steps=0, total_steps=4)
    np.testing.assert_allclose([_lr(schedule, s) for s in range(5)],
                               [2.0, 2.0 * 0.5 * (1 + math.cos(math.pi / 4)), 1.0,
                                2.0 * 0.5 * (1 + math.cos(3 * math.pi / 4)), 0.0], atol=1e-6)


def test_matches_keras_cosine_decay_with_warmup():
    # An independent implementation of the same curve.
    ours = schedules.WarmUpAndCosine(1.0, batch_size=512, warmup_steps=976,
                                     total_steps=97657)
    theirs = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=97657 - 976, warmup_target=2.0, warmup_steps=976)
    for step in [0, 1, 500, 975, 976, 977, 10000, 50000, 97000, 97656, 97657]:
        assert _lr(ours, step) == pytest.approx(float(theirs(step)), rel=1e-5, abs=1e-6)


def test_run_shorter_than_warmup_has_no_division_by_zero():
    schedule = schedules.WarmUpAndCosine(1.0, batch_size=256, warmup_steps=10, total_steps=5)
    assert _lr(schedule, 4) == pytest.approx(0.4)
    assert math.isfinite(_lr(schedule, 20))


def test_config_round_trip():
    schedule = schedules.WarmUpAndCosine(0.075, batch_size=1024, warmup_steps=3,
                                         total_steps=20, scaling="sqrt")
    config = schedule.get_config()
    clone = schedules.WarmUpAndCosine.from_config(config)
    assert clone.get_config() == config
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule))
    assert isinstance(restored, schedules.WarmUpAndCosine)
    for step in (0, 2, 3, 11, 20):
        assert _lr(restored, step) == _lr(schedule, step)


def test_schedule_arguments_are_validated():
    with pytest.raises(ValueError, match="total_steps=0"):
        schedules.WarmUpAndCosine(1.0, batch_size=256, warmup_steps=0, total_steps=0)
    with pytest.raises(ValueError, match="scaling='cubic'"):
        schedules.WarmUpAndCosine(1.0, batch_size=256, warmup_steps=0, total_steps=5,
                                  scaling="cubic")


def test_schedule_refuses_rates_beyond_float32_after_batch_scaling():
    """1e45 is inf in float32 (every weight NaN at the first update); 1e38 is finite
    but not once scaled for a batch of 4096 (1.6e39)."""
    for base, batch in ((1e45, 256), (1e38, 4096), (float("inf"), 256)):
        with pytest.raises(ValueError, match=r"base_learning_rate=.*beyond float32"):
            schedules.WarmUpAndCosine(base, batch_size=batch, warmup_steps=1, total_steps=10)
    assert schedules.WarmUpAndCosine(1e37, batch_size=4096, warmup_steps=1,
                                     total_steps=10).peak == pytest.approx(1.6e38)
