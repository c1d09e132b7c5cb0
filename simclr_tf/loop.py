"""The one training loop: steps in segments, checkpoints, and hooks at their cadence.

    train(trainer=..., iterator=..., checkpoints=..., total_steps=..., hooks=[...])
      while step < total_steps:
        segment = steps up to the next checkpoint, hook cadence or the end
        run_steps: compiled calls of `trainer.train_steps`; after every call:
                   progress, the loss must be finite, SIGTERM stops
        at a checkpoint step (or the last step): save
        every hook whose cadence divides the step (or at the last step)
      every hook's `end` (export, last kNN result, ...)

A SIGTERM (preemption on cloud VMs, Kubernetes, Slurm) or a SIGINT (Ctrl-C) saves a
checkpoint at the current step and returns `interrupted=True` and the `signal` (run.py
then exits with 128 + its number, 143 or 130, as a shell reports a process killed by
it, so schedulers retry); a non-finite loss, or weights that are not finite when a checkpoint is due,
raise `NonFiniteLossError` naming the last good checkpoint, and nothing after it is
saved; a checkpoint write that finds no space raises `CheckpointWriteError` naming it.
Segments only decide how many steps one call runs: the same steps run in more or
fewer calls, so cadences never change training numerics.
"""
import signal
import threading
import time

import keras
import numpy as np

from simclr_tf.checkpoints import CheckpointWriteError, NonFiniteWeightsError, step_of
from simclr_tf.train import non_finite_logs

