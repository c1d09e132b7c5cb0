#!/usr/bin/env python
"""The authors' own training step, recorded for `scripts/one_step.py`'s whole-step
parity (docs/fidelity.md, "Whole-step parity"). Not a test, and not run by CI.

Runs in the authors' environment: their tf2/ folder of github.com/google-research/simclr
(not part of this repository), on TF 2.21 through `tf_keras` with
TF_USE_LEGACY_KERAS=1, best in a separate virtual environment:

  python -m venv --system-site-packages /tmp/authors-venv
  /tmp/authors-venv/bin/pip install tf_keras==2.21.0

Two uses:

  # a model in the format of the authors' released SavedModels, made by their code
  # (their Model and their build_saved_model; weights seeded random values):
  /tmp/authors-venv/bin/python dev/authors_one_step.py --authors_dir=simclr/tf2 \\
      --make_checkpoint=/tmp/r18_se --resnet_depth=18 --se_ratio=0.25 --image_size=32 \\
      --num_proj_layers=2 --num_classes=10

  # their step on views.npz, as scripts/one_step.py takes them, from that model:
  /tmp/authors-venv/bin/python dev/authors_one_step.py --authors_dir=simclr/tf2 \\
      --checkpoint=/tmp/r18_se --views=views.npz --out=authors.npz \\
      --train_batch_size=8 --warmup_epochs=0 --train_steps=10 [their run.py flags]

What runs is the authors' code: their `model.Model` built by their flags (its stem by
--image_size, the views' size unless given, as their run.py builds it), their
`build_optimizer` (LARS with their exclusions, or their momentum / Adam), their
`WarmUpAndCosineDecay` over --num_examples examples (default: the N of the views, one
global batch: an epoch is one step), their `add_contrastive_loss`,
`add_supervised_loss` and `add_weight_decay`, and the body of their run.py's
`single_step` (restated: it is a closure inside their `main`), once, under the default
strategy, in a `tf.function`. The weights are read from the SavedModel's `variables/`
by the full names of its object graph; every variable of their model must be there.
Their blur runs inside their model during pretraining: views.npz holds the views as
the model receives them, so --use_blur is false here (their default: true).

`--out` gets every variable of their model after the step, by name (no `:0`), and the
step's `contrast_loss`, `supervised_loss`, `weight_decay_loss`, `total_loss` (their
run.py's metrics: the total before the division by replicas), and `learning_rate`, the
rate of this update.

With --float64 their model, loss and optimizer compute in float64 (Keras' floatx), and
so do ours with `one_step.py --float64`: float32's summation order then leaves no
noise, and the two steps must agree to ~1e-9, which proves the composition equal.

Shims, applied only in this process: current tf_keras rejects `Dense(units=-1)`, which
their `LinearLayer` uses as a placeholder before `build()` sets the width; with
--float64, their NT-Xent's one-hot masks are made float64 (`_Float64OneHot`) and their
schedule is called on a float32 step (`_Float32Schedule`; the optimizer casts the rate).
"""
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _authors_dir(argv):
    """--authors_dir from the command line, before absl parses it: their run.py
    defines the flags this script also reads, so it is imported first."""
    for i, arg in enumerate(argv):
        if arg.startswith("--authors_dir="):
            return arg.split("=", 1)[1]
        if arg == "--authors_dir" and i + 1 < len(argv):
            return argv[i + 1]
    raise SystemExit("--authors_dir=PATH is required: the tf2/ folder of a "
                     "google-research/simclr checkout")


AUTHORS_DIR = os.path.abspath(_authors_dir(sys.argv))
if not os.path.exists(os.path.join(AUTHORS_DIR, "run.py")):
    raise SystemExit(f"--authors_dir={AUTHORS_DIR}: no run.py there; pass the tf2/ folder "
                     "of a google-research/simclr checkout")
sys.path.insert(0, AUTHORS_DIR)

import numpy as np  # noqa: E402
import tensorflow.compat.v2 as tf  # noqa: E402

import authors_shims  # noqa: E402  (dev/: the shim for their Dense placeholder)
from absl import app, flags  # noqa: E402
from tensorflow.core.protobuf import trackable_object_graph_pb2  # noqa: E402

