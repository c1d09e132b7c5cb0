"""End to end on the offline 'digits' dataset through `simclr_tf.run.experiment.run`:
pretrain -> checkpoint -> resume -> fine-tune on 10% labels -> eval, and the checks
that need the dataset or the strategy, all before any model is built."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.run import experiment, preflight
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints
from simclr_tf.run.modes import parts
from simclr_tf.weights import export as simclr_export
from simclr_tf.config import ConfigError, rules
from simclr_tf.evaluation import features

from helpers import official_fixtures, official_layout
from simclr_tf.models import SimCLRModel
from helpers import run_fixtures
from helpers.protocols import check_protocols
from helpers.run_fixtures import config


def _encoder_weights(cfg, num_classes=10):
    """The encoder's variables in the latest checkpoint of cfg.model_dir, by path."""
    model = parts.build_model(cfg, tf.distribute.get_strategy(), num_classes)
    checkpoints.restore_model(model, tf.train.latest_checkpoint(cfg.model_dir))
    return {v.path: v.numpy() for v in model.encoder.weights}


@pytest.mark.extra_large  # 30 s from the tiny run (58 s when it trained its own)
def test_pretrain_resume_finetune_eval(tiny_run, tmp_path):
    # The pretraining to ckpt-4 is the session's tiny run (its records, checkpoints and
    # metrics: test_tiny_run::test_the_run_records_its_steps_checkpoints_and_export).
    pretrain_dir = str(tmp_path / "pretrain")
    tiny_run.copy_to(pretrain_dir)
    assert tf.train.latest_checkpoint(pretrain_dir).endswith("ckpt-4")
    # Resume: a longer target continues from step 4, never overshooting. No export
    # (the fine-tune from an export below starts from the tiny run's, saved_model/4)
    # nor kNN monitor (the tiny run's test).
    second = experiment.run(tiny_run.config_for(pretrain_dir, train_steps=5,
                                                mode="train_then_eval", export_format="none",
                                                knn_eval_split=None))
    assert second["global_step"] == 5 and second["eval/num_examples"] == 360
    assert 0.0 <= second["eval/label_top_1_accuracy"] <= second[
        "eval/label_top_5_accuracy"] <= 1.0
    assert second["eval/regularization_loss"] > 0  # LARS: the head's decay
    assert json.load(open(os.path.join(pretrain_dir, "result.json")))["global_step"] == 5
    assert os.path.exists(os.path.join(pretrain_dir, "result_5.json"))

    finetune_dir = str(tmp_path / "finetune")
    finetune = config(train_mode="finetune", label_fraction=0.1, train_steps=3,
                      checkpoint=pretrain_dir, model_dir=finetune_dir,
                      fine_tune_after_block=4, zero_init_logits_layer=True,
                      mode="train_then_eval")
    tuned = experiment.run(finetune)
    assert tuned["global_step"] == 3 and tuned["eval/num_examples"] == 360
    assert tuned["train/initialized_from"] == os.path.join(pretrain_dir, "ckpt-5")
    assert tuned["saved_model"] == os.path.join(finetune_dir, "saved_model", "3")
    ids = open(os.path.join(finetune_dir, "label_subset_ids.txt")).read().split("\n")
    assert len([i for i in ids if i and not i.startswith("#")]) == 144  # 10% of 1437
    # fine_tune_after_block=4: the encoder is the pretrained one, untouched.
    pretrained = _encoder_weights(config(model_dir=pretrain_dir))
    finetuned = _encoder_weights(finetune)
    assert pretrained.keys() == finetuned.keys()
    for key, value in finetuned.items():  # BN moving statistics included
        np.testing.assert_array_equal(value, pretrained[key], err_msg=key)
    fresh = parts.build_model(finetune, tf.distribute.get_strategy(), 10)
    assert any(not np.array_equal(v.numpy(), pretrained[v.path])
               for v in fresh.encoder.weights)  # the comparison is not vacuous

    # Serve the fine-tuned export in a fresh process: PNG bytes in, logits out, equal
    # to the in-memory fine-tuned model on the same images.
    model = parts.build_model(finetune, tf.distribute.get_strategy(), 10)
    checkpoints.restore_model(model, tf.train.latest_checkpoint(finetune_dir))
    source = preflight.load_source(finetune)
    # The eval pipeline's preprocessing, as in the export's graph.
    images = next(iter(features.eval_dataset(source, "test", image_size=finetune.image_size,
                                             batch_size=4)))["image"]
    raw = [tf.image.encode_png(tf.cast(tf.round(i * 255), tf.uint8)).numpy()
           for i in images]
    decoded = tf.stack([tf.image.decode_png(r, channels=3) for r in raw])
    expected = model(tf.image.resize(tf.cast(decoded, tf.float32) / 255.0, [16, 16],
                                     method="bicubic"), training=False)["logits_sup"]
    np.save(tmp_path / "bytes.npy", np.array(raw, dtype=object))
    script = (
        "import sys, numpy as np, tensorflow as tf\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "raw = np.load(sys.argv[2], allow_pickle=True)\n"
        "out = m.signatures['serving_default'](image_bytes=tf.constant(list(raw)))\n"
        "np.save(sys.argv[3], out['logits'].numpy())\n")
    subprocess.run([sys.executable, "-c", script, tuned["saved_model"],
                    str(tmp_path / "bytes.npy"), str(tmp_path / "served.npy")],
                   check=True, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "served.npy"), expected,
                               rtol=1e-4, atol=1e-5)

    # Fine-tuning can also start from a SavedModel directory (an export).
    export_dir = os.path.join(pretrain_dir, "saved_model", "4")
    from_export = experiment.run(config(
        train_mode="finetune", train_steps=1, checkpoint=export_dir,
        model_dir=str(tmp_path / "from_export"), mode="train", export_format="none"))
    assert from_export["global_step"] == 1
    assert from_export["train/initialized_from"].startswith(export_dir)


