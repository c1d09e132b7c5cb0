"""Writes colabs/*.ipynb and runs them, saving their outputs (what a reader sees
before running anything). Run from the repository root: python dev/make_colabs.py
(about three minutes on a CPU; --no-execute writes them without outputs; names, e.g.
`pretrain_with_fit`, write only those)."""
import sys

import nbformat as nbf
from nbclient import NotebookClient

INSTALL = ("code", """# Install: in Colab, first clone this repository and `%cd` into its colabs/ folder.
# Nothing happens where simclr_tf is installed already.
import importlib.util, os, subprocess, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up lines
REPO = os.path.abspath("..")  # the checkout this notebook lives in
if importlib.util.find_spec("simclr_tf") is None:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-e", REPO])
    # An editable install is seen by new processes; this kernel imports it from REPO.
    sys.path.insert(0, REPO)
    importlib.invalidate_caches()""")

RUN = ("code", """import json

def simclr_run(**flags):
    \"\"\"Runs the command line (python run.py --flag=value ...) as a user would; returns
    the run's result record.\"\"\"
    command = [sys.executable, os.path.join(REPO, "run.py"), "--progress=lines"]
    command += [f"--{name}={value}" for name, value in flags.items()]
    process = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    print(process.stdout)  # what the run printed, shown in the notebook
    process.check_returncode()
    name = ("result.json" if flags.get("mode", "train") in ("train", "train_then_eval")
            else f"result.{flags['mode']}.json")
    with open(os.path.join(flags["model_dir"], name)) as f:
        return json.load(f)""")

def nb(cells):
    book = nbf.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    book.cells = [nbf.v4.new_markdown_cell(c[1]) if c[0] == "md" else nbf.v4.new_code_cell(c[1]) for c in cells]
    return book

load = nb([
 ("md", """# Load a SimCLR model and run inference

Loads a SimCLR SavedModel exported by `run.py` (TF Serving format) and runs it three
ways: the authors' hub interface (`model(images, trainable=False)` returning named
features), the `serving_default` signature on encoded image bytes, and as a Keras layer.
It also imports one of the authors' released checkpoints with `simclr_tf.load_official`.

Set `SAVED_MODEL` to your export (`<model_dir>/saved_model/<step>`). Left empty, the
notebook pretrains a tiny model on the offline `digits` dataset for a few steps and
exports it, so it runs anywhere in about a minute."""),
 INSTALL,
 RUN,
 ("code", """from simclr_tf.run import quiet
tf = quiet.import_tensorflow()  # first: TensorFlow's start-up notices filtered, as run.py's

import io, os, tempfile
import numpy as np
import keras

SAVED_MODEL = os.environ.get("SIMCLR_SAVED_MODEL", "")
# One of the authors' released models (a SavedModel directory, e.g. downloaded from
# their gs://simclr-checkpoints-tf2 bucket); empty: that section is skipped.
RELEASED_MODEL = os.environ.get("SIMCLR_RELEASED_MODEL", "")"""),
 ("code", """if not SAVED_MODEL:
    run_dir = tempfile.mkdtemp(prefix="simclr_colab_")
    SAVED_MODEL = simclr_run(
        dataset="digits", train_split="train", eval_split="test", image_size=16,
        stem="cifar", resnet_depth=18, width_multiplier=0.125, train_batch_size=64,
        train_steps=5, learning_rate=0.5, temperature=0.5, use_blur=False,
        color_jitter_strength=0.5, model_dir=run_dir, mode="train")["saved_model"]
print("SavedModel:", SAVED_MODEL)"""),
 ("md", "## The authors' interface: named features"),
 ("code", """from simclr_tf import augment
from simclr_tf.data import registry

source = registry.get_dataset("digits")
images = np.stack([image for image, _ in source.load("test").take(8).as_numpy_iterator()])
labels = np.array([label for _, label in source.load("test").take(8).as_numpy_iterator()])
model = tf.saved_model.load(SAVED_MODEL)
size = int(model.image_size.numpy())
# The export's own eval preprocessing (bicubic resize, clip; centre crop above 32 px).
batch = tf.stack([augment.preprocess_for_eval(
                      image, size, size, crop=augment.eval_center_crop_enabled(size))
                  for image in images])
outputs = model(batch, trainable=False)
print(sorted(outputs))
h = outputs["final_avg_pool"].numpy()
print("h:", h.shape, "z:", outputs["proj_head_output"].shape)
assert h.shape[0] == 8 and np.all(np.isfinite(h))"""),
 ("md", "## The serving signature: encoded images in, embeddings and classes out"),
 ("code", """encoded = [tf.io.encode_png(image).numpy() for image in images]
served = model.signatures["serving_default"](image_bytes=tf.constant(encoded))
print({name: value.shape for name, value in served.items()})
print("predicted:", served["probabilities"].numpy().argmax(axis=1), "true:", labels)
np.testing.assert_allclose(served["embedding"], h, rtol=1e-4, atol=1e-5)"""),
 ("md", "## As a Keras layer"),
 ("code", """layer = keras.layers.TFSMLayer(SAVED_MODEL, call_endpoint="serving_default")
via_keras = layer(tf.constant(encoded))
np.testing.assert_allclose(via_keras["embedding"], h, rtol=1e-4, atol=1e-5)"""),
 ("md", """## The authors' released checkpoints

`simclr_tf.load_official(path)` reads a released SavedModel directory, infers the
architecture from its `variables/` and loads every variable into our Keras model. Which
projection layer feeds the supervised head is read from `saved_model.pb`'s graph; a bare
`variables/` folder cannot tell it when the head's layers all have the width of h, so
then it is given (`ft_proj_selector=0`: h, the authors' default)."""),
 ("code", """import simclr_tf

if RELEASED_MODEL and os.path.isdir(RELEASED_MODEL):
    has_graph = os.path.exists(os.path.join(RELEASED_MODEL, "saved_model.pb"))
    released = simclr_tf.load_official(
        RELEASED_MODEL, **({} if has_graph else {"ft_proj_selector": 0}))
    features = released(tf.image.resize(batch, [64, 64]), training=False)
    print("released model h:", features["final_avg_pool"].shape,
          "logits:", features["logits_sup"].shape)
else:
    print("No released model given (set SIMCLR_RELEASED_MODEL).")"""),
])

