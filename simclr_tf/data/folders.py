"""Image folders ('folder:/path'): their layouts and the source that reads them.

A folder of JPEG, PNG, BMP and GIF files (first frame; TIFF, WebP, PPM/PGM through
Pillow: `image_formats.FORMATS`). Class subfolders make it labelled (classes sorted by
name); image files directly in the folder make it unlabelled (label -1, pretraining
only). Subfolders all named like splits (`train`, `validation`, `val`, `test`,
`unlabelled`) make each one a split; otherwise the whole folder is split 'train'. Its
files are listed class by class, so a slice ('train[90%:]') holds the classes at that
end: hold out a part with split subfolders (train/ and val/) instead (preflight warns
when an evaluated split holds one class). Grey, grey+alpha,
RGBA, palette and 16-bit images are all converted to 8-bit RGB. Symbolic links to
directories are followed when they lead outside the folder, each target directory
once; links back into it (`loop -> .`, `alias -> cat`) are skipped with a warning, so
a link never loops nor makes a class of duplicates (`_FolderWalk`).

Every file is checked once when the source is built (`image_scan.scan_image_files`,
cached in `DEFAULT_SCAN_CACHE_DIR`); undecodable files are skipped, counted and named
(`ImageFolderSource.skipped_summary`), or raise `CorruptImageError`. A file that the
scan passed but that fails to decode while reading is dropped and named then.
"""
from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
import tensorflow as tf
from absl import logging

from simclr_tf.data import image_formats
# CorruptImageError, scan_image_file(s) and describe_skipped are also reached from here.
from simclr_tf.data.image_scan import (DEFAULT_SCAN_CACHE_DIR, CorruptImageError,
                                       describe_skipped, pil_decode, scan_image_file,
                                       scan_image_files)
from simclr_tf.data.sources import FOLDER_PREFIX, UNLABELLED, ArraySource, ensure_rgb, shard

FOLDER_SPLIT_NAMES = ("train", "validation", "val", "test", "unlabelled")


def _is_image(filename: str) -> bool:
    return (not filename.startswith(".")
            and filename.lower().endswith(image_formats.EXTENSIONS))


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



