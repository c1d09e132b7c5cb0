"""kNN and linear-probe protocols: hand-worked values, replica equivalence, and the
pretrained encoder beating a random one on digits (kNN monitor, --mode=linear_probe,
scripts/transfer_table.py)."""
import dataclasses
import math
import os
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf import embed, experiment, knn, probe, transfer
from simclr_tf.config import Config, ConfigError
from simclr_tf.data import registry
from simclr_tf.models import SimCLRModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def test_linear_probe_hand_worked_accuracy():
    rng = np.random.RandomState(0)
    centres = np.array([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]])
    train_y = np.repeat(np.arange(3), 20)
    train_x = centres[train_y] + 0.3 * rng.randn(60, 3)
    # Test points at the centres: the probe predicts 0, 1, 2, 0; the last label is
    # deliberately wrong, so the top-1 is exactly 3/4.
    test_x, test_y = centres[[0, 1, 2, 0]], np.array([0, 1, 2, 1])
    result = probe.linear_probe(train_x, train_y, test_x, test_y, c_grid=(0.1, 1.0))
    assert result["top_1_accuracy"] == 0.75
    assert result["validation_accuracy"] == 1.0
    assert result["c"] == 0.1  # ties go to the stronger regularisation


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
        model = SimCLRModel(depth=18, width_multiplier=0.125, stem="cifar",
                            num_proj_layers=2, proj_out_dim=16)
        model.build((None, 16, 16, 3))
    return model


