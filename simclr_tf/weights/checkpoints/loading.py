"""What weights a path holds, and loading them into a model.

`resolve(path)` -> `Weights`; `load_into` (every variable, or initialise from another
run), `load_latest`, `restore_model`, `initialize_from`, `open_encoder`,
`recorded_run_config` (the flags.json of the run that wrote them).
"""
import dataclasses
import gc
import logging as logging_module
import os
from typing import Optional

import tensorflow as tf
from absl import logging

from simclr_tf.config import rules, run_dirs
from simclr_tf.rundir import records
from simclr_tf.weights import export, official
from simclr_tf.weights.checkpoints.files import _first_line, candidates, deleted, latest, \
    object_variable_shapes, step_of, unreadable_reason
CHECKPOINT, EXPORT, RELEASED = "checkpoint", "export", "released"


class CheckpointMismatchError(ValueError):
    """A checkpoint whose variables the model cannot take: another architecture (or
    a supervised head of another number of classes).

    The caller knows which flag named the checkpoint: `preflight.flag_errors` turns
    this into the ConfigError naming it and the flags to check.

    Attributes:
        prefix: the checkpoint prefix.
        reason: what did not fit (the first line of TensorFlow's error).
    """

    def __init__(self, prefix, reason):
        self.prefix, self.reason = prefix, reason
        super().__init__(f"{prefix!r} does not fit the model ({reason}). Pass the flags "
                         "of the run that wrote it (its flags.json records them); for its "
                         "supervised head also a dataset with as many classes.")


class NoLoadableCheckpointError(ValueError):
    """A directory holds no checkpoint, or none that loads into the model.

    Attributes:
        directory: the directory searched.
        failures: '<prefix>: <why it does not load>' for each checkpoint tried
            (empty: there was none).
    """

    def __init__(self, directory, failures=(), message=None):
        self.directory, self.failures = directory, list(failures)
        if message is None and self.failures:
            message = ("no checkpoint in %r loads into the model of these flags:\n  %s\n"
                       "Pass the flags of the run that wrote them (its flags.json), or "
                       "train first." % (directory, "\n  ".join(self.failures)))
        super().__init__(message or f"{directory!r} has no checkpoint; train first.")


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


def load_into(model, path, *, whole_model, supervised_head=True):
    """Loads the weights at `path` (or a `Weights`) into a built `SimCLRModel`.

    Args:
        model: the model.
        path: anything `resolve` takes, or a `Weights`. A run directory loads its
            newest checkpoint that loads (`load_latest`) when `whole_model`.
        whole_model: True: every variable of the model must load (evaluation,
            export). False: initialising a run from another one: the encoder and
            projection head, and the supervised head when `supervised_head` and the
            source has one with as many classes (any source: ours or released).
        supervised_head: with `whole_model=False`, whether a supervised head that
            fits is loaded (False for `--zero_init_logits_layer`: it stays at zero).

    Returns:
        The `Weights` that were read.

    Raises:
        CheckpointMismatchError: the checkpoint does not fit the model.
        NoLoadableCheckpointError: a run directory has no checkpoint that loads.
    """
    if whole_model and not isinstance(path, Weights) and tf.io.gfile.isdir(path) \
            and candidates(path)[0]:
        # A run directory: its newest checkpoint that loads.
        return resolve(load_latest(model, path))
    weights = path if isinstance(path, Weights) else resolve(path)
    if weights.kind == RELEASED:
        head = model.supervised_head
        fits = head is not None and head.num_classes == official.inspect_official(
            weights.path).config.get("num_classes")
        official.load_official_weights(model, weights.path,
                                       supervised_head=fits and (supervised_head
                                                                 or whole_model))
    elif whole_model:
        restore_model(model, weights.prefix)
    else:
        initialize_from(model, weights.prefix,
                        supervised_head=supervised_head and _same_head_input(model, weights))
    return weights


def head_input(proj_head_mode, num_proj_layers, ft_proj_selector):
    """The projection output a supervised head reads: 0 = h, j = head layer j."""
    layers = rules.num_head_layers(proj_head_mode, num_proj_layers)
    return ft_proj_selector % (layers + 1)


