"""The default tier's end-to-end tests: one tiny pretraining run per session (the
`tiny_run` fixture: 4 steps of ResNet-18 x0.125 on digits, checkpoints, export) and
every mode that starts from a finished run: eval, export, embed, linear_probe and
fine-tuning. Each number is checked against the model restored from the run's own
checkpoint, computed here without the mode's code."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.run import experiment, preflight
from simclr_tf.weights import checkpoints
from simclr_tf.run.modes import parts
from simclr_tf.evaluation import features

from helpers import run_fixtures
from helpers.protocols import check_protocols
from helpers.run_fixtures import TinyRun


def _restored(cfg, prefix, num_classes=10):
    model = parts.build_model(cfg, tf.distribute.get_strategy(), num_classes)
    checkpoints.restore_model(model, prefix)
    return model


def _eval_batches(cfg, split="test", batch_size=128):
    source = preflight.load_source(cfg)
    return features.eval_dataset(source, split, image_size=cfg.image_size,
                                 batch_size=batch_size)


def _files(directory):
    return {name: open(os.path.join(directory, name), "rb").read()
            for name in ("flags.json", "result.json")}


def test_the_run_records_its_steps_checkpoints_and_export(tiny_run):
    result, run_dir = tiny_run.result, tiny_run.directory
    assert result["global_step"] == TinyRun.STEPS
    assert result["train/initialized_from"] == "random"
    for name in ("total_loss", "contrast_loss", "contrast_acc", "contrast_entropy",
                 "supervised_loss", "supervised_acc", "weight_decay", "learning_rate",
                 "examples_per_sec"):
        assert np.isfinite(result[f"train/{name}"]), name
    assert tf.train.latest_checkpoint(run_dir).endswith(f"ckpt-{TinyRun.STEPS}")
    assert os.path.exists(os.path.join(run_dir, "ckpt-2.index"))
    flags_json = json.load(open(os.path.join(run_dir, "flags.json")))
    assert flags_json["train_steps"] == TinyRun.STEPS
    assert flags_json["resolved_stem"] == "cifar"
    recorded = json.load(open(os.path.join(run_dir, "result.json")))
    assert recorded["global_step"] == 4
    # What the run read (issue 44, item 3): the dataset, its classes and splits.
    assert recorded["data"] == dict(name="digits", num_classes=10,
                                    split_sizes=dict(train=1437, test=360))
    assert result["saved_model"] == os.path.join(run_dir, "saved_model", "4")

    # The export serves the checkpoint's model: float images in, its outputs out.
    model = _restored(tiny_run.config, tf.train.latest_checkpoint(run_dir))
    images = next(iter(_eval_batches(tiny_run.config, batch_size=8)))["image"]
    expected = model(images, training=False)
    served = tf.saved_model.load(result["saved_model"])
    assert {"serving_default", "serving_images"} <= set(served.signatures)
    np.testing.assert_allclose(served(images)["logits_sup"], expected["logits_sup"],
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        served.signatures["serving_images"](images=images)["embedding"],
        expected[features.H], rtol=1e-4, atol=1e-5)  # 16 px in: resized to itself
    # What a client sends: PNG bytes, decoded and preprocessed in the graph.
    pixels = tf.cast(tf.round(images * 255), tf.uint8)
    encoded = tf.stack([tf.io.encode_png(p) for p in pixels])
    np.testing.assert_allclose(
        served.signatures["serving_default"](image_bytes=encoded)["logits"],
        model(tf.cast(pixels, tf.float32) / 255, training=False)["logits_sup"],
        rtol=1e-4, atol=1e-5)


def test_eval_mode_equals_the_checkpoints_logits_counted_here(tiny_run, tmp_path):
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval")
    record = _files(cfg.model_dir)
    result = experiment.run(cfg)
    assert result["global_step"] == 4 and result["eval/num_examples"] == 360
    model = _restored(cfg, os.path.join(cfg.model_dir, "ckpt-4"))
    top1 = top5 = 0
    for batch in _eval_batches(cfg):
        logits = model(batch["image"], training=False)["logits_sup"].numpy()
        labels = batch["label"].numpy()
        top1 += int(np.sum(np.argmax(logits, 1) == labels))
        top5 += int(np.sum(np.any(np.argsort(-logits, 1)[:, :5] == labels[:, None], 1)))
    assert result["eval/label_top_1_accuracy"] == pytest.approx(top1 / 360, abs=1e-6)
    assert result["eval/label_top_5_accuracy"] == pytest.approx(top5 / 360, abs=1e-6)
    assert result["eval/regularization_loss"] > 0  # LARS: the supervised head's decay
    # A reader: the training record stays; the mode writes its own.
    assert _files(cfg.model_dir) == record
    assert json.load(open(os.path.join(cfg.model_dir, "result.eval.json")))[
        "eval/num_examples"] == 360
    # How it was measured: the 360 test examples at ckpt-4, the checkpoint of step 4.
    for saved in (result, json.load(open(os.path.join(cfg.model_dir, "result_4.json")))):
        protocols = check_protocols(saved)
        assert sorted(protocols) == ["eval/label_top_1_accuracy",
                                     "eval/label_top_5_accuracy"]
        for k, protocol in zip((1, 5), protocols.values()):
            assert (protocol["evaluator"], protocol["split"], protocol["examples"],
                    protocol["split_examples"], protocol["top_k"]) == (
                        "supervised", "test", 360, 360, k)
            assert protocol["checkpoint"] == dict(path="ckpt-4", step=4)
            assert protocol["preprocessing"]["center_crop"] is False


def test_export_mode_writes_the_latest_checkpoint_and_keeps_the_record(tiny_run, tmp_path):
    cfg = tiny_run.copy_to(tmp_path / "run", mode="export", eval_batch_size=64)
    tf.io.gfile.rmtree(os.path.join(cfg.model_dir, "saved_model"))
    record = _files(cfg.model_dir)
    result = experiment.run(cfg)
    assert result["saved_model"] == os.path.join(cfg.model_dir, "saved_model", "4")
    assert os.path.exists(os.path.join(result["saved_model"], "saved_model.pb"))
    assert _files(cfg.model_dir) == record
    assert json.load(open(os.path.join(cfg.model_dir, "flags.export.json")))[
        "eval_batch_size"] == 64
    assert json.load(open(os.path.join(cfg.model_dir, "result.export.json")))[
        "saved_model"] == result["saved_model"]


@pytest.mark.large  # 14 s; with its second export 66 s beside the full suite (3 jobs, 2 cores)
def test_export_of_an_earlier_checkpoint_keeps_the_newer_export(tiny_run, tmp_path,
                                                                capsys):
    """ckpt-4 unreadable: --mode=export writes ckpt-2's model and leaves
    saved_model/4, the last intact copy of step 4 (keep_hub_module_max=1). Run again,
    it replaces saved_model/2 and says so."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="export")
    data = os.path.join(cfg.model_dir, "ckpt-4.data-00000-of-00001")
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    result = experiment.run(cfg)
    base = os.path.join(cfg.model_dir, "saved_model")
    assert result["saved_model"] == os.path.join(base, "2")
    assert sorted(os.listdir(base)) == ["2", "4"]
    assert os.path.exists(os.path.join(base, "4", "saved_model.pb"))
    printed = capsys.readouterr().out
    assert f"to {base}/2\n" in printed and "replacing" not in printed
    experiment.run(cfg)
    assert f"to {base}/2 (replacing the export of the same checkpoint)\n" in (
        capsys.readouterr().out)
    assert sorted(os.listdir(base)) == ["2", "4"]


