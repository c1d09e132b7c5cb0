"""Where a training step's time goes: TensorFlow's profiler trace, op by op, in parts.

`python scripts/benchmark.py profile ...` traces some steps with `tf.profiler` and
reads the trace here (the XSpace protobuf TensorFlow writes, no extra package). Each op
TensorFlow ran is put in one part by its type and its name (the model's layers and the
step's name scopes: `views`, `nt_xent`, `supervised_loss`, `weight_decay`, `metrics`,
the optimizer's own scope), and the op time of each part is summed:

  convolution forward / backward (input) / backward (filter)   Conv2D and its gradients
  batch norm             the encoder's BN (forward, gradient, the ReLU fused into it)
  heads                  the projection head and the supervised head (their BN too)
  NT-Xent and the gather the contrastive loss, forward and backward, with the
                         all-gather of the other replicas' projections
  optimizer update       the optimizer's ops (LARS: trust ratios, momentum, the
                         variables' assignments) and the weight decay term
  views (on device)      --augment_on=device's ops and the step's blur
  input                  reading the batch from the tf.data iterator
  elementwise, backward  the rest of the backward pass (ReLU gradients, adds, pads)
  elementwise, forward   the rest of the forward pass (residual adds, ReLU, pads)
  metrics and checks     the step's logs (accuracy, entropy, the gradient norm)
  other                  anything else

Op time is the time ops ran, summed over TensorFlow's inter-op threads: two ops running
at once both count. "no op running" is the wall time of the traced steps during which
no op ran on any thread (between ops, between steps, Python between calls). Every op's
part is decided by `op_part` alone, which the tests check on names of a real trace.
"""
import collections
import glob
import os
import re

PARTS = (
    "convolution forward", "convolution backward (input)",
    "convolution backward (filter)", "batch norm", "heads", "NT-Xent and the gather",
    "optimizer update", "views (on device)", "input", "elementwise, backward",
    "elementwise, forward", "metrics and checks", "other")

# Name scopes of the step (simclr_tf.method) and of the optimizers (Keras names an
# optimizer's ops by its `name`: lars, sgd, adam, adamw, lamb, ...).
_OPTIMIZER_SCOPES = ("lars", "sgd", "momentum", "adam", "adamw", "lamb", "rmsprop",
                     "loss_scale_optimizer", "weight_decay")
_GET_NEXT = "IteratorGetNextOp::DoCompute"
_LOOP_PREFIX = re.compile(r"^(?:while/body/_\d+/)?")
_CONV_FORWARD = re.compile(r"^(_Mkl(Native)?)?(_Fused)?(Conv2D|Conv3D|DepthwiseConv2dNative)"
                           r"(WithBias|WithBiasAndRelu)?$|^_(Mkl|Native)?FusedConv2D$")
_CONV_INPUT = re.compile(r"(Conv2D|Conv3D|DepthwiseConv2dNative)BackpropInput")
_CONV_FILTER = re.compile(r"(Conv2D|Conv3D|DepthwiseConv2dNative)BackpropFilter")


def split_event_name(name):
    """'while/body/_1/gradient_tape/while/simclr_1/conv:Conv2D' ->
    (backward, ['simclr_1', 'conv'], 'Conv2D'); None for events that are not an op
    (the executor's own, 'ExecutorState::Process', ...)."""
    if "::" in name or ":" not in name:
        return None
    op_name, op_type = name.rsplit(":", 1)
    op_name = _LOOP_PREFIX.sub("", op_name)
    parts = [p for p in op_name.split("/") if p]
    backward = "gradient_tape" in parts
    # The loop's own scopes (a tf.range loop's body is named "while").
    parts = [p for p in parts if p not in ("gradient_tape", "while")]
    return backward, parts, op_type


def _scope(part):
    """A scope's name without Keras' and TensorFlow's uniquifying suffix: 'bn1_1' ->
    'bn1', 'nt_xent_2' -> 'nt_xent'."""
    return re.sub(r"_\d+$", "", part)


