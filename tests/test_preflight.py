"""simclr_tf.preflight: every check before a model exists, with no side effects."""
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf import experiment, preflight
from simclr_tf.config import Config, ConfigError

from helpers.run_fixtures import config


def _check(cfg, strategy=None):
    strategy = strategy or tf.distribute.get_strategy()
    return preflight.check(cfg, strategy, preflight.load_source(cfg))


def test_check_creates_and_writes_nothing(tmp_path):
    model_dir = tmp_path / "not" / "yet"
    context = _check(config(model_dir=str(model_dir), train_steps=1))
    assert context["num_train_examples"] == 1437 and context["num_classes"] == 10
    assert not (tmp_path / "not").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    _check(config(model_dir=str(existing), train_steps=1))
    assert os.listdir(existing) == []


def test_a_failing_check_leaves_no_record(tmp_path):
    model_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match="--model_dir"):
        experiment.run(config(model_dir=str(model_dir), mode="export"))
    assert not model_dir.exists()


def test_model_dir_under_a_file_is_refused(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match="--model_dir: .*is a file"):
        _check(config(model_dir=str(tmp_path / "a_file" / "run"), train_steps=1))


def test_grad_cache_chunk_must_divide_the_per_replica_batch(tmp_path):
    # 2 replicas x 16 images: a chunk of 32 divides the global batch of 32 but not the
    # 16 images of a replica (the check used to test the global batch and let it
    # through, to fail inside the train step).
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    cfg = config(model_dir=str(tmp_path), train_steps=1, grad_cache_chunk=32)
    with pytest.raises(ConfigError, match="--grad_cache_chunk: .*per-replica batch of 16 images"):
        _check(cfg, strategy)
    _check(config(model_dir=str(tmp_path), train_steps=1, grad_cache_chunk=8), strategy)
    _check(cfg)  # one replica holds all 32


def test_every_mode_flag_has_a_part_in_experiment():
    assert set(experiment.MODES) == set(Config.field_choices("mode"))


@pytest.mark.parametrize("overrides, flag", [
    (dict(train_split="train[:0]"), "train_split"),
    (dict(train_split="train[10:10]"), "train_split"),
    (dict(mode="train_then_eval", eval_split="test[:0%]"), "eval_split"),
    (dict(knn_eval_split="test[360:]"), "knn_eval_split"),
    (dict(knn_eval_split="test", knn_bank_split="train[:0]"), "knn_bank_split"),
    (dict(mode="linear_probe", train_split="train[:0]"), "train_split"),
    (dict(mode="embed", embed_split="train[:0]"), "embed_split"),
])
def test_a_split_without_examples_is_refused(overrides, flag, tmp_path):
    cfg = config(**dict(dict(model_dir=str(tmp_path), train_steps=1), **overrides))
    with pytest.raises(ConfigError, match="has no examples; choose a non-empty split") as info:
        _check(cfg)
    assert info.value.flag == flag


REFERENCE_MODEL = os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                               "reference", "official_r50_1x_sk0")


def _variables():
    return dict(
        w=tf.Variable(tf.random.normal([3, 3, 8, 16])), step=tf.Variable(7, dtype=tf.int64),
        mask=tf.Variable(tf.ones([77], tf.bool)), half=tf.Variable(tf.ones([3, 5], tf.float16)),
        empty=tf.Variable(tf.zeros([0, 4])),
        names=tf.Variable(np.array([b"abc", b"", b"x" * 300, b"ends\x00\x00"], dtype=object)),
        name=tf.Variable(b"scalar\x00"))


def _missing(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return preflight._missing_data_bytes(reader, tf.io.gfile.glob(prefix + ".data-*"))


def test_the_data_size_the_index_implies_is_exact(tmp_path):
    """Numeric tensors are raw bytes, strings varint lengths + 4-byte checksum + bytes,
    no padding: the sum equals the data files' size, sharded or not."""
    prefix = tf.train.Checkpoint(**_variables()).write(str(tmp_path / "one" / "c"))
    assert _missing(prefix) == 0
    sharded = tf.train.Checkpoint(**_variables()).write(
        str(tmp_path / "sharded" / "c"), options=tf.train.CheckpointOptions(
            experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(
                max_shard_size=1000)))
    assert len(glob.glob(sharded + ".data-*")) > 2 and _missing(sharded) == 0
    if os.path.isdir(REFERENCE_MODEL):  # the authors' R50, a TF1-era SavedModel
        assert _missing(os.path.join(REFERENCE_MODEL, "variables", "variables")) == 0


@pytest.mark.parametrize("cut", ["one byte", "half"])
def test_a_truncated_checkpoint_is_refused(cut, tmp_path):
    prefix = tf.train.Checkpoint(**_variables()).write(str(tmp_path / "c"))
    preflight._check_checkpoint_readable(prefix)
    data = glob.glob(prefix + ".data-*")[0]
    size = os.path.getsize(data)
    os.truncate(data, size - 1 if cut == "one byte" else size // 2)
    with pytest.raises(ConfigError, match="--checkpoint: .*truncated") as info:
        preflight._check_checkpoint_readable(prefix)
    assert "pass an intact checkpoint" in str(info.value)


def test_a_tfds_dataset_not_in_data_dir_is_a_dataset_error(tmp_path):
    cfg = config(dataset="cifar10", data_dir=str(tmp_path), model_dir=str(tmp_path / "run"),
                 train_steps=1)
    with pytest.raises(ConfigError, match="--dataset: TFDS dataset 'cifar10' is not "
                       "prepared in --data_dir=.*tfds build cifar10"):
        preflight.load_source(cfg)
