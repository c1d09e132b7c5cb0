"""How the training loop stops (issue 34): a stop signal while the input blocks
(item 4), the interval a stop signal cuts short is logged (item 11), an input that
fails is an InputError, and the non-finite-loss message names the running train
mode's flags (item 9). In process, with small trainers; run.py end to end:
tests/test_reliability.py."""
import gc
import os
import signal
import threading
import time
import weakref

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.method import train
from simclr_tf.run import loop, run_lock, stop_signals
from simclr_tf.weights import checkpoints
from helpers.standin_trainer import standin_objective


class _Model(tf.Module):
    def __init__(self):
        super().__init__()
        self.v = tf.Variable(tf.zeros([8]))


def _state(directory):
    model = _Model()
    return checkpoints.CheckpointState(str(directory), model, max_to_keep=3), model


class _Trainer:
    """What the loop reads of a Trainer; each step reads one element of the iterator
    in a compiled call (as `train.Trainer`) and sets the weights to the step."""
    steps_per_loop, optimizer = 1, None

    def __init__(self, model, options=None):
        self.model = model
        self.options = options or train.StepOptions(temperature=0.5)
        # What the loop asks of it: the likely causes of a non-finite step.
        self.objective = standin_objective(self, self.options)
        self.counter = tf.Variable(0, dtype=tf.int64)

        @tf.function
        def steps(iterator, num_steps):
            for _ in tf.range(num_steps):
                value = tf.cast(next(iterator), tf.float32)
                with tf.control_dependencies([value]):  # as train.Trainer's steps
                    self.counter.assign_add(1)
                    self.model.v.assign(tf.fill([8], tf.cast(self.counter, tf.float32)))
            return dict(loss=value, learning_rate=tf.constant(0.1),
                        num_examples=tf.constant(1.0))

        self._steps = steps

    @property
    def step(self):
        return int(self.counter.numpy())

    def train_steps(self, iterator, num_steps):
        logs = self._steps(iterator, tf.constant(num_steps))
        return {name: value.numpy() for name, value in logs.items()}


def _blocking_input(after, blocked, release, strategy=None):
    """0, 1, 2, ... through a parallel map and a prefetch (as the training pipeline):
    element `after` never comes until `release` is set (`blocked` says it waits).
    The default strategy's iterator is a plain tf.data one (its read cannot be
    cancelled); OneDeviceStrategy's a distributed one (it can)."""

    def read(x):
        if x >= after:
            blocked.set()
            release.wait()
        return x

    def dataset(context=None):  # pylint: disable=unused-argument
        return tf.data.Dataset.range(10**9).map(
            lambda x: tf.numpy_function(read, [x], tf.int64, stateful=True),
            num_parallel_calls=2).prefetch(1)

    strategy = strategy or tf.distribute.get_strategy()
    return iter(strategy.distribute_datasets_from_function(dataset))


@pytest.fixture
def release():
    """Unblocks `_blocking_input` at the end (and after 60 s: a test that failed to
    stop then ends instead of hanging)."""
    event = threading.Event()
    timer = threading.Timer(60, event.set)
    timer.start()
    yield event
    event.set()
    timer.cancel()


def _signal_when(event, signum, delay=0.3):
    def send():
        if event.wait(60):
            time.sleep(delay)
            os.kill(os.getpid(), signum)

    threading.Thread(target=send, daemon=True).start()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_while_a_cancellable_input_blocks_saves_and_returns(
        tmp_path, monkeypatch, release, signum, capsys):
    """The step waits for a batch that never comes (a folder on a hung mount): the
    signal handler cannot run inside that call, so the watcher cancels it after the
    grace, and the loop saves the step reached, logs its interval and returns."""
    monkeypatch.setattr(stop_signals, "STOP_GRACE_SECS", 0.5)
    state, model = _state(tmp_path)
    blocked = threading.Event()
    logged = []
    _signal_when(blocked, signum)
    started = time.monotonic()
    iterator = _blocking_input(7, blocked, release,
                               tf.distribute.OneDeviceStrategy("/cpu:0"))
    results = loop.train(trainer=_Trainer(model), iterator=iterator, checkpoints=state,
                         total_steps=1000, checkpoint_steps=100,
                         hooks=[loop.Every(50, lambda step, logs: logged.append(step))])
    seconds = time.monotonic() - started
    assert not release.is_set(), "the input was released: the loop did not stop"
    assert results == dict(global_step=7, interrupted=True, signal=int(signum))
    _assert_saved_at(tmp_path, 7)
    assert logged == [7]  # the interrupted interval, at the checkpoint's step
    assert seconds < 30
    assert "training input was blocked" in capsys.readouterr().out


def _assert_saved_at(directory, step):
    assert tf.train.latest_checkpoint(str(directory)).endswith(f"ckpt-{step}")
    weights = tf.train.load_checkpoint(str(directory / f"ckpt-{step}")).get_tensor(
        "model/v/.ATTRIBUTES/VARIABLE_VALUE")
    assert weights[0] == step  # the weights of that step, not of one more or less


