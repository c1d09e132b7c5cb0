"""`--encoder=tiny`: the smallest encoder with what SimCLR's ResNet has that matters to
the machinery around it, for smoke runs and the test suite.

Two stages, each a strided 3x3 convolution (no bias), batch norm (cross-replica with
--global_bn, momentum --batch_norm_decay, as the ResNet's) and ReLU, then a global
mean: h has 2 x 64 x --width_multiplier channels (16 at width 1/8). It learns little;
what it gives is a model that builds, traces and exports in a few seconds (a 2-step
run in one process: 8.4 s, against 20.4 s for a ResNet-18 at width 1/8), with the
variables a training run keeps (convolution kernels, BN's gamma and beta, its moving
statistics) and the stages that --fine_tune_after_block freezes (0: the first, 1:
both; 4: the whole encoder, as for every encoder; its row in tables/encoders.py).
"""
import keras
from keras import ops

from simclr_tf.models import layers as L
from simclr_tf.models import outputs


@keras.saving.register_keras_serializable(package=L.PACKAGE)
class TinyNet(L.TracedOutputShapeMixin, keras.layers.Layer):
    """conv3x3/2 - BN - ReLU - conv3x3/2 - BN - ReLU - global mean.

    Args:
        width_multiplier: the first convolution has 64 x width_multiplier filters
            (the ResNet's stem width), the second twice as many.
        batch_norm_decay: moving-average momentum of the BN statistics.
        global_bn: synchronise BN statistics across replicas.
    """

    feature_names = ("stage1", "stage2", outputs.H)

    def __init__(self, width_multiplier=0.125, batch_norm_decay=0.9, global_bn=True,
                 **kwargs):
        super().__init__(**kwargs)
        self.width_multiplier = float(width_multiplier)
        self.batch_norm_decay = float(batch_norm_decay)
        self.global_bn = bool(global_bn)
        filters = max(1, round(64 * self.width_multiplier))
        self.output_dim = 2 * filters
        bn = dict(batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn,
                  dtype=self.dtype_policy)
        self.conv1 = L.Conv2DFixedPadding(filters, 3, 2, dtype=self.dtype_policy,
                                          name="conv1")
        self.bn1 = L.BatchNormRelu(name="bn1", **bn)
        self.conv2 = L.Conv2DFixedPadding(2 * filters, 3, 2, dtype=self.dtype_policy,
                                          name="conv2")
        self.bn2 = L.BatchNormRelu(name="bn2", **bn)

    def build(self, input_shape):
        L.build_by_tracing(self, input_shape)

    def call(self, images, training=None):
        stage1 = self.bn1(self.conv1(images), training=training)
        stage2 = self.bn2(self.conv2(stage1), training=training)
        return {"stage1": stage1, "stage2": stage2,
                outputs.H: L.output_float(ops.mean(stage2, axis=(1, 2)))}

    def stages(self):
        """What fine-tuning may freeze, in order."""
        return [[self.conv1, self.bn1], [self.conv2, self.bn2]]

    def no_decay_variables(self):
        """None beyond the ndim <= 1 ones (BN weights)."""
        return []

    def get_config(self):
        return dict(super().get_config(), width_multiplier=self.width_multiplier,
                    batch_norm_decay=self.batch_norm_decay, global_bn=self.global_bn)
