"""Building blocks of the SimCLR ResNet: fixed-padding conv, BN(+ReLU), SK conv, SE.

Every layer stores its constructor arguments and returns them from `get_config()`,
so models round-trip through `.keras` files.
"""
import contextlib

import keras
import tensorflow as tf
from keras import ops

PACKAGE = "simclr_tf"

# The reference's BN epsilon; Keras' default (1e-3) would change every activation.
BATCH_NORM_EPSILON = 1e-5


def conv_initializer():
    """Variance scaling (scale 1, fan-in, truncated normal), as the reference."""
    return keras.initializers.VarianceScaling(
        scale=1.0, mode="fan_in", distribution="truncated_normal")


def build_by_tracing(layer, input_shape):
    """Creates every variable of a composite layer by tracing its `call` once.

    Composite layers create their sub-layers' variables when first called; Keras'
    `.keras` loader and `model.build(shape)` instead call `build(input_shape)`, so
    composite layers implement `build` with this symbolic run.

    Inside a graph being traced (the parent's own symbolic run, or a `tf.function`)
    it does nothing: the `call` that follows runs in that graph and creates the
    variables, in the same order. Tracing there too would run each layer once more
    per level of nesting (an R50 block four times, its selective-kernel conv five).
    """
    if tf.inside_function():
        return
    layer.compute_output_spec(keras.KerasTensor(tuple(input_shape), dtype=layer.compute_dtype))


class TracedOutputShapeMixin:
    """`compute_output_shape` of a composite layer, by tracing its `call` once
    symbolically: `summary()` shows real shapes instead of '?', and the layer works
    on symbolic inputs (the functional API)."""

    def compute_output_shape(self, input_shape):
        spec = keras.Operation.compute_output_spec(
            self, keras.KerasTensor(tuple(input_shape), dtype=self.compute_dtype))
        return keras.tree.map_structure(lambda tensor: tuple(tensor.shape), spec)


class CheckpointListsMixin:
    """Makes layers held in Python lists visible to `tf.train.Checkpoint`.

    Keras 3.15 on TensorFlow wraps list attributes in its own `TrackedList`, which TF
    checkpointing does not follow (Keras converts them for SavedModel only; cf.
    keras-team/keras#18398). Without this, a `tf.train.Checkpoint(model=...)` holds
    only the layers assigned to plain attributes (the stem conv and the supervised
    head) and silently drops every block group, and restores "succeed" on the rest.
    Each list element becomes a checkpoint child named `<attribute>-<index>`. Keras'
    own tracking (weights order, `.keras` files) is unchanged. Put it first in the
    bases of every layer that keeps sub-layers in a list.
    """

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        children = super()._trackable_children(save_type, **kwargs)
        # Also for SavedModels: their variables/ is then a checkpoint with the same
        # paths, so `--checkpoint=<an export>` restores like a training checkpoint.
        for attribute in getattr(self, "_tracked", ()):
            value = getattr(self, attribute, None)
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, tf.__internal__.tracking.Trackable):
                        children[f"{attribute}-{i}"] = item
        return children


def fixed_padding(inputs, kernel_size):
    """Pads H and W by kernel_size - 1 in total, independent of the input size."""
    pad_total = kernel_size - 1
    pad_begin = pad_total // 2
    pad_end = pad_total - pad_begin
    return ops.pad(inputs, [[0, 0], [pad_begin, pad_end], [pad_begin, pad_end], [0, 0]])


