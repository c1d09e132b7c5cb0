"""Never lose a run: checkpoint recovery without (or with a damaged) state file,
non-finite weights never saved, one writer per model_dir (issue 17)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.method import train
from simclr_tf.run import experiment, loop, preflight, run_lock, stop_signals
from simclr_tf.weights import checkpoints
from simclr_tf.run.modes import evaluate as modes_evaluate
from simclr_tf.run.modes import parts
from simclr_tf.config import ConfigError

from helpers.run_fixtures import config, write_run  # noqa: F401
from helpers.standin_trainer import standin_objective


class _Model(tf.Module):
    def __init__(self, value):
        super().__init__()
        self.v = tf.Variable(tf.fill([64], float(value)))


def _state(directory, value=0.0):
    model = _Model(value)
    return checkpoints.CheckpointState(str(directory), model, max_to_keep=5), model


def _saved(directory, steps):
    state, model = _state(directory)
    for step in steps:
        model.v.assign(tf.fill([64], float(step)))
        state.save(step)
    return state


def _files(directory):
    return sorted(os.listdir(directory))


def test_checkpoints_without_a_state_file_are_resumed_not_deleted(tmp_path):
    """A copied ckpt-4 in a new model_dir (no state file): kept, restored, recorded."""
    _saved(tmp_path / "a", (2, 4))
    copy = tmp_path / "b"
    copy.mkdir()
    for name in os.listdir(tmp_path / "a"):
        if name.startswith("ckpt-4."):
            shutil.copy(tmp_path / "a" / name, copy / name)
    before = _files(copy)
    state, model = _state(copy)
    assert state.recover() == str(copy / "ckpt-4")
    np.testing.assert_array_equal(model.v.numpy(), np.full([64], 4.0))
    assert set(before) <= set(_files(copy))  # nothing deleted
    assert tf.train.latest_checkpoint(str(copy)) == str(copy / "ckpt-4")  # rebuilt
    model.v.assign(tf.fill([64], 5.0))
    state.save(5)
    assert [os.path.basename(p) for p in state.manager.checkpoints] == ["ckpt-4", "ckpt-5"]


def test_a_deleted_state_file_hides_no_checkpoint(tmp_path):
    _saved(tmp_path, (1, 2, 3))
    os.remove(tmp_path / "checkpoint")
    assert checkpoints.latest(str(tmp_path)) == str(tmp_path / "ckpt-3")
    state, model = _state(tmp_path)
    assert state.recover().endswith("ckpt-3")
    assert model.v.numpy()[0] == 3.0
    assert [os.path.basename(p) for p in state.manager.checkpoints] == [
        "ckpt-1", "ckpt-2", "ckpt-3"]


def test_a_damaged_state_file_is_set_aside_and_rebuilt(tmp_path, caplog):
    _saved(tmp_path, (1, 2))
    with open(tmp_path / "checkpoint", "ab") as f:
        f.write(b"\x00\xff\xfe garbage {{")
    assert checkpoints.read_state(str(tmp_path))[1].startswith("damaged")
    assert checkpoints.latest(str(tmp_path)).endswith("ckpt-2")  # readers cope too
    state, model = _state(tmp_path)  # no traceback from CheckpointManager
    assert state.recover().endswith("ckpt-2")
    assert model.v.numpy()[0] == 2.0
    assert [n for n in _files(tmp_path) if n.startswith("checkpoint.damaged-")]
    assert checkpoints.read_state(str(tmp_path))[1] is None
    assert "moved it to" in caplog.text and "Rebuilt the checkpoint state file" in caplog.text


def test_a_complete_checkpoint_the_state_file_does_not_record_yet_is_kept(tmp_path):
    """Killed after the files were written, before the state file was updated."""
    _saved(tmp_path, (1,))
    recorded = (tmp_path / "checkpoint").read_bytes()
    _saved(tmp_path, (2,))
    (tmp_path / "checkpoint").write_bytes(recorded)  # still names ckpt-1 only
    state, model = _state(tmp_path)
    assert state.recover().endswith("ckpt-2")
    assert model.v.numpy()[0] == 2.0
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")


def test_only_provably_partial_writes_are_removed(tmp_path):
    state = _saved(tmp_path, (1, 2))
    del state
    # A save of step 3 killed while merging: its _temp folder and a half index.
    (tmp_path / "ckpt-3_temp").mkdir()
    (tmp_path / "ckpt-3_temp" / "part-00000-of-00001.index").write_bytes(b"x")
    (tmp_path / "ckpt-3.index").write_bytes(b"partial")
    (tmp_path / "ckpt-3.data-00000-of-00001").write_bytes(b"")
    # Data of a step 4 whose index was never written.
    (tmp_path / "ckpt-4.data-00000-of-00001").write_bytes(b"partial")
    state, model = _state(tmp_path)
    assert state.recover().endswith("ckpt-2")
    assert model.v.numpy()[0] == 2.0
    assert _files(tmp_path) == [
        "checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index",
        "ckpt-2.data-00000-of-00001", "ckpt-2.index"]


def test_an_unloadable_checkpoint_is_set_aside_never_deleted(tmp_path):
    """No state file, so a damaged ckpt-2 is not provably a partial write: moved to
    model_dir/unloadable/, and training goes on from ckpt-1."""
    _saved(tmp_path, (1, 2))
    os.remove(tmp_path / "checkpoint")
    data = tmp_path / "ckpt-2.data-00000-of-00001"
    damaged = data.read_bytes()[:40]
    data.write_bytes(damaged)
    # Readers see the truncation too (the data-size check), without reading tensors.
    assert checkpoints.latest(str(tmp_path)).endswith("ckpt-1")
    state, model = _state(tmp_path)
    assert state.recover().endswith("ckpt-1")
    assert model.v.numpy()[0] == 1.0
    aside = tmp_path / checkpoints.UNLOADABLE_DIR
    assert sorted(os.listdir(aside)) == ["ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    assert (aside / "ckpt-2.data-00000-of-00001").read_bytes() == damaged


def test_when_nothing_loads_nothing_is_changed_and_the_error_says_what_to_do(tmp_path):
    _saved(tmp_path, (1,))
    (tmp_path / "ckpt-1.index").write_bytes(b"garbage")
    before = {n: (tmp_path / n).read_bytes() for n in _files(tmp_path)}
    with pytest.raises(checkpoints.UnrecoverableCheckpointsError):
        _state(tmp_path)[0].recover()
    with pytest.raises(ConfigError) as info, preflight.flag_errors("model_dir"):
        _state(tmp_path)[0].recover()
    assert info.value.flag == "model_dir"
    assert "ckpt-1" in str(info.value) and "Nothing was changed" in str(info.value)
    assert {n: (tmp_path / n).read_bytes() for n in _files(tmp_path)} == before


def test_a_non_finite_checkpoint_is_never_resumed(tmp_path):
    """E.g. written by an older version: skipped (set aside), the previous one used."""
    state, model = _state(tmp_path)
    model.v.assign(tf.fill([64], 1.0))
    state.save(1)
    model.v.assign(tf.fill([64], np.inf))
    state.manager.save(checkpoint_number=2)  # bypasses the check, as old versions did
    fresh, restored = _state(tmp_path)
    assert fresh.recover().endswith("ckpt-1")
    assert restored.v.numpy()[0] == 1.0
    assert os.path.exists(tmp_path / checkpoints.UNLOADABLE_DIR / "ckpt-2.index")


def test_non_finite_weights_are_never_saved(tmp_path):
    state, model = _state(tmp_path)
    model.v.assign(tf.fill([64], np.nan))
    with pytest.raises(checkpoints.NonFiniteWeightsError, match="NaN or infinite"):
        state.save(1)
    assert not [n for n in _files(tmp_path) if n.startswith("ckpt")]


class _ExplodingTrainer:
    """Finite losses, but the weights go to inf at step 3 (as a learning rate that is
    inf in float32 does)."""
    steps_per_loop, optimizer = 1, None

    def __init__(self, model):
        self.model, self.step = model, 0
        # What the loop asks of it: the likely causes of a non-finite step.
        self.objective = standin_objective(self, train.StepOptions(temperature=0.5))

    def train_steps(self, iterator, calls):  # pylint: disable=unused-argument
        self.step += calls
        self.model.v.assign(tf.fill([64], np.inf if self.step >= 3 else float(self.step)))
        return dict(loss=np.float32(1.0), learning_rate=np.float32(0.1), num_examples=1)


def test_the_loop_stops_before_saving_non_finite_weights(tmp_path):
    state, model = _state(tmp_path)
    with pytest.raises(loop.NonFiniteLossError) as info:
        loop.train(trainer=_ExplodingTrainer(model), iterator=None, checkpoints=state,
                   total_steps=6, checkpoint_steps=2)
    message = str(info.value)
    assert "After step 4" in message and "not saving" in message
    assert message.rstrip(".").endswith("ckpt-2")
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")


def _disk_full(monkeypatch, from_step):
    """Checkpoint writes from step `from_step` on fail as on a full disk."""
    real = tf.train.CheckpointManager.save

    def save(self, checkpoint_number=None, **kwargs):
        if checkpoint_number >= from_step:
            raise tf.errors.ResourceExhaustedError(
                None, None, "ckpt_temp/part-00000-of-00001.data: No space left on device")
        return real(self, checkpoint_number=checkpoint_number, **kwargs)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", save)


def test_a_full_disk_at_a_checkpoint_names_the_last_good_one(tmp_path, monkeypatch):
    """No ResourceExhaustedError traceback: a CheckpointWriteError naming the step, the
    last good checkpoint (still recorded) and what to do."""
    state, model = _state(tmp_path)
    _disk_full(monkeypatch, from_step=4)
    with pytest.raises(checkpoints.CheckpointWriteError) as info:
        loop.train(trainer=_SignalledTrainer(model, None), iterator=None, checkpoints=state,
                   total_steps=6, checkpoint_steps=2)
    message = str(info.value)
    for part in ("checkpoint of step 4", "no space left", "ckpt-2", "Free space",
                 "--keep_checkpoint_max", "run the same command again"):
        assert part in message, message
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")


class _SignalledTrainer(_ExplodingTrainer):
    """Finite weights; the process receives `signum` (unless None) during step 3 (as
    from Ctrl-C or a scheduler)."""

    def __init__(self, model, signum):
        super().__init__(model)
        self.signum = signum

    def train_steps(self, iterator, calls):
        self.step += calls
        self.model.v.assign(tf.fill([64], float(self.step)))
        if self.step == 3 and self.signum is not None:
            os.kill(os.getpid(), self.signum)
        return dict(loss=np.float32(1.0), learning_rate=np.float32(0.1), num_examples=1)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_saves_the_current_step_and_returns(tmp_path, signum):
    """Ctrl-C (SIGINT) as SIGTERM: a checkpoint at the step reached, then the loop
    returns `interrupted` with the signal (run.py exits 128 + it); no KeyboardInterrupt,
    and the previous handlers are back afterwards."""
    before = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
    state, model = _state(tmp_path)
    results = loop.train(trainer=_SignalledTrainer(model, signum), iterator=None,
                         checkpoints=state, total_steps=10, checkpoint_steps=2)
    assert results == dict(global_step=3, interrupted=True, signal=int(signum))
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-3")
    assert {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS} == before


# ------------------------------------------------------------------ model_dir lock


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _write_lock(directory, **fields):
    record = dict(pid=os.getpid(), host=socket.gethostname(), mode="train",
                  started=time.time(), heartbeat=time.time(), token="other")
    record.update(fields)
    (directory / run_lock.LOCK_FILE).write_text(json.dumps(record))


def test_a_second_writer_is_refused_and_the_lock_is_released(tmp_path):
    lock = run_lock.acquire(str(tmp_path), "train")
    with pytest.raises(ConfigError) as info:
        run_lock.acquire(str(tmp_path), "export")
    message = str(info.value)
    assert info.value.flag == "model_dir"
    assert f"--mode=train run (pid {os.getpid()} on {socket.gethostname()}" in message
    assert "--break_lock" in message and "another --model_dir" in message
    lock.release()
    assert not (tmp_path / run_lock.LOCK_FILE).exists()
    run_lock.acquire(str(tmp_path), "export").release()


@pytest.mark.parametrize("fields, taken", [
    (dict(pid=None), False),  # this live process, this host: held
    (dict(pid="dead"), True),  # its process has ended
    (dict(host="another-host"), False),  # cannot tell: held while it beats
    (dict(host="another-host", heartbeat=time.time() - run_lock.STALE_SECS - 5), True),
])
def test_stale_locks_are_taken_over_live_ones_are_not(tmp_path, fields, taken):
    fields = dict(fields)
    if fields.get("pid") == "dead":
        fields["pid"] = _dead_pid()
    elif "pid" in fields:
        fields["pid"] = os.getpid()
    _write_lock(tmp_path, **fields)
    if taken:
        run_lock.acquire(str(tmp_path), "train").release()
    else:
        with pytest.raises(ConfigError, match="is in use by"):
            run_lock.acquire(str(tmp_path), "train")
        run_lock.acquire(str(tmp_path), "train", force=True).release()  # --break_lock


def test_run_refuses_a_locked_model_dir_before_building_and_eval_still_reads(
        tmp_path, monkeypatch):
    built = []

    def never(*args, **kwargs):
        built.append(1)
        raise RuntimeError("built")

    weights = tmp_path / "weights"  # embed and linear_probe need some (preflight)
    write_run(weights)
    monkeypatch.setattr(parts, "build_model", never)
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    with run_lock.acquire(str(model_dir), "train"):
        for mode in ("train", "embed", "linear_probe"):
            with pytest.raises(ConfigError, match="is in use by"):
                experiment.run(config(model_dir=str(model_dir), mode=mode,
                                      train_steps=1, eval_wait_secs=0,
                                      checkpoint=str(weights)))
        assert not built and not (model_dir / "flags.json").exists()
        with pytest.raises(RuntimeError, match="built"):  # a reader: no lock needed
            experiment.run(config(model_dir=str(model_dir), mode="eval",
                                  eval_wait_secs=1))
    with pytest.raises(RuntimeError, match="built"):
        experiment.run(config(model_dir=str(model_dir), mode="train", train_steps=1))
    assert not (model_dir / run_lock.LOCK_FILE).exists()  # released on the error


def test_an_evaluator_following_a_run_copes_with_a_damaged_state_file(tmp_path):
    _saved(tmp_path, (1, 2))
    with open(tmp_path / "checkpoint", "ab") as f:
        f.write(b"\xff")
    followed = list(modes_evaluate._checkpoints_to_evaluate(  # pylint: disable=protected-access
        config(mode="eval", model_dir=str(tmp_path), eval_wait_secs=1)))
    assert followed == [str(tmp_path / "ckpt-2")]


def test_a_checkpoint_is_not_saved_by_a_run_whose_lock_was_taken_over(tmp_path):
    model = parts.build_model(config(model_dir=str(tmp_path), train_steps=1),
                              tf.distribute.get_strategy(), 10)
    lock = run_lock.acquire(str(tmp_path), "train")
    state = checkpoints.CheckpointState(str(tmp_path), model, write_guard=lock.check)
    state.save(1)
    _write_lock(tmp_path, token="taken-over", pid=os.getpid() + 1)  # --break_lock elsewhere
    with pytest.raises(run_lock.LockLostError, match=r"was taken over by .*stopped "
                       r"writing there .*run the same command again to resume"):
        state.save(2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt-2")) == []
    (tmp_path / run_lock.LOCK_FILE).unlink()  # removed: the same
    with pytest.raises(run_lock.LockLostError, match="was removed"):
        state.save(3)
    lock.release()


@pytest.mark.large  # 20-27 s (under load)
def test_a_run_that_loses_its_lock_stops_writing_and_leaves_the_other_runs_lock(
        tmp_path, monkeypatch, skip_final_export):
    cfg = config(model_dir=str(tmp_path / "run"), train_steps=4, checkpoint_steps=2)
    save = checkpoints.CheckpointState.save

    def save_then_lose_the_lock(self, step):
        prefix = save(self, step)
        _write_lock(tmp_path / "run", token="taken-over", pid=os.getpid() + 1)
        return prefix

    monkeypatch.setattr(checkpoints.CheckpointState, "save", save_then_lose_the_lock)
    with pytest.raises(run_lock.LockLostError, match="was taken over"):
        experiment.run(cfg)
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert "ckpt-2.index" in names and not any(n.startswith("ckpt-4") for n in names)
    assert "result.json" not in names
    assert run_lock.read(str(tmp_path / "run" / run_lock.LOCK_FILE))["token"] == "taken-over"
