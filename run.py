"""SimCLR v1/v2: pretrain image encoders without labels, fine-tune, evaluate, export.

Every flag of the authors' TF2 run.py works with the same name, meaning and default
(except --use_tpu, default False), plus ours. Flags can come from flagfiles: flags/
holds the paper's configurations.

Examples:
  python run.py --flagfile=flags/quickstart.flags          # offline, a few minutes on CPU
  python run.py --flagfile=flags/cifar10_r18_pretrain.flags --model_dir=/tmp/cifar
  python run.py --mode=eval --model_dir=/tmp/cifar --eval_split=test
  simclr-tf --flagfile=flags/quickstart.flags              # the same, once installed

--help lists the flags by topic; --helpfull adds absl's own.
"""
# The only module that reads absl FLAGS: it builds one frozen, validated
# `simclr_tf.config.Config` and hands it to `simclr_tf.run.experiment.run`. Invalid values
# fail here, naming the flag and the fix, before TensorFlow is imported.
import contextlib
import json
import os
import re
import signal
import sys
import typing

# TensorFlow's start-up INFO lines (oneDNN, CPU features) bury our output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from absl import app, flags, logging

from simclr_tf.config import inherit, run_dirs
from simclr_tf.run import quiet
from simclr_tf.config import Config, ConfigError
from simclr_tf.config.errors import disk_full, remote_path_error
from simclr_tf.config.tables import train_modes

FLAGS = flags.FLAGS


class _NumberParser(flags.ArgumentParser):
    """Parses '2' as 2 and '0.25' as 0.25 (width_multiplier: int in the reference)."""

    syntactic_help = "an int or a float"

    def parse(self, argument):
        if isinstance(argument, (int, float)):
            return argument
        value = float(argument)
        return int(value) if value.is_integer() and "." not in str(argument) else value

    def flag_type(self):
        return "number"


def load_objective_modules(argv):
    """Runs each --objective_module file of the command line and of its --flagfiles
    (`train_modes.load_module`) before the flags are defined: its train mode is then
    a --train_mode choice and its options flags."""
    try:  # absl's own expansion of --flagfile (nested ones too)
        args = FLAGS.read_flags_from_files(argv[1:], force_gnu=False)
    except flags.Error:
        args = argv[1:]  # an unreadable flagfile: absl's error, when the flags are parsed
    for i, arg in enumerate(args):
        if arg.startswith("--objective_module="):
            path = arg.split("=", 1)[1]
        elif arg == "--objective_module" and i + 1 < len(args):
            path = args[i + 1]
        else:
            continue
        if path:
            try:
                train_modes.load_module(path)
            except ValueError as error:
                _error(str(error))


def _define_flags():
    for field in Config.flag_fields():
        name, default, help_text = field.name, field.default, field.metadata["help"]
        choices = Config.field_choices(name)  # --mode, --train_mode: the live tables
        if name == "train_mode":  # with the rows registered since import
            help_text = train_modes.help_text()
        kind = field.type
        if typing.get_origin(kind) is typing.Union:  # Optional[str]
            kind = [t for t in typing.get_args(kind) if t is not type(None)][0]
        if choices is not None:
            flags.DEFINE_enum(name, default, list(choices), help_text)
        elif name == "width_multiplier":
            flags.DEFINE(_NumberParser(), name, default, help_text,
                         serializer=flags.ArgumentSerializer())
        elif kind is bool:
            flags.DEFINE_bool(name, default, help_text)
        elif kind is int:
            flags.DEFINE_integer(name, default, help_text)
        elif kind is float:
            flags.DEFINE_float(name, default, help_text)
        else:
            flags.DEFINE_string(name, default, help_text)
    # A registered objective's own options: a flag each, gathered into
    # --objective_options (`objective_options`).
    for row in train_modes.TRAIN_MODES.values():
        for name, default in row.options:
            if name in FLAGS:
                continue
            help_text = f"--train_mode={row.name}'s option {name}."
            define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
                      float: flags.DEFINE_float}.get(type(default), flags.DEFINE_string)
            define(name, default, help_text)


def objective_options(flag_values, values):
    """--objective_options with the train modes' option flags, as JSON: each one given,
    whatever its train mode (validation refuses one of another train mode than the
    run's, naming its mode), and the chosen train mode's others at their defaults,
    so that flags.json records every option of its row."""
    given = json.loads(values["objective_options"] or "{}")
    if not isinstance(given, dict):
        return values["objective_options"]  # validation's error
    for name in train_modes.all_options():
        # A FlagValues made for the Config's flags alone has no option flags.
        if name in flag_values and flag_values[name].present:
            given[name] = flag_values[name].value
    row = train_modes.TRAIN_MODES.get(values["train_mode"])
    for name, default in row.options if row is not None else ():
        given.setdefault(name, default)
    return json.dumps(given, sort_keys=True) if given else values["objective_options"]


