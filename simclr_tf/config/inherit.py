"""A finished run's flags, read back so that later modes need not retype them.

`run.py --mode=eval --model_dir=<run>` evaluates with the architecture, the data and
the training mode the run recorded in its flags.json (as keras-hub's
`from_preset(dir)` reads `config.json`); so do export, embed and linear_probe, a
rerun or extension of a training run, and `--train_mode=finetune --checkpoint=<run>
--model_dir=<new>` (which reads the run's model and data, not its optimisation).
A flag given on the command line or in a flagfile always wins: a given flag that
contradicts the weights is then refused by preflight, naming both values.

Which run is read (`recorded_run`):
- model_dir's flags.json (the run being resumed, extended or read);
- else --checkpoint's run: a run directory, a checkpoint prefix in one, or one of
  our exports (`run/saved_model/<step>`);
- else, distilling (`--train_mode=distill`) without --checkpoint, --teacher's run:
  the student is then the teacher's model on the teacher's data
  (self-distillation) unless flags say otherwise. A --checkpoint without a record
  (a released model, a copied prefix) lends nothing, nor does the teacher then.

What is read (`inherited_flags`): from model_dir's own record, every flag but the
run's identity and the machine (`NEVER_READ`); from another run, its model and its
data (`model_and_data()`) for training, and for reader modes also how it was trained
(its supervised head). Of two flags that decide the same thing (`Config.flag_pairs`:
--train_steps overrides --train_epochs, --variant sets --resnet_depth, ...), the one
given wins over the one the record holds: `--train_epochs=2` on a run recorded with
--train_steps=4 trains 2 epochs (--train_steps is then not read), as `--variant`
reads none of the flags it sets.

A record's values are checked against the flags' types (`Config.check_record`):
`"use_blur": "false"` is an error naming the file and the key, not true.

Pure Python (no TensorFlow), so that flag errors stay fast; the run a path belongs
to and its record are found by `simclr_tf.config.run_dirs` (a record on a remote file system,
`gs://`, is read with TensorFlow's file API), the reader `open_encoder` opens it by.
"""
import dataclasses
import os

from simclr_tf.config import architecture, run_dirs
from simclr_tf.config.tables import modes
from simclr_tf.config.tables import train_modes
from simclr_tf.config.errors import ConfigError

# Never read from a record: which run and mode this is (and what the mode evaluates
# and writes: --evaluators and --export_format mean what this command does), the
# machine it runs on, and the permissions a command gives for itself alone (an
# evaluation on training examples is allowed by the command that asks for it, not by
# the run it reads).
NEVER_READ = ("mode", "model_dir", "checkpoint", "break_lock", "allow_changed_flags",
              "reevaluate", "allow_eval_overlap", "master", "use_tpu", "tpu_name", "tpu_zone",
              "gcp_project", "strategy", "cpu_replicas", "peer_wait_secs", "eval_wait_secs",
              "evaluators", "export_format")
# What another run's weights need: the model, the data it was trained on.
DATA_FLAGS = ("dataset", "data_dir", "image_size", "train_split", "eval_split")
# What a reader of another run's weights needs besides: the heads the run trained.
HEADS = ("train_mode", "lineareval_while_pretraining", "ft_proj_selector",
         "batch_norm_decay", "global_bn")


def model_and_data():
    """What another run's weights need: the flags that decide the model's variables,
    of the encoder table as it is now (an encoder registered later with flags of its
    own included), and the data the run was trained on."""
    return architecture.architecture_flag_names() + ("encoder_config",) + DATA_FLAGS


@dataclasses.dataclass(frozen=True)
class Inherited:
    """What `inherit` read: the record's path and {flag: value} taken from it, and
    {flag: the given flag of its pair} of the flags the record holds but a given
    flag decides (`Config.flag_pairs`), left unread."""
    path: str
    values: dict
    overruled: dict = dataclasses.field(default_factory=dict)

    def summary(self, defaults):
        """One line: the model, data and head flags read that differ from their
        defaults (`--dataset=digits ...`), how many other flags were read, and the
        flags a given one of their pair kept from being read."""
        differing = {name: value for name, value in self.values.items()
                     if value != getattr(defaults, name)}
        shown = [f"--{name}={_shown(value)}" for name, value in differing.items()
                 if name in model_and_data() + HEADS]
        others = len(self.values) - len(shown)
        line = " ".join(shown + ([f"(and {others} other flag{'s' * (others != 1)})"]
                                 if others else [])) or "the defaults"
        return line + "".join(f"; not its --{name}, as --{given} was given"
                              for name, given in self.overruled.items())


def _shown(value):
    return str(value).lower() if isinstance(value, bool) else value


