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
  structure anyway (`simclr_tf.method.optimizers`).

`build_encoder(name, **options)` makes one by its row of the encoder table
(`simclr_tf.config.tables.encoders`, whose rows name the builders below); `SimCLRModel` calls
it for `encoder='resnet'` etc. and also takes an encoder layer directly.
"""
from simclr_tf.config import rules
from simclr_tf.models import vit
from simclr_tf.models.resnet import ResNet
from simclr_tf.config.tables import encoders as encoder_table


# The builders `builder(options, dtype) -> layer` that the rows of the encoder table
# (`simclr_tf.config.tables.encoders.ENCODERS`, TF-free: which flags each reads, its rules)
# name as 'simclr_tf.models.encoders:<function>'.
def resnet(options, dtype):
    return ResNet(**options, dtype=dtype, name="resnet")


def _vit(preset):
    """The builder of a ViT preset: reads 'vit_pool' ('token' unless given); ViT has
    no batch norm, so the model-wide BN options are not its."""
    def build(options, dtype):
        return vit.ViT(**vit.PRESETS[preset], pool=options.get("vit_pool", "token"),
                       dtype=dtype, name="vit")
    return build


vit_s16 = _vit("vit_s16")
vit_b16 = _vit("vit_b16")


def tiny(options, dtype):
    from simclr_tf.models.tiny import TinyNet  # pylint: disable=import-outside-toplevel
    return TinyNet(**options, dtype=dtype, name="tiny")


def build_encoder(name, dtype=None, *, batch_norm_decay=0.9, global_bn=True, **options):
    """The encoder called `name` (see `simclr_tf.config.tables.encoders.ENCODERS`).

    Args:
        name: a key of the encoder table, or 'hub:<preset directory, preset name or
            backbone class>' (`simclr_tf.models.hub`, keras-hub installed).
        dtype: the dtype policy of the model.
        batch_norm_decay, global_bn: the model's batch-norm settings (an encoder
            without batch norm ignores them).
        **options: the encoder's own options (`SimCLRModel(encoder_options=...)`),
            e.g. ResNet's depth, width_multiplier, sk_ratio, se_ratio, stem.

    Raises:
        ValueError: an unknown name, or an option the encoder does not take.
    """
    spec = encoder_table.encoder_spec(name)
    if spec is not None and spec.flags:
        unknown = sorted(set(options) - set(spec.flags.values()))
        if unknown:
            raise ValueError(
                f"encoder_options of {name!r} take {', '.join(sorted(spec.flags.values()))}. "
                f"Received: {', '.join(f'{key}={options[key]!r}' for key in unknown)}")
    options = dict(options, batch_norm_decay=batch_norm_decay, global_bn=global_bn)
    if name.startswith(rules.HUB_ENCODER_PREFIX) and name not in encoder_table.ENCODERS:
        from simclr_tf.models import hub  # pylint: disable=import-outside-toplevel
        return hub.build(name[len(rules.HUB_ENCODER_PREFIX):], options, dtype)
    if name not in encoder_table.ENCODERS:
        raise ValueError(f"encoder must be one of {sorted(encoder_table.ENCODERS)}. "
                         f"Received: encoder={name!r}")
    return spec.build(options, dtype)


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
