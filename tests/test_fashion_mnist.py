"""Tests for simclr_tf.data.fashion_mnist: Fashion-MNIST from its IDX files.

Small IDX files written here (20 train and 8 test images whose pixels name their
split and position), and one test on Debian's real package, which skips without it
unless $SIMCLR_TF_REQUIRE_FASHION_MNIST=1 (.ci/run sets it and installs the package).
"""
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from helpers.fashion_mnist_files import (SIZES, _labels, _pixels, _write_idx,
                                        write_fashion_mnist)
from helpers.run_fixtures import config
from simclr_tf.run import preflight
from simclr_tf.config import ConfigError
from simclr_tf.data import fashion_mnist, registry, tfds_source

REQUIRE_ENV = "SIMCLR_TF_REQUIRE_FASHION_MNIST"
REAL_DEBIAN_DIR = fashion_mnist.DEBIAN_DIR
@pytest.fixture(autouse=True)
def no_debian_package(tmp_path, monkeypatch):
    """The Debian folder is an empty one unless a test fills it."""
    debian = tmp_path / "debian"
    debian.mkdir()
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", str(debian))
    return str(debian)


def _examples(source, split, **kwargs):
    return [(np.asarray(x), int(y))
            for x, y in source.load(split, **kwargs).as_numpy_iterator()]


@pytest.mark.parametrize("gzipped", [True, False], ids=["gzipped", "raw"])
def test_files_read_as_rgb_uint8_with_labels_in_file_order(tmp_path, gzipped):
    write_fashion_mnist(str(tmp_path / "data"), gzipped=gzipped)
    source = registry.get_dataset("fashion_mnist", data_dir=str(tmp_path / "data"))
    assert isinstance(source, fashion_mnist.FashionMnistSource)
    assert source.name == "fashion_mnist" and source.num_classes == 10
    assert dict(source.split_sizes) == SIZES
    assert source.class_names[0] == "T-shirt/top" and source.class_names[9] == "Ankle boot"
    assert source.has_labels("train") and source.has_labels("test")
    for split, num in SIZES.items():
        examples = _examples(source, split)
        images = np.stack([x for x, _ in examples])
        assert images.shape == (num, 28, 28, 3) and images.dtype == np.uint8
        for channel in range(3):
            np.testing.assert_array_equal(images[..., channel], _pixels(split, num))
        np.testing.assert_array_equal([y for _, y in examples], _labels(split, num))
        labels = source.load_labels(split)
        assert labels.dtype == np.int64
        np.testing.assert_array_equal(labels, _labels(split, num))


def test_slices_and_example_ids_keep_the_files_positions(tmp_path):
    write_fashion_mnist(str(tmp_path))
    source = registry.get_dataset("fashion_mnist", data_dir=str(tmp_path))

    def ids(split, **kwargs):
        return [int(x[0, 0, 0]) for x, _ in _examples(source, split, **kwargs)]

    assert source.num_examples("train[:5]") == 5 and ids("train[:5]") == [0, 1, 2, 3, 4]
    assert ids("train[10:]") == list(range(10, 20))
    assert source.num_examples("test[:50%]") == 4
    assert ids("test[:50%]") == [100, 101, 102, 103]
    assert ids("train[10:]", example_ids=[0, 7]) == [10, 17]
    np.testing.assert_array_equal(source.load_labels("train[10:]"),
                                  _labels("train", 20)[10:])
    assert sorted(ids("train", shuffle_files=True)) == list(range(20))


@pytest.mark.parametrize("subfolder", fashion_mnist.SUBFOLDERS)
def test_files_in_a_subfolder_of_data_dir_are_found(tmp_path, subfolder):
    write_fashion_mnist(str(tmp_path / subfolder))
    source = registry.get_dataset("fashion_mnist", data_dir=str(tmp_path))
    assert dict(source.split_sizes) == SIZES
    assert os.path.dirname(source.files["test", "labels"]) == str(tmp_path / subfolder)


