"""A small Fashion-MNIST in its four IDX files, for the tests of the source and of the
scripts that read it: pixels that name their split and position, known labels."""
import gzip
import os

import numpy as np

from simclr_tf.data import fashion_mnist

SIZES = {"train": 20, "test": 8}
# The first pixel of an image is its id, plus 100 in the test split.
OFFSET = {"train": 0, "test": 100}


def _pixels(split, num):
    ids = np.arange(num)[:, None, None] + OFFSET[split]
    ramp = np.arange(28)[None, :, None] + 2 * np.arange(28)[None, None, :]
    return ((ids + ramp) % 256).astype(np.uint8)


def _labels(split, num):
    return ((np.arange(num) * 3 + OFFSET[split]) % 10).astype(np.uint8)


def _write_idx(path, array, magic, gzipped):
    data = (magic.to_bytes(4, "big")
            + b"".join(d.to_bytes(4, "big") for d in array.shape) + array.tobytes())
    if gzipped:
        path, data = path + ".gz", gzip.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return path


def write_fashion_mnist(folder, gzipped=True, sizes=None):
    """The four IDX files of a small Fashion-MNIST in `folder`; {(split, what): path}."""
    os.makedirs(folder, exist_ok=True)
    paths = {}
    for split, num in (sizes or SIZES).items():
        for what, array in (("images", _pixels(split, num)),
                            ("labels", _labels(split, num))):
            name = fashion_mnist.IDX_FILES[split, what]
            paths[split, what] = _write_idx(os.path.join(folder, name), array,
                                            fashion_mnist.IDX_MAGIC[what], gzipped)
    return paths
