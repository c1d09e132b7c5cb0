"""The encoder table of `--encoder`: one `EncoderSpec` row per encoder, written once.

TF-free: `Config`, validation and preflight read it before any model exists. For each
`--encoder`, its row says which flags it reads (and under which `encoder_options` key
`SimCLRModel` receives each), which of those decide its variables, its rules, and its
builder, named as 'module:function' (imported only when the encoder is built, as the
modes' functions are); so config and preflight never branch on encoder names. An
encoder is added with one row: `register_encoder(name, EncoderSpec(...))`.
"""
import dataclasses
import importlib
from typing import Callable, Optional, Union

from simclr_tf.config import rules


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    """What the flags need to know of an encoder, and how to build it.

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
        builder: `builder(options: dict, dtype) -> encoder layer`, named as
            'module:function' (imported by `build`), or the function itself. None
            for the keras-hub row (`simclr_tf.models.hub.build` takes the name).
    """
    flags: dict
    variable_flags: tuple = ()
    exclusive_flags: tuple = ()
    fine_tune_after_block: Optional[tuple] = None
    fine_tune_reason: str = ""
    odd_batch_onednn_crash: Callable = lambda options: False
    patch_size: Optional[int] = None
    builder: Union[str, Callable, None] = None

    def build(self, options, dtype):
        """The encoder layer of `options` (its own and the model's batch-norm ones),
        its builder imported now."""
        builder = self.builder
        if isinstance(builder, str):
            module, _, name = builder.partition(":")
            builder = getattr(importlib.import_module(module), name)
        return builder(options, dtype)


_BUILDERS = "simclr_tf.models.encoders"
_RESNET = EncoderSpec(
    flags=dict(resnet_depth="depth", width_multiplier="width_multiplier",
               sk_ratio="sk_ratio", se_ratio="se_ratio", stem="stem"),
    variable_flags=("resnet_depth", "width_multiplier", "sk_ratio", "se_ratio", "stem"),
    exclusive_flags=("variant", "sk_ratio", "se_ratio"),
    # With selective kernels the shortcut pools first, then a stride-1 convolution.
    odd_batch_onednn_crash=lambda options: options["sk_ratio"] == 0,
    builder=f"{_BUILDERS}:resnet")
_VIT16 = EncoderSpec(flags=dict(vit_pool="vit_pool"), patch_size=16)
HUB = EncoderSpec(
    flags=dict(encoder_config="hub_config", vit_pool="vit_pool"),
    exclusive_flags=("encoder_config",),
    fine_tune_after_block=(-1, rules.FINE_TUNE_AFTER_BLOCK_CHOICES[-1]),
    fine_tune_reason=f"a keras-hub backbone is one stage: -1 trains it, "
                     f"{rules.FINE_TUNE_AFTER_BLOCK_CHOICES[-1]} freezes it")

# --encoder -> its row; 'hub:<...>' names use HUB.
ENCODERS = {
    "resnet": _RESNET,
    "vit_s16": dataclasses.replace(_VIT16, builder=f"{_BUILDERS}:vit_s16"),
    "vit_b16": dataclasses.replace(_VIT16, builder=f"{_BUILDERS}:vit_b16"),
    # Two conv-BN-ReLU stages and a mean (simclr_tf/models/tiny.py): smoke runs and tests.
    "tiny": EncoderSpec(
        flags=dict(width_multiplier="width_multiplier"),
        variable_flags=("width_multiplier",),
        fine_tune_after_block=(-1, 0, 1, 4),
        fine_tune_reason="the tiny encoder has two stages: -1 trains both, 0 freezes "
                         "the first, 1 both, 4 the whole encoder",
        builder=f"{_BUILDERS}:tiny"),
}


def encoder_spec(name):
    """The `EncoderSpec` of --encoder=`name`, or None for a name of neither table."""
    if name.startswith(rules.HUB_ENCODER_PREFIX) and name not in ENCODERS:
        return HUB
    return ENCODERS.get(name)


def register_encoder(name, spec):
    """Adds an encoder (one defined outside the package): its row, whose `builder`
    makes it and whose flags say what it reads, so that `--encoder=name` validates,
    runs, is inherited from a record and is checked against checkpoints; returns the
    spec."""
    if not isinstance(spec, EncoderSpec):
        raise ValueError(f"spec must be an EncoderSpec. Received: spec={spec!r}")
    if spec.builder is None:
        raise ValueError(f"spec must name its builder ('module:function'). Received: "
                         f"spec={spec!r}")
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


def variable_flags():
    """Every flag that may decide an encoder's variables, of the table as it is now
    (an encoder registered later included), in the table's order."""
    return tuple(dict.fromkeys(
        flag for spec in (*ENCODERS.values(), HUB) for flag in spec.variable_flags))
