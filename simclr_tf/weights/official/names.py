"""Reading a released model: its checkpoint prefix and the full names of its variables
(the object graph), and whether a path holds one."""
import os

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"



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


def _child(graph, node_id, name):
    """The id of node `node_id`'s child called `name`, or None."""
    ids = [child.node_id for child in graph.nodes[node_id].children
           if child.local_name == name]
    return ids[0] if ids else None


def _variable(graph, node_id):
    """Node `node_id`'s variable value attribute (`full_name`, `checkpoint_key`), or
    None for a node that is not a variable."""
    found = [attribute for attribute in graph.nodes[node_id].attributes
             if attribute.name == "VARIABLE_VALUE"]
    return found[0] if found else None


def _model_nodes(graph):
    """Ids of the object-graph nodes reachable from the root's `model` child; None
    when the root has no such child. A training checkpoint of the authors' code
    (`tf.train.Checkpoint(model=..., optimizer=..., global_step=...)`) also holds
    their optimizer's step and slots and a save counter: those are not the model's."""
    model = _child(graph, 0, "model")
    if model is None:
        return None
    stack, seen = [model], set()
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(child.node_id for child in graph.nodes[node].children)
    return seen


def read_official_optimizer(path):
    """The optimizer state a checkpoint of the authors' code carries, if any.

    Their released SavedModels carry none; a training checkpoint of their run.py
    (`ckpt-N` in their model_dir) carries the step and a slot per variable (LARS:
    `Momentum`).

    Returns:
        None, or `(step, {slot name: {variable full name: checkpoint key}})`.
    """
    prefix = checkpoint_prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    graph = _object_graph(reader, prefix)
    optimizer = _child(graph, 0, "optimizer")
    if optimizer is None:
        return None
    step_node = _child(graph, optimizer, "iter")
    step_value = None if step_node is None else _variable(graph, step_node)
    step = 0 if step_value is None else int(reader.get_tensor(step_value.checkpoint_key))
    slots = {}
    for slot in graph.nodes[optimizer].slot_variables:
        original, value = (_variable(graph, slot.original_variable_node_id),
                           _variable(graph, slot.slot_variable_node_id))
        if original is not None and value is not None:
            slots.setdefault(slot.slot_name, {})[original.full_name] = value.checkpoint_key
    return step, slots


def read_official_names(path):
    """Full variable names of a released model and their checkpoint keys (the model's
    only: a training checkpoint's optimizer state is `read_official_optimizer`'s).

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
    graph = _object_graph(reader, prefix)
    model = _model_nodes(graph)
    for node_id, node in enumerate(graph.nodes):
        if model is not None and node_id not in model:
            continue
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