class ImageFolderSource(ArraySource):
    """Images in a folder; layouts in the module docstring.

    Every file is checked once when the source is built (`scan_image_files`, cached
    by size and modification time), so that bad files never reach training and split
    sizes are exact. Files that cannot be decoded (empty, not an image, truncated,
    corrupt, over `rules.FOLDER_IMAGE_MAX_PIXELS`) are skipped and counted, with one
    summary line naming them, or with `skip_corrupt_images=False` the first one
    raises `CorruptImageError`.

    How deep the scan looks (`full_scan`): the header scan reads each file's header
    and last bytes, which misses a body damaged behind a valid header; the full scan
    decodes every file, as training will. Measured (2 shared cores, load average
    3-4, warm page cache): 2000 PNG/JPEG files of 64-256 px, header 0.4-0.75 s, full
    2.3 s; 500x375 JPEGs, 0.15-0.3 vs 1.6 ms per file. The full scan also reads
    every byte (ImageNet: 140 GB), the header scan two blocks per file. Hence the
    default: the full scan when skipping is off (every bad file must then be known
    before training), the header scan otherwise. A file that still fails to decode
    in the input pipeline (a damaged body, or a file changed since the scan) is
    dropped there, added to `skipped_files` and named in a warning; with skipping
    off it fails the input pipeline with a `CorruptImageError` that names it.

    Args:
      path: the folder.
      skip_corrupt_images: skip undecodable files (True) or fail on the first.
      scan_cache_dir: where scan results are cached (None: not cached).
      full_scan: decode every file in the scan; None: when `skip_corrupt_images` is
        False.

    Attributes:
      skipped_files: {path: problem} of the skipped files, by the scan and, as they
        are met, by the input pipeline.
    """

    def __init__(self, path: str, *, skip_corrupt_images: bool = True,
                 scan_cache_dir: str | None = DEFAULT_SCAN_CACHE_DIR,
                 full_scan: bool | None = None):
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
                f"No images ({', '.join(image_formats.EXTENSIONS)}) "
                f"found in folder {path!r}.")
        class_names = sorted({name for _, names in scanned.values() if names
                              for name in names})
        index = {name: i for i, name in enumerate(class_names)}
        self.path = path
        self._lock = threading.Lock()
        if full_scan is None:
            full_scan = not skip_corrupt_images
        scanned, formats = self._drop_bad_files(path, scanned, skip_corrupt_images,
                                                scan_cache_dir, full_scan)
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
                "use_pil": np.array([formats[f] not in image_formats.TF_FORMAT_NAMES
                                     for f in files], bool),
                "label": labels,
            }
        self.class_names = tuple(class_names)
        self.skip_corrupt_images = skip_corrupt_images
        super().__init__(FOLDER_PREFIX + path, len(class_names), rows, tuple(unlabelled))

    def _drop_bad_files(self, path, scanned, skip, cache_dir, full):
        """(scanned without undecodable files, format per kept file)."""
        every = [f for files, _ in scanned.values() for f in files]
        logging.info("Image folder %s: %s scan of %d files.", path,
                     "full" if full else "header", len(every))
        results = scan_image_files(path, every, full=full, cache_dir=cache_dir)
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
            logging.warning("Image folder %s (%d files): %s.", path, len(every),
                            self.skipped_summary())
        if not kept:
            raise ValueError(f"No decodable images in folder {path!r}: all "
                             f"{len(every)} files were skipped.")
        return kept, {f: results[f][0] for f in every}

    def data_identity(self, split: str) -> dict:
        """The rows' identity (paths and labels) and a SHA-256 of every file's size
        and modification time: a file replaced, added, removed or moved to another
        class changes it."""
        digest = hashlib.sha256()
        for path in self._select(split)["path"]:
            try:
                stat = os.stat(path)
                digest.update(path + f"\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
            except OSError as error:  # gone since the scan: reading it will say so
                digest.update(path + f"\0{error.errno}\0".encode())
        return dict(super().data_identity(split), files_sha256=digest.hexdigest())

    def skipped_summary(self, names_per_problem: int = 5) -> str:
        """'skipped 3 unreadable images: 2 corrupt (a/1.png, a/2.png), 1 truncated
        (b/3.jpg)', paths relative to the folder ('' when none was skipped)."""
        with self._lock:
            skipped = dict(self.skipped_files)
        return describe_skipped(skipped, self.path, names_per_problem)

    def load(self, split, *, input_context=None, shuffle_files=False, example_ids=None):
        columns = self._ordered(split, shuffle_files, example_ids)
        pipelines, pipeline = 1, 0
        if input_context is not None:
            pipelines = input_context.num_input_pipelines
            pipeline = input_context.input_pipeline_id
        paths = columns["path"][pipeline::pipelines]  # this pipeline's shard, in order
        columns["position"] = np.arange(len(columns["path"])) // pipelines
        rows = shard(tf.data.Dataset.from_tensor_slices(columns), input_context)

        def decode(row):
            # position: in this pipeline's shard.
            return (row["position"], ensure_rgb(self._decode(row)),
                    tf.cast(row["label"], tf.int32))

        examples = rows.map(decode, num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True)
        # The scan catches what it knows; a file that still fails to decode (a body
        # damaged behind a valid header, or a file changed since) is dropped here and
        # named by `_dropped`, which finds it as a gap in the positions. A pass that
        # drops every file (the folder removed or unmounted) is an error: training
        # streams repeat their epochs, and empty epochs would repeat forever.

        def report(start, stop):
            if start == 0 and stop == len(paths):
                self._nothing_read(split, paths, pipelines)
            self._dropped(paths[start:stop])

        return _named_drops(examples.ignore_errors(), len(paths), report)

    def _nothing_read(self, split, paths, pipelines):
        """Raises the error of a pass over `split` (this input pipeline's shard of it)
        that read none of its files."""
        first = os.fsdecode(paths[0])
        problem = (scan_image_file(first)[1] or "corrupt").replace("_", " ")
        gone = not os.path.isdir(self.path)
        shard = f" (this input pipeline's 1/{pipelines} of it)" if pipelines > 1 else ""
        raise ValueError(
            f"Image folder {self.path!r}, split {split!r}{shard}: an epoch yielded no "
            f"image, none of its {len(paths)} files could be read ("
            + ("the folder is gone: removed or unmounted" if gone else
               f"the first, {os.path.relpath(first, self.path)!r}, is {problem}")
            + "); restore the folder.")

    def _dropped(self, paths):
        """Records files the input pipeline could not decode; raises when not skipping."""
        for path in map(os.fsdecode, paths):
            _, problem = scan_image_file(path)  # Pillow and headers: no TF op here
            problem = problem or "corrupt"
            if not self.skip_corrupt_images:
                raise CorruptImageError(path, problem)
            with self._lock:
                new = path not in self.skipped_files
                self.skipped_files[path] = problem
            if new:
                logging.warning("Image folder %s: dropped %r while reading (%s); %s.",
                                self.path, path, problem.replace("_", " "),
                                self.skipped_summary())

    def _decode(self, columns):

        def with_tf():
            return tf.io.decode_image(tf.io.read_file(columns["path"]), channels=3,
                                      dtype=tf.uint8, expand_animations=False)

        def with_pil():
            return tf.numpy_function(pil_decode, [columns["path"]], tf.uint8,
                                     stateful=False)

        image = tf.cond(columns["use_pil"], with_pil, with_tf)
        image.set_shape([None, None, 3])
        return image


def _named_drops(examples: tf.data.Dataset, count: int, report) -> tf.data.Dataset:
    """(image, label) of `examples` (position, image, label), calling
    `report(start, stop)` for each run of positions in [0, count) that is missing.

    `examples` must keep the order of the positions. An end marker at `count` finds a
    run missing at the end; `report` runs in Python, once per run.
    """

    def report_run(start, stop):
        report(int(start), int(stop))
        return np.int64(0)

    end_label = UNLABELLED - 1
    end = (tf.constant(count, tf.int64), tf.zeros([0, 0, 3], tf.uint8),
           tf.constant(end_label, tf.int32))

    def check(expected, element):
        position, image, label = element
        reported = tf.cond(
            position > expected,
            lambda: tf.numpy_function(report_run, [expected, position], tf.int64,
                                      stateful=True),
            lambda: tf.constant(0, tf.int64))
        with tf.control_dependencies([reported]):
            label = tf.identity(label)
        return position + 1, (image, label)

    def not_end(image, label):
        del image
        return label != end_label

    checked = examples.concatenate(tf.data.Dataset.from_tensors(end)).scan(
        tf.constant(0, tf.int64), check)
    return checked.filter(not_end)