import run as authors_run  # noqa: E402  (their run.py: defines their flags)
import model as model_lib  # noqa: E402
import objective as obj_lib  # noqa: E402

flags.DEFINE_string("authors_dir", None, "the tf2/ folder of a google-research/simclr checkout")
flags.DEFINE_string("make_checkpoint", None, "write a SavedModel made by their code here")
flags.DEFINE_integer("num_classes", 10, "classes of the supervised head (--make_checkpoint)")
flags.DEFINE_integer("weights_seed", 0, "seed of the weights (--make_checkpoint)")
flags.DEFINE_string("views", None, "views.npz: images [N, H, W, 6 or 3] in [0, 1], labels [N]")
flags.DEFINE_string("out", None, "the .npz to write: variables after the step, losses")
flags.DEFINE_integer("num_examples", 0, "examples of the schedule's epoch (0: N)")
flags.DEFINE_bool("float64", False, "their model, loss and optimizer in float64")
FLAGS = flags.FLAGS


class _Float64OneHot:
    """Their objective module's `tf`, with `one_hot` in float64 (--float64 only): their
    NT-Xent subtracts float32 one-hot masks from the logits, which float64 logits
    refuse. Everything else is TensorFlow's own."""

    def __getattr__(self, name):
        return getattr(tf, name)

    @staticmethod
    def one_hot(indices, depth, **kwargs):
        kwargs.setdefault("dtype", tf.float64)
        return tf.one_hot(indices, depth, **kwargs)


