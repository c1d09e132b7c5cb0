"""Checkpoints: the one place that knows what weights a path holds and loads them.

- `resolve(path)`: a checkpoint prefix, a run directory, one of our SavedModel
  exports, or one of the authors' released models -> `Weights` (kind, prefix, step).
- `load_into(model, path, whole_model=...)`: every variable (evaluate, export), or
  the encoder and projection head only (initialise from another run: its supervised
  head may have another number of classes); at least the encoder must load, so a
  checkpoint that matches nothing fails instead of leaving random weights.
- `open_encoder(path)`: an encoder to evaluate, from any of those paths.
- `step_of(prefix)`: the global step of a checkpoint.
- `CheckpointState`: a training run's checkpoints in model_dir (object-based
  `tf.train.Checkpoint`s of model + optimizer, slots and step included): save,
  resume with fallbacks, clean-up of interrupted writes.
"""
import dataclasses
import os
import re
from typing import Optional

import tensorflow as tf
from absl import logging

from simclr_tf import export, official
from simclr_tf.config import ARCHITECTURE_FLAGS, ConfigError

CHECKPOINT, EXPORT, RELEASED = "checkpoint", "export", "released"


@dataclasses.dataclass(frozen=True)
class Weights:
    """What a path holds.

    Attributes:
        path: the path as given.
        kind: CHECKPOINT (a training checkpoint of ours), EXPORT (the variables of one
            of our SavedModels) or RELEASED (the authors' released model).
        prefix: the checkpoint prefix to read.
        step: the global step in the prefix, None when it carries none.
    """
    path: str
    kind: str
    prefix: str
    step: Optional[int]


def resolve(path):
    """The `Weights` at `path` (see the module docstring for what it may be).

    Raises:
        FileNotFoundError: naming the path and what was expected there.
    """
    if official.is_official_savedmodel(path):
        return Weights(path, RELEASED, official.checkpoint_prefix(path), None)
    prefix = resolve_checkpoint_path(path)
    kind = EXPORT if prefix.endswith(os.path.join("variables", "variables")) else CHECKPOINT
    return Weights(path, kind, prefix, step_of(prefix))


def latest(model_dir):
    """The newest complete checkpoint recorded in model_dir (None if none or no dir)."""
    return tf.train.latest_checkpoint(model_dir) if model_dir else None


def load_into(model, path, *, whole_model, flag="checkpoint"):
    """Loads the weights at `path` (or a `Weights`) into a built `SimCLRModel`.

    Args:
        model: the model.
        path: anything `resolve` takes, or a `Weights`.
        whole_model: True: every variable of the model must load (evaluation,
            export). False: the encoder and projection head (initialising a run from
            another one). From a released model everything loads either way, its
            supervised head too when the model has one with as many classes.
        flag: the flag that named `path`, for the ConfigError raised when the
            checkpoint does not fit the model ('checkpoint' or 'model_dir').

    Returns:
        The `Weights` that were read.
    """
    weights = path if isinstance(path, Weights) else resolve(path)
    if weights.kind == RELEASED:
        head = model.supervised_head
        fits = head is not None and head.num_classes == official.inspect_official(
            weights.path).config.get("num_classes")
        official.load_official_weights(model, weights.path, supervised_head=fits)
    elif whole_model:
        restore_model(model, weights.prefix, flag=flag)
    else:
        initialize_from(model, weights.prefix, flag=flag)
    return weights


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
        "prefix (no '.index' file next to it); pass a run directory, a prefix such as "
        "'/run/ckpt-1000', or a SavedModel directory.")


