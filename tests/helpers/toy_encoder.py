"""A toy encoder, added as docs/design.md says an encoder is added: one module holding
its layer, its builder and its row of the encoder table (which flags it reads, which
decide its variables, its builder named as 'module:function'). `--encoder=tiny_conv` is one strided convolution and a mean pool; it
reads --width_multiplier (8 x multiplier filters)."""
import keras

from simclr_tf.models import outputs
from simclr_tf.config.tables import encoders as encoder_table

NAME = "tiny_conv"


class TinyConv(keras.layers.Layer):
    """One 3x3/2 convolution and a global mean: h = mean of its feature map."""

    feature_names = ("conv", outputs.H)

    def __init__(self, filters=8, **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.output_dim = filters
        self.conv = keras.layers.Conv2D(filters, 3, strides=2, padding="same",
                                        activation="relu", dtype=self.dtype_policy,
                                        name="conv")

    def call(self, images, training=None):
        x = self.conv(images)
        return {"conv": x, outputs.H: keras.ops.cast(keras.ops.mean(x, axis=(1, 2)),
                                                     "float32")}

    def stages(self):
        return [[self.conv]]

    def no_decay_variables(self):
        return []

    def get_config(self):
        return dict(super().get_config(), filters=self.filters)


SPEC = encoder_table.EncoderSpec(flags=dict(width_multiplier="width"),
                                 variable_flags=("width_multiplier",),
                                 builder=f"{__name__}:build")


def build(options, dtype):
    return TinyConv(filters=max(1, round(8 * options["width"])), dtype=dtype, name=NAME)


def register():
    encoder_table.register_encoder(NAME, SPEC)