def op_part(name):
    """The part (one of PARTS) of the op event `name` ('op_name:OpType'), or None
    when the event is not an op."""
    if name.startswith(_GET_NEXT):  # the iterator's read, on tf.data's own thread
        return "input"
    split = split_event_name(name)
    if split is None:
        return None
    backward, parts, op_type = split
    scopes = [_scope(p) for p in parts]
    if "views" in scopes:
        return "views (on device)"
    if _CONV_INPUT.search(op_type):
        return "convolution backward (input)"
    if _CONV_FILTER.search(op_type):
        return "convolution backward (filter)"
    if "nt_xent" in scopes:
        return "NT-Xent and the gather"
    if any(s in ("projection_head", "head_supervised", "supervised_loss",
                 "supervised_head") for s in scopes):
        return "heads"
    if _CONV_FORWARD.search(op_type):
        return "convolution forward"
    if scopes and scopes[0] in _OPTIMIZER_SCOPES or "weight_decay" in scopes:
        return "optimizer update"
    if "FusedBatchNorm" in op_type or any(
            s.startswith("bn") or s.endswith("_bn") or s == "batch_normalization"
            for s in scopes):
        return "batch norm"
    if "metrics" in scopes or "grad_norm" in scopes or (scopes and scopes[0] in (
            "global_norm", "Timestamp", "data_wait")):
        return "metrics and checks"
    if backward or op_type == "AddN" and scopes and scopes[0] == "AddN":
        # (AddN at the top: the sums of the gradients of a tensor used twice, the
        # residual connections' inputs)
        return "elementwise, backward"
    if scopes and (scopes[0] in ("simclr", "resnet", "encoder") or scopes[0].startswith(
            "simclr")):
        return "elementwise, forward"
    return "other"


def _union_seconds(intervals):
    """Seconds covered by the union of (start, end) intervals in picoseconds."""
    covered, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            covered += stop - start
            end = stop
        elif stop > end:
            covered += stop - end
            end = stop
    return covered / 1e12


def traces(logdir):
    """The paths of the traces (*.xplane.pb) under `logdir`, oldest first."""
    return sorted(glob.glob(os.path.join(glob.escape(logdir), "**", "*.xplane.pb"),
                            recursive=True), key=os.path.getmtime)


def read_xspace(logdir, earlier=()):
    """The XSpace of the newest trace under `logdir` (tf.profiler's plugins/profile)
    that is not among `earlier` (`traces(logdir)` before the profiler ran)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=import-outside-toplevel
    paths = [path for path in traces(logdir) if path not in set(earlier)]
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb under {logdir}: the trace was not written")
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as f:
        space.ParseFromString(f.read())
    return space


def op_events(space):
    """(event name, start ps, duration ps) of every op TensorFlow ran in the trace, on
    the host plane's compute threads (tf_Compute: the executor's inter-op pool, where
    an op's event lasts until its intra-op work is done), and the iterator's reads of
    the batch (on tf.data's thread, which the step waits for)."""
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            get_next = line.name.startswith("tf_data_iterator_get_next")
            if not (line.name.startswith("tf_Compute") or get_next):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if op_part(name) is None or get_next and not name.startswith(_GET_NEXT):
                    continue
                start = line.timestamp_ns * 1000 + event.offset_ps
                yield name, start, event.duration_ps


def summarise(events, steps, wall_seconds):
    """Per part: op seconds per step and share of all op time; the wall seconds per
    step and those with no op running. `events`: (name, start ps, duration ps)."""
    seconds = collections.Counter()
    intervals, counts = [], collections.Counter()
    for name, start, duration in events:
        part = op_part(name)
        seconds[part] += duration / 1e12
        counts[part] += 1
        intervals.append((start, start + duration))
    total = sum(seconds.values())
    busy = _union_seconds(intervals)
    rows = [dict(part=part, seconds_per_step=seconds[part] / steps,
                 share=seconds[part] / total if total else 0.0,
                 ops_per_step=counts[part] / steps) for part in PARTS]
    return dict(rows=rows, op_seconds_per_step=total / steps,
                wall_seconds_per_step=wall_seconds / steps,
                no_op_seconds_per_step=max(wall_seconds - busy, 0.0) / steps,
                traced_steps=steps)
