"""What the loop reads of a Trainer besides its steps, for the tests' stand-in trainers."""
from simclr_tf.config.tables import train_modes


def standin_objective(trainer, options):
    """The objective of `options.train_mode`, on `trainer` (a stand-in: the objective
    only keeps it)."""
    trainer.options = options
    return train_modes.get(options.train_mode).objective_class()(trainer)
