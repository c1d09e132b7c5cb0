"""A training run's checkpoints in model_dir: recover (resume with fallbacks, tidy
interrupted writes) and save (never non-finite weights)."""
import os
import time

import tensorflow as tf
from absl import logging

from simclr_tf.weights.checkpoints.files import _BASE, STATE_FILE, UNLOADABLE_DIR, _first_line, \
    _groups, _unreadable_tensor, candidates, latest, read_state, step_of, unreadable_reason
from simclr_tf.weights.checkpoints import plan
from simclr_tf.method.finite import non_finite_variables
from simclr_tf.weights.checkpoints.loading import _LOAD_ERRORS, NoLoadableCheckpointError, \
    restore_model


class NonFiniteWeightsError(FloatingPointError):
    """The weights to save hold NaN or infinite values."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (no space left on the device): the previous
    checkpoint stays recorded, the partial files go when the run resumes."""


# What TensorFlow's file system raises when a write runs out of space (ENOSPC, EDQUOT).
_NO_SPACE = (tf.errors.ResourceExhaustedError,)


class UnrecoverableCheckpointsError(NoLoadableCheckpointError):
    """`CheckpointState.recover`: model_dir has checkpoints, none loads, and not all of
    them are interrupted writes; nothing was changed.

    Attributes:
        directory: model_dir.
        failures: 'ckpt-<step>: <why it does not load>' for each kept checkpoint.
    """

    def __init__(self, directory, failures):
        failures = list(failures)
        super().__init__(directory, failures, message=(
            "no checkpoint in %r loads, and these are not interrupted writes:\n  %s\n"
            "Nothing was changed. To start this run again from step 0, move them out of "
            "the directory (or use another one); to go on from one of them, repair it or "
            "pass the flags of the run that wrote it." % (directory, "\n  ".join(failures))))