# Measured in the full suite at bffb33f: 34 s, 21 s, 50 s and 67 s (the last with
# gradient caching); about a third less since each trains its first segment once.
@pytest.mark.parametrize("variant", [
    # The pretraining path's proof on a real model (docs/testing.md).
    pytest.param(run_fixtures.RESNET, id="resnet", marks=pytest.mark.large),
    # Fine-tuning (one view, labels, the first stages frozen): the fine-tune path's
    # proof on a real model.
    pytest.param(dict(run_fixtures.RESNET, train_mode="finetune", fine_tune_after_block=1),
                 id="resnet_finetune", marks=pytest.mark.large),
    # Pretraining on two replicas (MirroredStrategy over two of the test CPUs), on the
    # tiny encoder: on the ResNet with four replicas it took 167 s in the full suite.
    pytest.param(dict(strategy="mirrored"), id="2_replicas", marks=pytest.mark.large),
    # Views drawn in the step (crops from the examples' seeds, blurs from the
    # step's): the subject is the views, on the tiny encoder. Gradient caching
    # keeps no state across steps (a chunk's seed is (seed, step, replica, chunk));
    # its chunks' views, alike in both passes, are test_grad_cache's.
    pytest.param(dict(augment_on="device", use_blur=True), id="device_views",
                 marks=pytest.mark.large)])
def test_resumed_run_reaches_the_same_weights_as_an_uninterrupted_one(tmp_path,
                                                                     monkeypatch, variant,
                                                                     skip_final_export):
    """Model, optimizer slots, step and data position (order and augmentations) are
    all restored: a run stopped after its first checkpoint (3 of 6 steps) and started
    again ends with the weights of a run that was never stopped. On the ResNet, for
    pretraining and fine-tuning; on the tiny encoder, on two replicas, and for views
    drawn on the device.

    The stopped run's directory is the uninterrupted run's, copied where an
    interruption stops it (`run_fixtures.run_copied_after_first_segment`: ckpt-3 and
    its records, no lock), so its first segment is trained once; the resumed run is a
    new `experiment.run` on that copy, and the two final checkpoints are compared
    tensor by tensor (the model's, BN statistics included, and the optimizer's)."""
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    if variant.get("strategy") == "mirrored":  # two of conftest's eight CPU devices
        from simclr_tf.run import distribute  # pylint: disable=import-outside-toplevel
        create = distribute.create_strategy
        monkeypatch.setattr(distribute, "create_strategy",
                            lambda name, **kwargs: create(name, **dict(kwargs, num_devices=2)))
    # One segment to the first checkpoint: run_steps' first call trains steps 1-3.
    common = dict(mode="train", checkpoint_steps=3, train_steps=6, train_batch_size=64,
                  train_split="train[:200]", log_every_steps=3, **variant)
    run_fixtures.run_copied_after_first_segment(
        monkeypatch, config(model_dir=straight, **common), resumed)
    assert tf.train.latest_checkpoint(resumed).endswith("ckpt-3")
    assert tf.train.latest_checkpoint(straight).endswith("ckpt-6")
    result = experiment.run(config(model_dir=resumed, **common))
    assert result["train/initialized_from"] == "resumed " + os.path.join(resumed, "ckpt-3")
    run_fixtures.assert_same_checkpoints(straight, resumed)


