"""Files written whole or not at all: `atomic_write` (a temporary file beside the
target, then renamed over it), which every atomic file write of the package calls: the
records, the run lock, the image-scan cache, the feature cache, the embedding writers.

TensorFlow's file API only (local paths and any file system `tf.io.gfile` knows), so
that the data and evaluation layers write atomically without importing the run
record.
"""
import os
import uuid

import tensorflow as tf

from simclr_tf.config import errors


def atomic_write(path, content):
    """Writes `path` so that a reader sees the old file or the whole new one, never a
    part: into a temporary file beside it, then renamed over it. A failed write
    leaves the old file and no temporary one; a full disk is an
    `errors.DiskFullError` naming `path` (not the temporary file) and the space left.

    Args:
        path: the file (local or any filesystem `tf.io.gfile` knows).
        content: str or bytes to write, or a callable that writes the file at the
            temporary path it is given (which ends like `path`, so
            `lambda scratch: np.savez(scratch, **arrays)` adds no second '.npz').
    """
    root, extension = os.path.splitext(path)
    temporary = f"{root}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}{extension}"
    try:
        if callable(content):
            content(temporary)
        else:
            with tf.io.gfile.GFile(temporary, "w" if isinstance(content, str) else "wb") as f:
                f.write(content)
        tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException as error:
        if tf.io.gfile.exists(temporary):
            tf.io.gfile.remove(temporary)
        full = errors.disk_full(error, path, f"{path} is as it was before (written "
                                "whole or not at all).")
        if full is None:
            raise
        raise full from None
