"""Projection head g (SimCLR's MLP) and the supervised (linear) head."""
import keras
from keras import ops

from simclr_tf.config import rules

from simclr_tf.models.layers import (PACKAGE, BatchNormRelu, CheckpointListsMixin,
                                     TracedOutputShapeMixin, build_by_tracing)
from simclr_tf.models.outputs import Z



def head_initializer():
    """N(0, 0.01), the reference's init for every dense head layer."""
    return keras.initializers.RandomNormal(stddev=0.01)


@keras.saving.register_keras_serializable(package=PACKAGE)
class LinearBN(keras.layers.Layer):
    """Dense layer followed by BN: BN replaces the bias (`center` = learn beta).

    Args:
        units: output width.
        center: learn a BN beta (hidden layers) or not (the output layer).
        batch_norm_decay, global_bn: as in `BatchNormRelu`.
    """

    def __init__(self, units, center=True, batch_norm_decay=0.9, global_bn=True,
                 **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.center = bool(center)
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        self.dense = keras.layers.Dense(
            self.units, use_bias=False, kernel_initializer=head_initializer(),
            dtype=self.dtype_policy, name="dense")
        self.bn = BatchNormRelu(relu=False, center=self.center,
                                batch_norm_decay=self.batch_norm_decay,
                                global_bn=self.global_bn, dtype=self.dtype_policy,
                                name="bn")

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def call(self, inputs, training=None):
        return self.bn(self.dense(inputs), training=training)

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units, center=self.center,
                      batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ProjectionHead(TracedOutputShapeMixin, CheckpointListsMixin, keras.layers.Layer):
    """SimCLR's projection head g.

    'nonlinear': `num_proj_layers` layers; each hidden one is dense (width of the
    input, no bias) + BN (with beta) + ReLU, the last is dense to `proj_out_dim` +
    BN without beta and without ReLU. 'linear': only that last layer. 'none': z = h.

    Calling it returns `{'proj_head_input', 'proj_head_output',
    'supervised_head_input'}`, the last being layer `ft_proj_selector` of
    [input, layer 1, ..., layer L] (0 = h, -1 = z; python indexing).

    Args:
        mode: 'nonlinear', 'linear' or 'none'.
        num_proj_layers: layers of the nonlinear head (SimCLRv1 2, SimCLRv2 3).
        proj_out_dim: width of z.
        ft_proj_selector: which layer feeds the supervised head.
        batch_norm_decay, global_bn: as in `BatchNormRelu`.
    """

    def __init__(self, mode="nonlinear", num_proj_layers=3, proj_out_dim=128,
                 ft_proj_selector=0, batch_norm_decay=0.9, global_bn=True, **kwargs):
        super().__init__(**kwargs)
        if mode not in rules.PROJ_HEAD_MODES:
            raise ValueError(f"mode must be one of {rules.PROJ_HEAD_MODES}. Received: mode={mode!r}")
        rules.check_num_proj_layers(mode, num_proj_layers)
        rules.check_proj_out_dim(proj_out_dim)
        self.mode = mode
        self.num_proj_layers = int(num_proj_layers)
        self.proj_out_dim = int(proj_out_dim)
        self.ft_proj_selector = int(ft_proj_selector)
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        rules.check_ft_proj_selector(mode, num_proj_layers, ft_proj_selector)
        self.head_layers = []

    @property
    def num_layers(self):
        """Number of dense layers in the head."""
        return rules.num_head_layers(self.mode, self.num_proj_layers)

    def build(self, input_shape):
        hidden = int(input_shape[-1])
        bn_args = dict(batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn,
                       dtype=self.dtype_policy)
        for j in range(self.num_layers):
            last = j == self.num_layers - 1
            self.head_layers.append(LinearBN(
                self.proj_out_dim if last else hidden, center=not last,
                name=f"{'l' if self.mode == 'linear' else 'nl'}_{j}", **bn_args))
        build_by_tracing(self, input_shape)

    def hiddens(self, inputs, training=None):
        """[h, layer 1, ..., layer L = z]: the input and every layer's output (what
        `ft_proj_selector` indexes; evaluating each is the paper's h-vs-z study)."""
        hiddens = [inputs]
        for j, layer in enumerate(self.head_layers):
            x = layer(hiddens[-1], training=training)
            if j != len(self.head_layers) - 1:
                x = ops.relu(x)
            hiddens.append(x)
        return hiddens

    def call(self, inputs, training=None):
        hiddens = self.hiddens(inputs, training=training)
        return {"proj_head_input": inputs,
                Z: hiddens[-1],
                "supervised_head_input": hiddens[self.ft_proj_selector]}

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode, num_proj_layers=self.num_proj_layers,
                      proj_out_dim=self.proj_out_dim, ft_proj_selector=self.ft_proj_selector,
                      batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class SupervisedHead(TracedOutputShapeMixin, keras.layers.Layer):
    """One dense layer (with bias) to the class logits.

    Args:
        num_classes: number of classes.
        zero_init: start the kernel at 0 (`zero_init_logits_layer`).
    """

    def __init__(self, num_classes, zero_init=False, **kwargs):
        super().__init__(**kwargs)
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be >= 1. Received: num_classes={num_classes!r}")
        self.num_classes = int(num_classes)
        self.zero_init = bool(zero_init)
        self.dense = keras.layers.Dense(
            self.num_classes, use_bias=True,
            kernel_initializer="zeros" if self.zero_init else head_initializer(),
            dtype=self.dtype_policy, name="dense")

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, inputs):
        return self.dense(inputs)

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes, zero_init=self.zero_init)
        return config