def test_a_stop_signal_while_an_uncancellable_input_blocks_saves_and_ends(
        tmp_path, monkeypatch, release, capsys):
    """The default strategy's plain iterator ignores the cancellation: the watcher
    saves the step reached, logs its interval, releases the lock and ends the
    process with 128 + the signal (here the end is recorded instead; it unblocks the
    input, so that the test's own call returns)."""
    monkeypatch.setattr(stop_signals, "STOP_GRACE_SECS", 0.5)
    monkeypatch.setattr(stop_signals, "CANCEL_WAIT_SECS", 0.5)
    ended = []

    def exit_process(status):
        ended.append((status, not (tmp_path / "run" / ".simclr_lock").exists()))
        release.set()

    monkeypatch.setattr(loop, "_exit_process", exit_process)
    (tmp_path / "run").mkdir()
    lock = run_lock.acquire(str(tmp_path / "run"), "train")
    state, model = _state(tmp_path / "run")
    blocked = threading.Event()
    logged = []
    _signal_when(blocked, signal.SIGTERM)
    try:
        results = loop.train(
            trainer=_Trainer(model), iterator=_blocking_input(7, blocked, release),
            checkpoints=state, total_steps=1000, checkpoint_steps=100,
            hooks=[loop.Every(50, lambda step, logs: logged.append(step))])
    finally:
        lock.release()
    assert ended == [(143, True)]  # the lock released before the end
    assert results == dict(global_step=7, interrupted=True, signal=int(signal.SIGTERM))
    _assert_saved_at(tmp_path / "run", 7)
    assert logged == [7]
    assert "training input was blocked" in capsys.readouterr().out


def _signalled_during_a_call(tmp_path, at, seconds):
    """Trains 10 steps; the call that starts at step `at` receives SIGTERM and then
    computes `seconds` longer (in Python: the handler runs, the watcher waits its
    grace). Returns the loop's result."""
    state, model = _state(tmp_path)
    trainer = _Trainer(model)
    slow = trainer.train_steps

    def train_steps(iterator, num_steps):
        if trainer.step == at:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(seconds)
        return slow(iterator, num_steps)

    trainer.train_steps = train_steps
    return loop.train(trainer=trainer, iterator=iter(tf.data.Dataset.range(100)),
                      checkpoints=state, total_steps=10, checkpoint_steps=5)


def test_a_stop_signal_waits_for_a_call_that_computes(tmp_path, monkeypatch):
    """A call that is slow but not blocked is not cancelled within the grace: the
    signal stops the loop once it ends, at a whole step."""
    monkeypatch.setattr(stop_signals, "STOP_GRACE_SECS", 3.0)
    results = _signalled_during_a_call(tmp_path, at=2, seconds=1.0)
    assert results["global_step"] == 3 and results["interrupted"]


def test_a_stop_signal_waits_for_the_first_call_longer(tmp_path, monkeypatch):
    """The first call traces and compiles the step (no earlier call to measure a stall
    against): a signal during it cancels it only after FIRST_CALL_GRACE_SECS, not after
    STOP_GRACE_SECS (the full suite, loaded, once saw its first call cancelled and the
    run stopped at step 0 four seconds into training)."""
    monkeypatch.setattr(stop_signals, "STOP_GRACE_SECS", 0.2)
    monkeypatch.setattr(stop_signals, "FIRST_CALL_GRACE_SECS", 5.0)
    # 1.5 s: past STOP_GRACE_SECS, within FIRST_CALL_GRACE_SECS.
    results = _signalled_during_a_call(tmp_path, at=0, seconds=1.5)
    assert results["global_step"] == 1 and results["interrupted"]
    _assert_saved_at(tmp_path, 1)


class _SignalledTrainer(_Trainer):
    """The process receives SIGTERM during step `at`."""

    def __init__(self, model, at):
        super().__init__(model)
        self.at = at

    def train_steps(self, iterator, num_steps):
        logs = super().train_steps(iterator, num_steps)
        if self.step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)
        return logs


def test_the_interval_a_stop_signal_cuts_short_is_logged(tmp_path):
    """ckpt-3 saved by SIGTERM has its metrics.jsonl/TensorBoard line at step 3 (the
    means of step 3 alone); hooks that are slow (evaluations: at_interrupt=False) do
    not run then."""
    state, model = _state(tmp_path)
    logged, evaluated = [], []
    hooks = [loop.Every(2, lambda step, logs: logged.append((step, float(logs["loss"])))),
             loop.Every(2, lambda step, logs: evaluated.append(step), at_interrupt=False)]
    results = loop.train(trainer=_SignalledTrainer(model, 3),
                         iterator=iter(tf.data.Dataset.range(100)), checkpoints=state,
                         total_steps=10, checkpoint_steps=5, hooks=hooks)
    assert results == dict(global_step=3, interrupted=True, signal=int(signal.SIGTERM))
    _assert_saved_at(tmp_path, 3)
    # Steps 1-2 read elements 0, 1 (mean 0.5); step 3 alone element 2.
    assert logged == [(2, 0.5), (3, 2.0)]
    assert evaluated == [2]