@keras.saving.register_keras_serializable(package=PACKAGE)
class Conv2DFixedPadding(keras.layers.Layer):
    """Bias-free conv; explicit padding when strided so output size is input-size
    independent of TF's 'SAME' asymmetry (the reference's `conv2d_fixed_padding`).

    Args:
        filters: output channels.
        kernel_size: square kernel size.
        strides: square stride.
    """

    def __init__(self, filters, kernel_size, strides, **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = int(kernel_size)
        self.strides = int(strides)
        self.conv = keras.layers.Conv2D(
            self.filters, self.kernel_size, strides=self.strides,
            padding="same" if self.strides == 1 else "valid", use_bias=False,
            kernel_initializer=conv_initializer(), dtype=self.dtype_policy,
            name="conv2d")

    def build(self, input_shape):
        shape = list(input_shape)
        if self.strides > 1:
            pad = self.kernel_size - 1
            shape = [shape[0]] + [None if s is None else s + pad for s in shape[1:3]] + [shape[3]]
        self.conv.build(tuple(shape))

    def call(self, inputs):
        if self.strides > 1:
            inputs = fixed_padding(inputs, self.kernel_size)
        return self.conv(inputs)

    def get_config(self):
        config = super().get_config()
        config.update(filters=self.filters, kernel_size=self.kernel_size,
                      strides=self.strides)
        return config


def output_float(x):
    """`x` as an output the heads, losses and probes read (h, z, logits): float32
    whatever the compute dtype (bfloat16/float16 under mixed precision), except
    float64, which stays float64 (a float64 model computes in float64 throughout)."""
    return x if keras.backend.standardize_dtype(x.dtype) == "float64" else ops.cast(x, "float32")


# The activation dtypes of TF's FusedBatchNormV3 (its statistics are float32).
_FUSED_DTYPES = ("float16", "bfloat16", "float32")


def _fused_batch_norm(x, scale, offset, mean, variance, epsilon, is_training):
    """TF's fused batch norm (NHWC) with exactly `epsilon`.

    `tf.nn.fused_batch_norm` raises epsilon to at least 1.001e-5 (an old cuDNN limit),
    which would change the reference's 1e-5; the op itself takes it as given.
    Returns (y, batch or given mean, Bessel-corrected batch or given variance).
    """
    y, mean, variance, _, _, _ = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=scale, offset=offset, mean=mean, variance=variance, epsilon=epsilon,
        exponential_avg_factor=1.0, data_format="NHWC", is_training=is_training)
    return y, mean, variance


# Read when a BatchNormalization is traced; process-wide, so that the replica threads
# of a MirroredStrategy see it too.
_KERAS_BATCH_NORM = {"on": False}


@contextlib.contextmanager
def keras_batch_norm():
    """Within it, `BatchNormalization` traces Keras' own computation, never TF's fused
    kernel: the same function, in the authors' summation order (tf_keras'
    SyncBatchNormalization: var = E[x^2] - E[x]^2, over the replicas with
    `global_bn`). For step-for-step numerics against the authors' code
    (`scripts/one_step.py`); about 20% slower on CPU (see `BatchNormalization`)."""
    before = _KERAS_BATCH_NORM["on"]
    _KERAS_BATCH_NORM["on"] = True
    try:
        yield
    finally:
        _KERAS_BATCH_NORM["on"] = before