class CheckpointState:
    """The checkpoints of a training run in `model_dir`.

    Writes are atomic as far as a reader of model_dir can tell: TensorFlow writes a
    checkpoint's shards under `<prefix>_temp/`, merges them into `<prefix>.index` /
    `.data-*`, and only then rewrites the `checkpoint` state file (write to a temporary
    file, then rename). A process killed mid-write leaves the state file pointing at
    the previous, complete checkpoint plus some orphaned files, which the next start
    removes (`remove_partial_writes`). Restoring falls back to older checkpoints when
    the newest does not load, with a warning naming it.

    Args:
        model_dir: the run's directory; checkpoints are always restored from here.
        model: the model (built).
        optimizer: the optimizer (built), or None for evaluation.
        max_to_keep: checkpoints kept (`keep_checkpoint_max`).
        save_dir: where this process writes its checkpoints, if not model_dir: a
            non-chief worker of a multi-worker run must take part in every save (the
            variables' values are synchronised across workers while saving) but must
            not write over the chief's files, so it writes to a scratch directory.
    """

    def __init__(self, model_dir, model, optimizer=None, max_to_keep=5, save_dir=None):
        items = dict(model=model)
        if optimizer is not None:
            items["optimizer"] = optimizer
        self.model = model
        self.has_optimizer = optimizer is not None
        self.model_dir = model_dir
        self.save_dir = save_dir or model_dir
        self.checkpoint = tf.train.Checkpoint(**items)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.save_dir,
            max_to_keep=max_to_keep if self.save_dir == model_dir else 1)

    @property
    def latest(self):
        """The newest complete checkpoint in model_dir (None when there is none)."""
        return latest(self.model_dir)

    def candidates(self):
        """Checkpoints recorded in model_dir's state file, newest first."""
        state = tf.train.get_checkpoint_state(self.model_dir)
        if state is None:
            return []
        paths = list(state.all_model_checkpoint_paths or [])
        if state.model_checkpoint_path and state.model_checkpoint_path not in paths:
            paths.append(state.model_checkpoint_path)
        paths = [p if os.path.isabs(p) else os.path.join(self.model_dir, p) for p in paths]
        return sorted(set(paths), key=lambda p: step_of(p, -1), reverse=True)

    def restore_latest(self):
        """Restores the newest checkpoint of model_dir that loads; returns its path.

        Returns None when model_dir has no checkpoint. A checkpoint that fails to load
        (missing or damaged files) is skipped with a warning and the previous one is
        tried; RuntimeError when none of them loads.
        """
        candidates = self.candidates()
        failures = []
        for prefix in candidates:
            try:
                if self.has_optimizer:
                    self.checkpoint.restore(prefix).assert_existing_objects_matched()
                else:
                    restore_model(self.model, prefix)
            # Damaged files surface as OpErrors, or IndexError ('Read less bytes').
            except (tf.errors.OpError, ValueError, AssertionError, IndexError) as error:
                reason = str(error).strip().splitlines()[0][:300]
                failures.append(f"{prefix}: {reason}")
                logging.warning("Checkpoint %s does not load (%s); falling back to the "
                                "previous checkpoint.", prefix, reason)
                continue
            if failures:
                logging.warning("Resuming from %s, the newest checkpoint that loads.", prefix)
            return prefix
        if candidates:
            raise RuntimeError("No checkpoint in %r loads:\n  %s" % (
                self.model_dir, "\n  ".join(failures)))
        return None

    def remove_partial_writes(self):
        """Deletes what a killed save left in save_dir; returns the removed paths.

        Removed: `<prefix>_temp*` shard folders, and files of checkpoints newer than
        the newest recorded one (never recorded, so possibly incomplete; training
        writes them again). Recorded and older checkpoints are never touched.
        """
        if not tf.io.gfile.isdir(self.save_dir):
            return []
        state = tf.train.get_checkpoint_state(self.save_dir)
        latest_step = -1
        if state is not None and state.model_checkpoint_path:
            latest_step = step_of(state.model_checkpoint_path, -1)
        base = os.path.basename(self.manager._checkpoint_prefix)  # pylint: disable=protected-access
        removed = []
        for name in tf.io.gfile.listdir(self.save_dir):
            name = name.rstrip("/")
            match = re.fullmatch(re.escape(base) + r"-(\d+)(_temp.*|\.index|\.data-.*)",
                                 name)
            if match is None:
                continue
            if match.group(2).startswith("_temp") or int(match.group(1)) > latest_step:
                path = os.path.join(self.save_dir, name)
                if tf.io.gfile.isdir(path):
                    tf.io.gfile.rmtree(path)
                else:
                    tf.io.gfile.remove(path)
                removed.append(path)
        if removed:
            logging.warning("Removed %d file(s) of an interrupted checkpoint write: %s",
                            len(removed), ", ".join(sorted(removed)))
        return removed

    def save(self, step):
        return self.manager.save(checkpoint_number=int(step))


