"""Whether a recorded model matches the flags, by the encoder table's rows.

TF-free: `Config` and `preflight` read it before any model exists. The table (which
flags each encoder reads, which decide its variables) is `simclr_tf.config.tables.encoders`;
this module compares a record's model with the flags' by it, and reads records of
any age (`normalize_model_kwargs`).
"""
import json

from simclr_tf.config import variants
from simclr_tf.config.errors import ConfigError
from simclr_tf.config.tables import encoders as encoder_table
from simclr_tf.config.tables import train_modes


# Keys of `SimCLRModel` arguments that belong to ResNet: records written before
# `encoder_options` held them at the top level.
LEGACY_RESNET_KEYS = ("depth", "width_multiplier", "sk_ratio", "se_ratio", "stem")


def normalize_model_kwargs(kwargs):
    """`SimCLRModel` keyword arguments in today's form, from a record of any age.

    Records from before `encoder_options` carried ResNet's arguments at the top
    level (every encoder's: the others ignored them) and no 'encoder' for ResNet:
    ResNet's move into `encoder_options`, the others' are dropped.
    """
    kwargs = dict(kwargs)
    kwargs.setdefault("encoder", "resnet")
    legacy = {key: kwargs.pop(key) for key in LEGACY_RESNET_KEYS if key in kwargs}
    options = dict(kwargs.get("encoder_options") or {})
    if kwargs["encoder"] == "resnet":
        options = dict(legacy, **options)
    kwargs["encoder_options"] = options
    return kwargs


# The projection head's flags (`SimCLRModel` arguments of the same names): what a
# checkpoint must agree with where the model has a projection head.
HEAD_FLAGS = ("proj_head_mode", "proj_out_dim", "num_proj_layers")
def architecture_flag_names():
    """Every flag that may decide a model's variables, whatever the encoder, of the
    encoder table as it is now (an encoder registered later included): what another
    run's weights need (`inherit.model_and_data`), named in messages."""
    return ("encoder",) + encoder_table.variable_flags() + HEAD_FLAGS


def architecture_mismatches(config, recorded, *, headless_ok=False):
    """The flags of `config` whose model differs from the `recorded` one.

    Args:
        config: a Config.
        recorded: `SimCLRModel` keyword arguments of the model that wrote the weights
            (`Config.model_kwargs()` of its run, or a released model's inferred ones),
            of any age (`normalize_model_kwargs`).
        headless_ok: a model without projection head (--proj_head_mode=none) may take
            the weights (the head's are simply not read).

    Returns:
        `['--resnet_depth=50', ...]`: each differing flag with the recorded value.
    """
    ours = config.model_kwargs()
    recorded = normalize_model_kwargs(recorded)
    mismatched = []
    if ours["encoder"] != recorded["encoder"]:
        mismatched.append(f"--encoder={recorded['encoder']}")
    spec = encoder_table.encoder_spec(recorded["encoder"])
    for flag in (spec.variable_flags if spec else ()):
        option = spec.flags[flag]
        if option in recorded["encoder_options"]:
            value = recorded["encoder_options"][option]
            if not _same(config.encoder_option(flag), value):
                mismatched.append(f"--{flag}={_shown(value)}")
    heads = list(HEAD_FLAGS)
    if recorded.get("proj_head_mode") != "nonlinear":
        heads.remove("num_proj_layers")  # only a nonlinear head has hidden layers
    if recorded.get("proj_head_mode") == "none":
        heads.remove("proj_out_dim")
    if headless_ok and ours["proj_head_mode"] == "none":
        heads = []
    return mismatched + [f"--{flag}={recorded[flag]}" for flag in heads
                         if flag in recorded and not _same(ours[flag], recorded[flag])]


def _same(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def _shown(value):
    return json.dumps(value) if isinstance(value, (dict, list)) else value


# The flags a --variant sets -> its `variants.parse_variant` key.
VARIANT_FLAGS = dict(resnet_depth="depth", width_multiplier="width_multiplier",
                     sk_ratio="sk_ratio")


def check_variant_flags(variant, given):
    """Raises ConfigError unless `variant` parses and agrees with `given`.

    Args:
        variant: a --variant name such as 'r50_1x_sk1'.
        given: {flag: value} of the VARIANT_FLAGS also set (e.g. {'sk_ratio': 0.0}).
    """
    try:
        parsed = variants.parse_variant(variant)
    except ValueError as error:
        raise ConfigError("variant", str(error)) from None
    for flag, value in given.items():
        if value != parsed[VARIANT_FLAGS[flag]]:
            raise ConfigError("variant", f"{variant} means --{flag}="
                              f"{parsed[VARIANT_FLAGS[flag]]}, but --{flag}={value} was "
                              "also given; drop one.")


def model_kwargs(config, num_classes=None):
    """Keyword arguments of `simclr_tf.models.SimCLRModel` for the run of `config`: the
    encoder's options are the flags its row of `tables.encoders.ENCODERS` names.

    Args:
        num_classes: classes of the supervised head, or None for none.
    """
    row = train_modes.get(config.train_mode)
    has_head = num_classes is not None and (
        not row.online_head or config.lineareval_while_pretraining)
    spec = encoder_table.encoder_spec(config.encoder)
    options = {option: encoder_option(config, flag)
               for flag, option in (spec.flags.items() if spec else ())}
    return dict(
        encoder=config.encoder, encoder_options=options,
        proj_head_mode=config.proj_head_mode, num_proj_layers=config.num_proj_layers,
        proj_out_dim=config.proj_out_dim, ft_proj_selector=config.ft_proj_selector,
        num_classes=num_classes if has_head else None,
        supervised_head_stop_gradient=row.online_head,
        zero_init_logits_layer=config.zero_init_logits_layer,
        batch_norm_decay=config.batch_norm_decay, global_bn=config.global_bn)


def encoder_option(config, flag):
    """The value an encoder receives for `flag`: --stem resolved, a whole
    --width_multiplier as an int (the reference's type), --encoder_config parsed."""
    if flag == "stem":
        return config.resolved_stem
    if flag == "width_multiplier":
        width = config.width_multiplier
        return int(width) if float(width).is_integer() else width
    if flag == "encoder_config":
        return json.loads(config.encoder_config or "{}")
    return getattr(config, flag)