@pytest.mark.large  # 14 s: two runs on two replicas
def test_a_pretraining_then_a_fine_tune_under_mirrored_in_one_process(tmp_path, monkeypatch,
                                                                     skip_final_export):
    """A notebook's two stages under --strategy=mirrored: two strategies in one
    process, whose steps make different collectives. The fine-tune's first step
    failed ("Collective instance 169 expected type 2 and data_type 3 but got type 0
    and data_type 1": its labelled count met the pretraining's int32 gather at one
    key) until `distribute.create_strategy` numbered each strategy's collectives
    apart. No key shift of the test's own between the two runs, as in a user's
    process."""
    from simclr_tf.run import distribute  # pylint: disable=import-outside-toplevel
    create = distribute.create_strategy
    monkeypatch.setattr(distribute, "create_strategy",  # two of conftest's eight CPUs
                        lambda name, **kwargs: create(name, **dict(kwargs, num_devices=2)))
    common = dict(mode="train", strategy="mirrored", train_steps=2, train_batch_size=32,
                  train_split="train[:64]", checkpoint_steps=2)
    pretrained = str(tmp_path / "pretrain")
    experiment.run(config(model_dir=pretrained, **common))
    result = experiment.run(config(model_dir=str(tmp_path / "finetune"),
                                   train_mode="finetune", checkpoint=pretrained, **common))
    assert tf.train.latest_checkpoint(str(tmp_path / "finetune")).endswith("ckpt-2")
    assert result["global_step"] == 2 and np.isfinite(result["train/supervised_loss"])


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.large  # 8 s beside other jobs (27 s in the full suite when it trained a step)
def test_export_mode_writes_a_saved_model_of_the_latest_checkpoint(tiny_run, tmp_path,
                                                                    monkeypatch):
    # A copy of the session's tiny run (ckpt-2 and ckpt-4, its training records),
    # less the SavedModel its training wrote: the export mode writes it again.
    run_dir = str(tmp_path / "run")
    cfg = tiny_run.copy_to(run_dir, mode="export", eval_batch_size=64)
    shutil.rmtree(os.path.join(run_dir, "saved_model"))
    record = {name: _bytes(os.path.join(run_dir, name))
              for name in ("flags.json", "result.json")}
    assert json.loads(record["result.json"])["train/initialized_from"] == "random"
    result = experiment.run(cfg)
    assert result["saved_model"] == os.path.join(run_dir, "saved_model", "4")
    assert os.path.exists(os.path.join(result["saved_model"], "saved_model.pb"))
    # Every mode keeps its own record; the training record is never overwritten.
    assert {name: _bytes(os.path.join(run_dir, name)) for name in record} == record
    assert json.load(open(os.path.join(run_dir, "flags.export.json")))[
        "eval_batch_size"] == 64
    assert json.load(open(os.path.join(run_dir, "result.export.json")))[
        "saved_model"] == result["saved_model"]

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(simclr_export, "export_for_step", full_disk)
    with pytest.raises(experiment.ExportError) as info:
        experiment.run(cfg)
    assert "no space left on the device" in str(info.value)
    assert "checkpoints are saved and intact" in str(info.value)
    assert "--mode=export" in str(info.value)
    # A failed run writes no result: the previous export's stays as it was (its
    # SavedModel is still there), and the training record stays.
    assert json.load(open(os.path.join(run_dir, "result.export.json")))[
        "saved_model"] == result["saved_model"]
    assert os.path.exists(os.path.join(result["saved_model"], "saved_model.pb"))
    assert {name: _bytes(os.path.join(run_dir, name)) for name in record} == record
    assert tf.train.latest_checkpoint(run_dir).endswith("ckpt-4")


@pytest.mark.large  # 16 s
def test_fine_tuning_without_a_checkpoint_says_so_and_records_it(tmp_path, capsys,
                                                                recwarn, skip_final_export):
    result = experiment.run(config(train_mode="finetune", train_steps=1, mode="train",
                                   model_dir=str(tmp_path / "run")))
    assert result["train/initialized_from"] == "random"
    assert "supervised training from scratch" in capsys.readouterr().out
    # ft_proj_selector=0 leaves the projection head out of the loss: no warning about
    # its missing gradients (issue 15).
    assert not [w for w in recwarn if "Gradients do not exist" in str(w.message)]


