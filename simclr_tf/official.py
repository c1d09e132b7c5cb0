"""Import of the authors' released SimCLR v1/v2 TF2 models into `SimCLRModel`.

The authors release SavedModels whose `variables/` part is an object-based TF2
checkpoint. Its keys are object-graph paths with numeric indices, but the checkpoint's
`_CHECKPOINTABLE_OBJECT_GRAPH` entry gives every variable its full name in the authors'
Keras model (`resnet/block_group2/bottleneck_block_3/conv2d_fixed_padding_12/
conv2d_12/kernel`). Those names are a scope tree; this module reads the tree by
structure: which block group, which block of the group, which role in the block. The
numeric suffixes Keras appends to repeated layer names are only used to order siblings
of one kind (Keras numbers layers in creation order); they are never matched against
expected values, so models whose counters differ (other depths, SE, other head sizes)
map the same way.

Everything in the checkpoint must find a place in our model and every weight of our
model (BN moving statistics included) must be filled, with equal shapes; anything else
raises `ValueError` naming the variables. The architecture (depth, width, selective
kernels, squeeze-excitation, stem, projection head, classes) is inferred from the
names and shapes, so no flag has to be guessed.

Example:
>>> model = load_official("/models/r50_1x_sk0/saved_model")
>>> outputs = model(images, training=False)        # RGB floats in [0, 1]
>>> h, logits = outputs["final_avg_pool"], outputs["logits_sup"]
"""
import dataclasses
import logging
import os
import re

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from simclr_tf.models.layers import SelectiveKernelConv
from simclr_tf.models.resnet import BLOCKS, GROUP_WIDTHS, scaled_width
from simclr_tf.models.simclr import SimCLRModel
from simclr_tf.variants import SK_RATIO

logger = logging.getLogger(__name__)

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
BN_ATTRS = ("gamma", "beta", "moving_mean", "moving_variance")
_SUFFIX = re.compile(r"^(.*?)(?:_(\d+))?$")
# Scope names of the authors' layers (Keras' snake case of their class names).
_BLOCK_KINDS = {"bottleneck_block": "bottleneck", "residual_block": "basic"}
_BN_SCOPES = ("sync_batch_normalization", "batch_normalization")
# The SK squeeze width is max(filters * sk_ratio, SK_MIN_DIM) in the authors' code.
SK_MIN_DIM = 32


# ----------------------------------------------------------------------------------
# Locating and reading the checkpoint


def checkpoint_prefix(path):
    """The checkpoint prefix of a released SavedModel.

    Args:
        path: a SavedModel directory (holding `variables/variables.index`), its
            `variables/` directory, or a checkpoint prefix (`.../variables/variables`).

    Returns:
        The prefix to pass to `tf.train.load_checkpoint`.

    Raises:
        FileNotFoundError: if no checkpoint is found at or under `path`.
    """
    path = os.fspath(path)
    candidates = [os.path.join(path, "variables", "variables"),
                  os.path.join(path, "variables"), path]
    for prefix in candidates:
        if tf.io.gfile.exists(prefix + ".index"):
            return prefix
    raise FileNotFoundError(
        f"No released SimCLR model at {path!r}: expected a SavedModel directory holding "
        "'variables/variables.index' (the authors' saved_model/ folder), its "
        "'variables/' folder, or a checkpoint prefix with a '.index' file next to it.")


def _object_graph(reader, prefix):
    if not reader.has_tensor(OBJECT_GRAPH_KEY):
        raise ValueError(
            f"{prefix!r} is a name-based (TF1) checkpoint without an object graph; only "
            "the authors' TF2 SavedModels (object-based checkpoints) can be imported.")
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
    return graph


def read_official_names(path):
    """Full variable names of a released model and their checkpoint keys.

    Args:
        path: see `checkpoint_prefix`.

    Returns:
        `(prefix, {full_name: checkpoint_key})`.

    Raises:
        FileNotFoundError: no checkpoint at `path`.
        ValueError: no object graph, or two variables share a full name.
    """
    prefix = checkpoint_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    names = {}
    for node in _object_graph(reader, prefix).nodes:
        for attribute in node.attributes:
            if attribute.name != "VARIABLE_VALUE":
                continue
            if attribute.full_name in names:
                raise ValueError(
                    f"Two variables of {prefix!r} share the name {attribute.full_name!r}; "
                    "their roles cannot be told apart.")
            names[attribute.full_name] = attribute.checkpoint_key
    return prefix, names


