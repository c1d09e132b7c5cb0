"""The offline dataset 'fashion_mnist': Zalando's Fashion-MNIST from its IDX files.

70,000 real 28x28 grey photos of clothing in 10 classes (`CLASS_NAMES`), read as RGB
uint8 [28, 28, 3] (grey replicated); splits 'train' (60,000) and 'test' (10,000) in
the files' order, so an example's id is its position in its file. Debian packages the
four original files: `apt-get install dataset-fashion-mnist` puts them in
`DEBIAN_DIR`.

`fashion_mnist_source(data_dir)` reads, first found wins:
1. the four IDX files (`IDX_FILES`, each gzipped or not; the uncompressed one first
   when both are there) from `data_dir` itself, else from its `fashion-mnist/` or
   `fashion_mnist/` subfolder: a local folder;
2. the same files in `DEBIAN_DIR`;
3. TFDS's `fashion_mnist` when it is prepared in `data_dir` (TFDS's default data_dir
   when None); TFDS's own order, so its ids and `data_identity` differ from the files';
4. else `FashionMnistNotFoundError`, saying both ways to get the files.

A folder holding some of the four files but not all, or a file that is not what its
name says (a wrong magic number, images not 28x28, more or fewer bytes than its
header says, a corrupt gzip, image and label counts that differ, labels beyond 9)
raises `IdxFormatError` naming the file: such a folder is never passed over for the
next one. Both errors are ValueErrors (`preflight.load_source` reports them as
`--dataset` errors).

The pixels are kept grey, [N, 28, 28, 1] (47 MB for train instead of 141 MB RGB),
and replicated to RGB per example as `load` reads them (`sources.ensure_rgb`). The
decoded arrays are cached per file (path, size and modification time).
"""
from __future__ import annotations

import functools
import gzip
import os
import zlib

import numpy as np

from simclr_tf.data.sources import ArraySource, DatasetSource
from simclr_tf.data.tfds_source import DatasetNotPreparedError, TFDSSource

NAME = "fashion_mnist"
DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
DEBIAN_INSTALL = "apt-get install dataset-fashion-mnist"
# Subfolders of data_dir also searched: the Debian folder's name and the dataset's.
SUBFOLDERS = ("fashion-mnist", "fashion_mnist")
IMAGE_SIZE = 28
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot")
# (split, what) -> the file's name without '.gz', as Zalando and Debian ship it.
IDX_FILES = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}
# IDX magic numbers: 0x0000, type 0x08 (unsigned byte), number of dimensions.
IDX_MAGIC = {"labels": 2049, "images": 2051}
_GZIP_MAGIC = b"\x1f\x8b"


class FashionMnistNotFoundError(ValueError):
    """Fashion-MNIST is neither in data_dir, nor where Debian puts it, nor in TFDS."""


class IdxFormatError(ValueError):
    """An IDX file that cannot be Fashion-MNIST's: names the file and the problem."""


# ---------------------------------------------------------------- finding the files


def _files_in(folder: str) -> dict[tuple[str, str], str] | None:
    """{(split, what): path} of the four files in `folder`; None when it holds none.

    Raises:
      IdxFormatError: some of the four files are there, not all.
    """
    found = {}
    for key, name in IDX_FILES.items():
        for candidate in (name, name + ".gz"):
            path = os.path.join(folder, candidate)
            if os.path.isfile(path):
                found[key] = path
                break
    if not found:
        return None
    missing = [name for key, name in IDX_FILES.items() if key not in found]
    if missing:
        raise IdxFormatError(
            f"{folder!r} holds some of Fashion-MNIST's IDX files but not "
            f"{', '.join(n + '[.gz]' for n in missing)}: add the missing files (all "
            f"four are needed: {', '.join(IDX_FILES.values())}, each gzipped or not).")
    return found


def find_idx_files(data_dir: str | None) -> dict[tuple[str, str], str] | None:
    """The four IDX files: in data_dir (or its `SUBFOLDERS`), else in `DEBIAN_DIR`;
    None when neither holds them (see the module docstring)."""
    folders = []
    if data_dir:
        data_dir = os.path.expanduser(data_dir)
        folders += [data_dir] + [os.path.join(data_dir, sub) for sub in SUBFOLDERS]
    folders.append(DEBIAN_DIR)
    for folder in folders:
        files = _files_in(folder)
        if files is not None:
            return files
    return None


