"""ResNet v1 (post-activation) encoders of SimCLR v1/v2, returning named features.

Depths 18/34 use basic blocks, 50-200 bottleneck blocks. `sk_ratio > 0` switches on
selective kernels together with ResNet-D (three-conv stem, average-pool shortcuts),
exactly as SimCLRv2. The stem is chosen explicitly ('imagenet' or 'cifar'), never
from the image size. Freezing for fine-tuning is decided outside (see
`simclr_tf.models.simclr.freeze_for_finetuning`); the encoder exposes `stem` and
`block_groups` for it.
"""
import keras
from keras import ops

from simclr_tf.config import rules, variants
from simclr_tf.models.layers import (
    PACKAGE, BatchNormRelu, CheckpointListsMixin, Conv2DFixedPadding, SelectiveKernelConv,
    SqueezeExcitation, TracedOutputShapeMixin, build_by_tracing, output_float)
from simclr_tf.models.outputs import H

STEMS = ("imagenet", "cifar")
FEATURE_NAMES = ("initial_conv", "initial_max_pool", "block_group1", "block_group2",
                 "block_group3", "block_group4", H)
GROUP_WIDTHS = (64, 128, 256, 512)
GROUP_STRIDES = (1, 2, 2, 2)


def scaled_width(base, width_multiplier):
    """Channels of a layer of base width `base` at `width_multiplier` (at least 1)."""
    return max(1, int(round(base * width_multiplier)))


