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
import json
import os

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
