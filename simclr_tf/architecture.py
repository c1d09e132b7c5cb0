"""The encoder table of the flags, and whether a recorded model matches the flags.

TF-free: `Config` and `preflight` read it before any model exists. For each
`--encoder`, `ENCODERS` says which flags it reads (and under which `encoder_options`
key `SimCLRModel` receives each), which of those decide its variables, and its rules;
so config and preflight never branch on encoder names. The layers themselves are in
`simclr_tf.models.encoders` (a test checks that both tables name the same encoders).
"""
import dataclasses
import json
from typing import Callable, Optional

from simclr_tf import rules, variants
from simclr_tf.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    """What the flags need to know of an encoder, without building it.

    Attributes:
        flags: {flag: `encoder_options` key}: the flags the encoder reads.
        variable_flags: those of `flags` that decide its variables: a checkpoint
            must agree with them (the others, e.g. a pooling, do not change them).
        exclusive_flags: flags that mean something for this encoder only: giving
            one (with a value other than its default) with another encoder is an
            error rather than silently ignored.
        fine_tune_after_block: the --fine_tune_after_block values it takes (None:
            all of `rules.FINE_TUNE_AFTER_BLOCK_CHOICES`), and why, for the error.
        odd_batch_onednn_crash: options -> whether fine-tuning with an odd
            per-replica batch aborts TensorFlow 2.21's oneDNN CPU kernels (ResNet's
            strided 1x1 shortcut convolutions: Conv2DBackpropFilter).
        patch_size: a patch-based encoder's patch side, which must divide
            --image_size (None: any size). Stated here so that preflight checks it
            without making the encoder (making Keras layers draws seeds from the
            global RNG: a check must not change the run's initialisation).
    """
    flags: dict
    variable_flags: tuple = ()
    exclusive_flags: tuple = ()
    fine_tune_after_block: Optional[tuple] = None
    fine_tune_reason: str = ""
    odd_batch_onednn_crash: Callable = lambda options: False
    patch_size: Optional[int] = None


_RESNET = EncoderSpec(
    flags=dict(resnet_depth="depth", width_multiplier="width_multiplier",
               sk_ratio="sk_ratio", se_ratio="se_ratio", stem="stem"),
    variable_flags=("resnet_depth", "width_multiplier", "sk_ratio", "se_ratio", "stem"),
    exclusive_flags=("variant", "sk_ratio", "se_ratio"),
    # With selective kernels the shortcut pools first, then a stride-1 convolution.
    odd_batch_onednn_crash=lambda options: options["sk_ratio"] == 0)
_VIT16 = EncoderSpec(flags=dict(vit_pool="vit_pool"), patch_size=16)
HUB = EncoderSpec(
    flags=dict(encoder_config="hub_config", vit_pool="vit_pool"),
    exclusive_flags=("encoder_config",),
    fine_tune_after_block=(-1, rules.FINE_TUNE_AFTER_BLOCK_CHOICES[-1]),
    fine_tune_reason=f"a keras-hub backbone is one stage: -1 trains it, "
                     f"{rules.FINE_TUNE_AFTER_BLOCK_CHOICES[-1]} freezes it")

# --encoder -> its spec; 'hub:<...>' names use HUB.
ENCODERS = {"resnet": _RESNET, "vit_s16": _VIT16, "vit_b16": _VIT16}


def encoder_spec(name):
    """The `EncoderSpec` of --encoder=`name`, or None for a name of neither table."""
    if name.startswith(rules.HUB_ENCODER_PREFIX) and name not in ENCODERS:
        return HUB
    return ENCODERS.get(name)


def register_encoder_spec(name, spec):
    """Adds the flags' view of an encoder (`simclr_tf.models.encoders.register_encoder`
    calls it); returns the spec."""
    if not isinstance(spec, EncoderSpec):
        raise ValueError(f"spec must be an EncoderSpec. Received: spec={spec!r}")
    ENCODERS[name] = spec
    return spec


def exclusive_owners():
    """{flag: the encoders it is exclusive to}."""
    owners = {}
    for name, spec in ENCODERS.items():
        for flag in spec.exclusive_flags:
            owners.setdefault(flag, []).append(name)
    for flag in HUB.exclusive_flags:
        owners.setdefault(flag, []).append(f"{rules.HUB_ENCODER_PREFIX}<class>")
    return owners


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
# Every flag that may decide a model's variables, whatever the encoder (for messages).
ARCHITECTURE_FLAGS = tuple(dict.fromkeys(
    ("encoder",) + tuple(f for spec in (*ENCODERS.values(), HUB) for f in spec.variable_flags)
    + HEAD_FLAGS))


def architecture_flags(encoder):
    """The flags that decide the variables of a model with `encoder`, for messages."""
    spec = encoder_spec(encoder)
    return ("encoder",) + (spec.variable_flags if spec else ()) + HEAD_FLAGS


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
    spec = encoder_spec(recorded["encoder"])
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
