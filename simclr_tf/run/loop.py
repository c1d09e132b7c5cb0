"""The one training loop: steps in segments, checkpoints, and hooks at their cadence.

    train(trainer=..., iterator=..., checkpoints=..., total_steps=..., hooks=[...])
      while step < total_steps:
        segment = steps up to the next checkpoint, hook cadence or the end
        _run_calls: compiled calls of `trainer.train_steps`; after every call:
                    progress, the loss must be finite, SIGTERM stops
        at a checkpoint step (or the last step): save
        every hook whose cadence divides the step (or at the last step)
      every hook's `end` (export, last kNN result, ...)

A SIGTERM (preemption on cloud VMs, Kubernetes, Slurm) or a SIGINT (Ctrl-C) saves a
checkpoint at the current step, logs the interval it interrupted (the hooks that
record, `Hook.at_interrupt`) and returns `interrupted=True` and the `signal` (run.py
then exits with 128 + its number, 143 or 130, as a shell reports a process killed by
it, so schedulers retry). It does so also while a compiled call waits for input that
does not come (a folder on a hung mount): Python runs a signal handler only between
bytecodes, never inside that call, so a watcher thread (woken by the signal through
`signal.set_wakeup_fd`; `simclr_tf.run.stop_signals`) cancels a call still running
`STOP_GRACE_SECS` after the signal and longer than `STALL_FACTOR` times the longest
call so far. Where the
iterator's read cannot be cancelled (the default strategy's plain tf.data iterator)
and the call is still blocked `CANCEL_WAIT_SECS` later, the watcher saves and logs
itself, releases model_dir's lock and ends the process with 128 + the signal's
number (the exit status run.py gives): nothing else can end that call.
A non-finite loss, or weights that are not finite when a checkpoint is due,
raise `NonFiniteLossError` naming the last good checkpoint, and nothing after it is
saved; a checkpoint write that finds no space raises `CheckpointWriteError` naming it;
an input pipeline that fails (files gone, an epoch without images) `InputError`.
Segments only decide how many steps one call runs: the same steps run in more or
fewer calls, so cadences never change training numerics.
"""
import contextlib
import os
import re
import signal
import sys
import threading
import time

import keras
import numpy as np
import tensorflow as tf

from simclr_tf.run import run_lock
from simclr_tf.run.stop_signals import StopOnSignals
from simclr_tf.weights.checkpoints import (CheckpointWriteError, NonFiniteWeightsError,
                                           step_of)
from simclr_tf.method.finite import non_finite_logs

