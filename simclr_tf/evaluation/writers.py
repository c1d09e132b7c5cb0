"""Embeddings to files: ids, names, labels, h (and z) as .npz or Parquet, and a
TensorBoard projector view with an image sprite.

Every file is written whole or not at all (`files.atomic_write`: a temporary file
beside it, renamed over it): a full disk or a kill mid-write leaves the previous
file as it was. A full disk is an `errors.DiskFullError` naming the file and the
space left there (run.py: an error, exit 1).
"""
import math
import os

import numpy as np
import tensorflow as tf

from simclr_tf.config import errors
from simclr_tf.rundir import files
from simclr_tf.evaluation.features import H, Z

_KEPT = "The file there before, if any, is unchanged."


def write_embeddings(path, features, *, names=None):
    """Writes ids, names, labels, h (and z) to `.npz` or `.parquet` (by suffix).

    Args:
        path: output file; `.parquet` writes one row per example (vectors as
            fixed-size lists), anything else an .npz with arrays `ids`, `names`,
            `labels`, `h` and optionally `z`.
        features: dict from `FeatureExtractor` (`final_avg_pool`, maybe
            `proj_head_output`, `labels`, `ids`).
        names: a name (file path) per row.

    Returns:
        The path.

    Raises:
        errors.DiskFullError: no space left for it (the previous file is kept).
    """
    columns = dict(ids=features["ids"], labels=features["labels"], h=features[H])
    if Z in features:
        columns["z"] = features[Z]
    names = np.asarray(names if names is not None else [str(i) for i in features["ids"]])
    if os.path.dirname(path):
        tf.io.gfile.makedirs(os.path.dirname(path))
    if path.endswith(".parquet"):
        import pyarrow as pa  # pylint: disable=import-outside-toplevel
        import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

        def vectors(array):
            array = np.ascontiguousarray(array, np.float32)
            return pa.FixedSizeListArray.from_arrays(pa.array(array.reshape(-1)),
                                                     array.shape[1])

        table = pa.table(dict(
            id=pa.array(columns["ids"]), name=pa.array([str(n) for n in names]),
            label=pa.array(columns["labels"]),
            **{k: vectors(columns[k]) for k in ("h", "z") if k in columns}))
        def write(scratch):
            pq.write_table(table, scratch)
    else:
        def write(scratch):
            # Through a file object: np.savez adds no '.npz' to a path without it.
            with open(scratch, "wb") as f:
                np.savez(f, names=names.astype(str), **columns)

    with errors.full_disk_reported(path, _KEPT):
        files.atomic_write(path, write)
    return path


def write_projector(log_dir, embeddings, labels, names, images=None):
    """A TensorBoard projector view of `embeddings` in `log_dir`.

    Args:
        log_dir: directory for `tensorboard --logdir`.
        embeddings: float32 [n, D].
        labels: int [n] (metadata column).
        names: str [n] (metadata column).
        images: optional uint8 or [0, 1] float [n, S, S, 3] thumbnails for the sprite.

    Raises:
        errors.DiskFullError: no space left for one of its files (each file there
            before is kept whole).
    """
    from tensorboard.plugins import projector  # pylint: disable=import-outside-toplevel
    from google.protobuf import text_format  # pylint: disable=import-outside-toplevel
    tf.io.gfile.makedirs(log_dir)

    kept = ("The projector's files there are each whole, but may mix the previous view "
            "and this one until it is written again.")

    def write(name, content):
        path = os.path.join(log_dir, name)
        with errors.full_disk_reported(path, kept):
            files.atomic_write(path, content)

    write("metadata.tsv", "name\tlabel\n" + "".join(
        f"{str(name).replace(chr(9), ' ')}\t{int(label)}\n"
        for name, label in zip(names, labels)))
    variable = tf.Variable(np.asarray(embeddings, np.float32), name="embedding")
    prefix = os.path.join(log_dir, "embedding.ckpt")
    try:
        with errors.full_disk_reported(prefix, kept):
            tf.train.Checkpoint(embedding=variable).save(prefix)
    except errors.DiskFullError:
        # TensorFlow writes into '<prefix>-<n>_temp/' first and leaves it on failure.
        for scratch in tf.io.gfile.glob(prefix + "-*_temp"):
            tf.io.gfile.rmtree(scratch)
        raise
    config = projector.ProjectorConfig()
    view = config.embeddings.add()
    view.tensor_name = "embedding/.ATTRIBUTES/VARIABLE_VALUE"
    view.metadata_path = "metadata.tsv"
    if images is not None and len(images):
        sprite = sprite_image(images)
        write("sprite.png", tf.io.encode_png(sprite).numpy())
        view.sprite.image_path = "sprite.png"
        view.sprite.single_image_dim.extend([int(images.shape[2]), int(images.shape[1])])
    # What projector.visualize_embeddings writes, but atomically.
    write("projector_config.pbtxt", text_format.MessageToString(config))
    return log_dir


def sprite_image(images):
    """Tiles [n, S, S, 3] images row-major into one uint8 square grid image."""
    images = np.asarray(images)
    if images.dtype != np.uint8:
        images = np.clip(np.rint(images * 255.0), 0, 255).astype(np.uint8)
    n, height, width, channels = images.shape
    side = int(math.ceil(math.sqrt(n)))
    grid = np.zeros([side * height, side * width, channels], np.uint8)
    for i, image in enumerate(images):
        row, col = divmod(i, side)
        grid[row * height:(row + 1) * height, col * width:(col + 1) * width] = image
    return grid