def is_official_savedmodel(path):
    """Whether `path` holds a model in the authors' released TF2 layout.

    True for a SavedModel directory, its `variables/` folder or a checkpoint prefix
    whose variables carry the authors' names (`resnet/block_group1/...`). Our own
    training checkpoints answer False. Never raises.

    Args:
        path: a path given by the user (e.g. `--checkpoint`).
    """
    try:
        _, names = read_official_names(path)
    except (FileNotFoundError, ValueError, tf.errors.OpError):
        return False
    return any(name.startswith("resnet/block_group") for name in names)


# ----------------------------------------------------------------------------------
# The authors' scope tree -> roles


class _Scope:
    """One level of the authors' name tree: child scopes and variables."""

    def __init__(self, path):
        self.path = path
        self.children = {}
        self.variables = {}  # attribute -> full name

    def child(self, name):
        if name not in self.children:
            self.children[name] = _Scope(f"{self.path}/{name}" if self.path else name)
        return self.children[name]


def _split_suffix(name):
    """'conv2d_fixed_padding_12' -> ('conv2d_fixed_padding', 12); no suffix -> 0."""
    base, number = _SUFFIX.match(name).groups()
    return base, int(number) if number is not None else 0


def _build_tree(names):
    root = _Scope("")
    for name in names:
        *scopes, attribute = name.split("/")
        scope = root
        for part in scopes:
            scope = scope.child(part)
        scope.variables[attribute] = name
    return root


def _kinds(scope, allowed):
    """Children of `scope` grouped by kind, each list in Keras creation order.

    Raises ValueError on a child of another kind or on variables held directly.
    """
    grouped = {kind: [] for kind in allowed}
    unknown = []
    for name, child in scope.children.items():
        base, number = _split_suffix(name)
        if base in grouped:
            grouped[base].append((number, child))
        else:
            unknown.append(child.path)
    if unknown or scope.variables:
        extra = unknown + sorted(scope.variables.values())
        raise ValueError(
            f"Cannot map {extra} inside {scope.path!r}: expected only "
            f"{sorted(allowed)} there. Is this a SimCLR model released by the authors?")
    return {kind: [c for _, c in sorted(items, key=lambda t: t[0])]
            for kind, items in grouped.items()}


def _leaf(scope, kinds, attributes, required):
    """Variables of a wrapper scope holding exactly one Keras layer of `kinds`."""
    if scope.variables or len(scope.children) != 1:
        raise ValueError(f"Expected exactly one layer inside {scope.path!r}; found "
                         f"{sorted(scope.children) + sorted(scope.variables)}.")
    (name, inner), = scope.children.items()
    if _split_suffix(name)[0] not in kinds or inner.children:
        raise ValueError(f"Cannot map {inner.path!r}: expected one of {kinds} there.")
    return _layer_variables(inner, attributes, required)


def _layer_variables(scope, attributes, required):
    unknown = sorted(set(scope.variables) - set(attributes))
    missing = sorted(set(required) - set(scope.variables))
    if unknown or missing or scope.children:
        raise ValueError(
            f"Layer {scope.path!r} has variables {sorted(scope.variables)} and children "
            f"{sorted(scope.children)}; expected {list(required)} (optional: "
            f"{sorted(set(attributes) - set(required))}).")
    return dict(scope.variables)


def _conv(scope):
    """A `conv2d_fixed_padding` scope -> {'kernel': name}."""
    return _leaf(scope, ("conv2d",), ("kernel",), ("kernel",))


def _bn(scope):
    """A `batch_norm_relu` scope -> {gamma, [beta], moving_mean, moving_variance}."""
    return _leaf(scope, _BN_SCOPES, BN_ATTRS, ("gamma", "moving_mean", "moving_variance"))


def _plain(scope, required=("kernel",)):
    """A Keras Conv2D / Dense scope -> {'kernel', ['bias']}."""
    return _layer_variables(scope, ("kernel", "bias"), required)


def _assign(roles, key, variables):
    for attribute, name in variables.items():
        roles[key + (attribute,)] = name


def _take(units, roles_in_order, where):
    if len(units) != len(roles_in_order):
        raise ValueError(f"{where}: found {len(units)} layers, expected "
                         f"{len(roles_in_order)} ({', '.join(roles_in_order)}).")
    return zip(roles_in_order, units)


