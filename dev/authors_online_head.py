#!/usr/bin/env python
"""Does the online linear head blow up in the authors' own code too? (issue 15)

In the quick start our online head's loss climbs to hundreds before it settles
(docs/fidelity.md, "The online head's own rate"). This trains the authors' own model, NT-Xent, LARS,
learning-rate schedule and train step (their tf2/ folder, run as described in
dev/authors_baseline.py: a venv with tf_keras) on the quick start's data as our
pipeline feeds it (digits at 16 px; the paper's crop, flip and colour jitter 0.5; no
blur; batch 256) with the quick start's hyper-parameters, and prints what our
`--progress=lines` prints every --log_every_steps (interval means of the contrastive
loss and accuracy and of the head's loss and accuracy), then the online head's top-1
on the test split (what `--mode=train_then_eval` reports as label_top_1_accuracy).

  /tmp/authors-venv/bin/python dev/authors_online_head.py --authors_dir=simclr/tf2

What is theirs: `model.Model` (ResNet-18, CIFAR stem as their image_size <= 32 rule,
width 0.25, 2-layer projection head, supervised head on stop_gradient(h)),
`objective.add_contrastive_loss` and `add_supervised_loss` (on both views' labels, as
their run.py), `model.add_weight_decay`, `model.build_optimizer`'s LARS (head excluded
from decay and trust scaling) and `model.WarmUpAndCosineDecay`. The step is re-stated
from their run.py as in authors_baseline.py. Not a test.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import authors_baseline  # noqa: E402  (sets TF_USE_LEGACY_KERAS; the authors' flags)
from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow.compat.v2 as tf  # noqa: E402

from simclr_tf.data import pipeline, registry  # noqa: E402
from simclr_tf.evaluation import features  # noqa: E402

# The flags their schedule and optimizer read, at the quick start's values.
flags.DEFINE_float("learning_rate", 2.0, "")
flags.DEFINE_string("learning_rate_scaling", "linear", "")
flags.DEFINE_float("warmup_epochs", 5, "")
flags.DEFINE_integer("train_epochs", 50, "")
flags.DEFINE_integer("train_steps", 0, "")
flags.DEFINE_float("color_jitter_strength", 0.5, "our pipeline's colour jitter")
flags.DEFINE_integer("log_every_steps", 20, "steps per printed interval")
flags.DEFINE_integer("seed", 0, "data order and augmentation seed of our pipeline")
FLAGS = flags.FLAGS
QUICK_START = dict(resnet_depth=18, width_multiplier=0.25, image_size=16,
                   train_batch_size=256, use_blur=False, num_proj_layers=2,
                   weight_decay=1e-4, temperature=0.2)


def _accuracy(labels_one_hot, logits):
    return tf.reduce_mean(tf.cast(tf.equal(tf.argmax(labels_one_hot, 1),
                                           tf.argmax(logits, 1)), tf.float32))


def main(_):
    lars_optimizer, model_lib, obj_lib = authors_baseline.load_authors_modules(
        FLAGS.authors_dir)
    del lars_optimizer  # reached through model_lib.build_optimizer
    source = registry.get_dataset("digits")
    num_classes = source.num_classes
    num_examples = source.num_examples("train")
    tf.random.set_seed(FLAGS.seed)
    model = model_lib.Model(num_classes)
    total_steps = model_lib.get_train_steps(num_examples)
    optimizer = model_lib.build_optimizer(
        model_lib.WarmUpAndCosineDecay(FLAGS.learning_rate, num_examples))
    dataset = pipeline.build_distributed_dataset(
        tf.distribute.get_strategy(), source, "train",
        global_batch_size=FLAGS.train_batch_size, train_mode="pretrain",
        image_size=FLAGS.image_size, color_jitter_strength=FLAGS.color_jitter_strength,
        cache=False, seed=FLAGS.seed, label_subset_ids=None, start_step=0,
        augment_on="host")

    @tf.function
    def step(views, labels):
        images = tf.concat(views, axis=-1)  # their pipeline's channel concatenation
        one_hot = tf.one_hot(tf.concat([labels, labels], 0), num_classes)
        with tf.GradientTape() as tape:
            projection, supervised = model(images, training=True)
            contrast_loss, logits_con, labels_con = obj_lib.add_contrastive_loss(
                projection, hidden_norm=FLAGS.hidden_norm, temperature=FLAGS.temperature)
            head_loss = obj_lib.add_supervised_loss(labels=one_hot, logits=supervised)
            loss = contrast_loss + head_loss + model_lib.add_weight_decay(model)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return dict(contrast_loss=contrast_loss,
                    contrast_acc=_accuracy(labels_con, logits_con),
                    head_loss=head_loss, head_acc=_accuracy(one_hot, supervised))

    print(f"authors' code: {total_steps} steps of batch {FLAGS.train_batch_size} on "
          f"{num_examples} digits at {FLAGS.image_size} px, lr {FLAGS.learning_rate} "
          f"({FLAGS.learning_rate_scaling}), warmup {FLAGS.warmup_epochs} epochs")
    interval = []
    for index, ((view1, view2), labels) in enumerate(dataset):
        if index == total_steps:
            break
        interval.append({k: float(v) for k, v in step((view1, view2), labels).items()})
        done = index + 1
        if done % FLAGS.log_every_steps == 0 or done == total_steps:
            means = {k: np.mean([m[k] for m in interval]) for k in interval[0]}
            print(f"step {done}/{total_steps} | " + " ".join(
                f"{k} {v:.4g}" for k, v in means.items()), flush=True)
            interval = []

    correct = count = 0
    for batch in features.eval_dataset(source, "test", image_size=FLAGS.image_size,
                                       batch_size=512):
        keep = batch["id"].numpy() >= 0
        _, logits = model(batch["image"], training=False)
        predicted = np.argmax(logits.numpy(), 1)
        correct += int(np.sum((predicted == batch["label"].numpy())[keep]))
        count += int(np.sum(keep))
    print(f"online head top-1 on test: {correct / count:.4f} ({correct}/{count})")


if __name__ == "__main__":
    for name, value in QUICK_START.items():
        FLAGS.set_default(name, value)
    app.run(main)