class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN or infinite loss."""


class InputError(RuntimeError):
    """The training input failed (files gone or unreadable, an epoch without any
    image): the steps since the last checkpoint are lost, the checkpoints kept."""


class Hook:
    """A listener of the loop.

    `after_steps(step, logs)` runs after each step that is a multiple of `every`, and
    after the last one (never when `every` is 0); when `at_interrupt`, also at the
    step where a SIGTERM or SIGINT stopped training (after its checkpoint), with the
    interval it cut short, so that what records the intervals (summaries,
    metrics.jsonl, progress lines) has the step of that checkpoint too; `end(step,
    logs)` once after the loop ends normally (not after a signal) and returns
    entries for the results.
    """

    every = 0
    at_interrupt = False

    def after_steps(self, step, logs):
        pass

    def end(self, step, logs):  # pylint: disable=unused-argument
        return {}


class Every(Hook):
    """Calls `fn(step, logs)` every `every` steps and after the last one; `end` returns
    the last dict `fn` returned (e.g. the last kNN result). `at_interrupt`: also at a
    stop signal's step (see `Hook`); False for what is slow (an evaluation), since a
    preempted run has seconds to exit."""

    def __init__(self, every, fn, *, at_interrupt=True):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1. Received: every={every!r}")
        self.every = every
        self.at_interrupt = bool(at_interrupt)
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


def train(*, trainer, iterator, checkpoints, total_steps, checkpoint_steps, hooks=(),
          progress=None):
    """Trains from the optimizer's current step to `total_steps`.

    Args:
        trainer: a `simclr_tf.method.train.Trainer`.
        iterator: an iterator over the distributed training dataset, positioned at
            the current step.
        checkpoints: a `simclr_tf.weights.checkpoints.CheckpointState` to save into.
        total_steps: the step to train to.
        checkpoint_steps: steps between checkpoints (one is also saved at the end).
        hooks: `Hook`s, called in order at their cadence (after the checkpoint of
            that step, if any); `after_steps` gets the means of the logs since the
            hook's previous call.
        progress: a `simclr_tf.run.progress.TrainingProgress` for the whole run (what it
            shows depends on its style: nothing on a multi-worker run's other
            workers); None: nothing shown.

    Returns:
        dict(global_step, train_seconds, logs=means over the last checkpoint interval
        (`Means`), interrupted=False, **the entries of every hook's `end`); after a
        SIGTERM or SIGINT only dict(global_step, interrupted=True, signal=its number).

    Raises:
        NonFiniteLossError: naming the step and the last good checkpoint.
        InputError: the input pipeline failed; names the last checkpoint.
    """
    step, logs = trainer.step, {}
    start = time.perf_counter()
    cadences = [checkpoint_steps] + [hook.every for hook in hooks if hook.every]
    # Each hook sees the means of the steps since its previous call (the authors'
    # summaries are interval means); the results get the last checkpoint interval's.
    intervals = {id(hook): Means() for hook in hooks if hook.every}
    since_checkpoint = Means()

    def stop_stuck(signum):
        # The watcher thread, while the main thread's call blocks for good.
        status = 128 + int(signum)
        try:
            _stop_on_signal(trainer, iterator, checkpoints, stop, hooks, intervals)
        except Exception as error:  # pylint: disable=broad-except
            print(f"run.py: error: {signal.Signals(signum).name} received while the "
                  f"training input was blocked, and stopping failed: {error}",
                  file=sys.stderr)
            status = 1
        run_lock.release_held()
        sys.stdout.flush()
        sys.stderr.flush()
        _exit_process(status)

    with StopOnSignals(on_stuck=stop_stuck) as stop:
        while step < total_steps and not stop.requested:
            segment = min([total_steps - step] + [every - step % every for every in cadences])
            try:
                segment_logs, covered = _run_calls(trainer, iterator, segment, stop=stop,
                                                   progress=progress)
            except NonFiniteLossError as error:
                # Nothing after the last good checkpoint is saved: the weights of the
                # failing step are not finite.
                raise NonFiniteLossError(
                    f"{error} Last good checkpoint (kept, not overwritten): "
                    f"{checkpoints.latest or 'none yet'}.") from None
            except InputError as error:
                raise InputError(
                    f"{error} The checkpoints saved so far are kept (the last: "
                    f"{checkpoints.latest or 'none yet'}): once the input reads again, "
                    "run the same command to resume from it.") from None
            step = trainer.step
            for means in [since_checkpoint, *intervals.values()]:
                means.add(segment_logs, covered)
            if stop.requested:
                break
            last = step == total_steps
            if step % checkpoint_steps == 0 or last:
                _save(checkpoints, step, _causes(trainer))
                logs = since_checkpoint.pop()
            for hook in hooks:
                if hook.every and (step % hook.every == 0 or last):
                    hook.after_steps(step, intervals[id(hook)].pop())
        if stop.requested:
            return _stop_on_signal(trainer, iterator, checkpoints, stop, hooks, intervals)
    results = dict(global_step=step, train_seconds=time.perf_counter() - start, logs=logs,
                   interrupted=False)
    for hook in hooks:
        results.update(hook.end(step, logs))
    return results


def _causes(trainer):
    """The objective's own likely causes of a non-finite step (its flags, e.g. its
    temperature)."""
    return tuple(trainer.objective.non_finite_causes())


def _save(checkpoints, step, causes):
    """Saves; weights that are not finite are never saved (NonFiniteLossError naming
    the last good checkpoint); a full disk is a CheckpointWriteError saying what to do."""
    try:
        return checkpoints.save(step)
    except NonFiniteWeightsError as error:
        raise NonFiniteLossError(
            f"{error} Likely a learning rate or weight decay too large for float32"
            + "".join(f", or {cause}" for cause in causes)
            + ". Last good checkpoint (kept, not overwritten): "
            f"{checkpoints.latest or 'none yet'}.") from None
    except CheckpointWriteError as error:
        raise CheckpointWriteError(
            f"{error} Free space there (or keep fewer checkpoints: "
            "--keep_checkpoint_max), then run the same command again: it resumes from "
            "that checkpoint.") from None


def _stop_on_signal(trainer, iterator, checkpoints, stop, hooks, intervals):
    """After a stop signal: a checkpoint at the step reached (unless there is one),
    the interrupted interval to the hooks that record intervals (`at_interrupt`),
    then the loop's result. Once, whichever thread comes first (`stop.stopping`)."""
    with stop.stopping:
        if stop.result is None:
            stop.result = _stop_once(trainer, iterator, checkpoints, stop, hooks,
                                     intervals)
        return stop.result


