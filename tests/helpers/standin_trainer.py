"""What the loop reads of a Trainer besides its steps, for the tests' stand-in trainers."""
from simclr_tf.method import train


def standin_objective(trainer, options):
    """The objective of `options.train_mode`, on `trainer` (a stand-in: the objective
    only keeps it)."""
    trainer.options = options
    return train.objective_class(options.train_mode)(trainer)