def test_knn_monitor_two_replicas_equal_one():
    source = registry.get_dataset("digits")
    results = {}
    for name, strategy in (("one", tf.distribute.get_strategy()),
                           ("two", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
        # An odd batch: replicas get uneven shares and the last batch is partial.
        monitor = knn.KnnMonitor(strategy, _tiny_model(strategy), source,
                                 bank_split="train", query_split="test", image_size=16,
                                 batch_size=77, k=20, max_bank=300, max_queries=101)
        results[name] = monitor.evaluate()
    assert results["one"]["bank_size"] == results["two"]["bank_size"] == 300
    assert results["one"]["num_queries"] == results["two"]["num_queries"] == 101
    assert results["one"]["top_1_accuracy"] == results["two"]["top_1_accuracy"]
    assert results["one"]["seconds"] > 0


@pytest.mark.slow
def test_pretrained_beats_random_under_knn_and_linear_probe(tmp_path):
    """80 steps of the quick-start recipe (16 px, width 0.25, batch 256); the probes
    compare on 700 training examples to keep the L-BFGS fits short."""
    model_dir = str(tmp_path / "run")
    cfg = Config.from_dict(dict(
        dataset="digits", train_split="train", eval_split="test", image_size=16,
        stem="cifar", resnet_depth=18, width_multiplier=0.25, num_proj_layers=2,
        proj_out_dim=64, train_batch_size=256, eval_batch_size=512, use_blur=False,
        color_jitter_strength=0.5, temperature=0.2, learning_rate=2.0,
        weight_decay=1e-4, warmup_epochs=2, train_steps=80, checkpoint_steps=80,
        lineareval_while_pretraining=False, knn_eval_split="test", knn_eval_every=50,
        model_dir=model_dir, mode="train")).validate()
    start = time.perf_counter()
    trained = experiment.run(cfg)
    print(f"pretraining: {time.perf_counter() - start:.1f} s")
    # kNN at step 50 (a chunk boundary added for it) and at the end.
    assert trained["global_step"] == 80 and trained["knn/global_step"] == 80
    assert trained["knn/top_1_accuracy"] > 0.7
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-80")
    assert not tf.io.gfile.exists(os.path.join(model_dir, "ckpt-50.index"))
    tags = {}
    for event_file in tf.io.gfile.glob(os.path.join(model_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    assert tags["knn/top_1_accuracy"] == [50, 80] and "knn/seconds" in tags

    source = registry.get_dataset("digits")
    pretrained, _ = experiment.load_trained_encoder(cfg, tf.distribute.get_strategy(), {})
    keras.utils.set_random_seed(cfg.seed + 1)
    random_init = experiment.build_model(cfg, tf.distribute.get_strategy(), None)
    rows = {name: transfer.evaluate_protocols(model, source, image_size=16,
                                              train_split="train[:700]", c_grid=(0.1, 1.0))
            for name, model in (("pretrained", pretrained), ("random", random_init))}
    print({name: (row["knn_top_1"], row["linear_probe_top_1"], row["seconds"])
           for name, row in rows.items()})
    assert rows["pretrained"]["knn_top_1"] > rows["random"]["knn_top_1"] + 0.1
    assert rows["pretrained"]["linear_probe_top_1"] > rows["random"]["linear_probe_top_1"]
    assert rows["pretrained"]["linear_probe_top_1"] > 0.9

    # The transfer table of the run (our checkpoint) and of its SavedModel export agree.
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import transfer_table  # pylint: disable=import-outside-toplevel
    out = str(tmp_path / "table.md")
    common = ["--datasets", "digits", "--splits", "digits=train[:600]:test",
              "--probe_c", "0.1,1"]
    table_rows = transfer_table.main([model_dir, "--out", out] + common)
    export_rows = transfer_table.main([os.path.join(model_dir, "saved_model", "80"),
                                       "--out", str(tmp_path / "export.md")] + common)
    assert table_rows[0]["num_train"] == 600
    assert table_rows[0]["knn_top_1"] == pytest.approx(export_rows[0]["knn_top_1"], abs=0.01)
    text = open(out).read()
    assert "| digits | train[:600] | test | 600 | 360 | 128 |" in text
    assert open(str(tmp_path / "table.csv")).read().startswith("dataset,train_split")


def test_linear_probe_mode_caches_features(tmp_path):
    model_dir = str(tmp_path / "run")
    cfg = Config.from_dict(dict(
        dataset="digits", train_split="train[:300]", eval_split="test[:100]",
        image_size=16, stem="cifar", resnet_depth=18, width_multiplier=0.125,
        num_proj_layers=2, proj_out_dim=16, eval_batch_size=128, model_dir=model_dir,
        mode="linear_probe", knn_k=10)).validate()
    model = experiment.build_model(cfg, tf.distribute.get_strategy(), None)
    from simclr_tf import checkpoints  # pylint: disable=import-outside-toplevel
    checkpoints.CheckpointState(model_dir, model).save(7)
    first = experiment.run(cfg)
    cached = os.path.join(model_dir, "features", "digits", "train__300.npz")
    assert os.path.exists(cached), os.listdir(os.path.join(model_dir, "features", "digits"))
    assert first["linear_probe/num_train"] == 300 and first["linear_probe/num_test"] == 100
    assert first["linear_probe/checkpoint"].endswith("ckpt-7")
    # Second run: from the cache, same numbers; a rewritten cache key recomputes.
    mtime = os.path.getmtime(cached)
    second = experiment.run(cfg)
    assert os.path.getmtime(cached) == mtime
    assert second == first
    with np.load(cached) as stored:
        features = {k: stored[k] for k in stored.files if k != "_key"}
    _, from_cache = embed.cached_features(cached, {"other": 1}, lambda: features)
    assert not from_cache
    _, from_cache = embed.cached_features(cached, {"other": 1}, lambda: features)
    assert from_cache
    with pytest.raises(ConfigError, match="--train_split.*no labels"):
        experiment.run(dataclasses.replace(cfg, dataset="folder:" + str(_unlabelled(tmp_path)),
                                           train_split="train", eval_split="train"))


def _unlabelled(tmp_path):
    folder = tmp_path / "flat"
    folder.mkdir()
    for i in range(2):
        tf.io.write_file(str(folder / f"{i}.png"),
                         tf.io.encode_png(tf.zeros([8, 8, 3], tf.uint8)))
    return folder
