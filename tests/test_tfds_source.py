"""Tests for simclr_tf.data.tfds_source: TFDS sources (mocked)."""
import _thread
import socket
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from simclr_tf.data import registry, tfds_source


def _all(dataset):
    return [(np.asarray(x), int(y)) for x, y in dataset.as_numpy_iterator()]


def test_tfds_sizes_come_from_the_table_offline():
    cifar = registry.get_dataset("cifar10")
    assert cifar.num_classes == 10
    assert cifar.num_examples("train") == 50_000
    assert cifar.num_examples("train[:10%]") == 5_000
    assert cifar.num_examples("test") == 10_000
    imagenet = registry.get_dataset("imagenet2012")
    assert imagenet.num_classes == 1000
    assert imagenet.num_examples("train") == 1_281_167
    assert imagenet.num_examples("validation") == 50_000
    assert registry.get_dataset("imagenet2012_subset/1pct").num_examples("train") == 12_811
    assert registry.get_dataset("imagenet2012_subset/10pct").num_examples("train") == 128_116
    stl = registry.get_dataset("stl10")
    assert stl.num_examples("unlabelled") == 100_000
    assert not stl.has_labels("unlabelled") and stl.has_labels("train")
    assert registry.get_dataset("cifar100").num_classes == 100


def test_tfds_unprepared_data_fails_clearly():
    with pytest.raises(ValueError, match="tfds build cifar10"):
        registry.get_dataset("cifar10", data_dir="/nonexistent").load("train")


def test_tfds_unknown_and_unprepared_fails_clearly():
    with pytest.raises(ValueError, match="emnist.*not prepared.*KNOWN_TFDS_DATASETS"):
        registry.get_dataset("emnist")
    with pytest.raises(ValueError, match="Unknown dataset 'no_such_dataset'"):
        registry.get_dataset("no_such_dataset")


def test_a_folder_given_without_its_prefix_is_named_with_the_fix(tmp_path):
    """An existing folder as --dataset=PATH: the error gives --dataset=folder:PATH
    (issue 44, item 16)."""
    with pytest.raises(ValueError, match=f"it is a folder; an image folder is given as "
                       f"--dataset=folder:{tmp_path}$"):
        registry.get_dataset(str(tmp_path))


@pytest.mark.parametrize("name,num_classes", [
    ("cifar10", 10), ("imagenet2012", 1000), ("imagenet2012_subset/1pct", 1000),
    ("mnist", 10),
])
def test_tfds_load_under_mock(name, num_classes):
    with tfds.testing.mock_data(num_examples=6):
        source = registry.get_dataset(name)
        examples = _all(source.load("train", shuffle_files=True))
    assert len(examples) == 6
    for image, label in examples:
        assert image.ndim == 3 and image.shape[-1] == 3 and image.dtype == np.uint8
        assert 0 <= label < num_classes


def test_tfds_unlabelled_split_has_label_minus_one():
    with tfds.testing.mock_data(num_examples=4):
        source = registry.get_dataset("stl10")
        labels = [y for _, y in _all(source.load("unlabelled"))]
    assert labels == [-1] * 4


def test_tfds_data_absent_from_data_dir_is_found_before_reading(tmp_path):
    source = registry.get_dataset("cifar10", data_dir=str(tmp_path))  # sizes: our table
    with pytest.raises(tfds_source.DatasetNotPreparedError) as info:
        source.check_prepared()
    message = str(info.value)
    for part in ("not prepared in --data_dir=", "--tfds_download",
                 "`tfds build cifar10 --data_dir=DIR`", "pass --data_dir=DIR"):
        assert part in message, message
    with tfds.testing.mock_data(num_examples=4):
        registry.get_dataset("cifar10", data_dir=str(tmp_path)).check_prepared()


@pytest.mark.parametrize("name, guess", [
    ("cifar-10", "cifar10"), ("CIFAR10", "cifar10"), ("imgnet2012", "imagenet2012"),
    ("digit", "digits"), ("no_such_dataset_xyz", None),
])
def test_a_misspelt_dataset_name_gets_the_nearest_one(name, guess):
    with pytest.raises(tfds_source.UnknownDatasetError) as info:
        registry.get_dataset(name)
    assert f"Unknown dataset {name!r}" in str(info.value)
    assert ("Did you mean" in str(info.value)) == (guess is not None)
    if guess:
        assert str(info.value).endswith(f"Did you mean {guess!r}?")


_REAL_BUILDER = tfds.builder
# Before conftest's autouse fixture replaces it (tests send no traffic).
_REAL_PROBE = tfds_source.network_problem


class _FakeBuilder:
    """What TFDSSource reads of a TFDS builder; prepared once downloaded."""
    downloads = []

    def __init__(self, name, data_dir=None):
        prepared = bool(self.downloads)
        split = type("Split", (), {"num_examples": 7})()
        label = type("Label", (), {"num_classes": 3})()
        self.info = type("Info", (), dict(
            splits={"train": split} if prepared else {},
            supervised_keys=("image", "label"),
            features={"image": object(), "label": label}))()
        self.name, self.data_dir = name, data_dir or "/tfds_default"

    def download_and_prepare(self):
        self.downloads.append((self.name, self.data_dir))

    def as_dataset(self, **kwargs):
        return tf.data.Dataset.range(1)


