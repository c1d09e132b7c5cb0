"""Checkpoints: the one place that knows what weights a path holds and loads them.

- `resolve(path)`: a checkpoint prefix, a run directory, one of our SavedModel
  exports, or one of the authors' released models -> `Weights` (kind, prefix, step).
- `load_into(model, path, whole_model=...)`: every variable (evaluate, export), or
  the encoder and projection head only (initialise from another run: its supervised
  head may have another number of classes); at least the encoder must load, so a
  checkpoint that matches nothing fails instead of leaving random weights.
- `open_encoder(path)`: an encoder to evaluate, from any of those paths.
- `step_of(prefix)`: the global step of a checkpoint.
- `CheckpointState`: a training run's checkpoints in model_dir (object-based
  `tf.train.Checkpoint`s of model + optimizer, slots and step included): save,
  resume with fallbacks, clean-up of interrupted writes; what `recover` restores,
  removes and sets aside is `plan.plan_recovery`, decided without I/O.

The package names no flag: a checkpoint that does not fit raises
`CheckpointMismatchError`, a directory without one that loads
`NoLoadableCheckpointError` (`UnrecoverableCheckpointsError` from `recover`), and
`preflight.flag_errors(flag)` turns them into the ConfigError of the flag that named
the path.
"""
from simclr_tf.weights.checkpoints.files import (
    STATE_FILE, UNLOADABLE_DIR, candidates, deleted, latest, missing_data_bytes,
    object_variable_shapes, read_state, step_of, unreadable_reason)
from simclr_tf.weights.checkpoints.loading import (
    CHECKPOINT, EXPORT, RELEASED, CheckpointMismatchError, NoLoadableCheckpointError, Weights,
    initialize_from, load_into, load_latest, open_encoder, recorded_run_config, resolve,
    resolve_checkpoint_path, restore_model)
from simclr_tf.weights.checkpoints.state import CheckpointState, CheckpointWriteError, \
    NonFiniteWeightsError, UnrecoverableCheckpointsError
from simclr_tf.method.finite import non_finite_variables

__all__ = [
    "CHECKPOINT", "EXPORT", "RELEASED", "STATE_FILE", "UNLOADABLE_DIR",
    "CheckpointMismatchError", "CheckpointState", "CheckpointWriteError",
    "NoLoadableCheckpointError",
    "NonFiniteWeightsError", "UnrecoverableCheckpointsError", "Weights", "candidates",
    "deleted", "initialize_from", "latest", "load_into", "load_latest", "missing_data_bytes",
    "non_finite_variables", "object_variable_shapes", "open_encoder", "read_state",
    "recorded_run_config", "resolve", "resolve_checkpoint_path", "restore_model", "step_of",
    "unreadable_reason",
]
