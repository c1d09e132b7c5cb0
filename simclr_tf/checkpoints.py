"""Checkpoints: resume a run from its model_dir, or initialise from another run.

Object-based `tf.train.Checkpoint`s of `model` + `optimizer` (slots and step
included). On start, a checkpoint in model_dir wins (resume); otherwise `--checkpoint`
initialises the encoder and projection head only (its supervised head may have
another number of classes), and at least the encoder must load: a checkpoint that
matches nothing fails instead of silently leaving random weights.
"""
import os

import tensorflow as tf

from simclr_tf import export


def _saved_model_variables(directory):
    prefix = os.path.join(directory, "variables", "variables")
    return prefix if tf.io.gfile.exists(prefix + ".index") else None


def resolve_checkpoint_path(path):
    """A checkpoint prefix for `path`.

    Args:
        path: a checkpoint prefix ('/run/ckpt-1000'), a run directory ('/run': its
            latest checkpoint, else its latest export), or one of our SavedModel
            directories ('/run/saved_model/1000': its variables).

    Raises:
        FileNotFoundError: naming the path and what was expected there.
    """
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            latest = _saved_model_variables(path)
        if latest is None and export.latest_export(path) is not None:
            latest = _saved_model_variables(export.latest_export(path))
        if latest is None:
            raise FileNotFoundError(
                f"No checkpoint in directory {path!r}: expected a 'checkpoint' file "
                "written by a training run, a SavedModel (saved_model.pb and "
                "variables/), or pass a checkpoint prefix such as "
                f"{os.path.join(path, 'ckpt-1000')!r}.")
        return latest
    if tf.io.gfile.exists(path + ".index"):
        return path
    raise FileNotFoundError(
        f"--checkpoint {path!r} is neither a directory of checkpoints nor a checkpoint "
        "prefix (no '.index' file next to it).")


class CheckpointState:
    """The checkpoint of a training run in `model_dir`.

    Args:
        model_dir: the run's directory.
        model: the model (built).
        optimizer: the optimizer (built), or None for evaluation.
        max_to_keep: checkpoints kept (`keep_checkpoint_max`).
    """

    def __init__(self, model_dir, model, optimizer=None, max_to_keep=5):
        items = dict(model=model)
        if optimizer is not None:
            items["optimizer"] = optimizer
        self.model = model
        self.has_optimizer = optimizer is not None
        self.checkpoint = tf.train.Checkpoint(**items)
        self.manager = tf.train.CheckpointManager(self.checkpoint, model_dir,
                                                  max_to_keep=max_to_keep)

    @property
    def latest(self):
        return self.manager.latest_checkpoint

    def restore_latest(self):
        """Restores the latest checkpoint in model_dir; returns its path or None."""
        latest = self.latest
        if latest is not None:
            if self.has_optimizer:
                self.checkpoint.restore(latest).assert_existing_objects_matched()
            else:
                restore_model(self.model, latest)
        return latest

    def save(self, step):
        return self.manager.save(checkpoint_number=int(step))


def restore_model(model, prefix):
    """Restores every variable of `model` (no optimizer) from a checkpoint prefix.

    Raises if any variable of the model finds nothing to load, so evaluating with a
    mismatched model fails instead of reporting a random model's accuracy.
    """
    # `read` (not `restore`): the checkpoint's own save counter is not required, so a
    # SavedModel's variables/ (an export) restores too.
    status = tf.train.Checkpoint(model=model).read(prefix)
    status.assert_existing_objects_matched()
    status.expect_partial()  # the optimizer's slots stay unread


def initialize_from(model, path):
    """Loads the encoder and projection head of `model` from another run's checkpoint.

    Args:
        model: a built `SimCLRModel`.
        path: checkpoint prefix or directory (see `resolve_checkpoint_path`).

    Returns:
        The checkpoint prefix that was read.
    """
    prefix = resolve_checkpoint_path(path)
    parts = tf.train.Checkpoint(encoder=model.encoder,
                                projection_head=model.projection_head)
    tf.train.Checkpoint(model=parts).read(prefix).expect_partial()
    # Raises if any encoder variable found nothing to load from.
    tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=model.encoder)).read(
        prefix).expect_partial().assert_existing_objects_matched()
    return prefix
