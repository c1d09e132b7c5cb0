"""Inferring a released model's architecture (depth, width, selective kernels, SE,
stem, projection head, classes, which head output the supervised head reads) from
its variables' names and shapes, and its SavedModel graph."""
import dataclasses
import logging
import os

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from simclr_tf.config import rules, variants
from simclr_tf.models.resnet import GROUP_WIDTHS, scaled_width
from simclr_tf.weights.official.names import read_official_names
from simclr_tf.weights.official.roles import official_roles
from simclr_tf.config.variants import SK_RATIO

logger = logging.getLogger(__name__)

# The SK squeeze width is max(filters * sk_ratio, SK_MIN_DIM) in the authors' code.
SK_MIN_DIM = 32


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
        config: `SimCLRModel` keyword arguments that reproduce the architecture
            (`ft_proj_selector` 0 where `ft_proj_selector_source` is None).
        num_variables: variables in the checkpoint (BN moving statistics included).
        ft_proj_selector_source: where the supervised head's input layer was read:
            'widths' (its input width tells), 'graph' (the SavedModel's graph: the
            layer its MatMul reads), 'no head' (no supervised head) or None (nothing
            tells: h and the hidden head layers have one width and there is no
            `saved_model.pb` whose graph says; `load_official` then needs an explicit
            `ft_proj_selector`).
    """
    prefix: str
    config: dict
    num_variables: int
    ft_proj_selector_source: str = None

    @property
    def ft_proj_selector_inferred(self):
        """Whether the released model says which layer feeds its supervised head."""
        return self.ft_proj_selector_source is not None


def inspect_official(path):
    """Reads a released model's architecture from its variable names and shapes, and
    the supervised head's input layer from the SavedModel's graph where the shapes
    cannot tell it.

    Args:
        path: a released SavedModel directory (see `checkpoint_prefix`).

    Returns:
        An `OfficialModelInfo`; `info.config` builds the matching `SimCLRModel`.

    Raises:
        FileNotFoundError: no checkpoint at `path`.
        ValueError: a variable or a structure that our model cannot represent, or a
            graph whose supervised head contradicts the shapes.
    """
    prefix, names = read_official_names(path)
    by_key = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    shapes = {full: by_key[key] for full, key in names.items()}
    config, selector_known = infer_official_config(shapes)
    source = ("widths" if config["num_classes"] else "no head") if selector_known else None
    graph_selector = selector_from_graph(prefix, shapes)
    if graph_selector is not None and config["num_classes"]:
        layers = rules.num_head_layers(config["proj_head_mode"], config["num_proj_layers"])
        if graph_selector == layers:
            graph_selector = -1  # z: the index the widths give
        if selector_known and graph_selector != config["ft_proj_selector"]:
            raise ValueError(
                f"The graph of {saved_model_file(prefix)!r} feeds the supervised head "
                f"from projection layer {graph_selector}, its variables' widths say "
                f"{config['ft_proj_selector']}: the SavedModel and its variables "
                "disagree.")
        config["ft_proj_selector"], source = graph_selector, "graph"
    return OfficialModelInfo(prefix=prefix, config=config, num_variables=len(names),
                             ft_proj_selector_source=source)


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
    roles, facts = official_roles(shapes)

    def shape(role):
        return tuple(int(d) for d in shapes[roles[role]])

    kind, counts = facts["kind"], tuple(facts["blocks"])
    depth = next((d for d, spec in variants.BLOCKS.items() if spec == (kind, counts)), None)
    if depth is None:
        raise ValueError(f"No ResNet depth has {kind} blocks {counts} per group; "
                         f"known: {variants.BLOCKS}.")
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
    config = dict(encoder="resnet", encoder_options=dict(
                      depth=depth, width_multiplier=width, sk_ratio=sk_ratio,
                      se_ratio=se_ratio, stem=stem), proj_head_mode=facts["head_mode"],
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


def selector_unknown_message(path, config):
    """Why the input layer of a released model's supervised head must be given."""
    layers = config["num_proj_layers"]
    return (f"The released model at {os.fspath(path)!r} has a supervised head on a "
            f"{layers}-layer projection head whose hidden layers have the width of h "
            "(so the head's input width cannot tell which output feeds it), and no "
            "saved_model.pb whose graph says. The layer its head was trained on must be "
            "given: 0 = h (the authors' default; their pretrained models' linear heads), "
            "1 = the first projection layer (how SimCLR v2 fine-tunes)"
            + (f", up to {layers - 1}" if layers > 2 else "") + ".")