def _block_roles(block_scope, kind, key, roles):
    """Maps one residual block; returns (has_projection, has_sk, has_se)."""
    units = _kinds(block_scope, ("conv2d_fixed_padding", "batch_norm_relu", "sk__conv2d",
                                 "se__layer"))
    has_sk = bool(units["sk__conv2d"])
    has_se = bool(units["se__layer"])
    if len(units["sk__conv2d"]) > 1 or len(units["se__layer"]) > 1:
        raise ValueError(f"More than one SK conv or SE layer in {block_scope.path!r}.")
    if has_sk and kind != "bottleneck":
        raise ValueError(f"Selective kernels in the basic block {block_scope.path!r} "
                         "have no counterpart in our ResNet.")
    if kind == "bottleneck":
        convs = ["conv1", "conv3"] if has_sk else ["conv1", "conv2", "conv3"]
    else:
        convs = ["conv1", "conv2"]
    bns = ["bn" + c[-1] for c in convs]
    has_projection = len(units["conv2d_fixed_padding"]) == len(convs) + 1
    if has_projection:  # the authors create the shortcut's layers first
        convs, bns = ["shortcut_conv"] + convs, ["shortcut_bn"] + bns
    for role, unit in _take(units["conv2d_fixed_padding"], convs, block_scope.path):
        _assign(roles, key + (role,), _conv(unit))
    for role, unit in _take(units["batch_norm_relu"], bns, block_scope.path):
        _assign(roles, key + (role,), _bn(unit))
    if has_sk:
        sk = units["sk__conv2d"][0]
        parts = _kinds(sk, ("conv2d_fixed_padding", "batch_norm_relu", "conv2d"))
        for role, unit in _take(parts["conv2d_fixed_padding"], ["sk_conv"], sk.path):
            _assign(roles, key + (role,), _conv(unit))
        for role, unit in _take(parts["batch_norm_relu"], ["sk_conv_bn", "sk_squeeze_bn"],
                                sk.path):
            _assign(roles, key + (role,), _bn(unit))
        for role, unit in _take(parts["conv2d"], ["sk_squeeze", "sk_mixing"], sk.path):
            _assign(roles, key + (role,), _plain(unit))
    if has_se:
        se = units["se__layer"][0]
        parts = _kinds(se, ("conv2d",))
        for role, unit in _take(parts["conv2d"], ["se_reduce", "se_expand"], se.path):
            _assign(roles, key + (role,), _plain(unit, ("kernel", "bias")))
    return has_projection, has_sk, has_se


