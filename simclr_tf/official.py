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

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2, trackable_object_graph_pb2

from simclr_tf import rules, variants
from simclr_tf.models.resnet import GROUP_WIDTHS, scaled_width
from simclr_tf.models.simclr import SimCLRModel
from simclr_tf.official_roles import official_roles, our_roles
from simclr_tf.variants import SK_RATIO

logger = logging.getLogger(__name__)

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
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
    # IndexError: TensorFlow's 'Read less bytes than requested' from a truncated file.
    except (FileNotFoundError, ValueError, IndexError, tf.errors.OpError):
        return False
    return any(name.startswith("resnet/block_group") for name in names)


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
    official, _ = official_roles(names)
    ours = our_roles(model)
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
            `ft_proj_selector` (which head layer feeds the supervised head; read
            from the input width or the SavedModel's graph, and required when
            neither tells: see `OfficialModelInfo.ft_proj_selector_source`),
            `supervised_head_stop_gradient`, `batch_norm_decay`,
            `global_bn`, `dtype`, `name`. `num_classes` different from the
            checkpoint's (None drops the head) gives a fresh supervised head that is
            not loaded. Architecture arguments (depth, width...) that contradict the
            checkpoint raise ValueError.

    Returns:
        A built `SimCLRModel` with every variable of the checkpoint.

    Raises:
        FileNotFoundError: no checkpoint at `path`.
        ValueError: anything in the checkpoint our model cannot hold, or a
            supervised head to load whose input layer nothing tells (pass
            `ft_proj_selector`).
    """
    info = inspect_official(path)
    config = dict(info.config)
    load_head = config["num_classes"] is not None and (
        "num_classes" not in overrides or overrides["num_classes"] == config["num_classes"])
    if load_head and not info.ft_proj_selector_inferred and \
            "ft_proj_selector" not in overrides:
        raise ValueError(selector_unknown_message(path, config) +
                         " Pass ft_proj_selector=..., or num_classes=None to "
                         "leave the supervised head out.")
    config.update(overrides)
    model = SimCLRModel(**config)
    model.build((None, None, None, 3))
    load_official_weights(model, info.prefix, supervised_head=load_head)
    return model
