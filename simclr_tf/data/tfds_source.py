"""TFDS datasets (`name` or `name/config`, optionally `:version`).

Read from `data_dir`. With `download=True` (run.py's `--tfds_download`, on by default
as in the authors' code) a dataset missing from data_dir is downloaded and prepared
there first (TFDS's `download_and_prepare`; ImageNet needs its manual download in
data_dir/downloads/manual); off, nothing is ever downloaded (shared or read-only
data_dirs). Split sizes come from the prepared dataset's metadata, or for datasets
we know (`KNOWN_TFDS_DATASETS`: imagenet2012, imagenet2012_subset/1pct and /10pct,
cifar10, cifar100, stl10, ...) from our own table: offline, TFDS metadata has no
split sizes until the data is prepared. A dataset neither prepared nor known (and
not downloaded) raises DatasetNotPreparedError (a ValueError);
`TFDSSource.check_prepared` says whether the data is there.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import tempfile
import threading
from typing import Mapping

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from simclr_tf.data.sources import (FOLDER_PREFIX, UNLABELLED, DatasetSource,
                                    check_example_ids, ensure_rgb, keep_ids, shard)


@dataclasses.dataclass(frozen=True)
class KnownDataset:
    """What we know about a TFDS dataset without its (offline, absent) metadata.

    Attributes:
      num_classes: number of label classes.
      split_sizes: examples per split.
      unlabelled_splits: splits whose labels are all -1.
    """
    num_classes: int
    split_sizes: Mapping[str, int]
    unlabelled_splits: tuple[str, ...] = ()


KNOWN_TFDS_DATASETS: dict[str, KnownDataset] = {
    "imagenet2012": KnownDataset(
        1000, {"train": 1_281_167, "validation": 50_000, "test": 100_000}, ("test",)),
    # The SimCLR authors' semi-supervised subsets of the ImageNet train split.
    "imagenet2012_subset/1pct": KnownDataset(
        1000, {"train": 12_811, "validation": 50_000}),
    "imagenet2012_subset/10pct": KnownDataset(
        1000, {"train": 128_116, "validation": 50_000}),
    "cifar10": KnownDataset(10, {"train": 50_000, "test": 10_000}),
    "cifar100": KnownDataset(100, {"train": 50_000, "test": 10_000}),
    "stl10": KnownDataset(
        10, {"train": 5_000, "test": 8_000, "unlabelled": 100_000}, ("unlabelled",)),
    "mnist": KnownDataset(10, {"train": 60_000, "test": 10_000}),
    "fashion_mnist": KnownDataset(10, {"train": 60_000, "test": 10_000}),
    "svhn_cropped": KnownDataset(
        10, {"train": 73_257, "test": 26_032, "extra": 531_131}),
    "oxford_flowers102": KnownDataset(
        102, {"train": 1_020, "validation": 1_020, "test": 6_149}),
    "oxford_iiit_pet": KnownDataset(37, {"train": 3_680, "test": 3_669}),
    "food101": KnownDataset(101, {"train": 75_750, "validation": 25_250}),
    "dtd": KnownDataset(47, {"train": 1_880, "validation": 1_880, "test": 1_880}),
    "tf_flowers": KnownDataset(5, {"train": 3_670}),
}
# `imagenet2012_subset` alone means its default config.
KNOWN_TFDS_DATASETS["imagenet2012_subset"] = KNOWN_TFDS_DATASETS[
    "imagenet2012_subset/1pct"]

# label_fraction -> the authors' TFDS subset of the ImageNet train split.
AUTHORS_IMAGENET_SUBSETS = {
    0.01: "imagenet2012_subset/1pct",
    0.1: "imagenet2012_subset/10pct",
}


class UnknownDatasetError(ValueError):
    """A name TFDS does not know (or cannot open: a wrong config or version)."""


class DatasetNotPreparedError(ValueError):
    """A TFDS dataset whose data is not in data_dir (and was not downloaded). Its
    message is run.py's (`not_prepared_message`); `name`, `data_dir` (as given) and
    `builder_data_dir` (where TFDS looked) let a tool without --tfds_download say
    the fix in its own words (`not_prepared_message(..., download_flag=None)`)."""

    def __init__(self, name: str, data_dir: str | None, builder_data_dir: str,
                 more: str = ""):
        super().__init__(not_prepared_message(name, data_dir, builder_data_dir) + more)
        self.name, self.data_dir = name, data_dir
        self.builder_data_dir = str(builder_data_dir)


def not_prepared_message(name: str, data_dir: str | None, builder_data_dir: str,
                         download_flag: str | None = "--tfds_download") -> str:
    """What to do when `name` has no data in `data_dir` (the one wording, offline):
    download it here with `download_flag` (run.py's; None: a tool that cannot), or
    prepare it with TFDS's own command and pass --data_dir."""
    where = (f"--data_dir={data_dir!r}" if data_dir else
             "TFDS's default data_dir (no --data_dir given)")
    manual = (" (ImageNet also needs its manual download in DIR/downloads/manual)"
              if name.startswith("imagenet") else "")
    build = f"`tfds build {table_name(name)} --data_dir=DIR`{manual}"
    # TFDS cannot download ImageNet (its manual download): no --tfds_download advice.
    fix = (f"Download it here with {download_flag} (the default), or prepare it on a "
           f"machine with internet access: {build}, copy DIR here and pass --data_dir=DIR."
           if download_flag and not manual else
           f"Prepare it with {build} (on a machine with internet access; copy DIR here "
           "if that is another one) and pass --data_dir=DIR.")
    return f"TFDS dataset {name!r} is not prepared in {where}: nothing in " \
        f"{str(builder_data_dir)!r}. {fix}"


def _builder(name: str, data_dir: str | None):
    """`tfds.builder(name, data_dir=data_dir)`, leaving nothing in the temporary
    folder: for a dataset not prepared, TFDS reads its metadata through a
    `tempfile.mkdtemp()` folder that it never removes (tensorflow-datasets 4.9.10,
    `DatasetInfo.initialize_from_bucket`), an empty /tmp/tmp*tfds per call. Python's
    temporary folder is one of ours meanwhile, removed after."""
    with tempfile.TemporaryDirectory(prefix="simclr_tf_tfds_") as scratch:
        default, tempfile.tempdir = tempfile.tempdir, scratch
        try:
            return tfds.builder(name, data_dir=data_dir)
        finally:
            tempfile.tempdir = default


# Where TFDS downloads from first (its metadata and prepared datasets); reaching it
# tells an online machine from an offline one in seconds.
DOWNLOAD_PROBE = ("storage.googleapis.com", 443)
PROBE_TIMEOUT_S = 5.0


def network_problem(address=None, timeout=None) -> str | None:
    """Why TFDS cannot download from here (the name does not resolve, or no TCP
    connection within `timeout` seconds), or None when it can reach
    `DOWNLOAD_PROBE`."""
    host, port = address or DOWNLOAD_PROBE
    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.gaierror as error:
        return f"{host} does not resolve ({error.strerror or error}; no network?)"
    except OSError as error:
        return (f"no connection to {host}:{port} within {timeout:g} s "
                f"({error.strerror or type(error).__name__}; offline or behind a firewall?)")


def tfds_names() -> list[str]:
    """Dataset names TFDS knows offline, and the configs of our table."""
    try:
        names = list(tfds.list_builders(with_community_datasets=False))
    except Exception:  # pylint: disable=broad-except  # a hint only: never fail here
        names = []
    return names + list(KNOWN_TFDS_DATASETS)


def table_name(name: str) -> str:
    """'cifar10:3.0.2' -> 'cifar10' (versions do not change sizes we rely on)."""
    return name.split(":")[0]


class TFDSSource(DatasetSource):
    """A TFDS image-classification dataset read from `data_dir` (downloaded there
    first when `download` and it is missing).

    Args:
      name: TFDS name, e.g. 'cifar10', 'imagenet2012_subset/10pct', 'mnist:3.0.1'.
      data_dir: TFDS data folder (TFDS's default when None).
      download: download and prepare the dataset in data_dir when it is missing.
    """

    def __init__(self, name: str, data_dir: str | None = None, download: bool = False):
        try:
            self._builder = _builder(name, data_dir)
        except (ValueError, AssertionError) as e:  # unknown, unparsable, bad config
            reason = str(e).strip().splitlines()[0][:200]
            if isinstance(e, tfds.core.registered.DatasetNotFoundError) or \
                    reason.startswith("Parsing builder name string"):
                reason = "not a TFDS dataset"
            if os.path.isdir(os.path.expanduser(name)):  # an image folder, unprefixed
                raise UnknownDatasetError(
                    f"Unknown dataset {name!r}: it is a folder; an image folder is "
                    f"given as --dataset={FOLDER_PREFIX}{name}") from e
            raise UnknownDatasetError(
                f"Unknown dataset {name!r} ({reason}): use a TFDS name such as "
                f"'cifar10', 'digits' or '{FOLDER_PREFIX}/path'.") from e
        self.name = name
        self.data_dir = data_dir
        if download and not self._builder.info.splits:
            self._download()
        info = self._builder.info
        known = KNOWN_TFDS_DATASETS.get(table_name(name))
        self._prepared = bool(info.splits)
        if self._prepared:
            self._split_sizes = {s: info.splits[s].num_examples for s in info.splits}
        elif known is not None:
            self._split_sizes = dict(known.split_sizes)
        else:
            raise DatasetNotPreparedError(
                name, data_dir, self._builder.data_dir, " (Its split sizes are not in "
                "simclr_tf's table either: register them in "
                "simclr_tf.data.tfds_source.KNOWN_TFDS_DATASETS to know them offline.)")
        keys = info.supervised_keys
        if not (isinstance(keys, tuple) and len(keys) == 2
                and all(isinstance(k, str) for k in keys)):
            keys = ("image", "label")
        self._image_key, self._label_key = keys
        if self._image_key not in info.features:
            raise ValueError(f"Dataset {name!r} has no image feature "
                             f"{self._image_key!r}; features: {list(info.features)}.")
        label_feature = (info.features[self._label_key]
                         if self._label_key in info.features else None)
        if hasattr(label_feature, "num_classes"):
            self.num_classes = int(label_feature.num_classes)
        elif known is not None:
            self.num_classes = known.num_classes
        else:
            raise ValueError(f"Dataset {name!r} has no class label {self._label_key!r}.")
        self._unlabelled = known.unlabelled_splits if known is not None else ()

    def _download(self):
        """Downloads and prepares the dataset in data_dir (TFDS), then re-reads it.

        An offline machine is told in seconds (`network_problem`), not after TFDS's
        minutes of retries; the download runs in a thread so that Ctrl-C stops it.
        """
        problem = network_problem()
        if problem is not None:
            raise DatasetNotPreparedError(
                self.name, self.data_dir, self._builder.data_dir,
                f" This machine cannot download it: {problem}.")
        print(f"TFDS dataset {self.name!r} is not in {self._builder.data_dir}: "
              "downloading and preparing it there (once; --notfds_download turns this "
              "off; Ctrl-C stops it) ...", flush=True)
        failure = []

        def download():
            try:
                self._builder.download_and_prepare()
            except BaseException as error:  # pylint: disable=broad-except  # reported below
                failure.append(error)

        # A daemon thread: TFDS's retries swallow KeyboardInterrupt, the main thread
        # waiting here does not (and the process may exit while it still runs).
        worker = threading.Thread(target=download, name="tfds-download", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
        if failure:  # network, disk, manual download
            error = failure[0]
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
            raise DatasetNotPreparedError(
                self.name, self.data_dir, self._builder.data_dir,
                f" Downloading it here failed: {reason}") from error
        self._builder = _builder(self.name, self.data_dir)

    @property
    def split_sizes(self) -> Mapping[str, int]:
        return self._split_sizes

    @property
    def unlabelled_splits(self) -> tuple[str, ...]:
        return self._unlabelled

    def provenance(self):
        return dict(super().provenance(), data_dir=str(self._builder.data_dir),
                    version=str(self._builder.info.version))

    def data_identity(self, split: str) -> dict:
        """The base identity and the prepared dataset's version and data folder."""
        return dict(super().data_identity(split), version=str(self._builder.info.version),
                    data_dir=str(self._builder.data_dir))

    def check_prepared(self) -> None:
        """Raises DatasetNotPreparedError unless the data can be read from data_dir.

        The one place that decides whether the dataset is available (downloading on
        demand would go here). It asks for the dataset of one split, as reading
        does: instant, nothing is read, and `tfds.testing.mock_data` satisfies it.
        """
        self._as_dataset(next(iter(self.split_sizes)))

    def _as_dataset(self, split, *, shuffle_files=False, read_config=None,
                    skip_image_decoding=False):
        self.split_ranges(split)  # Validates the split with a clear message.
        decoders = ({self._image_key: tfds.decode.SkipDecoding()}
                    if skip_image_decoding else None)
        try:
            return self._builder.as_dataset(
                split=split, shuffle_files=shuffle_files, decoders=decoders,
                read_config=read_config or tfds.ReadConfig())
        except AssertionError as e:  # TFDS's way of saying "no data here".
            raise DatasetNotPreparedError(self.name, self.data_dir,
                                          self._builder.data_dir) from e

    def load_labels(self, split: str) -> np.ndarray:
        dataset = self._as_dataset(split, skip_image_decoding=True)
        dataset = dataset.map(lambda ex: ex[self._label_key]).batch(8192)
        batches = [np.asarray(b) for b in dataset.as_numpy_iterator()]
        labels = np.concatenate(batches) if batches else np.zeros([0], np.int64)
        if not self.has_labels(split):
            labels = np.full_like(labels, UNLABELLED)
        return labels.astype(np.int64)

    def share_ids(self, split, num_shares, index, example_ids=None):
        """Contiguous blocks of the ids (`DatasetSource.share_ids`): TFDS reads its
        record files by range, so a block is read alone, where every n-th example
        would make every pipeline read every file. A prepared TFDS split is stored
        shuffled (TFDS orders examples by a hash of their keys when it writes
        them), so a block is as mixed as the split."""
        ids = self._ids_to_share(split, num_shares, index, example_ids)
        return ids[len(ids) * index // num_shares:len(ids) * (index + 1) // num_shares]

    def _sub_split(self, split, start, stop):
        """The spec of positions [start, stop) of `split`'s canonical order (e.g.
        'train[100:200]', or a '+' of ranges where `split` joins several)."""
        parts, offset = [], 0
        for base, first, last in self.split_ranges(split):
            size = max(last - first, 0)
            lo, hi = max(start - offset, 0), min(stop - offset, size)
            if lo < hi:
                parts.append(f"{base}[{first + lo}:{first + hi}]")
            offset += size
        return "+".join(parts)

    def load(self, split, *, input_context=None, shuffle_files=False, example_ids=None):
        labelled = self.has_labels(split)
        image_feature = self._builder.info.features[self._image_key]

        def to_pair(image, label):
            label = tf.cast(label, tf.int32) if labelled else tf.constant(UNLABELLED)
            return ensure_rgb(image), label

        if example_ids is None:
            dataset = self._as_dataset(
                split, shuffle_files=shuffle_files,
                read_config=tfds.ReadConfig(input_context=input_context))
            return dataset.map(lambda ex: to_pair(ex[self._image_key], ex[self._label_key]),
                               num_parallel_calls=tf.data.AUTOTUNE)
        # Ids are positions in the canonical order: read the range that holds them
        # (a pipeline's share is one block: `share_ids`), in order, select while the
        # images are still encoded, then shard and decode what was kept.
        num_examples = self.num_examples(split)
        ids = check_example_ids(example_ids, num_examples, split)
        if not ids.size:
            raise ValueError(f"`example_ids` of split {split!r} is empty: nothing to read.")
        first, last = int(ids[0]), int(ids[-1]) + 1
        dataset = self._as_dataset(self._sub_split(split, first, last),
                                   skip_image_decoding=True)
        # (`take`: TFDS's test mock ignores slicing and gives the whole split.)
        dataset = dataset.take(last - first)
        dataset = shard(keep_ids(dataset, ids - first, last - first), input_context)
        return dataset.map(
            lambda ex: to_pair(image_feature.decode_example(ex[self._image_key]),
                               ex[self._label_key]),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
