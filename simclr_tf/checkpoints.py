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
import time
from typing import Optional

import numpy as np
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


def load_into(model, path, *, whole_model, supervised_head=True, flag="checkpoint"):
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
        flag: the flag that named `path`, for the ConfigError raised when the
            checkpoint does not fit the model ('checkpoint' or 'model_dir').

    Returns:
        The `Weights` that were read.
    """
    if whole_model and not isinstance(path, Weights) and tf.io.gfile.isdir(path) \
            and candidates(path)[0]:
        # A run directory: its newest checkpoint that loads.
        return resolve(load_latest(model, path, flag=flag))
    weights = path if isinstance(path, Weights) else resolve(path)
    if weights.kind == RELEASED:
        head = model.supervised_head
        fits = head is not None and head.num_classes == official.inspect_official(
            weights.path).config.get("num_classes")
        official.load_official_weights(model, weights.path,
                                       supervised_head=fits and (supervised_head
                                                                 or whole_model))
    elif whole_model:
        restore_model(model, weights.prefix, flag=flag)
    else:
        initialize_from(model, weights.prefix, supervised_head=supervised_head,
                        flag=flag)
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


STATE_FILE = "checkpoint"  # TensorFlow's state file: the recorded checkpoints
UNLOADABLE_DIR = "unloadable"  # where checkpoints that do not load are set aside
_BASE = "ckpt"


class NonFiniteWeightsError(FloatingPointError):
    """The weights to save hold NaN or infinite values."""


def read_state(directory):
    """The checkpoints recorded in directory's state file, and what is wrong with it.

    Returns:
        (prefixes newest first, problem): problem is None for an intact state file,
        "missing", or "damaged (<reason>)" for one that does not parse.
    """
    if not tf.io.gfile.exists(os.path.join(directory, STATE_FILE)):
        return [], "missing"
    try:
        state = tf.train.get_checkpoint_state(directory)
    except Exception as error:  # pylint: disable=broad-except
        # UnicodeDecodeError, protobuf's ParseError, ValueError: whatever the bytes are.
        return [], f"damaged ({type(error).__name__}: {_first_line(error)})"
    if state is None:
        return [], "missing"
    paths = list(state.all_model_checkpoint_paths or [])
    if state.model_checkpoint_path:
        paths.append(state.model_checkpoint_path)
    paths = {os.path.normpath(p if os.path.isabs(p) else os.path.join(directory, p))
             for p in paths}
    return sorted(paths, key=lambda p: step_of(p, -1), reverse=True), None


def _groups(directory, base=_BASE):
    """{step: names of its files} for every `<base>-<step>` file or folder."""
    groups = {}
    if not tf.io.gfile.isdir(directory):
        return groups
    for name in tf.io.gfile.listdir(directory):
        name = name.rstrip("/")
        match = re.fullmatch(re.escape(base) + r"-(\d+)(_temp.*|\.index|\.data-.*)", name)
        if match:
            groups.setdefault(int(match.group(1)), []).append(name)
    return groups


def candidates(directory, base=_BASE):
    """Prefixes of the checkpoints in directory, newest first: those its state file
    records and those with an index file on disk (a lost or damaged state file does
    not hide a checkpoint). Returns (prefixes, the state file's problem or None)."""
    recorded, problem = read_state(directory)
    on_disk = [os.path.join(directory, f"{base}-{step}")
               for step, names in _groups(directory, base).items()
               if f"{base}-{step}.index" in names]
    paths = {os.path.normpath(p) for p in recorded + on_disk}
    return sorted(paths, key=lambda p: step_of(p, -1), reverse=True), problem


def unreadable_reason(prefix):
    """Why the checkpoint at `prefix` cannot be read, or None when it looks complete:
    its index parses, every data shard it names is there and none is short of the
    bytes the index lists (`missing_data_bytes`: exact, and cheap)."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        shards = tf.io.gfile.glob(prefix + ".data-*-of-*")
        expected = int(shards[0].rsplit("-of-", 1)[1]) if shards else 1
        if len(shards) != expected:
            return f"{expected - len(shards)} of its {expected} data files are missing"
        missing = missing_data_bytes(reader, shards)
        if missing > 0:
            return f"its data is {missing} bytes short of what its index lists: truncated"
    except (tf.errors.OpError, ValueError, IndexError) as error:
        return _first_line(error)
    return None


def missing_data_bytes(reader, shards):
    """How many bytes the data `shards` lack for the tensors `reader` (a
    `tf.train.load_checkpoint`) lists (<= 0: none).

    Exact and cheap: TensorFlow's bundle writes each numeric tensor as its raw bytes
    and each string tensor as varint lengths, a 4-byte checksum and the bytes, with no
    padding (measured equal to the data files' total for our checkpoints and exports,
    sharded ones and the authors' R50). Only string tensors (the object graph) are
    read: 4 ms on the authors' 137 MB R50, where reading every tensor took 73-108 ms
    (warm cache).
    """
    dtypes, shapes = reader.get_variable_to_dtype_map(), reader.get_variable_to_shape_map()
    size = sum(tf.io.gfile.stat(shard).length for shard in shards)
    if not all(d.is_numeric or d.is_bool or d == tf.string for d in dtypes.values()):
        for name in shapes:  # no fixed layout (variant, resource): read every tensor
            _read_tensor(reader, name)
        return 0
    needed = sum(dtypes[name].size * int(np.prod(shape, dtype=np.int64))
                 for name, shape in shapes.items() if dtypes[name] != tf.string)
    if needed > size:
        return needed - size
    for name in shapes:
        if dtypes[name] == tf.string:
            value = _read_tensor(reader, name)
            # A scalar comes back as bytes (np.asarray would drop trailing NULs).
            items = [value] if isinstance(value, bytes) else np.asarray(
                value, dtype=object).reshape(-1)
            needed += 4 + sum(_varint_size(len(item)) + len(item) for item in items)
    return needed - size


def _read_tensor(reader, name):
    try:
        return reader.get_tensor(name)
    except (tf.errors.OpError, IndexError) as error:  # IndexError: 'Read less bytes'
        raise ValueError(f"tensor {name!r} does not read ({error}): its data is "
                         "truncated or damaged") from None


def _varint_size(value):
    size = 1
    while value >= 128:
        value >>= 7
        size += 1
    return size


def latest(model_dir):
    """The newest checkpoint in model_dir that looks complete (see `unreadable_reason`),
    whether or not the state file records it; None if none or no dir. Never writes."""
    if not model_dir or not tf.io.gfile.isdir(model_dir):
        return None
    paths, _ = candidates(model_dir)
    for prefix in paths:
        reason = unreadable_reason(prefix)
        if reason is None:
            return prefix
        logging.warning("Checkpoint %s cannot be read (%s); using an older one.",
                        prefix, reason)
    return None


def load_latest(model, model_dir, *, flag="model_dir"):
    """Restores every variable of `model` from model_dir's newest checkpoint that
    loads, falling back to older ones with a warning; returns its prefix.

    Raises:
        ConfigError(flag): model_dir has no checkpoint, or none of them loads (each
            named with its reason).
    """
    paths, _ = candidates(model_dir) if model_dir else ([], None)
    failures = []
    for prefix in paths:
        reason = unreadable_reason(prefix)
        if reason is None:
            try:
                restore_model(model, prefix, flag=flag)
                return prefix
            except ConfigError:
                raise  # another architecture: older checkpoints of the run do not fit either
            except _LOAD_ERRORS as error:
                reason = _first_line(error)
        failures.append(f"{prefix}: {reason}")
        logging.warning("Checkpoint %s does not load (%s); trying the previous one.",
                        prefix, reason)
    if failures:
        raise ConfigError(flag, "no checkpoint in %r loads into the model of these "
                          "flags:\n  %s\nPass the flags of the run that wrote them "
                          "(its flags.json), or train first." % (
                              model_dir, "\n  ".join(failures)))
    raise ConfigError(flag, f"has no checkpoint in {model_dir!r}; train first.")


# Damaged files surface as OpErrors, or IndexError ('Read less bytes'); a checkpoint
# of another model as AssertionError / ValueError.
_LOAD_ERRORS = (tf.errors.OpError, ValueError, AssertionError, IndexError)


def _unreadable_tensor(prefix):
    """Why some tensor of the checkpoint cannot be read in full, or None."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError) as error:
        return _first_line(error)
    return None


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def non_finite_variables(variables):
    """Names of the floating-point variables holding NaN or infinite values."""
    return [v.path if hasattr(v, "path") else v.name for v in variables
            if tf.as_dtype(v.dtype).is_floating
            and not bool(tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))))]


