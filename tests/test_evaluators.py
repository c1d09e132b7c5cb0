"""The evaluator interface (`simclr_tf.evaluation.base`): an evaluator added in a test
module, registered by name, built from the Config and run through the same path as
the modes' (`evaluations.evaluators_for`, `evaluations.run_evaluators`), equals numpy on the
model's h; its floats reach TensorBoard and nothing else does. The final linear probe
builds both of its encoders under the run's strategy."""
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
# What TensorFlow's checkpoint reader calls: a test deletes files as it reads them.
from tensorflow.python.ops import io_ops

from simclr_tf.weights import checkpoints
from simclr_tf.config import Config
from simclr_tf.data import registry as datasets
from simclr_tf.evaluation import base, features, registry
from simclr_tf.run.modes import evaluations, linear_probe, parts
from simclr_tf.run.run_context import RunContext

from helpers.protocols import check_protocols

SPLIT = "test[:37]"  # batches of 16: the last one padded (rows that must not count)


class MeanH(base.Evaluator):
    """The mean of h over a split: the smallest evaluator there is."""

    def __init__(self, strategy, *, split=SPLIT, **common):
        super().__init__(strategy, **common)
        self.split = split

    def run(self, model, step, *, checkpoint=None):
        h = features.extract(self.strategy, model, self.source, self.split,
                             image_size=self.image_size, batch_size=self.batch_size)[features.H]
        return {"toy/mean_h": float(np.mean(h)), "toy/num_examples": len(h)}

    def describe(self, values, *, step, checkpoint=None):
        return f"Mean h at step {step}: {values['toy/mean_h']:.6f}"


def _config(tmp_path, **overrides):
    return Config.from_dict(dict(
        dict(dataset="digits", train_split="train[:100]", eval_split="test[:60]",
             image_size=16, stem="cifar", resnet_depth=18, width_multiplier=0.125,
             num_proj_layers=2, proj_out_dim=16, eval_batch_size=16, mode="train",
             model_dir=str(tmp_path / "run")), **overrides)).validate()


