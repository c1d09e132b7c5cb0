"""The modes of `--mode`: one table, asked by the flag's choices, `Config.validate`,
`preflight` and `experiment`; each mode's code is one module of `simclr_tf.run.modes`.

This module imports nothing of TensorFlow (run.py checks the flags before TensorFlow
is imported). The built-in modes' functions are called by name in
`simclr_tf.run.experiment.mode_functions` (a reader follows them there); a mode
registered from outside names its functions as 'module:function', imported when the
mode runs. A new mode is one `Mode` row (`register`) plus its function
`(config, strategy, context) -> {name: value}` in its module.
"""
import dataclasses
import importlib

from simclr_tf.config import bounds, tables


@dataclasses.dataclass(frozen=True)
class Mode:
    """What a mode does with a run directory, for the checks and the dispatch.

    Attributes:
        name: the value of --mode.
        parts: a registered mode's functions, 'module:function' each, in the order
            it runs them (a SIGTERM during training stops the rest). Empty for the
            built-in modes: `simclr_tf.run.experiment.mode_functions` names theirs.
        help: one phrase for --help.
        trains: it trains a model. Its record is model_dir's flags.json /
            result.json (what `open_encoder` and users read; the other modes write
            flags.<mode>.json / result.<mode>.json and never overwrite them); it
            needs the train split, a batch the replicas divide and a training
            length; --final_linear_probe runs after it.
        needs_model_dir: --model_dir is required. False: --checkpoint may name the
            weights instead (the run only reads them).
        takes_lock: it writes model_dir, so it holds its lock. False: it only reads
            model_dir's checkpoints (and writes its own result files), so it may
            follow a running job.
        needs_checkpoint: model_dir (or --checkpoint, where `needs_model_dir` is
            False) must hold weights before anything is built. A mode that does
            not take the lock may instead wait for them (--eval_wait_secs).
        labelled_splits: the split flags it reads labels from (checked to exist and
            be labelled before anything is built).
        evaluators: the evaluators (`simclr_tf.evaluation.registry` names, in the
            order they run) it runs on each checkpoint it reads: --evaluators'
            default (`tables.evaluators.resolve`); a training mode's monitors during
            training are its train mode's instead. Empty: it runs none. With
            'supervised' it evaluates the head on --eval_split
            (`tables.evaluators.evaluates_head`: labels, and a run with the head).
        exports: it writes the --export_format exports (a mode that trains does
            too, at its end): the packages each format needs are checked first.
    """
    name: str
    parts: tuple
    help: str
    trains: bool = False
    needs_model_dir: bool = True
    takes_lock: bool = True
    needs_checkpoint: bool = False
    labelled_splits: tuple = ()
    evaluators: tuple = ()
    exports: bool = False

    def functions(self):
        """The functions of `parts`, imported now."""
        found = []
        for part in self.parts:
            module, _, name = part.partition(":")
            found.append(getattr(importlib.import_module(module), name))
        return found


MODES = {mode.name: mode for mode in (
    Mode("train", (), "train", trains=True),
    Mode("eval", (),
         "eval (the supervised head of model_dir's latest checkpoint on --eval_split)",
         needs_model_dir=False, takes_lock=False, needs_checkpoint=True, evaluators=("supervised",)),
    Mode("train_then_eval", (), "train_then_eval", trains=True, evaluators=("supervised",)),
    Mode("export", (),
         "export (the --export_format exports of the latest checkpoint; a SavedModel "
         "by default)", needs_checkpoint=True, exports=True),
    Mode("linear_probe", (),
         "linear_probe (kNN and the L-BFGS probe on frozen h)", needs_model_dir=False,
         needs_checkpoint=True, labelled_splits=("train_split", "eval_split"),
         evaluators=("linear_probe",)),
    Mode("embed", (),
         "embed (h of a split to .npz/.parquet)", needs_model_dir=False,
         needs_checkpoint=True),
)}


def register(mode):
    """Adds `mode` to the table (a mode defined outside this package); returns it."""
    return tables.add_row(MODES, mode, Mode, "mode")


def get(name):
    """The `Mode` called `name`; ValueError naming the modes otherwise."""
    return tables.get_row(MODES, name, "mode")


def _training_modes():
    return bounds.either(name for name, mode in MODES.items() if mode.trains)


# Where a training-only field applies (`fields.field(..., applies=...)`): a mode that
# trains (--jit_compile compiles the train step; --mode=eval has none).
TRAINING = bounds.applies("mode", lambda name: get(name).trains,
                          lambda: f"to training (--mode={_training_modes()})",
                          "train (--mode=train)")


def help_text():
    """The --mode help: every mode's phrase."""
    return "What to run: " + "; ".join(mode.help for mode in MODES.values()) + "."
