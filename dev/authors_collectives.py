#!/usr/bin/env python
"""The collectives of the authors' TF2 SimCLR pretraining step, counted from its graph,
for `scripts/benchmark.py collectives --authors_dir=... --authors_python=...`, which
runs this in their environment and prints its table beside ours. Not a test.

  /tmp/authors-venv/bin/python dev/authors_collectives.py --authors_dir=simclr/tf2 \\
      --replicas=2 --resnet_depth=18 --width_multiplier=0.125 --image_size=32 \\
      --train_batch_size=8 --use_blur=false

Their environment and their code as dev/authors_baseline.py runs them (its docstring:
a venv with tf_keras, TF_USE_LEGACY_KERAS=1, the Dense placeholder shim): their
`model.Model`, `objective.add_contrastive_loss`, their LARS, their train metrics and
the body of their run.py train step in their `train_multiple_steps` (a `tf.range`
loop) - here under a MirroredStrategy over `--replicas` logical CPU devices, built
under its scope as their run.py builds it. Under a strategy their NT-Xent gathers z
with `tpu_cross_replica_concat` (each replica scatters its z into a zero tensor of
`replicas` times its size, which is all-reduced), and with --global_bn (their
default) their BN layers are tf_keras' SyncBatchNormalization (three all-reduces a
layer: sum, sum of squares, count).

The step is traced, not run: their loop puts the whole step inside a `While` op, so
the collectives are counted in the loop body's graph (the one step of
`steps=1`), by the counting of `scripts/collectives.py`. Not traced: their
`tf.summary.image` of the first view (it writes only with a summary writer, none
here, and sends nothing between replicas).

The last line of stdout is `COLLECTIVES <json>`: rows (collectives.summary),
collectives, trainable_variables, trainable_float32_bytes, replicas, the body's name.
"""
import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow.compat.v2 as tf  # noqa: E402

# dev/: the loader, and the flags their modules read (authors_dir, json, ...)
from authors_baseline import load_authors_modules  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "scripts"))
import collectives  # noqa: E402  (scripts/: imports no simclr_tf)

flags.DEFINE_integer("replicas", 2, "logical CPU devices, one replica each (>= 2)")
flags.DEFINE_bool("list_ops", False, "also list every collective op: part, pass, bytes, name")
FLAGS = flags.FLAGS
flags.DEFINE_integer("num_classes", 10, "classes of their supervised head")
# What their collectives carry, by their name scopes: Keras 2's optimizer sums the
# gradients under the optimizer's name (collectives_of(optimizer_name=...)), their
# NT-Xent gathers z under `tpu_cross_replica_concat`, their BN layers are
# `sync_batch_normalization[_N]` inside `batch_norm_relu[_N]`.
AUTHORS_PARTS = (("tpu_cross_replica_concat", "z gather"),
                 ("sync_batch_normalization", "BN statistics"),
                 ("batch_normalization", "BN statistics"))
OPTIMIZER_NAME = "LARSOptimizer"


def loop_bodies(graph):
    """The graphs of the `While` bodies that `graph`'s ops call, outermost first."""
    bodies = []
    for op in graph.get_operations():
        if op.type not in ("While", "StatelessWhile"):
            continue
        name = op.get_attr("body").name
        function = graph._get_function(name)  # pylint: disable=protected-access
        if function is None:
            raise SystemExit(f"authors_collectives.py: the loop body {name} is not "
                             "among the traced graph's functions")
        bodies.append((name, function.graph))
    return bodies


