"""Checkpoint files: what a directory of checkpoints holds and whether each reads.

Pure reading, never writing: the state file (`read_state`), the checkpoints on disk
(`candidates`), whether one is complete (`unreadable_reason`, `missing_data_bytes`)
or gone (`deleted`), the newest complete one (`latest`), and the step in a prefix
(`step_of`).
"""
import os
import re

import numpy as np
import tensorflow as tf
from absl import logging

STATE_FILE = "checkpoint"  # TensorFlow's state file: the recorded checkpoints
UNLOADABLE_DIR = "unloadable"  # where checkpoints that do not load are set aside
_BASE = "ckpt"


def read_state(directory):
    """The checkpoints recorded in directory's state file, and what is wrong with it.

    Returns:
        (prefixes newest first, problem): problem is None for an intact state file,
        "missing", or "damaged (<reason>)" for one that does not parse.
    """
    if not tf.io.gfile.exists(os.path.join(directory, STATE_FILE)):
        return [], "missing"
    try:
        state = tf.train.get_checkpoint_state(directory)
    except Exception as error:  # pylint: disable=broad-except
        # UnicodeDecodeError, protobuf's ParseError, ValueError: whatever the bytes are.
        return [], f"damaged ({type(error).__name__}: {_first_line(error)})"
    if state is None:
        return [], "missing"
    paths = list(state.all_model_checkpoint_paths or [])
    if state.model_checkpoint_path:
        paths.append(state.model_checkpoint_path)
    paths = {os.path.normpath(p if os.path.isabs(p) else os.path.join(directory, p))
             for p in paths}
    return sorted(paths, key=lambda p: step_of(p, -1), reverse=True), None


def _groups(directory, base=_BASE):
    """{step: names of its files} for every `<base>-<step>` file or folder."""
    groups = {}
    if not tf.io.gfile.isdir(directory):
        return groups
    for name in tf.io.gfile.listdir(directory):
        name = name.rstrip("/")
        match = re.fullmatch(re.escape(base) + r"-(\d+)(_temp.*|\.index|\.data-.*)", name)
        if match:
            groups.setdefault(int(match.group(1)), []).append(name)
    return groups


def candidates(directory, base=_BASE):
    """Prefixes of the checkpoints in directory, newest first: those its state file
    records and those with an index file on disk (a lost or damaged state file does
    not hide a checkpoint). Returns (prefixes, the state file's problem or None)."""
    recorded, problem = read_state(directory)
    on_disk = [os.path.join(directory, f"{base}-{step}")
               for step, names in _groups(directory, base).items()
               if f"{base}-{step}.index" in names]
    paths = {os.path.normpath(p) for p in recorded + on_disk}
    return sorted(paths, key=lambda p: step_of(p, -1), reverse=True), problem