def _official_roles(names):
    """Full names -> `({role key: full name}, structure facts)`; every name is used."""
    tree = _build_tree(names)
    top = set(tree.children)
    if tree.variables or not top <= {"resnet", "projection_head", "head_supervised"} \
            or "resnet" not in top:
        raise ValueError(
            "Expected the authors' top-level scopes 'resnet', 'projection_head' and "
            f"'head_supervised'; found {sorted(top) + sorted(tree.variables)}.")
    roles = {}
    facts = {}
    resnet = tree.children["resnet"]
    groups = [resnet.children.get(f"block_group{g}") for g in range(1, 5)]
    if any(g is None for g in groups):
        raise ValueError(f"Expected scopes block_group1..4 in 'resnet'; found "
                         f"{sorted(resnet.children)}.")
    stem_scope = _Scope("resnet")
    stem_scope.children = {k: v for k, v in resnet.children.items()
                           if not k.startswith("block_group")}
    stem_scope.variables = resnet.variables
    stem = _kinds(stem_scope, ("conv2d_fixed_padding", "batch_norm_relu"))
    if len(stem["conv2d_fixed_padding"]) not in (1, 3) or \
            len(stem["batch_norm_relu"]) != len(stem["conv2d_fixed_padding"]):
        raise ValueError(
            "The stem must be one conv + BN (ResNet) or three (ResNet-D); found "
            f"{len(stem['conv2d_fixed_padding'])} convs and "
            f"{len(stem['batch_norm_relu'])} BNs directly under 'resnet'.")
    for i, (conv, bn) in enumerate(zip(stem["conv2d_fixed_padding"],
                                       stem["batch_norm_relu"])):
        _assign(roles, ("stem", i, "conv"), _conv(conv))
        _assign(roles, ("stem", i, "bn"), _bn(bn))
    facts["stem_convs"] = len(stem["conv2d_fixed_padding"])
    facts["blocks"], kinds, sk, se = [], set(), set(), set()
    for g, group in enumerate(groups):
        blocks = _kinds(group, tuple(_BLOCK_KINDS))
        if blocks["bottleneck_block"] and blocks["residual_block"]:
            raise ValueError(f"{group.path!r} mixes bottleneck and basic blocks.")
        kind_scope = "bottleneck_block" if blocks["bottleneck_block"] else "residual_block"
        kinds.add(_BLOCK_KINDS[kind_scope])
        facts["blocks"].append(len(blocks[kind_scope]))
        for b, block in enumerate(blocks[kind_scope]):
            has_projection, has_sk, has_se = _block_roles(
                block, _BLOCK_KINDS[kind_scope], ("block", g, b), roles)
            if has_projection != (b == 0):
                raise ValueError(f"{block.path!r}: only the first block of a group has a "
                                 "projection shortcut in our ResNet.")
            sk.add(has_sk)
            se.add(has_se)
    if len(kinds) != 1 or len(sk) != 1 or len(se) != 1:
        raise ValueError("Block kinds, selective kernels and squeeze-excitation must be "
                         "the same in every block.")
    facts["kind"], facts["sk"], facts["se"] = kinds.pop(), sk.pop(), se.pop()

    facts["head_layers"], facts["head_mode"] = 0, "none"
    if "projection_head" in tree.children:
        head = tree.children["projection_head"]
        layers = _kinds(head, ("nl", "l"))
        if layers["nl"] and layers["l"]:
            raise ValueError("The projection head mixes linear ('l_0') and nonlinear "
                             "('nl_j') layers.")
        facts["head_mode"] = "nonlinear" if layers["nl"] else "linear"
        head_layers = layers["nl"] or layers["l"]
        facts["head_layers"] = len(head_layers)
        for j, layer in enumerate(head_layers):
            parts = _kinds(layer, ("dense", "batch_norm_relu"))
            for role, unit in _take(parts["dense"], ["dense"], layer.path):
                _assign(roles, ("head", j, role), _plain(unit))
            for role, unit in _take(parts["batch_norm_relu"], ["bn"], layer.path):
                _assign(roles, ("head", j, role), _bn(unit))
    if "head_supervised" in tree.children:
        sup = _kinds(tree.children["head_supervised"], ("linear_layer",))
        for _, layer in _take(sup["linear_layer"], ["linear_layer"], "head_supervised"):
            parts = _kinds(layer, ("dense",))
            for _, unit in _take(parts["dense"], ["dense"], layer.path):
                _assign(roles, ("supervised",), _plain(unit, ("kernel", "bias")))
    unused = set(names) - set(roles.values())
    if unused:  # defensive: every branch above either assigns or raises
        raise ValueError(f"Unmapped variables: {sorted(unused)}")
    return roles, facts


# ----------------------------------------------------------------------------------
# Our model -> roles


def _bn_variables(bn_relu):
    bn = bn_relu.bn
    out = {"gamma": bn.gamma, "moving_mean": bn.moving_mean,
           "moving_variance": bn.moving_variance}
    if bn.beta is not None:
        out["beta"] = bn.beta
    if bn.gamma is None:
        raise ValueError(f"{bn.path}: BN without gamma has no counterpart in the "
                         "authors' layout.")
    return out


