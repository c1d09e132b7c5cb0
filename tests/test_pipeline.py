"""Tests for simclr_tf.data.pipeline: batch formats, sharding, label subsets.

(The eval pipeline is `simclr_tf.evaluation.features.eval_dataset`: tests/test_features.py.)
"""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from simclr_tf.data import pipeline, registry, subsets


@pytest.fixture(scope="module")
def digits():
    return registry.get_dataset("digits")


@pytest.fixture(scope="module")
def strategy():
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _local(strategy, value):
    return strategy.experimental_local_results(value)


def test_pretrain_batches_under_mirrored_strategy(digits, strategy):
    tf.random.set_seed(0)  # the views must stay independent under a global seed
    dist = pipeline.build_distributed_dataset(
        strategy, digits, "train", global_batch_size=16,
        train_mode="pretrain", image_size=24, color_jitter_strength=0.5)
    (view1, view2), labels = next(iter(dist))
    for v1, v2, y in zip(_local(strategy, view1), _local(strategy, view2),
                         _local(strategy, labels)):
        assert v1.shape == v2.shape == (8, 24, 24, 3)
        assert v1.dtype == tf.float32 and y.dtype == tf.int32 and y.shape == (8,)
        assert 0.0 <= float(tf.reduce_min(v1)) and float(tf.reduce_max(v1)) <= 1.0
        differs = tf.reduce_max(tf.abs(v1 - v2), axis=[1, 2, 3]) > 1e-3
        assert bool(tf.reduce_all(differs))  # two independent views of each image
        assert 0 <= int(tf.reduce_min(y)) and int(tf.reduce_max(y)) < 10


def test_finetune_batches(digits, strategy):
    dist = pipeline.build_distributed_dataset(
        strategy, digits, "train", global_batch_size=8,
        train_mode="finetune", image_size=32)
    images, labels = next(iter(dist))
    for x, y in zip(_local(strategy, images), _local(strategy, labels)):
        assert x.shape == (4, 32, 32, 3) and y.shape == (4,)


def test_training_repeats_with_full_batches(digits):
    dataset = pipeline.build_input_fn(
        digits, "test[:10]", global_batch_size=4,
        train_mode="finetune", image_size=16)(None)
    shapes = [x.shape[0] for x, _ in dataset.take(10)]  # 40 examples from 10
    assert shapes == [4] * 10


def test_input_pipelines_shard_examples():
    source = registry.get_dataset("digits")
    input_fn = pipeline.build_input_fn(source, "test", global_batch_size=8,
                                       train_mode="finetune",
                                       image_size=8, seed=0)
    seen = []
    for i in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i,
                                             num_replicas_in_sync=2)
        # One epoch of this pipeline's shard: 180 examples in per-replica batches of 4.
        batches = list(input_fn(context).take(45))
        assert all(x.shape[0] == 4 for x, _ in batches)
        seen.extend(np.concatenate([y.numpy() for _, y in batches]).tolist())
    # The two shards together are the split, every example once.
    assert collections.Counter(seen) == collections.Counter(
        source.load_labels("test").tolist())


def test_label_subset_ids_restrict_the_examples(digits):
    subset = subsets.make_label_subset(digits, "train", 0.05)
    # One batch of the subset's size is one epoch of it.
    dataset = pipeline.build_input_fn(
        digits, "train", global_batch_size=len(subset.example_ids),
        train_mode="finetune", image_size=16, label_subset_ids=subset.example_ids,
        seed=0)(None)
    _, labels = next(iter(dataset))
    assert collections.Counter(labels.numpy().tolist()) == collections.Counter(
        digits.load_labels("train")[subset.example_ids].tolist())


@pytest.mark.large  # 5 s
def test_tfds_pretraining_pipeline_under_mock():
    with tfds.testing.mock_data(num_examples=10):
        source = registry.get_dataset("imagenet2012")
        dataset = pipeline.build_input_fn(
            source, "train", global_batch_size=4,
            train_mode="pretrain", image_size=32, cache=True)(None)
        (view1, view2), labels = next(iter(dataset))
    assert view1.shape == view2.shape == (4, 32, 32, 3)
    assert labels.shape == (4,)


