"""Label subsets for semi-supervised fine-tuning.

`make_label_subset` is the semi-supervised entry point: stratified fractions
(`sources.stratified_subset_ids`) for any labelled dataset, the authors' TFDS subsets
for ImageNet at 1% and 10% (`tfds_source.AUTHORS_IMAGENET_SUBSETS`). The resulting
`LabelSubset` records its ids with `write_subset_ids`; `read_subset_ids` reads them.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterable

import numpy as np
import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.data.registry import get_dataset
from simclr_tf.data.sources import DatasetSource, stratified_subset_ids
from simclr_tf.data.tfds_source import AUTHORS_IMAGENET_SUBSETS, TFDSSource, table_name


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
    rules.check_label_fraction(label_fraction)
    if not source.has_labels(split):
        raise ValueError(f"Split {split!r} of dataset {source.name!r} has no labels; "
                         "a label subset needs a labelled split.")
    if label_fraction == 1.0:
        return LabelSubset(source, split, None, label_fraction, seed)
    authors = authors_subset(source, split, label_fraction)
    if authors is not None:
        subset_source = get_dataset(authors, data_dir=source.data_dir)
        return LabelSubset(subset_source, "train", None, label_fraction, seed)
    ids = stratified_subset_ids(source.load_labels(split), label_fraction, seed=seed)
    return LabelSubset(source, split, ids, label_fraction, seed)


def authors_subset(source: DatasetSource, split: str, label_fraction: float) -> str | None:
    """The TFDS name of the authors' subset `make_label_subset` reads for this
    fraction of `split` (ImageNet's train at 1% and 10%), or None: a dataset of its
    own, whose examples have no ids in `split`."""
    authors = AUTHORS_IMAGENET_SUBSETS.get(label_fraction)
    if (isinstance(source, TFDSSource) and table_name(source.name) == "imagenet2012"
            and split == "train" and authors is not None):
        return authors
    return None


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
