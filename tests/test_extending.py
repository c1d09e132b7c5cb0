"""What docs/design.md promises: a mode, an encoder and a dataset are each added in one
module (tests/helpers/toy_*.py), and run through the same paths as ours."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.run import experiment
from simclr_tf.weights import checkpoints
from simclr_tf.config.tables import modes
from simclr_tf.config import ConfigError
from simclr_tf.run.modes import parts


@pytest.fixture
def count_weights_mode(monkeypatch):
    from helpers import toy_mode  # pylint: disable=import-outside-toplevel
    monkeypatch.setitem(modes.MODES, toy_mode.MODE.name, toy_mode.MODE)
    return toy_mode.MODE


def test_a_mode_in_one_module_runs_with_its_checks_lock_and_record(
        tiny_run, tmp_path, count_weights_mode):
    config = tiny_run.copy_to(tmp_path / "run", mode=count_weights_mode.name)
    results = experiment.run(config)
    # Independent count, from the checkpoint file: the model's variables are saved
    # under model/ (BN statistics) and, once each, under the optimizer's list of
    # trainable variables; its slots and step are not weights.
    reader = tf.train.load_checkpoint(os.path.join(config.model_dir, "ckpt-4"))
    expected = sum(int(np.prod(shape)) for key, shape in
                   reader.get_variable_to_shape_map().items()
                   if key.startswith(("model/", "optimizer/_trainable_variables/")))
    assert results["count_weights/num_weights"] == expected > 0
    with open(os.path.join(config.model_dir, "result.count_weights.json")) as f:
        assert json.load(f) == results
    with open(os.path.join(config.model_dir, "flags.count_weights.json")) as f:
        assert json.load(f)["mode"] == "count_weights"
    with open(os.path.join(config.model_dir, "result.json")) as f:
        assert "count_weights/num_weights" not in json.load(f)  # training's record kept


def test_a_mode_needing_a_checkpoint_fails_before_any_model_is_built(
        tmp_path, count_weights_mode, monkeypatch):
    from helpers.run_fixtures import config  # pylint: disable=import-outside-toplevel

    def never(*args, **kwargs):
        raise AssertionError("a model was built before the checks")

    monkeypatch.setattr(parts, "build_model", never)
    with pytest.raises(ConfigError, match=r"--model_dir: has no checkpoint to "
                       r"count_weights in .*; train first\.$"):
        experiment.run(config(mode=count_weights_mode.name, model_dir=str(tmp_path)))


@pytest.fixture
def toy_encoder_and_dataset(monkeypatch):
    """tiny_conv and stripes registered for this test only."""
    from simclr_tf.data import registry  # pylint: disable=import-outside-toplevel
    from simclr_tf.config.tables import encoders as encoder_table  # pylint: disable=import-outside-toplevel
    from helpers import toy_dataset, toy_encoder  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(encoder_table, "ENCODERS", dict(encoder_table.ENCODERS))
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))  # pylint: disable=protected-access
    toy_encoder.register()
    toy_dataset.register()
    return toy_encoder, toy_dataset


@pytest.mark.large  # 8.6 s alone, 7.7 s in the default tier (a training run)
def test_an_encoder_and_a_dataset_in_one_module_each_train_evaluate_and_are_checked(
        tmp_path, toy_encoder_and_dataset, skip_final_export):
    from helpers.run_fixtures import config  # pylint: disable=import-outside-toplevel
    toy_encoder, toy_dataset = toy_encoder_and_dataset
    run = dict(encoder=toy_encoder.NAME, dataset=toy_dataset.NAME, train_split="train",
               eval_split="test", train_batch_size=16, train_steps=2, checkpoint_steps=2,
               width_multiplier=0.5, model_dir=str(tmp_path / "run"))
    results = experiment.run(config(mode="train_then_eval", **run))
    assert results["eval/num_examples"] == 32
    assert results["eval/label_top_1_accuracy"] * 32 == round(
        results["eval/label_top_1_accuracy"] * 32)
    # The run's record rebuilds the toy encoder, 4 filters (8 x 0.5), and every
    # variable loads from its checkpoint.
    model, _, _ = checkpoints.open_encoder(run["model_dir"])
    assert isinstance(model.encoder, toy_encoder.TinyConv)
    assert tuple(model.encoder.conv.kernel.shape) == (3, 3, 3, 4)
    # The table's variable flags are what a later run must agree with.
    with pytest.raises(ConfigError, match=r"--model_dir: .* was written by a model of "
                       r"another architecture .*pass --width_multiplier=0\.5"):
        experiment.run(config(mode="eval", **dict(run, width_multiplier=1.0)))


def test_the_tables_the_flags_ask_import_no_tensorflow():
    """run.py checks the flags before TensorFlow is imported: the Config, its checks,
    the mode and encoder tables and the rules they read must not import it."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    code = ("import sys\n"
            "import simclr_tf.config, simclr_tf.config.validation, "
            "simclr_tf.config.architecture, simclr_tf.run.modes, simclr_tf.config.tables.modes, "
            "simclr_tf.config.tables.encoders, simclr_tf.config.tables.train_modes, "
            "simclr_tf.method.objectives, simclr_tf.config.rules, simclr_tf.config.variants, "
            "simclr_tf.config.errors\n"
            "heavy = sorted(m for m in ('tensorflow', 'keras') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=os.path.dirname(os.path.dirname(
                                os.path.abspath(__file__))))
    assert result.returncode == 0, result.stderr


