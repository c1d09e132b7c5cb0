"""SimCLR v2's distillation (--train_mode=distill): the loss against closed forms, the
step on 1 and 2 replicas, the fixed teacher, the flags' errors before anything is
built, and whole runs (train, resume bit-exact, evaluate, export)."""
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.method import optimizers, train
from simclr_tf.method.objectives import distill as distill_objective
from simclr_tf.run import distribute, experiment, preflight
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints, teacher
from simclr_tf.config import ConfigError
from simclr_tf.models import SimCLRModel
from simclr_tf.run.modes import parts
from helpers import official_fixtures as fx
from helpers import run_fixtures
from helpers.protocols import check_protocols
from helpers.standin_model import make_model, random_batch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


# ------------------------------------------------------------------ the loss


@pytest.mark.parametrize("temperature", [0.1, 1.0, 4.0])
def test_distillation_loss_is_the_papers_cross_entropy(temperature):
    """-mean_i sum_y P_T(y|x_i; tau) log P_S(y|x_i; tau) (SimCLR v2, eq. 2), no tau^2;
    its gradient is (P_S - P_T) / (tau n), and the teacher receives none."""
    rng = np.random.default_rng(int(temperature * 10))
    t = rng.normal(scale=3.0, size=(6, 5)).astype(np.float32)
    s = rng.normal(scale=3.0, size=(6, 5)).astype(np.float32)
    expected = -np.mean(np.sum(_softmax(t.astype(np.float64) / temperature)
                               * _log_softmax(s.astype(np.float64) / temperature), axis=1))
    teacher_logits, student_logits = tf.Variable(t), tf.Variable(s)
    with tf.GradientTape(persistent=True) as tape:
        loss = distill_objective.distillation_loss(teacher_logits, student_logits, temperature)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    grad = tape.gradient(loss, student_logits).numpy()
    closed = (_softmax(s / temperature) - _softmax(t / temperature)) / (temperature * 6)
    np.testing.assert_allclose(grad, closed, rtol=1e-4, atol=1e-7)
    assert tape.gradient(loss, teacher_logits) is None
    # The authors' colab (add_kd_loss) multiplies by tau^2: the same only at tau = 1.
    colab = temperature ** 2 * expected
    assert (abs(float(loss) - colab) < 1e-5) == (temperature == 1.0)


def test_a_student_equal_to_its_teacher_starts_at_the_teachers_entropy():
    """With student == teacher the loss is H(P_T), the minimum over students (the
    cross-entropy minus the KL divergence, which is >= 0)."""
    rng = np.random.default_rng(3)
    t = rng.normal(scale=2.0, size=(8, 10)).astype(np.float32)
    for temperature in (0.5, 1.0):
        p = _softmax(t.astype(np.float64) / temperature)
        entropy = -np.mean(np.sum(p * np.log(p), axis=1))
        np.testing.assert_allclose(float(distill_objective.distillation_loss(t, t, temperature)),
                                   entropy, rtol=1e-5)
        other = t + rng.normal(size=t.shape).astype(np.float32)
        assert float(distill_objective.distillation_loss(t, other, temperature)) > entropy


def test_the_labelled_term_is_summed_and_divided_by_the_whole_batch():
    """Eq. 3's sum over D^L shares the normaliser of the sum over D: the labelled
    examples' cross-entropy summed, over all n examples."""
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(6, 4)).astype(np.float32)
    labels = np.array([2, -1, 0, -1, -1, 3], np.int32)
    log_p = _log_softmax(logits.astype(np.float64))
    expected = -sum(log_p[i, y] for i, y in enumerate(labels) if y >= 0) / 6
    np.testing.assert_allclose(float(distill_objective.labelled_cross_entropy(labels, logits)),
                               expected, rtol=1e-5)
    assert float(distill_objective.labelled_cross_entropy(np.full(6, -1, np.int32), logits)) == 0.0
    np.testing.assert_allclose(float(distill_objective.agreement(logits, logits)), 1.0)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="distill_temperature must be > 0"):
        distill_objective.distillation_loss(np.zeros([2, 3]), np.zeros([2, 3]), 0.0)
    with pytest.raises(ValueError, match="same classes"):
        distill_objective.distillation_loss(np.zeros([2, 3]), np.zeros([2, 4]), 1.0)
    with pytest.raises(ValueError, match="distill_alpha must be in"):
        train.StepOptions(train_mode="distill", distill_alpha=1.5)


