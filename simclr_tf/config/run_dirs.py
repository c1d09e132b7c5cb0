"""The run a path belongs to, and its flags.json: the one reader of a run directory.

Every module that asks "which run wrote these weights, and with which flags" asks
here: `inherit` (the flags a later command reads), `checkpoints.recorded_run_config`
(what preflight checks a checkpoint against, what the teacher is built from) and
`checkpoints.open_encoder`; so a path that `inherit` reads a record for is one that
`open_encoder` opens by the same record.

A path of ours is
- a run directory (`run`);
- a checkpoint prefix in one (`run/ckpt-100`);
- one of our exports (`run/saved_model/<step>`), or its variables' prefix
  (`run/saved_model/<step>/variables/variables`).

Pure Python for local paths (run.py reads records before TensorFlow is imported); a
path on a remote file system (`gs://...`) is read with TensorFlow's file API,
imported then.
"""
import difflib
import glob
import json
import os

from simclr_tf.config.errors import ConfigError
from simclr_tf.config.tables import modes

FLAGS_FILE = "flags.json"  # records.record_path(run, records.FLAGS, <a training mode>)
_EXPORTS = "saved_model"  # export.py: run/saved_model/<step>
_VARIABLES = os.path.join("variables", "variables")  # a SavedModel's variables' prefix


def is_remote(path):
    """Whether `path` is on a file system only TensorFlow's file API reads."""
    return "://" in os.fspath(path)


def _gfile():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.io.gfile


def exists(path):
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path):
    return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def run_of(path):
    """The run directory `path` (see the module docstring) belongs to.

    A path that is no directory is a prefix: its directory is the run's.
    """
    path = os.fspath(path).rstrip("/")
    if path.endswith(_VARIABLES):
        path = os.path.dirname(os.path.dirname(path))  # the export's directory
    if isdir(path):
        parent = os.path.dirname(path)
        if os.path.basename(parent) == _EXPORTS:
            return os.path.dirname(parent)
        return path
    return os.path.dirname(path) or "."


def flags_file(path):
    """The flags.json of the run `path` belongs to, or None when that run has none
    (a released model, a copied prefix)."""
    found = os.path.join(run_of(path), FLAGS_FILE)
    return found if exists(found) else None


def read_flags(path):
    """The JSON value of the flags file at `path` (a dict, for a record of ours).

    Raises:
        OSError (FileNotFoundError): it cannot be read.
        ValueError: it is not JSON.
    """
    if is_remote(path):
        with _gfile().GFile(path) as f:
            return json.loads(f.read())
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------- weights to read


def weights_needed_now(config, mode):
    """Whether the run of `config` must find weights when it starts: its mode (a
    `tables.modes` row) reads a checkpoint, does not wait for one (a mode that follows
    a running job, without the lock, may: --eval_wait_secs), and has no --checkpoint to
    read instead where the mode may."""
    return (mode.needs_checkpoint and (mode.takes_lock or config.eval_wait_secs <= 0)
            and not (not mode.needs_model_dir and config.checkpoint))


def holds_checkpoints(path):
    """Whether the local directory `path` holds a checkpoint's files (by name: the
    state file or an index), read without TensorFlow."""
    return os.path.exists(os.path.join(path, "checkpoint")) or bool(
        glob.glob(os.path.join(glob.escape(path), "ckpt-*.index")))


def nothing_to_load(config, mode):
    """The ConfigError of a run whose mode needs weights and whose --model_dir has none
    (`weights_needed_now`): what it found there, a sibling of a close name that holds
    checkpoints (a typo), and the ways out."""
    alternatives = []
    if not mode.needs_model_dir:
        alternatives.append("pass --checkpoint")
    if not mode.takes_lock:
        alternatives.append("wait for one with --eval_wait_secs")
    if alternatives:
        alternatives[-1] = "or " + alternatives[-1]
    missing = "" if not config.model_dir or isdir(config.model_dir) else (
        " (a file)" if exists(config.model_dir) else " (no such directory)")
    close = _close_run_directory(config.model_dir) if missing else None
    meant = f" Did you mean --model_dir={close}? It holds checkpoints." if close else ""
    return ConfigError("model_dir", f"has no checkpoint to {config.mode} in "
                       f"{config.model_dir!r}{missing}; train first"
                       + "".join(f", {text}" for text in alternatives) + "." + meant)


def missing_weights(config):
    """For run.py before TensorFlow is imported: the error of a local --checkpoint
    (or a distillation's --teacher) that names nothing (no such path, nor a
    checkpoint prefix), with a sibling of a close name that holds checkpoints (a
    typo, as for --model_dir); None otherwise. A --checkpoint that a resumed run does
    not read (model_dir holds checkpoints) is left alone."""
    teacher = modes.get(config.mode).trains and config.train_mode == "distill"
    for flag in ("checkpoint",) + (("teacher",) if teacher else ()):
        path = getattr(config, flag)
        if (not path or is_remote(path) or os.path.exists(os.path.expanduser(path))
                or glob.glob(glob.escape(os.path.expanduser(path)) + ".*")):
            continue
        if flag == "checkpoint" and config.model_dir and not is_remote(config.model_dir) \
                and holds_checkpoints(config.model_dir):
            continue
        close = _close_run_directory(path)
        meant = f" Did you mean --{flag}={close}? It holds checkpoints." if close else ""
        return ConfigError(flag, f"{path!r} is neither a directory of checkpoints nor a "
                           "checkpoint prefix (no such path); pass a run directory, a "
                           "prefix such as '/run/ckpt-1000', or a SavedModel directory."
                           + meant)
    return None


def _close_run_directory(model_dir):
    """A local directory beside a missing `model_dir` whose name is close to its name
    (a typo) and that holds checkpoints; None when there is none."""
    if is_remote(model_dir):
        return None
    parent, name = os.path.split(os.path.expanduser(model_dir).rstrip("/"))
    try:
        siblings = [entry for entry in os.listdir(parent or ".")
                    if os.path.isdir(os.path.join(parent, entry))]
    except OSError:
        return None
    for candidate in difflib.get_close_matches(name, siblings, n=3, cutoff=0.8):
        path = os.path.join(parent, candidate)
        if holds_checkpoints(path):
            return path
    return None


def missing_run_directory(config):
    """For run.py before TensorFlow is imported: the `nothing_to_load` error of a mode
    that needs weights now when its --model_dir is a local path that is not there (nor
    a checkpoint prefix); None otherwise (preflight checks the rest)."""
    mode = modes.get(config.mode)
    path = config.model_dir
    if (not path or is_remote(path) or not weights_needed_now(config, mode)
            or os.path.exists(path) or os.path.exists(path + ".index")):
        return None
    return nothing_to_load(config, mode)