class _Block(keras.layers.Layer):
    """Shared constructor, shortcut and config of the two residual block kinds."""

    expansion = 1

    def __init__(self, filters, strides, use_projection=False, sk_ratio=0.0,
                 se_ratio=0.0, batch_norm_decay=0.9, global_bn=True, **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.strides = int(strides)
        self.use_projection = bool(use_projection)
        self.sk_ratio = float(sk_ratio)
        self.se_ratio = float(se_ratio)
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        self._bn_args = dict(batch_norm_decay=self.batch_norm_decay,
                             global_bn=self.global_bn, dtype=self.dtype_policy)
        self.shortcut_pool = None
        self.shortcut_conv = None
        self.shortcut_bn = None
        if self.use_projection:
            out = self.expansion * self.filters
            if self.sk_ratio > 0:
                # ResNet-D: average-pool then a stride-1 projection, so the shortcut
                # sees every input pixel. (At stride 1 the reference still pools, with
                # SAME padding; kept for parity with its released models.)
                self.shortcut_pool = keras.layers.AveragePooling2D(
                    2, strides=self.strides,
                    padding="same" if self.strides == 1 else "valid",
                    dtype=self.dtype_policy, name="shortcut_pool")
                self.shortcut_conv = Conv2DFixedPadding(
                    out, 1, 1, dtype=self.dtype_policy, name="shortcut_conv")
            else:
                self.shortcut_conv = Conv2DFixedPadding(
                    out, 1, self.strides, dtype=self.dtype_policy, name="shortcut_conv")
            self.shortcut_bn = BatchNormRelu(relu=False, name="shortcut_bn", **self._bn_args)
        self.se = None
        if self.se_ratio > 0:
            self.se = SqueezeExcitation(self.filters, self.se_ratio,
                                        dtype=self.dtype_policy, name="se")

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def shortcut(self, inputs, training):
        if not self.use_projection:
            return inputs
        x = inputs
        if self.shortcut_pool is not None:
            if self.strides > 1:
                x = ops.pad(x, [[0, 0], [0, 1], [0, 1], [0, 0]])
            x = self.shortcut_pool(x)
        return self.shortcut_bn(self.shortcut_conv(x), training=training)

    def residual(self, inputs, training):
        raise NotImplementedError

    def call(self, inputs, training=None):
        shortcut = self.shortcut(inputs, training)
        x = self.residual(inputs, training)
        if self.se is not None:
            x = self.se(x)
        return ops.relu(x + shortcut)

    def get_config(self):
        config = super().get_config()
        config.update(filters=self.filters, strides=self.strides,
                      use_projection=self.use_projection, sk_ratio=self.sk_ratio,
                      se_ratio=self.se_ratio, batch_norm_decay=self.batch_norm_decay,
                      global_bn=self.global_bn)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ResidualBlock(_Block):
    """Basic block (ResNet-18/34): 3x3 conv, BN-ReLU, 3x3 conv, BN (gamma 0)."""

    expansion = 1

    def __init__(self, filters, strides, **kwargs):
        super().__init__(filters, strides, **kwargs)
        self.conv1 = Conv2DFixedPadding(self.filters, 3, self.strides,
                                        dtype=self.dtype_policy, name="conv1")
        self.bn1 = BatchNormRelu(name="bn1", **self._bn_args)
        self.conv2 = Conv2DFixedPadding(self.filters, 3, 1, dtype=self.dtype_policy,
                                        name="conv2")
        self.bn2 = BatchNormRelu(relu=False, init_zero=True, name="bn2", **self._bn_args)

    def residual(self, inputs, training):
        x = self.bn1(self.conv1(inputs), training=training)
        return self.bn2(self.conv2(x), training=training)


@keras.saving.register_keras_serializable(package=PACKAGE)
class BottleneckBlock(_Block):
    """Bottleneck (ResNet-50+): 1x1, 3x3 (or SK conv) with the stride, 1x1 to 4x."""

    expansion = 4

    def __init__(self, filters, strides, **kwargs):
        super().__init__(filters, strides, **kwargs)
        self.conv1 = Conv2DFixedPadding(self.filters, 1, 1, dtype=self.dtype_policy,
                                        name="conv1")
        self.bn1 = BatchNormRelu(name="bn1", **self._bn_args)
        if self.sk_ratio > 0:
            self.conv2 = SelectiveKernelConv(
                self.filters, self.strides, self.sk_ratio,
                batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn,
                dtype=self.dtype_policy, name="sk_conv")
            self.bn2 = None  # the SK conv normalises its own paths
        else:
            self.conv2 = Conv2DFixedPadding(self.filters, 3, self.strides,
                                            dtype=self.dtype_policy, name="conv2")
            self.bn2 = BatchNormRelu(name="bn2", **self._bn_args)
        self.conv3 = Conv2DFixedPadding(4 * self.filters, 1, 1, dtype=self.dtype_policy,
                                        name="conv3")
        self.bn3 = BatchNormRelu(relu=False, init_zero=True, name="bn3", **self._bn_args)

    def residual(self, inputs, training):
        x = self.bn1(self.conv1(inputs), training=training)
        if self.bn2 is None:
            x = self.conv2(x, training=training)
        else:
            x = self.bn2(self.conv2(x), training=training)
        return self.bn3(self.conv3(x), training=training)


BLOCK_CLASSES = {"basic": ResidualBlock, "bottleneck": BottleneckBlock}


@keras.saving.register_keras_serializable(package=PACKAGE)
class BlockGroup(TracedOutputShapeMixin, CheckpointListsMixin, keras.layers.Layer):
    """`num_blocks` residual blocks; the first always has a projection shortcut.

    Args:
        block: 'basic' or 'bottleneck'.
        filters: base width of the blocks.
        num_blocks: number of blocks.
        strides: stride of the first block.
        **block_kwargs: sk_ratio, se_ratio, batch_norm_decay, global_bn.
    """

    def __init__(self, block, filters, num_blocks, strides, sk_ratio=0.0, se_ratio=0.0,
                 batch_norm_decay=0.9, global_bn=True, **kwargs):
        super().__init__(**kwargs)
        if block not in BLOCK_CLASSES:
            raise ValueError(f"block must be one of {sorted(BLOCK_CLASSES)}. "
                             f"Received: block={block!r}")
        self.block = block
        self.filters = int(filters)
        self.num_blocks = int(num_blocks)
        self.strides = int(strides)
        self.sk_ratio = float(sk_ratio)
        self.se_ratio = float(se_ratio)
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        block_cls = BLOCK_CLASSES[block]
        self.blocks = [
            block_cls(self.filters, self.strides if i == 0 else 1, use_projection=(i == 0),
                      sk_ratio=self.sk_ratio, se_ratio=self.se_ratio,
                      batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn,
                      dtype=self.dtype_policy, name=f"block{i + 1}")
            for i in range(self.num_blocks)
        ]

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def call(self, inputs, training=None):
        for block in self.blocks:
            inputs = block(inputs, training=training)
        return inputs

    def get_config(self):
        config = super().get_config()
        config.update(block=self.block, filters=self.filters, num_blocks=self.num_blocks,
                      strides=self.strides, sk_ratio=self.sk_ratio, se_ratio=self.se_ratio,
                      batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class Stem(TracedOutputShapeMixin, CheckpointListsMixin, keras.layers.Layer):
    """The input stem; returns `{'initial_conv', 'initial_max_pool'}`.

    'imagenet': 7x7/2 conv (or, with ResNet-D, three 3x3 convs of widths
    32w/2-stride, 32w, 64w), BN-ReLU, 3x3/2 max-pool. 'cifar': one 3x3/1 conv,
    BN-ReLU, no pooling (for images of about 32 px).

    Args:
        stem: 'imagenet' or 'cifar'.
        width_multiplier: channel multiplier.
        resnet_d: use the ResNet-D three-conv stem (SimCLRv2 with selective kernels).
        batch_norm_decay, global_bn: as in `BatchNormRelu`.
    """

    def __init__(self, stem="imagenet", width_multiplier=1, resnet_d=False,
                 batch_norm_decay=0.9, global_bn=True, **kwargs):
        super().__init__(**kwargs)
        if stem not in STEMS:
            raise ValueError(f"stem must be one of {STEMS}. Received: stem={stem!r}")
        self.stem = stem
        self.width_multiplier = width_multiplier
        self.resnet_d = bool(resnet_d)
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        bn_args = dict(batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn,
                       dtype=self.dtype_policy)
        width = scaled_width(64, width_multiplier)
        # (conv, bn) pairs before `initial_conv`; the last conv's BN comes after it.
        self.deep_convs = []
        self.deep_bns = []
        if stem == "cifar":
            self.conv = Conv2DFixedPadding(width, 3, 1, dtype=self.dtype_policy, name="conv")
        elif self.resnet_d:
            for i, stride in enumerate((2, 1)):
                self.deep_convs.append(Conv2DFixedPadding(
                    width // 2, 3, stride, dtype=self.dtype_policy, name=f"conv_d{i + 1}"))
                self.deep_bns.append(BatchNormRelu(name=f"bn_d{i + 1}", **bn_args))
            self.conv = Conv2DFixedPadding(width, 3, 1, dtype=self.dtype_policy, name="conv")
        else:
            self.conv = Conv2DFixedPadding(width, 7, 2, dtype=self.dtype_policy, name="conv")
        self.bn = BatchNormRelu(name="bn", **bn_args)
        self.pool = None
        if stem == "imagenet":
            self.pool = keras.layers.MaxPooling2D(3, strides=2, padding="same",
                                                  dtype=self.dtype_policy, name="max_pool")

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def call(self, inputs, training=None):
        x = inputs
        for conv, bn in zip(self.deep_convs, self.deep_bns):
            x = bn(conv(x), training=training)
        initial_conv = self.conv(x)
        x = self.bn(initial_conv, training=training)
        if self.pool is not None:
            x = self.pool(x)
        return {"initial_conv": initial_conv, "initial_max_pool": x}

    def get_config(self):
        config = super().get_config()
        config.update(stem=self.stem, width_multiplier=self.width_multiplier,
                      resnet_d=self.resnet_d, batch_norm_decay=self.batch_norm_decay,
                      global_bn=self.global_bn)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ResNet(TracedOutputShapeMixin, CheckpointListsMixin, keras.Model):
    """ResNet v1 encoder of SimCLR; calling it returns a dict of named features.

    Keys: `initial_conv`, `initial_max_pool`, `block_group1`..`block_group4` and
    `final_avg_pool` (h, the representation; float32 [B, 512 * w * expansion]).

    Args:
        depth: 18, 34, 50, 101, 152 or 200.
        width_multiplier: channel multiplier (1, 2, 3, 4, or fractional e.g. 0.25).
        sk_ratio: > 0 enables selective kernels and ResNet-D (SimCLRv2: 0.0625).
        se_ratio: > 0 adds squeeze-excitation to every block.
        stem: 'imagenet' (7x7/2 + max-pool) or 'cifar' (3x3/1, no pool): explicit.
        batch_norm_decay: BN moving-average momentum.
        global_bn: cross-replica batch norm.

    Example:
    >>> encoder = ResNet(depth=50, width_multiplier=2, sk_ratio=0.0625)
    >>> encoder.build((None, 224, 224, 3))
    >>> encoder.count_params()  # 140,428,864 incl. BN moving statistics
    """

    def __init__(self, depth=50, width_multiplier=1, sk_ratio=0.0, se_ratio=0.0,
                 stem="imagenet", batch_norm_decay=0.9, global_bn=True, **kwargs):
        kwargs.setdefault("name", "resnet")
        super().__init__(**kwargs)
        variants.check_depth(depth)
        rules.check_width_multiplier(width_multiplier)
        rules.check_ratio("sk_ratio", sk_ratio)
        rules.check_ratio("se_ratio", se_ratio)
        self.depth = int(depth)
        self.width_multiplier = width_multiplier
        self.sk_ratio = float(sk_ratio)
        self.se_ratio = float(se_ratio)
        self.stem_type = stem
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        block, counts = variants.BLOCKS[self.depth]
        self.block_expansion = BLOCK_CLASSES[block].expansion
        self.stem = Stem(stem, width_multiplier, resnet_d=self.sk_ratio > 0,
                         batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn,
                         dtype=self.dtype_policy, name="stem")
        self.block_groups = [
            BlockGroup(block, scaled_width(base, width_multiplier), count, stride,
                       sk_ratio=self.sk_ratio, se_ratio=self.se_ratio,
                       batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn,
                       dtype=self.dtype_policy, name=f"block_group{i + 1}")
            for i, (base, count, stride) in enumerate(zip(GROUP_WIDTHS, counts, GROUP_STRIDES))
        ]

    @property
    def output_dim(self):
        """Width of h (`final_avg_pool`)."""
        return scaled_width(GROUP_WIDTHS[-1], self.width_multiplier) * self.block_expansion

    @property
    def feature_names(self):
        return FEATURE_NAMES

    def stages(self):
        """What fine-tuning may freeze, in order: the stem, then block groups 1-4."""
        return [[self.stem]] + [[group] for group in self.block_groups]

    def no_decay_variables(self):
        """None beyond the ndim <= 1 ones (BN weights, biases)."""
        return []

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def call(self, inputs, training=None):
        features = dict(self.stem(inputs, training=training))
        x = features["initial_max_pool"]
        for i, group in enumerate(self.block_groups):
            x = group(x, training=training)
            features[f"block_group{i + 1}"] = x
        # h in float32 whatever the compute dtype (float64 stays): heads and probes read it.
        features[H] = output_float(ops.mean(x, axis=(1, 2)))
        return features

    def get_config(self):
        return dict(name=self.name, depth=self.depth, width_multiplier=self.width_multiplier,
                    sk_ratio=self.sk_ratio, se_ratio=self.se_ratio, stem=self.stem_type,
                    batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn)
