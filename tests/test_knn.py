"""Weighted kNN: hand-worked votes and accuracies, flag validation, and the kNN
monitor equal under 1 and 2 replicas."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.config import Config, ConfigError
from simclr_tf.data import registry
from simclr_tf.evaluation import knn
from simclr_tf.models import SimCLRModel

# Bank on the plane. Cosines with the query (1, 0): 1, 0, 1/sqrt(2), -1.
BANK = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 3.0], [-2.0, 0.0]], np.float32)
BANK_LABELS = np.array([0, 1, 1, 0])
QUERY = np.array([[5.0, 0.0]], np.float32)


def test_knn_scores_are_the_hand_computed_votes():
    # k=2: neighbours 0 (cos 1, class 0) and 2 (cos 1/sqrt2, class 1).
    scores = knn.knn_scores(BANK, BANK_LABELS, QUERY, k=2, temperature=1.0)
    np.testing.assert_allclose(scores, [[math.e, math.exp(1 / math.sqrt(2))]], rtol=1e-6)
    assert knn.knn_predict(BANK, BANK_LABELS, QUERY, k=2, temperature=1.0) == [0]
    # k=3 adds neighbour 1 (cos 0, class 1): e^0.707 + e^0 = 3.03 > e = 2.72.
    scores = knn.knn_scores(BANK, BANK_LABELS, QUERY, k=3, temperature=1.0)
    np.testing.assert_allclose(scores, [[math.e, math.exp(1 / math.sqrt(2)) + 1]],
                               rtol=1e-6)
    assert knn.knn_predict(BANK, BANK_LABELS, QUERY, k=3, temperature=1.0) == [1]
    # A low temperature lets the closest neighbour win: e^10 > e^7.07 + e^0.
    assert knn.knn_predict(BANK, BANK_LABELS, QUERY, k=3, temperature=0.1) == [0]
    # k larger than the bank uses the whole bank (class 0 gets e^1 + e^-1).
    scores = knn.knn_scores(BANK, BANK_LABELS, QUERY, k=200, temperature=1.0)
    np.testing.assert_allclose(
        scores, [[math.e + math.exp(-1), math.exp(1 / math.sqrt(2)) + 1]], rtol=1e-6)


def test_knn_accuracy_hand_worked_and_invariant_to_scale_and_chunks():
    queries = np.array([[5.0, 0.0], [0.0, 2.0], [1.0, 1.2], [-1.0, 0.1]], np.float32)
    # k=1 predictions: bank row 0 (class 0), row 1 (1), row 2 (1), row 3 (0).
    labels = np.array([0, 1, 0, 0])  # the third is "wrong": accuracy 3/4
    assert knn.knn_accuracy(BANK, BANK_LABELS, queries, labels, k=1) == 0.75
    # Cosine similarity: scaling rows changes nothing; chunking changes nothing;
    # unlabelled queries (-1) are not counted.
    assert knn.knn_accuracy(BANK * [[7.0], [0.1], [2.0], [5.0]], BANK_LABELS,
                            queries * 3.0, labels, k=1, chunk_size=1) == 0.75
    assert knn.knn_accuracy(BANK, BANK_LABELS, queries, [0, 1, -1, 0], k=1) == 1.0
    with pytest.raises(ValueError, match="k must be"):
        knn.knn_accuracy(BANK, BANK_LABELS, queries, labels, k=0)
    with pytest.raises(ValueError, match=">= 0"):
        knn.knn_accuracy(BANK, [0, 1, -1, 0], queries, labels)


def test_knn_config_flags_are_validated():
    base = dict(dataset="digits", model_dir="/tmp/x")
    for flag, value in (("knn_k", 0), ("knn_temperature", 0.0), ("knn_eval_every", -1),
                        ("knn_max_bank", -5)):
        with pytest.raises(ConfigError, match=f"--{flag}"):
            Config.from_dict(dict(base, **{flag: value})).validate()
    with pytest.raises(ConfigError, match="--embed_output"):
        Config.from_dict(dict(base, mode="embed", embed_output="x.csv")).validate()
    Config.from_dict(dict(dataset="digits", mode="linear_probe", checkpoint="/c")).validate()


def _tiny_model(strategy):
    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = SimCLRModel(encoder_options=dict(depth=18, width_multiplier=0.125, stem="cifar"),
                            num_proj_layers=2, proj_out_dim=16)
        model.build((None, 16, 16, 3))
    return model


@pytest.mark.large  # 9 s
def test_knn_monitor_two_replicas_equal_one():
    source = registry.get_dataset("digits")
    results = {}
    for name, strategy in (("one", tf.distribute.get_strategy()),
                           ("two", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
        # An odd batch: replicas get uneven shares and the last batch is partial.
        monitor = knn.KnnEval(strategy, source=source, bank_split="train",
                              query_split="test", image_size=16, batch_size=77, k=20,
                              max_bank=300, max_queries=101)
        assert monitor.bank_size == 300 and monitor.num_queries == 101
        results[name] = monitor.run(_tiny_model(strategy), step=3)
        line = monitor.describe(results[name], step=3)  # the progress line
        assert f"; RankMe {results[name]['knn/rankme']:.1f} of 64 dims;" in line, line
    assert results["one"]["knn/top_1_accuracy"] == results["two"]["knn/top_1_accuracy"]
    assert results["one"]["knn/rankme"] == pytest.approx(results["two"]["knn/rankme"],
                                                         rel=1e-5)
    assert results["one"]["knn/global_step"] == 3
    assert results["one"]["knn/seconds"] > 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(k=0), "Received: k=0"), (dict(temperature=0.0), "Received: temperature="),
    (dict(batch_size=0), "Received: batch_size=0"),
    (dict(max_bank=-1), "Received: max_bank=-1"),
    (dict(strategy=None), "Received: strategy=None")])
def test_knn_monitor_checks_its_arguments(kwargs, match):
    kwargs = dict(dict(strategy=tf.distribute.get_strategy()), **kwargs)
    with pytest.raises(ValueError, match=match):
        knn.KnnEval(kwargs.pop("strategy"), source=object(), bank_split="train",
                    query_split="test", image_size=16, **kwargs)