def test_eval_mode_without_checkpoint_fails_clearly(tmp_path):
    with pytest.raises(ConfigError, match="--model_dir: has no checkpoint"):
        experiment.run(config(mode="eval", model_dir=str(tmp_path)))


@pytest.mark.parametrize("overrides, flag", [
    (dict(dataset="no_such_dataset_xyz"), "dataset"),
    (dict(train_split="validation"), "train_split"),
    (dict(eval_split="val", mode="train_then_eval"), "eval_split"),
    (dict(train_batch_size=3, strategy="mirrored"), "train_batch_size"),
    (dict(checkpoint="/nonexistent/ckpt"), "checkpoint"),
    (dict(model_dir="/proc/simclr_cannot_write_here"), "model_dir"),
    (dict(dataset="folder:/nonexistent_folder_xyz"), "dataset"),
])
def test_dataset_and_strategy_checks_name_the_flag(overrides, flag, tmp_path):
    values = dict(model_dir=str(tmp_path / "run"), train_steps=1)
    values.update(overrides)
    cfg = config(**values)
    with pytest.raises(ConfigError) as info:
        experiment.run(cfg)
    assert info.value.flag == flag, str(info.value)


def test_finetune_on_unlabelled_folder_fails_before_building(tmp_path):
    from PIL import Image  # pylint: disable=import-outside-toplevel
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(3):
        Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(folder / f"{i}.png")
    cfg = config(dataset=f"folder:{folder}", train_mode="finetune", eval_split="train",
                 model_dir=str(tmp_path / "run"), train_steps=1)
    with pytest.raises(ConfigError, match="--train_mode: finetune needs labels"):
        experiment.run(cfg)


def test_finetune_from_a_released_model_checks_its_architecture(tmp_path):
    """The released R50's variable names and shapes (tests/data) against the tiny
    model's flags: refused before any model is built, naming the flags it needs."""
    released = official_fixtures.write_r50_names_and_shapes(tmp_path / "released")
    cfg = config(train_mode="finetune", checkpoint=released, train_steps=1,
                 model_dir=str(tmp_path / "run"), **run_fixtures.RESNET)
    with pytest.raises(ConfigError, match="--resnet_depth=50") as info:
        experiment.run(cfg)
    assert "--width_multiplier=1" in str(info.value)
    assert not (tmp_path / "run").exists()


def test_a_released_head_must_read_the_layer_it_was_trained_on(tmp_path):
    """Fine-tuning from a released model whose 10-class head loads (digits has 10
    classes): without saved_model.pb the selector must be given (a default 0 is
    refused, a given 0 is not); with the authors' graph it is read, and a flag that
    contradicts it is refused naming both. All before model_dir exists."""
    model = SimCLRModel(**official_fixtures.SMALL_R18)
    model.build((None, None, None, 3))
    bare = official_layout.export_official_layout(model, tmp_path / "bare")
    exported = tmp_path / "exported"
    official_layout.export_official_savedmodel(model, exported, 1)
    flags = dict(train_mode="finetune", train_steps=1, image_size=32,
                 model_dir=str(tmp_path / "run"), **official_fixtures.SMALL_R18_FLAGS)
    with pytest.raises(ConfigError, match=r"--ft_proj_selector: .* must be given: 0 = h"):
        experiment.run(config(checkpoint=str(tmp_path / "bare"), **flags))
    strategy = tf.distribute.get_strategy()
    given = config(checkpoint=str(tmp_path / "bare"), **flags).with_given(
        {"ft_proj_selector"})
    preflight.check(given, strategy, preflight.load_source(given))  # no error
    with pytest.raises(ConfigError, match=r"--ft_proj_selector: is 0, .* reads projection "
                                          r"output 1 \(its saved_model.pb's graph says "
                                          r"so\); pass --ft_proj_selector=1"):
        experiment.run(config(checkpoint=str(exported), **flags))
    chosen = config(checkpoint=str(exported), ft_proj_selector=1, **flags)
    preflight.check(chosen, strategy, preflight.load_source(chosen))
    fresh = config(checkpoint=str(exported), zero_init_logits_layer=True, **flags)
    preflight.check(fresh, strategy, preflight.load_source(fresh))  # a fresh head
    assert bare.endswith("variables") and not (tmp_path / "run").exists()