def unreadable_reason(prefix):
    """Why the checkpoint at `prefix` cannot be read, or None when it looks complete:
    its index parses, every data shard it names is there and none is short of the
    bytes the index lists (`missing_data_bytes`: exact, and cheap)."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        shards = tf.io.gfile.glob(prefix + ".data-*-of-*")
        expected = int(shards[0].rsplit("-of-", 1)[1]) if shards else 1
        if len(shards) != expected:
            return f"{expected - len(shards)} of its {expected} data files are missing"
        missing = missing_data_bytes(reader, shards)
        if missing > 0:
            return f"its data is {missing} bytes short of what its index lists: truncated"
    except (tf.errors.OpError, ValueError, IndexError) as error:
        return _first_line(error)
    return None


def deleted(prefix):
    """Whether the checkpoint at `prefix` has lost its index or every data file (a
    training run deletes all but its newest --keep_checkpoint_max)."""
    return not (tf.io.gfile.exists(prefix + ".index")
                and tf.io.gfile.glob(prefix + ".data-*"))


def missing_data_bytes(reader, shards):
    """How many bytes the data `shards` lack for the tensors `reader` (a
    `tf.train.load_checkpoint`) lists (<= 0: none).

    Exact and cheap: TensorFlow's bundle writes each numeric tensor as its raw bytes
    and each string tensor as varint lengths, a 4-byte checksum and the bytes, with no
    padding (measured equal to the data files' total for our checkpoints and exports,
    sharded ones and the authors' R50). Only string tensors (the object graph) are
    read: 4 ms on the authors' 137 MB R50, where reading every tensor took 73-108 ms
    (warm cache).
    """
    dtypes, shapes = reader.get_variable_to_dtype_map(), reader.get_variable_to_shape_map()
    size = sum(tf.io.gfile.stat(shard).length for shard in shards)
    if not all(d.is_numeric or d.is_bool or d == tf.string for d in dtypes.values()):
        for name in shapes:  # no fixed layout (variant, resource): read every tensor
            _read_tensor(reader, name)
        return 0
    needed = sum(dtypes[name].size * int(np.prod(shape, dtype=np.int64))
                 for name, shape in shapes.items() if dtypes[name] != tf.string)
    if needed > size:
        return needed - size
    for name in shapes:
        if dtypes[name] == tf.string:
            value = _read_tensor(reader, name)
            # A scalar comes back as bytes (np.asarray would drop trailing NULs).
            items = [value] if isinstance(value, bytes) else np.asarray(
                value, dtype=object).reshape(-1)
            needed += 4 + sum(_varint_size(len(item)) + len(item) for item in items)
    return needed - size


def _read_tensor(reader, name):
    try:
        return reader.get_tensor(name)
    except (tf.errors.OpError, IndexError) as error:  # IndexError: 'Read less bytes'
        raise ValueError(f"tensor {name!r} does not read ({error}): its data is "
                         "truncated or damaged") from None


def _varint_size(value):
    size = 1
    while value >= 128:
        value >>= 7
        size += 1
    return size


def latest(model_dir):
    """The newest checkpoint in model_dir that looks complete (see `unreadable_reason`),
    whether or not the state file records it; None if none or no dir. Never writes."""
    if not model_dir or not tf.io.gfile.isdir(model_dir):
        return None
    paths, _ = candidates(model_dir)
    for prefix in paths:
        reason = unreadable_reason(prefix)
        if reason is None:
            return prefix
        if deleted(prefix):  # e.g. since it was listed, by a training run's rotation
            logging.info("Checkpoint %s is gone; using an older one.", prefix)
            continue
        logging.warning("Checkpoint %s cannot be read (%s); using an older one.",
                        prefix, reason)
    return None


def _unreadable_tensor(prefix):
    """Why some tensor of the checkpoint cannot be read in full, or None."""
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError) as error:
        return _first_line(error)
    return None


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def step_of(prefix, default=None):
    """The global step in a checkpoint prefix ('.../ckpt-1000' -> 1000), else `default`
    (e.g. a SavedModel's 'variables/variables' or a released model)."""
    tail = prefix.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else default


def object_variable_shapes(prefix, *path):
    """`{path below: shape}` of every variable the checkpoint at `prefix` holds under
    the object path `path` (e.g. 'model', 'supervised_head'), read through the
    checkpoint's object graph.

    Not by key prefix: a variable reachable from several objects is saved once,
    under the first path TensorFlow finds. A training checkpoint (model and
    optimizer together) keeps every trainable variable under
    `optimizer/_trainable_variables/<i>`, so its `model/supervised_head/` keys name
    only the non-trainable variables, if any. Empty when nothing is under `path`.
    """
    from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=import-outside-toplevel
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    node = 0
    for name in path:
        children = {child.local_name: child.node_id for child in graph.nodes[node].children}
        if name not in children:
            return {}
        node = children[name]
    found, seen, stack = {}, set(), [(node, ())]
    while stack:
        node, names = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for attribute in graph.nodes[node].attributes:
            if attribute.name == "VARIABLE_VALUE" and attribute.checkpoint_key in shapes:
                found["/".join(names)] = tuple(shapes[attribute.checkpoint_key])
        stack.extend((child.node_id, names + (child.local_name,))
                     for child in graph.nodes[node].children)
    return found