def test_a_missing_dataset_is_downloaded_before_anything_is_built(monkeypatch, capsys):
    """--tfds_download (default): TFDS's download_and_prepare into data_dir, once."""
    monkeypatch.setattr(_FakeBuilder, "downloads", [])
    monkeypatch.setattr(tfds_source.tfds, "builder", _FakeBuilder)
    source = registry.get_dataset("my_dataset", data_dir="/data", download=True)
    assert _FakeBuilder.downloads == [("my_dataset", "/data")]
    assert source.num_examples("train") == 7 and source.num_classes == 3
    source.check_prepared()
    assert "downloading and preparing it there" in capsys.readouterr().out
    # Prepared now: nothing is downloaded again.
    registry.get_dataset("my_dataset", data_dir="/data", download=True)
    assert len(_FakeBuilder.downloads) == 1


def test_download_off_or_failing_says_how_to_prepare_offline(monkeypatch, tmp_path):
    monkeypatch.setattr(_FakeBuilder, "downloads", [])
    monkeypatch.setattr(tfds_source.tfds, "builder", _FakeBuilder)
    with pytest.raises(tfds_source.DatasetNotPreparedError, match="tfds build my_dataset"):
        registry.get_dataset("my_dataset", data_dir="/data", download=False)
    assert not _FakeBuilder.downloads
    # The real builder (the tests refuse downloads: conftest). Not monkeypatch.undo(),
    # which would undo that refusal too.
    monkeypatch.setattr(tfds_source.tfds, "builder", _REAL_BUILDER)
    with pytest.raises(tfds_source.DatasetNotPreparedError) as info:
        registry.get_dataset("cifar10", data_dir=str(tmp_path), download=True)
    message = str(info.value)
    assert "Downloading it here failed: downloads are disabled in the tests" in message
    assert "`tfds build cifar10 --data_dir=DIR`" in message


def _closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_offline_machine_is_told_in_seconds_with_the_tfds_build_advice(monkeypatch):
    """No connection to TFDS's download host: refused at once, nothing downloaded
    (TFDS's own retries took about 3.5 minutes). The probe goes to a closed port
    on 127.0.0.1 here."""
    monkeypatch.setattr(_FakeBuilder, "downloads", [])
    monkeypatch.setattr(tfds_source.tfds, "builder", _FakeBuilder)
    monkeypatch.setattr(tfds_source, "network_problem", _REAL_PROBE)
    port = _closed_port()
    monkeypatch.setattr(tfds_source, "DOWNLOAD_PROBE", ("127.0.0.1", port))
    start = time.monotonic()
    with pytest.raises(tfds_source.DatasetNotPreparedError) as info:
        registry.get_dataset("my_dataset", data_dir="/data", download=True)
    assert time.monotonic() - start < tfds_source.PROBE_TIMEOUT_S + 1
    message = str(info.value)
    assert f"cannot download it: no connection to 127.0.0.1:{port}" in message
    assert "`tfds build my_dataset --data_dir=DIR`" in message
    assert not _FakeBuilder.downloads


def test_ctrl_c_stops_a_download_whose_retries_swallow_it(monkeypatch, python_sigint):
    """TFDS's retry loops catch KeyboardInterrupt; the download runs in a thread, so
    Ctrl-C in the main thread ends the wait at once."""
    release = threading.Event()

    class _Stuck(_FakeBuilder):
        def download_and_prepare(self):
            while not release.is_set():
                try:
                    time.sleep(0.05)
                except KeyboardInterrupt:
                    pass

    monkeypatch.setattr(_Stuck, "downloads", [])
    monkeypatch.setattr(tfds_source.tfds, "builder", _Stuck)
    timer = threading.Timer(0.5, _thread.interrupt_main)  # Ctrl-C (`python_sigint`)
    timer.start()
    # Were the interrupt lost, the download ends after 30 s and the test fails.
    deadline = threading.Timer(30, release.set)
    deadline.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            registry.get_dataset("my_dataset", data_dir="/data", download=True)
        assert time.monotonic() - start < 3
    finally:
        release.set()
        timer.cancel()
        deadline.cancel()


def test_the_message_for_imagenet_not_prepared_does_not_offer_a_download():
    """Newcomer 2026-12-06, 13: ImageNet's message said 'Download it here with
    --tfds_download (the default)' (on already; TFDS cannot download ImageNet), then
    that it needs a manual download, then 'This machine cannot download it'. For a
    dataset of a manual download, only the way that works is said."""
    from simclr_tf.data import tfds_source  # pylint: disable=import-outside-toplevel
    imagenet = tfds_source.not_prepared_message("imagenet2012", None, "/d/imagenet2012")
    assert "Download it here" not in imagenet and "manual download" in imagenet
    cifar = tfds_source.not_prepared_message("cifar10", None, "/d/cifar10")
    assert "Download it here with --tfds_download (the default)" in cifar
