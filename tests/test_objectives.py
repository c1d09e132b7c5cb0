"""What docs/design.md promises of train modes: a row of `simclr_tf.config.tables.train_modes`
each, asked by the code instead of the name, and a new objective added from one file
(its loss, its own option as a flag of run.py, its own state in the checkpoint)."""
import json
import os
import subprocess
import sys

import pytest

from simclr_tf.config import rules
from simclr_tf.config.tables import train_modes
from simclr_tf.method import train
from simclr_tf.method.objectives import base

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The one file of a new objective: label-smoothed cross-entropy with its own option
# (--toy_smoothing, a flag of run.py once the file is loaded) and its own state (an
# exponential moving average of the loss, saved in the checkpoint).
TOY = '''"""A toy objective: label-smoothed cross-entropy on one crop-and-flip view."""
import tensorflow as tf

from simclr_tf.config.tables import train_modes
from simclr_tf.method.objectives import base


class Smoothed(base.Objective):
    def __init__(self, trainer, teacher=None):
        super().__init__(trainer, teacher)
        self.loss_ema = tf.Variable(0.0, trainable=False, name="loss_ema",
                                    aggregation=tf.VariableAggregation.MEAN)

    def state(self):
        return {"loss_ema": self.loss_ema}

    def train_step(self, batch):
        images, labels = batch
        smoothing = self.option("toy_smoothing")

        learning_rate = tf.cast(self.trainer.optimizer.learning_rate, tf.float32)
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            logits = base.logits_of(self.model(images, training=True))
            logits = tf.cast(logits, tf.float32)
            classes = tf.shape(logits)[-1]
            target = tf.one_hot(labels, classes) * (1.0 - smoothing) + smoothing / tf.cast(
                classes, tf.float32)
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(target, logits))
            metrics = dict(toy_loss=loss, **base.label_accuracy(labels, logits))
            loss, decay, scaled_loss = self.trainer.total_loss(loss)
        grads = tape.gradient(scaled_loss, variables)
        metrics = self.trainer.apply(grads=grads, variables=variables, metrics=metrics,
                                     loss=loss, decay=decay, learning_rate=learning_rate)
        self.loss_ema.assign(0.5 * self.loss_ema + 0.5 * metrics["toy_loss"])
        metrics["toy_loss_ema"] = tf.identity(self.loss_ema)
        metrics["num_examples"] = tf.cast(tf.shape(images)[0], tf.float32)
        return metrics


train_modes.register(train_modes.TrainMode(
    "toy_smoothed", f"{__name__}:Smoothed", "toy_smoothed: label-smoothed cross-entropy",
    labels="required", freezes=True, metrics=("toy_loss", "toy_loss_ema", "supervised_acc"),
    options=dict(toy_smoothing=0.1)))
'''


def test_every_train_mode_has_a_row_and_an_objective():
    assert tuple(train_modes.TRAIN_MODES)[:3] == rules.TRAIN_MODES
    for row in train_modes.TRAIN_MODES.values():
        assert issubclass(train.objective_class(row.name), base.Objective), row.name
    pretrain, finetune, distill = (train_modes.get(n) for n in rules.TRAIN_MODES)
    assert (pretrain.views, finetune.views, distill.views) == (2, 1, 1)
    assert pretrain.online_head and not finetune.online_head and not distill.online_head
    assert distill.needs_teacher and finetune.needs_labels and pretrain.labels == "none"
    with pytest.raises(ValueError, match="train_mode must be one of pretrain, finetune"):
        train_modes.get("byol")


def test_an_objectives_state_is_saved_and_restored_with_the_checkpoint(tmp_path):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
    model = SimCLRModel(encoder_options=dict(depth=18, width_multiplier=0.125, stem="cifar"),
                        proj_out_dim=8, num_proj_layers=1)
    model.build((None, 8, 8, 3))
    optimizer = tf.keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    ema = tf.Variable(1.5, trainable=False)
    state = checkpoints.CheckpointState(str(tmp_path), model, optimizer,
                                        objective_state=dict(ema=ema))
    state.save(1)
    ema.assign(7.0)
    fresh = tf.Variable(0.0, trainable=False)
    again = checkpoints.CheckpointState(str(tmp_path), model, optimizer,
                                        objective_state=dict(ema=fresh))
    assert again.recover()
    assert float(fresh.numpy()) == 1.5
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt-1"))
    assert any(key.startswith("objective/ema") for key in reader.get_variable_to_shape_map())


