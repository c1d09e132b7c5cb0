"""A distillation run's teacher.json pins the teacher's weights, not only their path:
their digest (`teacher.weights_digest`, of the checkpoint's index: every tensor's
CRC32C), so that a resume whose pinned path now holds other weights (the teacher's
run redone in its own directory, an export or a release replaced) is refused like a
pin that no longer loads. A pin written before digests is taken at its word, with a
warning, and gets the digest of the weights there now."""
import json
import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.run import preflight
from simclr_tf.weights import checkpoints, export
from simclr_tf.weights import teacher
from simclr_tf.config import ConfigError
from simclr_tf.run.modes import parts

from helpers import official_fixtures as fx
from helpers import run_fixtures


def _saved(prefix, value):
    """A checkpoint at `prefix` of one variable filled with `value`; its Weights."""
    tf.train.Checkpoint(v=tf.Variable(tf.fill([3], float(value)))).write(str(prefix))
    return checkpoints.Weights(str(prefix), checkpoints.CHECKPOINT, str(prefix), 1)


def _info(weights):
    return teacher.TeacherInfo("/runs/teacher", weights, {}, 10, 16,
                               f"checkpoint {weights.prefix}", teacher.weights_digest(weights))


def test_the_pin_holds_a_resume_to_the_same_weights(tmp_path, caplog):
    weights = _saved(tmp_path / "ckpt-1", 1.0)
    first = _info(weights)
    assert first.digest.startswith("sha256:")
    teacher.write_pin(str(tmp_path), "/runs/teacher", first)
    pin = teacher.read_pin(str(tmp_path))
    assert (pin["weights"], pin["digest"]) == (weights.prefix, first.digest)
    assert teacher.pin_of(pin, "/runs/teacher") == pin  # complete: not written again
    assert teacher.pin_of(pin, "/runs/other") is None  # another --teacher: its own pin
    # The same weights written again: the same digest, the resume goes on.
    assert teacher.pinned_teacher(pin, "/runs/teacher", _info(_saved(weights.prefix, 1.0))) \
        == first
    # Other weights at the pinned path: refused.
    replaced = _info(_saved(weights.prefix, 2.0))
    assert replaced.digest != first.digest
    with pytest.raises(teacher.TeacherError, match="now holds other weights"):
        teacher.pinned_teacher(pin, "/runs/teacher", replaced)
    # Another --teacher (a changed flag, allowed) is not held to the pin.
    assert teacher.pinned_teacher(pin, "/runs/other", replaced) is replaced
    # A pin from before digests: the weights there now are taken, with a warning, and
    # the pin is written again (pin_of: None) with their digest.
    old = dict(teacher="/runs/teacher", weights=weights.prefix)
    with caplog.at_level(logging.WARNING):
        assert teacher.pinned_teacher(old, "/runs/teacher", replaced) is replaced
    assert teacher.PIN_FILE in caplog.text and weights.prefix in caplog.text
    assert teacher.pin_of(old, "/runs/teacher") is None
    teacher.write_pin(str(tmp_path), "/runs/teacher", replaced)
    assert teacher.read_pin(str(tmp_path))["digest"] == replaced.digest


# ------------------------------------------------------------------ through preflight


def _student(tmp_path, teacher_path, train_steps=4):
    return run_fixtures.config(model_dir=str(tmp_path / "student"), train_mode="distill",
                               teacher=str(teacher_path), train_steps=train_steps,
                               checkpoint_steps=2, mode="train")


def _preflight(cfg):
    return preflight.check(cfg, tf.distribute.get_strategy(), preflight.load_source(cfg))


def _fine_tuned(cfg, seed):
    """The model of a fine-tuning run `cfg` with weights of its own (`seed`)."""
    model = parts.build_model(cfg, tf.distribute.get_strategy(), 10)
    rng = np.random.default_rng(seed)
    for variable in model.trainable_variables:
        variable.assign(rng.normal(0, 0.1, variable.shape).astype(np.float32))
    return model


def _teacher(tmp_path, kind, seed):
    """A teacher of `kind`, written again (other weights: `seed`) at the same path:
    'run' (a fine-tuning run directory: its ckpt-1), 'export' (its
    saved_model/1) or 'release' (the authors' layout). Returns the --teacher path."""
    if kind == "release":
        written, _ = fx.write_small_official(tmp_path / f"release-{seed}", seed=seed, **dict(
            fx.SMALL_R50, num_proj_layers=1,
            encoder_options=dict(depth=18, width_multiplier=0.125, stem="cifar")))
        path = tmp_path / "release"
        if path.exists():
            shutil.rmtree(path)
        os.rename(written, path)
        return str(path)
    run = tmp_path / "teacher"
    exported = run / "saved_model" / "1"
    if kind == "export" and exported.exists():
        # Exported again with other weights: the variables of the export rewritten,
        # the rest of it as it was (a second SavedModel export took ~5 s).
        _rewrite_weights(str(exported / "variables" / "variables"), seed)
        return str(exported)
    cfg = run_fixtures.write_run(run, train_mode="finetune")
    model = _fine_tuned(cfg, seed)
    if kind == "export":
        path = export.export_for_step(model, str(run), 1, image_size=16)
        assert path == str(exported), path
        return path
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(run),
                               max_to_keep=1).save(checkpoint_number=1)
    return str(run)


