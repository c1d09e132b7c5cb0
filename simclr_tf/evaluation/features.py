"""The one eval input pipeline and feature extraction under any strategy, with caches.

- `eval_dataset` gives eval-preprocessed batches `{'image', 'label', 'id'}` where `id`
  is the example's position in the split's canonical order (`DatasetSource.load`
  without sharding), so every feature row can be traced back to its image. Every
  evaluation reads it (features, kNN, linear probe, the supervised head).
- `pad_batch` is the one way a short batch is padded: the last batch of
  `eval_dataset`, and a replica's share of a batch inside a distributed step
  (`replica_batch_size`), get blank rows with label and id -1, which no evaluation
  counts.
- `FeatureExtractor` runs a model in inference mode under a `tf.distribute` strategy;
  each replica pads its share of the batch to a fixed size, and features, labels and
  ids are gathered from every replica (`collectives.cross_replica_concat`). Rows are
  returned sorted by id with padding and duplicates removed, so the result is the
  same for 1 or many replicas and for any batch size, up to float rounding.
- `cached_features` stores extracted features in an .npz keyed by what produced them
  (the encoder's weights, the split's examples as `DatasetSource.data_identity`
  says, image size), recomputing when the key changes.
"""
import json
import math
import os

import numpy as np
import tensorflow as tf

from simclr_tf.method import collectives
from simclr_tf.rundir import files
from simclr_tf import augment
from simclr_tf.models import outputs

H, Z = outputs.H, outputs.Z  # re-exported: features.H, features.Z


# ---------------------------------------------------------------- data


def bounded_ids(source, split, max_examples, *, seed=0):
    """Ids of at most `max_examples` examples of `split` (None = all of them).

    A deterministic stratified sample for labelled splits, a uniform one otherwise.
    """
    total = source.num_examples(split)
    if not max_examples or total <= max_examples:
        return None
    if source.has_labels(split):
        from simclr_tf.data import sources  # pylint: disable=import-outside-toplevel
        return sources.stratified_subset_ids(source.load_labels(split),
                                             num_examples=int(max_examples), seed=seed)
    return np.sort(np.random.RandomState(seed).choice(total, int(max_examples),
                                                      replace=False)).astype(np.int64)