def step_of(prefix, default=None):
    """The global step in a checkpoint prefix ('.../ckpt-1000' -> 1000), else `default`
    (e.g. a SavedModel's 'variables/variables' or a released model)."""
    tail = prefix.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else default


def restore_model(model, prefix, *, flag="checkpoint"):
    """Restores every variable of `model` (no optimizer) from a checkpoint prefix.

    Raises ConfigError (naming `flag` and the flags to check) if any variable of the
    model finds nothing to load or a tensor of another shape, so evaluating with a
    mismatched model fails instead of reporting a random model's accuracy.
    """
    # `read` (not `restore`): the checkpoint's own save counter is not required, so a
    # SavedModel's variables/ (an export) restores too.
    try:
        status = tf.train.Checkpoint(model=model).read(prefix)
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:  # unmatched variables, other shapes
        raise _does_not_fit(prefix, error, flag) from None
    status.expect_partial()  # the optimizer's slots stay unread


def _does_not_fit(prefix, error, flag):
    """The ConfigError for a checkpoint whose variables the model cannot take (the
    preflight compares flags.json when there is one; this is the check without)."""
    reason = str(error).strip().splitlines()[0].split(", likely")[0][:200]
    flags = " ".join(f"--{name}" for name in ARCHITECTURE_FLAGS)
    return ConfigError(flag, f"{prefix!r} does not fit the model the flags describe "
                       f"({reason}). Pass the flags of the run that wrote it ({flags}); "
                       "for its supervised head also a --dataset with as many classes.")


def initialize_from(model, path, *, flag="checkpoint"):
    """Loads the encoder and projection head of `model` from another run's checkpoint.

    Args:
        model: a built `SimCLRModel`.
        path: checkpoint prefix or directory of ours (see `resolve_checkpoint_path`).
        flag: the flag named in the ConfigError when the checkpoint does not fit.

    Returns:
        The checkpoint prefix that was read.
    """
    prefix = resolve_checkpoint_path(path)
    parts = tf.train.Checkpoint(encoder=model.encoder,
                                projection_head=model.projection_head)
    try:
        tf.train.Checkpoint(model=parts).read(prefix).expect_partial()
        # Raises if any encoder variable found nothing to load from.
        tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=model.encoder)).read(
            prefix).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:  # unmatched variables, other shapes
        raise _does_not_fit(prefix, error, flag) from None
    return prefix


class _SavedModelEncoder:
    """One of our SavedModel exports as `model(images, training=False) -> dict`."""

    def __init__(self, path):
        self.loaded = tf.saved_model.load(path)
        self.image_size = int(self.loaded.image_size.numpy())

    def __call__(self, images, training=False):
        return self.loaded(images, trainable=bool(training))


def open_encoder(path, *, strategy=None):
    """Opens an encoder to evaluate from `path`; returns `(model, image_size,
    description)`.

    Args:
        path: our run directory or checkpoint prefix (the architecture comes from the
            run's flags.json), one of our SavedModel exports
            (`run/saved_model/<step>`), or an authors' released model.
        strategy: build our models under this strategy's scope (default strategy
            when None). SavedModel exports run on the default device.

    Raises:
        FileNotFoundError: nothing loadable at `path`.
    """
    from simclr_tf.config import Config  # pylint: disable=import-outside-toplevel
    from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
    strategy = strategy or tf.distribute.get_strategy()
    if official.is_official_savedmodel(path):
        with strategy.scope():
            model = official.load_official(path, num_classes=None)
        return model, 224, f"released model {path}"
    if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        encoder = _SavedModelEncoder(path)
        return encoder, encoder.image_size, f"SavedModel {path}"
    run_dir = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    flags_file = os.path.join(run_dir, "flags.json")
    if not tf.io.gfile.exists(flags_file):
        raise FileNotFoundError(
            f"No encoder at {path!r}: expected a run directory or checkpoint prefix with "
            "flags.json beside it, a SavedModel export, or an authors' released model.")
    with tf.io.gfile.GFile(flags_file) as f:
        config = Config.from_json(f.read())
    weights = resolve(path)
    with strategy.scope():
        model = SimCLRModel(**config.model_kwargs(None))
        model.build((None, config.image_size, config.image_size, 3))
    restore_model(model, weights.prefix)
    return model, config.image_size, f"checkpoint {weights.prefix}"
