#!/usr/bin/env python
"""The collectives of one compiled training step, counted from its graph
(`python scripts/benchmark.py collectives`; docs/scaling.md).

What every replica sends to the others each step is a cost that grows with the run:
this counts it rather than timing it. The step of each train mode is built as run.py
builds it (`run.modes.parts`), under a MirroredStrategy over `--replicas` logical
CPU devices, whose cross-device ops in TensorFlow 2.21 are collective ops (the ones
MultiWorkerMirroredStrategy runs between hosts). Its compiled function is traced,
not run, and every collective op of replica 0 in one step is listed: its kind
(all-reduce, all-gather), what it carries (`part`: the gradients, the z gather of
NT-Xent, the batch-norm statistics, the logged metrics), how many ops and the bytes
each replica puts in and gets out.

  python scripts/benchmark.py collectives                       # tiny encoder, 2 replicas
  python scripts/benchmark.py collectives --resnet_depth=50 --image_size=224 \\
      --train_batch_size=8 --train_modes=pretrain,finetune,distill
  python scripts/benchmark.py collectives --train_modes=pretrain --encoder=resnet \\
      --resnet_depth=18 --image_size=32 --authors_dir=simclr/tf2 \\
      --authors_python=/tmp/authors-venv/bin/python           # their step beside ours

The authors' step (their `model.Model`, `objective.add_contrastive_loss`, their
LARS, the body of their run.py train step) is traced the same way in their own
environment by `dev/authors_collectives.py`, which imports the counting below.
This module imports no simclr_tf at its top, so that environment can use it.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import script_io  # noqa: E402  (scripts/, TF-free: parse_bool)

# Collective op types of TensorFlow 2.21 -> the kind of collective.
COLLECTIVE_KINDS = {
    "CollectiveReduceV2": "all-reduce", "CollectiveReduceV3": "all-reduce",
    "CollectiveReduce": "all-reduce", "NcclAllReduce": "all-reduce",
    "CollectiveGatherV2": "all-gather", "CollectiveGather": "all-gather",
    "CollectiveAllToAllV2": "all-to-all", "CollectiveAllToAllV3": "all-to-all",
    "CollectiveBcastSendV2": "broadcast", "CollectiveBcastSend": "broadcast",
    "CollectiveBcastRecvV2": "broadcast", "CollectiveBcastRecv": "broadcast",
    "CrossReplicaSum": "all-reduce", "AllToAll": "all-to-all",
}
# What a collective carries, from the name scopes of the step: `method/train.py`
# sums the gradients under `gradient_sum` (an optimizer that sums them again does it
# under its own name: `collectives_of(optimizer_name=...)`), NT-Xent gathers z
# (`collectives.cross_replica_concat`, under `nt_xent`), synchronized batch norm
# reduces its moments inside the BN layers, the supervised loss counts the labelled
# examples of every replica once (`labelled_count`: the loss's and the accuracy's), the
# step's metrics are reduced under `metrics`. A
# backward collective (the adjoint of a forward one: TensorFlow names it by no scope)
# is known by what it reads: the first of these scopes found among its inputs, under
# `gradient_tape/`.
PARTS = (("gradient_sum", "gradients"), ("nt_xent", "z gather"),
         ("batch_normalization", "BN statistics"), ("sync_batch_norm", "BN statistics"),
         ("labelled_count", "labelled count"), ("metrics", "metrics"))
# How far up its inputs a collective named by no scope is traced.
_SEARCH_DEPTH = 12


def _scope_part(name, parts):
    scopes = [scope.lower() for scope in name.split("/")[:-1]]
    for key, part in parts:
        if any(scope == key or scope.startswith(key + "_") for scope in scopes):
            return part
    return None


def part_of(op, parts=PARTS):
    """(what the collective op carries, 'forward' or 'backward'): by its own name
    scopes, else by the nearest input (breadth first) whose name has one of `parts`;
    ('other', 'forward') when none is found."""
    part = _scope_part(op.name, parts)
    if part is not None:
        return part, "forward"
    frontier, seen = [op], {op.name}
    for _ in range(_SEARCH_DEPTH):
        following = []
        for current in frontier:
            # What the collective carries is its first input; its others (group,
            # instance key, the ordering token of the previous collective) are not.
            inputs = current.inputs[:1] if current is op else current.inputs
            for tensor in inputs:
                if tensor.dtype == "resource":
                    continue
                source = tensor.op
                if source.name in seen:
                    continue
                seen.add(source.name)
                part = _scope_part(source.name, parts)
                if part is not None:
                    backward = source.name.startswith("gradient_tape/")
                    return part, "backward" if backward else "forward"
                following.append(source)
        frontier = following
    return "other", "forward"


def _bytes(tensor):
    """Bytes of a statically shaped tensor, None if its shape is not known."""
    shape = tensor.shape
    if shape.rank is None or not shape.is_fully_defined():
        return None
    count = 1
    for dim in shape.as_list():
        count *= dim
    return count * tensor.dtype.size


def _sent_bytes(op):
    """Bytes the op's first input carries; for an all-gather of a padded tensor (how
    TensorFlow gathers: shapes first, then the data padded to the largest) the
    unpadded tensor's, which every replica's equals here."""
    sent = op.inputs[0]
    size = _bytes(sent)
    if size is None and sent.op.type in ("Pad", "PadV2"):
        size = _bytes(sent.op.inputs[0])
    return size


def collectives_of(graph, device_suffix=None, parts=PARTS, replicas=None,
                   optimizer_name=None):
    """The collective ops of `graph` (a `tf.Graph`, e.g. a concrete function's), of
    the device whose name ends with `device_suffix` (None: every device).

    Only the graph's own operations are listed, not those of the functions it calls
    (a `while` body holds later steps of the same call: `train_steps` traces the
    first step outside its loop).

    Args:
        optimizer_name: the optimizer's name scope: a collective under it carries
            gradients (Keras' own sum of them).

    Returns:
        A list of dicts: name, op, kind, part, pass ('forward' or 'backward'), device,
        dtype, `bytes_in` (what the replica puts in) and `bytes_out` (what it gets:
        the same for an all-reduce, `replicas` times it for an all-gather), None
        where the graph does not fix the size. The backward all-reduce of a gathered
        z (the all-gather's adjoint) has the size of the forward gather's output:
        filled in from it, `inferred` True.
    """
    if optimizer_name:
        parts = ((optimizer_name.lower(), "gradients"),) + tuple(parts)
    found = []
    for op in graph.get_operations():
        kind = COLLECTIVE_KINDS.get(op.type)
        if kind is None:
            continue
        if device_suffix is not None and not op.device.endswith(device_suffix):
            continue
        size = _sent_bytes(op) if op.inputs else None
        received = size
        if kind == "all-gather":
            received = None if size is None or replicas is None else size * replicas
        part, direction = part_of(op, parts)
        if part == "gradients":
            direction = "update"
        found.append(dict(name=op.name, op=op.type, kind=kind, part=part,
                          direction=direction, device=op.device,
                          dtype=op.inputs[0].dtype.name if op.inputs else None,
                          bytes_in=size, bytes_out=received, inferred=False))
    gathered = [item["bytes_out"] for item in found
                if item["kind"] == "all-gather" and item["part"] == "z gather"
                and item["bytes_out"] and item["bytes_in"] > 64]
    for item in found:
        if (item["bytes_in"] is None and item["part"] == "z gather"
                and item["kind"] == "all-reduce" and gathered):
            item.update(bytes_in=max(gathered), bytes_out=max(gathered), inferred=True)
    return found


def summary(found):
    """Rows of (part, kind): ops, bytes in and out per replica (None if unknown)."""
    rows = collections.OrderedDict()
    for item in found:
        key = (item["part"], item["direction"], item["kind"])
        row = rows.setdefault(key, dict(part=item["part"], direction=item["direction"],
                                        kind=item["kind"], ops=0, bytes_in=0,
                                        bytes_out=0))
        row["ops"] += 1
        for field in ("bytes_in", "bytes_out"):
            row[field] = (None if row[field] is None or item[field] is None
                          else row[field] + item[field])
    return list(rows.values())


def gradient_sums(found, trainable_bytes):
    """How many times the step all-reduces its gradients: the bytes of the gradient
    collectives over the float32 bytes of the trainable variables (one sum of
    every variable's gradient is 1.0; less where some get none, e.g. fine-tuning's
    unused projection layers)."""
    total = sum(item["bytes_in"] or 0 for item in found if item["part"] == "gradients")
    return total / trainable_bytes


def verdict(result):
    """(ok, sentence) for one traced step: its gradients summed over replicas once,
    in as many packs as TensorFlow makes, and every collective's size known."""
    sums = gradient_sums(result["collectives"], result["trainable_float32_bytes"])
    packs = sum(1 for item in result["collectives"] if item["part"] == "gradients")
    unknown = [item["name"] for item in result["collectives"] if item["bytes_in"] is None]
    if unknown:
        return False, f"sizes not known for {len(unknown)} collectives: {unknown[:3]}"
    if packs == 0:
        return False, "no gradient all-reduce found: the step's gradients are not summed"
    if sums > 1.0 + 1e-9:
        return False, (f"the gradients are all-reduced {sums:.3g} times their size in "
                       f"{packs} ops: more than once per step")
    return True, (f"gradients all-reduced once per step ({packs} op(s), {sums:.3g} of "
                  "the trainable variables' bytes)")


def format_table(title, rows):
    lines = [title, "part | pass | kind | ops | MB in / replica | MB out / replica"]
    for row in rows:
        mb = [("?" if row[f] is None else f"{row[f] / 1e6:.4g}")
              for f in ("bytes_in", "bytes_out")]
        lines.append(f"{row['part']} | {row['direction']} | {row['kind']} | {row['ops']} | "
                     f"{mb[0]} | {mb[1]}")
    return "\n".join(lines)


# ------------------------------------------------------------------ our step


# The step's flags this tool takes (Config fields; each changes the traced graph).
STEP_FLAGS = dict(
    encoder=str, resnet_depth=int, width_multiplier=float, sk_ratio=float,
    se_ratio=float, image_size=int, train_batch_size=int, num_proj_layers=int,
    proj_out_dim=int, proj_head_mode=str, use_blur=None, optimizer=str, stem=str,
    augment_on=str, grad_cache_chunk=int, lineareval_while_pretraining=None,
    global_bn=None, mixed_precision=str)
DEFAULTS = dict(encoder="tiny", image_size=16, train_batch_size=8, use_blur=False,
                num_proj_layers=2)
NUM_CLASSES = 10


def our_step(overrides, replicas, train_mode, num_classes=NUM_CLASSES):
    """The collectives of replica 0 in one training step of `train_mode`, built as
    run.py builds it (`parts.build_model`, `parts.build_trainer`) under a
    MirroredStrategy over `replicas` CPU devices (split before: `split_cpu`)."""
    import keras
    import numpy as np
    import tensorflow as tf
    import benchmark
    from simclr_tf.run.modes import parts
    values = dict(DEFAULTS, **overrides, train_mode=train_mode)
    config = benchmark.build_config(values)
    devices = [f"/cpu:{i}" for i in range(replicas)]
    strategy = tf.distribute.MirroredStrategy(devices)
    keras.utils.set_random_seed(0)
    needs_head = benchmark._one_view(config) or config.lineareval_while_pretraining  # pylint: disable=protected-access
    model = parts.build_model(config, strategy, num_classes if needs_head else None)
    teacher = (benchmark.build_teacher(config, strategy, num_classes=num_classes)
               if config.train_mode == "distill" else None)
    trainer = parts.build_trainer(config, strategy, model, teacher=teacher)
    batch = benchmark._synthetic_batch(config, np.random.default_rng(0))  # pylint: disable=protected-access
    batch = (batch[0], batch[1] % num_classes)
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    function = trainer._make_train_function()  # pylint: disable=protected-access
    concrete = function.get_concrete_function(iterator, tf.constant(1, tf.int32))
    optimizer = getattr(trainer.optimizer, "inner_optimizer", trainer.optimizer)
    found = collectives_of(concrete.graph, device_suffix="CPU:0", replicas=replicas,
                           optimizer_name=optimizer.name)
    variables = model.trainable_variables
    gradient_bytes = sum(int(np.prod(v.shape)) * 4 for v in variables)
    return dict(train_mode=train_mode, replicas=replicas,
                config={k: getattr(config, k) for k in sorted(values)},
                trainable_variables=len(variables),
                trainable_float32_bytes=gradient_bytes,
                collectives=found, rows=summary(found))


def split_cpu(replicas):
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)


def authors_step(args):
    """The authors' step's collectives, from `dev/authors_collectives.py` in their
    environment (a fresh process: it splits its own CPU)."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "dev", "authors_collectives.py")
    command = [args.authors_python, script, f"--authors_dir={args.authors_dir}",
               f"--replicas={args.replicas}", f"--num_classes={args.num_classes}"]
    for name in ("resnet_depth", "width_multiplier", "sk_ratio", "se_ratio",
                 "image_size", "train_batch_size", "num_proj_layers", "proj_out_dim",
                 "proj_head_mode", "use_blur", "global_bn",
                 "lineareval_while_pretraining"):
        value = getattr(args, name)
        if value is None and name in DEFAULTS:
            value = DEFAULTS[name]
        if value is not None:
            command.append(f"--{name}={str(value).lower() if isinstance(value, bool) else value}")
    with tempfile.TemporaryFile("w+") as output:
        try:
            with script_io.Children() as children:  # stopped with this script
                code = children.run(command, stdout=output, stderr=subprocess.STDOUT)
        except script_io.Stopped as stop:
            raise SystemExit(128 + stop.signum) from None
        output.seek(0)
        text = output.read()
    lines = [l for l in text.splitlines() if l.startswith("COLLECTIVES ")]
    if code or not lines:
        raise SystemExit("benchmark.py collectives: the authors' step failed "
                         f"(exit {code}): {' '.join(command)}\n" + text[-3000:])
    return json.loads(lines[-1][len("COLLECTIVES "):])


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="benchmark.py collectives", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2,
                        help="logical CPU devices, one replica each (>= 2)")
    parser.add_argument("--train_modes", default="pretrain,finetune,distill",
                        help="comma-separated train modes, each traced in turn")
    parser.add_argument("--num_classes", type=int, default=NUM_CLASSES,
                        help="classes of the supervised head (1000: ImageNet's)")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--authors_dir", default=os.environ.get("SIMCLR_TF_AUTHORS_DIR"),
                        help="the tf2/ folder of a google-research/simclr checkout: "
                             "their pretraining step's collectives beside ours")
    parser.add_argument("--authors_python", default=os.environ.get(
        "SIMCLR_TF_AUTHORS_PYTHON"), help="the Python of the authors' environment "
                                          "(with tf_keras; dev/authors_baseline.py)")
    for name, kind in STEP_FLAGS.items():
        parser.add_argument(f"--{name}", type=script_io.parse_bool if kind is None else kind)
    args = parser.parse_args(argv)
    if args.num_classes < 2:
        parser.error(f"--num_classes={args.num_classes}: at least 2")
    if args.replicas < 2:
        parser.error(f"--replicas={args.replicas}: a step has collectives only with "
                     "2 or more replicas")
    if args.replicas > (os.cpu_count() or 1) * 8:
        parser.error(f"--replicas={args.replicas}: at most {(os.cpu_count() or 1) * 8} "
                     "logical devices on this machine's CPUs")
    from simclr_tf.config import rules
    args.train_modes = [m for m in args.train_modes.split(",") if m]
    for mode in args.train_modes:
        if mode not in rules.TRAIN_MODES:
            parser.error(f"train mode {mode!r} is not one of {rules.TRAIN_MODES}")
    if not args.train_modes:
        parser.error("--train_modes: give at least one")
    if bool(args.authors_dir) != bool(args.authors_python):
        parser.error("--authors_dir and --authors_python go together")
    # Their step is their run.py's pretraining step: LARS, their stem rule, views made
    # on the host, float32, no gradient caching. Ours with another of these would
    # stand beside theirs as if both measured one step.
    theirs = dict(optimizer="lars", stem="auto", augment_on="host", grad_cache_chunk=0,
                  mixed_precision="none")
    other = [f"--{name}={getattr(args, name)}" for name, value in theirs.items()
             if getattr(args, name) is not None and getattr(args, name) != value]
    if args.authors_dir and other:
        parser.error(f"--authors_dir: the authors' step has no {', '.join(other)} "
                     "(theirs: LARS, their stem rule, host views, float32, no gradient "
                     "caching); leave these at their defaults to compare")
    if args.authors_dir and (args.encoder or DEFAULTS["encoder"]) != "resnet":
        parser.error(f"--authors_dir: the authors' step is their ResNet; pass "
                     f"--encoder=resnet (not {args.encoder or DEFAULTS['encoder']}) so "
                     "that ours is one too")
    if args.authors_dir and set(args.train_modes) != {"pretrain"}:
        parser.error("--authors_dir: the authors' step is their pretraining step: pass "
                     "--train_modes=pretrain")
    return args


def main(argv=None):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    args = parse_args(sys.argv[1:] if argv is None else argv)
    split_cpu(args.replicas)  # before any op: TensorFlow fixes its devices then
    overrides = {k: getattr(args, k) for k in STEP_FLAGS if getattr(args, k) is not None}
    results = dict(replicas=args.replicas, ours=[])
    for mode in args.train_modes:
        result = our_step(overrides, args.replicas, mode, args.num_classes)
        results["ours"].append(result)
        print(format_table(
            f"\nOurs, train_mode={mode}: collectives of one step, replica 0 of "
            f"{args.replicas} ({result['trainable_variables']} trainable variables, "
            f"{result['trainable_float32_bytes'] / 1e6:.4g} MB in float32)",
            result["rows"]), flush=True)
        ok, sentence = verdict(result)
        result["verdict"] = dict(ok=ok, sentence=sentence)
        print(("OK: " if ok else "FAIL: ") + sentence, flush=True)
    if args.authors_dir:
        results["authors"] = authors_step(args)
        print(format_table(
            f"\nThe authors' pretraining step: replica 0 of {args.replicas} "
            f"({results['authors']['trainable_variables']} trainable variables)",
            results["authors"]["rows"]), flush=True)
    if args.json:
        script_io.write_text(args.json, json.dumps(results, indent=2, default=str))
        print(f"\nwrote {args.json}")
    failed = [r["train_mode"] for r in results["ours"] if not r["verdict"]["ok"]]
    if failed:
        raise SystemExit(f"benchmark.py collectives: FAIL for {', '.join(failed)}")
    return results


if __name__ == "__main__":
    main()