def eval_dataset(source, split, *, image_size, batch_size, example_ids=None, crop=None):
    """Batches `{'image': float32 [B, S, S, 3], 'label': int32 [B], 'id': int64 [B]}`.

    Every batch has `batch_size` rows: the last one is padded with rows of id -1
    (label -1, blank image), which `FeatureExtractor` drops.

    Args:
        source: a `DatasetSource`; unlabelled splits give label -1.
        split: split spec.
        image_size: output side (`augment.preprocess_for_eval`).
        batch_size: global batch; the last batch may be smaller.
        example_ids: keep only these canonical positions (sorted), or None for all.
        crop: centre crop; None follows the reference (none at <= 32 px).
    """
    if crop is None:
        crop = augment.eval_center_crop_enabled(image_size)
    if example_ids is None:
        ids = tf.data.Dataset.range(source.num_examples(split))
        examples = source.load(split)
    else:
        example_ids = np.unique(np.asarray(example_ids, np.int64))
        ids = tf.data.Dataset.from_tensor_slices(example_ids)
        examples = source.load(split, example_ids=example_ids)  # in id order

    def preprocess(example, example_id):
        image, label = example
        return dict(image=augment.preprocess_for_eval(image, image_size, image_size,
                                                      crop=crop),
                    label=tf.cast(label, tf.int32), id=example_id)

    dataset = tf.data.Dataset.zip(examples, ids).map(
        preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # Every batch full: one static shape, so evaluation steps are traced once.
    return dataset.batch(batch_size).map(
        lambda batch: pad_batch(batch, batch_size)).prefetch(tf.data.AUTOTUNE)


def preprocessing_record(image_size, crop=None):
    """What `eval_dataset` does to an image, for the records (an accuracy's
    protocol): no augmentation, the centre crop (or none: `crop` None follows the
    reference, none at <= 32 px), a bicubic resize to `image_size`, pixels in [0, 1]."""
    if crop is None:
        crop = augment.eval_center_crop_enabled(image_size)
    return dict(image_size=int(image_size), augmentation="none", center_crop=bool(crop),
                crop_proportion=augment.EVAL_CROP_PROPORTION if crop else None,
                resize="bicubic", pixels="[0, 1]")


def pad_batch(batch, size):
    """`batch` with `size` rows: blank images, and -1 in every other entry (label, id).

    Args:
        batch: dict with 'image' [n, H, W, 3] (n <= size) and int entries [n] such as
            'label' and 'id'.
        size: the number of rows wanted (a Python int: the result's static shape).
    """
    missing = size - tf.shape(batch["image"])[0]

    def pad(name, value):
        paddings = [[0, missing]] + [[0, 0]] * (value.shape.rank - 1)
        value = tf.pad(value, paddings, constant_values=0 if name == "image" else -1)
        return tf.ensure_shape(value, [size] + value.shape[1:].as_list())

    return {name: pad(name, value) for name, value in batch.items()}


def replica_batch_size(strategy, dataset, batch_size=None):
    """Rows every replica pads its share of a global batch of `dataset` to.

    Args:
        strategy: the strategy that splits the batches over its replicas.
        dataset: global batches (dicts with 'image').
        batch_size: their size (None: the static size, else the first batch's).
    """
    if batch_size is None:
        batch_size = dataset.element_spec["image"].shape[0]
    if batch_size is None:
        batch_size = next((int(b["image"].shape[0]) for b in dataset.take(1)), 1)
    return max(1, math.ceil(batch_size / strategy.num_replicas_in_sync))


def summed_counts_step(strategy, replica_counts, per_replica):
    """The compiled step of a counting evaluator: a global batch -> {name: count
    summed over the replicas} of `replica_counts(batch)`, each replica's share of the
    batch first padded to `per_replica` rows (`pad_batch`: padding rows carry label
    and id -1, which no count may count)."""
    def replica_step(batch):
        # A replica's share of a batch may be short or empty (uneven split).
        return replica_counts(pad_batch(batch, per_replica))

    @tf.function(reduce_retracing=True)
    def step(batch):
        counts = strategy.run(replica_step, args=(batch,))
        return {name: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
                for name, value in counts.items()}

    return step


def total_counts(strategy, step, dataset, names, steps=None):
    """{name: Python float} of `step` (`summed_counts_step`) summed over the global
    batches of `dataset` (at most `steps` of them when given)."""
    if steps:
        dataset = dataset.take(steps)
    totals = dict.fromkeys(names, 0.0)
    for batch in strategy.experimental_distribute_dataset(dataset):
        for name, value in step(batch).items():
            totals[name] += float(value)
    return totals


def example_names(source, split, ids):
    """A name per id: the file path for image folders, else 'dataset:split:id'."""
    select = getattr(source, "_select", None)  # array-backed sources (folders, digits)
    if select is not None:
        columns = select(split)
        if "path" in columns:
            return np.asarray([os.fsdecode(p) for p in columns["path"][ids]],
                              dtype=object)
    return np.asarray([f"{source.name}:{split}:{i}" for i in ids], dtype=object)


# ---------------------------------------------------------------- extraction


def check_strategy_and_model(strategy, model):
    """Raises ValueError unless `strategy` is a tf.distribute strategy and `model` is
    callable (the constructors of the evaluators call it)."""
    if not isinstance(strategy, tf.distribute.Strategy):
        raise ValueError("strategy must be a tf.distribute.Strategy. Received: "
                         f"strategy={strategy!r}")
    if not callable(model):
        raise ValueError(f"model must be callable. Received: model={model!r}")


class FeatureExtractor:
    """Named model outputs over a dataset of `eval_dataset` batches, under a strategy.

    Args:
        strategy: the strategy whose scope holds the model's variables.
        model: callable `model(images, training=False) -> dict of named features`.
        outputs: which features to collect (h = 'final_avg_pool', z =
            'proj_head_output').
    """

    def __init__(self, strategy, model, outputs=(H,)):
        check_strategy_and_model(strategy, model)
        if isinstance(outputs, str) or not outputs or not all(
                isinstance(name, str) for name in outputs):
            raise ValueError("outputs must be a non-empty sequence of output names. "
                             f"Received: outputs={outputs!r}")
        self.strategy, self.model, self.outputs = strategy, model, tuple(outputs)
        self._step = None
        self._per_replica = None

    def _make_step(self, per_replica):
        model, outputs = self.model, self.outputs

        def replica_step(batch):
            # A replica's share of the last batch may be short or even empty: pad it
            # to the fixed size (padded rows carry id -1 and are dropped on the host),
            # so every replica gathers equally shaped tensors.
            batch = pad_batch(batch, per_replica)
            result = model(batch["image"], training=False)
            result = {name: tf.cast(result[name], tf.float32) for name in outputs}
            result["labels"], result["ids"] = batch["label"], batch["id"]
            return {name: collectives.cross_replica_concat(value)
                    for name, value in result.items()}

        @tf.function(reduce_retracing=True)
        def step(batch):
            return self.strategy.run(replica_step, args=(batch,))

        return step

    def __call__(self, dataset, *, batch_size=None, expected=None):
        """dict(outputs..., labels int64 [N], ids int64 [N]) as numpy, sorted by id.

        Args:
            dataset: an `eval_dataset` (global batches, not yet distributed).
            batch_size: its global batch size (read from the first batch if None).
            expected: the number of distinct ids that must come out (checked).
        """
        per_replica = replica_batch_size(self.strategy, dataset, batch_size)
        if self._step is None or self._per_replica != per_replica:
            self._step, self._per_replica = self._make_step(per_replica), per_replica
        parts = {name: [] for name in self.outputs + ("labels", "ids")}
        for batch in self.strategy.experimental_distribute_dataset(dataset):
            gathered = self._step(batch)
            for name, value in gathered.items():
                # Every replica holds the same gathered rows; read the first.
                parts[name].append(self.strategy.experimental_local_results(value)[0].numpy())
        if not parts["ids"]:
            raise ValueError("The dataset given to the feature extractor is empty.")
        arrays = {name: np.concatenate(value) for name, value in parts.items()}
        ids, first = np.unique(arrays["ids"], return_index=True)
        keep = first[ids >= 0]
        result = {name: value[keep] for name, value in arrays.items()}
        result["labels"] = result["labels"].astype(np.int64)
        result["ids"] = result["ids"].astype(np.int64)
        if expected is not None and len(result["ids"]) != expected:
            raise RuntimeError(f"Feature extraction returned {len(result['ids'])} distinct "
                               f"examples, expected {expected}.")
        return result


def extract(strategy, model, source, split, *, image_size, batch_size=256,
            outputs=(H,), example_ids=None, extractor=None):
    """One-call form of `FeatureExtractor` over `eval_dataset(source, split, ...)`.

    extractor: a `FeatureExtractor` of `model` to reuse (several splits of one model:
        its compiled step is traced once, not once per split).
    """
    dataset = eval_dataset(source, split, image_size=image_size, batch_size=batch_size,
                           example_ids=example_ids)
    expected = (source.num_examples(split) if example_ids is None
                else len(np.unique(example_ids)))
    extractor = extractor or FeatureExtractor(strategy, model, outputs)
    return extractor(dataset, batch_size=batch_size, expected=expected)


# ---------------------------------------------------------------- cache


def slug(text):
    """A path-safe version of `text` (dataset and split names)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text)).strip("_")


def cache_path(directory, dataset, split):
    """`directory/<dataset>/<split>.npz` with path-safe names."""
    return os.path.join(directory, slug(dataset) or "dataset", f"{slug(split)}.npz")


def cached_features(path, key, compute):
    """Features stored at `path` if they were made for `key`, else `compute()`, saved.

    Args:
        path: .npz file (None: no cache).
        key: JSON-serialisable description of what produced the features.
        compute: callable returning a dict of numpy arrays.

    Returns:
        (features dict, whether it came from the cache).
    """
    key = json.dumps(key, sort_keys=True, default=str)
    if path and tf.io.gfile.exists(path):
        with np.load(path, allow_pickle=False) as stored:
            if "_key" in stored and str(stored["_key"]) == key:
                return {k: stored[k] for k in stored.files if k != "_key"}, True
    features = compute()
    if path:
        tf.io.gfile.makedirs(os.path.dirname(path))
        # A killed write never leaves a bad cache.
        files.atomic_write(path, lambda scratch: np.savez(scratch, _key=np.asarray(key),
                                                            **features))
    return features, False


def sample_images(source, split, ids, *, image_size):
    """Eval-preprocessed images of `ids` (sorted), float32 in [0, 1]."""
    batches = eval_dataset(source, split, image_size=image_size, batch_size=256,
                           example_ids=ids)
    return np.concatenate([b["image"].numpy()[b["id"].numpy() >= 0] for b in batches])