def _our_roles(model):
    """`{role key: keras variable}` of a built `SimCLRModel`, in the authors' layout."""
    if not isinstance(model, SimCLRModel):
        raise ValueError(f"Expected a SimCLRModel. Received: model={type(model).__name__}")
    if not model.built:
        raise ValueError("Build the model first (model.build((None, H, W, 3)) or call it).")
    roles = {}

    def put(key, layer_vars):
        for attribute, variable in layer_vars.items():
            roles[key + (attribute,)] = variable

    encoder = model.encoder
    stem = encoder.stem
    pairs = list(zip(stem.deep_convs, stem.deep_bns)) + [(stem.conv, stem.bn)]
    for i, (conv, bn) in enumerate(pairs):
        put(("stem", i, "conv"), {"kernel": conv.conv.kernel})
        put(("stem", i, "bn"), _bn_variables(bn))
    for g, group in enumerate(encoder.block_groups):
        for b, block in enumerate(group.blocks):
            key = ("block", g, b)
            if block.shortcut_conv is not None:
                put(key + ("shortcut_conv",), {"kernel": block.shortcut_conv.conv.kernel})
                put(key + ("shortcut_bn",), _bn_variables(block.shortcut_bn))
            put(key + ("conv1",), {"kernel": block.conv1.conv.kernel})
            put(key + ("bn1",), _bn_variables(block.bn1))
            if isinstance(block.conv2, SelectiveKernelConv):
                sk = block.conv2
                put(key + ("sk_conv",), {"kernel": sk.conv.conv.kernel})
                put(key + ("sk_conv_bn",), _bn_variables(sk.conv_bn))
                put(key + ("sk_squeeze",), {"kernel": sk.squeeze.kernel})
                put(key + ("sk_squeeze_bn",), _bn_variables(sk.squeeze_bn))
                put(key + ("sk_mixing",), {"kernel": sk.mixing.kernel})
            else:
                put(key + ("conv2",), {"kernel": block.conv2.conv.kernel})
                put(key + ("bn2",), _bn_variables(block.bn2))
            if hasattr(block, "conv3"):
                put(key + ("conv3",), {"kernel": block.conv3.conv.kernel})
                put(key + ("bn3",), _bn_variables(block.bn3))
            if block.se is not None:
                put(key + ("se_reduce",), {"kernel": block.se.reduce.kernel,
                                           "bias": block.se.reduce.bias})
                put(key + ("se_expand",), {"kernel": block.se.expand.kernel,
                                           "bias": block.se.expand.bias})
    for j, layer in enumerate(model.projection_head.head_layers):
        put(("head", j, "dense"), {"kernel": layer.dense.kernel})
        put(("head", j, "bn"), _bn_variables(layer.bn))
    if model.supervised_head is not None:
        dense = model.supervised_head.dense
        put(("supervised",), {"kernel": dense.kernel, "bias": dense.bias})
    covered = {id(v) for v in roles.values()}
    missed = [v.path for v in model.weights if id(v) not in covered]
    if missed:
        raise ValueError(f"Variables of our model without a place in the authors' layout: "
                         f"{missed}")
    return roles


# ----------------------------------------------------------------------------------
# Architecture inference


def _ratio_from_widths(observed, filters, floor, preferred):
    """A ratio r with max(int(f * r), floor) == w for every (f, w), or None.

    `preferred` wins when consistent (many ratios fit when `floor` clamps every width).
    """
    def fits(ratio):
        return all(max(int(f * ratio), floor) == w for f, w in zip(filters, observed))

    candidates = [preferred] if preferred else []
    for f, w in sorted(zip(filters, observed), key=lambda t: -t[0]):
        candidates += [w / f, np.nextafter(w / f, np.inf)]
    for ratio in candidates:
        if ratio and fits(ratio):
            return float(ratio)
    return None


@dataclasses.dataclass(frozen=True)
class OfficialModelInfo:
    """What `inspect_official` read from a released model.

    Attributes:
        prefix: the checkpoint prefix.
        config: `SimCLRModel` keyword arguments that reproduce the architecture.
        num_variables: variables in the checkpoint (BN moving statistics included).
        ft_proj_selector_inferred: False when the supervised head's input width
            cannot tell which projection layer feeds it (then 0 is assumed).
    """
    prefix: str
    config: dict
    num_variables: int
    ft_proj_selector_inferred: bool


def inspect_official(path):
    """Reads a released model's architecture from its variable names and shapes.

    Args:
        path: a released SavedModel directory (see `checkpoint_prefix`).

    Returns:
        An `OfficialModelInfo`; `info.config` builds the matching `SimCLRModel`.

    Raises:
        FileNotFoundError: no checkpoint at `path`.
        ValueError: a variable or a structure that our model cannot represent.
    """
    prefix, names = read_official_names(path)
    by_key = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    config, selector_known = infer_official_config(
        {full: by_key[key] for full, key in names.items()})
    return OfficialModelInfo(prefix=prefix, config=config, num_variables=len(names),
                             ft_proj_selector_inferred=selector_known)