finetune = nb([
 ("md", """# Fine-tune a SimCLR model

Two ways to fine-tune a pretrained encoder:

1. with the command line (`run.py`, the same flags as in a terminal): semi-supervised
   fine-tuning on a stratified 10% of the labels (`fine_tune_after_block=4` would make
   it a linear evaluation);
2. by hand, as in the authors' colab: a SavedModel export called with
   `trainable=True` under a `tf.GradientTape`, plus a new linear head.

Runs on the offline `digits` dataset in a couple of minutes on a CPU. Set
`PRETRAINED` to a pretraining run's `model_dir` to use your own."""),
 INSTALL,
 RUN,
 ("code", """from simclr_tf.run import quiet
tf = quiet.import_tensorflow()  # first: TensorFlow's start-up notices filtered, as run.py's

import tempfile
import numpy as np
import keras

PRETRAINED = os.environ.get("SIMCLR_PRETRAINED", "")
common = dict(dataset="digits", train_split="train", eval_split="test", image_size=16,
              stem="cifar", resnet_depth=18, width_multiplier=0.125, use_blur=False,
              color_jitter_strength=0.5, temperature=0.5)
if not PRETRAINED:
    PRETRAINED = tempfile.mkdtemp(prefix="simclr_pretrain_")
    simclr_run(**common, train_batch_size=64, train_steps=10, learning_rate=0.5,
               model_dir=PRETRAINED, mode="train")
print("pretrained run:", PRETRAINED)"""),
 ("md", "## 1. Semi-supervised fine-tuning on 10% of the labels"),
 ("code", """finetune_dir = tempfile.mkdtemp(prefix="simclr_finetune_")
results = simclr_run(
    **common, train_mode="finetune", label_fraction=0.1, checkpoint=PRETRAINED,
    train_batch_size=32, train_steps=10, learning_rate=0.1, optimizer="momentum",
    warmup_epochs=0, weight_decay=0.0, ft_proj_selector=0, zero_init_logits_layer=True,
    model_dir=finetune_dir, mode="train_then_eval")
print({k: v for k, v in results.items() if k.startswith("eval/")})
assert results["eval/num_examples"] == 360
print(open(os.path.join(finetune_dir, "label_subset_ids.txt")).read()[:200])"""),
 ("md", "## 2. By hand: the exported SavedModel with a new head"),
 ("code", """from simclr_tf.weights import export
from simclr_tf.data import pipeline, registry

hub = tf.saved_model.load(export.latest_export(PRETRAINED))
head = keras.layers.Dense(10)
optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
source = registry.get_dataset("digits")
train = pipeline.build_input_fn(source, "train", global_batch_size=32,
                                train_mode="finetune", image_size=16, seed=0)(None)

@tf.function
def step(images, labels):
    with tf.GradientTape() as tape:
        h = hub(images, trainable=True)["final_avg_pool"]
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            labels, head(h), from_logits=True))
    variables = list(hub.trainable_variables) + head.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

losses = [float(step(images, labels)) for (images, labels), _ in zip(train, range(20))]
print("loss:", losses[0], "->", losses[-1])
assert np.isfinite(losses).all()"""),
])