def _stop_once(trainer, iterator, checkpoints, stop, hooks, intervals):
    step, signum = trainer.step, stop.received
    latest = checkpoints.latest
    path = (latest if latest and step_of(latest) == step
            else _save(checkpoints, step, _causes(trainer)))
    segment = stop.segment  # from the watcher: the calls of the segment it cut short
    if segment is not None and segment.steps:
        for means in intervals.values():
            means.add(segment.means(), segment.steps)
    for hook in hooks:
        if hook.every and hook.at_interrupt and intervals[id(hook)].steps:
            hook.after_steps(step, intervals[id(hook)].pop())
    blocked = ""
    if stop.cancelled:
        # Its reads may never return: destroying the iterator would wait for them.
        _park(iterator)
        blocked = (" The training input was blocked (no batch came): the step waiting "
                   "for it was cancelled; check that the training data is readable.")
    print(f"{signal.Signals(signum).name} received: saved a checkpoint at step {step} "
          f"({path}) and stopped; run the same command again to resume.{blocked}",
          flush=True)
    return dict(global_step=step, interrupted=True, signal=int(signum))


def _exit_process(status):
    """Ends the process at once (a thread of it blocks in a call that cannot end)."""
    os._exit(status)  # pylint: disable=protected-access


def _park(obj):
    """Keeps `obj` referenced until the process exits, by a daemon thread that never
    ends (a module global would be released, and `obj` destroyed, at exit)."""

    def hold(obj, forever):  # pylint: disable=unused-argument
        forever.wait()

    threading.Thread(target=hold, args=(obj, threading.Event()), daemon=True,
                     name="simclr-blocked-input").start()


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

    @property
    def steps(self):
        """The steps added since the last `pop`."""
        return self._steps

    def means(self):
        """The means (and last values) so far."""
        result = {name: np.float32(total / max(self._steps, 1))
                  for name, total in self._sums.items()}
        result.update(self._last)
        return result

    def pop(self):
        """The means (and last values) so far, then starts a new interval."""
        result = self.means()
        self._sums, self._last, self._steps = {}, {}, 0
        return result


def run_steps(trainer, iterator, num_steps, *, after_call=None, progress=None):
    """Trains `num_steps` steps; returns the means of their logs (`Means`;
    `examples_per_sec` and `input_share`, the share of the time spent waiting for
    input, over the whole segment).

    Args:
        trainer: a `simclr_tf.method.train.Trainer` (`steps_per_loop` steps per call).
        iterator: an iterator over a distributed dataset.
        num_steps: how many steps to run now (not the global target).
        after_call: optional callable run after each compiled call.
        progress: a `TrainingProgress` of the whole run to update after each call,
            or None.

    Raises:
        NonFiniteLossError: when the loss or the gradient norm is NaN or infinite.
        InputError: when the input pipeline fails.
    """
    return _run_calls(trainer, iterator, num_steps, after_call=after_call,
                      progress=progress)[0]