def infer_official_config(shapes):
    """`SimCLRModel` arguments for the authors' variables (names and shapes only).

    Args:
        shapes: `{full name: shape}` of every variable of a released model (as
            `variables.tsv` lists them).

    Returns:
        `(config, ft_proj_selector_inferred)`: the keyword arguments, and False when
        the supervised head's input width cannot tell which projection layer feeds
        it (h and the hidden head layers have one width; 0 is then assumed).

    Raises:
        ValueError: a variable or a structure that our model cannot represent.
    """
    roles, facts = _official_roles(shapes)

    def shape(role):
        return tuple(int(d) for d in shapes[roles[role]])

    kind, counts = facts["kind"], tuple(facts["blocks"])
    depth = next((d for d, spec in BLOCKS.items() if spec == (kind, counts)), None)
    if depth is None:
        raise ValueError(f"No ResNet depth has {kind} blocks {counts} per group; "
                         f"known: {BLOCKS}.")
    group_widths = [shape(("block", g, 0, "conv1", "kernel"))[-1] for g in range(4)]
    width = None
    for g in (0, 3, 1, 2):
        candidate = group_widths[g] / GROUP_WIDTHS[g]
        candidate = int(candidate) if float(candidate).is_integer() else candidate
        if [scaled_width(base, candidate) for base in GROUP_WIDTHS] == group_widths:
            width = candidate
            break
    if width is None:
        raise ValueError(f"Block widths {group_widths} follow no width multiplier.")

    stem_kernel = shape(("stem", 0, "conv", "kernel"))
    if facts["stem_convs"] == 3:
        if not facts["sk"]:
            raise ValueError("A ResNet-D stem without selective kernels has no counterpart "
                             "in our ResNet (it ties ResNet-D to sk_ratio > 0).")
        stem = "imagenet"
    elif facts["sk"]:
        raise ValueError("Selective kernels with a plain stem have no counterpart in our "
                         "ResNet (it ties ResNet-D to sk_ratio > 0).")
    elif stem_kernel[0] == 7:
        stem = "imagenet"
    elif stem_kernel[0] == 3:
        stem = "cifar"  # the authors' code trains 32-px models with one 3x3/1 conv
    else:
        raise ValueError(f"Unknown stem conv of shape {stem_kernel}.")

    block_keys = [(g, b) for g in range(4) for b in range(counts[g])]
    sk_ratio = se_ratio = 0.0
    if facts["sk"]:
        sk_ratio = _ratio_from_widths(
            [shape(("block", g, b, "sk_squeeze", "kernel"))[-1] for g, b in block_keys],
            [group_widths[g] for g, _ in block_keys], SK_MIN_DIM, SK_RATIO)
        if sk_ratio is None:
            raise ValueError("The selective-kernel squeeze widths follow no sk_ratio.")
    if facts["se"]:
        se_ratio = _ratio_from_widths(
            [shape(("block", g, b, "se_reduce", "kernel"))[-1] for g, b in block_keys],
            [group_widths[g] for g, _ in block_keys], 1, None)
        if se_ratio is None:
            raise ValueError("The squeeze-excitation widths follow no se_ratio.")

    expansion = 4 if kind == "bottleneck" else 1
    h_dim = group_widths[3] * expansion
    config = dict(depth=depth, width_multiplier=width, sk_ratio=sk_ratio,
                  se_ratio=se_ratio, stem=stem, proj_head_mode=facts["head_mode"],
                  num_proj_layers=facts["head_layers"] or 3, proj_out_dim=128,
                  ft_proj_selector=0, num_classes=None)
    if facts["head_layers"]:
        last = facts["head_layers"] - 1
        config["proj_out_dim"] = shape(("head", last, "dense", "kernel"))[-1]
        if ("head", last, "bn", "beta") in roles:
            raise ValueError(
                "The projection head's last layer has a BN beta, i.e. it is a hidden "
                "layer (a head cut for fine-tuning); our ProjectionHead always ends in "
                "a beta-free output layer, so this head cannot be represented.")
        hidden = [shape(("head", j, "dense", "kernel"))[-1] for j in range(last)]
        if any(w != h_dim for w in hidden):
            raise ValueError(f"Hidden projection layers of widths {hidden} differ from "
                             f"the width of h ({h_dim}); our head keeps that width.")
    selector_known = True
    if ("supervised", "kernel") in roles:
        in_dim, config["num_classes"] = shape(("supervised", "kernel"))
        if in_dim != h_dim:
            if facts["head_layers"] and in_dim == config["proj_out_dim"]:
                config["ft_proj_selector"] = -1
            else:
                raise ValueError(f"The supervised head reads {in_dim} features; h has "
                                 f"{h_dim} and z {config['proj_out_dim']}.")
        elif facts["head_layers"] > 1 or (facts["head_layers"] == 1 and
                                          config["proj_out_dim"] == h_dim):
            # h and the hidden head layers have the same width: ambiguous.
            selector_known = False
    return config, selector_known


