"""A tiny model that follows the SimCLR model contract (docs/design.md), for tests.

conv(+bias) -> synchronized BN -> ReLU -> conv(no bias) -> synchronized BN -> ReLU ->
global average pool = h; projection: dense (no bias) + synchronized BN without beta = z;
supervised head: dense with bias on stop_gradient(h) (or h when fine-tuning).
"""
import keras
import numpy as np
import tensorflow as tf


class StandInModel(keras.Model):
    """Follows the contract: dict outputs, `supervised_head` attribute.

    Args:
        num_classes: classes of the supervised head.
        proj_dim: projection output size.
        with_head: build a supervised head (else `supervised_head` is None).
        head_stop_gradient: feed the head stop_gradient(h) (pretraining with online
            linear evaluation); False for fine-tuning.
        seed: initializer seed.
    """

    def __init__(self, num_classes=5, proj_dim=8, with_head=True, head_stop_gradient=True,
                 seed=0, **kwargs):
        super().__init__(**kwargs)
        self.head_stop_gradient = head_stop_gradient
        init = lambda s: keras.initializers.GlorotUniform(seed=seed + s)  # noqa: E731
        self.conv1 = keras.layers.Conv2D(6, 3, padding="same", use_bias=True,
                                         kernel_initializer=init(1),
                                         bias_initializer=keras.initializers.RandomNormal(
                                             stddev=0.1, seed=seed + 2))
        self.bn1 = keras.layers.BatchNormalization(synchronized=True, momentum=0.9,
                                                   epsilon=1e-5)
        self.conv2 = keras.layers.Conv2D(8, 3, strides=2, padding="same", use_bias=False,
                                         kernel_initializer=init(3))
        self.bn2 = keras.layers.BatchNormalization(synchronized=True, momentum=0.9,
                                                   epsilon=1e-5)
        self.pool = keras.layers.GlobalAveragePooling2D()
        self.proj = keras.layers.Dense(proj_dim, use_bias=False, kernel_initializer=init(4))
        self.proj_bn = keras.layers.BatchNormalization(synchronized=True, center=False,
                                                       momentum=0.9, epsilon=1e-5)
        self.supervised_head = (
            keras.layers.Dense(num_classes, kernel_initializer=init(5),
                               bias_initializer=keras.initializers.RandomNormal(
                                   stddev=0.1, seed=seed + 6))
            if with_head else None)

    def call(self, images, training=False):
        x = tf.nn.relu(self.bn1(self.conv1(images), training=training))
        x = tf.nn.relu(self.bn2(self.conv2(x), training=training))
        h = self.pool(x)
        z = self.proj_bn(self.proj(h), training=training)
        outputs = {"final_avg_pool": h, "proj_head_output": z}
        if self.supervised_head is not None:
            head_input = tf.stop_gradient(h) if self.head_stop_gradient else h
            outputs["logits_sup"] = self.supervised_head(head_input)
        return outputs


def make_model(image_size=8, **kwargs):
    """Builds a StandInModel (call under the strategy scope you want)."""
    model = StandInModel(**kwargs)
    model(tf.zeros([2, image_size, image_size, 3]))
    return model


def random_batch(num_examples, image_size=8, num_classes=5, seed=0, unlabelled_every=3):
    """Numpy (view1, view2, labels) with every `unlabelled_every`-th label = -1."""
    rng = np.random.default_rng(seed)
    view1 = rng.uniform(size=(num_examples, image_size, image_size, 3)).astype(np.float32)
    view2 = np.clip(view1 + rng.normal(scale=0.2, size=view1.shape), 0, 1).astype(np.float32)
    labels = rng.integers(0, num_classes, size=num_examples).astype(np.int32)
    if unlabelled_every:
        labels[::unlabelled_every] = -1
    return view1, view2, labels


def distributed_pretrain_iterator(strategy, steps):
    """An iterator of pretraining batches `((v1, v2), labels)` for `strategy`.

    Replica r (global id) receives slice r of each global batch, on one process or
    several (MultiWorkerMirroredStrategy: one input pipeline per worker).

    Args:
        strategy: a tf.distribute strategy.
        steps: list of global (view1, view2, labels) numpy batches.
    """
    replicas = strategy.num_replicas_in_sync

    def dataset_fn(context):
        local = replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local
        # A worker's local replicas take consecutive elements in turn, so list the
        # slices of each step in replica order.
        chunks = [tuple(np.split(a, replicas)[r] for a in step)
                  for step in steps for r in range(first, first + local)]
        v1, v2, labels = (np.stack(c) for c in zip(*chunks))
        return tf.data.Dataset.from_tensor_slices(((v1, v2), labels))

    return iter(strategy.distribute_datasets_from_function(dataset_fn))