def _same_head_input(model, weights):
    """Whether the supervised head of the run that wrote `weights` (its flags.json)
    reads the projection output `model`'s head reads: a head fits by shape alone
    whenever the head's hidden layers are as wide as h, and one trained on h is not
    a classifier of the first projection layer. Without a record, True (the shapes
    decide, as before)."""
    recorded = recorded_run_config(weights)
    head = getattr(model, "projection_head", None)
    if recorded is None or head is None or getattr(model, "supervised_head", None) is None:
        return True
    source = head_input(recorded.proj_head_mode, recorded.num_proj_layers,
                        recorded.ft_proj_selector)
    target = head_input(head.mode, head.num_proj_layers, head.ft_proj_selector)
    if source != target:
        logging.warning("The supervised head of %s reads projection output %d and this "
                        "model's reads %d: not loaded (it starts at its initialisation).",
                        weights.prefix, source, target)
    return source == target


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
        prefix = latest(path)
        if prefix is None:
            prefix = _saved_model_variables(path)
        if prefix is None and export.latest_export(path) is not None:
            prefix = _saved_model_variables(export.latest_export(path))
        if prefix is None:
            raise FileNotFoundError(
                f"No checkpoint in directory {path!r}: expected a 'checkpoint' file "
                "written by a training run, a SavedModel (saved_model.pb and "
                "variables/), or pass a checkpoint prefix such as "
                f"{os.path.join(path, 'ckpt-1000')!r}.")
        return prefix
    if tf.io.gfile.exists(path + ".index"):
        return path
    raise FileNotFoundError(
        f"{path!r} is neither a directory of checkpoints nor a checkpoint "
        "prefix (no '.index' file next to it); pass a run directory, a prefix such as "
        "'/run/ckpt-1000', or a SavedModel directory.")


def load_latest(model, model_dir):
    """Restores every variable of `model` from model_dir's newest checkpoint that
    loads, falling back to older ones with a warning; returns its prefix. One that a
    training run deletes while it is read (its --keep_checkpoint_max rotation, a
    newer one saved) is no failure: the directory is listed again.

    Raises:
        NoLoadableCheckpointError: model_dir has no checkpoint, or none of them loads
            (each named with its reason).
        CheckpointMismatchError: the newest readable one is of another model (the
            older ones of the run do not fit either).
    """
    failures, tried = [], set()
    while True:
        paths = [p for p in (candidates(model_dir)[0] if model_dir else []) if p not in tried]
        if not paths:
            raise NoLoadableCheckpointError(model_dir, failures)
        prefix = paths[0]
        tried.add(prefix)
        reason = unreadable_reason(prefix)
        if reason is None:
            try:
                restore_model(model, prefix)
                return prefix
            except CheckpointMismatchError:
                raise  # another architecture: older checkpoints of the run do not fit either
            except _LOAD_ERRORS as error:
                if deleted(prefix):
                    logging.info("Checkpoint %s was deleted while it was read; looking "
                                 "for the newest again.", prefix)
                    continue
                reason = _first_line(error)
        failures.append(f"{prefix}: {reason}")
        logging.warning("Checkpoint %s does not load (%s); trying the previous one.",
                        prefix, reason)


# Damaged files surface as OpErrors, or IndexError ('Read less bytes'); a checkpoint
# of another model as AssertionError / ValueError.
_LOAD_ERRORS = (tf.errors.OpError, ValueError, AssertionError, IndexError)


def restore_model(model, prefix):
    """Restores every variable of `model` (no optimizer) from a checkpoint prefix.

    Raises CheckpointMismatchError if any variable of the model finds nothing to load
    or a tensor of another shape, so evaluating with a mismatched model fails instead
    of reporting a random model's accuracy.
    """
    # `read` (not `restore`): the checkpoint's own save counter is not required, so a
    # SavedModel's variables/ (an export) restores too.
    try:
        status = _read_quietly(model, prefix)
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:  # unmatched variables, other shapes
        raise _does_not_fit(prefix, error) from None
    status.expect_partial()  # the optimizer's slots stay unread


class _UnrestoredValues(logging_module.Filter):
    """Drops the lines TensorFlow logs for each value a restore did not reach."""

    LINES = ("Detecting that an object or model or tf.train.Checkpoint is being deleted",
             "Value in checkpoint could not be found in the restored object",
             "An attribute in the restored object could not be found")

    def filter(self, record):
        return not record.getMessage().startswith(self.LINES)


def _read_quietly(model, prefix):
    """`tf.train.Checkpoint(model=model).read(prefix)`; a read that fails part-way
    (a file deleted under it by a training run's rotation) raises its OpError without
    the 70-odd warning lines TensorFlow logs when its restore objects are freed, one
    per value left unread (the optimizer's)."""
    unrestored = _UnrestoredValues()
    tf.get_logger().addFilter(unrestored)
    try:
        checkpoint = tf.train.Checkpoint(model=model)
        try:
            return checkpoint.read(prefix)
        except tf.errors.OpError as error:
            failure = error.with_traceback(None)
            failure.__context__ = failure.__cause__ = None
        # The checkpoint and the error's frames held the restore objects (in cycles):
        # freed here, they log while the filter is on.
        del checkpoint
        gc.collect()
        raise failure
    finally:
        tf.get_logger().removeFilter(unrestored)