def test_data_dir_wins_over_the_debian_package(tmp_path, no_debian_package):
    write_fashion_mnist(no_debian_package, sizes={"train": 12, "test": 4})
    write_fashion_mnist(str(tmp_path / "mine"), gzipped=False)
    assert dict(registry.get_dataset("fashion_mnist").split_sizes) == {
        "train": 12, "test": 4}
    assert dict(registry.get_dataset("fashion_mnist", data_dir=str(tmp_path / "mine"))
                .split_sizes) == SIZES
    # A data_dir without the files (a TFDS data_dir, say) falls back to Debian's.
    assert dict(registry.get_dataset("fashion_mnist", data_dir=str(tmp_path / "empty"))
                .split_sizes) == {"train": 12, "test": 4}


def test_the_files_read_are_the_sources_provenance(tmp_path, no_debian_package):
    """What a run records under result.json's 'data' (issue 44, item 3): the four
    files it read, wherever they were found."""
    write_fashion_mnist(no_debian_package, sizes={"train": 12, "test": 4})
    write_fashion_mnist(str(tmp_path / "mine"), gzipped=False)
    for data_dir, folder in ((None, no_debian_package), (str(tmp_path / "mine"),
                                                          str(tmp_path / "mine"))):
        provenance = registry.get_dataset("fashion_mnist", data_dir=data_dir).provenance()
        assert sorted(provenance["files"]) == ["test/images", "test/labels",
                                               "train/images", "train/labels"]
        assert all(path.startswith(os.path.realpath(folder))
                   for path in provenance["files"].values())
        assert provenance["name"] == "fashion_mnist" and provenance["num_classes"] == 10


def test_nowhere_is_one_error_naming_apt_get_and_data_dir(tmp_path):
    data_dir = str(tmp_path / "empty")
    os.mkdir(data_dir)
    with pytest.raises(fashion_mnist.FashionMnistNotFoundError) as info:
        registry.get_dataset("fashion_mnist", data_dir=data_dir)
    message = str(info.value)
    assert "apt-get install dataset-fashion-mnist" in message
    assert "--data_dir=DIR, a folder holding the four files" in message
    assert data_dir in message and "TFDS's fashion_mnist is not prepared" in message
    # preflight reports it as the --dataset flag's error.
    cfg = config(dataset="fashion_mnist", data_dir=data_dir, image_size=28,
                 model_dir=str(tmp_path / "run"), train_steps=1)
    with pytest.raises(ConfigError, match="^--dataset: Fashion-MNIST is not on this "
                       "machine.*apt-get install dataset-fashion-mnist"):
        preflight.load_source(cfg)


def test_tfds_prepared_copy_is_the_last_resort(tmp_path):
    with tfds.testing.mock_data(num_examples=4):
        source = registry.get_dataset("fashion_mnist", data_dir=str(tmp_path))
        assert isinstance(source, tfds_source.TFDSSource)
        assert source.num_examples("train") == 60_000


def test_an_incomplete_set_of_files_names_the_missing_ones(tmp_path):
    paths = write_fashion_mnist(str(tmp_path))
    os.remove(paths["test", "labels"])
    with pytest.raises(fashion_mnist.IdxFormatError,
                       match=r"but not t10k-labels-idx1-ubyte\[\.gz\]"):
        registry.get_dataset("fashion_mnist", data_dir=str(tmp_path))


def _truncate(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:-5])


def _wrong_magic(path):
    with open(path, "r+b") as f:
        f.write((2051).to_bytes(4, "big"))


