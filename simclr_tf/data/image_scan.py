"""The scan that keeps undecodable files out of an image folder.

`scan_image_file(path)` names what is wrong with one file (empty, not an image,
truncated, corrupt, too large, unreadable) from its header and last bytes, or by
decoding it as the input pipeline does (`full`); `scan_image_files` does that for
every file of a folder in parallel, cached by size and modification time in
`DEFAULT_SCAN_CACHE_DIR`; `describe_skipped` is the summary line naming the files
skipped. `simclr_tf.data.folders.ImageFolderSource` runs the scan when it is built.
"""
from __future__ import annotations

import collections
import concurrent.futures
import functools
import hashlib
import io
import json
import os
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from simclr_tf.config import rules
from simclr_tf.rundir.files import atomic_write
from simclr_tf.data import image_formats


def pil_decode(path: bytes) -> np.ndarray:
    from PIL import Image  # Only needed for formats tf.io cannot read.

    with Image.open(io.BytesIO(open(path, "rb").read())) as image:
        image.seek(0)
        if image.mode in ("I;16", "I;16B", "I;16L", "I"):
            # 16/32-bit grey: keep the top 8 bits of 16-bit data.
            array = np.asarray(image, dtype=np.int64) >> 8
            array = np.clip(array, 0, 255).astype(np.uint8)
            return np.repeat(array[..., np.newaxis], 3, axis=-1)
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


# Complete files end with these markers; a file without one is decoded once to be sure
# (some cameras append data after a JPEG's end-of-image marker).
_END_MARKERS = {row.name: row.end_marker for row in image_formats.FORMATS
                if row.end_marker is not None}
# 2: entries record whether the file was fully decoded (`full`).
_SCAN_CACHE_VERSION = 2
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
    row = image_formats.format_of(head)
    return None if row is None else row.name


def scan_image_file(path: str, full: bool = False) -> tuple[str | None, str | None]:
    """(format, problem) of an image file.

    `problem` is None for a file that decodes, else 'empty', 'not_an_image',
    'truncated', 'corrupt', 'too_large' or 'unreadable'.

    Args:
      path: the file.
      full: decode the whole file as the input pipeline does (TensorFlow's decoder,
        Pillow for the formats it lacks), which finds a corrupt body behind a valid
        header. Otherwise only the header and the last bytes are read: JPEG, PNG and
        GIF files that end with their end marker are accepted from these alone, the
        others are decoded once with Pillow.
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
    ends_early = kind in _END_MARKERS and _END_MARKERS[kind] not in tail
    try:
        with Image.open(path) as image:
            width, height = image.size
    except Image.DecompressionBombError:
        return kind, "too_large"
    except Exception:  # pylint: disable=broad-except  # Pillow raises many kinds.
        return kind, "truncated" if ends_early else "corrupt"
    if width * height > rules.FOLDER_IMAGE_MAX_PIXELS:
        return kind, "too_large"
    try:
        if full:
            _decode_file(path, kind)
        elif kind not in _END_MARKERS or ends_early:
            with Image.open(path) as image:
                image.load()
    except Exception as error:  # pylint: disable=broad-except  # decoders raise many kinds
        if not os.path.exists(path):
            return kind, "unreadable"
        return kind, "truncated" if ends_early or "truncated" in str(error) else "corrupt"
    return kind, None


def _decode_file(path: str, kind: str) -> None:
    """Decodes the file as `ImageFolderSource` does; raises if that fails."""
    if kind in image_formats.TF_FORMAT_NAMES:
        tf.io.decode_image(tf.io.read_file(os.fsencode(path)), channels=3,
                           expand_animations=False)
    else:
        pil_decode(os.fsencode(path))


def _scan_cache_path(cache_dir: str, folder: str) -> str:
    digest = hashlib.sha1(os.path.abspath(folder).encode()).hexdigest()[:16]
    return os.path.join(cache_dir, f"{digest}.json")


def scan_image_files(folder: str, files: Sequence[str], *, full: bool = False,
                     cache_dir: str | None = DEFAULT_SCAN_CACHE_DIR,
                     num_threads: int = 16) -> dict[str, tuple[str | None, str | None]]:
    """`scan_image_file` for every file, in parallel, cached by (size, mtime).

    Args:
      folder: the dataset folder (names the cache file).
      files: paths of the files.
      full: decode every file (see `scan_image_file`).
      cache_dir: where to keep results between runs (None: no cache). Only files
        whose size or modification time changed are read again, and those only
        checked from their header when `full` is asked.
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
        # [size, mtime, format, problem, decoded fully]; a problem found from the
        # header stands whatever the depth asked.
        entry = cached.get(path)
        if entry is not None and entry[:2] == key and (
                entry[4] or not full or entry[3] is not None):
            results[path] = (entry[2], entry[3])
            entries[path] = entry
        else:
            todo.append(path)
            entries[path] = key
    if todo:
        scan = functools.partial(scan_image_file, full=full)
        with concurrent.futures.ThreadPoolExecutor(num_threads) as pool:
            for path, result in zip(todo, pool.map(scan, todo)):
                results[path] = result
                entries[path] = [*entries[path], *result, full]
    if cache_file and todo:
        payload = {"version": _SCAN_CACHE_VERSION, "folder": os.path.abspath(folder),
                   "files": entries}
        try:
            os.makedirs(cache_dir, exist_ok=True)
            atomic_write(cache_file, json.dumps(payload))
        except (OSError, tf.errors.OpError) as error:
            logging.warning("Could not cache the image scan in %s: %s", cache_file, error)
    return results


def describe_skipped(skipped: Mapping[str, str], root: str,
                     names_per_problem: int = 5) -> str:
    """'skipped 3 unreadable images: 2 corrupt (a.png, b.png), 1 truncated (c.jpg)'.

    Args:
      skipped: {path: problem}.
      root: paths are shown relative to it; names that are not UTF-8 with
        backslash escapes.
      names_per_problem: at most this many names per problem, then 'and N more'.
    """
    if not skipped:
        return ""
    by_problem = collections.defaultdict(list)
    for path, problem in skipped.items():
        name = os.path.relpath(path, root).encode("utf-8", "surrogateescape")
        by_problem[problem].append(name.decode("utf-8", "backslashreplace"))
    parts = []
    for problem, names in sorted(by_problem.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        names = sorted(names)
        shown = ", ".join(names[:names_per_problem])
        if len(names) > names_per_problem:
            shown += f" and {len(names) - names_per_problem} more"
        parts.append(f"{len(names)} {problem.replace('_', ' ')} ({shown})")
    total = len(skipped)
    return (f"skipped {total} unreadable image{'s' if total > 1 else ''}: "
            + ", ".join(parts))
