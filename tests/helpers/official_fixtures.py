"""Helpers for tests of `simclr_tf.official`: checkpoints with chosen variable names."""
import numpy as np
import tensorflow as tf

from simclr_tf import official
from helpers.model_fixtures import randomise  # noqa: F401  (re-exported for the tests)


def read_tsv(path):
    """`{full name: shape}` from a `variables.tsv` of the shipped reference."""
    shapes = {}
    with open(path) as f:
        for line in f:
            name, shape = line.rstrip("\n").split("\t")
            shapes[name] = tuple(int(s) for s in shape.strip("[]").split(",") if s)
    return shapes


def read_values(path):
    """`{full name: array}` of every variable of a model in the authors' layout."""
    prefix, names = official.read_official_names(path)
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(key) for name, key in names.items()}


def write_named(prefix, values):
    """Writes an object-based checkpoint whose variables carry the given full names.

    Args:
        prefix: checkpoint prefix (`.../variables/variables`).
        values: `{full name: array}`.
    """
    holder = tf.__internal__.tracking.AutoTrackable()
    holder.variables = [tf.Variable(np.asarray(v), name=n) for n, v in values.items()]
    return tf.train.Checkpoint(model=holder).write(prefix)