def _tags(log_dir):
    tags = {}
    for event_file in tf.io.gfile.glob(os.path.join(log_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            for value in event.summary.value:
                tags[value.tag] = (event.step, float(tf.make_ndarray(value.tensor)))
    return tags


def test_an_evaluator_added_by_a_test_runs_through_the_modes_path(tmp_path, monkeypatch,
                                                                  capsys):
    monkeypatch.setattr(registry, "EVALUATORS", dict(registry.EVALUATORS))
    registry.register_evaluator("mean_h", MeanH)
    cfg = _config(tmp_path)
    strategy = tf.distribute.get_strategy()
    source = datasets.get_dataset("digits")
    model = parts.build_model(cfg, strategy, None)
    evaluators = evaluations.evaluators_for(cfg, strategy, source, ["mean_h"])
    writer = tf.summary.create_file_writer(str(tmp_path / "tb"))
    results = evaluations.run_evaluators(evaluators, model, 7, writer=writer)

    images = np.concatenate([
        batch["image"].numpy()[batch["id"].numpy() >= 0]
        for batch in features.eval_dataset(source, SPLIT, image_size=16, batch_size=16)])
    h = model(images, training=False)[features.H].numpy()
    assert results["toy/num_examples"] == len(h) == 37
    np.testing.assert_allclose(results["toy/mean_h"], np.mean(h), rtol=1e-5)
    # The float is a scalar (TensorBoard, at the step); the count goes to records only.
    tags = _tags(str(tmp_path / "tb"))
    assert set(tags) == {"toy/mean_h"} and tags["toy/mean_h"][0] == 7
    np.testing.assert_allclose(tags["toy/mean_h"][1], results["toy/mean_h"], rtol=1e-6)
    assert f"Mean h at step 7: {results['toy/mean_h']:.6f}" in capsys.readouterr().out


def test_registry_names_the_problem_and_the_fix():
    with pytest.raises(ValueError, match="Did you mean 'knn'.*register_evaluator"):
        registry.get_evaluator("knnn")
    with pytest.raises(ValueError, match="subclass of .*Evaluator"):
        registry.register_evaluator("mine", object)
    with pytest.raises(ValueError, match="Received: strategy='default'"):
        MeanH("default", source=None, image_size=16)


@pytest.mark.large  # 11-18 s (three ResNet-18s built and two run on 2 replicas)
def test_final_probe_builds_both_encoders_under_the_runs_strategy(tmp_path, monkeypatch):
    """--final_linear_probe under --strategy=mirrored: the trained and the random
    encoder are the run's strategy's (they were the default strategy's: one device)."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    cfg = _config(tmp_path, final_linear_probe=True)
    source = datasets.get_dataset("digits")
    checkpoints.CheckpointState(cfg.model_dir, parts.build_model(cfg, strategy, 10)).save(2)
    built = []
    build_model = parts.build_model
    monkeypatch.setattr(parts, "build_model", lambda *args: built.append(
        build_model(*args)) or built[-1])
    results = linear_probe.final_linear_probe(
        cfg, strategy, RunContext(source=source, num_classes=10))
    assert len(built) == 2
    for model in built:
        assert all(strategy.extended.variable_created_in_scope(v.value)
                   for v in model.variables)
    accuracies = {name: value for name, value in results.items()
                  if not name.startswith("protocol/")}
    assert set(accuracies) == {"linear_probe/pretrained", "linear_probe/random_init"}
    for value in accuracies.values():  # accuracies over the 60 test examples
        assert 0.0 <= value <= 1.0 and round(value * 60) == pytest.approx(value * 60)
    protocols = check_protocols(results)
    assert protocols["linear_probe/pretrained"]["checkpoint"] == dict(path="ckpt-2", step=2)
    assert protocols["linear_probe/random_init"]["checkpoint"]["path"] is None
    for protocol in protocols.values():
        assert (protocol["examples"], protocol["train"]["examples"]) == (60, 100)


# ------------------------------------------------------------------ --mode=eval, waiting


def _rotate(run, old, new, *, every_file):
    """A training run saves `new` and its --keep_checkpoint_max deletes `old` (its data
    files, or every file)."""
    for name in os.listdir(run):
        if name.startswith(f"{old}."):
            shutil.copy(run / name, run / name.replace(old, new))
            if every_file or ".data" in name:
                os.remove(run / name)


def _rotated_while_read(monkeypatch, run, old, new):
    """`old` is rotated away (`_rotate`) once TensorFlow has begun to read it: its
    restore has matched the objects and issues RestoreV2, which finds no data file."""
    real = io_ops.restore_v2

    def restore_v2(prefix, *args, **kwargs):
        if f"{old}" in str(prefix.numpy()) and (run / f"{old}.index").exists():
            _rotate(run, old, new, every_file=False)
        return real(prefix, *args, **kwargs)

    monkeypatch.setattr(io_ops, "restore_v2", restore_v2)


_UNRESTORED_LINE = "could not be found in the restored object"


@pytest.mark.parametrize("deleted", ["while_read", "before_read"])
def test_a_waiting_evaluator_skips_a_checkpoint_deleted_before_it_is_read(
        tiny_run, tmp_path, monkeypatch, capsys, caplog, deleted):
    """--mode=eval --eval_wait_secs beside a training run: ckpt-2 is evaluated; ckpt-4
    is deleted by the run's --keep_checkpoint_max (which saved ckpt-6) as the
    evaluator reads it (RestoreV2's NotFoundError) or just before (no index): it is
    skipped, without TensorFlow's lines about values left unread, and ckpt-6
    evaluated; both results in one events file."""
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval", eval_wait_secs=1)
    run, later = tmp_path / "run", tmp_path / "later"
    events_before = set(tf.io.gfile.glob(str(run / "events.out.tfevents.*")))
    later.mkdir()
    for name in os.listdir(run):  # not written yet
        if name.startswith("ckpt-4."):
            os.rename(run / name, later / name)
    load_into, loaded = checkpoints.load_into, []

    def training_goes_on(model, path, **kwargs):
        loaded.append(os.path.basename(path))
        if loaded == ["ckpt-2"]:  # ckpt-4 is saved while ckpt-2 is evaluated
            for name in os.listdir(later):
                os.rename(later / name, run / name)
        if loaded == ["ckpt-2", "ckpt-4"] and deleted == "before_read":
            _rotate(run, "ckpt-4", "ckpt-6", every_file=True)
        return load_into(model, path, **kwargs)

    monkeypatch.setattr(checkpoints, "load_into", training_goes_on)
    if deleted == "while_read":
        _rotated_while_read(monkeypatch, run, "ckpt-4", "ckpt-6")
    result = experiment.run(cfg)
    assert loaded == ["ckpt-2", "ckpt-4", "ckpt-6"]
    assert result["global_step"] == 6 and result["eval/num_examples"] == 360
    assert [os.path.exists(run / f"result_{step}.json") for step in (2, 4, 6)] == [
        True, False, True]
    captured = capsys.readouterr()
    assert str(run / "ckpt-4") in captured.out
    assert _UNRESTORED_LINE not in captured.err + caplog.text
    new_events = set(tf.io.gfile.glob(str(run / "events.out.tfevents.*"))) - events_before
    assert len(new_events) == 1
    steps = {event.step for event in tf.compat.v1.train.summary_iterator(new_events.pop())
             for value in event.summary.value if value.tag.startswith("eval/")}
    assert steps == {2, 6}


def test_the_newest_checkpoint_deleted_while_it_is_read_gives_way_to_the_next(
        tiny_run, tmp_path, monkeypatch, capsys, caplog):
    """A mode reading a live run's newest checkpoint (`checkpoints.load_latest`: a
    one-shot --mode=eval here) whose rotation deletes it mid-read loads the one that
    replaced it: no failure, no fallback to an older one."""
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval")
    _rotated_while_read(monkeypatch, tmp_path / "run", "ckpt-4", "ckpt-6")
    result = experiment.run(cfg)
    assert result["global_step"] == 6
    assert _UNRESTORED_LINE not in capsys.readouterr().err + caplog.text