def _rewrite_weights(prefix, seed):
    """The checkpoint at `prefix` written again with other values (`seed`) in every
    float variable: other weights in the same files, as a new export would leave."""
    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_shape_map())
    rng = np.random.default_rng(seed)
    values = [reader.get_tensor(name) for name in names]
    values = [rng.normal(0, 0.1, value.shape).astype(value.dtype)
              if getattr(value, "dtype", None) == np.float32 else value for value in values]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=values)


@pytest.mark.parametrize("kind", [  # 0.3, 2.9, 0.8 s alone since 075168f
    "run", pytest.param("export", marks=pytest.mark.large), "release"])
def test_a_resume_whose_pinned_teacher_was_replaced_is_refused(tmp_path, kind):
    """The distillation's record (teacher.json, written as training does) pins the
    teacher; the teacher is then written again at the same path with other weights
    (its run redone in its own directory, the export or release replaced): the resume
    is a --teacher error naming the path, before anything is built. Unchanged, it
    resumes."""
    path = _teacher(tmp_path, kind, seed=1)
    student = _student(tmp_path, path)
    info = _preflight(student).teacher
    os.makedirs(student.model_dir)
    teacher.write_pin(student.model_dir, student.teacher, info)
    assert _preflight(student).teacher.digest == info.digest
    assert _teacher(tmp_path, kind, seed=2) == path
    with pytest.raises(ConfigError, match=r"--teacher: this run started distilling from "
                       r"the weights at .* now holds other weights.*start a new "
                       r"--model_dir"):
        _preflight(student)


@pytest.mark.large  # 40 s beside another job: a distillation stopped, then resumed
def test_a_resumed_distillation_refuses_a_redone_teacher_and_keeps_its_checkpoints(
        tmp_path, monkeypatch, skip_final_export):
    """experiment.run as run.py runs it: a distillation stopped after its first
    checkpoint, the teacher's run redone in its own directory (other weights at the
    same ckpt-1), the same command refused as a --teacher error; the student's
    checkpoint and records are as they were. A teacher.json without a digest (an
    older version's) is taken at its word and gets one."""
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    path = _teacher(tmp_path, "run", seed=1)
    student = _student(tmp_path, path, train_steps=6)  # stopped at ckpt-2, then ckpt-4
    run_fixtures.run_stopped_after_first_segment(monkeypatch, student)
    model_dir = student.model_dir
    pin_path = os.path.join(model_dir, teacher.PIN_FILE)
    pin = json.load(open(pin_path))
    assert pin["weights"] == os.path.join(path, "ckpt-1") and pin["digest"]
    # An older version's pin: no digest. The resume takes the weights there, and records
    # their digest (the same weights: the same digest as first pinned).
    json.dump({k: v for k, v in pin.items() if k != "digest"}, open(pin_path, "w"))
    run_fixtures.run_stopped_after_first_segment(monkeypatch, student)
    assert json.load(open(pin_path))["digest"] == pin["digest"]
    before = {name: open(os.path.join(model_dir, name), "rb").read()
              for name in sorted(os.listdir(model_dir)) if not name.startswith("events")}
    _teacher(tmp_path, "run", seed=2)  # the teacher's run redone
    with pytest.raises(ConfigError) as error:
        experiment.run(student)
    assert error.value.flag == "teacher" and "now holds other weights" in str(error.value)
    after = {name: open(os.path.join(model_dir, name), "rb").read()
             for name in sorted(os.listdir(model_dir)) if not name.startswith("events")}
    assert after == before


@pytest.mark.large  # 4-7 s (load 3.7 on 2 cores)
def test_a_teacher_replaced_between_the_checks_and_its_loading_is_refused(tmp_path):
    """What build_teacher loaded is what preflight inspected (and the run pins): a
    teacher rewritten in between is a --teacher error (the mode's flag_errors), not
    other weights learnt from."""
    path = _teacher(tmp_path, "run", seed=1)
    info = teacher.inspect_teacher(path)
    _teacher(tmp_path, "run", seed=2)
    with pytest.raises(ConfigError, match="--teacher: the weights at .* were replaced"):
        with preflight.flag_errors("teacher"):
            teacher.build_teacher(info, tf.distribute.get_strategy(), image_size=16)