# ------------------------------------------------------------------ the step


class _StandInTeacher:
    """A fixed stand-in model as `teacher(images) -> logits` (what Trainer takes)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, images):
        return self.model(images, training=False)["logits_sup"]


def _strategy(num_replicas):
    # Collectives numbered apart from every earlier strategy's (`create_strategy`).
    return distribute.create_strategy("mirrored", num_devices=num_replicas)


def _distil(num_replicas, student_weights, teacher_weights, batches, alpha):
    strategy = _strategy(num_replicas) if num_replicas > 1 else tf.distribute.get_strategy()
    with strategy.scope():
        student = make_model(8, head_stop_gradient=False)
        student.set_weights(student_weights)
        fixed = make_model(8, head_stop_gradient=False, seed=7)
        fixed.set_weights(teacher_weights)
        fixed.trainable = False
        optimizer = optimizers.build_optimizer("momentum", 0.5, momentum=0.9)
    trainer = train.Trainer(strategy, student, optimizer,
                            train.StepOptions(train_mode="distill", distill_temperature=0.5,
                                              distill_alpha=alpha),
                            teacher=_StandInTeacher(fixed))
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[2] for b in batches])
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(8)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    logs = [trainer.train_steps(iterator) for _ in batches]
    return logs, [w.numpy() for w in student.weights], [w.numpy() for w in fixed.weights]


@pytest.mark.large  # 20 s beside another job
def test_two_replicas_distil_as_one_and_the_teacher_never_changes():
    """The global batch's loss and the weights after two steps are the same on 1 and
    2 replicas (alpha 0.5: both terms, labels partly -1); the teacher's weights
    (BN moving statistics included) end exactly as they started; the first step's
    loss is alpha times the distillation loss plus 1 - alpha times the labelled
    term, computed here from the two models' logits."""
    student_weights = [w.numpy() for w in make_model(8, head_stop_gradient=False).weights]
    teacher_weights = [w.numpy() for w in make_model(8, seed=7).weights]
    batches = [random_batch(8, 8, seed=60 + s) for s in range(2)]
    logs_1, weights_1, fixed_1 = _distil(1, student_weights, teacher_weights, batches, 0.5)
    logs_2, weights_2, fixed_2 = _distil(2, student_weights, teacher_weights, batches, 0.5)
    for log_2, log_1 in zip(logs_2, logs_1):
        for name in ("loss", "distill_loss", "supervised_loss", "teacher_agreement",
                     "supervised_acc"):
            np.testing.assert_allclose(log_2[name], log_1[name], rtol=1e-5, err_msg=name)
    for w_2, w_1 in zip(weights_2, weights_1):
        np.testing.assert_allclose(w_2, w_1, atol=1e-5, rtol=1e-5)
    for after, before in zip(fixed_1 + fixed_2, teacher_weights + teacher_weights):
        np.testing.assert_array_equal(after, before)
    assert any(not np.array_equal(a, b) for a, b in zip(weights_1, student_weights))

    # The first step's loss from the models' logits (the student in training mode).
    student = make_model(8, head_stop_gradient=False)
    student.set_weights(student_weights)
    fixed = make_model(8, seed=7)
    fixed.set_weights(teacher_weights)
    images, _, labels = batches[0]
    s = student(images, training=True)["logits_sup"].numpy().astype(np.float64)
    t = fixed(images, training=False)["logits_sup"].numpy().astype(np.float64)
    distill = -np.mean(np.sum(_softmax(t / 0.5) * _log_softmax(s / 0.5), axis=1))
    labelled = -sum(_log_softmax(s)[i, y] for i, y in enumerate(labels) if y >= 0) / 8
    np.testing.assert_allclose(logs_1[0]["distill_loss"], distill, rtol=1e-5)
    np.testing.assert_allclose(logs_1[0]["supervised_loss"], labelled, rtol=1e-5)
    np.testing.assert_allclose(logs_1[0]["loss"], 0.5 * distill + 0.5 * labelled, rtol=1e-5)