class CheckpointState:
    """The checkpoints of a training run in `model_dir`.

    Writes are atomic as far as a reader of model_dir can tell: TensorFlow writes a
    checkpoint's shards under `<prefix>_temp/`, merges them into `<prefix>.index` /
    `.data-*`, and only then rewrites the `checkpoint` state file (write to a temporary
    file, then rename). `recover` (at start) never deletes a checkpoint that loads:

    - the newest checkpoint that loads and holds finite values is restored, found in
      the state file *and* on disk, so a lost or damaged state file hides nothing (a
      damaged one is set aside as `checkpoint.damaged-<time>` and rebuilt);
    - a newer one that does not load is deleted only when it is provably an
      interrupted write (its `_temp` folder is still there, or an intact state file
      does not record it: TensorFlow records a checkpoint after writing it); any
      other is moved, whole, to `model_dir/unloadable/` with a warning;
    - when none loads but some are not interrupted writes, it stops with an error
      naming them rather than starting again from step 0.

    `save` refuses weights that are not finite (`NonFiniteWeightsError`).

    Args:
        model_dir: the run's directory; checkpoints are always restored from here.
        model: the model (built).
        optimizer: the optimizer (built), or None for evaluation.
        max_to_keep: checkpoints kept (`keep_checkpoint_max`).
        save_dir: where this process writes its checkpoints, if not model_dir: a
            non-chief worker of a multi-worker run must take part in every save (the
            variables' values are synchronised across workers while saving) but must
            not write over the chief's files, so it writes to a scratch directory,
            cleared at start, and never changes model_dir.
    """

    def __init__(self, model_dir, model, optimizer=None, max_to_keep=5, save_dir=None):
        items = dict(model=model)
        if optimizer is not None:
            items["optimizer"] = optimizer
        self.model = model
        self.optimizer = optimizer
        self.model_dir = model_dir
        self.save_dir = save_dir or model_dir
        self.owns_model_dir = self.save_dir == model_dir
        self.max_to_keep = max_to_keep if self.owns_model_dir else 1
        self.checkpoint = tf.train.Checkpoint(**items)
        self.state_problem = None
        if self.owns_model_dir:
            self.state_problem = self._set_aside_damaged_state()
        elif tf.io.gfile.isdir(self.save_dir):
            tf.io.gfile.rmtree(self.save_dir)  # a scratch dir: nothing in it is read
        self.manager = self._new_manager()

    def _new_manager(self):
        return tf.train.CheckpointManager(self.checkpoint, self.save_dir,
                                          max_to_keep=self.max_to_keep,
                                          checkpoint_name=_BASE)

    def _set_aside_damaged_state(self):
        """Renames a state file that does not parse; returns the state's problem."""
        if not tf.io.gfile.isdir(self.model_dir):
            return None
        _, problem = read_state(self.model_dir)
        if problem and problem.startswith("damaged"):
            aside = os.path.join(self.model_dir, f"{STATE_FILE}.damaged-{int(time.time())}")
            tf.io.gfile.rename(os.path.join(self.model_dir, STATE_FILE), aside,
                               overwrite=True)
            logging.warning("The checkpoint state file of %s is %s; moved it to %s and "
                            "rebuilding the list from the checkpoint files.",
                            self.model_dir, problem, aside)
        return problem

    @property
    def latest(self):
        """The newest complete checkpoint in model_dir (None when there is none)."""
        return latest(self.model_dir)

    def candidates(self):
        """model_dir's checkpoints (state file and disk), newest first."""
        return candidates(self.model_dir)[0]

    def _variables(self):
        """What a checkpoint of this run holds: the model's and the optimizer's."""
        variables = list(self.model.variables)
        if self.optimizer is not None:
            variables += list(self.optimizer.variables)
        return variables

    def _restore(self, prefix):
        """Restores `prefix` (its files already found readable by `recover`);
        returns None, or why it does not load."""
        try:
            if self.optimizer is not None:
                self.checkpoint.restore(prefix).assert_existing_objects_matched()
            else:
                restore_model(self.model, prefix)
        except _LOAD_ERRORS as error:
            return _first_line(error)
        bad = non_finite_variables(self._variables())
        if bad:
            return f"{len(bad)} tensors hold NaN or infinite values (e.g. {bad[0]})"
        return None

    def recover(self):
        """Restores the newest checkpoint of model_dir that loads and is finite, and
        tidies what an interrupted run left (see the class docstring).

        Returns:
            The restored prefix, or None when model_dir has no checkpoint.

        Raises:
            ConfigError(model_dir): checkpoints are there but none loads and not all
                of them are interrupted writes (nothing is changed then).
        """
        recorded, _ = read_state(self.model_dir) if self.state_problem is None else ([], None)
        groups = _groups(self.model_dir)
        steps = set(groups) | {step_of(p, -1) for p in recorded}
        restored, interrupted, kept = None, [], []
        for step in sorted(steps, reverse=True):
            prefix = os.path.join(self.model_dir, f"{_BASE}-{step}")
            suspect = self._maybe_interrupted(step, groups, recorded)
            # A suspect is read in full before it is restored: a partial write must
            # never leave half-assigned weights behind.
            reason = unreadable_reason(prefix) or (suspect and _unreadable_tensor(prefix))
            if reason:
                (interrupted if suspect else kept).append((step, reason))
                continue
            reason = self._restore(prefix)
            if reason is None:
                restored = prefix
                break
            kept.append((step, reason))
        for step, reason in interrupted + kept:
            logging.warning("Checkpoint %s-%d does not load (%s).", _BASE, step, reason)
        if not self.owns_model_dir:
            return restored
        if restored is None and kept:
            raise ConfigError(
                "model_dir", "no checkpoint in %r loads, and these are not interrupted "
                "writes:\n  %s\nNothing was changed. To start this run again from step "
                "0, move them out of model_dir (or use another --model_dir); to go on "
                "from one of them, repair it or pass the flags of the run that wrote it."
                % (self.model_dir, "\n  ".join(
                    f"{_BASE}-{step}: {reason}" for step, reason in kept)))
        for step, _ in interrupted:
            self._remove(groups.get(step, []))
        for step, reason in kept:
            self._set_aside(groups.get(step, []), reason)
        done = {step for step, _ in interrupted}
        for step, names in groups.items():  # a finished write whose _temp folder remained
            if step not in done:
                self._remove([n for n in names if "_temp" in n])
        if restored is not None and (self.state_problem or interrupted or kept
                                     or os.path.normpath(restored) not in recorded):
            self._rewrite_state(restored)
        if restored is not None and (interrupted or kept):
            logging.warning("Resuming from %s, the newest checkpoint that loads.", restored)
        return restored

    def _maybe_interrupted(self, step, groups, recorded):
        """Whether `step` may be a write that never finished: its `_temp` folder is
        still there, it has no index, or an intact state file does not record it
        (TensorFlow records a checkpoint after writing it). If it then does not read,
        it is an interrupted write."""
        names = groups.get(step, [])
        if any("_temp" in name for name in names) or f"{_BASE}-{step}.index" not in names:
            return True
        prefix = os.path.normpath(os.path.join(self.model_dir, f"{_BASE}-{step}"))
        return self.state_problem is None and prefix not in recorded

    def _remove(self, names):
        for name in names:
            path = os.path.join(self.model_dir, name)
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            elif tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
        if names:
            logging.warning("Removed the files of an interrupted checkpoint write: %s",
                            ", ".join(sorted(names)))

    def _set_aside(self, names, reason):
        if not names:
            return
        target = os.path.join(self.model_dir, UNLOADABLE_DIR)
        tf.io.gfile.makedirs(target)
        for name in names:
            tf.io.gfile.rename(os.path.join(self.model_dir, name),
                               os.path.join(target, name), overwrite=True)
        logging.warning("Moved %s (does not load: %s) to %s; delete it once you no "
                        "longer need it.", ", ".join(sorted(names)), reason, target)

    def _rewrite_state(self, restored):
        """Records the checkpoints now in model_dir, up to `restored`, and restarts the
        manager on that record (its rotation then covers them)."""
        step = step_of(restored, -1)
        kept = sorted(s for s, names in _groups(self.model_dir).items()
                      if s <= step and f"{_BASE}-{s}.index" in names)
        # With their files' times, so that the manager's rotation (keep_checkpoint_max)
        # covers them as if it had written them.
        times = [tf.io.gfile.stat(os.path.join(self.model_dir, f"{_BASE}-{s}.index")
                                  ).mtime_nsec / 1e9 for s in kept]
        tf.compat.v1.train.update_checkpoint_state(
            self.model_dir, model_checkpoint_path=f"{_BASE}-{step}",
            all_model_checkpoint_paths=[f"{_BASE}-{s}" for s in kept],
            all_model_checkpoint_timestamps=times,
            last_preserved_timestamp=min(times) - 1)
        self.manager = self._new_manager()
        if self.state_problem:
            logging.warning("Rebuilt the checkpoint state file of %s: %s.", self.model_dir,
                            ", ".join(f"{_BASE}-{s}" for s in kept))
        self.state_problem = None

    def save(self, step):
        """Saves a checkpoint at `step`; returns its prefix.

        Raises:
            NonFiniteWeightsError: some weight or optimizer slot is NaN or infinite
                (nothing is written).
        """
        bad = non_finite_variables(self._variables())
        if bad:
            raise NonFiniteWeightsError(
                f"After step {step}, {len(bad)} weight or optimizer tensors hold NaN or "
                f"infinite values (e.g. {', '.join(bad[:3])}); not saving them.")
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


def initialize_from(model, path, *, supervised_head=True, flag="checkpoint"):
    """Loads the encoder and projection head of `model` from another run's checkpoint,
    and its supervised head when `supervised_head` and the checkpoint has one of the
    same shape (the online linear head of a pretraining run on the same classes).

    Args:
        model: a built `SimCLRModel`.
        path: checkpoint prefix or directory of ours (see `resolve_checkpoint_path`).
        supervised_head: load a supervised head that fits.
        flag: the flag named in the ConfigError when the checkpoint does not fit.

    Returns:
        The checkpoint prefix that was read.
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
        raise _does_not_fit(prefix, error, flag) from None
    return prefix


def _head_fits(model, prefix):
    """Whether the checkpoint holds a supervised head with the model's head's shapes."""
    head = getattr(model, "supervised_head", None)
    if head is None:
        return False
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    saved = sorted(tuple(shape) for key, shape in shapes.items()
                   if key.startswith("model/supervised_head/") and "OPTIMIZER_SLOT" not in key
                   and key.endswith("/.ATTRIBUTES/VARIABLE_VALUE"))
    ours = sorted(tuple(v.shape) for v in head.weights)
    return bool(saved) and saved == ours


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
