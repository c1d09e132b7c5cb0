"""Dataset sources: TFDS, image folders, the offline 'digits', label subsets.

Every dataset is reached through one interface, `DatasetSource`, obtained by name:

```python
source = get_dataset("cifar10", data_dir="/data/tfds")   # any TFDS image dataset
source = get_dataset("folder:/data/my_images")           # a folder of images
source = get_dataset("digits")                           # offline, scikit-learn's digits
source.num_classes                 # 10 (0 for an unlabelled folder)
source.splits                      # ('train', 'test')
source.num_examples("train[:10%]") # TFDS slicing syntax works for every source
source.has_labels("unlabelled")    # False for stl10's unlabelled split
ds = source.load("train", input_context=ctx, shuffle_files=True)
# ds yields (image uint8 [H, W, 3], label int32 []), label -1 where there is none.
```

Names:
- `digits`: scikit-learn's bundled handwritten digits (1,797 8x8 grey images, 10
  classes), upsampled to 32x32 RGB uint8; splits 'train' (1,437) and 'test' (360),
  stratified with a fixed seed, so identical on every machine. Needs no download.
- `folder:/path`: a folder of JPEG, PNG, BMP and GIF files (first frame; TIFF, WebP,
  PPM/PGM through Pillow). Class subfolders make it labelled (classes sorted by name);
  image files directly in the folder make it unlabelled (label -1, pretraining only).
  Subfolders all named like splits (`train`, `validation`, `val`, `test`,
  `unlabelled`) make each one a split; otherwise the whole folder is split 'train'
  (use slices such as 'train[:90%]' / 'train[90%:]' for a held-out part). Grey,
  grey+alpha, RGBA, palette and 16-bit images are all converted to 8-bit RGB.
- anything else: a TFDS dataset (`name` or `name/config`, optionally `:version`),
  read from `data_dir`. Split sizes come from the prepared dataset's metadata, or for
  datasets we know (`KNOWN_TFDS_DATASETS`: imagenet2012, imagenet2012_subset/1pct and
  /10pct, cifar10, cifar100, stl10, ...) from our own table: offline, TFDS metadata
  has no split sizes until the data is prepared. A dataset neither prepared nor known
  raises ValueError. Nothing is ever downloaded.

Example ids: the position of an example in `load(split)` without sharding and with
`shuffle_files=False` (the split's canonical order). `stratified_subset_ids` picks
ids, `load(split, example_ids=...)` keeps only those, `write_subset_ids` records them.
`make_label_subset` is the semi-supervised entry point: stratified fractions for any
labelled dataset, the authors' TFDS subsets for ImageNet at 1% and 10%.
"""
from __future__ import annotations

import abc
import collections
import concurrent.futures
import dataclasses
import functools
import hashlib
import io
import json
import os
import types
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from absl import logging

UNLABELLED = -1
FOLDER_PREFIX = "folder:"
DIGITS_IMAGE_SIZE = 32
DIGITS_TEST_SIZE = 360
DIGITS_SPLIT_SEED = 0

# Decoded by tf.io.decode_image (GIF: first frame only).
TF_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
# Formats tf.io cannot decode, read through Pillow in a tf.numpy_function.
PIL_IMAGE_EXTENSIONS = (".tif", ".tiff", ".webp", ".ppm", ".pgm")
FOLDER_SPLIT_NAMES = ("train", "validation", "val", "test", "unlabelled")


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


# ---------------------------------------------------------------- helpers


def ensure_rgb(image: tf.Tensor) -> tf.Tensor:
    """Returns a [H, W, 3] image: grey (+alpha) is replicated, alpha is dropped.

    Args:
      image: [H, W, C] tensor with C in 1..4 (may be unknown statically).
    """
    channels = image.shape[-1]
    if channels == 3:
        return image
    if channels is not None:
        return tf.tile(image[..., :1], [1, 1, 3]) if channels < 3 else image[..., :3]
    dynamic = tf.shape(image)[-1]
    image = tf.cond(dynamic < 3, lambda: tf.tile(image[..., :1], [1, 1, 3]),
                    lambda: image[..., :3])
    image.set_shape([None, None, 3])
    return image