def _does_not_fit(prefix, error):
    """The error for a checkpoint whose variables the model cannot take (the
    preflight compares flags.json when there is one; this is the check without)."""
    reason = str(error).strip().splitlines()[0].split(", likely")[0][:200]
    return CheckpointMismatchError(prefix, reason)


def initialize_from(model, path, *, supervised_head=True):
    """Loads the encoder and projection head of `model` from another run's checkpoint,
    and its supervised head when `supervised_head` and the checkpoint has one of the
    same shape (the online linear head of a pretraining run on the same classes).

    Args:
        model: a built `SimCLRModel`.
        path: checkpoint prefix or directory of ours (see `resolve_checkpoint_path`).
        supervised_head: load a supervised head that fits.

    Returns:
        The checkpoint prefix that was read.

    Raises:
        CheckpointMismatchError: the encoder does not load from it.
    """
    prefix = resolve_checkpoint_path(path)
    items = dict(encoder=model.encoder, projection_head=model.projection_head)
    if supervised_head and _head_fits(model, prefix):
        items["supervised_head"] = model.supervised_head
    parts = tf.train.Checkpoint(**items)
    try:
        tf.train.Checkpoint(model=parts).read(prefix).expect_partial()
        # Raises if any encoder variable found nothing to load from.
        tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=model.encoder)).read(
            prefix).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:  # unmatched variables, other shapes
        raise _does_not_fit(prefix, error) from None
    return prefix


def _head_fits(model, prefix):
    """Whether the checkpoint holds a supervised head with the model's head's shapes."""
    head = getattr(model, "supervised_head", None)
    if head is None:
        return False
    saved = sorted(object_variable_shapes(prefix, "model", "supervised_head").values())
    ours = sorted(tuple(v.shape) for v in head.weights)
    return bool(saved) and saved == ours


def recorded_run_config(weights):
    """The Config recorded in flags.json by the run that wrote `weights` (a
    `checkpoints.Weights` of ours), or None when there is none to read. Read by
    `records.read_config`'s rule (unknown keys ignored, missing ones today's
    default), the rule `checkpoints.open_encoder` reads it by.

    The run is the one `weights.prefix` belongs to (`run_dirs.run_of`: a checkpoint's
    run directory; an export `run/saved_model/<step>/variables/variables` lies in
    its run directory's saved_model/), as `inherit` and `open_encoder` find it.
    """
    path = None
    try:
        path = run_dirs.flags_file(weights.prefix)
        if path is None:
            return None
        return records.read_config(path)
    except (ValueError, TypeError, OSError, tf.errors.OpError) as error:
        logging.warning("Cannot read %s (%s); the architecture of %s is checked when "
                        "it loads.", path or "the record of its run", error, weights.prefix)
        return None


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
        path: our run directory or checkpoint prefix, or the variables' prefix of
            one of our exports (the architecture comes from the flags.json of the
            run it belongs to, `run_dirs.flags_file`: every path `inherit` reads a
            run of opens), one of our SavedModel exports (`run/saved_model/<step>`),
            or an authors' released model.
        strategy: build our models under this strategy's scope (default strategy
            when None). SavedModel exports run on the default device.

    Raises:
        FileNotFoundError: nothing loadable at `path`.
    """
    from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
    strategy = strategy or tf.distribute.get_strategy()
    if official.is_official_savedmodel(path):
        with strategy.scope():
            model = official.load_official(path, num_classes=None)
        return model, 224, f"released model {path}"
    if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        encoder = _SavedModelEncoder(path)
        return encoder, encoder.image_size, f"SavedModel {path}"
    flags_file = run_dirs.flags_file(path)
    if flags_file is None:
        raise FileNotFoundError(
            f"No encoder at {path!r}: expected a run directory or checkpoint prefix with "
            "flags.json beside it, a SavedModel export, or an authors' released model.")
    config = records.read_config(flags_file)  # the rule preflight reads it by
    weights = resolve(path)
    with strategy.scope():
        model = SimCLRModel(**config.model_kwargs(None))
        model.build((None, config.image_size, config.image_size, 3))
    restore_model(model, weights.prefix)
    return model, config.image_size, f"checkpoint {weights.prefix}"