def _corrupt_gzip(path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2:] = b"\xff" * (len(data) - len(data) // 2)
    with open(path, "wb") as f:
        f.write(bytes(data))


def _one_label_short(path):
    _write_idx(path, _labels("train", 19), 2049, gzipped=False)


def _label_ten(path):
    _write_idx(path, np.full([20], 10, np.uint8), 2049, gzipped=False)


@pytest.mark.parametrize("gzipped, what, damage, reason", [
    (False, "images", _truncate, "is truncated: its header says 20x28x28 = 15680 bytes "
                                 "of images, it holds 15675"),
    (False, "labels", _wrong_magic, "has IDX magic number 2051, not 2049"),
    (True, "images", _truncate, "cannot read .*truncated gzip"),
    (True, "labels", _corrupt_gzip, "cannot read .*corrupt"),
    (False, "labels", _one_label_short, "20 images but 19 labels"),
    (False, "labels", _label_ten, "holds label 10; labels are 0..9"),
], ids=["truncated", "wrong_magic", "truncated_gzip", "corrupt_gzip", "count_mismatch",
        "label_out_of_range"])
def test_a_damaged_file_is_named_with_what_is_wrong(tmp_path, gzipped, what, damage,
                                                    reason):
    paths = write_fashion_mnist(str(tmp_path), gzipped=gzipped)
    path = paths["train", what]
    damage(path)
    with pytest.raises(fashion_mnist.IdxFormatError, match=reason) as info:
        registry.get_dataset("fashion_mnist", data_dir=str(tmp_path))
    assert repr(path) in str(info.value)


def test_debian_package_holds_the_real_dataset(monkeypatch):
    """The real Fashion-MNIST as `apt-get install dataset-fashion-mnist` installs it."""
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", REAL_DEBIAN_DIR)
    if fashion_mnist.find_idx_files(None) is None:
        message = (f"Fashion-MNIST is not in {REAL_DEBIAN_DIR}: "
                   f"`{fashion_mnist.DEBIAN_INSTALL}` (as root) installs it")
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message}; {REQUIRE_ENV}=1 requires it.")
        pytest.skip(f"{message} (.ci/run does, and sets {REQUIRE_ENV}=1).")
    source = registry.get_dataset("fashion_mnist")
    assert isinstance(source, fashion_mnist.FashionMnistSource)
    assert dict(source.split_sizes) == {"train": 60_000, "test": 10_000}
    for split, per_class in (("train", 6000), ("test", 1000)):
        np.testing.assert_array_equal(np.bincount(source.load_labels(split)),
                                      [per_class] * 10)
    image, label = next(iter(source.load("test[-1:]")))
    assert image.shape == (28, 28, 3) and image.dtype.name == "uint8"
    assert 0 <= int(label) <= 9 and int(np.asarray(image).max()) > 100


def test_the_tinted_variant_is_the_grey_images_times_one_fixed_colour_each(tmp_path):
    """'fashion_mnist_tinted' (the colour studies): the same files, ids and labels, each
    image its grey pixels times a tint drawn from (seed, split index) that a second
    source draws again; recorded in its provenance. Only from the IDX files."""
    data_dir = str(tmp_path / "files")
    write_fashion_mnist(data_dir)
    plain = registry.get_dataset("fashion_mnist", data_dir=data_dir)
    tinted = registry.get_dataset("fashion_mnist_tinted", data_dir=data_dir)
    assert tinted.name == "fashion_mnist_tinted" and tinted.split_sizes == plain.split_sizes
    grey, labels = map(np.stack, zip(*_examples(plain, "test")))
    coloured, tinted_labels = map(np.stack, zip(*_examples(tinted, "test")))
    np.testing.assert_array_equal(labels, tinted_labels)
    tint = fashion_mnist.tints("test", len(labels))
    assert tint.min() >= fashion_mnist.TINT_LOW and tint.max() <= 1.0
    expected = np.round(grey[..., :1].astype(np.float32) * tint[:, None, None, :])
    np.testing.assert_array_equal(coloured, expected.astype(np.uint8))
    assert not np.array_equal(coloured[..., 0], coloured[..., 1])  # colour, not grey
    again = np.stack([x for x, _ in _examples(
        registry.get_dataset("fashion_mnist_tinted", data_dir=data_dir), "test")])
    np.testing.assert_array_equal(again, coloured)
    assert not np.array_equal(fashion_mnist.tints("train", 4), tint[:4])
    assert tinted.provenance()["tint"]["seed"] == fashion_mnist.TINT_SEED
    assert tinted.data_identity("test") != plain.data_identity("test")
    with pytest.raises(fashion_mnist.FashionMnistNotFoundError, match="IDX files only"):
        registry.get_dataset("fashion_mnist_tinted", data_dir=str(tmp_path))