def test_an_encoder_registered_later_has_its_variable_flags_inherited_and_checked(
        tmp_path, monkeypatch):
    """The flags that decide a model's variables are a function of the encoder table
    as it is, not a list made at import: an encoder registered later, whose variables
    --vit_pool decides, has --vit_pool read from the run its --checkpoint names and
    checked against that checkpoint's record."""
    import dataclasses  # pylint: disable=import-outside-toplevel
    from simclr_tf.config import inherit  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import preflight
    from simclr_tf.config import Config  # pylint: disable=import-outside-toplevel
    from simclr_tf.config.tables import encoders as encoder_table  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(encoder_table, "ENCODERS", dict(encoder_table.ENCODERS))
    assert "vit_pool" not in inherit.model_and_data()  # decides no variables yet
    encoder_table.register_encoder("pooled_conv", encoder_table.EncoderSpec(
        flags=dict(vit_pool="pool"), variable_flags=("vit_pool",),
        builder="helpers.toy_encoder:build"))
    run_dir = tmp_path / "run"
    os.makedirs(run_dir)
    with open(run_dir / "flags.json", "w") as f:
        json.dump(Config(encoder="pooled_conv", vit_pool="mean").to_dict(), f)
    # Inherited: a fine-tune of that run that gives neither flag reads both.
    given = dict(mode="train", train_mode="finetune", checkpoint=str(run_dir),
                 model_dir=str(tmp_path / "finetune"))
    config, inherited = inherit.inherit(Config(**given).with_given(set(given)))
    assert (config.encoder, config.vit_pool) == ("pooled_conv", "mean")
    assert inherited.values["vit_pool"] == "mean"
    # Checked: a --vit_pool other than the record's does not fit its checkpoint.
    prefix = str(run_dir / "ckpt-4")
    weights = checkpoints.Weights(prefix, checkpoints.CHECKPOINT, prefix, 4)
    preflight._check_recorded_architecture(config, weights, "checkpoint")  # pylint: disable=protected-access
    with pytest.raises(ConfigError, match=r"another architecture .*pass --vit_pool=mean"):
        preflight._check_recorded_architecture(  # pylint: disable=protected-access
            dataclasses.replace(config, vit_pool="token"), weights, "checkpoint")


def test_no_library_module_is_over_500_lines():
    """A module a newcomer opens reads in one sitting: over 500 lines, it is split by
    job (as train.py was into grad_cache.py, official.py into the official package)."""
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "simclr_tf")
    sizes = {}
    for folder, _, names in os.walk(package):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    sizes[os.path.relpath(path, package)] = sum(1 for _ in f)
    assert len(sizes) > 50 and "config/__init__.py" in sizes  # the package was found
    assert not {name: lines for name, lines in sizes.items() if lines > 500}