# ---------------------------------------------------------------- reading IDX


def read_idx(path: str, what: str) -> np.ndarray:
    """The uint8 array of an IDX file (gzipped or not) of `what` ('images' or
    'labels'): [N, rows, cols] or [N].

    Raises:
      IdxFormatError: unreadable, a corrupt gzip, a wrong magic number, or a size
        that differs from the header's.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == _GZIP_MAGIC:
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as error:  # EOFError: a truncated gzip
        reason = str(error) or type(error).__name__
        raise IdxFormatError(f"cannot read Fashion-MNIST file {path!r}: {reason} "
                             "(a corrupt or truncated gzip?).") from error
    expected = IDX_MAGIC[what]
    ndim = expected & 0xFF
    header = 4 * (1 + ndim)
    if len(data) < header:
        raise IdxFormatError(f"Fashion-MNIST file {path!r} is truncated: {len(data)} "
                             f"bytes, fewer than its {header}-byte IDX header.")
    magic = int.from_bytes(data[:4], "big")
    if magic != expected:
        raise IdxFormatError(
            f"Fashion-MNIST file {path!r} has IDX magic number {magic}, not {expected} "
            f"(IDX {what}): it is not a {what} file, or not an IDX file.")
    dims = [int.from_bytes(data[4 * i:4 * i + 4], "big") for i in range(1, 1 + ndim)]
    size = int(np.prod(dims))
    if len(data) - header != size:
        problem = "truncated" if len(data) - header < size else "too long"
        raise IdxFormatError(
            f"Fashion-MNIST file {path!r} is {problem}: its header says "
            f"{'x'.join(map(str, dims))} = {size} bytes of {what}, it holds "
            f"{len(data) - header}.")
    return np.frombuffer(data, np.uint8, count=size, offset=header).reshape(dims)


def _file_key(path: str) -> tuple[str, int, int]:
    stat = os.stat(path)
    return path, stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=2)
def _read_split(images_key, labels_key) -> tuple[np.ndarray, np.ndarray]:
    """(grey images uint8 [N, 28, 28, 1], labels int64 [N]) of one split, once per
    version of its two files (keys from `_file_key`)."""
    images_path, labels_path = images_key[0], labels_key[0]
    images = read_idx(images_path, "images")
    labels = read_idx(labels_path, "labels")
    if images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
        raise IdxFormatError(
            f"Fashion-MNIST file {images_path!r} holds {images.shape[1]}x"
            f"{images.shape[2]} images, not {IMAGE_SIZE}x{IMAGE_SIZE}.")
    if len(images) != len(labels):
        raise IdxFormatError(
            f"Fashion-MNIST files {images_path!r} and {labels_path!r} do not match: "
            f"{len(images)} images but {len(labels)} labels.")
    if labels.size and labels.max() >= len(CLASS_NAMES):
        raise IdxFormatError(
            f"Fashion-MNIST file {labels_path!r} holds label {labels.max()}; labels "
            f"are 0..{len(CLASS_NAMES) - 1}.")
    return images[..., np.newaxis], labels.astype(np.int64)


# ---------------------------------------------------------------- the source


class FashionMnistSource(ArraySource):
    """Fashion-MNIST read from its four IDX files; see the module docstring.

    Args:
      files: {(split, 'images' | 'labels'): path}, as `find_idx_files` returns.

    Attributes:
      class_names: the name of each label (`CLASS_NAMES`).
      files: the files read.
    """

    def __init__(self, files: dict[tuple[str, str], str]):
        rows = {}
        for split in ("train", "test"):
            images, labels = _read_split(_file_key(files[split, "images"]),
                                         _file_key(files[split, "labels"]))
            rows[split] = {"image": images, "label": labels}
        super().__init__(NAME, len(CLASS_NAMES), rows)
        self.class_names = CLASS_NAMES
        self.files = dict(files)

    def provenance(self):
        return dict(super().provenance(), files={
            f"{split}/{kind}": os.path.realpath(path)
            for (split, kind), path in sorted(self.files.items())})

    def _decode(self, columns):
        return columns["image"]  # grey; `load` replicates it to RGB


# 'fashion_mnist_tinted': each image given one random colour, so that two crops of an
# image share a colour histogram, the shortcut the paper's colour distortion removes
# (Fashion-MNIST, grey, has none). Image i of a split is its grey pixels times a tint
# of three factors drawn uniformly from [TINT_LOW, 1] by a generator seeded with
# (TINT_SEED, the split's index, i): fixed, and recorded in result.json's `data`.
TINTED_NAME = "fashion_mnist_tinted"
TINT_SEED, TINT_LOW = 20_261_203, 0.25


def tints(split: str, count: int) -> np.ndarray:
    """float32 [count, 3]: the tint of each image of base split `split`."""
    index = ("train", "test").index(split)
    return np.random.default_rng([TINT_SEED, index]).uniform(
        TINT_LOW, 1.0, size=(count, 3)).astype(np.float32)


class TintedFashionMnistSource(FashionMnistSource):
    """Fashion-MNIST with one random colour per image (`tints`); the same files,
    ids, labels and splits as `FashionMnistSource`."""

    def __init__(self, files: dict[tuple[str, str], str]):
        super().__init__(files)
        self.name = TINTED_NAME
        for split, columns in self._rows.items():
            columns["tint"] = tints(split, len(columns["label"]))

    def provenance(self):
        return dict(super().provenance(), tint=dict(
            seed=TINT_SEED, low=TINT_LOW, rule="pixels x U(low, 1)^3 per image, "
            "row i (the example id) of a generator seeded by (seed, split index)"))

    def _decode(self, columns):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        grey = tf.cast(columns["image"], tf.float32)  # [28, 28, 1]
        return tf.cast(tf.round(grey * columns["tint"]), tf.uint8)  # [28, 28, 3]


def tinted_fashion_mnist_source(data_dir: str | None = None) -> DatasetSource:
    """'fashion_mnist_tinted' from Fashion-MNIST's IDX files (found as
    `fashion_mnist_source` finds them; TFDS's copy has another order, so its ids,
    and thus its tints, would differ: it is not used)."""
    files = find_idx_files(data_dir)
    if files is None:
        raise FashionMnistNotFoundError(not_found_message(data_dir) + (
            f" ({TINTED_NAME} reads the IDX files only, not TFDS's copy.)"))
    return TintedFashionMnistSource(files)


def not_found_message(data_dir: str | None) -> str:
    """What to do when Fashion-MNIST is nowhere (the one wording)."""
    if data_dir:
        subfolders = " or ".join(sub + "/" for sub in SUBFOLDERS)
        where = (f"neither in --data_dir={data_dir!r} (nor its {subfolders} subfolder) "
                 f"nor in {DEBIAN_DIR}, and TFDS's fashion_mnist is not prepared in "
                 "--data_dir")
    else:
        where = (f"not in {DEBIAN_DIR}, and TFDS's fashion_mnist is not prepared in "
                 "TFDS's default data_dir (no --data_dir given)")
    return (f"Fashion-MNIST is not on this machine: its four IDX files "
            f"({', '.join(n + '.gz' for n in IDX_FILES.values())}; gzipped or not) are "
            f"{where}. Install Debian's package: `{DEBIAN_INSTALL}` (as root), or pass "
            "--data_dir=DIR, a folder holding the four files.")


def fashion_mnist_source(data_dir: str | None = None) -> DatasetSource:
    """Fashion-MNIST from the first place that has it (see the module docstring).

    Args:
      data_dir: a folder holding the four IDX files, or a TFDS data_dir with
        fashion_mnist prepared; None: the Debian package's files, else TFDS's default
        data_dir.

    Returns:
      A `FashionMnistSource`, or a `TFDSSource` for TFDS's prepared copy.

    Raises:
      FashionMnistNotFoundError: nowhere to be found.
      IdxFormatError: a damaged or incomplete set of files (see module docstring).
    """
    files = find_idx_files(data_dir)
    if files is not None:
        return FashionMnistSource(files)
    source = TFDSSource(NAME, data_dir=data_dir)
    try:
        source.check_prepared()
    except DatasetNotPreparedError:
        raise FashionMnistNotFoundError(not_found_message(data_dir)) from None
    return source
