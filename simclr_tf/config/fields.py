"""How a `simclr_tf.config.Config` field is declared (`field`: its --help topic,
default, help, choices, checks and the flags it decides) and what the table of fields
answers (`FlagTable`, Config's base: the flags, their checks and choices, the --help
topics, the flags given explicitly). The fields themselves are config.py's."""
import dataclasses
import typing
from typing import Optional

from simclr_tf.config import bounds, record_types

# --help's topics, in order. config.py declares a field by its topic's function
# (`_run`, `_data`, ...): a new flag is one field, its help group included.
HELP_GROUPS = (
    "Run",
    "Data",
    "Model",
    "Contrastive objective and augmentation",
    "Optimisation and schedule",
    "Checkpoints and export",
    "Fine-tuning",
    "Distillation",
    "Evaluation",
    "Hardware and distribution",
)

# The authors' TF2 run.py flags: Config declares each with its name, meaning and default
# there (except use_tpu's).
AUTHORS_FLAGS = (
    "learning_rate", "learning_rate_scaling", "warmup_epochs", "weight_decay",
    "batch_norm_decay", "train_batch_size", "train_split", "train_epochs", "train_steps",
    "eval_steps", "eval_batch_size", "checkpoint_epochs", "checkpoint_steps",
    "eval_split", "dataset", "cache_dataset", "mode", "train_mode",
    "lineareval_while_pretraining", "checkpoint", "zero_init_logits_layer",
    "fine_tune_after_block", "master", "model_dir", "data_dir", "use_tpu", "tpu_name",
    "tpu_zone", "gcp_project", "optimizer", "momentum", "eval_name",
    "keep_checkpoint_max", "keep_hub_module_max", "temperature", "hidden_norm",
    "proj_head_mode", "proj_out_dim", "num_proj_layers", "ft_proj_selector", "global_bn",
    "width_multiplier", "resnet_depth", "sk_ratio", "se_ratio", "image_size",
    "color_jitter_strength", "use_blur",
)


def field(group, default, help, choices=None, *, checks=(), applies=None,  # pylint: disable=redefined-builtin
          overrides=(), sets=()):
    """A Config field: its --help topic (one of HELP_GROUPS), default, help, choices
    (a tuple, or a function returning a live table's names), what its value must be
    (`checks`: `simclr_tf.config.bounds`' positive, at_least, within, rule; run by
    `validation.check_fields`), where it does something (`applies`: `bounds.applies`;
    given elsewhere it is refused, `validation.check_inert_flags`), and the flags it
    decides, as its help says (`Config.flag_pairs`): `overrides`, flags it makes inert
    when set (its default is 'unset'); `sets`, flags it gives their values."""
    metadata = {"help": help, "group": group, "checks": tuple(checks)}
    if applies is not None:
        metadata["applies"] = applies
    if choices is not None:
        metadata["choices"] = choices if callable(choices) else tuple(choices)
    if overrides or sets:
        metadata["overrides"] = tuple(overrides) + tuple(sets)
        metadata["sets"] = bool(sets)
    return dataclasses.field(default=default, metadata=metadata)


class FlagTable:
    """The questions asked of a Config's fields, answered from their declarations
    (`field`); Config is a frozen dataclass of them, with a `_given` field."""

    # ------------------------------------------------ flags given explicitly
    def with_given(self, names):
        """This Config, knowing which flags were given (on the command line or in a
        flagfile: absl's `FLAGS[name].present`); see `is_given`."""
        return dataclasses.replace(self, _given=frozenset(names))

    def is_given(self, flag):
        """Whether `flag` was chosen rather than left at its default. Known from
        `with_given` (run.py); a Config built in code counts a value as chosen when
        it differs from the default (an explicit default cannot be told apart)."""
        if self._given is not None:
            return flag in self._given
        return getattr(self, flag) != getattr(type(self)(), flag)

    # ------------------------------------------------------------- the fields
    @classmethod
    def flag_fields(cls):
        """The fields that are flags (all but `_given`), in declaration order."""
        return tuple(f for f in dataclasses.fields(cls) if "group" in f.metadata)

    @classmethod
    def float_fields(cls):
        """The fields of type float (or Optional[float])."""
        return [f.name for f in cls.flag_fields() if f.type in (float, Optional[float])]

    @classmethod
    def field_checks(cls):
        """(flag, check) for each check of each field (`simclr_tf.config.bounds`), run by
        `validation.check_fields`: a field's implicit ones first (one of its choices;
        float32 for a float), then those its declaration lists."""
        floats = cls.float_fields()
        for field in cls.flag_fields():
            if "choices" in field.metadata:
                yield field.name, bounds.one_of(field.metadata["choices"])
            if field.name in floats:
                yield field.name, bounds.float32()
            for check in field.metadata["checks"]:
                yield field.name, check

    @classmethod
    def field_applies(cls):
        """(flag, `bounds.Applies`) of each field that declares where it does something."""
        return tuple((f.name, f.metadata["applies"]) for f in cls.flag_fields()
                     if "applies" in f.metadata)

    @classmethod
    def is_optional(cls, name):
        """Whether the field `name` may be unset (None): its type is Optional."""
        kind = {f.name: f.type for f in cls.flag_fields()}[name]
        return type(None) in typing.get_args(kind)

    @classmethod
    def flag_pairs(cls):
        """{flag: (the flags it decides, whether it sets them)}, as the fields declare
        (`_field`'s `overrides` and `sets`): --train_steps overrides --train_epochs,
        --checkpoint_steps --checkpoint_epochs, --variant sets --resnet_depth,
        --width_multiplier and --sk_ratio. Of a pair, the flag given wins over the
        one a record lends (`simclr_tf.config.inherit`)."""
        return {f.name: (f.metadata["overrides"], f.metadata["sets"])
                for f in cls.flag_fields() if "overrides" in f.metadata}

    @classmethod
    def check_record(cls, values, path, where=""):
        """Raises RecordError naming `path` and the key when a value of `values` (the
        settings a record holds: flags.json, a flags_history.json entry) is not of
        its field's type: `"use_blur": "false"` would read as true, `"image_size":
        16.0` is no image size. Keys that are no field are left to the reader
        (`records.read_config` ignores them).

        Args:
            values: {flag: value} as read from JSON.
            path: the record's file, for the message.
            where: where in the file `values` are (e.g. 'entry 3's "changed"').
        """
        record_types.check({f.name: f.type for f in cls.flag_fields()}, values,
                           path, where)

    @classmethod
    def help_groups(cls):
        """((topic, field names in declaration order), ...) in HELP_GROUPS' order."""
        fields = cls.flag_fields()
        return tuple((title, tuple(f.name for f in fields if f.metadata["group"] == title))
                     for title in HELP_GROUPS)

    @classmethod
    def choice_fields(cls):
        return [f.name for f in cls.flag_fields() if "choices" in f.metadata]

    @classmethod
    def field_choices(cls, name):
        """The choices of the field `name` (those of the live table for --mode and
        --train_mode), or None."""
        choices = {f.name: f.metadata.get("choices") for f in cls.flag_fields()}[name]
        return choices() if callable(choices) else choices
