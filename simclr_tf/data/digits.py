"""The offline dataset 'digits': scikit-learn's bundled handwritten digits.

1,797 8x8 grey images, 10 classes, upsampled to 32x32 RGB uint8; splits 'train'
(1,437) and 'test' (360), stratified with a fixed seed, so identical on every machine.
Needs no download.
"""
from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from simclr_tf.data.sources import ArraySource, stratified_subset_ids

DIGITS_IMAGE_SIZE = 32
DIGITS_TEST_SIZE = 360
DIGITS_SPLIT_SEED = 0


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(images uint8 [1797, 32, 32, 3], labels, train ids, test ids), built once."""
    from sklearn.datasets import load_digits  # Heavy import, only when asked for.

    digits = load_digits()
    # Pixel values are ink counts in 0..16; bilinear upsampling keeps strokes smooth.
    small = digits.images.astype(np.float32)[..., np.newaxis] / 16.0
    large = tf.image.resize(small, [DIGITS_IMAGE_SIZE, DIGITS_IMAGE_SIZE],
                            method="bilinear").numpy()
    images = np.clip(np.rint(large * 255.0), 0, 255).astype(np.uint8)
    images = np.repeat(images, 3, axis=-1)
    labels = digits.target.astype(np.int64)
    test_ids = stratified_subset_ids(labels, num_examples=DIGITS_TEST_SIZE,
                                     seed=DIGITS_SPLIT_SEED)
    train_ids = np.setdiff1d(np.arange(len(labels)), test_ids)
    return images, labels, train_ids, test_ids


class DigitsSource(ArraySource):
    """scikit-learn's handwritten digits as 32x32 RGB images; see module docstring."""

    def __init__(self):
        images, labels, train_ids, test_ids = _digits_arrays()
        rows = {
            split: {"image": images[ids], "label": labels[ids]}
            for split, ids in (("train", train_ids), ("test", test_ids))
        }
        super().__init__("digits", 10, rows)

    def _decode(self, columns):
        return columns["image"]