class CheckpointState:
    """The checkpoints of a training run in `model_dir`.

    Writes are atomic as far as a reader of model_dir can tell: TensorFlow writes a
    checkpoint's shards under `<prefix>_temp/`, merges them into `<prefix>.index` /
    `.data-*`, and only then rewrites the `checkpoint` state file (write to a temporary
    file, then rename). `recover` (at start) never deletes a checkpoint that loads:

    - the newest checkpoint that loads and holds finite values is restored, found in
      the state file *and* on disk, so a lost or damaged state file hides nothing (a
      damaged one is set aside as `checkpoint.damaged-<time>` and rebuilt);
    - a newer one that does not load is deleted only when it is provably an
      interrupted write (its `_temp` folder is still there, or an intact state file
      does not record it: TensorFlow records a checkpoint after writing it); any
      other is moved, whole, to `model_dir/unloadable/` with a warning;
    - when none loads but some are not interrupted writes, it stops with an error
      naming them rather than starting again from step 0.

    What to restore, remove and set aside is decided by `plan.recovery_order` and
    `plan.plan_recovery`, pure functions tested without files; `recover` does the I/O.

    `save` refuses weights that are not finite (`NonFiniteWeightsError`).

    Args:
        model_dir: the run's directory; checkpoints are always restored from here.
        model: the model (built).
        optimizer: the optimizer (built), or None for evaluation.
        max_to_keep: checkpoints kept (`keep_checkpoint_max`).
        save_dir: where this process writes its checkpoints, if not model_dir: a
            non-chief worker of a multi-worker run must take part in every save (the
            variables' values are synchronised across workers while saving) but must
            not write over the chief's files, so it writes to a scratch directory,
            cleared at start, and never changes model_dir.
        objective_state: the train objective's own state, {name: variable or
            trackable} (`simclr_tf.method.objectives.base.Objective.state`: an EMA target),
            saved and restored with the model; none for the built-in objectives.
    """

    def __init__(self, model_dir, model, optimizer=None, max_to_keep=5, save_dir=None,
                 write_guard=None, objective_state=None):
        items = dict(model=model)
        if optimizer is not None:
            items["optimizer"] = optimizer
        self.objective_state = dict(objective_state or {})
        if self.objective_state:
            items["objective"] = tf.train.Checkpoint(**self.objective_state)
        self.model = model
        self.optimizer = optimizer
        self.model_dir = model_dir
        self.save_dir = save_dir or model_dir
        self.owns_model_dir = self.save_dir == model_dir
        self.max_to_keep = max_to_keep if self.owns_model_dir else 1
        # Called before each save; raises to stop (a run that lost model_dir's lock).
        self.write_guard = write_guard
        self.checkpoint = tf.train.Checkpoint(**items)
        self.state_problem = None
        if self.owns_model_dir:
            self.state_problem = self._set_aside_damaged_state()
        elif tf.io.gfile.isdir(self.save_dir):
            tf.io.gfile.rmtree(self.save_dir)  # a scratch dir: nothing in it is read
        self.manager = self._new_manager()

    def _new_manager(self):
        return tf.train.CheckpointManager(self.checkpoint, self.save_dir,
                                          max_to_keep=self.max_to_keep,
                                          checkpoint_name=_BASE)

    def _set_aside_damaged_state(self):
        """Renames a state file that does not parse; returns the state's problem."""
        if not tf.io.gfile.isdir(self.model_dir):
            return None
        _, problem = read_state(self.model_dir)
        if problem and problem.startswith("damaged"):
            aside = os.path.join(self.model_dir, f"{STATE_FILE}.damaged-{int(time.time())}")
            tf.io.gfile.rename(os.path.join(self.model_dir, STATE_FILE), aside,
                               overwrite=True)
            logging.warning("The checkpoint state file of %s is %s; moved it to %s and "
                            "rebuilding the list from the checkpoint files.",
                            self.model_dir, problem, aside)
        return problem

    @property
    def latest(self):
        """The newest complete checkpoint in model_dir (None when there is none)."""
        return latest(self.model_dir)

    def candidates(self):
        """model_dir's checkpoints (state file and disk), newest first."""
        return candidates(self.model_dir)[0]

    def _variables(self):
        """What a checkpoint of this run holds: the model's and the optimizer's."""
        variables = list(self.model.variables)
        if self.optimizer is not None:
            variables += list(self.optimizer.variables)
        for value in self.objective_state.values():
            variables += list(getattr(value, "variables", None) or [value])
        return variables

    def _restore(self, prefix):
        """Restores `prefix` (its files already found readable by `recover`);
        returns None, or why it does not load."""
        try:
            if self.optimizer is not None:
                self.checkpoint.restore(prefix).assert_existing_objects_matched()
            else:
                restore_model(self.model, prefix)
        except _LOAD_ERRORS as error:
            return _first_line(error)
        bad = non_finite_variables(self._variables())
        if bad:
            return f"{len(bad)} tensors hold NaN or infinite values (e.g. {bad[0]})"
        return None

    def recover(self):
        """Restores the newest checkpoint of model_dir that loads and is finite, and
        tidies what an interrupted run left (see the class docstring).

        Returns:
            The restored prefix, or None when model_dir has no checkpoint.

        Raises:
            UnrecoverableCheckpointsError: checkpoints are there but none loads and
                not all of them are interrupted writes (nothing is changed then).
        """
        recorded = None  # a damaged or missing state file proves nothing
        if self.state_problem is None:
            recorded = {step_of(p, -1) for p in read_state(self.model_dir)[0]
                        if p == os.path.normpath(self._prefix(step_of(p, -1)))}
        groups = _groups(self.model_dir)
        unreadable, not_restored, restored = {}, {}, None
        for step, suspect in plan.recovery_order(groups, recorded):
            prefix = self._prefix(step)
            # A suspect is read in full before it is restored: a partial write must
            # never leave half-assigned weights behind.
            reason = unreadable_reason(prefix) or (suspect and _unreadable_tensor(prefix))
            if reason:
                unreadable[step] = reason
                continue
            reason = self._restore(prefix)
            if reason is None:
                restored = step
                break
            not_restored[step] = reason
        decided = plan.plan_recovery(groups, recorded, unreadable, not_restored, restored)
        restored = None if restored is None else self._prefix(restored)
        for step, reason, _ in decided.remove + decided.set_aside:
            logging.warning("Checkpoint %s-%d does not load (%s).", _BASE, step, reason)
        if not self.owns_model_dir:
            return restored
        if decided.refuse:
            raise UnrecoverableCheckpointsError(
                self.model_dir, [f"{_BASE}-{step}: {reason}"
                                 for step, reason, _ in decided.set_aside])
        for _, _, names in decided.remove:
            self._remove(names)
        for _, reason, names in decided.set_aside:
            self._set_aside(names, reason)
        for names in decided.remove_temp:  # a finished write whose _temp folder remained
            self._remove(names)
        if decided.rewrite_state:
            self._rewrite_state(restored)
        if restored is not None and (decided.remove or decided.set_aside):
            logging.warning("Resuming from %s, the newest checkpoint that loads.", restored)
        return restored

    def _prefix(self, step):
        return os.path.join(self.model_dir, f"{_BASE}-{step}")

    def _remove(self, names):
        for name in names:
            path = os.path.join(self.model_dir, name)
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            elif tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)
        if names:
            logging.warning("Removed the files of an interrupted checkpoint write: %s",
                            ", ".join(sorted(names)))

    def _set_aside(self, names, reason):
        if not names:
            return
        target = os.path.join(self.model_dir, UNLOADABLE_DIR)
        tf.io.gfile.makedirs(target)
        for name in names:
            tf.io.gfile.rename(os.path.join(self.model_dir, name),
                               os.path.join(target, name), overwrite=True)
        logging.warning("Moved %s (does not load: %s) to %s; delete it once you no "
                        "longer need it.", ", ".join(sorted(names)), reason, target)

    def _rewrite_state(self, restored):
        """Records the checkpoints now in model_dir, up to `restored`, and restarts the
        manager on that record (its rotation then covers them)."""
        step = step_of(restored, -1)
        kept = sorted(s for s, names in _groups(self.model_dir).items()
                      if s <= step and f"{_BASE}-{s}.index" in names)
        # With their files' times, so that the manager's rotation (keep_checkpoint_max)
        # covers them as if it had written them.
        times = [tf.io.gfile.stat(os.path.join(self.model_dir, f"{_BASE}-{s}.index")
                                  ).mtime_nsec / 1e9 for s in kept]
        tf.compat.v1.train.update_checkpoint_state(
            self.model_dir, model_checkpoint_path=f"{_BASE}-{step}",
            all_model_checkpoint_paths=[f"{_BASE}-{s}" for s in kept],
            all_model_checkpoint_timestamps=times,
            last_preserved_timestamp=min(times) - 1)
        self.manager = self._new_manager()
        if self.state_problem:
            logging.warning("Rebuilt the checkpoint state file of %s: %s.", self.model_dir,
                            ", ".join(f"{_BASE}-{s}" for s in kept))
        self.state_problem = None

    def save(self, step):
        """Saves a checkpoint at `step`; returns its prefix.

        Raises:
            NonFiniteWeightsError: some weight or optimizer slot is NaN or infinite
                (nothing is written).
            CheckpointWriteError: no space left to write it; the state file still
                records the last good checkpoint (named in the message), and the
                partial files are an interrupted write that `recover` removes.
            Whatever `write_guard` raises (`run_lock.LockLostError`: nothing written).
        """
        bad = non_finite_variables(self._variables())
        if bad:
            raise NonFiniteWeightsError(
                f"After step {step}, {len(bad)} weight or optimizer tensors hold NaN or "
                f"infinite values (e.g. {', '.join(bad[:3])}); not saving them.")
        if self.write_guard is not None:
            self.write_guard()
        try:
            return self.manager.save(checkpoint_number=int(step))
        except _NO_SPACE as error:
            raise CheckpointWriteError(
                f"Writing the checkpoint of step {step} to {self.model_dir} failed: no "
                f"space left on the device ({_first_line(error)}). Nothing "
                f"is lost: the last good checkpoint, {self.latest or 'none yet'}, is kept "
                "and still recorded.") from None