def main(_):
    if FLAGS.replicas < 2:
        raise SystemExit(f"--replicas={FLAGS.replicas}: a step has collectives only "
                         "with 2 or more replicas")
    if FLAGS.train_batch_size % FLAGS.replicas:
        raise SystemExit(f"--train_batch_size={FLAGS.train_batch_size} does not "
                         f"divide over --replicas={FLAGS.replicas}; give a multiple")
    tf.get_logger().setLevel("ERROR")  # MirroredStrategy logs every all-reduce it makes
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * FLAGS.replicas)
    lars_optimizer, model_lib, obj_lib = load_authors_modules(FLAGS.authors_dir)
    import metrics  # noqa: E402  (theirs, from --authors_dir)
    strategy = tf.distribute.MirroredStrategy(
        [f"/cpu:{i}" for i in range(FLAGS.replicas)])
    tf.random.set_seed(0)
    with strategy.scope():
        model = model_lib.Model(FLAGS.num_classes)
        optimizer = lars_optimizer.LARSOptimizer(
            0.1, momentum=FLAGS.momentum, weight_decay=FLAGS.weight_decay,
            exclude_from_weight_decay=["batch_normalization", "bias", "head_supervised"])
        weight_decay_metric = tf.keras.metrics.Mean("train/weight_decay")
        total_loss_metric = tf.keras.metrics.Mean("train/total_loss")
        contrast_loss_metric = tf.keras.metrics.Mean("train/contrast_loss")
        contrast_acc_metric = tf.keras.metrics.Mean("train/contrast_acc")
        contrast_entropy_metric = tf.keras.metrics.Mean("train/contrast_entropy")
        supervised_loss_metric = tf.keras.metrics.Mean("train/supervised_loss")
        supervised_acc_metric = tf.keras.metrics.Mean("train/supervised_acc")
    n, size = FLAGS.train_batch_size, FLAGS.image_size
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(n, size, size, 6)).astype(np.float32)
    labels = np.eye(FLAGS.num_classes, dtype=np.float32)[
        rng.integers(0, FLAGS.num_classes, n)]
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    # The body of their run.py train step (pretrain, as authors_baseline.py's).
    def single_step(features, labels):
        with tf.GradientTape() as tape:
            projection, supervised = model(features, training=True)
            con_loss, logits_con, labels_con = obj_lib.add_contrastive_loss(
                projection, hidden_norm=FLAGS.hidden_norm, temperature=FLAGS.temperature,
                strategy=strategy)
            loss = con_loss
            metrics.update_pretrain_metrics_train(
                contrast_loss_metric, contrast_acc_metric, contrast_entropy_metric,
                con_loss, logits_con, labels_con)
            if supervised is not None:
                l = labels["labels"]
                if FLAGS.lineareval_while_pretraining:
                    l = tf.concat([l, l], 0)
                sup_loss = obj_lib.add_supervised_loss(labels=l, logits=supervised)
                loss += sup_loss
                metrics.update_finetune_metrics_train(
                    supervised_loss_metric, supervised_acc_metric, sup_loss, l,
                    supervised)
            weight_decay = model_lib.add_weight_decay(model, adjust_per_optimizer=True)
            weight_decay_metric.update_state(weight_decay)
            loss += weight_decay
            total_loss_metric.update_state(loss)
            loss = loss / strategy.num_replicas_in_sync
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    with strategy.scope():
        @tf.function
        def train_multiple_steps(iterator, steps):
            for _ in tf.range(steps):
                with tf.name_scope(""):
                    images, labels = next(iterator)
                    features, labels = images, {"labels": labels}
                    strategy.run(single_step, (features, labels))

        concrete = train_multiple_steps.get_concrete_function(iterator, tf.constant(1))
    outside = collectives.collectives_of(concrete.graph, device_suffix="CPU:0")
    if outside:
        raise SystemExit("authors_collectives.py: collectives outside the loop: "
                         f"{[item['name'] for item in outside][:5]}")
    bodies = loop_bodies(concrete.graph)
    if len(bodies) != 1:
        raise SystemExit(f"authors_collectives.py: expected one loop, found "
                         f"{[name for name, _ in bodies]}")
    body_name, body = bodies[0]
    found = collectives.collectives_of(
        body, device_suffix="CPU:0", parts=AUTHORS_PARTS, replicas=FLAGS.replicas,
        optimizer_name=OPTIMIZER_NAME)
    variables = model.trainable_variables
    result = dict(replicas=FLAGS.replicas, loop_body=body_name,
                  trainable_variables=len(variables),
                  trainable_float32_bytes=sum(int(np.prod(v.shape)) * 4
                                              for v in variables),
                  collectives=found, rows=collectives.summary(found))
    for item in found if FLAGS.list_ops else ():
        print(f"{item['part']:14s} {item['direction']:8s} {item['op']:20s} "
              f"{str(item['bytes_in']):>10s}  {item['name']}")
    print(collectives.format_table(
        f"\nThe authors' pretraining step: replica 0 of {FLAGS.replicas} "
        f"({result['trainable_variables']} trainable variables, "
        f"{result['trainable_float32_bytes'] / 1e6:.4g} MB in float32)", result["rows"]))
    print(f"gradient sums per step: {collectives.gradient_sums(found, result['trainable_float32_bytes']):.3g}")
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(result, f, indent=2, default=str)
    print("COLLECTIVES " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    app.run(main)
