"""Tests for simclr_tf.data.datasets: digits, TFDS (mocked), folders, label subsets."""
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image

from simclr_tf.data import datasets


def _all(dataset):
    return [(np.asarray(x), int(y)) for x, y in dataset.as_numpy_iterator()]


# ------------------------------------------------------------ digits


def test_digits_splits_shapes_and_labels():
    source = datasets.get_dataset("digits")
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
    test_labels = datasets.get_dataset("digits").load_labels("test")
    counts = np.bincount(test_labels, minlength=10)
    all_counts = np.bincount(datasets._digits_arrays()[1], minlength=10)
    np.testing.assert_allclose(counts, all_counts * 360 / 1797, atol=1.0)
    _, _, train_ids, test_ids = datasets._digits_arrays()
    assert not set(train_ids) & set(test_ids)
    assert len(train_ids) + len(test_ids) == 1797
    # Same ids whatever the process: a pure function of the labels and seed 0.
    again = datasets.stratified_subset_ids(datasets._digits_arrays()[1],
                                           num_examples=360, seed=0)
    np.testing.assert_array_equal(again, test_ids)


def test_split_slicing_matches_what_is_loaded():
    source = datasets.get_dataset("digits")
    for split in ["train[:10%]", "train[10:20]+test[-5:]", "test[50%:]"]:
        assert source.num_examples(split) == len(_all(source.load(split)))
    assert source.num_examples("train[:10%]") == 144


@pytest.mark.parametrize("split", ["validation", "train[:200%]", ""])
def test_bad_split_names_dataset_and_splits(split):
    source = datasets.get_dataset("digits")
    with pytest.raises(ValueError, match="split"):
        source.num_examples(split)


def test_sharding_by_input_context_partitions_the_split():
    source = datasets.get_dataset("digits")
    shards = [
        _all(source.load("test", input_context=tf.distribute.InputContext(2, i, 2)))
        for i in range(2)
    ]
    assert len(shards[0]) + len(shards[1]) == 360
    labels = sorted(y for shard in shards for _, y in shard)
    assert labels == sorted(source.load_labels("test").tolist())


# ------------------------------------------------------------ TFDS (mocked)


def test_tfds_sizes_come_from_the_table_offline():
    cifar = datasets.get_dataset("cifar10")
    assert cifar.num_classes == 10
    assert cifar.num_examples("train") == 50_000
    assert cifar.num_examples("train[:10%]") == 5_000
    assert cifar.num_examples("test") == 10_000
    imagenet = datasets.get_dataset("imagenet2012")
    assert imagenet.num_classes == 1000
    assert imagenet.num_examples("train") == 1_281_167
    assert imagenet.num_examples("validation") == 50_000
    assert datasets.get_dataset("imagenet2012_subset/1pct").num_examples("train") == 12_811
    assert datasets.get_dataset("imagenet2012_subset/10pct").num_examples("train") == 128_116
    stl = datasets.get_dataset("stl10")
    assert stl.num_examples("unlabelled") == 100_000
    assert not stl.has_labels("unlabelled") and stl.has_labels("train")
    assert datasets.get_dataset("cifar100").num_classes == 100


def test_tfds_unprepared_data_fails_clearly():
    with pytest.raises(ValueError, match="tfds build cifar10"):
        datasets.get_dataset("cifar10", data_dir="/nonexistent").load("train")


def test_tfds_unknown_and_unprepared_fails_clearly():
    with pytest.raises(ValueError, match="emnist.*not prepared.*KNOWN_TFDS_DATASETS"):
        datasets.get_dataset("emnist")
    with pytest.raises(ValueError, match="Unknown dataset 'no_such_dataset'"):
        datasets.get_dataset("no_such_dataset")


@pytest.mark.parametrize("name,num_classes", [
    ("cifar10", 10), ("imagenet2012", 1000), ("imagenet2012_subset/1pct", 1000),
    ("mnist", 10),
])
def test_tfds_load_under_mock(name, num_classes):
    with tfds.testing.mock_data(num_examples=6):
        source = datasets.get_dataset(name)
        examples = _all(source.load("train", shuffle_files=True))
    assert len(examples) == 6
    for image, label in examples:
        assert image.ndim == 3 and image.shape[-1] == 3 and image.dtype == np.uint8
        assert 0 <= label < num_classes