def test_unlabelled_split_only_for_pretraining(tmp_path):
    from PIL import Image
    for i in range(4):
        Image.new("RGB", (8, 8), (i, i, i)).save(tmp_path / f"{i}.png")
    source = registry.get_dataset(f"folder:{tmp_path}")
    dataset = pipeline.build_input_fn(source, "train", global_batch_size=2,
                                      image_size=8)(None)
    (_, _), labels = next(iter(dataset))
    assert labels.numpy().tolist() == [-1, -1]
    with pytest.raises(ValueError, match="no labels"):
        pipeline.build_input_fn(source, "train", global_batch_size=2, image_size=8,
                                train_mode="finetune")


@pytest.mark.parametrize("kwargs,match", [
    (dict(global_batch_size=0), "global_batch_size"),
    (dict(train_mode="linear"), "train_mode"),
    (dict(impl="v3"), "impl"),
    (dict(image_size=-1), "image_size"),
    (dict(color_jitter_strength=3.0), "color_jitter_strength"),
    (dict(split="validation"), "split"),
])
def test_bad_arguments(digits, kwargs, match):
    args = dict(split="train", global_batch_size=8)
    args.update(kwargs)
    split = args.pop("split")
    with pytest.raises(ValueError, match=match):
        pipeline.build_input_fn(digits, split, **args)


def test_global_batch_must_divide_over_replicas(digits, strategy):
    with pytest.raises(ValueError, match="global_batch_size"):
        pipeline.build_distributed_dataset(strategy, digits, "train",
                                           global_batch_size=7)


def _first_batch(digits, **kwargs):
    data = pipeline.build_input_fn(digits, "train[:8]", global_batch_size=8,
                                   image_size=16, seed=3, shuffle_buffer_size=8,
                                   **kwargs)(None)
    return next(iter(data))


@pytest.mark.large  # 7 s: seven pipelines traced
def test_augmentations_take_the_views_apart_and_their_default_is_the_modes_own(digits):
    """--augmentations (the paper's augmentation study): '' is each mode's own (the
    same batches as naming its transformations), 'none' resizes the whole image
    (both views equal), and fine-tuning may add colour (the supervised column of the
    colour study)."""
    (v1, v2), labels = _first_batch(digits)
    (n1, n2), _ = _first_batch(digits, augmentations="crop,flip,color")
    np.testing.assert_array_equal(v1, n1)
    np.testing.assert_array_equal(v2, n2)
    (r1, r2), _ = _first_batch(digits, augmentations="none")
    np.testing.assert_array_equal(r1, r2)
    images = [image for image, _ in digits.load("train[:8]").as_numpy_iterator()]
    order = np.argsort(labels.numpy(), kind="stable")  # the batch is shuffled: match rows
    resized = np.stack([np.clip(tf.image.resize(tf.image.convert_image_dtype(
        image, tf.float32), [16, 16], method="bicubic"), 0, 1) for image in images])
    found = {tuple(np.round(r.ravel()[:40], 5)) for r in r1.numpy()}
    assert found == {tuple(np.round(r.ravel()[:40], 5)) for r in resized}, order
    (c1, c2), _ = _first_batch(digits, augmentations="crop")  # crop alone: no colour
    assert not np.array_equal(c1, c2)
    tuned, _ = _first_batch(digits, train_mode="finetune")
    same, _ = _first_batch(digits, train_mode="finetune", augmentations="crop,flip")
    coloured, _ = _first_batch(digits, train_mode="finetune",
                               augmentations="crop,flip,color", color_jitter_strength=1.0)
    np.testing.assert_array_equal(tuned, same)
    assert not np.array_equal(tuned, coloured)
    with pytest.raises(ValueError, match="augmentations must be 'none' or a comma-separated "
                                         "subset of crop, flip, color"):
        _first_batch(digits, augmentations="crop,cutout")
    with pytest.raises(ValueError, match="draws all three"):
        _first_batch(digits, augmentations="crop", augment_on="device")