fit = nb([
 ("md", """# Pretrain SimCLR with Keras `fit()`

`simclr_tf.SimCLR` is a `keras.Model` whose `train_step` is the step `run.py` runs
(NT-Xent over every replica's negatives, the online linear head, weight decay, blur),
so `compile()` + `fit()` pretrain with any Keras callback: here `BackupAndRestore`,
`TensorBoard`, `ModelCheckpoint` and `TerminateOnNaN`. Runs on the offline `digits`
dataset in about a minute on a CPU; under `tf.distribute.MirroredStrategy()` the same
code trains on every GPU."""),
 INSTALL,
 ("code", """from simclr_tf.run import quiet
tf = quiet.import_tensorflow()  # first: TensorFlow's start-up notices filtered, as run.py's

import tempfile
import keras
import numpy as np

import simclr_tf
from simclr_tf.method import optimizers, schedules
from simclr_tf.data import pipeline, registry
from simclr_tf.models import SimCLRModel
from simclr_tf.method.train import StepOptions

strategy = tf.distribute.get_strategy()  # or tf.distribute.MirroredStrategy()
steps_per_epoch, epochs, batch = 10, 2, 64
with strategy.scope():
    network = SimCLRModel(encoder_options=dict(depth=18, width_multiplier=0.25, stem="cifar"),
                          num_classes=10)
    network.build((None, 32, 32, 3))
    schedule = schedules.WarmUpAndCosine(1.0, batch_size=batch, warmup_steps=4,
                                         total_steps=steps_per_epoch * epochs)
    optimizer, decay = optimizers.build_optimization(
        "lars", schedule, model=network, weight_decay=1e-4)
    model = simclr_tf.SimCLR(network, StepOptions(temperature=0.5), weight_decay_loss=decay)
model.compile(optimizer=optimizer)
print(f"{network.count_params():,} parameters")"""),
 ("md", "## Pretrain: two views per image, the paper's augmentations"),
 ("code", """run_dir = tempfile.mkdtemp(prefix="simclr_fit_")
dataset = pipeline.build_distributed_dataset(
    strategy, registry.get_dataset("digits"), "train", global_batch_size=batch,
    image_size=32, color_jitter_strength=0.5, seed=0)
history = model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=2,
                    callbacks=[
    keras.callbacks.BackupAndRestore(f"{run_dir}/backup"),
    keras.callbacks.TensorBoard(f"{run_dir}/logs"),
    keras.callbacks.ModelCheckpoint(f"{run_dir}/last.weights.h5", save_weights_only=True),
    keras.callbacks.TerminateOnNaN()])
print({name: [round(float(v), 4) for v in values]
       for name, values in history.history.items()
       if name in ("contrast_loss", "contrast_acc", "supervised_loss", "supervised_acc")})
assert np.isfinite(history.history["loss"]).all()"""),
 ("md", "## Use the encoder: h of a few images"),
 ("code", """source = registry.get_dataset("digits")
images = np.stack([image for image, _ in source.load("test").take(8).as_numpy_iterator()])
images = tf.image.resize(tf.cast(images, tf.float32) / 255.0, [32, 32])
h = model(images, training=False)["final_avg_pool"]  # the network's outputs
print("h:", h.shape)
assert np.all(np.isfinite(h))"""),
])

for book, path in ((load, "colabs/load_and_inference.ipynb"),
                   (finetune, "colabs/finetuning.ipynb"),
                   (fit, "colabs/pretrain_with_fit.ipynb")):
    chosen = [a for a in sys.argv[1:] if not a.startswith("--")]
    if chosen and not any(name in path for name in chosen):
        continue  # e.g. python dev/make_colabs.py pretrain_with_fit: only that one
    if "--no-execute" not in sys.argv:
        NotebookClient(book, timeout=900, kernel_name="python3",
                       resources={"metadata": {"path": "colabs"}}).execute()
    nbf.write(book, path)