def test_the_trainer_takes_a_teacher_only_to_distil():
    model = make_model(8, head_stop_gradient=False)
    optimizer = optimizers.build_optimizer("momentum", 0.1)
    strategy = tf.distribute.get_strategy()
    with pytest.raises(ValueError, match="needs a teacher"):
        train.Trainer(strategy, model, optimizer, train.StepOptions(train_mode="distill"))
    with pytest.raises(ValueError, match="needs a teacher, and only it takes one"):
        train.Trainer(strategy, model, optimizer, train.StepOptions(train_mode="finetune"),
                      teacher=_StandInTeacher(model))


# ------------------------------------------------------------------ the teacher


def _teacher_run(directory, **overrides):
    """A fine-tuning run directory (ckpt-1 and flags.json) of the tiny model."""
    return run_fixtures.write_run(directory, train_mode="finetune", **overrides)


def test_our_run_is_a_teacher_in_inference_mode_with_no_trainable_variables(tmp_path):
    """inspect_teacher reads the architecture from flags.json and the classes from
    the head's kernel, builds nothing; build_teacher loads every variable, and the
    teacher's logits are the fine-tuned model's in inference mode."""
    cfg = _teacher_run(tmp_path / "teacher")
    info = teacher.inspect_teacher(str(tmp_path / "teacher"))
    assert (info.num_classes, info.image_size) == (10, 16)
    assert info.model_kwargs == cfg.model_kwargs(10)
    built = teacher.build_teacher(info, tf.distribute.get_strategy(), image_size=16)
    assert built.model.trainable_variables == []
    reference = parts.build_model(cfg, tf.distribute.get_strategy(), 10)
    checkpoints.restore_model(reference, tf.train.latest_checkpoint(str(tmp_path / "teacher")))
    images = np.random.default_rng(0).uniform(size=(4, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(built(images), reference(images, training=False)["logits_sup"],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.bfloat16
def test_a_bfloat16_teacher_computes_in_bfloat16_and_gives_float32_logits(tmp_path):
    """With --mixed_precision=bfloat16 the teacher computes in bfloat16; its logits
    stay float32, close to the float32 teacher's."""
    _teacher_run(tmp_path / "teacher")
    info = teacher.inspect_teacher(str(tmp_path / "teacher"))
    built = teacher.build_teacher(info, tf.distribute.get_strategy(), image_size=16)
    images = np.random.default_rng(0).uniform(size=(4, 16, 16, 3)).astype(np.float32)
    half = teacher.build_teacher(info, tf.distribute.get_strategy(), image_size=16,
                                 dtype="mixed_bfloat16")
    assert half.model.compute_dtype == "bfloat16" and half(images).dtype == tf.float32
    np.testing.assert_allclose(half(images), built(images), rtol=0.05, atol=0.05)


@pytest.mark.large  # 10 s beside another job
def test_a_released_model_is_a_teacher(tmp_path):
    """An authors' release with a supervised head (a small stand-in in their layout):
    its architecture and head from inspect_official, every variable loaded. One whose
    head's input layer nothing tells (no graph, hidden widths equal to h's) is refused,
    saying so."""
    small = dict(fx.SMALL_R50, encoder_options=dict(depth=18, width_multiplier=0.125,
                                                   stem="cifar"))
    path, original = fx.write_small_official(tmp_path / "release",
                                             **dict(small, num_proj_layers=1))
    info = teacher.inspect_teacher(path)
    assert info.num_classes == 10 and info.description.startswith("released model")
    built = teacher.build_teacher(info, tf.distribute.get_strategy(), image_size=16)
    images = np.random.default_rng(1).uniform(size=(3, 16, 16, 3)).astype(np.float32)
    np.testing.assert_allclose(built(images), original(images, training=False)["logits_sup"],
                               rtol=1e-5, atol=1e-6)
    ambiguous, _ = fx.write_small_official(tmp_path / "ambiguous", **small)
    with pytest.raises(teacher.TeacherError, match="cannot tell which output feeds it.*"
                       "As a teacher it must be told"):
        teacher.inspect_teacher(ambiguous)


def _distill_config(tmp_path, teacher_path, **overrides):
    return run_fixtures.config(**dict(dict(
        model_dir=str(tmp_path / "student"), train_mode="distill", teacher=str(teacher_path),
        train_steps=4, checkpoint_steps=2, mode="train"), **overrides))


def _preflight(cfg):
    return preflight.check(cfg, tf.distribute.get_strategy(), preflight.load_source(cfg))


def test_a_teacher_that_saw_more_labels_than_the_run_has_is_refused_or_said(
        tmp_path, caplog):
    """2026-12-06 (newcomer M14): the quick start's distillation from the pretraining
    run, whose online head trained on every label, was accepted without a word in a
    1%/10% experiment. A teacher whose head saw more labels than --label_fraction gives
    is refused; a pretraining run's head otherwise is said (a fully supervised
    teacher); a fine-tune on the run's own fraction passes in silence."""
    run_fixtures.write_run(tmp_path / "pretrained")  # the online head: every label
    _teacher_run(tmp_path / "ft10", label_fraction=0.1)

    def check(teacher_dir, **student):
        cfg = _distill_config(tmp_path, teacher_dir, **student)
        info = teacher.inspect_teacher(str(teacher_dir))
        preflight._check_teacher_labels(cfg, info)  # pylint: disable=protected-access
        return info

    info = check(tmp_path / "pretrained")
    assert info.head_labels == (1.0, "train", "digits", teacher.ONLINE_HEAD)
    from simclr_tf.run.modes import train as train_mode  # pylint: disable=import-outside-toplevel
    assert "10 classes, its head trained on every label of 'train', inference mode" in \
        train_mode.describe_teacher(_distill_config(tmp_path, tmp_path / "pretrained"), info)
    assert (f"--teacher: '{tmp_path / 'pretrained'}' is a pretraining run whose online "
            "head trained on every label of 'train' of digits: the student learns from "
            "all the labels") in caplog.text
    with pytest.raises(ConfigError, match=r"^--teacher: .* every label of 'train' of "
                       r"digits, and this run's --label_fraction is 0.1: the student "
                       "would learn those labels through the teacher"):
        check(tmp_path / "pretrained", label_fraction=0.1, distill_alpha=0.5)
    caplog.clear()
    assert check(tmp_path / "ft10", label_fraction=0.1, distill_alpha=0.5).head_labels == (
        0.1, "train", "digits", teacher.FINE_TUNED)
    assert "--teacher" not in caplog.text
    with pytest.raises(ConfigError, match="on 0.1 of the labels of 'train' of digits, and "
                       "this run's --label_fraction is 0.01"):
        check(tmp_path / "ft10", label_fraction=0.01, distill_alpha=0.5)


@pytest.mark.large  # 12 s beside another job
def test_bad_teachers_are_flag_errors_before_anything_is_built(tmp_path):
    """A missing path, a run without a supervised head, a head of other classes and
    a checkpoint without its run's record are ConfigErrors of --teacher from
    preflight, which builds nothing."""
    with pytest.raises(ConfigError, match=r"--teacher: .*neither a directory"):
        _preflight(_distill_config(tmp_path, tmp_path / "missing"))
    run_fixtures.write_run(tmp_path / "pretrained", lineareval_while_pretraining=False)
    with pytest.raises(ConfigError, match="--teacher: .*has no supervised head.*Fine-tune"):
        _preflight(_distill_config(tmp_path, tmp_path / "pretrained"))
    # A head of 7 classes against digits' 10.
    cfg = run_fixtures.config(train_mode="finetune", model_dir=str(tmp_path / "seven"))
    model = parts.build_model(cfg, tf.distribute.get_strategy(), 7)
    tf.train.Checkpoint(model=model).save(str(tmp_path / "seven" / "ckpt"))
    records.write_json(records.record_path(str(tmp_path / "seven"), records.FLAGS, "train"),
                       cfg.to_dict())
    with pytest.raises(ConfigError, match="--teacher: .*scores 7 classes, but "
                       "--dataset=digits has 10"):
        _preflight(_distill_config(tmp_path, tmp_path / "seven"))
    _teacher_run(tmp_path / "norecord", flags_json=False)
    with pytest.raises(ConfigError, match="--teacher: .*has no flags.json"):
        _preflight(_distill_config(tmp_path, tmp_path / "norecord"))
    _teacher_run(tmp_path / "good")
    with pytest.raises(ConfigError, match="--eval_split: .*no_such_split.* The distillation "
                       "monitor .* --eval_split='' turns it off"):
        _preflight(_distill_config(tmp_path, tmp_path / "good", eval_split="no_such_split"))
    context = _preflight(_distill_config(tmp_path, tmp_path / "good"))
    assert context.teacher.num_classes == context.num_classes == 10
    assert not os.path.exists(tmp_path / "student")


@pytest.mark.large  # 10 s beside another job
def test_a_resumed_run_keeps_the_teacher_it_started_with(tmp_path):
    """--teacher=<run directory> resolves to that run's newest checkpoint, which
    changes while the teacher's run goes on: model_dir's teacher.json pins the weights
    the run started with, a resume gets those, and refuses once they are gone; another
    --teacher (a changed flag, allowed) is not pinned."""
    teacher_dir = tmp_path / "teacher"
    cfg = _teacher_run(teacher_dir)
    student = _distill_config(tmp_path, teacher_dir)
    first = teacher.inspect_teacher(str(teacher_dir))
    os.makedirs(student.model_dir)
    teacher.write_pin(student.model_dir, str(teacher_dir), first)
    # The teacher's run writes a newer checkpoint.
    model = parts.build_model(cfg, tf.distribute.get_strategy(), 10)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(teacher_dir),
                                         max_to_keep=2)
    manager.save(checkpoint_number=2)
    assert teacher.inspect_teacher(str(teacher_dir)).weights.prefix.endswith("ckpt-2")
    info = _preflight(student).teacher
    assert info.weights.prefix.endswith("ckpt-1") and "pinned by teacher.json" in \
        info.description
    for name in os.listdir(teacher_dir):
        if name.startswith("ckpt-1."):
            os.remove(teacher_dir / name)
    with pytest.raises(ConfigError, match="--teacher: this run started distilling from "
                       ".*ckpt-1.*no longer loads.*must learn from the same teacher"):
        _preflight(student)
    other = tmp_path / "other"
    _teacher_run(other)
    assert _preflight(_distill_config(tmp_path, other)).teacher.weights.prefix \
        .endswith(os.path.join("other", "ckpt-1"))
    with open(os.path.join(student.model_dir, teacher.PIN_FILE), "w") as f:
        f.write("[1, 2")
    with pytest.raises(ConfigError, match="--model_dir: its teacher.json, the record of "
                       "the teacher this run started with, cannot be read"):
        _preflight(student)


def test_a_size_bound_teacher_is_refused_at_another_image_size(tmp_path, monkeypatch):
    """A ViT's position embedding fits the size it was trained at: a teacher trained
    at 224 px cannot see the student's 16 px images (refused before anything is
    built)."""
    info = teacher.TeacherInfo("/runs/vit", None, dict(encoder="vit_s16"), 10, 224, "vit")
    monkeypatch.setattr(teacher, "inspect_teacher", lambda path: info)
    with pytest.raises(ConfigError, match="--teacher: .*vit_s16 model trained at 224 px.*"
                       "pass --image_size=224"):
        _preflight(_distill_config(tmp_path, "/runs/vit"))


def test_a_run_stopped_before_its_first_checkpoint_restarts_as_recorded(tmp_path):
    """--checkpoint is never read from a record: a training run whose flags.json says
    it starts from one, rerun without it before it saved anything, is refused rather
    than started from random weights."""
    _teacher_run(tmp_path / "teacher")
    started = _distill_config(tmp_path, tmp_path / "teacher",
                              checkpoint=str(tmp_path / "teacher"))
    os.makedirs(started.model_dir)
    records.write_json(records.record_path(started.model_dir, records.FLAGS, "train"),
                       started.to_dict())
    with pytest.raises(ConfigError, match="--checkpoint: model_dir .* records a run that "
                       "starts from --checkpoint=.*teacher.*pass --checkpoint="):
        _preflight(_distill_config(tmp_path, tmp_path / "teacher"))
    _preflight(started)  # as recorded: accepted


def test_distillation_flags_are_checked_with_the_others(tmp_path):
    teacher_dir = str(tmp_path / "t")
    cases = [
        (dict(train_mode="distill"), "--teacher: is required with --train_mode=distill"),
        (dict(train_mode="finetune", teacher=teacher_dir), "--teacher: is the teacher of"),
        (dict(train_mode="distill", teacher=teacher_dir, label_fraction=0.1),
         "--label_fraction: is 0.1, but --distill_alpha=1.0 uses no labels"),
        (dict(train_mode="distill", teacher=teacher_dir, distill_alpha=-0.1),
         "--distill_alpha: .*must be in"),
        (dict(train_mode="distill", teacher=teacher_dir, distill_temperature=0.0),
         "--distill_temperature: .*must be > 0"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError, match=message):
            run_fixtures.config(model_dir=str(tmp_path / "m"), mode="train", **overrides)
    # Mixing in labels is accepted with alpha < 1.
    run_fixtures.config(model_dir=str(tmp_path / "m"), mode="train", train_mode="distill",
                        teacher=teacher_dir, label_fraction=0.1, distill_alpha=0.5)


def test_the_student_is_the_teachers_model_unless_flags_say_otherwise(tmp_path):
    """Distilling with no architecture flag and no --checkpoint reads the model and
    the data from the teacher's run (self-distillation); a flag given wins."""
    sys.path.insert(0, REPO)
    try:
        import run  # pylint: disable=import-outside-toplevel
        from helpers.cli_flags import flag_values  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(REPO)
    _teacher_run(tmp_path / "teacher", width_multiplier=0.25, image_size=24)
    argv = ["--train_mode=distill", f"--teacher={tmp_path / 'teacher'}",
            f"--model_dir={tmp_path / 'student'}"]
    cfg = run.config_from_flags(flag_values(argv))
    assert (cfg.dataset, cfg.width_multiplier, cfg.image_size, cfg.encoder) == \
        ("digits", 0.25, 24, "tiny")
    cfg = run.config_from_flags(flag_values(argv + ["--width_multiplier=0.125"]))
    assert (cfg.width_multiplier, cfg.image_size) == (0.125, 24)
    # With --checkpoint the student's weights decide: a checkpoint without a record
    # lends nothing, and the teacher's run does not fill in for it.
    run_fixtures.write_run(tmp_path / "bare", flags_json=False)
    cfg = run.config_from_flags(flag_values(argv + [f"--checkpoint={tmp_path / 'bare'}",
                                                    "--dataset=digits"]))
    assert (cfg.width_multiplier, cfg.image_size) == (1, 224)


# ------------------------------------------------------------------ whole runs


@pytest.mark.large  # 55 s beside another job (as a run.py process)
def test_run_py_distils_evaluates_and_exports_a_student(tmp_path, capsys):
    """The issue's command: run.py --train_mode=distill --teacher=<fine-tuned run>
    --model_dir=<new> (everything else read from the teacher's run) trains, writes
    train/distill_loss and the monitor's scalars, evaluates the student and exports
    it; the teacher's directory is untouched. In process: run.py's flags parsed
    (`run.config_from_flags`, what its main does), then `experiment.run`; run.py's
    own process (exit statuses, signals) is tested by test_reliability's runs."""
    sys.path.insert(0, REPO)
    try:
        import run  # pylint: disable=import-outside-toplevel
        from helpers.cli_flags import flag_values  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(REPO)
    _teacher_run(tmp_path / "teacher")
    before = {name: os.path.getmtime(tmp_path / "teacher" / name)
              for name in os.listdir(tmp_path / "teacher")}
    student = tmp_path / "student"
    cfg = run.config_from_flags(flag_values([
        "--train_mode=distill", f"--teacher={tmp_path / 'teacher'}",
        f"--model_dir={student}", "--mode=train_then_eval", "--train_steps=4",
        "--checkpoint_steps=2", "--progress=lines", "--learning_rate=0.1"]), report=print)
    experiment.run(cfg)
    printed = capsys.readouterr().out
    assert f"Flags read from {tmp_path / 'teacher'}" in printed
    assert "Teacher: checkpoint" in printed
    assert "Distillation on test at step 4: student top-1" in printed
    result = json.load(open(student / "result.json"))
    for name in ("train/distill_loss", "train/teacher_agreement",
                 "distill/student_top_1_accuracy", "distill/teacher_agreement",
                 "eval/label_top_1_accuracy"):
        assert name in result, name
    np.testing.assert_allclose(result["eval/label_top_1_accuracy"],
                               result["distill/student_top_1_accuracy"])
    protocols = check_protocols(result)
    assert protocols["distill/student_top_1_accuracy"]["checkpoint"] == dict(
        path="ckpt-4", step=4)
    assert protocols["distill/student_top_1_accuracy"]["examples"] == 360
    teacher_weights = protocols["distill/teacher_top_1_accuracy"]["checkpoint"]
    assert teacher_weights["path"].startswith(os.path.join("..", "teacher", "ckpt-"))
    assert os.path.exists(os.path.join(student, teacher_weights["path"] + ".index"))
    # Relative paths only: the same runs elsewhere record the same protocols
    # (dev/compare_runs.py compares the entries of two output folders).
    assert str(tmp_path) not in json.dumps(protocols)
    assert os.path.exists(student / "saved_model" / "4" / "saved_model.pb")
    flags = json.load(open(student / "flags.json"))
    assert (flags["train_mode"], flags["teacher"]) == ("distill", str(tmp_path / "teacher"))
    tags = set()
    for event_file in tf.io.gfile.glob(str(student / "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            tags.update(value.tag for value in event.summary.value)
    assert {"train/distill_loss", "train/teacher_agreement",
            "distill/student_top_1_accuracy"} <= tags
    assert {name: os.path.getmtime(tmp_path / "teacher" / name)
            for name in os.listdir(tmp_path / "teacher")} == before
    # The student's export is a teacher in its turn: its logits are the served ones.
    export_dir = str(student / "saved_model" / "4")
    info = teacher.inspect_teacher(export_dir)
    assert info.num_classes == 10 and info.description.startswith("export")
    built = teacher.build_teacher(info, tf.distribute.get_strategy(), image_size=16)
    images = np.random.default_rng(2).uniform(size=(2, 16, 16, 3)).astype(np.float32)
    served = tf.saved_model.load(export_dir)(images, trainable=False)["logits_sup"]
    np.testing.assert_allclose(built(images), served, rtol=1e-5, atol=1e-6)


@pytest.mark.large  # 12 s on the tiny encoder (94 s on the ResNet beside the full suite)
def test_distillation_under_mirrored_strategy(tmp_path, monkeypatch, skip_final_export):
    """The training mode under MirroredStrategy on 2 replicas: the teacher's variables
    are the strategy's, and the monitor's student top-1 over the replicas equals the
    saved student's evaluated on one device."""
    from simclr_tf.evaluation import supervised  # pylint: disable=import-outside-toplevel
    from simclr_tf.run.modes import train as modes_train  # pylint: disable=import-outside-toplevel
    _teacher_run(tmp_path / "teacher")
    strategy = _strategy(2)
    cfg = _distill_config(tmp_path, tmp_path / "teacher", train_steps=2, checkpoint_steps=2)
    source = preflight.load_source(cfg)
    context = preflight.check(cfg, strategy, source)
    os.makedirs(cfg.model_dir)
    built = []
    build_teacher = parts.build_teacher
    monkeypatch.setattr(parts, "build_teacher", lambda *args: built.append(
        build_teacher(*args)) or built[-1])
    result = modes_train.train(cfg, strategy, context)
    assert result["global_step"] == 2 and len(built) == 1
    assert all(strategy.extended.variable_created_in_scope(v.value)
               for v in built[0].model.variables)
    student = parts.build_model(cfg, tf.distribute.get_strategy(), 10)
    checkpoints.restore_model(student, tf.train.latest_checkpoint(cfg.model_dir))
    one_device = supervised.evaluate(tf.distribute.get_strategy(), student, source, "test",
                                     image_size=16, batch_size=128)
    np.testing.assert_allclose(result["distill/student_top_1_accuracy"],
                               one_device["top_1_accuracy"])
    assert json.load(open(os.path.join(cfg.model_dir, teacher.PIN_FILE)))["weights"] \
        .endswith("ckpt-1")


@pytest.mark.large  # 49 s in the full suite at bffb33f (two runs and a resume)
def test_a_resumed_distillation_ends_bit_exact(tmp_path, monkeypatch, skip_final_export):
    """Stopped after its first checkpoint and started again, a distillation run ends
    with the weights of one never stopped (the teacher is loaded again from its path;
    data order and crops are restored with the step). The distillation path's proof
    on a real model: a ResNet-18 teacher and student (docs/testing.md). The stopped
    run is the uninterrupted one's directory copied where an interruption stops it
    (`run_fixtures.run_copied_after_first_segment`); the final checkpoints are
    compared tensor by tensor (the student's variables and its optimizer's)."""
    _teacher_run(tmp_path / "teacher", **run_fixtures.RESNET)
    common = dict(train_mode="distill", teacher=str(tmp_path / "teacher"), mode="train",
                  checkpoint_steps=3, train_steps=6, train_batch_size=32,
                  log_every_steps=3, learning_rate=0.1, **run_fixtures.RESNET)
    straight = run_fixtures.config(model_dir=str(tmp_path / "straight"), **common)
    resumed = run_fixtures.config(model_dir=str(tmp_path / "resumed"), **common)
    run_fixtures.run_copied_after_first_segment(monkeypatch, straight, resumed.model_dir)
    assert tf.train.latest_checkpoint(resumed.model_dir).endswith("ckpt-3")
    # The copy holds the pin of the teacher the run started with, as a stopped run's.
    assert os.path.exists(os.path.join(resumed.model_dir, teacher.PIN_FILE))
    experiment.run(resumed)
    run_fixtures.assert_same_checkpoints(straight.model_dir, resumed.model_dir)
    assert json.load(open(tmp_path / "resumed" / "result.json"))["global_step"] == 6


def test_fit_refuses_distillation():
    from simclr_tf.method import keras_fit  # pylint: disable=import-outside-toplevel
    with pytest.raises(ValueError, match="custom loop only"):
        keras_fit.SimCLR(SimCLRModel(), train.StepOptions(train_mode="distill"))