# ----------------------------------------------------------------------------------
# Loading


def load_official_weights(model, path, supervised_head=True):
    """Copies every variable of a released model into a built `SimCLRModel`.

    Strict both ways: each checkpoint variable must land on one of our variables with
    the same shape, and each of our variables (BN moving statistics included) must be
    filled. The only exception is the supervised head when `supervised_head=False`:
    then neither the checkpoint's nor the model's head is touched (fine-tuning on
    another label set).

    Args:
        model: a built `SimCLRModel` whose architecture matches the checkpoint
            (`inspect_official(path).config` gives it).
        path: the released SavedModel directory (see `checkpoint_prefix`).
        supervised_head: also load the supervised (logits) head.

    Returns:
        The number of variables assigned.

    Raises:
        FileNotFoundError: no checkpoint at `path`.
        ValueError: naming every variable that is missing, left over or mis-shaped.
    """
    prefix, names = read_official_names(path)
    official, _ = _official_roles(names)
    ours = _our_roles(model)
    if not supervised_head:
        official = {k: v for k, v in official.items() if k[0] != "supervised"}
        ours = {k: v for k, v in ours.items() if k[0] != "supervised"}
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    missing = sorted(ours[k].path for k in set(ours) - set(official))
    unused = sorted(official[k] for k in set(official) - set(ours))
    mismatched = [
        f"{official[k]} {tuple(shapes[names[official[k]]])} -> {ours[k].path} "
        f"{tuple(ours[k].shape)}"
        for k in sorted(set(ours) & set(official), key=str)
        if tuple(shapes[names[official[k]]]) != tuple(ours[k].shape)]
    if missing or unused or mismatched:
        raise ValueError(
            f"The released model at {prefix!r} does not fit this SimCLRModel "
            f"({model.get_config()}); build it from inspect_official(path).config.\n"
            f"  our variables with no counterpart ({len(missing)}): {missing[:10]}\n"
            f"  checkpoint variables left over ({len(unused)}): {unused[:10]}\n"
            f"  shape mismatches ({len(mismatched)}): {mismatched[:10]}")
    for key, variable in ours.items():
        value = reader.get_tensor(names[official[key]])
        variable.assign(value.astype(variable.dtype))
    skipped = len(names) - len(official)
    expected_skipped = 0 if supervised_head else sum(
        1 for full in names if full.startswith("head_supervised/"))
    if skipped != expected_skipped:  # count check: nothing else may stay behind
        raise ValueError(f"{skipped} checkpoint variables were not loaded, expected "
                         f"{expected_skipped}.")
    logger.info("Loaded %d of %d variables from %s%s.", len(ours), len(names), prefix,
                "" if supervised_head else " (supervised head skipped)")
    return len(ours)


def load_official(path, **overrides):
    """Builds our `SimCLRModel` for a released model and loads all its variables.

    Args:
        path: a released SavedModel directory, its `variables/` folder or the
            checkpoint prefix.
        **overrides: `SimCLRModel` arguments replacing the inferred ones. Typical:
            `ft_proj_selector` (which head layer feeds the supervised head; the
            checkpoint cannot tell when h and the hidden layers have the same width,
            0 is assumed), `supervised_head_stop_gradient`, `batch_norm_decay`,
            `global_bn`, `dtype`, `name`. `num_classes` different from the
            checkpoint's (None drops the head) gives a fresh supervised head that is
            not loaded. Architecture arguments (depth, width...) that contradict the
            checkpoint raise ValueError.

    Returns:
        A built `SimCLRModel` with every variable of the checkpoint.

    Raises:
        FileNotFoundError: no checkpoint at `path`.
        ValueError: anything in the checkpoint our model cannot hold.
    """
    info = inspect_official(path)
    config = dict(info.config)
    load_head = "num_classes" not in overrides or \
        overrides["num_classes"] == config["num_classes"]
    config.update(overrides)
    model = SimCLRModel(**config)
    model.build((None, None, None, 3))
    load_official_weights(model, info.prefix, supervised_head=load_head)
    return model