def overruled(pairs, given, readable):
    """{flag: the given flag of its pair} of the `readable` flags that a given flag
    decides (`pairs`: `Config.flag_pairs()`), so not read: a given --train_epochs
    keeps a recorded --train_steps=4 from overriding it, a given --resnet_depth a
    recorded --variant from setting it."""
    found = {}
    for flag, (decided, _) in pairs.items():
        partner = next((name for name in decided if name in given), None)
        if flag in readable and flag not in given and partner is not None:
            found[flag] = partner
    return found


def recorded_run(config):
    """`(flags.json path, own)` of the run `config` reads, or None: model_dir's
    record (own=True), or --checkpoint's run's, or distilling without
    --checkpoint --teacher's (own=False)."""
    if config.model_dir:
        path = os.path.join(config.model_dir, run_dirs.FLAGS_FILE)
        if run_dirs.exists(path):
            return path, True
    # The student's weights' run; only without them, distilling, the teacher's.
    other = config.checkpoint or (
        config.teacher if train_modes.get(config.train_mode).needs_teacher else None)
    if other:
        path = run_dirs.flags_file(other)
        if path:
            return path, False
    return None


def record_flag(config):
    """The flag whose run's record `inherit` reads for `config` (what an error about
    that record names): 'model_dir' for its own, else 'checkpoint' or, distilling
    without --checkpoint, 'teacher'; 'model_dir' when there is none."""
    found = recorded_run(config)
    if found is None or found[1]:
        return "model_dir"
    return "checkpoint" if config.checkpoint else "teacher"


def inherited_flags(mode, own):
    """The flags read from a record: all but `NEVER_READ` from model_dir's own, the
    model and data (and for a reader mode the heads) from another run's."""
    if own:
        return None  # every flag but NEVER_READ
    return model_and_data() + (() if modes.get(mode).trains else HEADS)


def inherit(config):
    """`config` with each flag that was not given taken from the run it reads.

    Args:
        config: a Config that knows its given flags (`Config.with_given`), before
            validation.

    Returns:
        `(config, Inherited or None)`.

    Raises:
        ValueError: the record cannot be read (not JSON, not an object).
    """
    found = recorded_run(config)
    if found is None:
        return config, None
    path, own = found
    try:
        recorded = run_dirs.read_flags(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path!r} cannot be read ({error}); repair or remove it, or "
                         "pass every flag of the run.") from None
    if not isinstance(recorded, dict):
        raise ValueError(f"{path!r} holds {type(recorded).__name__}, not a JSON object "
                         "of settings; repair or remove it, or pass every flag of the run.")
    type(config).check_record(recorded, path)  # RecordError, a ValueError
    if own:
        _check_same_train_mode(config, path, recorded)
    names = inherited_flags(config.mode, own)
    fields = {f.name for f in config.flag_fields()}
    given = set(name for name in fields if config.is_given(name))
    pairs = type(config).flag_pairs()
    for flag, (decided, sets) in pairs.items():
        if sets and flag in given:  # --variant gives the flags it sets their values
            given |= set(decided)
    readable = {name for name in fields if name in recorded and name not in NEVER_READ
                and (names is None or name in names)}
    not_read = overruled(pairs, given, readable)
    values = {name: recorded[name] for name in sorted(readable - given - set(not_read))
              if recorded[name] != getattr(config, name)}
    shown = {name: by for name, by in not_read.items()
             if recorded[name] != getattr(config, name)}
    if not values:
        return config.with_given(given), Inherited(path, {}, shown)
    updated = dataclasses.replace(config, **values)
    return updated.with_given(given), Inherited(path, values, shown)


_RUN_KINDS = {"pretrain": "pretraining", "finetune": "fine-tuning", "distill": "distillation"}


def _check_same_train_mode(config, path, recorded):
    """A training command whose given --train_mode differs from the one model_dir's
    record holds is another run, refused before the record's flags (the other
    stage's, e.g. pretraining's --head_learning_rate) are read into it; continuing
    the run in the new mode needs --allow_changed_flags."""
    given = config.train_mode
    held = recorded.get("train_mode", "pretrain")
    if (not modes.get(config.mode).trains or not config.is_given("train_mode")
            or config.allow_changed_flags or held == given):
        return
    raise ValueError(
        f"{config.model_dir!r} holds a {_RUN_KINDS.get(held, held)} run ({path} records "
        f"--train_mode={held}); --train_mode={given} is a run of its own: pass a new "
        f"--model_dir (with --checkpoint={config.model_dir} to start from that run), or "
        f"--allow_changed_flags to continue that run as {given}.")


def explained(error, inherited):
    """`error` (a ConfigError) saying, when its flag was not given but read from a
    record (`inherited`: what `inherit` read, or None), that it was and from which
    file; otherwise `error` itself."""
    if inherited is None or error.flag not in inherited.values:
        return error
    message = str(error)[len(f"--{error.flag}: "):]
    return ConfigError(error.flag, f"{message} (inherited, not given here: read from "
                       f"{inherited.path}, which records "
                       f"--{error.flag}={_shown(inherited.values[error.flag])})")
