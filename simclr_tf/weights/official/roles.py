"""The authors' checkpoint names and our model's variables, both mapped to roles.

A role key names one layer's place in the architecture (`("block", group, block,
"conv2")`, `("head", j, "bn")`, `("supervised",)`, ...). `official_roles(names)` reads
the authors' scope tree by structure (which block group, which block, which role);
`our_roles(model)` lists our `SimCLRModel`'s variables under the same keys, so
`simclr_tf.weights.official` can pair them.
"""
import re

from simclr_tf.models.layers import SelectiveKernelConv
from simclr_tf.models.simclr import SimCLRModel

BN_ATTRS = ("gamma", "beta", "moving_mean", "moving_variance")
_SUFFIX = re.compile(r"^(.*?)(?:_(\d+))?$")
# Scope names of the authors' layers (Keras' snake case of their class names).
_BLOCK_KINDS = {"bottleneck_block": "bottleneck", "residual_block": "basic"}
BN_SCOPES = ("sync_batch_normalization", "batch_normalization")


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
    return _leaf(scope, BN_SCOPES, BN_ATTRS, ("gamma", "moving_mean", "moving_variance"))


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


def official_roles(names):
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


def our_roles(model):
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


