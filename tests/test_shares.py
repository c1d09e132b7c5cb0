"""Each training input pipeline reads and decodes only its share of the split
(`DatasetSource.share_ids`; issue: "every input pipeline decodes the whole split").

Decodes are counted per example inside `_decode` (a source whose decode calls back
into Python), for 4 pipelines; a planted "shard after decode" (a source that decodes
every example and keeps its share) fails the same check. TFDS reads its share as one
range of its record files: checked on a small dataset really prepared here (TFDS's
mock ignores split slicing)."""
import collections
import threading

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from simclr_tf.data import pipeline, registry
from simclr_tf.data import tfds_source
from simclr_tf.data.sources import ArraySource

PIPELINES = 4
EXAMPLES = 200
# TFDS's own, saved before the suite's autouse fixture refuses downloads
# (tests/conftest.py): the builder below writes its data locally, nothing is fetched.
_PREPARE = tfds.core.DatasetBuilder.download_and_prepare


class CountingSource(ArraySource):
    """EXAMPLES 8x8 images whose decode counts, per example id, how often it ran."""

    def __init__(self, examples=EXAMPLES):
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (examples, 8, 8, 3), dtype=np.uint8)
        rows = {"train": {"image": images, "label": np.arange(examples) % 3,
                          "id": np.arange(examples)}}
        super().__init__("counting", 3, rows)
        self.decodes = collections.Counter()
        self._lock = threading.Lock()

    def _count(self, example_id):
        with self._lock:
            self.decodes[int(example_id)] += 1
        return example_id

    def _decode(self, columns):
        counted = tf.numpy_function(self._count, [columns["id"]], tf.int64,
                                    stateful=True)
        with tf.control_dependencies([counted]):
            return tf.identity(columns["image"])


class DecodeThenShard(CountingSource):
    """The planted fault: decodes every example of the split, then keeps its share."""

    def load(self, split, *, input_context=None, shuffle_files=False, example_ids=None):
        everything = super().load(split)
        keep = np.zeros(self.num_examples(split), bool)
        keep[np.asarray(example_ids)] = True
        keep = tf.constant(keep)
        return everything.enumerate().filter(
            lambda i, _: tf.gather(keep, i)).map(lambda _, example: example)


def _epochs_of_each_pipeline(source, epochs=2, label_subset_ids=None):
    """(ids each pipeline yielded, decodes while it ran) for `epochs` of its share."""
    input_fn = pipeline.build_input_fn(
        source, "train", global_batch_size=PIPELINES, train_mode="finetune",
        image_size=8, seed=0, shuffle_buffer_size=4, label_subset_ids=label_subset_ids)
    yielded, decoded = [], []
    for index in range(PIPELINES):
        share = source.share_ids("train", PIPELINES, index, label_subset_ids)
        context = tf.distribute.InputContext(num_input_pipelines=PIPELINES,
                                             input_pipeline_id=index,
                                             num_replicas_in_sync=PIPELINES)
        source.decodes.clear()
        # One example per step and pipeline: `epochs` of its share.
        labels = [int(y[0]) for _, y in input_fn(context).take(epochs * len(share))]
        yielded.append(labels)
        decoded.append(dict(source.decodes))
    return yielded, decoded


def check_reads_only_its_share(source, decoded, epochs=2, slack=32, subset=None):
    """Every pipeline decoded only the examples of its share, each at most `epochs`
    + 1 times (the next epoch's shuffle buffer), at most `slack` decodes beyond its
    epochs (what the pipeline reads ahead); the shares cover the ids once."""
    shares = [source.share_ids("train", PIPELINES, i, subset) for i in range(PIPELINES)]
    everything = np.concatenate(shares)
    expected = (np.arange(source.num_examples("train")) if subset is None
                else np.unique(subset))
    assert sorted(everything.tolist()) == expected.tolist()
    for share, counts in zip(shares, decoded):
        assert set(counts) <= set(share.tolist()), "decoded outside its share"
        assert sum(counts.values()) <= epochs * len(share) + slack
        assert max(counts.values()) <= epochs + 1


def test_each_of_four_pipelines_decodes_only_its_share():
    source = CountingSource()
    yielded, decoded = _epochs_of_each_pipeline(source)
    check_reads_only_its_share(source, decoded)
    # Every example yielded once per epoch by the pipeline of its share (label = id % 3).
    for index, labels in enumerate(yielded):
        share = source.share_ids("train", PIPELINES, index)
        assert collections.Counter(labels) == collections.Counter(
            (np.tile(share, 2) % 3).tolist())