def _run_calls(trainer, iterator, num_steps, *, stop=None, after_call=None, progress=None):
    """`run_steps`, stopping early (before a call, or when its call was cancelled)
    once `stop` (a `StopOnSignals`) has a stop request; returns (the means of the
    logs, the steps they cover). A cancelled call of several steps returns no logs:
    the steps it completed count in `trainer.step`, not in the means."""
    if not isinstance(num_steps, int) or num_steps < 0:
        raise ValueError(f"num_steps must be an int >= 0. Received: num_steps={num_steps!r}")
    done, means, examples, seconds, waited = 0, Means(), 0.0, 0.0, 0.0
    loss_scaling = isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
    if stop is not None:
        stop.segment = means  # what a stop from the watcher thread logs
    while done < num_steps:
        if stop is not None and stop.requested:
            break
        calls = min(trainer.steps_per_loop, num_steps - done)
        start = time.perf_counter()
        try:
            with stop.calling() if stop is not None else contextlib.nullcontext():
                logs = trainer.train_steps(iterator, calls)
        except _INPUT_FAILURES as error:
            if "IteratorGetNext" not in error.message:
                raise
            raise InputError(f"The training input failed at step {trainer.step + 1}: "
                             f"{_input_failure(error.message)}.") from None
        if stop is not None and stop.cancelled:
            break
        elapsed = time.perf_counter() - start
        done += calls
        check_finite(logs, trainer.step, causes=_causes(trainer),
                     loss_scaling=loss_scaling)
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
    if stop is not None:
        stop.segment = None
    result = means.pop()
    if done:
        result["examples_per_sec"] = np.float32(examples / max(seconds, 1e-9))
        if "data_wait" in result:
            # The share of the segment's time its steps waited for input.
            result["input_share"] = np.float32(min(waited / max(seconds, 1e-9), 1.0))
    return result, done


# The errors of an input pipeline that fails (a file gone or unreadable, a source's
# own error raised in it, the data ending), told from the step's own by the op that
# raised them: the iterator's read. A peer lost mid-run (distribute.PEER_FAILURES) and
# a cancelled call are not among them.
_INPUT_FAILURES = (tf.errors.InvalidArgumentError, tf.errors.UnknownError,
                   tf.errors.NotFoundError, tf.errors.DataLossError,
                   tf.errors.PermissionDeniedError, tf.errors.FailedPreconditionError,
                   tf.errors.OutOfRangeError)


def _input_failure(message):
    """What TensorFlow's message of a failed input pipeline says went wrong: the
    Python error raised in it (e.g. a source's 'yielded no image'), else its first
    line, without the graph, node and iterator preamble."""
    lines = [line.strip() for line in message.splitlines()]
    raised = [line for line in lines
              if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", line)]
    if raised:
        return raised[-1].split(": ", 1)[1].rstrip(".")
    preamble = ("Graph execution error", "Detected at node", "<stack traces", "[[")
    text = next((line for line in lines if line and not line.startswith(preamble)),
                message.strip())
    text = re.sub(r"^.*Iterator::[\w:]+: ", "", text)
    return re.sub(r"\s*\[\[.*$|\s*\[Op:.*$", "", text).rstrip(".")


def check_finite(logs, step, *, causes=(), loss_scaling):
    """Raises NonFiniteLossError when the loss or the gradient norm is not finite,
    naming the likely causes: the learning rate unless this step's is 0 (the start of
    the warmup: no update had moved the weights yet), the objective's own (`causes`:
    `Objective.non_finite_causes`, e.g. its temperature), the precision."""
    what = non_finite_logs(logs)
    if what is None:
        return
    rate = float(logs["learning_rate"])
    own, causes = causes, []
    if rate > 0:
        causes.append(f"a learning rate too high (this step's rate: {rate:g}; lower "
                      "--learning_rate or lengthen --warmup_epochs)")
    causes.extend(own)
    causes.append("float16 overflow (try --mixed_precision=bfloat16 or float32)"
                  if loss_scaling else "mixed precision (try float32)")
    likely = ", ".join(causes[:-1]) + (", or " if len(causes) > 2 else " or ") + causes[-1] \
        if len(causes) > 1 else causes[0]
    not_rate = (" (not the learning rate: this step's is 0, and no update had moved "
                "the weights yet)" if rate == 0 else "")
    raise NonFiniteLossError(
        f"The training {what} at step {step}; stopping. Likely causes: {likely}"
        f"{not_rate}. The weights after this step are not finite: do not save them; "
        "resume from the last checkpoint.")