def split_ranges(split: str, split_sizes: Mapping[str, int],
                 dataset_name: str = "dataset") -> list[tuple[str, int, int]]:
    """Resolves a TFDS split spec ('train', 'train[:10%]', 'a+b[5:]') to ranges.

    Uses TFDS's own parser and rounding, so sizes agree with what TFDS reads.

    Args:
      split: the split spec.
      split_sizes: examples per base split.
      dataset_name: for error messages.

    Returns:
      A list of (base split, start, stop) with absolute, non-negative bounds.
    """
    if not isinstance(split, str) or not split:
        raise ValueError(f"`split` must be a non-empty string. Received: split={split!r}")
    infos = {name: types.SimpleNamespace(num_examples=n)
             for name, n in split_sizes.items()}
    try:
        instructions = tfds.core.ReadInstruction.from_spec(split).to_absolute(infos)
    except (ValueError, AssertionError, KeyError) as e:
        raise ValueError(
            f"Invalid split {split!r} for dataset {dataset_name!r}: {e} "
            f"Known splits and sizes: {dict(split_sizes)}.") from e
    ranges = []
    for instruction in instructions:
        size = split_sizes[instruction.splitname]
        start = instruction.from_ or 0
        stop = size if instruction.to is None else instruction.to
        ranges.append((instruction.splitname, start, stop))
    return ranges


def _example_count(ranges: Iterable[tuple[str, int, int]]) -> int:
    return sum(max(stop - start, 0) for _, start, stop in ranges)


def _check_example_ids(example_ids, num_examples: int, split: str) -> np.ndarray:
    ids = np.unique(np.asarray(example_ids, dtype=np.int64).reshape(-1))
    if ids.size and (ids[0] < 0 or ids[-1] >= num_examples):
        raise ValueError(
            f"`example_ids` must lie in [0, {num_examples}) for split {split!r}. "
            f"Received ids from {ids[0]} to {ids[-1]}.")
    return ids


def _keep_ids(dataset: tf.data.Dataset, ids: np.ndarray,
              num_examples: int) -> tf.data.Dataset:
    """Keeps the elements whose position is in `ids`."""
    # A dense mask (1 byte per example, 1.3 MB for ImageNet) needs no lookup-table
    # resource, which keeps the dataset easy to copy to every input pipeline.
    mask = np.zeros([num_examples], bool)
    mask[ids] = True
    mask = tf.constant(mask)
    dataset = dataset.enumerate().filter(lambda i, _: tf.gather(mask, i))
    return dataset.map(lambda _, element: element)


def _shard(dataset: tf.data.Dataset, input_context) -> tf.data.Dataset:
    if input_context is None or input_context.num_input_pipelines == 1:
        return dataset
    return dataset.shard(input_context.num_input_pipelines,
                         input_context.input_pipeline_id)


# ---------------------------------------------------------------- the interface


class DatasetSource(abc.ABC):
    """A named image-classification dataset with splits.

    Attributes:
      name: the name given to `get_dataset`.
      num_classes: number of classes (0 for an unlabelled dataset).
      splits: the base split names.
    """

    name: str
    num_classes: int

    @property
    @abc.abstractmethod
    def split_sizes(self) -> Mapping[str, int]:
        """Examples per base split."""

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.split_sizes)

    @property
    def unlabelled_splits(self) -> tuple[str, ...]:
        """Base splits without labels."""
        return ()

    def split_ranges(self, split: str) -> list[tuple[str, int, int]]:
        """(base split, start, stop) ranges of a split spec; ValueError if invalid."""
        return split_ranges(split, self.split_sizes, self.name)

    def num_examples(self, split: str) -> int:
        """Number of examples in `split` (a TFDS split spec: 'train[:10%]' works).

        Args:
          split: split spec.
        """
        return _example_count(self.split_ranges(split))

    def has_labels(self, split: str) -> bool:
        """Whether every example of `split` has a class label.

        Args:
          split: split spec.
        """
        if self.num_classes <= 0:
            return False
        return all(base not in self.unlabelled_splits
                   for base, _, _ in self.split_ranges(split))

    @abc.abstractmethod
    def load(self, split: str, *, input_context: tf.distribute.InputContext | None = None,
             shuffle_files: bool = False,
             example_ids: Sequence[int] | np.ndarray | None = None) -> tf.data.Dataset:
        """The examples of `split` as (uint8 image [H, W, 3], int32 label) pairs.

        Args:
          split: split spec ('train', 'test', 'train[:10%]', ...).
          input_context: a `tf.distribute.InputContext`; the result is this input
            pipeline's shard (by file for TFDS, by example otherwise).
          shuffle_files: read files in a random order (training). Ignored when
            `example_ids` is given, since ids are positions in the canonical order.
          example_ids: keep only these positions of the split (see module docstring).
            Selection happens before sharding.

        Returns:
          An unbatched, unrepeated `tf.data.Dataset`; labels are -1 where the split
          has none.
        """

    @abc.abstractmethod
    def load_labels(self, split: str) -> np.ndarray:
        """All labels of `split` in canonical order, int64 [num_examples]."""

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, num_classes={self.num_classes}, "
                f"split_sizes={dict(self.split_sizes)})")


