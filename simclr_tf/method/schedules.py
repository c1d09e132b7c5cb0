"""Learning-rate schedule (linear warmup + cosine decay) and epochs -> steps arithmetic."""
import math
from typing import NamedTuple

import keras
import tensorflow as tf

from simclr_tf.config import rules

# Pure arithmetic, in rules.py so that Config can check the scaled rate without TF.
scaled_learning_rate = rules.scaled_learning_rate


class StepPlan(NamedTuple):
    """Step counts of one run (see `compute_steps`)."""
    total_steps: int
    warmup_steps: int
    checkpoint_steps: int
    eval_steps: int


def _check_positive(name, value):
    if not value > 0:
        raise ValueError(f"{name} must be > 0. Received: {name}={value!r}")


def _check_non_negative(name, value):
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0. Received: {name}={value!r}")


def compute_steps(*, num_examples, batch_size, train_epochs=0, train_steps=0,
                  warmup_epochs=0.0, checkpoint_epochs=1.0, checkpoint_steps=0,
                  eval_examples=0, eval_batch_size=1, eval_steps=0):
    """Turns the reference's epoch/step flags into step counts.

    The arithmetic is the authors' (including its integer-division quirks, so that
    schedules match theirs step for step), except that the checkpoint interval never
    exceeds the total (the reference overshoots a short `train_steps`).

    Args:
        num_examples: examples in the training split, > 0.
        batch_size: global training batch size, > 0.
        train_epochs: epochs to train; used when `train_steps` is 0.
        train_steps: if > 0, the total number of steps (overrides epochs).
        warmup_epochs: float epochs of linear warmup.
        checkpoint_epochs: float epochs between checkpoints; used when
            `checkpoint_steps` is 0.
        checkpoint_steps: if > 0, steps between checkpoints.
        eval_examples: examples in the evaluation split (for `eval_steps` = 0).
        eval_batch_size: global evaluation batch size, > 0.
        eval_steps: if > 0, evaluation steps; 0 means the whole split (the last
            batch may be partial).

    Returns:
        A `StepPlan`:
        total_steps = train_steps or num_examples * train_epochs // batch_size + 1;
        warmup_steps = round(warmup_epochs * num_examples // batch_size);
        checkpoint_steps = min(checkpoint_steps or
            max(1, round(checkpoint_epochs * num_examples / batch_size)), total_steps);
        eval_steps = eval_steps or ceil(eval_examples / eval_batch_size).

    Raises:
        ValueError: naming the first invalid argument.
    """
    _check_positive("num_examples", num_examples)
    _check_positive("batch_size", batch_size)
    _check_positive("eval_batch_size", eval_batch_size)
    for name, value in (("train_epochs", train_epochs), ("train_steps", train_steps),
                        ("warmup_epochs", warmup_epochs),
                        ("checkpoint_epochs", checkpoint_epochs),
                        ("checkpoint_steps", checkpoint_steps),
                        ("eval_examples", eval_examples), ("eval_steps", eval_steps)):
        _check_non_negative(name, value)
    if not train_steps and not train_epochs:
        raise ValueError(
            "One of train_steps or train_epochs must be > 0. Received: "
            f"train_steps={train_steps!r}, train_epochs={train_epochs!r}")

    total = int(train_steps) if train_steps else int(num_examples * train_epochs // batch_size + 1)
    # `//` on a float keeps the reference's floor-then-round order.
    warmup = int(round(warmup_epochs * num_examples // batch_size))
    if checkpoint_steps:
        checkpoint = int(checkpoint_steps)
    else:
        checkpoint = max(1, int(round(checkpoint_epochs * num_examples / batch_size)))
    checkpoint = min(checkpoint, total)
    evaluation = int(eval_steps) if eval_steps else int(math.ceil(eval_examples / eval_batch_size))
    return StepPlan(total_steps=total, warmup_steps=warmup,
                    checkpoint_steps=checkpoint, eval_steps=evaluation)


@keras.saving.register_keras_serializable(package="simclr_tf")
class WarmUpAndCosine(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to the scaled peak, then cosine decay to 0 at `total_steps`.

    lr(step) = peak * step / warmup_steps                         for step < warmup_steps
             = peak * 0.5 * (1 + cos(pi * min(step - warmup, decay) / decay)) otherwise,
    with decay = total_steps - warmup_steps and peak from `scaled_learning_rate`.

    Args:
        base_learning_rate: base learning rate (>= 0) before batch scaling.
        batch_size: global training batch size.
        warmup_steps: steps of linear warmup (>= 0).
        total_steps: steps of the whole run (> 0); the rate is 0 from there on.
        scaling: 'linear' (base * batch / 256) or 'sqrt' (base * sqrt(batch)).

    Raises:
        ValueError: a negative base rate, or a scaled one beyond float32's range.

    Example:
        plan = compute_steps(num_examples=50000, batch_size=512, train_epochs=1000,
                             warmup_epochs=10)
        lr = WarmUpAndCosine(1.0, batch_size=512, warmup_steps=plan.warmup_steps,
                             total_steps=plan.total_steps)
    """

    def __init__(self, base_learning_rate, *, batch_size, warmup_steps, total_steps,
                 scaling="linear"):
        _check_non_negative("base_learning_rate", base_learning_rate)
        _check_non_negative("warmup_steps", warmup_steps)
        _check_positive("total_steps", total_steps)
        self.peak = rules.checked_peak_learning_rate(base_learning_rate, batch_size, scaling)
        self.base_learning_rate = base_learning_rate
        self.batch_size = batch_size
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.scaling = scaling

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak = tf.constant(self.peak, tf.float32)
        warmup = float(self.warmup_steps)
        if self.warmup_steps:
            warmup_lr = peak * step / warmup
        else:
            warmup_lr = peak
        # max(., 1): a run shorter than its warmup never reaches the cosine part,
        # but the graph must not divide by zero.
        decay = float(max(self.total_steps - self.warmup_steps, 1))
        progress = tf.minimum(step - warmup, decay) / decay
        cosine_lr = peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
        return tf.where(step < warmup, warmup_lr, cosine_lr)

    def get_config(self):
        return dict(base_learning_rate=self.base_learning_rate,
                    batch_size=self.batch_size, warmup_steps=self.warmup_steps,
                    total_steps=self.total_steps, scaling=self.scaling)
