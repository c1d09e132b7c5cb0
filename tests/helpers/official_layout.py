"""Writes one of our models in the authors' released layout (for tests only).

The reader lives in `simclr_tf.official`; this writer makes checkpoints with the
authors' variable names from our models, so import tests need no released model.
"""
import os

import tensorflow as tf

from simclr_tf import official_roles

class _Names:
    """Keras-style unique layer names: 'conv2d', 'conv2d_1', ... per base name."""

    def __init__(self):
        self.counts = {}

    def __call__(self, base):
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"


def _official_names(model):
    """`{role key: full name}` for our model, numbered the way the authors' Keras
    model numbers its layers (layers are named in construction order)."""
    names = _Names()
    bn_scope = official_roles.BN_SCOPES[0] if model.encoder.global_bn else official_roles.BN_SCOPES[1]
    out = {}
    ours = official_roles.our_roles(model)
    layer_attrs = {}
    for key in ours:
        layer_attrs.setdefault(key[:-1], []).append(key[-1])

    def conv(scope, key):
        outer, inner = names("conv2d_fixed_padding"), names("conv2d")
        for attribute in layer_attrs[key]:
            out[key + (attribute,)] = f"{scope}/{outer}/{inner}/{attribute}"

    def bn(scope, key):
        outer, inner = names("batch_norm_relu"), names(bn_scope)
        for attribute in layer_attrs[key]:
            out[key + (attribute,)] = f"{scope}/{outer}/{inner}/{attribute}"

    def plain(scope, key, base):
        layer = names(base)
        for attribute in layer_attrs[key]:
            out[key + (attribute,)] = f"{scope}/{layer}/{attribute}"

    stem_convs = sum(1 for k in layer_attrs if k[0] == "stem" and k[2] == "conv")
    for i in range(stem_convs):
        conv("resnet", ("stem", i, "conv"))
        bn("resnet", ("stem", i, "bn"))
    block_scope = "bottleneck_block" if model.encoder.block_expansion == 4 else \
        "residual_block"
    for g, group in enumerate(model.encoder.block_groups):
        for b in range(len(group.blocks)):
            key = ("block", g, b)
            scope = f"resnet/block_group{g + 1}/{names(block_scope)}"
            for role in ("shortcut_conv", "conv1", "conv2", "sk_conv", "conv3", "se_reduce"):
                if key + (role,) not in layer_attrs:
                    continue
                if role == "shortcut_conv":
                    conv(scope, key + (role,))
                    bn(scope, key + ("shortcut_bn",))
                elif role == "sk_conv":
                    sk_scope = f"{scope}/{names('sk__conv2d')}"
                    conv(sk_scope, key + ("sk_conv",))
                    bn(sk_scope, key + ("sk_conv_bn",))
                    plain(sk_scope, key + ("sk_squeeze",), "conv2d")
                    bn(sk_scope, key + ("sk_squeeze_bn",))
                    plain(sk_scope, key + ("sk_mixing",), "conv2d")
                elif role == "se_reduce":
                    se_scope = f"{scope}/{names('se__layer')}"
                    plain(se_scope, key + ("se_reduce",), "conv2d")
                    plain(se_scope, key + ("se_expand",), "conv2d")
                else:
                    conv(scope, key + (role,))
                    bn(scope, key + ("bn" + role[-1],))
    prefix = "l" if model.projection_head.mode == "linear" else "nl"
    for j in range(len(model.projection_head.head_layers)):
        scope = f"projection_head/{prefix}_{j}"
        bn(scope, ("head", j, "bn"))
        plain(scope, ("head", j, "dense"), "dense")
    if model.supervised_head is not None:
        plain("head_supervised/linear_layer", ("supervised",), "dense")
    if set(out) != set(ours):
        raise ValueError(f"Internal error: roles without names "
                         f"{sorted(set(ours) - set(out), key=str)}")
    return out, ours


def export_official_layout(model, directory):
    """Writes our model as a checkpoint in the authors' released layout.

    The result, `directory/variables/variables.{index,data-*}`, is what the
    `variables/` folder of the authors' SavedModels holds: an object-based
    checkpoint whose variables carry the authors' full names (`resnet/block_group1/
    bottleneck_block/conv2d_fixed_padding_1/conv2d_1/kernel`, ...), reachable as
    `model/resnet_model/variables/N`, `model/_projection_head/variables/N`,
    `model/supervised_head/variables/N` and `trainable_variables_list/N`.
    `load_official(directory)` reads it back. No `saved_model.pb` is written.

    Args:
        model: a built `SimCLRModel`.
        directory: output folder (created; must not already hold a checkpoint).

    Returns:
        The checkpoint prefix written.

    Raises:
        ValueError: the model is not built, or `directory` already holds a model.
    """
    prefix = os.path.join(os.fspath(directory), "variables", "variables")
    if tf.io.gfile.exists(prefix + ".index"):
        raise ValueError(f"{directory!r} already holds a checkpoint; choose a new folder.")
    full_names, ours = _official_names(model)
    parts = {"resnet_model": [], "_projection_head": [], "supervised_head": []}
    trainable = []
    part_of = {"stem": "resnet_model", "block": "resnet_model",
               "head": "_projection_head", "supervised": "supervised_head"}
    for key, variable in ours.items():
        copy = tf.Variable(variable.numpy(), name=full_names[key],
                           trainable=variable.trainable)
        parts[part_of[key[0]]].append(copy)
        if variable.trainable:
            trainable.append(copy)
    holders = {}
    for part, variables in parts.items():
        if variables:
            holder = tf.__internal__.tracking.AutoTrackable()
            # Trainable first, as Keras 2 lists `layer.variables`.
            holder.variables = sorted(variables, key=lambda v: not v.trainable)
            holders[part] = holder
    checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(**holders),
                                     trainable_variables_list=trainable)
    return checkpoint.write(prefix)