class _ArraySource(DatasetSource):
    """A source whose examples are rows of per-split arrays (file paths or pixels)."""

    def __init__(self, name: str, num_classes: int,
                 rows: Mapping[str, Mapping[str, np.ndarray]],
                 unlabelled_splits: tuple[str, ...] = ()):
        self.name = name
        self.num_classes = num_classes
        self._rows = rows
        self._unlabelled = unlabelled_splits

    @property
    def split_sizes(self) -> Mapping[str, int]:
        return {split: len(columns["label"]) for split, columns in self._rows.items()}

    @property
    def unlabelled_splits(self) -> tuple[str, ...]:
        return self._unlabelled

    def _select(self, split: str) -> dict[str, np.ndarray]:
        parts = [
            {key: column[start:stop] for key, column in self._rows[base].items()}
            for base, start, stop in self.split_ranges(split)
        ]
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

    def load_labels(self, split: str) -> np.ndarray:
        return self._select(split)["label"].astype(np.int64)

    @abc.abstractmethod
    def _decode(self, columns: dict[str, tf.Tensor]) -> tf.Tensor:
        """One element's columns -> uint8 [H, W, 3] image."""

    def load(self, split, *, input_context=None, shuffle_files=False, example_ids=None):
        columns = self._select(split)
        num = len(columns["label"])
        order = np.arange(num)
        if example_ids is not None:
            order = _check_example_ids(example_ids, num, split)
        elif shuffle_files:
            # A fresh order per call; the pipeline's shuffle buffer does the rest.
            order = np.random.default_rng().permutation(num)
        columns = {key: column[order] for key, column in columns.items()}
        dataset = tf.data.Dataset.from_tensor_slices(columns)
        # Shard the light rows, before the decoding work.
        dataset = _shard(dataset, input_context)
        return dataset.map(
            lambda row: (ensure_rgb(self._decode(row)), tf.cast(row["label"], tf.int32)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


# ---------------------------------------------------------------- digits


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


class DigitsSource(_ArraySource):
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


# ---------------------------------------------------------------- image folders


def _is_image(filename: str) -> bool:
    return (not filename.startswith(".")
            and filename.lower().endswith(TF_IMAGE_EXTENSIONS + PIL_IMAGE_EXTENSIONS))


def _images_under(directory: str) -> list[str]:
    """Image files below `directory` (recursively), sorted for a stable order."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(os.path.join(root, f) for f in sorted(files) if _is_image(f))
    return found


def _subdirectories(directory: str) -> list[str]:
    return sorted(d for d in os.listdir(directory)
                  if not d.startswith(".") and os.path.isdir(os.path.join(directory, d)))


def _scan_split(directory: str) -> tuple[list[str], list[str] | None]:
    """(files, class name per file) of a split folder; classes None if unlabelled."""
    direct_images = sorted(f for f in os.listdir(directory)
                           if _is_image(f) and os.path.isfile(os.path.join(directory, f)))
    classes = [d for d in _subdirectories(directory)
               if _images_under(os.path.join(directory, d))]
    if direct_images and classes:
        raise ValueError(
            f"Folder {directory!r} mixes image files with class subfolders {classes}; "
            "put every image in a class subfolder (labelled) or none (unlabelled).")
    if direct_images:
        return [os.path.join(directory, f) for f in direct_images], None
    files, names = [], []
    for class_name in classes:
        class_files = _images_under(os.path.join(directory, class_name))
        files.extend(class_files)
        names.extend([class_name] * len(class_files))
    return files, names


def _pil_decode(path: bytes) -> np.ndarray:
    from PIL import Image  # Only needed for formats tf.io cannot read.

    with Image.open(io.BytesIO(open(path, "rb").read())) as image:
        image.seek(0)
        if image.mode in ("I;16", "I;16B", "I;16L", "I"):
            # 16/32-bit grey: keep the top 8 bits of 16-bit data.
            array = np.asarray(image, dtype=np.int64) >> 8
            array = np.clip(array, 0, 255).astype(np.uint8)
            return np.repeat(array[..., np.newaxis], 3, axis=-1)
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


# Images with more pixels are skipped as 'too_large' (2**27 px: 384 MiB as uint8 RGB;
# decompression bombs declare billions in a few bytes of header).
MAX_IMAGE_PIXELS = 2 ** 27
# Formats by magic bytes; tf.io.decode_image reads the first four, Pillow the rest.
_MAGIC = (
    (b"\xff\xd8\xff", "jpeg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"GIF87a", "gif"),
    (b"GIF89a", "gif"), (b"BM", "bmp"), (b"II*\x00", "tiff"), (b"MM\x00*", "tiff"),
    (b"P5", "pnm"), (b"P6", "pnm"), (b"P2", "pnm"), (b"P3", "pnm"),
)
_TF_FORMATS = ("jpeg", "png", "gif", "bmp")
# Complete files end with these markers; a file without one is decoded once to be sure
# (some cameras append data after a JPEG's end-of-image marker).
_END_MARKERS = {"jpeg": b"\xff\xd9", "png": b"IEND", "gif": b"\x3b"}
_SCAN_CACHE_VERSION = 1
DEFAULT_SCAN_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "simclr_tf",
                                      "folder_scans")


class CorruptImageError(ValueError):
    """A file of an image folder cannot be decoded (with skipping turned off).

    Attributes:
      path: the file.
      reason: 'empty', 'not_an_image', 'truncated', 'corrupt', 'too_large' or
        'unreadable'.
    """

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"Image file {path!r} is {reason.replace('_', ' ')}; delete or "
                         "replace it, or skip such files (skip_corrupt_images=True).")


def _image_format(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def scan_image_file(path: str) -> tuple[str | None, str | None]:
    """(format, problem) of an image file, reading its header and its last bytes.

    `problem` is None for a file that decodes, else 'empty', 'not_an_image',
    'truncated', 'corrupt', 'too_large' or 'unreadable'. JPEG, PNG and GIF files that
    end with their end marker are accepted from the header alone; the others are
    decoded once with Pillow.
    """
    from PIL import Image  # Heavy import, only for folders.

    try:
        size = os.path.getsize(path)
        if size == 0:
            return None, "empty"
        with open(path, "rb") as f:
            head = f.read(32)
            f.seek(max(size - 64, 0))
            tail = f.read()
    except OSError:
        return None, "unreadable"
    kind = _image_format(head)
    if kind is None:
        return None, "not_an_image"
    try:
        with Image.open(path) as image:
            width, height = image.size
    except Image.DecompressionBombError:
        return kind, "too_large"
    except Exception:  # pylint: disable=broad-except  # Pillow raises many kinds.
        return kind, "corrupt"
    if width * height > MAX_IMAGE_PIXELS:
        return kind, "too_large"
    if _END_MARKERS.get(kind, b"\x00\x00") in tail:
        return kind, None
    try:
        with Image.open(path) as image:
            image.load()
    except Exception as error:  # pylint: disable=broad-except
        return kind, "truncated" if "truncated" in str(error) else "corrupt"
    return kind, None


def _scan_cache_path(cache_dir: str, folder: str) -> str:
    digest = hashlib.sha1(os.path.abspath(folder).encode()).hexdigest()[:16]
    return os.path.join(cache_dir, f"{digest}.json")


def scan_image_files(folder: str, files: Sequence[str], *,
                     cache_dir: str | None = DEFAULT_SCAN_CACHE_DIR,
                     num_threads: int = 16) -> dict[str, tuple[str | None, str | None]]:
    """`scan_image_file` for every file, in parallel, cached by (size, mtime).

    Args:
      folder: the dataset folder (names the cache file).
      files: paths of the files.
      cache_dir: where to keep results between runs (None: no cache). Only files
        whose size or modification time changed are read again.
      num_threads: files read at once.
    """
    cached = {}
    cache_file = _scan_cache_path(cache_dir, folder) if cache_dir else None
    if cache_file and os.path.exists(cache_file):
        try:
            with open(cache_file) as f:
                data = json.load(f)
            if data.get("version") == _SCAN_CACHE_VERSION:
                cached = data["files"]
        except (OSError, ValueError, KeyError):
            cached = {}
    results, entries, todo = {}, {}, []
    for path in files:
        try:
            stat = os.stat(path)
            key = [stat.st_size, stat.st_mtime_ns]
        except OSError:
            results[path] = (None, "unreadable")
            continue
        entry = cached.get(path)
        if entry is not None and entry[:2] == key:
            results[path] = (entry[2], entry[3])
        else:
            todo.append(path)
        entries[path] = key
    if todo:
        with concurrent.futures.ThreadPoolExecutor(num_threads) as pool:
            for path, result in zip(todo, pool.map(scan_image_file, todo)):
                results[path] = result
    if cache_file and todo:
        payload = {"version": _SCAN_CACHE_VERSION, "folder": os.path.abspath(folder),
                   "files": {p: [*entries[p], *results[p]] for p in entries}}
        try:
            os.makedirs(cache_dir, exist_ok=True)
            temporary = f"{cache_file}.tmp{os.getpid()}"
            with open(temporary, "w") as f:
                json.dump(payload, f)
            os.replace(temporary, cache_file)
        except OSError as error:
            logging.warning("Could not cache the image scan in %s: %s", cache_file, error)
    return results


class ImageFolderSource(_ArraySource):
    """Images in a folder; layouts in the module docstring.

    Every file is checked once when the source is built (`scan_image_files`: header
    and end marker, cached), so that bad files never reach training and split sizes
    are exact. Files that cannot be decoded (empty, not an image, truncated, corrupt,
    over `MAX_IMAGE_PIXELS`) are skipped and counted, with one summary line, or with
    `skip_corrupt_images=False` the first one raises `CorruptImageError`.

    Args:
      path: the folder.
      skip_corrupt_images: skip undecodable files (True) or fail on the first.
      scan_cache_dir: where scan results are cached (None: not cached).

    Attributes:
      skipped_files: {path: problem} of the skipped files.
    """

    def __init__(self, path: str, *, skip_corrupt_images: bool = True,
                 scan_cache_dir: str | None = DEFAULT_SCAN_CACHE_DIR):
        if not os.path.isdir(path):
            raise ValueError(f"Image folder not found; use an existing directory of "
                             f"images. Received: path={path!r}")
        subdirs = _subdirectories(path)
        root_images = [f for f in os.listdir(path) if _is_image(f)]
        if subdirs and not root_images and all(d in FOLDER_SPLIT_NAMES for d in subdirs):
            scanned = {d: _scan_split(os.path.join(path, d)) for d in subdirs}
        else:
            scanned = {"train": _scan_split(path)}
        scanned = {split: v for split, v in scanned.items() if v[0]}
        if not scanned:
            raise ValueError(
                f"No images ({', '.join(TF_IMAGE_EXTENSIONS + PIL_IMAGE_EXTENSIONS)}) "
                f"found in folder {path!r}.")
        class_names = sorted({name for _, names in scanned.values() if names
                              for name in names})
        index = {name: i for i, name in enumerate(class_names)}
        scanned, formats = self._drop_bad_files(path, scanned, skip_corrupt_images,
                                                scan_cache_dir)
        rows, unlabelled = {}, []
        for split, (files, names) in scanned.items():
            if names is None:
                unlabelled.append(split)
                labels = np.full(len(files), UNLABELLED, np.int64)
            else:
                labels = np.array([index[n] for n in names], np.int64)
            rows[split] = {
                "path": np.array(files, dtype=object),
                # By content, not by extension (a '.jpg' may hold a TIFF).
                "use_pil": np.array([formats[f] not in _TF_FORMATS for f in files], bool),
                "label": labels,
            }
        self.path = path
        self.class_names = tuple(class_names)
        self.skip_corrupt_images = skip_corrupt_images
        super().__init__(FOLDER_PREFIX + path, len(class_names), rows, tuple(unlabelled))

    def _drop_bad_files(self, path, scanned, skip, cache_dir):
        """(scanned without undecodable files, format per kept file)."""
        every = [f for files, _ in scanned.values() for f in files]
        results = scan_image_files(path, every, cache_dir=cache_dir)
        self.skipped_files = {f: results[f][1] for f in every if results[f][1]}
        if self.skipped_files and not skip:
            first = next(iter(self.skipped_files))
            raise CorruptImageError(first, self.skipped_files[first])
        kept = {}
        for split, (files, names) in scanned.items():
            keep = [i for i, f in enumerate(files) if f not in self.skipped_files]
            if keep:
                kept[split] = ([files[i] for i in keep],
                               None if names is None else [names[i] for i in keep])
        if self.skipped_files:
            counts = collections.Counter(self.skipped_files.values())
            examples = list(self.skipped_files.items())[:3]
            logging.warning(
                "Image folder %s: skipped %d of %d files (%s), e.g. %s.", path,
                len(self.skipped_files), len(every),
                ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items())),
                "; ".join(f"{f} ({reason})" for f, reason in examples))
        if not kept:
            raise ValueError(f"No decodable images in folder {path!r}: all "
                             f"{len(every)} files were skipped.")
        return kept, {f: results[f][0] for f in every}

    def load(self, split, *, input_context=None, shuffle_files=False, example_ids=None):
        dataset = super().load(split, input_context=input_context,
                               shuffle_files=shuffle_files, example_ids=example_ids)
        if self.skip_corrupt_images:
            # The scan catches what it knows; a file that still fails to decode (changed
            # since, or damaged in a way headers do not show) is dropped with a warning
            # rather than ending the run mid-epoch.
            dataset = dataset.ignore_errors(log_warning=True)
        return dataset

    def _decode(self, columns):

        def with_tf():
            return tf.io.decode_image(tf.io.read_file(columns["path"]), channels=3,
                                      dtype=tf.uint8, expand_animations=False)

        def with_pil():
            return tf.numpy_function(_pil_decode, [columns["path"]], tf.uint8,
                                     stateful=False)

        image = tf.cond(columns["use_pil"], with_pil, with_tf)
        image.set_shape([None, None, 3])
        return image


# ---------------------------------------------------------------- TFDS


def _table_name(name: str) -> str:
    """'cifar10:3.0.2' -> 'cifar10' (versions do not change sizes we rely on)."""
    return name.split(":")[0]


class TFDSSource(DatasetSource):
    """A TFDS image-classification dataset read from `data_dir` (never downloaded).

    Args:
      name: TFDS name, e.g. 'cifar10', 'imagenet2012_subset/10pct', 'mnist:3.0.1'.
      data_dir: TFDS data folder (TFDS's default when None).
    """

    def __init__(self, name: str, data_dir: str | None = None):
        try:
            self._builder = tfds.builder(name, data_dir=data_dir)
        except tfds.core.registered.DatasetNotFoundError as e:
            raise ValueError(
                f"Unknown dataset {name!r}: not a TFDS dataset, not 'digits' and not "
                f"'{FOLDER_PREFIX}/path'.") from e
        self.name = name
        self.data_dir = data_dir
        info = self._builder.info
        known = KNOWN_TFDS_DATASETS.get(_table_name(name))
        self._prepared = bool(info.splits)
        if self._prepared:
            self._split_sizes = {s: info.splits[s].num_examples for s in info.splits}
        elif known is not None:
            self._split_sizes = dict(known.split_sizes)
        else:
            raise ValueError(
                f"Dataset {name!r} is not prepared in data_dir={self._builder.data_dir!r} "
                "and its split sizes are not in simclr_tf's table "
                "(simclr_tf.data.datasets.KNOWN_TFDS_DATASETS). Prepare it first "
                f"(`tfds build {name} --data_dir=...`, then pass that data_dir), or "
                "register its sizes in KNOWN_TFDS_DATASETS.")
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

    @property
    def split_sizes(self) -> Mapping[str, int]:
        return self._split_sizes

    @property
    def unlabelled_splits(self) -> tuple[str, ...]:
        return self._unlabelled

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
            raise ValueError(
                f"Dataset {self.name!r} split {split!r} has no prepared data in "
                f"data_dir={self._builder.data_dir!r}. Prepare it with `tfds build "
                f"{self.name} --data_dir=...` (ImageNet needs its manual download) "
                "and pass that data_dir.") from e

    def load_labels(self, split: str) -> np.ndarray:
        dataset = self._as_dataset(split, skip_image_decoding=True)
        dataset = dataset.map(lambda ex: ex[self._label_key]).batch(8192)
        batches = [np.asarray(b) for b in dataset.as_numpy_iterator()]
        labels = np.concatenate(batches) if batches else np.zeros([0], np.int64)
        if not self.has_labels(split):
            labels = np.full_like(labels, UNLABELLED)
        return labels.astype(np.int64)

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
        # Ids are positions in the canonical order: read everything in order, select
        # while the images are still encoded, then shard and decode what was kept.
        num_examples = self.num_examples(split)
        ids = _check_example_ids(example_ids, num_examples, split)
        dataset = self._as_dataset(split, skip_image_decoding=True)
        dataset = _shard(_keep_ids(dataset, ids, num_examples), input_context)
        return dataset.map(
            lambda ex: to_pair(image_feature.decode_example(ex[self._image_key]),
                               ex[self._label_key]),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


# ---------------------------------------------------------------- registry

_FACTORIES: dict[str, Callable[[str | None], DatasetSource]] = {
    "digits": lambda data_dir: DigitsSource(),
}


def register_dataset(name: str, factory: Callable[[str | None], DatasetSource]) -> None:
    """Registers `factory(data_dir) -> DatasetSource` under `name`.

    Args:
      name: the name for `get_dataset`; must not start with 'folder:'.
      factory: called with `data_dir` on every `get_dataset(name)`.
    """
    if not isinstance(name, str) or not name or name.startswith(FOLDER_PREFIX):
        raise ValueError(f"`name` must be a non-empty string not starting with "
                         f"{FOLDER_PREFIX!r}. Received: name={name!r}")
    _FACTORIES[name] = factory


def registered_datasets() -> tuple[str, ...]:
    """Names registered besides TFDS and folders ('digits', ...)."""
    return tuple(sorted(_FACTORIES))


def get_dataset(name: str, *, data_dir: str | None = None,
                skip_corrupt_images: bool = True) -> DatasetSource:
    """The dataset called `name`: registered, 'folder:/path', or TFDS.

    Args:
      name: 'digits', 'folder:/path/to/images', or a TFDS name such as 'cifar10'.
      data_dir: TFDS data folder (ignored by the other kinds).
      skip_corrupt_images: folders only: skip undecodable files (see
        `ImageFolderSource`) instead of raising `CorruptImageError`.

    Returns:
      A `DatasetSource`.

    Raises:
      ValueError: unknown name, missing folder, or a TFDS dataset neither prepared in
        `data_dir` nor in `KNOWN_TFDS_DATASETS`.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")
    if name.startswith(FOLDER_PREFIX):
        return ImageFolderSource(os.path.expanduser(name[len(FOLDER_PREFIX):]),
                                 skip_corrupt_images=skip_corrupt_images)
    if name in _FACTORIES:
        return _FACTORIES[name](data_dir)
    return TFDSSource(name, data_dir=data_dir)


# ---------------------------------------------------------------- label subsets


def stratified_subset_ids(labels: Sequence[int] | np.ndarray,
                          fraction: float | None = None, *,
                          num_examples: int | None = None, seed: int = 0,
                          min_per_class: int = 1) -> np.ndarray:
    """Deterministic stratified sample of example ids.

    Each class gets its share of the total, rounded by largest remainder (so the total
    is exact), but at least `min_per_class` examples (when it has them); within a class
    the examples are drawn with `np.random.RandomState(seed)`, whose stream numpy keeps
    stable across versions.

    Args:
      labels: int label per example (>= 0).
      fraction: share of the examples to keep, in (0, 1].
      num_examples: alternatively, how many to keep.
      seed: sampling seed.
      min_per_class: lower bound per class.

    Returns:
      Sorted int64 ids (positions in `labels`).
    """
    labels = np.asarray(labels).reshape(-1)
    if labels.size == 0:
        raise ValueError("`labels` must not be empty.")
    if labels.min() < 0:
        raise ValueError("`labels` must be class ids >= 0; an unlabelled split cannot "
                         f"be subset by class. Received: min label {labels.min()}")
    if (fraction is None) == (num_examples is None):
        raise ValueError("Pass exactly one of `fraction` and `num_examples`. Received: "
                         f"fraction={fraction!r}, num_examples={num_examples!r}")
    if fraction is not None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"`fraction` must be in (0, 1]. Received: fraction={fraction!r}")
        total = int(round(fraction * labels.size))
    else:
        if not 0 < num_examples <= labels.size:
            raise ValueError(f"`num_examples` must be in [1, {labels.size}]. "
                             f"Received: num_examples={num_examples!r}")
        total = int(num_examples)
    classes, counts = np.unique(labels, return_counts=True)
    exact = total * counts / labels.size
    quota = np.floor(exact).astype(np.int64)
    # Largest remainder first; ties go to the smaller class id (stable sort).
    for k in np.argsort(-(exact - quota), kind="stable")[: total - quota.sum()]:
        quota[k] += 1
    quota = np.minimum(np.maximum(quota, min_per_class), counts)
    rng = np.random.RandomState(seed)
    chosen = [rng.permutation(np.flatnonzero(labels == c))[:q]
              for c, q in zip(classes, quota)]
    return np.sort(np.concatenate(chosen)).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class LabelSubset:
    """The labelled examples a semi-supervised run fine-tunes on.

    Attributes:
      source: the dataset to read (ImageNet: the authors' TFDS subset).
      split: the split of `source`.
      example_ids: positions to keep in `source.load(split)`, or None for all of it.
      label_fraction: the requested fraction.
      seed: the sampling seed.
    """
    source: DatasetSource
    split: str
    example_ids: np.ndarray | None
    label_fraction: float
    seed: int

    @property
    def num_examples(self) -> int:
        if self.example_ids is None:
            return self.source.num_examples(self.split)
        return len(self.example_ids)

    def write(self, path: str) -> None:
        """Records the subset at `path` (the caller puts it beside the checkpoints)."""
        comment = (f"dataset={self.source.name} split={self.split} "
                   f"label_fraction={self.label_fraction} seed={self.seed}")
        if self.example_ids is None:
            comment += " (the whole split: the authors' subset, ids are TFDS's)"
        write_subset_ids(path, [] if self.example_ids is None else self.example_ids,
                         comment=comment)


def make_label_subset(source: DatasetSource, split: str, label_fraction: float, *,
                      seed: int = 0) -> LabelSubset:
    """A stratified `label_fraction` of `split`; ImageNet 1%/10% use the authors' lists.

    Args:
      source: a labelled dataset.
      split: the split to subsample (e.g. 'train').
      label_fraction: in (0, 1]; 1.0 keeps everything.
      seed: sampling seed (ignored for the authors' ImageNet subsets).

    Returns:
      A `LabelSubset`; pass `subset.source`, `subset.split` and `subset.example_ids`
      to the pipeline and `subset.write(path)` to record it.
    """
    if not 0.0 < label_fraction <= 1.0:
        raise ValueError("`label_fraction` must be in (0, 1]. "
                         f"Received: label_fraction={label_fraction!r}")
    if not source.has_labels(split):
        raise ValueError(f"Split {split!r} of dataset {source.name!r} has no labels; "
                         "a label subset needs a labelled split.")
    if label_fraction == 1.0:
        return LabelSubset(source, split, None, label_fraction, seed)
    authors = AUTHORS_IMAGENET_SUBSETS.get(label_fraction)
    if (isinstance(source, TFDSSource) and _table_name(source.name) == "imagenet2012"
            and split == "train" and authors is not None):
        subset_source = get_dataset(authors, data_dir=source.data_dir)
        return LabelSubset(subset_source, "train", None, label_fraction, seed)
    ids = stratified_subset_ids(source.load_labels(split), label_fraction, seed=seed)
    return LabelSubset(source, split, ids, label_fraction, seed)


def write_subset_ids(path: str, ids: Iterable[int], *, comment: str | None = None) -> None:
    """Writes example ids, one per line, after optional '# ' comment lines.

    Args:
      path: the file to write (parent folders are created).
      ids: example ids.
      comment: text for a header line (e.g. dataset, split, fraction, seed).
    """
    directory = os.path.dirname(path)
    if directory:
        tf.io.gfile.makedirs(directory)
    lines = [f"# {line}" for line in (comment or "").splitlines()]
    lines += [str(int(i)) for i in ids]
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_subset_ids(path: str) -> np.ndarray:
    """Reads ids written by `write_subset_ids` (int64, in file order).

    Args:
      path: the file.
    """
    with tf.io.gfile.GFile(path, "r") as f:
        ids = [int(line) for line in f.read().splitlines()
               if line.strip() and not line.startswith("#")]
    return np.array(ids, dtype=np.int64)
