"""Image folders ('folder:/path') and the scan that keeps undecodable files out.

A folder of JPEG, PNG, BMP and GIF files (first frame; TIFF, WebP, PPM/PGM through
Pillow). Class subfolders make it labelled (classes sorted by name); image files
directly in the folder make it unlabelled (label -1, pretraining only). Subfolders all
named like splits (`train`, `validation`, `val`, `test`, `unlabelled`) make each one a
split; otherwise the whole folder is split 'train' (use slices such as 'train[:90%]' /
'train[90%:]' for a held-out part). Grey, grey+alpha, RGBA, palette and 16-bit images
are all converted to 8-bit RGB. Symbolic links to directories are followed when they
lead outside the folder, each target directory once; links back into it (`loop -> .`,
`alias -> cat`) are skipped with a warning, so a link never loops nor makes a class of
duplicates (`_FolderWalk`).

Every file is checked once when the source is built (`scan_image_files`, cached in
`DEFAULT_SCAN_CACHE_DIR`); undecodable files are skipped and counted, or raise
`CorruptImageError`.
"""
from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import io
import json
import os
from typing import Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from simclr_tf.data.sources import FOLDER_PREFIX, UNLABELLED, ArraySource

# Decoded by tf.io.decode_image (GIF: first frame only).
TF_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
# Formats tf.io cannot decode, read through Pillow in a tf.numpy_function.
PIL_IMAGE_EXTENSIONS = (".tif", ".tiff", ".webp", ".ppm", ".pgm")
FOLDER_SPLIT_NAMES = ("train", "validation", "val", "test", "unlabelled")


def _is_image(filename: str) -> bool:
    return (not filename.startswith(".")
            and filename.lower().endswith(TF_IMAGE_EXTENSIONS + PIL_IMAGE_EXTENSIONS))


class _FolderWalk:
    """Lists an image folder; each directory is read at most once.

    Symbolic links to directories are followed when they lead outside the folder,
    each target directory once (the first link in name order reaches it). Links
    that lead back into the folder (`loop -> .`, `alias -> ../cat`) are not
    followed: their images are reached through the real directories already, and
    following them would loop or make an alias a class of duplicates. Links
    skipped either way are listed in `ignored_links`.
    """

    def __init__(self, root: str):
        self._root = os.path.realpath(root)
        self._visited = {self._root}
        self.ignored_links: list[str] = []

    def _enter(self, path: str, is_link: bool) -> bool:
        real = os.path.realpath(path)
        inside = real == self._root or real.startswith(self._root + os.sep)
        if real in self._visited or (is_link and inside):
            self.ignored_links.append(path)
            return False
        self._visited.add(real)
        return True

    def children(self, directory: str) -> tuple[list[str], list[str]]:
        """(subdirectories to read, image files) directly in `directory`, sorted."""
        with os.scandir(directory) as scanned:
            entries = sorted(scanned, key=lambda entry: entry.name)
        subdirs, images = [], []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                if self._enter(entry.path, entry.is_symlink()):
                    subdirs.append(entry.path)
            elif _is_image(entry.name):
                # Unreadable files (broken links too) stay, for the scan to name.
                images.append(entry.path)
        return subdirs, images

    def images_under(self, directory: str) -> list[str]:
        """Image files below `directory` (recursively): its own first, then each
        subdirectory's in name order."""
        found, pending = [], [directory]
        while pending:
            subdirs, images = self.children(pending.pop())
            found.extend(images)
            pending.extend(reversed(subdirs))
        return found


def _scan_split(walk: _FolderWalk, directory: str, listing=None
                ) -> tuple[list[str], list[str] | None]:
    """(files, class name per file) of a split folder; classes None if unlabelled.

    `listing`: `walk.children(directory)` when the caller has it already.
    """
    subdirs, direct_images = listing or walk.children(directory)
    classes = [(os.path.basename(d), files) for d in subdirs
               if (files := walk.images_under(d))]
    if direct_images and classes:
        raise ValueError(
            f"Folder {directory!r} mixes image files with class subfolders "
            f"{[name for name, _ in classes]}; put every image in a class subfolder "
            "(labelled) or none (unlabelled).")
    if direct_images:
        return direct_images, None
    files, names = [], []
    for class_name, class_files in classes:
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


class ImageFolderSource(ArraySource):
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
        walk = _FolderWalk(path)
        listing = walk.children(path)
        subdirs, root_images = listing
        if subdirs and not root_images and all(
                os.path.basename(d) in FOLDER_SPLIT_NAMES for d in subdirs):
            scanned = {os.path.basename(d): _scan_split(walk, d) for d in subdirs}
        else:
            scanned = {"train": _scan_split(walk, path, listing)}
        if walk.ignored_links:
            logging.warning(
                "Image folder %s: not following %d link(s) to a directory inside the "
                "folder or already read (no duplicates, no loops): %s", path,
                len(walk.ignored_links), ", ".join(walk.ignored_links[:10]))
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
                # Bytes, exactly as the file system has them: names that are not UTF-8
                # (kept by Python as surrogate escapes) reach tf.io.read_file intact.
                "path": np.array([os.fsencode(f) for f in files], dtype=object),
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
