"""Writes one of our models in the authors' released layout (for tests only).

The reader lives in `simclr_tf.weights.official`; this writer makes checkpoints with the
authors' variable names from our models, so import tests need no released model.
"""
import os

import tensorflow as tf

from simclr_tf.weights.official import roles as official_roles

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


def _official_variables(model):
    """Copies of our model's variables under the authors' names, grouped as the
    authors' checkpoints group them: `({part: [variable]}, trainable, {role: copy})`."""
    full_names, ours = _official_names(model)
    parts = {"resnet_model": [], "_projection_head": [], "supervised_head": []}
    trainable, copies = [], {}
    part_of = {"stem": "resnet_model", "block": "resnet_model",
               "head": "_projection_head", "supervised": "supervised_head"}
    for key, variable in ours.items():
        copy = tf.Variable(variable.numpy(), name=full_names[key],
                           trainable=variable.trainable)
        copies[key] = copy
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
    return holders, trainable, copies


def _prefix(directory):
    prefix = os.path.join(os.fspath(directory), "variables", "variables")
    if tf.io.gfile.exists(prefix + ".index"):
        raise ValueError(f"{directory!r} already holds a checkpoint; choose a new folder.")
    return prefix


def export_official_layout(model, directory):
    """Writes our model as a checkpoint in the authors' released layout.

    The result, `directory/variables/variables.{index,data-*}`, is what the
    `variables/` folder of the authors' SavedModels holds: an object-based
    checkpoint whose variables carry the authors' full names (`resnet/block_group1/
    bottleneck_block/conv2d_fixed_padding_1/conv2d_1/kernel`, ...), reachable as
    `model/resnet_model/variables/N`, `model/_projection_head/variables/N`,
    `model/supervised_head/variables/N` and `trainable_variables_list/N`.
    `load_official(directory)` reads it back. No `saved_model.pb` is written
    (`export_official_savedmodel` writes one).

    Args:
        model: a built `SimCLRModel`.
        directory: output folder (created; must not already hold a checkpoint).

    Returns:
        The checkpoint prefix written.

    Raises:
        ValueError: the model is not built, or `directory` already holds a model.
    """
    prefix = _prefix(directory)
    holders, trainable, _ = _official_variables(model)
    checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(**holders),
                                     trainable_variables_list=trainable)
    return checkpoint.write(prefix)


def export_official_savedmodel(model, directory, ft_proj_selector):
    """Writes our model as a SavedModel shaped like the authors' exports: the same
    variables as `export_official_layout`, and a `__call__(inputs, trainable)`
    traced for both values of `trainable` whose graph computes the heads the way
    the authors' code does, the supervised head reading projection output
    `ft_proj_selector` (0 = h).

    The encoder is not traced (h is a stand-in: the images' mean colour tiled to the
    width of h): what an importer reads from the graph is which head output the
    supervised head's MatMul consumes. The function returns `final_avg_pool` (h),
    `proj_head_output` (z) and `logits_sup`, so a test can compare our heads on h.

    Args:
        model: a built `SimCLRModel` with a nonlinear projection head and a
            supervised head.
        directory: output folder (created; must not already hold a model).
        ft_proj_selector: the projection output the supervised head reads.
    """
    _prefix(directory)
    holders, trainable, copies = _official_variables(model)
    num_layers = len(model.projection_head.head_layers)
    h_width = int(copies[("head", 0, "dense", "kernel")].shape[0])
    epsilon = 1e-5  # the authors' BN epsilon

    def linear_bn(x, j, training):
        x = tf.matmul(x, copies[("head", j, "dense", "kernel")])
        if training:
            mean, variance = tf.nn.moments(x, [0])
        else:
            mean = copies[("head", j, "bn", "moving_mean")]
            variance = copies[("head", j, "bn", "moving_variance")]
        beta = copies.get(("head", j, "bn", "beta"))
        return tf.nn.batch_normalization(x, mean, variance, beta,
                                         copies[("head", j, "bn", "gamma")], epsilon)

    class Exported(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = tf.__internal__.tracking.AutoTrackable()
            for part, holder in holders.items():
                setattr(self.model, part, holder)
            self.trainable_variables_list = trainable

        @tf.function
        def __call__(self, inputs, trainable):
            colour = tf.reduce_mean(inputs, [1, 2])
            h = tf.tile(colour, [1, h_width // 3 + 1])[:, :h_width]
            with tf.name_scope("projection_head"):
                hiddens = [tf.identity(h, "proj_head_input")]
                for j in range(num_layers):
                    with tf.name_scope(f"nl_{j}"):
                        x = linear_bn(hiddens[-1], j, trainable)
                        hiddens.append(x if j == num_layers - 1 else tf.nn.relu(x))
                z = tf.identity(hiddens[-1], "proj_head_output")
            with tf.name_scope("head_supervised"):
                features = tf.stop_gradient(hiddens[ft_proj_selector])
                logits = tf.matmul(features, copies[("supervised", "kernel")])
                logits = tf.nn.bias_add(logits, copies[("supervised", "bias")])
            return {"final_avg_pool": h, "proj_head_output": z,
                    "logits_sup": tf.identity(logits, "logits_sup")}

    exported = Exported()
    spec = tf.TensorSpec([None, None, None, 3], tf.float32)
    exported.__call__.get_concrete_function(spec, trainable=True)
    exported.__call__.get_concrete_function(spec, trainable=False)
    tf.saved_model.save(exported, os.fspath(directory))
    return exported