def test_a_label_subset_is_shared_out_too():
    source = CountingSource()
    subset = np.arange(3, EXAMPLES, 3)
    _, decoded = _epochs_of_each_pipeline(source, label_subset_ids=subset)
    check_reads_only_its_share(source, decoded, subset=subset)


def test_planted_shard_after_decode_fails_the_check():
    source = DecodeThenShard()
    _, decoded = _epochs_of_each_pipeline(source)
    with pytest.raises(AssertionError, match="outside its share"):
        check_reads_only_its_share(source, decoded)


def test_shares_are_stride_for_rows_and_blocks_for_tfds():
    source = CountingSource(10)
    assert [source.share_ids("train", 4, i).tolist() for i in range(4)] == [
        [0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    with pytest.raises(ValueError, match="index"):
        source.share_ids("train", 4, 4)


class TinyImages(tfds.core.GeneratorBasedBuilder):
    """12 + 5 random 8x8 images, 3 classes, prepared locally (no download)."""
    VERSION = tfds.core.Version("1.0.0")
    # TFDS looks for a builder's files (checksums) in its module's package; tests/
    # is none: TFDS's own testing package, as its DummyMnist.
    __module__ = "tensorflow_datasets.testing"

    def _info(self):
        return self.dataset_info_from_configs(features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(8, 8, 3)),
            "label": tfds.features.ClassLabel(num_classes=3)}),
            supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(12, 0), "test": self._generate_examples(5, 1)}

    def _generate_examples(self, count, seed):
        rng = np.random.default_rng(seed)
        for i in range(count):
            # The label is the position mod 3 in the order the split is written.
            yield i, {"image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
                      "label": i % 3}


@pytest.fixture(scope="module")
def tiny_tfds(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    _PREPARE(TinyImages(data_dir=data_dir))
    return data_dir


def test_tfds_shares_are_blocks_read_alone(tiny_tfds, monkeypatch):
    source = registry.get_dataset("tiny_images", data_dir=tiny_tfds)
    assert isinstance(source, tfds_source.TFDSSource)
    canonical = [(x.numpy().tobytes(), int(y)) for x, y in source.load("train")]
    assert len(canonical) == 12
    read = []
    as_dataset = tfds_source.TFDSSource._as_dataset  # pylint: disable=protected-access

    def recording(self, split, **kwargs):
        read.append(split)
        return as_dataset(self, split, **kwargs)

    monkeypatch.setattr(tfds_source.TFDSSource, "_as_dataset", recording)
    seen = []
    for index in range(PIPELINES):
        share = source.share_ids("train", PIPELINES, index)
        assert share.tolist() == list(range(3 * index, 3 * index + 3))
        examples = [(x.numpy().tobytes(), int(y))
                    for x, y in source.load("train", example_ids=share)]
        assert examples == [canonical[i] for i in share]  # the block, in order
        seen.extend(examples)
    # Each pipeline asked TFDS for its block's records only.
    assert read == [f"train[{3 * i}:{3 * i + 3}]" for i in range(PIPELINES)]
    assert sorted(seen) == sorted(canonical)


def test_tfds_sub_split_of_joined_and_sliced_splits(tiny_tfds):
    source = registry.get_dataset("tiny_images", data_dir=tiny_tfds)
    sub = source._sub_split  # pylint: disable=protected-access
    assert sub("train[2:10]", 1, 4) == "train[3:6]"
    assert sub("train+test", 10, 14) == "train[10:12]+test[0:2]"
    ids = [1, 5, 13]  # across the join
    picked = [int(y) for _, y in source.load("train+test", example_ids=ids)]
    every = [int(y) for _, y in source.load("train+test")]
    assert picked == [every[i] for i in ids]


def test_tfds_example_ids_select_positions(tiny_tfds):
    """(Was under TFDS's mock, which ignores the range `load` now reads.)"""
    source = registry.get_dataset("tiny_images", data_dir=tiny_tfds)
    labels = source.load_labels("train")
    ids = [1, 4, 9]
    picked = [(x.numpy(), int(y)) for x, y in source.load("train", example_ids=ids)]
    images = [x.numpy() for x, _ in source.load("train")]
    assert [y for _, y in picked] == labels[ids].tolist()
    for (image, _), i in zip(picked, ids):
        np.testing.assert_array_equal(image, images[i])
