"""The base class of a train mode's objective: its loss, on the Trainer's step.

A `simclr_tf.method.train.Trainer` owns the model, the optimizer and the compiled loop; it
builds the objective of its `StepOptions.train_mode` (`simclr_tf.config.tables.train_modes`' row
names the class) and calls `train_step(batch)` in each replica's context. The
objectives write their step out: the rate of the update, the forward and the loss under
a tape, `trainer.total_loss` (+ weight decay, this replica's share), the gradients,
`trainer.apply` (the update); each returns this replica's metrics.
"""
import tensorflow as tf

from simclr_tf.method import collectives, losses
from simclr_tf.models.outputs import LOGITS


class Objective:
    """A train mode's step.

    Args:
        trainer: the `simclr_tf.method.train.Trainer` it runs on (model, optimizer,
            `total_loss`, `apply`, `options`).
        teacher: the fixed teacher (a row with `needs_teacher`), else None.

    Subclasses implement `train_step`; one that owns state (an EMA target, a queue)
    creates its variables in `__init__` and returns them from `state()`: the
    checkpoint saves and restores them with the model's.
    """

    def __init__(self, trainer, teacher=None):
        self.trainer = trainer
        self.options = trainer.options
        self.teacher = teacher

    @property
    def model(self):
        return self.trainer.model

    def option(self, name):
        """This objective's own option `name` (its row's `options`, given in
        `StepOptions.objective_options`)."""
        return dict(self.options.objective_options)[name]

    def non_finite_causes(self):
        """Likely causes of a non-finite loss in this objective's own flags, each a
        phrase for `simclr_tf.run.loop.check_finite`'s message (besides the learning
        rate and the precision)."""
        return ()

    def state(self):
        """{name: trackable} the checkpoint saves besides the model and optimizer."""
        return {}

    def train_step(self, batch):
        """One optimisation step on `batch`; returns this replica's metrics (a dict
        of float32 scalars, `num_examples` among them)."""
        raise NotImplementedError


def logits_of(outputs):
    """The supervised head's logits of the model's `outputs`."""
    if LOGITS not in outputs:
        raise ValueError("The model has no supervised head: its outputs lack "
                         f"'logits_sup'. Received keys: {sorted(outputs)}")
    return outputs[LOGITS]


def label_accuracy(labels, logits, count=None):
    """supervised_acc over the labelled examples of the global batch (0 when there are
    none), scaled like `losses.supervised_loss` so that the mean over replicas is
    exact when replicas hold different numbers of labelled examples. `count`:
    `losses.labelled_count(labels)` when the caller has it (the loss's), else counted."""
    if count is None:
        count = losses.labelled_count(labels)
    correct = losses.top_k_correct(labels, logits, 1)
    replicas = float(collectives.num_replicas_in_sync())
    return dict(supervised_acc=correct * replicas / tf.maximum(count, 1.0))
