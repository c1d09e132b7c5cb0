"""A tiny run on the offline 'digits' dataset, shared by the end-to-end tests.

Its encoder is `--encoder=tiny` (two conv-BN-ReLU stages, simclr_tf/models/tiny.py):
the run-layer tests (records, locks, flags, modes, signals) are about the machinery,
and a ResNet-18 takes two to three times as long to build, trace and export. A test
whose subject is the ResNet adds `**RESNET` (docs/testing.md).
"""
import os

from simclr_tf.config import Config

TINY = dict(dataset="digits", train_split="train", eval_split="test", image_size=16,
            encoder="tiny", width_multiplier=0.125, num_proj_layers=2,
            proj_out_dim=16, train_batch_size=32, eval_batch_size=128, use_blur=False,
            color_jitter_strength=0.5, temperature=0.5, learning_rate=0.5,
            weight_decay=1e-4, warmup_epochs=0.1)
# The width of TINY's h: the tiny encoder's second stage, 2 x 64 x width channels (16).
H_DIM = 2 * round(64 * TINY["width_multiplier"])
# The ResNet of the tests whose subject it is: ResNet-18 at width 1/8, CIFAR stem.
RESNET = dict(encoder="resnet", resnet_depth=18, width_multiplier=0.125, stem="cifar")


def config(**overrides):
    """The validated Config of the tiny run with `overrides` applied."""
    return Config.from_dict(dict(TINY, **overrides)).validate()


def write_run(directory, *, flags_json=True, **overrides):
    """A run directory as training leaves it, without training: the checkpoint
    (ckpt-1) of the tiny model of `config(**overrides)`, and its flags.json.

    Returns:
        The Config.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    from simclr_tf.run.modes import parts  # pylint: disable=import-outside-toplevel
    cfg = config(**dict(dict(model_dir=str(directory), train_steps=1), **overrides))
    model = parts.build_model(cfg, tf.distribute.get_strategy(), 10)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(directory),
                               max_to_keep=1).save(checkpoint_number=1)
    if flags_json:
        records.write_json(records.record_path(str(directory), records.FLAGS, "train"),
                           cfg.to_dict())
    return cfg


def run_stopped_after_first_segment(monkeypatch, cfg):
    """Runs `cfg` with `experiment.run` and stops it after the loop's first segment
    (`loop._run_calls`' first call, which ends at the first checkpoint when the log
    interval does not come earlier), as an interruption would."""
    import pytest  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import experiment, loop  # pylint: disable=import-outside-toplevel

    class Stopped(Exception):
        pass

    original_run, calls = loop._run_calls, []  # pylint: disable=protected-access

    def run_then_stop(*args, **kwargs):
        if calls:
            raise Stopped()
        calls.append(1)
        return original_run(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "_run_calls", run_then_stop)
        with pytest.raises(Stopped):
            experiment.run(cfg)


def run_copied_after_first_segment(monkeypatch, cfg, copy_dir):
    """Runs `cfg` with `experiment.run` to its end, and copies its model_dir to
    `copy_dir` where `run_stopped_after_first_segment` stops a run (before the loop's
    second segment: the first checkpoint saved, its records written), less the lock
    that the stopped run releases: the directory an interruption there leaves, without
    training its first segment a second time. Returns the run's result."""
    import shutil  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import experiment, loop, run_lock  # pylint: disable=import-outside-toplevel

    original_run, calls = loop._run_calls, []  # pylint: disable=protected-access

    def copy_then_run(*args, **kwargs):
        if len(calls) == 1:
            shutil.copytree(cfg.model_dir, str(copy_dir),
                            ignore=shutil.ignore_patterns(run_lock.LOCK_FILE + "*"))
        calls.append(1)
        return original_run(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "_run_calls", copy_then_run)
        result = experiment.run(cfg)
    assert len(calls) > 1, "the run ended in one segment: nothing was copied"
    return result


def checkpoint_tensors(model_dir):
    """{name: value} of every tensor of model_dir's latest checkpoint (the model's
    variables, BN statistics included, the optimizer's step and slots), read from the
    files without building a model."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def assert_same_checkpoints(straight_dir, resumed_dir):
    """The latest checkpoints of two runs hold the same tensors (names and values, to
    float32 round-off: rtol 1e-6, atol 1e-7), and both are at the same step."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    a, b = checkpoint_tensors(straight_dir), checkpoint_tensors(resumed_dir)
    assert os.path.basename(tf.train.latest_checkpoint(straight_dir)) == \
        os.path.basename(tf.train.latest_checkpoint(resumed_dir))
    assert a.keys() == b.keys()
    assert any("optimizer" in key for key in a) and any("moving_mean" in key for key in a)
    for key in a:
        if np.issubdtype(np.asarray(a[key]).dtype, np.floating):
            np.testing.assert_allclose(b[key], a[key], rtol=1e-6, atol=1e-7, err_msg=key)
        else:
            np.testing.assert_array_equal(b[key], a[key], err_msg=key)


class TinyRun:
    """A finished tiny pretraining run, trained once per test session (see the
    `tiny_run` fixture): 4 steps, checkpoints ckpt-2 and ckpt-4, the kNN monitor
    (test against the train split) at both, the SavedModel export saved_model/4,
    flags.json and result.json.

    Tests read it as it is, or take a copy (`copy_to`) before running a mode that
    writes into its directory: the run is shared by every test of the session.
    """

    STEPS = 4
    OVERRIDES = dict(train_steps=STEPS, checkpoint_steps=2, mode="train",
                     knn_eval_split="test")

    def __init__(self, directory, result):
        self.directory = str(directory)
        self.config = self.config_for(self.directory)
        self.result = result

    @classmethod
    def shared(cls, root):
        """The run in `root`/run, trained by the first process that asks (the others
        wait on a lock, then read what it returned from `root`/returned.json): the
        workers of one pytest-xdist session share one run."""
        import fcntl  # pylint: disable=import-outside-toplevel
        import json  # pylint: disable=import-outside-toplevel
        import os  # pylint: disable=import-outside-toplevel
        from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
        os.makedirs(root, exist_ok=True)
        directory, returned = os.path.join(root, "run"), os.path.join(root, "returned.json")
        with open(os.path.join(root, "lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not os.path.exists(returned):
                result = experiment.run(cls.config_for(directory))
                with open(returned + ".tmp", "w") as f:
                    json.dump(result, f)
                os.replace(returned + ".tmp", returned)
            with open(returned) as f:
                return cls(directory, json.load(f))

    @classmethod
    def config_for(cls, model_dir, **overrides):
        """The Config of a run like this one in `model_dir`, with `overrides`."""
        return config(**dict(dict(cls.OVERRIDES, model_dir=str(model_dir)), **overrides))

    def copy_to(self, directory, **overrides):
        """Copies the run's directory to `directory` and returns the Config of the
        run there with `overrides` applied (e.g. mode="eval")."""
        import shutil  # pylint: disable=import-outside-toplevel
        shutil.copytree(self.directory, str(directory))
        return self.config_for(directory, **overrides)
