"""Helpers for tests of `simclr_tf.weights.official`: checkpoints with chosen variable names,
the authors' variable lists (tests/data) and small models in the authors' layout."""
import os

import numpy as np
import tensorflow as tf

from simclr_tf.weights import official
from simclr_tf.models import SimCLRModel
from helpers.model_fixtures import randomise  # noqa: F401  (re-exported for the tests)
from helpers.official_layout import export_official_layout

# The authors' variable lists (names and shapes, made with their code): tests/data/README.md.
DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
R50_SK0_VARIABLES = os.path.join(DATA, "official_r50_1x_sk0_variables.tsv")
R50_SK1_VARIABLES = os.path.join(DATA, "official_r50_1x_sk1_variables.tsv")

# A small stand-in for the released R50 1x: the same family (ResNet-50 bottlenecks,
# ImageNet stem, 3-layer nonlinear head, supervised head) at 1/8 width, 10 classes.
SMALL_R50 = dict(encoder_options=dict(depth=50, width_multiplier=0.125), num_proj_layers=3,
                 proj_out_dim=16, num_classes=10)
# The flags (run_fixtures.config) that describe SMALL_R50.
SMALL_R50_FLAGS = dict(encoder="resnet", resnet_depth=50, width_multiplier=0.125,
                       num_proj_layers=3, proj_out_dim=16, stem="imagenet")
# The same at depth 18 (basic blocks): for tests of the run around a released model
# (flags, preflight, loading into a run), whose subject is not the bottleneck; it
# builds and traces in about a third of SMALL_R50's time.
SMALL_R18 = dict(SMALL_R50, encoder_options=dict(depth=18, width_multiplier=0.125))
SMALL_R18_FLAGS = dict(SMALL_R50_FLAGS, resnet_depth=18)


def write_small_official(directory, seed=0, **kwargs):
    """Writes a small model with random weights (SMALL_R50 unless `kwargs` say
    otherwise) in the authors' released layout to `directory`.

    Returns:
        `(directory, model)`: the folder (as load_official takes it) and the model
        whose weights it holds.
    """
    model = SimCLRModel(**(kwargs or SMALL_R50))
    model.build((None, None, None, 3))
    randomise(model, seed=seed)
    export_official_layout(model, directory)
    return str(directory), model


def read_tsv(path):
    """`{full name: shape}` from one of the authors' variable lists (tests/data)."""
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


def write_r50_names_and_shapes(directory, variables=R50_SK0_VARIABLES):
    """Writes a checkpoint with the variable names and shapes of the authors' released
    R50 (a variable list from tests/data) and zero values, as `directory/variables/`.

    What inspecting the released model reads (its architecture), without its weights
    and without building a model. Returns the folder, as `load_official` takes it.
    """
    values = {name: np.zeros(shape, "float32") for name, shape in read_tsv(variables).items()}
    write_named(os.path.join(os.fspath(directory), "variables", "variables"), values)
    return os.fspath(directory)