def test_tfds_unlabelled_split_has_label_minus_one():
    with tfds.testing.mock_data(num_examples=4):
        source = datasets.get_dataset("stl10")
        labels = [y for _, y in _all(source.load("unlabelled"))]
    assert labels == [-1] * 4


def test_tfds_example_ids_select_positions():
    with tfds.testing.mock_data(num_examples=12):
        source = datasets.get_dataset("cifar10")
        labels = source.load_labels("train")
        ids = [1, 4, 9]
        picked = _all(source.load("train", example_ids=ids))
        images = [x for x, _ in _all(source.load("train"))]
    assert [y for _, y in picked] == labels[ids].tolist()
    for (image, _), i in zip(picked, ids):
        np.testing.assert_array_equal(image, images[i])


def test_imagenet_label_subsets_are_the_authors():
    imagenet = datasets.get_dataset("imagenet2012")
    for fraction, name in [(0.01, "imagenet2012_subset/1pct"),
                           (0.1, "imagenet2012_subset/10pct")]:
        subset = datasets.make_label_subset(imagenet, "train", fraction)
        assert subset.source.name == name and subset.split == "train"
        assert subset.example_ids is None
    assert datasets.make_label_subset(imagenet, "train", 0.1).num_examples == 128_116


# ------------------------------------------------------------ folders


