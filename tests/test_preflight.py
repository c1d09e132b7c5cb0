"""simclr_tf.preflight: every check before a model exists, with no side effects."""
import os

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
