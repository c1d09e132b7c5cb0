"""Tests for simclr_tf.data.digits: the offline digits source."""
import numpy as np
import tensorflow as tf

from simclr_tf.data import digits, registry, sources


def test_digits_splits_shapes_and_labels():
    source = registry.get_dataset("digits")
    assert source.num_classes == 10
    assert dict(source.split_sizes) == {"train": 1437, "test": 360}
    assert source.has_labels("train") and source.has_labels("test")
    image, label = next(iter(source.load("train")))
    assert image.shape == (32, 32, 3) and image.dtype == tf.uint8
    assert label.dtype == tf.int32
    assert int(tf.reduce_max(image)) > 200  # real strokes, not an empty canvas
    labels = source.load_labels("train")
    assert labels.shape == (1437,) and set(labels) == set(range(10))


def test_digits_split_is_stratified_deterministic_and_disjoint():
    test_labels = registry.get_dataset("digits").load_labels("test")
    counts = np.bincount(test_labels, minlength=10)
    all_counts = np.bincount(digits._digits_arrays()[1], minlength=10)
    np.testing.assert_allclose(counts, all_counts * 360 / 1797, atol=1.0)
    _, _, train_ids, test_ids = digits._digits_arrays()
    assert not set(train_ids) & set(test_ids)
    assert len(train_ids) + len(test_ids) == 1797
    # Same ids whatever the process: a pure function of the labels and seed 0.
    again = sources.stratified_subset_ids(digits._digits_arrays()[1],
                                          num_examples=360, seed=0)
    np.testing.assert_array_equal(again, test_ids)