def _save(image, path, fmt, **kwargs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image.save(path, fmt, **kwargs)


def _colour(rgb, size=(12, 10)):
    return Image.new("RGB", size, rgb)


@pytest.fixture(scope="module")
def odd_folder(tmp_path_factory):
    """cat/ and dog/ with PNG RGBA, grey JPEG, BMP, animated GIF, 16-bit PNG, TIFF."""
    root = str(tmp_path_factory.mktemp("odd"))
    rgba = Image.new("RGBA", (12, 10), (200, 100, 50, 30))
    _save(rgba, f"{root}/cat/a_rgba.png", "PNG")
    _save(Image.new("L", (9, 7), 77), f"{root}/cat/b_gray.jpg", "JPEG", quality=100)
    _save(_colour((10, 20, 30)), f"{root}/cat/c.bmp", "BMP")
    frames = [_colour((255, 0, 0)).convert("P"), _colour((0, 0, 255)).convert("P")]
    _save(frames[0], f"{root}/dog/d_anim.gif", "GIF", save_all=True,
          append_images=frames[1:])
    sixteen = Image.fromarray(np.full((6, 8), 40000, np.uint16))
    _save(sixteen, f"{root}/dog/e_16bit.png", "PNG")
    _save(_colour((5, 250, 5)), f"{root}/dog/f.tiff", "TIFF")
    _save(Image.new("LA", (5, 5), (128, 9)), f"{root}/dog/g_gray_alpha.png", "PNG")
    with open(f"{root}/dog/notes.txt", "w") as f:
        f.write("not an image")
    return root


def test_folder_labelled_with_odd_formats(odd_folder):
    source = datasets.get_dataset("folder:" + odd_folder)
    assert source.num_classes == 2 and source.class_names == ("cat", "dog")
    assert source.splits == ("train",) and source.num_examples("train") == 7
    assert source.has_labels("train")
    examples = _all(source.load("train"))
    assert [y for _, y in examples] == [0, 0, 0, 1, 1, 1, 1]
    for image, _ in examples:
        assert image.ndim == 3 and image.shape[-1] == 3 and image.dtype == np.uint8
    rgba, gray, bmp, gif, sixteen, tiff, gray_alpha = [x for x, _ in examples]
    np.testing.assert_array_equal(rgba[0, 0], [200, 100, 50])  # alpha dropped
    assert rgba.shape == (10, 12, 3)
    np.testing.assert_allclose(gray[0, 0], [77, 77, 77], atol=2)  # grey -> RGB
    np.testing.assert_array_equal(bmp[0, 0], [10, 20, 30])
    np.testing.assert_array_equal(gif[0, 0], [255, 0, 0])  # the first frame
    np.testing.assert_allclose(sixteen[0, 0], [40000 / 257] * 3, atol=1)  # 16 -> 8 bit
    np.testing.assert_array_equal(tiff[0, 0], [5, 250, 5])  # through Pillow
    np.testing.assert_array_equal(gray_alpha[0, 0], [128, 128, 128])


def test_folder_flat_is_unlabelled(tmp_path):
    for i in range(3):
        _save(_colour((i, i, i)), str(tmp_path / f"{i}.png"), "PNG")
    source = datasets.get_dataset(f"folder:{tmp_path}")
    assert source.num_classes == 0 and not source.has_labels("train")
    assert [y for _, y in _all(source.load("train"))] == [-1, -1, -1]
    with pytest.raises(ValueError, match="no labels"):
        datasets.make_label_subset(source, "train", 0.5)


def test_folder_with_split_subfolders(tmp_path):
    for split, n in [("train", 4), ("validation", 2)]:
        for cls in ["b", "a"]:
            for i in range(n):
                _save(_colour((i, 0, 0)), str(tmp_path / split / cls / f"{i}.jpg"), "JPEG")
    source = datasets.get_dataset(f"folder:{tmp_path}")
    assert dict(source.split_sizes) == {"train": 8, "validation": 4}
    assert source.class_names == ("a", "b")
    assert [y for _, y in _all(source.load("validation"))] == [0, 0, 1, 1]


def test_folder_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        datasets.get_dataset(f"folder:{tmp_path}/missing")
    with pytest.raises(ValueError, match="No images"):
        datasets.get_dataset(f"folder:{tmp_path}")
    _save(_colour((1, 2, 3)), str(tmp_path / "loose.png"), "PNG")
    _save(_colour((1, 2, 3)), str(tmp_path / "cls" / "x.png"), "PNG")
    with pytest.raises(ValueError, match="mixes"):
        datasets.get_dataset(f"folder:{tmp_path}")


# ------------------------------------------------------------ label subsets


def test_stratified_subset_exact_per_class_and_reproducible():
    labels = np.repeat(np.arange(10), 5000)
    np.random.RandomState(0).shuffle(labels)
    ids = datasets.stratified_subset_ids(labels, 0.01, seed=0)
    assert len(ids) == 500
    np.testing.assert_array_equal(np.bincount(labels[ids]), [50] * 10)
    np.testing.assert_array_equal(ids, datasets.stratified_subset_ids(labels, 0.01, seed=0))
    assert not np.array_equal(ids, datasets.stratified_subset_ids(labels, 0.01, seed=1))
    assert np.all(np.diff(ids) > 0)


def test_stratified_subset_keeps_rare_classes():
    labels = np.array([0] * 990 + [1] * 7 + [2] * 3)
    ids = datasets.stratified_subset_ids(labels, 0.01)
    counts = np.bincount(labels[ids], minlength=3)
    assert counts[1] >= 1 and counts[2] >= 1
    assert counts[0] == 10


@pytest.mark.parametrize("kwargs,match", [
    (dict(fraction=0.0), "fraction"), (dict(fraction=1.5), "fraction"),
    (dict(), "exactly one"), (dict(num_examples=10**6), "num_examples"),
])
def test_stratified_subset_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        datasets.stratified_subset_ids(np.arange(10) % 3, **kwargs)


def test_label_subset_on_digits_loads_and_writes(tmp_path):
    source = datasets.get_dataset("digits")
    subset = datasets.make_label_subset(source, "train", 0.1, seed=3)
    assert subset.num_examples == 144 and subset.source is source
    labels = source.load_labels("train")
    assert np.bincount(labels[subset.example_ids]).min() >= 13
    loaded = [y for _, y in _all(source.load("train", example_ids=subset.example_ids))]
    assert loaded == labels[subset.example_ids].tolist()
    path = str(tmp_path / "model" / "label_subset_ids.txt")
    subset.write(path)
    np.testing.assert_array_equal(datasets.read_subset_ids(path), subset.example_ids)
    assert open(path).readline().startswith("# dataset=digits split=train")
    with pytest.raises(ValueError, match="label_fraction"):
        datasets.make_label_subset(source, "train", 0.0)


def test_write_subset_ids_roundtrip(tmp_path):
    path = str(tmp_path / "ids.txt")
    datasets.write_subset_ids(path, [5, 1, 3], comment="two\nlines")
    np.testing.assert_array_equal(datasets.read_subset_ids(path), [5, 1, 3])


def test_register_dataset(monkeypatch):
    monkeypatch.setattr(datasets, "_FACTORIES", dict(datasets._FACTORIES))
    datasets.register_dataset("digits_again", lambda data_dir: datasets.DigitsSource())
    assert "digits_again" in datasets.registered_datasets()
    assert datasets.get_dataset("digits_again").num_examples("test") == 360
    with pytest.raises(ValueError, match="name"):
        datasets.register_dataset("folder:x", lambda data_dir: None)