def test_embed_mode_writes_the_checkpoints_h_for_every_example(tiny_run, tmp_path):
    cfg = tiny_run.copy_to(tmp_path / "run", mode="embed", embed_projector_size=0)
    result = experiment.run(cfg)
    assert result["embed/num_examples"] == 360
    assert result["embed/output"] == os.path.join(cfg.model_dir, "embeddings", "test.npz")
    model = _restored(cfg, os.path.join(cfg.model_dir, "ckpt-4"), num_classes=None)
    batch = next(iter(_eval_batches(cfg, batch_size=16)))
    with np.load(result["embed/output"]) as stored:
        assert list(stored["ids"][:16]) == list(batch["id"].numpy())
        assert list(stored["labels"][:16]) == list(batch["label"].numpy())
        np.testing.assert_allclose(stored["h"][:16],
                                   model(batch["image"], training=False)[features.H],
                                   atol=1e-5)


def test_linear_probe_mode_on_the_run(tiny_run, tmp_path):
    cfg = tiny_run.copy_to(tmp_path / "run", mode="linear_probe", train_split="train[:600]",
                           eval_split="test[:200]")
    result = experiment.run(cfg)
    assert result["linear_probe/checkpoint"].endswith("ckpt-4")
    assert result["linear_probe/num_train"] == 600
    assert result["linear_probe/num_test"] == 200
    # Counts over the 200 test examples, far above chance (0.1) on digits (measured
    # 0.79 and 0.46 on the full splits: kNN with k=200 of 10 classes is the weaker).
    for name, least in (("linear_probe/top_1_accuracy", 0.5), ("knn/top_1_accuracy", 0.25)):
        assert least < result[name] <= 1.0, (name, result[name])
        assert result[name] * 200 == pytest.approx(round(result[name] * 200), abs=1e-6)
    assert os.listdir(os.path.join(cfg.model_dir, "features", "digits"))
    # How each was measured: the probe's C, chosen on a held-out fifth of the 600.
    protocols = check_protocols(result)
    assert sorted(protocols) == ["knn/top_1_accuracy", "linear_probe/top_1_accuracy",
                                 "linear_probe/validation_accuracy"]
    probe = protocols["linear_probe/top_1_accuracy"]
    assert (probe["split"], probe["examples"], probe["split_examples"]) == (
        "test[:200]", 200, 200)
    assert probe["train"] == dict(split="train[:600]", examples=600, split_examples=600)
    assert probe["checkpoint"] == dict(path="ckpt-4", step=4)
    chosen = probe["regularization"]
    assert chosen["c"] == result["linear_probe/c"] and chosen["c"] in chosen["c_grid"]
    assert chosen["validation_accuracy"] == result["linear_probe/validation_accuracy"]
    assert (chosen["validation_fraction"], chosen["validation_examples"]) == (0.2, 120)
    held_out = protocols["linear_probe/validation_accuracy"]
    assert (held_out["split"], held_out["examples"]) == ("train[:600]", 120)
    knn = protocols["knn/top_1_accuracy"]
    assert (knn["examples"], knn["bank"]["examples"], knn["k"]) == (200, 600, 200)


