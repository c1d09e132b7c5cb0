"""The dataset interface, `DatasetSource`, and the helpers its implementations share.

A `DatasetSource` is a named image-classification dataset with splits, obtained by
name from `simclr_tf.data.registry.get_dataset`:

```python
source.num_classes                 # 10 (0 for an unlabelled folder)
source.splits                      # ('train', 'test')
source.num_examples("train[:10%]") # TFDS slicing syntax works for every source
source.has_labels("unlabelled")    # False for stl10's unlabelled split
source.check_prepared()            # raises if the data is not there (TFDS)
ds = source.load("train", input_context=ctx, shuffle_files=True)
# ds yields (image uint8 [H, W, 3], label int32 []), label -1 where there is none.
```

Implementations: `ArraySource` (examples are rows of per-split arrays: `digits`,
`folders`) and `tfds_source.TFDSSource`.

Example ids: the position of an example in `load(split)` without sharding and with
`shuffle_files=False` (the split's canonical order). `stratified_subset_ids` picks
ids, `load(split, example_ids=...)` keeps only those, `subsets.write_subset_ids`
records them.
"""
from __future__ import annotations

import abc
import hashlib
import types
from typing import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

UNLABELLED = -1
FOLDER_PREFIX = "folder:"


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


def check_example_ids(example_ids, num_examples: int, split: str) -> np.ndarray:
    ids = np.unique(np.asarray(example_ids, dtype=np.int64).reshape(-1))
    if ids.size and (ids[0] < 0 or ids[-1] >= num_examples):
        raise ValueError(
            f"`example_ids` must lie in [0, {num_examples}) for split {split!r}. "
            f"Received ids from {ids[0]} to {ids[-1]}.")
    return ids


def keep_ids(dataset: tf.data.Dataset, ids: np.ndarray,
             num_examples: int) -> tf.data.Dataset:
    """Keeps the elements whose position is in `ids`."""
    # A dense mask (1 byte per example, 1.3 MB for ImageNet) needs no lookup-table
    # resource, which keeps the dataset easy to copy to every input pipeline.
    mask = np.zeros([num_examples], bool)
    mask[ids] = True
    mask = tf.constant(mask)
    dataset = dataset.enumerate().filter(lambda i, _: tf.gather(mask, i))
    return dataset.map(lambda _, element: element)


def shard(dataset: tf.data.Dataset, input_context) -> tf.data.Dataset:
    if input_context is None or input_context.num_input_pipelines == 1:
        return dataset
    return dataset.shard(input_context.num_input_pipelines,
                         input_context.input_pipeline_id)


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

    def check_prepared(self) -> None:
        """Raises ValueError when the data cannot be read (e.g. a TFDS dataset not
        prepared in data_dir); sources whose construction reads their data have
        nothing left to check."""

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

    def share_ids(self, split: str, num_shares: int, index: int,
                  example_ids: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """The example ids of share `index` of `num_shares`: what one of that many
        training input pipelines reads (`load(split, example_ids=...)`), and only
        that. Every example of `split` (or of `example_ids`) is in exactly one share;
        the shares' sizes differ by at most one.

        Here: every `num_shares`-th id from the `index`-th (rows are read by id at no
        cost, and each share keeps the split's mix, e.g. of a folder listed class by
        class). A source that reads files by range (TFDS) takes contiguous blocks.

        Args:
          split: split spec.
          num_shares: the number of input pipelines (>= 1).
          index: this pipeline's index in [0, num_shares).
          example_ids: the ids to share out (a label subset), None for all.

        Returns:
          Sorted int64 ids.
        """
        return self._ids_to_share(split, num_shares, index, example_ids)[index::num_shares]

    def _ids_to_share(self, split, num_shares, index, example_ids):
        if not (isinstance(num_shares, (int, np.integer)) and num_shares >= 1
                and isinstance(index, (int, np.integer)) and 0 <= index < num_shares):
            raise ValueError("`index` must be in [0, num_shares) and num_shares >= 1. "
                             f"Received: num_shares={num_shares!r}, index={index!r}")
        total = self.num_examples(split)
        if example_ids is None:
            return np.arange(total, dtype=np.int64)
        return check_example_ids(example_ids, total, split)

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

    def provenance(self) -> dict:
        """Where this source's examples are read from, as JSON-able values: what a
        run's result.json records under 'data' (the name, the classes and split
        sizes; a source that reads files says which: the TFDS folder and version,
        Fashion-MNIST's four files)."""
        return dict(name=self.name, num_classes=self.num_classes,
                    split_sizes=dict(self.split_sizes))

    def data_identity(self, split: str) -> dict:
        """What the examples of `split` are, as JSON-able values that change when
        the data does: what a cache of anything computed from them is keyed by
        (`evaluation.features.cached_features`).

        Here: the name, classes, split sizes and the ranges the split takes; sources
        that can say more (the content of their arrays, the files of a folder, a
        TFDS version) add it.

        Args:
          split: split spec.
        """
        return dict(name=self.name, num_classes=self.num_classes,
                    split_sizes=dict(self.split_sizes),
                    ranges=[list(r) for r in self.split_ranges(split)])

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, num_classes={self.num_classes}, "
                f"split_sizes={dict(self.split_sizes)})")


class ArraySource(DatasetSource):
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

    def data_identity(self, split: str) -> dict:
        """The base identity and a SHA-256 of the split's rows (every column: pixels
        or paths, and labels), so changed examples or labels change it."""
        digest = hashlib.sha256()
        for key, column in sorted(self._select(split).items()):
            digest.update(key.encode())
            if column.dtype == object:  # paths (bytes) or other Python objects
                for value in column:
                    digest.update(value if isinstance(value, bytes) else repr(value).encode())
                    digest.update(b"\0")
            else:
                digest.update(str((column.dtype.str, column.shape)).encode())
                digest.update(np.ascontiguousarray(column).tobytes())
        return dict(super().data_identity(split), rows_sha256=digest.hexdigest())

    @abc.abstractmethod
    def _decode(self, columns: dict[str, tf.Tensor]) -> tf.Tensor:
        """One element's columns -> uint8 [H, W, 3] image."""

    def _ordered(self, split, shuffle_files=False, example_ids=None):
        """The columns of `split` in the order `load` reads them (see its Args)."""
        columns = self._select(split)
        num = len(columns["label"])
        order = np.arange(num)
        if example_ids is not None:
            order = check_example_ids(example_ids, num, split)
        elif shuffle_files:
            # A fresh order per call; the pipeline's shuffle buffer does the rest.
            order = np.random.default_rng().permutation(num)
        return {key: column[order] for key, column in columns.items()}

    def load(self, split, *, input_context=None, shuffle_files=False, example_ids=None):
        columns = self._ordered(split, shuffle_files, example_ids)
        dataset = tf.data.Dataset.from_tensor_slices(columns)
        # Shard the light rows, before the decoding work.
        dataset = shard(dataset, input_context)
        return dataset.map(
            lambda row: (ensure_rgb(self._decode(row)), tf.cast(row["label"], tf.int32)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