def test_a_stop_signal_after_a_logged_step_logs_nothing_twice(tmp_path):
    """A signal while the hooks of step 4 run: the loop stops at step 4, whose
    interval is logged once."""
    state, model = _state(tmp_path)
    logged = []

    def log(step, logs):
        logged.append(step)
        if step == 4:
            os.kill(os.getpid(), signal.SIGTERM)

    results = loop.train(trainer=_Trainer(model), iterator=iter(tf.data.Dataset.range(100)),
                         checkpoints=state, total_steps=10, checkpoint_steps=5,
                         hooks=[loop.Every(2, log)])
    assert results == dict(global_step=4, interrupted=True, signal=int(signal.SIGTERM))
    _assert_saved_at(tmp_path, 4)
    assert logged == [2, 4]


def test_the_loop_lets_go_of_its_input_when_it_returns(tmp_path):
    """Once `loop.train` returns, nothing of it holds the iterator. A reference cycle
    (the stop-signal watcher's callback closes over the iterator and the watcher) had
    kept the training pipeline alive until a garbage collection at some unrelated
    later allocation, where deleting it can wait out the tf.data autotuner's sleep
    (TensorFlow 2.21: up to 60 s; docs/testing.md)."""
    state, model = _state(tmp_path)
    iterator = iter(tf.data.Dataset.range(100))
    released = weakref.ref(iterator)
    gc.collect()
    gc.disable()  # only reference counting may free it
    try:
        results = loop.train(trainer=_Trainer(model), iterator=iterator, checkpoints=state,
                             total_steps=4, checkpoint_steps=2)
        del iterator
        assert results["global_step"] == 4
        assert released() is None
    finally:
        gc.enable()


def test_an_input_that_fails_is_an_input_error_naming_the_last_checkpoint(tmp_path):
    state, model = _state(tmp_path)

    def read(x):
        if x >= 5:
            raise ValueError("Image folder '/data', split 'train': an epoch yielded no "
                             "image")
        return x

    dataset = tf.data.Dataset.range(100).map(
        lambda x: tf.numpy_function(read, [x], tf.int64)).prefetch(1)
    with pytest.raises(loop.InputError) as info:
        loop.train(trainer=_Trainer(model), iterator=iter(dataset), checkpoints=state,
                   total_steps=10, checkpoint_steps=2)
    message = str(info.value)
    assert message.startswith("The training input failed at step 6: Image folder "
                              "'/data', split 'train': an epoch yielded no image."), message
    assert "ckpt-4" in message and "run the same command" in message
    assert "Traceback" not in message and "[[" not in message


class _StandIn:
    """A trainer for an objective that is only asked for its causes."""


def _nan_logs(rate):
    return dict(loss=np.float32("nan"), learning_rate=np.float32(rate))


@pytest.mark.parametrize("mode, named, not_named", [
    ("pretrain", "--temperature=0.2", "--distill_temperature"),
    ("distill", "--distill_temperature=1e-20", "--temperature="),
    ("finetune", None, "temperature"),
])
def test_the_non_finite_loss_names_the_running_modes_flags(mode, named, not_named):
    options = train.StepOptions(train_mode=mode, temperature=0.2, distill_temperature=1e-20)
    causes = standin_objective(_StandIn(), options).non_finite_causes()
    with pytest.raises(loop.NonFiniteLossError) as info:
        loop.check_finite(_nan_logs(0.3), 5, causes=causes, loss_scaling=False)
    message = str(info.value)
    assert "lower --learning_rate" in message and "rate: 0.3" in message
    if named:
        assert named in message
    assert not_named not in message


def test_a_rate_of_zero_is_not_blamed(tmp_path):
    """Step 1 of a warmup trains at rate 0: the learning rate cannot have made its
    loss NaN, so it is not suggested."""
    options = train.StepOptions(train_mode="distill", distill_temperature=1e-20)
    causes = standin_objective(_StandIn(), options).non_finite_causes()
    with pytest.raises(loop.NonFiniteLossError) as info:
        loop.check_finite(_nan_logs(0.0), 1, causes=causes, loss_scaling=False)
    message = str(info.value)
    assert "--learning_rate" not in message and "too high" not in message
    assert "not the learning rate" in message and "--distill_temperature=1e-20" in message


class _ExplodingTrainer(_Trainer):
    """Finite losses, weights inf from step 3."""

    def train_steps(self, iterator, num_steps):
        logs = super().train_steps(iterator, num_steps)
        if self.step >= 3:
            self.model.v.assign(tf.fill([8], np.inf))
        return logs


def test_non_finite_weights_name_the_running_modes_temperature(tmp_path):
    state, model = _state(tmp_path)
    trainer = _ExplodingTrainer(model, train.StepOptions(train_mode="distill",
                                                         distill_temperature=0.01))
    with pytest.raises(loop.NonFiniteLossError) as info:
        loop.train(trainer=trainer, iterator=iter(tf.data.Dataset.range(100)),
                   checkpoints=state, total_steps=6, checkpoint_steps=2)
    assert "--distill_temperature=0.01" in str(info.value)
    assert "--temperature" not in str(info.value)