def _run_py(*flags):
    result = subprocess.run([sys.executable, "run.py", *flags], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.large  # two run.py processes on the tiny encoder
def test_an_objective_in_one_file_trains_and_evaluates_from_run_py(tmp_path):
    """The toy file, loaded by --objective_module: --train_mode=toy_smoothed with its own
    --toy_smoothing trains from run.py's command line to a checkpoint holding its
    state; --mode=eval evaluates it. No file of the library is edited. (The state
    restored with a checkpoint: the test above; a resumed run's weights:
    test_experiment's resume tests.)"""
    toy = tmp_path / "toy_objective.py"
    toy.write_text(TOY)
    straight = tmp_path / "straight"
    _run_py(f"--objective_module={toy}", "--train_mode=toy_smoothed",
            "--toy_smoothing=0.2", "--dataset=digits", "--train_split=train[:128]",
            "--eval_split=test", "--image_size=16", "--encoder=tiny",
            "--width_multiplier=0.125", "--train_batch_size=32", "--train_steps=2",
            "--checkpoint_steps=2", "--learning_rate=0.1", "--deterministic",
            "--mode=train", "--log_every_steps=1", "--progress=none",
            "--export_format=none",  # the checkpoint is what the evaluation reads
            f"--model_dir={straight}")
    with open(straight / "flags.json") as f:
        recorded = json.load(f)
    assert recorded["train_mode"] == "toy_smoothed"
    assert json.loads(recorded["objective_options"]) == {"toy_smoothing": 0.2}
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    names = tf.train.load_checkpoint(str(straight / "ckpt-2")).get_variable_to_shape_map()
    assert any(k.startswith("objective/loss_ema") for k in names)
    with open(straight / "result.json") as f:
        result = json.load(f)
    assert "train/toy_loss" in result and "train/toy_loss_ema" in result
    # The evaluation reads the train mode and its options from flags.json; the file
    # is loaded again from the recorded --objective_module.
    _run_py("--mode=eval", f"--model_dir={straight}", "--eval_split=test")
    with open(straight / "result.eval.json") as f:
        evaluated = json.load(f)
    assert 0.0 <= evaluated["eval/label_top_1_accuracy"] <= 1.0


@pytest.mark.parametrize("body, expected", [
    ("import sys\nsys.exit(0)\n", "exited while it was loaded (SystemExit(0), line 2)"),
    ("raise SystemExit\n", "exited while it was loaded (SystemExit(None), line 1)"),
    ("x = 1\nundefined_name\n", "failed while it was loaded, line 2: NameError"),
    ("def broken(:\n", "failed while it was loaded, line 1: SyntaxError"),
])
def test_an_objective_file_that_exits_or_fails_while_loading_is_reported(body, expected,
                                                                         tmp_path, capsys):
    """run.py loads --objective_module before its flags: a file that calls sys.exit()
    (which used to end run.py with status 0 and no word) or raises is an error naming
    the file, the line and what it did (exit 2), and is not left half-registered."""
    import run  # pylint: disable=import-outside-toplevel
    path = tmp_path / "my_objective.py"
    path.write_text(body)
    with pytest.raises(SystemExit) as info:
        run.load_objective_modules(["run.py", f"--objective_module={path}"])
    assert info.value.code == 2
    error = capsys.readouterr().err
    assert f"objective_module {str(path)!r}" in error and expected in error, error
    assert "simclr_tf_objective_my_objective" not in sys.modules


@pytest.mark.parametrize("nested", [False, True])
def test_an_objective_module_named_in_a_flagfile_is_loaded(nested, tmp_path, capsys):
    """--objective_module inside a --flagfile (or a flagfile it names) is loaded before
    the flags are defined, as on the command line (its train mode would otherwise be
    an unknown --train_mode choice). The file here exits, which shows it was run."""
    import run  # pylint: disable=import-outside-toplevel
    path = tmp_path / "flagfile_objective.py"
    path.write_text("raise SystemExit(3)\n")
    inner = tmp_path / "inner.flags"
    inner.write_text(f"# the objective\n--objective_module={path}\n--train_steps=2\n")
    outer = tmp_path / "outer.flags"
    outer.write_text(f"--flagfile={inner}\n" if nested else inner.read_text())
    with pytest.raises(SystemExit) as info:
        run.load_objective_modules(["run.py", "--mode=train", f"--flagfile={outer}"])
    assert info.value.code == 2
    assert "exited while it was loaded (SystemExit(3)" in capsys.readouterr().err
    run.load_objective_modules(["run.py", "--flagfile", str(tmp_path / "missing.flags")])


@pytest.mark.parametrize("option", ["momentum", "temperature"])
def test_an_objective_option_named_like_a_run_py_flag_is_refused(option, tmp_path, capsys):
    """An EMA objective's `momentum` would take --momentum's value (and --momentum
    would change both): refused when the row is registered, naming both."""
    before = dict(train_modes.TRAIN_MODES)
    row = train_modes.TrainMode("shadowing", "x:Y", "shadowing: a test row",
                                options={option: 0.99, "shadowing_rate": 0.1})
    with pytest.raises(ValueError, match=rf"train mode 'shadowing': its option '{option}' "
                       rf"has the name of run.py's flag --{option}.*'shadowing_{option}'"):
        train_modes.register(row)
    assert train_modes.TRAIN_MODES == before
    # From a file given to run.py: its error, exit 2.
    import run  # pylint: disable=import-outside-toplevel
    path = tmp_path / "ema_objective.py"
    path.write_text("from simclr_tf.config.tables import train_modes\n"
                    "train_modes.register(train_modes.TrainMode('ema', 'x:Y', 'ema: test',\n"
                    f"    options={{'{option}': 0.99}}))\n")
    with pytest.raises(SystemExit):
        run.load_objective_modules(["run.py", f"--objective_module={path}"])
    error = capsys.readouterr().err
    assert f"line 2: ValueError: train mode 'ema': its option '{option}'" in error
    assert "ema" not in train_modes.TRAIN_MODES


def test_the_step_options_run_an_options_declared_checks():
    """A margin that reaches the step without run.py (a library user's StepOptions) is
    refused by the same declaration, before anything is traced."""
    from simclr_tf.method import train  # pylint: disable=import-outside-toplevel
    for margin in (-1.0, float("inf")):
        with pytest.raises(ValueError, match="--triplet_margin: must be a finite number > 0"):
            train.StepOptions(train_mode="margin_triplet",
                              objective_options={"triplet_margin": margin})
    assert train.StepOptions(train_mode="margin_triplet").objective_options == (
        ("triplet_margin", 0.5),)


@pytest.mark.large  # 2 x ~8 s: two tiny pretrainings in process
@pytest.mark.parametrize("train_mode, options, loss_at_start", [
    ("nt_logistic", "{}", (3.0, 9.0)),
    ("margin_triplet", '{"triplet_margin": 0.3}', (0.2, 1.2)),
])
def test_the_papers_table_2_losses_pretrain_like_nt_xent(tmp_path, train_mode, options,
                                                          loss_at_start, skip_final_export):
    """The loss study's built-in modes train as pretraining does (views, online head,
    records) with their own loss: its value is of its own scale, not NT-Xent's."""
    from helpers import run_fixtures  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    cfg = run_fixtures.config(model_dir=str(tmp_path / "run"), train_mode=train_mode,
                              objective_options=options, train_steps=2)
    result = experiment.run(cfg)
    assert result["global_step"] == 2
    low, high = loss_at_start
    assert low < result["train/contrast_loss"] < high, result["train/contrast_loss"]
    assert 0 <= result["train/contrast_acc"] <= 1 and "train/supervised_loss" in result
    flags = json.load(open(tmp_path / "run" / "flags.json"))
    assert flags["train_mode"] == train_mode and json.loads(
        flags["objective_options"]) == json.loads(options)