class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN or infinite loss."""


class Hook:
    """A listener of the loop.

    `after_steps(step, logs)` runs after each step that is a multiple of `every`, and
    after the last one (never when `every` is 0); `end(step, logs)` once after the
    loop ends normally (not after a SIGTERM) and returns entries for the results.
    """

    every = 0

    def after_steps(self, step, logs):
        pass

    def end(self, step, logs):  # pylint: disable=unused-argument
        return {}


class Every(Hook):
    """Calls `fn(step, logs)` every `every` steps and after the last one; `end` returns
    the last dict `fn` returned (e.g. the last kNN result)."""

    def __init__(self, every, fn):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1. Received: every={every!r}")
        self.every = every
        self._fn = fn
        self._last = {}

    def after_steps(self, step, logs):
        self._last = self._fn(step, logs) or {}

    def end(self, step, logs):
        return self._last


class AtEnd(Hook):
    """Calls `fn(step, logs)` once when training ends normally (e.g. export); `end`
    returns what it returned."""

    def __init__(self, fn):
        self._fn = fn

    def end(self, step, logs):
        return self._fn(step, logs) or {}


# The signals that stop training with a checkpoint at the current step.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Terminated(Exception):
    """Raised after a compiled call once a stop signal arrived."""


class _StopOnSignals:
    """While active, a SIGTERM or SIGINT makes `check()` raise `_Terminated`, so the
    loop stops between two steps (a second one while the checkpoint is written changes
    nothing: the write finishes). Without this, Ctrl-C would raise KeyboardInterrupt
    in the middle of a step and lose everything since the last checkpoint. The
    previous handlers are restored after. Only the main thread can install
    handlers; elsewhere this does nothing."""

    def __init__(self):
        self.received = None  # the first signal's number
        self._previous = {}

    def _handle(self, signum, frame):  # pylint: disable=unused-argument
        if self.received is None:
            self.received = signum

    def check(self):
        if self.received is not None:
            raise _Terminated()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        return False


def train(*, trainer, iterator, checkpoints, total_steps, checkpoint_steps, hooks=(),
          progress=None):
    """Trains from the optimizer's current step to `total_steps`.

    Args:
        trainer: a `simclr_tf.train.Trainer`.
        iterator: an iterator over the distributed training dataset, positioned at
            the current step.
        checkpoints: a `simclr_tf.checkpoints.CheckpointState` to save into.
        total_steps: the step to train to.
        checkpoint_steps: steps between checkpoints (one is also saved at the end).
        hooks: `Hook`s, called in order at their cadence (after the checkpoint of
            that step, if any); `after_steps` gets the means of the logs since the
            hook's previous call.
        progress: a `simclr_tf.progress.TrainingProgress` for the whole run (what it
            shows depends on its style: nothing on a multi-worker run's other
            workers); None: nothing shown.

    Returns:
        dict(global_step, train_seconds, logs=means over the last checkpoint interval
        (`Means`), interrupted=False, **the entries of every hook's `end`); after a
        SIGTERM or SIGINT only dict(global_step, interrupted=True, signal=its number).

    Raises:
        NonFiniteLossError: naming the step and the last good checkpoint.
    """
    step, logs = trainer.step, {}
    start = time.perf_counter()
    cadences = [checkpoint_steps] + [hook.every for hook in hooks if hook.every]
    # Each hook sees the means of the steps since its previous call (the authors'
    # summaries are interval means); the results get the last checkpoint interval's.
    intervals = {id(hook): Means() for hook in hooks if hook.every}
    since_checkpoint = Means()
    with _StopOnSignals() as stop:
        while step < total_steps:
            segment = min([total_steps - step] + [every - step % every for every in cadences])
            try:
                segment_logs = run_steps(trainer, iterator, segment,
                                         after_call=stop.check, progress=progress)
            except NonFiniteLossError as error:
                # Nothing after the last good checkpoint is saved: the weights of the
                # failing step are not finite.
                raise NonFiniteLossError(
                    f"{error} Last good checkpoint (kept, not overwritten): "
                    f"{checkpoints.latest or 'none yet'}.") from None
            except _Terminated:
                return _save_on_signal(trainer.step, checkpoints, stop.received)
            step = trainer.step
            last = step == total_steps
            for means in [since_checkpoint, *intervals.values()]:
                means.add(segment_logs, segment)
            if step % checkpoint_steps == 0 or last:
                _save(checkpoints, step)
                logs = since_checkpoint.pop()
            for hook in hooks:
                if hook.every and (step % hook.every == 0 or last):
                    hook.after_steps(step, intervals[id(hook)].pop())
    results = dict(global_step=step, train_seconds=time.perf_counter() - start, logs=logs,
                   interrupted=False)
    for hook in hooks:
        results.update(hook.end(step, logs))
    return results


def _save(checkpoints, step):
    """Saves; weights that are not finite are never saved (NonFiniteLossError naming
    the last good checkpoint); a full disk is a CheckpointWriteError saying what to do."""
    try:
        return checkpoints.save(step)
    except NonFiniteWeightsError as error:
        raise NonFiniteLossError(
            f"{error} Likely a learning rate or weight decay too large for float32, or "
            "a temperature too low. Last good checkpoint (kept, not overwritten): "
            f"{checkpoints.latest or 'none yet'}.") from None
    except CheckpointWriteError as error:
        raise CheckpointWriteError(
            f"{error} Free space there (or keep fewer checkpoints: "
            "--keep_checkpoint_max), then run the same command again: it resumes from "
            "that checkpoint.") from None


def _save_on_signal(step, checkpoints, signum):
    latest = checkpoints.latest
    path = latest if latest and step_of(latest) == step else _save(checkpoints, step)
    print(f"{signal.Signals(signum).name} received: saved a checkpoint at step {step} "
          f"({path}) and stopped; run the same command again to resume.", flush=True)
    return dict(global_step=step, interrupted=True, signal=int(signum))


# Logs that are a state, not a per-step quantity: intervals report the last value.
LAST_VALUES = ("learning_rate", "num_examples", "examples_per_sec", "input_share")


class Means:
    """Means of training logs over the steps added since the last `pop` (each
    `add(logs, steps)` weighs logs that are means over `steps` steps); for
    `LAST_VALUES` the last value added."""

    def __init__(self):
        self._sums, self._last, self._steps = {}, {}, 0

    def add(self, logs, steps):
        for name, value in logs.items():
            if name in LAST_VALUES:
                self._last[name] = value
            else:
                self._sums[name] = self._sums.get(name, 0.0) + float(value) * steps
        self._steps += steps

    def pop(self):
        """The means (and last values) so far, then starts a new interval."""
        result = {name: np.float32(total / max(self._steps, 1))
                  for name, total in self._sums.items()}
        result.update(self._last)
        self._sums, self._last, self._steps = {}, {}, 0
        return result


def run_steps(trainer, iterator, num_steps, *, after_call=None, progress=None):
    """Trains `num_steps` steps; returns the means of their logs (`Means`;
    `examples_per_sec` and `input_share`, the share of the time spent waiting for
    input, over the whole segment).

    Args:
        trainer: a `simclr_tf.train.Trainer` (`steps_per_loop` steps per call).
        iterator: an iterator over a distributed dataset.
        num_steps: how many steps to run now (not the global target).
        after_call: optional callable run after each compiled call (e.g. to stop on
            SIGTERM by raising).
        progress: a `TrainingProgress` of the whole run to update after each call,
            or None.

    Raises:
        NonFiniteLossError: when the loss or the gradient norm is NaN or infinite.
    """
    if not isinstance(num_steps, int) or num_steps < 0:
        raise ValueError(f"num_steps must be an int >= 0. Received: num_steps={num_steps!r}")
    done, means, examples, seconds, waited = 0, Means(), 0.0, 0.0, 0.0
    while done < num_steps:
        calls = min(trainer.steps_per_loop, num_steps - done)
        start = time.perf_counter()
        logs = trainer.train_steps(iterator, calls)
        elapsed = time.perf_counter() - start
        done += calls
        objective = getattr(trainer, "objective", None)  # a Trainer's; a test's may lack one
        causes = objective.non_finite_causes() if objective is not None else ()
        check_finite(logs, trainer.step, causes=causes,
                     loss_scaling=isinstance(trainer.optimizer,
                                             keras.optimizers.LossScaleOptimizer))
        # Images per second (a pretraining example is one image, two views).
        examples += float(logs["num_examples"]) * calls
        seconds += elapsed
        waited += float(logs.get("data_wait", 0.0)) * calls
        logs["examples_per_sec"] = np.float32(
            logs["num_examples"] * calls / max(elapsed, 1e-9))
        if "data_wait" in logs:  # not measured under op determinism
            logs["input_share"] = np.float32(
                min(float(logs["data_wait"]) * calls / max(elapsed, 1e-9), 1.0))
        means.add(logs, calls)
        if progress is not None:
            progress.update(trainer.step, logs)
        if after_call is not None:
            after_call()
    result = means.pop()
    if done:
        result["examples_per_sec"] = np.float32(examples / max(seconds, 1e-9))
        if "data_wait" in result:
            # The share of the segment's time its steps waited for input.
            result["input_share"] = np.float32(min(waited / max(seconds, 1e-9), 1.0))
    return result


def check_finite(logs, step, *, causes=(), loss_scaling):
    """Raises NonFiniteLossError when the loss or the gradient norm is not finite.

    Args:
        causes: the objective's own likely causes, e.g. ('a temperature too low
            (temperature=0.1)',): `Objective.non_finite_causes`.
    """
    what = non_finite_logs(logs)
    if what is None:
        return
    raise NonFiniteLossError(
        f"The training {what} at step {step}; stopping. Likely causes: "
        f"a learning rate too high (this step's rate: {float(logs['learning_rate']):g}; "
        "lower --learning_rate or lengthen --warmup_epochs), "
        + "".join(f"{cause}, " for cause in causes) + "or "
        + ("float16 overflow (try --mixed_precision=bfloat16 or float32)"
           if loss_scaling else "mixed precision (try float32)")
        + ". The weights after this step are not finite: do not save them; "
        "resume from the last checkpoint.")