def test_a_fine_tune_from_the_run_starts_from_its_online_head(tiny_run, tmp_path):
    """A training checkpoint saves the model's trainable variables under the
    optimizer's path (model and optimizer together): read through the object graph,
    the online head is found and, fitting, loaded without --zero_init_logits_layer
    (read by key prefix it was missed, and the head started random)."""
    from simclr_tf.run.modes import train as modes_train  # pylint: disable=import-outside-toplevel
    prefix = os.path.join(tiny_run.directory, "ckpt-4")
    assert sorted(checkpoints.object_variable_shapes(prefix, "model", "supervised_head")
                  .values()) == [(10,), (run_fixtures.H_DIM, 10)]
    cfg = TinyRun.config_for(str(tmp_path / "finetune"), train_mode="finetune",
                             checkpoint=tiny_run.directory)
    model = parts.build_model(cfg, tf.distribute.get_strategy(), 10)

    class NoResume:
        def recover(self):
            return None

    modes_train.initialize(cfg, model, NoResume())
    pretrained = _restored(tiny_run.config, prefix)
    for a, b in zip(pretrained.supervised_head.weights, model.supervised_head.weights):
        np.testing.assert_array_equal(b.numpy(), a.numpy())
    # A head on the first projection layer fits by shape (the hidden layers are as
    # wide as h) but is not the online head's classifier: not loaded.
    other = TinyRun.config_for(str(tmp_path / "other"), train_mode="finetune",
                               checkpoint=tiny_run.directory, ft_proj_selector=1)
    model = parts.build_model(other, tf.distribute.get_strategy(), 10)
    modes_train.initialize(other, model, NoResume())
    assert not np.array_equal(model.supervised_head.weights[0].numpy(),
                              pretrained.supervised_head.weights[0].numpy())


def test_the_run_is_a_teacher(tiny_run):
    """Its online head makes it a teacher: the classes are read from the training
    checkpoint through the object graph, the architecture from its flags.json."""
    from simclr_tf.weights import teacher  # pylint: disable=import-outside-toplevel
    info = teacher.inspect_teacher(tiny_run.directory)
    assert (info.num_classes, info.image_size) == (10, 16)
    assert info.model_kwargs == tiny_run.config.model_kwargs(10)