class _Float32Schedule(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Their schedule called on a float32 step (--float64 only): with a float64 step
    its warmup and cosine branches have different dtypes and tf.where refuses them."""

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def __call__(self, step):
        return self.schedule(tf.cast(step, tf.float32))

    def get_config(self):
        return self.schedule.get_config()


def _prefix(path):
    """A SavedModel folder's variables/variables, or `path` itself, a checkpoint prefix
    (a training checkpoint of their run.py, `ckpt-N`)."""
    return path if os.path.exists(path + ".index") else os.path.join(
        path, "variables", "variables")


def _checkpoint_names(path):
    """{full variable name: checkpoint key} of a SavedModel's variables/ (or of a
    checkpoint prefix)."""
    prefix = _prefix(path)
    reader = tf.train.load_checkpoint(prefix)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    names = {attr.full_name: attr.checkpoint_key for node in graph.nodes
             for attr in node.attributes if attr.name == "VARIABLE_VALUE"}
    return reader, names


def _name(variable):
    return variable.name[:-2] if variable.name.endswith(":0") else variable.name


def _build(num_classes, image_size):
    model = model_lib.Model(num_classes)
    model(tf.zeros([1, image_size, image_size, 3], tf.keras.backend.floatx()), training=False)
    return model


def make_checkpoint():
    """Their model with seeded random weights, exported as their run.py exports it."""
    FLAGS.train_mode = "pretrain"
    model = _build(FLAGS.num_classes, FLAGS.image_size)
    rng = np.random.default_rng(FLAGS.weights_seed)
    for variable in model.variables:
        name, shape = _name(variable), variable.shape.as_list()
        if name.endswith("gamma") or name.endswith("moving_variance"):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("beta") or name.endswith("moving_mean") or name.endswith("bias"):
            value = rng.uniform(-0.2, 0.2, shape)
        else:  # kernels: He-scaled, so activations keep their size through the depth
            fan_in = int(np.prod(shape[:-1])) or 1
            value = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
        variable.assign(value.astype(np.float32))
    tf.saved_model.save(authors_run.build_saved_model(model), FLAGS.make_checkpoint)
    print(f"wrote {FLAGS.make_checkpoint}: {len(model.variables)} variables, "
          f"{sum(int(np.prod(v.shape)) for v in model.variables)} values")


def one_step():
    data = np.load(FLAGS.views)
    dtype = np.float64 if FLAGS.float64 else np.float32
    if FLAGS.float64:
        tf.keras.backend.set_floatx("float64")
        obj_lib.tf = _Float64OneHot()
        # Eagerly: traced, their LARS meets a float32 rate for float64 variables.
        tf.config.run_functions_eagerly(True)
    images = data["images"].astype(dtype)
    labels = data["labels"].astype(np.int64)
    n, size = images.shape[0], images.shape[1]
    if n != FLAGS.train_batch_size:
        raise SystemExit(f"--train_batch_size={FLAGS.train_batch_size} but the views hold "
                         f"{n} examples")
    if FLAGS["use_blur"].present and FLAGS.use_blur:
        raise SystemExit("--use_blur must stay false: the views are given as the model "
                         "receives them")
    FLAGS.use_blur = False
    if not FLAGS["image_size"].present:  # the stem follows it: the views' size then
        FLAGS.image_size = size
    reader, names = _checkpoint_names(FLAGS.checkpoint)
    heads = [name for name in names
             if name.startswith("head_supervised/") and name.endswith("/kernel")]
    num_classes = reader.get_tensor(names[heads[0]]).shape[-1] if heads else 10
    model = _build(num_classes, size)
    missing = [_name(v) for v in model.variables if _name(v) not in names]
    if missing:
        raise SystemExit(f"{len(missing)} variables of their model are not in "
                         f"{FLAGS.checkpoint}: {missing[:10]}")
    for variable in model.variables:
        variable.assign(reader.get_tensor(names[_name(variable)]))
    num_examples = FLAGS.num_examples or n
    schedule = model_lib.WarmUpAndCosineDecay(FLAGS.learning_rate, num_examples)
    if FLAGS.float64:
        schedule = _Float32Schedule(schedule)
    optimizer = model_lib.build_optimizer(schedule)
    if "LARSOptimizer/iter" in names:  # a training checkpoint: resume as their run.py
        tf.train.Checkpoint(model=model, global_step=optimizer.iterations,
                            optimizer=optimizer).restore(_prefix(FLAGS.checkpoint)) \
            .expect_partial()
    learning_rate = float(schedule(tf.cast(optimizer.iterations, tf.float32)))  # this update's
    strategy = tf.distribute.get_strategy()

    def single_step(features, labels):  # their run.py's single_step, its summaries aside
        zero = tf.constant(0.0, dtype)
        con_loss, sup_loss = zero, zero
        with tf.GradientTape() as tape:
            projection_head_outputs, supervised_head_outputs = model(features, training=True)
            loss = None
            if projection_head_outputs is not None:
                con_loss, _, _ = obj_lib.add_contrastive_loss(
                    projection_head_outputs, hidden_norm=FLAGS.hidden_norm,
                    temperature=FLAGS.temperature, strategy=strategy)
                loss = con_loss
            if supervised_head_outputs is not None:
                l = labels["labels"]
                if FLAGS.train_mode == "pretrain" and FLAGS.lineareval_while_pretraining:
                    l = tf.concat([l, l], 0)
                sup_loss = obj_lib.add_supervised_loss(labels=l, logits=supervised_head_outputs)
                loss = sup_loss if loss is None else loss + sup_loss
            weight_decay = model_lib.add_weight_decay(model, adjust_per_optimizer=True)
            loss += weight_decay
            total_loss = loss
            loss = loss / strategy.num_replicas_in_sync
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return dict(contrast_loss=con_loss, supervised_loss=sup_loss,
                    weight_decay_loss=tf.cast(weight_decay, dtype),
                    total_loss=total_loss)

    @tf.function
    def step(features, one_hot):
        return strategy.run(single_step, (features, {"labels": one_hot}))

    one_hot = tf.one_hot(labels, num_classes, dtype=dtype)
    with strategy.scope():
        losses = step(tf.constant(images), one_hot)
    out = {_name(v): v.numpy().astype(dtype) for v in model.variables}
    out.update({k: dtype(v.numpy()) for k, v in losses.items()})
    out["learning_rate"] = dtype(learning_rate)
    with open(FLAGS.out, "wb") as f:  # exactly at --out (np.savez would add .npz)
        np.savez(f, **out)
    print(f"wrote {FLAGS.out}: {len(model.variables)} variables; " + ", ".join(
        f"{k} {float(v):.6g}" for k, v in losses.items()))


def main(_):
    authors_shims.shim_dense_placeholder()
    if FLAGS.make_checkpoint:
        make_checkpoint()
    elif FLAGS.checkpoint and FLAGS.views and FLAGS.out:
        one_step()
    else:
        raise SystemExit("Pass --make_checkpoint=DIR, or --checkpoint, --views and --out")


if __name__ == "__main__":
    app.run(main)