# --help, by topic: each Config field names its topic (`fields.field`).
HELP_GROUPS = Config.help_groups()


def grouped_help(width=88):
    """--help: the module's docstring, then every flag by topic with its default."""
    import textwrap  # pylint: disable=import-outside-toplevel
    fields = {f.name: f for f in Config.flag_fields()}
    lines = [__doc__.strip(), ""]
    for title, names in HELP_GROUPS:
        lines.append(f"{title}:")
        for name in names:
            field = fields[name]
            default = field.default
            shown = ("none" if default is None else str(default).lower()
                     if isinstance(default, bool) else default)
            choices = Config.field_choices(name)
            text = field.metadata["help"] + (
                f" One of: {', '.join(choices)}." if choices else "")
            lines.append(f"  --{name}={shown}")
            lines += textwrap.wrap(text, width, initial_indent="      ",
                                   subsequent_indent="      ")
        lines.append("")
    return "\n".join(lines)


def config_from_flags(flag_values=FLAGS, report=None):
    """The validated Config for parsed flags; raises ConfigError on a bad value.

    A flag not given is read from the run the command reads (model_dir's flags.json,
    or --checkpoint's run: `simclr_tf.config.inherit`); `report(line)` is told which, and an
    error about such a flag says so (`inherit.explained`).
    """
    return _config_and_record(flag_values, report)[0]


def _config_and_record(flag_values, report):
    """`config_from_flags`' Config and what it read from a record (or None)."""
    values = {f.name: flag_values[f.name].value for f in Config.flag_fields()}
    try:
        values["objective_options"] = objective_options(flag_values, values)
    except ValueError as error:
        raise ConfigError("objective_options", f"is not valid JSON ({error}).") from None
    # Config cannot tell --sk_ratio=0 from no --sk_ratio: the flags can.
    given = [f.name for f in Config.flag_fields() if flag_values[f.name].present]
    if any(name in flag_values and flag_values[name].present
           for name in train_modes.all_options()):
        given.append("objective_options")
    config = Config.from_dict(values, given=given)
    try:
        config, inherited = inherit.inherit(config)
    except ValueError as error:  # the record read: model_dir's, or another run's
        raise ConfigError(inherit.record_flag(config), str(error)) from None
    if inherited is not None and inherited.values and report is not None:
        report(f"Flags read from {inherited.path} (flags given here win): "
               f"{inherited.summary(Config())}")
    try:
        return config.validate(), inherited
    except ConfigError as error:
        raise inherit.explained(error, inherited) from None


def main(argv):
    if len(argv) > 1:
        _error(f"unexpected arguments {' '.join(argv[1:])!r}: every setting is a "
                     "--flag=value (run.py --help lists them).")
    if not FLAGS["verbosity"].present:
        # Quiet by default: what a run does is printed; TensorFlow's and our INFO
        # lines (checkpoint sharding, SavedModel assets, ...) need --verbosity=0.
        logging.set_verbosity(logging.WARNING)
    if any(run_dirs.is_remote(FLAGS[name].value) for name in _RECORD_PATHS
           if FLAGS[name].value):
        # Its record is read with TensorFlow's file API: imported here, quietly.
        with quiet.tensorflow_start_up_filtered(), _sigterm_held_back():
            import tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    try:
        config, inherited = _config_and_record(FLAGS, report=print)
    except ConfigError as error:
        _error(error)
    except Exception as error:  # pylint: disable=broad-except
        remote = remote_path_error(error)  # a record read on gs:// (TensorFlow's API)
        if remote is None:
            raise
        _error(remote)
    # A typo: said before TensorFlow.
    missing = run_dirs.missing_run_directory(config) or run_dirs.missing_weights(config)
    if missing is not None:
        _error(missing)
    # Imported late so that --help and flag errors never wait for TensorFlow.
    with quiet.tensorflow_start_up_filtered(), _sigterm_held_back():
        from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
        from simclr_tf.run.loop import InputError, NonFiniteLossError  # pylint: disable=import-outside-toplevel
        from simclr_tf.weights.checkpoints import CheckpointWriteError  # pylint: disable=import-outside-toplevel
        from simclr_tf.run.run_lock import LockLostError  # pylint: disable=import-outside-toplevel
        from simclr_tf.run.cluster import ClusterError, WaitInterrupted  # pylint: disable=import-outside-toplevel
    try:
        results = experiment.run(config)
    except ConfigError as error:
        _error(inherit.explained(error, inherited))
    except (NonFiniteLossError, InputError, experiment.ExportError, CheckpointWriteError,
            LockLostError, ClusterError) as error:
        _error(error, status=1)
    except WaitInterrupted as error:
        # SIGTERM while a multi-worker run waited for its peers: nothing was trained.
        print(f"{PROGRAM}: {error}", file=sys.stderr)
        sys.exit(interrupted_exit_status(error.signum))
    except KeyboardInterrupt:
        # Ctrl-C outside the training steps (which save a checkpoint and return).
        print(f"{PROGRAM}: interrupted (SIGINT) outside the training steps; the checkpoints "
              "already written are kept: run the same command again to resume.",
              file=sys.stderr)
        sys.exit(interrupted_exit_status(signal.SIGINT))
    except Exception as error:  # pylint: disable=broad-except
        # A full disk under any writer (a record, embeddings, a table, TensorBoard):
        # its file and the space left, not a traceback.
        full = disk_full(error)
        if full is not None:
            _error(full, status=1)
        remote = remote_path_error(error)
        if remote is None:
            raise
        _error(remote)
    if results.get("interrupted"):
        # Stopped by SIGTERM or SIGINT after saving a checkpoint: not finished.
        sys.exit(interrupted_exit_status(results["signal"]))


