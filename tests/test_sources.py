"""Tests for simclr_tf.data.sources: the DatasetSource interface (through the digits
source), example ids."""
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.data import registry, sources


def _all(dataset):
    return [(np.asarray(x), int(y)) for x, y in dataset.as_numpy_iterator()]


def test_split_slicing_matches_what_is_loaded():
    source = registry.get_dataset("digits")
    for split in ["train[:10%]", "train[10:20]+test[-5:]", "test[50%:]"]:
        assert source.num_examples(split) == len(_all(source.load(split)))
    assert source.num_examples("train[:10%]") == 144


@pytest.mark.parametrize("split", ["validation", "train[:200%]", ""])
def test_bad_split_names_dataset_and_splits(split):
    source = registry.get_dataset("digits")
    with pytest.raises(ValueError, match="split"):
        source.num_examples(split)


def test_sharding_by_input_context_partitions_the_split():
    source = registry.get_dataset("digits")
    shards = [
        _all(source.load("test", input_context=tf.distribute.InputContext(2, i, 2)))
        for i in range(2)
    ]
    assert len(shards[0]) + len(shards[1]) == 360
    labels = sorted(y for shard in shards for _, y in shard)
    assert labels == sorted(source.load_labels("test").tolist())


def test_stratified_subset_exact_per_class_and_reproducible():
    labels = np.repeat(np.arange(10), 5000)
    np.random.RandomState(0).shuffle(labels)
    ids = sources.stratified_subset_ids(labels, 0.01, seed=0)
    assert len(ids) == 500
    np.testing.assert_array_equal(np.bincount(labels[ids]), [50] * 10)
    np.testing.assert_array_equal(ids, sources.stratified_subset_ids(labels, 0.01, seed=0))
    assert not np.array_equal(ids, sources.stratified_subset_ids(labels, 0.01, seed=1))
    assert np.all(np.diff(ids) > 0)


def test_stratified_subset_keeps_rare_classes():
    labels = np.array([0] * 990 + [1] * 7 + [2] * 3)
    ids = sources.stratified_subset_ids(labels, 0.01)
    counts = np.bincount(labels[ids], minlength=3)
    assert counts[1] >= 1 and counts[2] >= 1
    assert counts[0] == 10


@pytest.mark.parametrize("kwargs,match", [
    (dict(fraction=0.0), "fraction"), (dict(fraction=1.5), "fraction"),
    (dict(), "exactly one"), (dict(num_examples=10**6), "num_examples"),
])
def test_stratified_subset_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sources.stratified_subset_ids(np.arange(10) % 3, **kwargs)
