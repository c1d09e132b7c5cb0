"""--evaluators: which evaluators a mode runs (`tables.evaluators.resolve`), its
defaults (the lists each mode and train mode ran before the flag), what a given
list runs, and each bad value's error before TensorFlow is needed."""
import json
import os

import pytest

from simclr_tf.config import inherit
from simclr_tf.run import experiment
from simclr_tf.rundir import records
from simclr_tf.config import Config, ConfigError
from simclr_tf.evaluation import registry
from simclr_tf.config.tables import evaluators as evaluator_table

from helpers import run_fixtures
from helpers.protocols import check_protocols


def _resolved(**flags):
    return evaluator_table.resolve(Config(**flags))


def test_the_defaults_are_the_lists_each_mode_ran_before_the_flag():
    # --mode=eval, train_then_eval's eval after training, --mode=linear_probe.
    assert _resolved(mode="eval") == evaluator_table.RunEvaluators(
        at_checkpoint=("supervised",))
    assert _resolved(mode="train_then_eval").at_checkpoint == ("supervised",)
    assert _resolved(mode="linear_probe").at_checkpoint == ("linear_probe",)
    for mode in ("export", "embed"):
        assert _resolved(mode=mode) == evaluator_table.RunEvaluators()
    # Pretraining: the kNN monitor with --knn_eval_split only.
    assert _resolved(mode="train", knn_eval_split="test").training == ("knn",)
    assert _resolved(mode="train", knn_eval_split=None).training == ()
    # Distillation: its monitor with --eval_split; no kNN monitor.
    assert _resolved(mode="train", train_mode="distill", eval_split="test",
                     knn_eval_split="test").training == ("distill",)
    assert _resolved(mode="train", train_mode="distill", eval_split="").training == ()
    assert _resolved(mode="train", train_mode="finetune", knn_eval_split="test",
                     eval_split="test").training == ()
    # A given list replaces them, in its order.
    assert _resolved(mode="eval", evaluators=" knn, supervised").at_checkpoint == (
        "knn", "supervised")
    assert _resolved(mode="train_then_eval", evaluators="knn") == \
        evaluator_table.RunEvaluators(training=("knn",), at_checkpoint=("supervised",))


def test_the_flag_free_table_names_the_registry_evaluators():
    assert list(evaluator_table.EVALUATORS) == list(registry.EVALUATORS)


def test_the_flag_is_never_read_from_a_record_and_free_to_change():
    """A training run's --evaluators (its monitors) must not become what a later
    --mode=eval of its model_dir runs."""
    assert "evaluators" in inherit.NEVER_READ and "evaluators" in records.FREE_FLAGS


@pytest.mark.parametrize("flags, message", [
    (dict(mode="eval", evaluators="supervised,nope"),
     r"--evaluators: names 'nope', which is no evaluator; choose from supervised, knn, "
     r"linear_probe, final_probe, distill \(comma-separated; empty for the mode's own\)"),
    (dict(mode="eval", evaluators="supervised,,knn", knn_eval_split="test"),
     r"--evaluators: has an empty name in 'supervised,,knn'"),
    (dict(mode="eval", evaluators="supervised,supervised"),
     r"--evaluators: names 'supervised' twice"),
    (dict(mode="export", evaluators="supervised"),
     r"--evaluators: is 'supervised', but --mode=export runs no evaluators; drop "
     r"--evaluators"),
    (dict(mode="eval", evaluators="knn", knn_eval_split=None),
     r"--evaluators: names 'knn', which evaluates on --knn_eval_split, and "
     r"--knn_eval_split is not set; set it, or drop 'knn'"),
    (dict(mode="train", evaluators="supervised"),
     r"--evaluators: names 'supervised', which --mode=train cannot run during "
     r"training; drop it \(it runs on a checkpoint read whole: --mode=eval\)"),
    (dict(mode="train", evaluators="distill"),
     r"--evaluators: names 'distill', which needs a distillation's teacher"),
    (dict(mode="eval", evaluators="distill"),
     r"--evaluators: names 'distill', which needs a distillation's teacher"),
    (dict(mode="train", evaluators="final_probe"),
     r"--evaluators: names 'final_probe', which --final_linear_probe runs after "
     r"training .* pass --final_linear_probe"),
])
def test_each_bad_value_is_an_error_of_the_flag(tmp_path, flags, message):
    with pytest.raises(ConfigError, match=message):
        run_fixtures.config(**dict(dict(model_dir=str(tmp_path / "run")), **flags))


@pytest.mark.large  # an evaluation of the tiny run: 44 s measured beside the suite
def test_eval_mode_runs_the_evaluators_given(tiny_run, tmp_path):
    """--mode=eval --evaluators=supervised,knn on the tiny run: both measured, both
    recorded in result.json with their protocols."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval", evaluators="supervised,knn",
                           knn_eval_split="test")
    result = experiment.run(cfg)
    saved = json.load(open(os.path.join(cfg.model_dir, "result_4.json")))
    for entries in (result, saved):
        assert {"eval/label_top_1_accuracy", "knn/top_1_accuracy"} <= set(entries)
        protocols = check_protocols(entries)
        assert protocols["eval/label_top_1_accuracy"]["evaluator"] == "supervised"
        assert protocols["knn/top_1_accuracy"]["split"] == "test"


def test_the_head_is_needed_only_where_supervised_is_run():
    # What needs labels on --eval_split and a supervised head follows the evaluators
    # resolved: --mode=eval --evaluators=knn reads neither.
    assert evaluator_table.evaluates_head(Config(mode="eval"))
    assert evaluator_table.evaluates_head(Config(mode="train_then_eval"))
    assert evaluator_table.evaluates_head(Config(mode="train_then_eval", evaluators="knn",
                                                 knn_eval_split="test"))
    for flags in (dict(mode="train"), dict(mode="linear_probe"), dict(mode="export"),
                  dict(mode="eval", evaluators="knn", knn_eval_split="test")):
        assert not evaluator_table.evaluates_head(Config(**flags)), flags


@pytest.mark.large  # an evaluation of the tiny run: 44 s measured beside the suite
def test_knn_alone_evaluates_a_run_without_the_online_head(tiny_run, tmp_path):
    """--mode=eval --evaluators=knn measures a pretraining checkpoint that has no
    supervised head to evaluate (--lineareval_while_pretraining=false): refused
    before the head check followed the evaluators ("no classifier to evaluate")."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval", evaluators="knn",
                           knn_eval_split="test", lineareval_while_pretraining=False)
    result = experiment.run(cfg)
    assert "knn/top_1_accuracy" in result and "eval/label_top_1_accuracy" not in result
    assert 0.0 <= result["knn/top_1_accuracy"] <= 1.0
    with pytest.raises(ConfigError, match="^--lineareval_while_pretraining: is off, so a "
                       "pretraining run has no classifier to evaluate"):
        experiment.run(tiny_run.copy_to(tmp_path / "other", mode="eval",
                                        lineareval_while_pretraining=False))
