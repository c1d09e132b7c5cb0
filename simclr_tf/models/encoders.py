"""Encoders: what `SimCLRModel` needs of one, and the name table behind `--encoder`.

An encoder is a `keras.layers.Layer` that
- is called on images float [B, H, W, 3] (RGB in [0, 1], in the model's compute
  dtype) with `training=`, and returns a dict of named features in the order of
  `feature_names`; one of them is `outputs.H` ('final_avg_pool'), the
  representation h, float32 [B, output_dim] (the key keeps the reference's name
  whatever the pooling, so exports and evaluation read every encoder alike);
- has `output_dim` (int): the width of h;
- has `feature_names` (tuple of str): the keys of its output dict;
- has `stages()`: the lists of layers that fine-tuning may freeze, from the input
  on. `--fine_tune_after_block=k` freezes stages 0..k; k is in -1..4, so an encoder
  with 5 stages maps one to one (ResNet: stem, block groups 1-4), and 4 freezes the
  whole encoder whatever its number of stages (linear evaluation);
- has `no_decay_variables()`: variables of more than one dimension that optimizers
  must neither decay nor trust-scale (a ViT's class token and position embedding;
  none for ResNet). Variables with ndim <= 1 (norms, biases) are excluded by
  structure anyway (`simclr_tf.optimizers`).

`build_encoder(name, **options)` makes one from the table below; `SimCLRModel`
calls it for `encoder='resnet'` etc. and also takes an encoder layer directly.
"""
from simclr_tf import rules
from simclr_tf.models import vit
from simclr_tf.models.resnet import ResNet

# Options every builder receives (each takes what it needs).
RESNET_OPTIONS = ("depth", "width_multiplier", "sk_ratio", "se_ratio", "stem",
                  "batch_norm_decay", "global_bn")


def _resnet(options, dtype):
    return ResNet(**{k: options[k] for k in RESNET_OPTIONS if k in options}, dtype=dtype,
                  name="resnet")


def _vit(preset):
    """The builder of a ViT preset; of the options it reads only 'vit_pool' ('token'
    unless given), and ignores the ResNet ones every builder receives."""
    def build(options, dtype):
        return vit.ViT(**vit.PRESETS[preset], pool=options.get("vit_pool", "token"),
                       dtype=dtype, name="vit")
    return build


ENCODERS = {
    "resnet": _resnet,
    **{preset: _vit(preset) for preset in vit.PRESETS},  # vit_s16, vit_b16
}


def register_encoder(name, builder):
    """Adds `builder(options: dict, dtype) -> encoder layer` under `name`."""
    ENCODERS[name] = builder


def build_encoder(name, dtype=None, **options):
    """The encoder called `name` (see `ENCODERS`), given the model's options.

    Args:
        name: a key of `ENCODERS`, or 'hub:<preset directory, preset name or
            backbone class>' (`simclr_tf.models.hub`, keras-hub installed).
        dtype: the dtype policy of the model.
        **options: the encoder options of `SimCLRModel` (ResNet's depth, width,
            ...); a builder ignores those it does not use.
    """
    if name.startswith(rules.HUB_ENCODER_PREFIX) and name not in ENCODERS:
        from simclr_tf.models import hub  # pylint: disable=import-outside-toplevel
        return hub.build(name[len(rules.HUB_ENCODER_PREFIX):], options, dtype)
    if name not in ENCODERS:
        raise ValueError(f"encoder must be one of {sorted(ENCODERS)}. Received: "
                         f"encoder={name!r}")
    return ENCODERS[name](options, dtype)


def frozen_layers(encoder, fine_tune_after_block):
    """The stages that `fine_tune_after_block` freezes (a list of layers)."""
    rules.check_fine_tune_after_block(fine_tune_after_block)
    stages = encoder.stages()
    if fine_tune_after_block == rules.FINE_TUNE_AFTER_BLOCK_CHOICES[-1]:
        return [layer for stage in stages for layer in stage]
    if fine_tune_after_block >= len(stages):
        raise ValueError(
            f"fine_tune_after_block={fine_tune_after_block} needs an encoder with more "
            f"than {fine_tune_after_block} stages; {encoder.name} has {len(stages)}: use "
            f"-1 (train everything), 0..{len(stages) - 1}, or "
            f"{rules.FINE_TUNE_AFTER_BLOCK_CHOICES[-1]} (freeze the whole encoder).")
    return [layer for stage in stages[:fine_tune_after_block + 1] for layer in stage]