@pytest.mark.large  # 10 s (25-40 s with a small R50)
def test_finetune_from_a_released_model(tmp_path, skip_final_export):
    """A model in the authors' released layout (a small ResNet-18 with random
    weights, written by the test) fine-tuned on digits: its encoder loads exactly
    (checked on one BN statistic), then training runs. Its export is any run's (the
    export of a ResNet: test_export; a fine-tune's, served:
    test_pretrain_resume_finetune_eval). The released R50 itself is loaded and
    fine-tuned by test_one_step's parity proof, the R50's layout mapped by
    test_official."""
    released, source = official_fixtures.write_small_official(
        tmp_path / "released", **official_fixtures.SMALL_R18)
    cfg = config(train_mode="finetune", checkpoint=released, train_steps=1,
                 image_size=32, train_batch_size=4, mode="train", fine_tune_after_block=4,
                 model_dir=str(tmp_path / "run"), ft_proj_selector=1,
                 **official_fixtures.SMALL_R18_FLAGS)
    result = experiment.run(cfg)
    assert result["global_step"] == 1
    model = parts.build_model(cfg, tf.distribute.get_strategy(), 10)
    checkpoints.restore_model(model, tf.train.latest_checkpoint(cfg.model_dir))
    np.testing.assert_array_equal(
        model.encoder.block_groups[3].blocks[1].bn2.bn.moving_variance.numpy(),
        source.encoder.block_groups[3].blocks[1].bn2.bn.moving_variance.numpy())


def test_odd_finetune_batch_on_onednn_cpu_fails_before_crashing(tmp_path):
    """The crash is the ResNet's (its strided 1x1 shortcuts): refused before it."""
    cfg = config(train_mode="finetune", train_batch_size=3, train_steps=1,
                 model_dir=str(tmp_path / "run"), **run_fixtures.RESNET)
    with pytest.raises(ConfigError, match="--train_batch_size: gives 3 images per replica"):
        experiment.run(cfg)


@pytest.mark.large  # 50 s
def test_jit_compile_on_the_default_cpu_strategy_trains_like_without(tiny_run, tmp_path,
                                                                    skip_final_export):
    """XLA compiles the per-replica step (not the loop reading the iterator): the
    first step's loss (same weights, same batch) equals the uncompiled one's, the
    session's tiny run's first step (its metrics.jsonl)."""
    xla = experiment.run(tiny_run.config_for(tmp_path / "xla", train_steps=1,
                                             jit_compile=True, knn_eval_split=None))
    assert xla["global_step"] == 1
    [plain] = [line for line in records.read_metrics(
        os.path.join(tiny_run.directory, records.METRICS_FILE))
        if line["step"] == 1 and "train/contrast_loss" in line]
    np.testing.assert_allclose(xla["train/contrast_loss"], plain["train/contrast_loss"],
                               rtol=1e-4)


def _points(log_dir, tag):
    """(step, value) of every TensorBoard point of `tag` under log_dir (top level)."""
    points = []
    for event_file in tf.io.gfile.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            points += [(event.step, float(tf.make_ndarray(value.tensor)))
                       for value in event.summary.value if value.tag == tag]
    return sorted(points)


@pytest.mark.large  # 41 s with the rerun (when it trained its own 2 steps)
def test_final_linear_probe_compares_pretrained_and_random_encoders(tiny_run, tmp_path,
                                                                   capsys,
                                                                   skip_final_export):
    """The quick start's closing probe: features of every example of both splits (the
    distributed extractor), an L-BFGS probe for the trained and for a random encoder;
    said before it starts and per encoder (it was silent for 1.5 minutes), and a
    TensorBoard scalar each, once however often the finished run is rerun. The
    trained run is a copy of the session's tiny run (4 steps on train, 360 test
    examples), its command given --final_linear_probe."""
    cfg = tiny_run.copy_to(tmp_path / "run", final_linear_probe=True)
    results = experiment.run(cfg)
    for name in ("linear_probe/pretrained", "linear_probe/random_init"):
        # Accuracies over the 360 test examples, well above chance on digits.
        assert 0.2 < results[name] <= 1.0
        assert round(results[name] * 360) == pytest.approx(results[name] * 360, abs=1e-6)
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["linear_probe/pretrained"] == pytest.approx(results["linear_probe/pretrained"])
    protocols = check_protocols(saved)  # and the training accuracies'
    for name in ("linear_probe/pretrained", "linear_probe/random_init"):
        assert (protocols[name]["split"], protocols[name]["examples"],
                protocols[name]["train"]["examples"]) == ("test", 360, 1437)
    assert protocols["linear_probe/pretrained"]["checkpoint"] == dict(path="ckpt-4", step=4)
    out = capsys.readouterr().out
    assert out.index("Final linear probe: features of the 1437 train and 360 "
                     "test examples") < out.index("  pretrained encoder: top-1") < \
        out.index("  random init encoder: top-1") < out.index("Linear probe (L-BFGS")
    # The finished command again, measuring again: same probe, no second point.
    experiment.run(dataclasses.replace(cfg, reevaluate=True))
    for name in ("linear_probe/pretrained", "linear_probe/random_init"):
        assert _points(str(tmp_path / "run"), name) == [(4, pytest.approx(results[name]))]