def saved_model_file(prefix):
    """The `saved_model.pb` beside a released checkpoint (`<dir>/variables/variables`
    -> `<dir>/saved_model.pb`)."""
    return os.path.join(os.path.dirname(os.path.dirname(prefix)), "saved_model.pb")


def selector_from_graph(prefix, shapes):
    """Which projection-head output the supervised head reads, from the SavedModel's
    graph, or None when there is no graph or it cannot tell.

    In every concrete function of the SavedModel, the supervised head's MatMul (the
    one reading `head_supervised/.../kernel`) takes its features from the latest
    projection layer among its ancestors: layer j's dense kernel upstream means
    `ft_proj_selector = j + 1`; none upstream means 0 (h). Every function must agree.

    Args:
        prefix: the checkpoint prefix (`<dir>/variables/variables`).
        shapes: `{full name: shape}` of its variables (for the roles of the names).
    """
    path = saved_model_file(prefix)
    if not tf.io.gfile.exists(path):
        return None
    roles, _ = official_roles(shapes)
    supervised = roles.get(("supervised", "kernel"))
    head_kernels = {name: key[1] for key, name in roles.items()
                    if key[0] == "head" and key[2:] == ("dense", "kernel")}
    if supervised is None:
        return None
    saved_model = saved_model_pb2.SavedModel()
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            saved_model.ParseFromString(f.read())
    except Exception as error:  # pylint: disable=broad-except  (a damaged file tells nothing)
        logger.warning("Cannot read %s (%s); its graph is not used.", path, error)
        return None
    answers = set()
    for meta_graph in saved_model.meta_graphs:
        objects = meta_graph.object_graph_def
        functions = {f.signature.name: f for f in meta_graph.graph_def.library.function}
        for name, concrete in objects.concrete_functions.items():
            function = functions.get(name)
            if function is None or not concrete.bound_inputs:
                continue
            captured = function.signature.input_arg[-len(concrete.bound_inputs):]
            variables = {arg.name: objects.nodes[node].variable.name
                         for arg, node in zip(captured, concrete.bound_inputs)
                         if objects.nodes[node].HasField("variable")}
            answer = _selector_in_function(function, variables, supervised, head_kernels)
            if answer is not None:
                answers.add(answer)
    if len(answers) != 1:
        if answers:
            logger.warning("The functions of %s disagree on the supervised head's input "
                           "layer (%s); its graph is not used.", path, sorted(answers))
        return None
    return answers.pop()


def _selector_in_function(function, variables, supervised, head_kernels):
    """`_selector_from_graph` for one FunctionDef; `variables` maps its captured
    arguments to variable names."""
    nodes = {node.name: node for node in function.node_def}

    def source(tensor):  # 'node:output:0' -> node name; control inputs are skipped
        return None if tensor.startswith("^") else tensor.split(":")[0]

    def variable_read(tensor):
        """The variable a MatMul operand reads (through casts and identities)."""
        name = source(tensor)
        while name in nodes and nodes[name].op in ("Cast", "Identity", "ReadVariableOp"):
            name = source(nodes[name].input[0])
        return variables.get(name)

    matmuls = {name: variable_read(node.input[1]) for name, node in nodes.items()
               if node.op == "MatMul" and len(node.input) >= 2}
    heads = [name for name, kernel in matmuls.items() if kernel == supervised]
    if len(heads) != 1:
        return None
    latest, seen = -1, set()
    pending = [source(nodes[heads[0]].input[0])]
    while pending:
        name = pending.pop()
        if name is None or name in seen or name not in nodes:
            continue
        seen.add(name)
        if matmuls.get(name) in head_kernels:
            latest = max(latest, head_kernels[matmuls[name]])
            continue  # the layers before it are older still
        pending.extend(source(tensor) for tensor in nodes[name].input)
    return latest + 1
