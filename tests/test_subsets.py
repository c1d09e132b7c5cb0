"""Tests for simclr_tf.data.subsets: label subsets."""
import numpy as np
import pytest

from simclr_tf.data import registry, subsets


def _all(dataset):
    return [(np.asarray(x), int(y)) for x, y in dataset.as_numpy_iterator()]


def test_imagenet_label_subsets_are_the_authors():
    imagenet = registry.get_dataset("imagenet2012")
    for fraction, name in [(0.01, "imagenet2012_subset/1pct"),
                           (0.1, "imagenet2012_subset/10pct")]:
        subset = subsets.make_label_subset(imagenet, "train", fraction)
        assert subset.source.name == name and subset.split == "train"
        assert subset.example_ids is None
    assert subsets.make_label_subset(imagenet, "train", 0.1).num_examples == 128_116


def test_label_subset_on_digits_loads_and_writes(tmp_path):
    source = registry.get_dataset("digits")
    subset = subsets.make_label_subset(source, "train", 0.1, seed=3)
    assert subset.num_examples == 144 and subset.source is source
    labels = source.load_labels("train")
    assert np.bincount(labels[subset.example_ids]).min() >= 13
    loaded = [y for _, y in _all(source.load("train", example_ids=subset.example_ids))]
    assert loaded == labels[subset.example_ids].tolist()
    path = str(tmp_path / "model" / "label_subset_ids.txt")
    subset.write(path)
    np.testing.assert_array_equal(subsets.read_subset_ids(path), subset.example_ids)
    assert open(path).readline().startswith("# dataset=digits split=train")
    with pytest.raises(ValueError, match="label_fraction"):
        subsets.make_label_subset(source, "train", 0.0)


def test_write_subset_ids_roundtrip(tmp_path):
    path = str(tmp_path / "ids.txt")
    subsets.write_subset_ids(path, [5, 1, 3], comment="two\nlines")
    np.testing.assert_array_equal(subsets.read_subset_ids(path), [5, 1, 3])