def test_fine_tuning_from_the_run_keeps_its_frozen_encoder(tiny_run, tmp_path,
                                                          skip_final_export):
    cfg = TinyRun.config_for(str(tmp_path / "finetune"), train_mode="finetune",
                             label_fraction=0.1, train_steps=2, fine_tune_after_block=4,
                             checkpoint=tiny_run.directory, zero_init_logits_layer=True)
    result = experiment.run(cfg)
    assert result["global_step"] == 2
    assert result["train/initialized_from"] == os.path.join(tiny_run.directory, "ckpt-4")
    ids = open(os.path.join(cfg.model_dir, "label_subset_ids.txt")).read().split("\n")
    assert len([i for i in ids if i and not i.startswith("#")]) == 144  # 10% of 1437
    pretrained = _restored(tiny_run.config, os.path.join(tiny_run.directory, "ckpt-4"))
    tuned = _restored(cfg, tf.train.latest_checkpoint(cfg.model_dir))
    # Every encoder variable bit-equal, BN moving statistics included: the frozen
    # encoder ran in inference mode (the authors' code updates its statistics).
    assert [a.path for a in pretrained.encoder.weights] == [
        b.path for b in tuned.encoder.weights]
    assert len([a for a in pretrained.encoder.weights if "moving_" in a.path]) == 4  # 2 BNs
    changed = [a.path for a, b in zip(pretrained.encoder.weights, tuned.encoder.weights)
               if not np.array_equal(a.numpy(), b.numpy())]
    assert not changed, changed
    head = [(a.numpy(), b.numpy()) for a, b in zip(pretrained.supervised_head.weights,
                                                   tuned.supervised_head.weights)]
    assert any(not np.array_equal(a, b) for a, b in head)  # the head did train


def test_a_rerun_or_a_failed_extension_keeps_the_training_record(tiny_run, tmp_path,
                                                                  monkeypatch,
                                                                  skip_final_export):
    """Rerunning the finished command (no step left to train) keeps result.json's
    train/* metrics; an extension that fails leaves the previous result readable."""
    cfg = tiny_run.copy_to(tmp_path / "run", reevaluate=True)  # else nothing runs
    path = os.path.join(cfg.model_dir, "result.json")
    before = json.load(open(path))
    experiment.run(cfg)
    after = json.load(open(path))
    assert after["global_step"] == 4
    assert after["train/initialized_from"].startswith("resumed")  # the rerun's own
    metrics = [k for k in before if k.startswith("train/") and "initialized" not in k]
    assert len(metrics) > 5 and {k: after[k] for k in metrics} == {
        k: before[k] for k in metrics}
    from simclr_tf.run.modes import train  # pylint: disable=import-outside-toplevel

    def fails(*args):
        raise RuntimeError("the machine went away (simulated)")

    monkeypatch.setattr(train, "train", fails)
    with pytest.raises(RuntimeError, match="simulated"):
        experiment.run(tiny_run.config_for(cfg.model_dir, train_steps=6))
    assert json.load(open(path)) == after


def test_changed_flags_on_a_run_are_refused_or_recorded(tiny_run, tmp_path,
                                                         skip_final_export):
    """A pretraining run is not resumed as a fine-tune: refused before anything is
    built (its export stays); with --allow_changed_flags the change is in the
    history and flags.json has the new flags, with the first checkpoint they write
    (issue 34, item 6)."""
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    from simclr_tf.config import ConfigError  # pylint: disable=import-outside-toplevel
    cfg = tiny_run.copy_to(tmp_path / "run", train_mode="finetune")
    with pytest.raises(ConfigError, match="'pretrain' recorded, 'finetune' given"):
        experiment.run(cfg)
    assert os.listdir(os.path.join(cfg.model_dir, "saved_model")) == ["4"]
    assert json.load(open(os.path.join(cfg.model_dir, "flags.json")))[
        "train_mode"] == "pretrain"
    experiment.run(tiny_run.config_for(cfg.model_dir, train_mode="finetune",
                                       allow_changed_flags=True, train_steps=5))
    history = records.read_json(records.history_path(cfg.model_dir))
    assert history[-1]["changed"] == {"train_mode": dict(recorded="pretrain",
                                                         given="finetune"),
                                      "train_steps": dict(recorded=4, given=5)}
    assert history[-1]["allow_changed_flags"] is True
    assert json.load(open(os.path.join(cfg.model_dir, "flags.json")))[
        "train_mode"] == "finetune"


