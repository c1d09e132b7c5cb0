"""Preflight: the folders a run reads and writes: --model_dir writable (or creatable),
not under a symbolic link to nothing; a given --data_dir there."""
import os

import tensorflow as tf

from simclr_tf.config import ConfigError, errors
from simclr_tf.data import registry


def _check_no_dangling_link(model_dir):
    """A local model_dir, or a folder above it, that is a symbolic link to nothing
    (scratch storage not mounted, a moved volume) is named with its target: nothing
    could be created under it."""
    if "://" in model_dir:
        return
    path = os.path.abspath(model_dir)
    while True:
        if os.path.islink(path) and not os.path.exists(path):
            raise ConfigError("model_dir", (
                f"{model_dir!r}: {path!r} is a symbolic link to {os.readlink(path)!r}, "
                "which does not exist (storage not mounted?); mount it, fix the link, or "
                "choose another directory."))
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def _check_model_dir(model_dir, reader=False):
    """model_dir is a writable directory, or can be created as one. A mode that only
    reads a run (`reader`) is shown how to read one it cannot write: with
    --checkpoint, its records going to a --model_dir of the user's.

    Probed with a file removed at once, written into model_dir or, when it does not
    exist yet, into its nearest existing parent (which must be a directory), so
    nothing is left behind and no directory is created.
    """
    _check_no_dangling_link(model_dir)
    existing = model_dir
    while not tf.io.gfile.exists(existing):
        parent = os.path.dirname(existing.rstrip("/"))
        if parent in ("", existing):
            break
        existing = parent
    # One name per process: the workers of a multi-worker run probe together.
    probe_file = os.path.join(existing, f".write_test_{os.getpid()}")
    try:
        if tf.io.gfile.exists(existing) and not tf.io.gfile.isdir(existing):
            raise NotADirectoryError(f"{existing!r} is a file")
        with tf.io.gfile.GFile(probe_file, "w") as f:
            f.write("ok")
        tf.io.gfile.remove(probe_file)
    except (OSError, tf.errors.OpError) as error:
        if tf.io.gfile.exists(probe_file):  # created, then its write failed
            tf.io.gfile.remove(probe_file)
        full = errors.disk_full(error, model_dir, "Nothing was written.")
        if full is not None:  # not a permission problem: the device is full
            raise full from None
        advice = "choose another directory."
        if reader:
            advice = (f"to read a run you cannot write (another user's), pass "
                      f"--checkpoint={model_dir} --model_dir=<a directory of yours> "
                      "(its flags are read from the run; the records go to yours).")
        raise ConfigError("model_dir", f"{model_dir!r} is not writable "
                          f"({error}); {advice}") from None


def _check_data_dir(config):
    """A given local --data_dir is a folder; one that does not exist is refused unless
    TFDS is to download --dataset into it."""
    if not config.data_dir or "://" in config.data_dir:
        return
    path = os.path.expanduser(config.data_dir)
    if os.path.isdir(path):
        return
    exists = os.path.exists(path)
    tfds_download = (config.tfds_download and not config.dataset.startswith("folder:")
                     and config.dataset not in registry.registered_datasets())
    if tfds_download and not exists:
        return  # TFDS prepares the dataset there
    raise ConfigError("data_dir", f"{config.data_dir!r} "
                      f"{'is a file' if exists else 'does not exist'}: give the folder "
                      f"that holds the data of --dataset={config.dataset}, or leave "
                      "--data_dir out to read it from its default place.")