# How errors name the command: `simclr-tf` when run as it (`console_main`).
PROGRAM = "run.py"
# The flags naming a run whose record `_config_and_record` reads.
_RECORD_PATHS = ("model_dir", "checkpoint", "teacher")


@contextlib.contextmanager
def _sigterm_held_back():
    """Holds SIGTERM back while TensorFlow is imported, then lets it through (a SIGTERM
    meanwhile stops the process as before). The threads that TensorFlow starts at
    import inherit the held-back mask and keep it, so a SIGTERM always reaches the main
    thread: TensorFlow's preemption notifier, installed by MultiWorkerMirroredStrategy,
    would otherwise take one in those threads and drop it (`simclr_tf.run.cluster`)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def interrupted_exit_status(signum):
    """The exit status after a stop signal (run the same command to resume): 128 + its
    number, as a shell reports a process killed by it (SIGTERM 143, SIGINT 130), so
    schedulers retry the run."""
    return 128 + int(signum)


def _error(message, status=2):
    """Every error run.py reports, in one format: a bad command line, flag or input
    exits 2, a fault of the run or the machine 1."""
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    sys.exit(status)


def _flag_setting(args, i):
    """(name, value, the index after it) of the flag at args[i] (`--name=value`,
    `--name value`, `--name` or `--noname` for a boolean), or None for anything else
    (an unknown flag is absl's to report)."""
    arg = args[i]
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    name, equals, value = arg.lstrip("-").partition("=")
    if name not in FLAGS and name.startswith("no") and name[2:] in FLAGS and not equals:
        return name[2:], "false", i + 1
    if name not in FLAGS:
        return None
    if equals:
        return name, value, i + 1
    if FLAGS[name].boolean:
        return name, "true", i + 1
    return (name, args[i + 1], i + 2) if i + 1 < len(args) else None


def _settings(args):
    """(name, value) of each flag of `args` in order; a --flagfile directive as
    ('flagfile', its one or two arguments)."""
    i = 0
    while i < len(args):
        if args[i].lstrip("-").split("=", 1)[0] == "flagfile":
            directive = args[i:i + (1 if "=" in args[i] else 2)]
            yield "flagfile", directive
            i += len(directive)
            continue
        setting = _flag_setting(args, i)
        if setting is None:
            i += 1
            continue
        name, value, i = setting
        yield name, value


def check_values_present(argv):
    """Raises flags.Error for a flag written `--name` (not boolean) whose next argument
    is another flag: absl would take that flag as its value (`--model_dir $UNSET
    --flagfile=f` sets model_dir to '--flagfile=f' and drops the flagfile)."""
    args = list(argv[1:])
    for i, arg in enumerate(args[:-1]):
        name = arg.lstrip("-")
        if (arg.startswith("--") and "=" not in arg and name in FLAGS
                and not FLAGS[name].boolean and args[i + 1].startswith("--")):
            raise flags.Error(
                f"{arg} has no value: the argument after it, {args[i + 1]!r}, is a flag "
                f"(an unset shell variable?). Give {arg}=VALUE.")


def check_flagfile_order(argv):
    """Raises flags.Error when a flag on the command line comes before a --flagfile
    that sets it to another value, and nothing after gives it again: absl's last one
    wins, so the value typed would be ignored without a word (`--train_batch_size=0
    --flagfile=f` trained with f's). A flag after the flagfile, overriding it, is the
    way documented; a flagfile overriding another flagfile is layering, and allowed."""
    typed, lost = {}, {}
    for name, value in _settings(list(argv[1:])):
        if name != "flagfile":
            typed[name] = value
            lost.pop(name, None)  # given again after the flagfile: this value wins
            continue
        try:
            lines = FLAGS.read_flags_from_files(value)  # nested flagfiles expanded
        except flags.Error:
            return  # no file named, or one unreadable: absl's error
        for set_name, set_value in _settings(lines):
            if set_name in typed and not _same_value(set_name, typed[set_name], set_value):
                lost.setdefault(set_name, ("=".join(value), set_value))
    if lost:
        name, (source, value) = next(iter(lost.items()))
        raise flags.Error(
            f"--{name}={typed[name]} comes before {source}, which sets "
            f"--{name}={value}: the last value given wins, so {typed[name]!r} would be "
            f"ignored. Give --{name} after the --flagfile (a flag after it overrides it).")


def _same_value(name, first, second):
    """Whether two strings give flag `name` the same value (0.5 and .5 do)."""
    try:
        return FLAGS[name].parser.parse(first) == FLAGS[name].parser.parse(second)
    except (ValueError, TypeError, flags.Error):
        return first == second


def parse_flags(argv):
    """absl's parsing, its errors (an unknown flag, a value of the wrong type, an
    unreadable flagfile) said as every other flag error is; a flag without its value
    before another flag (`check_values_present`) and a flag typed before a --flagfile
    that overrides it (`check_flagfile_order`) are refused."""
    try:
        check_values_present(argv)
        check_flagfile_order(argv)
        return FLAGS(argv)
    except flags.Error as error:
        message = re.sub(r"^(ERROR::\s*|flag (?=--))", "", str(error).strip())
        if message.startswith("Unknown command line flag"):
            message = _flags_meant(message) + " (run.py --help lists the flags)"
        message += _flagfile_hint(message)
        if re.match(r"[A-Z][a-z]", message):
            message = message[0].lower() + message[1:]
        _error(message)


def _flags_meant(message):
    """absl's unknown-flag message, its 'Did you mean' replaced by our flags whose
    name holds the one typed (--batch_size: train_batch_size, eval_batch_size; absl
    suggested batch_norm_decay, by spelling)."""
    typed = re.match(r"Unknown command line flag '([^']+)'", message)
    if typed is None:
        return message
    name = typed.group(1)
    holding = [f.name for f in Config.flag_fields()
               if re.search(rf"(^|_){re.escape(name)}(_|$)", f.name)]
    if not holding:
        return message
    return (re.sub(r"\s*Did you mean:.*$", "", message).rstrip(". ")
            + f". Did you mean: {', '.join(holding)}?")


def _flagfile_hint(message):
    """For a relative --flagfile not found from here whose path names one of the
    checkout's flagfiles (`simclr-tf --flagfile=flags/quickstart.flags` run outside
    the checkout): where it is; else ''."""
    missing = re.search(r"unable to open flagfile: .*No such file or directory: "
                        r"'([^']+)'", message, re.IGNORECASE)
    if missing is None or os.path.isabs(missing.group(1)):
        return ""
    checkout = os.path.join(os.path.dirname(os.path.abspath(__file__)), missing.group(1))
    if not os.path.exists(checkout):
        return ""
    return (f" (a relative path is read from the current directory, {os.getcwd()}; the "
            f"checkout's is --flagfile={checkout})")


def console_main():
    """The `simclr-tf` command (setup.py entry point): run.py's flags and flagfiles."""
    global PROGRAM  # pylint: disable=global-statement
    if os.path.basename(sys.argv[0]).startswith("simclr-tf"):
        PROGRAM = "simclr-tf"  # its errors name the command typed
    if any(arg in ("--help", "-h", "-?", "--helpshort") for arg in sys.argv[1:]):
        print(grouped_help())
        sys.exit(0)
    app.run(main, flags_parser=parse_flags)


load_objective_modules(sys.argv)
_define_flags()

if __name__ == "__main__":
    console_main()