@keras.saving.register_keras_serializable(package=PACKAGE)
class BatchNormalization(keras.layers.BatchNormalization):
    """Keras' BatchNormalization, computed by TF's fused kernel where it can be.

    Keras 3 normalises with separate elementwise ops (moments, casts to float32 under
    mixed precision, scale and shift), each a full pass over the activations in the
    forward and again in the backward pass: on CPU the fused kernel
    (`FusedBatchNormV3` and its gradient, one pass each way, float32 statistics for
    bfloat16/float16 activations) is 3-4x faster per layer, and about 20% of a
    ResNet training step (docs/performance.md). Same variables, checkpoints and
    semantics: batch statistics when `training and trainable`, moving averages
    updated with the *biased* batch variance as Keras does (the kernel returns the
    Bessel-corrected one, which is converted back), moving statistics otherwise.

    Falls back to Keras' own computation where the kernel does not apply: a mask,
    renorm, a channel axis other than the last, an input rank other than 2 or 4, a
    tensor `training`, synchronised batch statistics with more than one replica (the
    kernel only sees the local batch; inference with moving statistics stays fused),
    or a compute dtype the kernel has no version of (float64: the layer then computes
    in float64 throughout, as its dtype says), and within `keras_batch_norm()`.
    """

    # Set on the layers that `freeze_for_finetuning(..., batch_statistics=True)` freezes:
    # not trainable, yet normalising with batch statistics in training and updating
    # its moving averages, as the blocks the authors' code freezes do.
    frozen_batch_statistics = False

    def _batch_statistics(self, training):
        """Whether this call normalises with the batch's statistics (and updates the
        moving ones): in training, when trainable or `frozen_batch_statistics`."""
        return bool(training) and (self.trainable or self.frozen_batch_statistics)

    def _fusable(self, inputs, training, mask):
        if _KERAS_BATCH_NORM["on"]:
            return False
        if mask is not None or self.renorm or not isinstance(training, (bool, type(None))):
            return False
        if self.compute_dtype not in _FUSED_DTYPES:
            return False
        rank = len(inputs.shape)
        if rank not in (2, 4) or self.axis not in (-1, rank - 1):
            return False
        if self.synchronized and self._batch_statistics(training) and \
                tf.distribute.has_strategy():
            # Batch statistics of the global batch: the kernel only sees this replica's.
            return tf.distribute.get_strategy().num_replicas_in_sync == 1
        return True

    def call(self, inputs, training=None, mask=None):
        if not self._fusable(inputs, training, mask):
            if self._batch_statistics(training) and not self.trainable:
                return self._frozen_batch_statistics_call(inputs, mask)
            return super().call(inputs, training=training, mask=mask)
        x = inputs if len(inputs.shape) == 4 else inputs[:, None, None, :]
        x = tf.cast(x, self.compute_dtype)
        channels = x.shape[-1]
        scale = self.gamma if self.scale else tf.ones([channels], tf.float32)
        offset = self.beta if self.center else tf.zeros([channels], tf.float32)
        scale, offset = tf.cast(scale, tf.float32), tf.cast(offset, tf.float32)
        if self._batch_statistics(training):
            empty = tf.zeros([0], tf.float32)
            y, mean, corrected = _fused_batch_norm(x, scale, offset, empty, empty,
                                                   self.epsilon, is_training=True)
            # int64: a BN input can exceed 2**31 elements (R50's first at 224 px, batch 1400).
            count = tf.cast(tf.size(x, out_type=tf.int64) // channels, tf.float32)
            variance = corrected * (count - 1.0) / tf.maximum(count, 1.0)
            self.moving_mean.assign(
                self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
            self.moving_variance.assign(
                self.moving_variance * self.momentum + variance * (1.0 - self.momentum))
        else:
            y, _, _ = _fused_batch_norm(x, scale, offset,
                                        tf.cast(self.moving_mean, tf.float32),
                                        tf.cast(self.moving_variance, tf.float32),
                                        self.epsilon, is_training=False)
        return y if len(inputs.shape) == 4 else y[:, 0, 0, :]

    def _frozen_batch_statistics_call(self, inputs, mask):
        """Keras' own training computation (its `call` without renorm), for a layer
        that is frozen but normalises with batch statistics: Keras skips it when the
        layer is not trainable. gamma and beta are read, not trained."""
        if self.renorm:
            raise ValueError("frozen_batch_statistics does not support renorm")
        x = ops.cast(inputs, keras.backend.result_type(inputs.dtype, "float32"))
        mean, variance = self._moments(x, mask)
        self.moving_mean.assign(ops.cast(self.moving_mean, x.dtype) * self.momentum +
                                mean * (1.0 - self.momentum))
        self.moving_variance.assign(ops.cast(self.moving_variance, x.dtype) * self.momentum
                                    + variance * (1.0 - self.momentum))
        outputs = ops.batch_normalization(
            x=x, mean=mean, variance=variance, axis=self.axis,
            offset=ops.cast(self.beta, x.dtype) if self.center else None,
            scale=ops.cast(self.gamma, x.dtype) if self.scale else None,
            epsilon=self.epsilon)
        return ops.cast(outputs, self.compute_dtype)


@keras.saving.register_keras_serializable(package=PACKAGE)
class BatchNormRelu(keras.layers.Layer):
    """Batch norm (epsilon 1e-5) optionally followed by ReLU.

    Args:
        relu: apply ReLU after the normalisation.
        init_zero: start gamma at 0 (the last BN of each residual block), so every
            block starts as the identity.
        center: learn beta.
        scale: learn gamma.
        batch_norm_decay: moving-average momentum of the statistics.
        global_bn: synchronise statistics across replicas (cross-replica BN).
    """

    def __init__(self, relu=True, init_zero=False, center=True, scale=True,
                 batch_norm_decay=0.9, global_bn=True, **kwargs):
        super().__init__(**kwargs)
        self.relu = bool(relu)
        self.init_zero = bool(init_zero)
        self.center = bool(center)
        self.scale = bool(scale)
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        self.bn = BatchNormalization(
            axis=-1, momentum=self.batch_norm_decay, epsilon=BATCH_NORM_EPSILON,
            center=self.center, scale=self.scale,
            gamma_initializer="zeros" if self.init_zero else "ones",
            synchronized=self.global_bn, dtype=self.dtype_policy,
            name="batch_normalization")

    def build(self, input_shape):
        self.bn.build(input_shape)

    def call(self, inputs, training=None):
        outputs = self.bn(inputs, training=training)
        return ops.relu(outputs) if self.relu else outputs

    def get_config(self):
        config = super().get_config()
        config.update(relu=self.relu, init_zero=self.init_zero, center=self.center,
                      scale=self.scale, batch_norm_decay=self.batch_norm_decay,
                      global_bn=self.global_bn)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class SelectiveKernelConv(keras.layers.Layer):
    """Selective-kernel 3x3 conv (Li et al. 2019) as used by SimCLRv2.

    One conv makes 2 x filters channels, read as two paths; a squeeze of their sum
    (global mean -> 1x1 conv to max(filters * sk_ratio, min_dim) -> BN-ReLU -> 1x1
    conv to 2 x filters) gives per-channel softmax weights over the two paths.

    Args:
        filters: output channels.
        strides: stride of the 3x3 conv.
        sk_ratio: squeeze ratio (0.0625 in SimCLRv2).
        min_dim: lower bound on the squeeze width.
        batch_norm_decay, global_bn: as in `BatchNormRelu`.
    """

    def __init__(self, filters, strides, sk_ratio, min_dim=32, batch_norm_decay=0.9,
                 global_bn=True, **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.strides = int(strides)
        self.sk_ratio = float(sk_ratio)
        self.min_dim = int(min_dim)
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        bn_args = dict(batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn,
                       dtype=self.dtype_policy)
        self.conv = Conv2DFixedPadding(2 * self.filters, 3, self.strides,
                                       dtype=self.dtype_policy, name="conv")
        self.conv_bn = BatchNormRelu(name="conv_bn", **bn_args)
        mid_dim = max(int(self.filters * self.sk_ratio), self.min_dim)
        self.squeeze = keras.layers.Conv2D(
            mid_dim, 1, use_bias=False, kernel_initializer=conv_initializer(),
            dtype=self.dtype_policy, name="squeeze")
        self.squeeze_bn = BatchNormRelu(name="squeeze_bn", **bn_args)
        self.mixing = keras.layers.Conv2D(
            2 * self.filters, 1, use_bias=False, kernel_initializer=conv_initializer(),
            dtype=self.dtype_policy, name="mixing")

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def call(self, inputs, training=None):
        paths = self.conv_bn(self.conv(inputs), training=training)
        paths = ops.stack(ops.split(paths, 2, axis=-1))  # [2, B, H, W, filters]
        squeezed = ops.mean(ops.sum(paths, axis=0), axis=(1, 2), keepdims=True)
        squeezed = self.squeeze_bn(self.squeeze(squeezed), training=training)
        weights = ops.stack(ops.split(self.mixing(squeezed), 2, axis=-1))
        weights = ops.softmax(weights, axis=0)  # [2, B, 1, 1, filters]
        return ops.sum(paths * weights, axis=0)

    def get_config(self):
        config = super().get_config()
        config.update(filters=self.filters, strides=self.strides, sk_ratio=self.sk_ratio,
                      min_dim=self.min_dim, batch_norm_decay=self.batch_norm_decay,
                      global_bn=self.global_bn)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class SqueezeExcitation(keras.layers.Layer):
    """Squeeze-and-excitation gate (Hu et al. 2018).

    The squeeze width is max(1, int(filters * se_ratio)) where `filters` is the
    block's base width (as the reference), and the gate has as many channels as
    the input.

    Args:
        filters: base width the squeeze ratio applies to.
        se_ratio: squeeze ratio.
    """

    def __init__(self, filters, se_ratio, **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.se_ratio = float(se_ratio)
        self.reduce = keras.layers.Conv2D(
            max(1, int(self.filters * self.se_ratio)), 1, padding="same",
            use_bias=True, kernel_initializer=conv_initializer(),
            dtype=self.dtype_policy, name="reduce")
        self.expand = None

    def build(self, input_shape):
        self.expand = keras.layers.Conv2D(
            int(input_shape[-1]), 1, padding="same", use_bias=True,
            kernel_initializer=conv_initializer(), dtype=self.dtype_policy,
            name="expand")
        build_by_tracing(self, input_shape)

    def call(self, inputs):
        gate = ops.mean(inputs, axis=(1, 2), keepdims=True)
        gate = self.expand(ops.relu(self.reduce(gate)))
        return ops.sigmoid(gate) * inputs

    def get_config(self):
        config = super().get_config()
        config.update(filters=self.filters, se_ratio=self.se_ratio)
        return config