def test_rerunning_an_evaluation_adds_no_second_point(tiny_run, tmp_path, capsys,
                                                     monkeypatch):
    """--mode=eval twice on one checkpoint: one TensorBoard point per scalar (reruns
    added duplicates), the record written once more with the same values. A split
    of ANNOUNCE_EXAMPLES or more is announced before it is read (lowered here)."""
    from simclr_tf.evaluation import base  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(base, "ANNOUNCE_EXAMPLES", 100)
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval")
    first = experiment.run(cfg)
    assert "Evaluating the supervised head on test: 3 batches ...\nEval on test" in \
        capsys.readouterr().out  # 360 examples, batches of 128
    second = experiment.run(cfg)
    assert first == second
    tag = "eval/label_top_1_accuracy"
    assert _points(cfg.model_dir, tag) == [(tiny_run.STEPS, pytest.approx(first[tag]))]


def test_a_waiting_evaluator_that_sees_no_checkpoint_fails_and_says_so(tmp_path):
    """--mode=eval --eval_wait_secs on a model_dir that never gets a checkpoint used to
    exit 0 with no output and no result (issue 24 item 3)."""
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    with pytest.raises(ConfigError) as info:
        experiment.run(config(mode="eval", model_dir=str(model_dir), eval_wait_secs=1))
    assert info.value.flag == "eval_wait_secs"
    assert "no checkpoint appeared" in str(info.value) and "nothing was evaluated" in \
        str(info.value)
    assert not (model_dir / "result.eval.json").exists()


def test_a_label_fraction_below_one_per_class_says_so_on_the_console(tmp_path, monkeypatch,
                                                                     capsys):
    """Issue 33, 10: --label_fraction=1e-9 keeps one example of each of digits' 10
    classes; that was said only at INFO. One console line says what is kept."""
    class Built(Exception):
        pass

    def stop(*args, **kwargs):
        raise Built()

    monkeypatch.setattr(parts, "build_model", stop)  # the line comes before the model
    capsys.readouterr()
    with pytest.raises(Built):
        experiment.run(config(train_mode="finetune", label_fraction=1e-9, train_steps=1,
                              train_batch_size=8, model_dir=str(tmp_path / "run")))
    said = [line for line in capsys.readouterr().out.splitlines()
            if "--label_fraction" in line]
    assert len(said) == 1 and " 10 " in said[0] and "1437" in said[0], said


@pytest.mark.large  # one tiny training run
def test_a_small_contrastive_batch_is_warned_about_and_a_usual_one_is_not(tmp_path, capsys,
                                                                         skip_final_export,
                                                                         monkeypatch):
    """--train_batch_size=2 trained for hours without a word: a pretraining run below
    16 images a batch says how many negatives each view has and what SimCLR needs.
    (Also the start-up hint of a float32 run on a CPU that computes bfloat16 natively,
    whatever this CPU is: `machine.native_bfloat16` answers for it.)"""
    from simclr_tf.run import machine
    monkeypatch.setattr(machine, "native_bfloat16", lambda path=None: "avx512_bf16")
    experiment.run(config(train_batch_size=4, train_steps=1, mode="train",
                          train_split="train[:16]", model_dir=str(tmp_path / "small")))
    printed = capsys.readouterr().out
    assert ("Warning: --train_batch_size=4: each view is contrasted with 6 negatives and "
            "batch norm sees 8 images") in printed
    assert printed.index("Warning: --train_batch_size=4") < printed.index("Training 1 steps")
    hint = "Hint: this CPU computes bfloat16 natively (avx512_bf16): --mixed_precision="
    assert printed.count(hint) == 1 and printed.index(hint) < printed.index("Training 1")
    assert rules.small_batch_note(15) and rules.small_batch_note(16) is None
