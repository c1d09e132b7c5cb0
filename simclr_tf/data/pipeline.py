"""Training input pipelines: per-replica batches of augmented views, sharded per input
context. (Evaluation batches come from the one eval pipeline,
`simclr_tf.evaluation.features.eval_dataset`.)

`build_input_fn` returns the `input_fn(input_context)` that
`strategy.distribute_datasets_from_function` calls once per input pipeline;
`build_distributed_dataset` does that call. Batches (docs/design.md, "Batches"):

- pretraining (`train_mode='pretrain'`): `((view1, view2), labels)`, two independent
  `preprocess_for_train` views of every image, float32 [n, H, W, 3] in [0, 1], labels
  int32 [n] (-1 where the split has none). Blur is not applied here: the train step
  calls `augment.batch_random_blur` on the device.
- fine-tuning (`train_mode='finetune'`): `(images, labels)`, crop and flip only.
- distillation (`train_mode='distill'`): the same, over every example of the split;
  labels -1 outside `labelled_ids` (when given) and where the split has none.

n is the per-replica batch, `global_batch_size // num_replicas_in_sync`. The datasets
repeat forever and drop the last partial batch, so every step sees full, statically
shaped batches.

Example:
```python
source = registry.get_dataset("digits")
dist_ds = build_distributed_dataset(
    strategy, source, "train", global_batch_size=256, train_mode="pretrain",
    image_size=32, color_jitter_strength=0.5)
(view1, view2), labels = next(iter(dist_ds))   # PerReplica values
```
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.augment.recipe import preprocess_for_train, two_views
from simclr_tf.augment import device as device_augment
from simclr_tf.data import sources
from simclr_tf.data.sources import DatasetSource
from simclr_tf.config.tables import train_modes

# The shuffle buffer holds decoded images: 10k ImageNet images (about 375x500) are
# ~5.6 GB of host memory per input pipeline (docs/scaling.md); smaller shares are
# shuffled whole.
DEFAULT_SHUFFLE_BUFFER_SIZE = 10_000

InputFn = Callable[[tf.distribute.InputContext | None], tf.data.Dataset]


def _positive_int(name: str, value) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")


def build_input_fn(
    source: DatasetSource,
    split: str,
    *,
    global_batch_size: int,
    train_mode: str = "pretrain",
    image_size: int = 224,
    color_jitter_strength: float = 1.0,
    impl: str = "simclrv2",
    cache: bool = False,
    seed: int | None = None,
    label_subset_ids: Sequence[int] | np.ndarray | None = None,
    labelled_ids: Sequence[int] | np.ndarray | None = None,
    shuffle_buffer_size: int = DEFAULT_SHUFFLE_BUFFER_SIZE,
    start_step: int = 0,
    augment_on: str = "host",
    augmentations: str = "",
) -> InputFn:
    """Returns `input_fn(input_context) -> tf.data.Dataset` of per-replica batches.

    Args:
      source: the dataset (`registry.get_dataset(...)`).
      split: split spec, e.g. 'train', 'train[:10%]', 'unlabelled'.
      global_batch_size: examples per step over all replicas; must divide evenly.
      train_mode: 'pretrain' (two colour-distorted views), 'finetune' (one crop+flip
        view) or 'distill' (the same view; the split may be unlabelled).
      image_size: output side in pixels.
      color_jitter_strength: SimCLR's s (1.0 ImageNet, 0.5 CIFAR).
      impl: 'simclrv2' (multiplicative brightness) or 'simclrv1' (additive).
      cache: cache the decoded examples in memory after the first pass.
      seed: seed of the training stream: example order and every augmentation are a
        function of (seed, position in the stream), so a run resumed at `start_step`
        sees exactly the batches an uninterrupted run would. None draws one.
      label_subset_ids: keep only these example ids of `split` (semi-supervised
        fine-tuning; see `subsets.make_label_subset`).
      labelled_ids: keep every example of `split`, but only these ids keep their
        label (the others' is -1): distillation's labelled subset.
      shuffle_buffer_size: examples in the shuffle buffer.
      start_step: training steps already taken (resume): the stream starts at the
        epoch and position that step reached. Skipping within that epoch reads (and
        decodes) the skipped examples once, at most one epoch's worth.
      augment_on: 'host' (default) or 'device': pretraining batches are then
        `(dict(image=uint8 [n, S, S, 3], size=int32 [n, 2], seed=int64 [n, 2]),
        labels)` from `device_augment.host_preprocess` (decode and resize only), and
        the train step draws the views (`device_augment.make_view_fn`).
      augmentations: the transformations of a view (`rules.augmentations`: '' the
        train mode's own, 'none', or a subset of crop, flip, color).

    Returns:
      The input function; called with None it gives global batches on one device.
    """
    if not isinstance(source, DatasetSource):
        raise ValueError("`source` must be a DatasetSource (registry.get_dataset). "
                         f"Received: source={source!r}")
    _positive_int("global_batch_size", global_batch_size)
    _positive_int("image_size", image_size)
    _positive_int("shuffle_buffer_size", shuffle_buffer_size)
    if train_mode not in train_modes.TRAIN_MODES:
        raise ValueError(f"`train_mode` must be one of {tuple(train_modes.TRAIN_MODES)}. "
                         f"Received: train_mode={train_mode!r}")
    objective = train_modes.get(train_mode)
    rules.check_color_jitter_impl(impl)
    rules.check_color_jitter_strength(color_jitter_strength)
    source.split_ranges(split)  # Fails early, naming the dataset and its splits.
    pretraining = objective.views == 2
    # --augmentations empty (the default): crop, flip and colour for two views, crop
    # and flip for one.
    transforms = rules.augmentations(augmentations, objective.views)
    switches = dict(crop="crop" in transforms, flip="flip" in transforms,
                    color_distort="color" in transforms)
    if objective.needs_labels and not source.has_labels(split):
        raise ValueError(
            f"Split {split!r} of dataset {source.name!r} has no labels: it can only be "
            "used for pretraining (train_mode='pretrain').")
    if not isinstance(start_step, (int, np.integer)) or start_step < 0:
        raise ValueError(f"`start_step` must be an int >= 0. Received: start_step={start_step!r}")
    subset = None if label_subset_ids is None else np.asarray(label_subset_ids, np.int64)
    if labelled_ids is not None and subset is not None:
        raise ValueError("Pass label_subset_ids (keep only those examples) or "
                         "labelled_ids (keep all, label only those), not both.")
    labelled = None
    if labelled_ids is not None:
        labelled = np.zeros(source.num_examples(split), bool)
        labelled[sources.check_example_ids(labelled_ids, len(labelled), split)] = True
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31 - 1))

    def preprocess_pretrain(image, label, image_seed):
        return two_views(image, image_size, seed=image_seed, **switches,
                         color_jitter_strength=color_jitter_strength, impl=impl), label

    def preprocess_finetune(image, label, image_seed):
        return preprocess_for_train(
            image, image_size, image_size, **switches,
            color_jitter_strength=color_jitter_strength, impl=impl,
            seed=image_seed), label

    if augment_on not in ("host", "device"):
        raise ValueError("`augment_on` must be 'host' or 'device'. "
                         f"Received: augment_on={augment_on!r}")
    if augment_on == "device" and not pretraining:
        raise ValueError("`augment_on='device'` applies to pretraining only.")
    if augment_on == "device" and str(augmentations or "").strip():
        raise ValueError("`augmentations` chooses the host's transformations; "
                         "`augment_on='device'` draws all three.")

    def preprocess_pretrain_device(image, label, image_seed):
        return device_augment.host_preprocess(image, image_size, image_seed), label

    if pretraining and augment_on == "device":
        preprocess = preprocess_pretrain_device
    elif pretraining:
        preprocess = preprocess_pretrain
    else:
        preprocess = preprocess_finetune

    def input_fn(input_context: tf.distribute.InputContext | None = None):
        if input_context is None:
            batch_size = global_batch_size
        else:
            batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = _training_stream(
            source, split, subset, input_context, global_batch_size, cache, seed,
            shuffle_buffer_size, start_step, labelled).map(
                preprocess, num_parallel_calls=tf.data.AUTOTUNE)
        # Batches keep the stream's order (map and batch are deterministic by
        # default), so training is reproducible and resumable step for step.
        dataset = dataset.batch(batch_size, drop_remainder=True,
                                num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    return input_fn


def _training_stream(source, split, subset, input_context, global_batch_size, cache,
                     seed, shuffle_buffer_size, start_step, labelled=None):
    """(image, label, seed) forever: epoch e is this pipeline's share of the split
    (`DatasetSource.share_ids`: it reads no other example) shuffled with a seed
    derived from (seed, e); each element's augmentation seed is derived from (seed,
    pipeline, position in the stream). Starts where `start_step` left off.
    `labelled`: a bool per example of the split; the label of one that is False is
    -1."""
    pipelines, pipeline_id = 1, 0
    if input_context is not None:
        pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
    if pipelines == 1 and subset is None:
        # The whole split in its canonical order. `source` is the --dataset's
        # (`registry.get_dataset`): digits is an `ArraySource` (`ArraySource.load`).
        share = None
        base = source.load(split)
        shard_size = source.num_examples(split)
    else:
        # This pipeline's share, by example id: it reads and decodes those examples
        # only (`DatasetSource.share_ids`), and its size is known, which resuming at
        # an exact position needs.
        share = source.share_ids(split, pipelines, pipeline_id, example_ids=subset)
        shard_size = len(share)
        if shard_size == 0:
            total = len(subset) if subset is not None else source.num_examples(split)
            raise ValueError(f"Split {split!r} of {source.name!r} has {total} examples, "
                             f"too few for {pipelines} input pipelines.")
        base = source.load(split, example_ids=share)
    if labelled is not None:
        # Ids are positions in the canonical order, which `load` keeps.
        mask = tf.constant(labelled if share is None else labelled[share])
        base = tf.data.Dataset.zip(base, tf.data.Dataset.range(len(mask))).map(
            lambda pair, position: (pair[0], tf.where(tf.gather(mask, position),
                                                      tf.cast(pair[1], tf.int32), -1)))
    if cache:
        base = base.cache()
    per_step = global_batch_size // pipelines
    first_epoch, offset = divmod(start_step * per_step, shard_size)
    buffer = min(shuffle_buffer_size, shard_size)

    def epoch(index):
        shuffle_seed = tf.random.experimental.stateless_fold_in(
            tf.constant([seed, 0], tf.int64), index)[0]
        # This function is traced into its own graph. With a global seed of 0,
        # `shuffle` compares its (tensor) op seed with 0 in Python and fails; the
        # op seed alone fixes the order, so the graph-level seed is cleared here.
        tf.random.set_seed(None)
        return base.shuffle(buffer, seed=shuffle_seed, reshuffle_each_iteration=False)

    stream = tf.data.Dataset.range(first_epoch, np.iinfo(np.int64).max).flat_map(epoch)
    stream = stream.skip(offset)
    element_seed = tf.constant([seed, pipeline_id + 1], tf.int64)
    first_position = first_epoch * shard_size + offset
    positions = tf.data.Dataset.range(first_position, np.iinfo(np.int64).max)
    return tf.data.Dataset.zip(stream, positions).map(
        lambda pair, position: (*pair, tf.random.experimental.stateless_fold_in(
            element_seed, position)))


def build_distributed_dataset(strategy: tf.distribute.Strategy, source: DatasetSource,
                              split: str, *, global_batch_size: int,
                              **kwargs) -> tf.distribute.DistributedDataset:
    """`strategy.distribute_datasets_from_function(build_input_fn(...))`.

    Args:
      strategy: the distribution strategy (default strategy for one device).
      source: the dataset.
      split: split spec.
      global_batch_size: examples per step over all replicas; must be a multiple of
        `strategy.num_replicas_in_sync`.
      **kwargs: the keyword arguments of `build_input_fn`.

    Returns:
      A distributed dataset of per-replica batches (see module docstring).
    """
    _positive_int("global_batch_size", global_batch_size)
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(
            f"`global_batch_size` must be a multiple of the {replicas} replicas in sync. "
            f"Received: global_batch_size={global_batch_size}")
    input_fn = build_input_fn(source, split, global_batch_size=global_batch_size,
                              **kwargs)
    return strategy.distribute_datasets_from_function(input_fn)
