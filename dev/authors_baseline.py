#!/usr/bin/env python
"""Times the authors' own TF2 SimCLR pretraining step, for a side-by-side comparison
with `scripts/benchmark.py train` on the same machine at the same time. Not a test.

The authors' code (github.com/google-research/simclr, folder tf2/) is not part of this
repository: check it out and pass its tf2 folder. It targets Keras 2, so it runs on
TF 2.21 only through the `tf_keras` package with TF_USE_LEGACY_KERAS=1, best in a
separate virtual environment:

  python -m venv --system-site-packages /tmp/authors-venv
  /tmp/authors-venv/bin/pip install tf_keras==2.21.0
  /tmp/authors-venv/bin/python dev/authors_baseline.py --authors_dir=simclr/tf2 \\
      --resnet_depth=18 --image_size=32 --train_batch_size=256 --use_blur=false
  python scripts/benchmark.py train --preset=r18_cifar --compare=none,bfloat16

What runs is the authors' model (their `model.Model`: ResNet, projection head,
supervised head, batched blur), their NT-Xent (`objective.add_contrastive_loss`), their
LARS (`lars_optimizer.LARSOptimizer`) and the body of their `run.py` train step (their
run.py itself needs TFDS data and a model_dir, so the step is re-stated here: loss =
contrastive + supervised + their weight-decay term, one LARS update), in a
`tf.function` over a `tf.range` loop as theirs, under the default strategy, on
synthetic data (two views concatenated on channels, as their pipeline feeds them).

One shim, applied only in this process: current tf_keras rejects `Dense(units=-1)`,
which their `LinearLayer` uses as a placeholder before `build()` sets the width; the
shim accepts -1 as that placeholder. Nothing else of theirs is changed.
"""
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow.compat.v2 as tf  # noqa: E402

import authors_shims  # noqa: E402  (dev/: the shim for their Dense placeholder)

flags.DEFINE_string("authors_dir", None, "the tf2/ folder of a google-research/simclr checkout")
# The flags the authors' modules read, with their run.py defaults where it has them.
flags.DEFINE_integer("resnet_depth", 50, "")
flags.DEFINE_float("width_multiplier", 1, "")
flags.DEFINE_float("sk_ratio", 0.0, "")
flags.DEFINE_float("se_ratio", 0.0, "")
flags.DEFINE_integer("image_size", 224, "")
flags.DEFINE_integer("train_batch_size", 32, "")
flags.DEFINE_bool("use_blur", True, "")
flags.DEFINE_integer("num_proj_layers", 3, "")
flags.DEFINE_integer("proj_out_dim", 128, "")
flags.DEFINE_string("proj_head_mode", "nonlinear", "")
flags.DEFINE_integer("ft_proj_selector", 0, "")
flags.DEFINE_bool("global_bn", True, "")
flags.DEFINE_float("batch_norm_decay", 0.9, "")
flags.DEFINE_bool("lineareval_while_pretraining", True, "")
flags.DEFINE_string("train_mode", "pretrain", "")
flags.DEFINE_integer("fine_tune_after_block", -1, "")
flags.DEFINE_string("optimizer", "lars", "")
flags.DEFINE_float("momentum", 0.9, "")
flags.DEFINE_float("weight_decay", 1e-6, "")
flags.DEFINE_float("temperature", 0.1, "")
flags.DEFINE_bool("hidden_norm", True, "")
flags.DEFINE_integer("warmup", 2, "untimed steps, the first including tracing")
flags.DEFINE_integer("windows", 3, "timed windows (median)")
flags.DEFINE_integer("steps", 1, "steps per timed window")
flags.DEFINE_string("json", None, "also write the result here (scripts/benchmark.py "
                    "versus reads it)")
FLAGS = flags.FLAGS
NUM_CLASSES = 10


def load_authors_modules(authors_dir):
    """The authors' modules (lars_optimizer, model, objective) from their tf2/ folder,
    with the Dense placeholder shim; exits with a message when they cannot load."""
    if not authors_dir or not os.path.exists(os.path.join(authors_dir, "objective.py")):
        raise SystemExit(f"--authors_dir={authors_dir}: no objective.py there; pass "
                         "the tf2/ folder of a google-research/simclr checkout")
    if "tf_keras" not in tf.keras.__name__:
        raise SystemExit("The authors' code needs Keras 2: pip install tf_keras and run "
                         "with TF_USE_LEGACY_KERAS=1 (set by default by this script, but "
                         "tf_keras is not installed)")
    authors_shims.shim_dense_placeholder()
    sys.path.insert(0, os.path.abspath(authors_dir))
    import lars_optimizer  # noqa: E402  (the authors' modules)
    import model as model_lib  # noqa: E402
    import objective as obj_lib  # noqa: E402
    return lars_optimizer, model_lib, obj_lib


def main(_):
    lars_optimizer, model_lib, obj_lib = load_authors_modules(FLAGS.authors_dir)
    strategy = tf.distribute.get_strategy()
    tf.random.set_seed(0)
    model = model_lib.Model(NUM_CLASSES)
    optimizer = lars_optimizer.LARSOptimizer(
        0.1, momentum=FLAGS.momentum, weight_decay=FLAGS.weight_decay,
        exclude_from_weight_decay=["batch_normalization", "bias", "head_supervised"])
    n, size = FLAGS.train_batch_size, FLAGS.image_size
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(n, size, size, 6)).astype(np.float32)
    labels = np.eye(NUM_CLASSES, dtype=np.float32)[rng.integers(0, NUM_CLASSES, n)]
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat().prefetch(2)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    def single_step(features, labels):
        with tf.GradientTape() as tape:
            projection, supervised = model(features, training=True)
            loss, _, _ = obj_lib.add_contrastive_loss(
                projection, hidden_norm=FLAGS.hidden_norm, temperature=FLAGS.temperature,
                strategy=strategy)
            loss += obj_lib.add_supervised_loss(labels=tf.concat([labels, labels], 0),
                                                logits=supervised)
            loss += model_lib.add_weight_decay(model, adjust_per_optimizer=True)
            loss = loss / strategy.num_replicas_in_sync
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def train_multiple_steps(iterator, steps):
        for _ in tf.range(steps):
            features, labels = next(iterator)
            strategy.run(single_step, (features, labels))

    with strategy.scope():
        train_multiple_steps(iterator, tf.constant(1))
        for _ in range(max(FLAGS.warmup - 1, 0)):
            train_multiple_steps(iterator, tf.constant(FLAGS.steps))
        seconds = []
        for _ in range(FLAGS.windows):
            start = time.perf_counter()
            train_multiple_steps(iterator, tf.constant(FLAGS.steps))
            seconds.append((time.perf_counter() - start) / FLAGS.steps)
    step = statistics.median(seconds)
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(dict(step_seconds=step, window_seconds=seconds,
                           views_per_sec=2 * n / step, load_average=os.getloadavg()), f)
    print(f"authors' code: depth={FLAGS.resnet_depth} size={size} batch={n} "
          f"blur={FLAGS.use_blur} head={FLAGS.num_proj_layers}: {step:.2f} s/step, "
          f"{2 * n / step:.1f} views/s (windows {[round(s, 2) for s in seconds]}, "
          f"load average {[round(x, 2) for x in os.getloadavg()]})")


if __name__ == "__main__":
    app.run(main)