def test_a_finished_run_asked_again_prints_what_it_recorded(tiny_run, tmp_path,
                                                             monkeypatch, capsys):
    """Issue 33, 4: the same training command on a finished run whose result.json
    holds, at its last step, what the command measures (here train_then_eval's eval
    and both final probes) returns the recorded numbers and builds, trains and
    measures nothing; --reevaluate, another eval split, an unrecorded probe or a
    longer run do run."""
    from simclr_tf.run.modes import evaluate, linear_probe, train  # pylint: disable=import-outside-toplevel
    cfg = tiny_run.copy_to(tmp_path / "run", mode="train_then_eval",
                           final_linear_probe=True)
    path = os.path.join(cfg.model_dir, "result.json")
    recorded = json.load(open(path))
    step = dict(path="ckpt-4", step=4)
    recorded.update({
        "eval/label_top_1_accuracy": 0.25, "linear_probe/pretrained": 0.5,
        "linear_probe/random_init": 0.125,
        "protocol/eval/label_top_1_accuracy": dict(split="test", batches=None,
                                                   checkpoint=step),
        "protocol/linear_probe/pretrained": dict(split="test", train=dict(split="train"),
                                                 checkpoint=step),
        "protocol/linear_probe/random_init": dict(split="test", train=dict(split="train"),
                                                  checkpoint=dict(path=None, step=0))})
    with open(path, "w") as f:
        json.dump(recorded, f)
    ran = []
    for module, name in ((train, "train"), (evaluate, "evaluate"),
                         (linear_probe, "final_linear_probe")):
        monkeypatch.setattr(module, name, lambda *args, name=name, **kwargs: (
            ran.append(name) or {}))
    monkeypatch.setattr(parts, "build_model", lambda *args, **kwargs: ran.append("build"))

    capsys.readouterr()
    result = experiment.run(cfg)
    assert ran == []
    assert {name: result[name] for name in ("global_step", "eval/label_top_1_accuracy",
                                            "linear_probe/pretrained",
                                            "linear_probe/random_init")} == {
        "global_step": 4, "eval/label_top_1_accuracy": 0.25,
        "linear_probe/pretrained": 0.5, "linear_probe/random_init": 0.125}
    shown = capsys.readouterr().out
    assert "0.2500" in shown and "0.5000" in shown and "0.1250" in shown
    assert json.load(open(path)) == recorded  # nothing written

    without_probe = dict(recorded)
    del without_probe["linear_probe/random_init"]
    flags_json = open(os.path.join(cfg.model_dir, "flags.json")).read()
    for case, overrides in (("--reevaluate", dict(reevaluate=True)),
                            ("another split", dict(eval_split="test[:50%]")),
                            ("a longer run", dict(train_steps=6)),
                            ("a probe not recorded", dict())):
        with open(path, "w") as f:
            json.dump(without_probe if case == "a probe not recorded" else recorded, f)
        with open(os.path.join(cfg.model_dir, "flags.json"), "w") as f:
            f.write(flags_json)  # as the first run left it (each run writes its own)
        ran.clear()
        experiment.run(tiny_run.config_for(cfg.model_dir, mode="train_then_eval",
                                           final_linear_probe=True, **overrides))
        assert ran == ["train", "evaluate", "final_linear_probe"], case


@pytest.mark.large  # 25 s
def test_the_quick_starts_command_again_measures_nothing(tiny_run, tmp_path, monkeypatch,
                                                         skip_final_export):
    """The real records: train_then_eval with --final_linear_probe on the finished
    run measures its eval and probes once; the same command again returns those
    numbers without building a model."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="train_then_eval",
                           final_linear_probe=True)
    first = experiment.run(cfg)

    def fails(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(parts, "build_model", fails)
    again = experiment.run(cfg)
    names = ("global_step", "eval/label_top_1_accuracy", "linear_probe/pretrained",
             "linear_probe/random_init")
    assert {name: again[name] for name in names} == {name: first[name] for name in names}
