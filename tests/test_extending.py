"""What docs/design.md promises: a mode, an encoder and a dataset are each added in one
module (tests/helpers/toy_*.py), and run through the same paths as ours."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf import experiment, modes
from simclr_tf.config import ConfigError
from simclr_tf.modes import parts


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
