"""SimCLR v1/v2 command line: pretrain, fine-tune, evaluate.

Accepts every flag of the authors' TF2 `run.py` with the same name, meaning and
default (except --use_tpu, default False), plus ours (--strategy, --mixed_precision,
--seed, --variant, --stem, ...). This is the only module that reads absl FLAGS: it
builds one frozen, validated `simclr_tf.config.Config` and hands it to
`simclr_tf.experiment.run`. Invalid values fail here, naming the flag and the fix,
before TensorFlow builds anything.

Examples:
  python run.py --flagfile=flags/quickstart.flags
  python run.py --train_mode=pretrain --dataset=cifar10 --image_size=32 \
      --resnet_depth=18 --train_batch_size=512 --model_dir=/tmp/simclr_cifar
  python run.py --helpfull
"""
import dataclasses
import os
import sys
import typing

# TensorFlow's start-up INFO lines (oneDNN, CPU features) bury our output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from absl import app, flags, logging

from simclr_tf.config import VARIANT_FLAGS, Config, ConfigError, check_variant_flags

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


def _define_flags():
    for field in dataclasses.fields(Config):
        name, default, help_text = field.name, field.default, field.metadata["help"]
        choices = field.metadata.get("choices")
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


def config_from_flags(flag_values=FLAGS):
    """The validated Config for parsed flags; raises ConfigError on a bad value."""
    values = {f.name: flag_values[f.name].value for f in dataclasses.fields(Config)}
    if values["variant"] is not None:
        # Config cannot tell --sk_ratio=0 from no --sk_ratio: the flags can.
        check_variant_flags(values["variant"], {
            name: values[name] for name in VARIANT_FLAGS if flag_values[name].present})
    return Config.from_dict(values).validate()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS["verbosity"].present:
        # Quiet by default: what a run does is printed; TensorFlow's and our INFO
        # lines (checkpoint sharding, SavedModel assets, ...) need --verbosity=0.
        logging.set_verbosity(logging.WARNING)
    try:
        config = config_from_flags()
    except ConfigError as error:
        print(f"run.py: error: {error}", file=sys.stderr)
        sys.exit(2)
    # Imported late so that --help and flag errors never wait for TensorFlow.
    from simclr_tf import experiment  # pylint: disable=import-outside-toplevel
    from simclr_tf.loop import NonFiniteLossError  # pylint: disable=import-outside-toplevel
    try:
        results = experiment.run(config)
    except ConfigError as error:
        print(f"run.py: error: {error}", file=sys.stderr)
        sys.exit(2)
    except (NonFiniteLossError, experiment.ExportError) as error:
        print(f"run.py: error: {error}", file=sys.stderr)
        sys.exit(1)
    if results.get("interrupted"):
        # Stopped by SIGTERM after saving a checkpoint: not finished. 128 + SIGTERM, as
        # a shell reports a process killed by it, so schedulers retry the run.
        sys.exit(EXIT_INTERRUPTED)


# Exit status after a SIGTERM that saved a checkpoint (run the same command to resume).
EXIT_INTERRUPTED = 143


_define_flags()

if __name__ == "__main__":
    app.run(main)
