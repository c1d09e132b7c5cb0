"""SimCLRModel: encoder f + projection head g + supervised head; fine-tuning freeze."""
import keras
from keras import ops

from simclr_tf.config import architecture
from simclr_tf.models.heads import ProjectionHead, SupervisedHead
from simclr_tf.models.layers import PACKAGE, BatchNormalization, build_by_tracing, output_float
from simclr_tf.models.outputs import H, LOGITS, Z
from simclr_tf.models import encoders


@keras.saving.register_keras_serializable(package=PACKAGE)
class SimCLRModel(keras.Model):
    """The SimCLR network: encoder, projection head and supervised head.

    Calling it on images [B, H, W, 3] (RGB floats in [0, 1]) returns a dict with the
    encoder's named features (ResNet: `initial_conv` ... `final_avg_pool` = h), the head's
    `proj_head_input`, `proj_head_output` (z) and `supervised_head_input`, and, when
    `num_classes` is set, `logits_sup`. h, z and the logits are float32 (float64 when
    the model computes in float64).

    Args:
        encoder: a name of `simclr_tf.config.tables.encoders.ENCODERS` ('resnet', the
            default; 'vit_s16', 'vit_b16'; 'hub:<...>' with keras-hub) built with
            `encoder_options`, or an encoder layer (see `simclr_tf.models.encoders`
            for what one provides), e.g. `ViT(**vit.PRESETS['vit_s16'], pool='mean')`.
        encoder_options: the named encoder's own options, e.g. ResNet's
            {'depth': 18, 'width_multiplier': 1, 'sk_ratio': 0.0, 'se_ratio': 0.0,
            'stem': 'cifar'} (its defaults for those not given: ResNet-50, the
            ImageNet stem) or {'vit_pool': 'mean'}.
        proj_head_mode, num_proj_layers, proj_out_dim, ft_proj_selector: the
            projection head (`ProjectionHead`).
        num_classes: classes of the supervised head; None for no supervised head.
        supervised_head_stop_gradient: feed the supervised head
            `stop_gradient(supervised_head_input)`, so labels never reach the encoder
            (pretraining with online linear evaluation). False when fine-tuning.
        zero_init_logits_layer: start the supervised head's kernel at 0.
        batch_norm_decay: BN moving-average momentum everywhere.
        global_bn: cross-replica BN in the encoder and the projection head.

    Example:
    >>> model = SimCLRModel(encoder_options=dict(depth=18, stem="cifar"), num_classes=10)
    >>> outputs = model(images, training=True)
    >>> z, logits = outputs["proj_head_output"], outputs["logits_sup"]

    The Keras way works too: with one loss, `compile` applies it (and the metrics) to
    the supervised logits, so a supervised fine-tune is
    >>> model = SimCLRModel(encoder_options=dict(depth=18, stem="cifar"), num_classes=10,
    ...                     supervised_head_stop_gradient=False)
    >>> model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    ...               metrics=["accuracy"])
    >>> model.fit(images, labels)
    and `model.summary()` shows each part's output shapes.
    """

    def __init__(self, encoder="resnet", encoder_options=None, proj_head_mode="nonlinear",
                 num_proj_layers=3, proj_out_dim=128, ft_proj_selector=0, num_classes=None,
                 supervised_head_stop_gradient=True, zero_init_logits_layer=False,
                 batch_norm_decay=0.9, global_bn=True, **kwargs):
        legacy = [key for key in architecture.LEGACY_RESNET_KEYS if key in kwargs]
        if legacy:
            raise ValueError(
                f"{', '.join(legacy)}: options of the ResNet encoder, given in "
                f"encoder_options (e.g. SimCLRModel(encoder_options=dict(depth=18, "
                "stem='cifar'))). Received: "
                + ", ".join(f"{key}={kwargs[key]!r}" for key in legacy))
        kwargs.setdefault("name", "simclr")
        super().__init__(**kwargs)
        self._arguments = dict(
            encoder_options=dict(encoder_options or {}), proj_head_mode=proj_head_mode,
            num_proj_layers=num_proj_layers, proj_out_dim=proj_out_dim,
            ft_proj_selector=ft_proj_selector, num_classes=num_classes,
            supervised_head_stop_gradient=bool(supervised_head_stop_gradient),
            zero_init_logits_layer=bool(zero_init_logits_layer),
            batch_norm_decay=batch_norm_decay, global_bn=bool(global_bn))
        self.supervised_head_stop_gradient = bool(supervised_head_stop_gradient)
        if isinstance(encoder, str):
            self.encoder = encoders.build_encoder(
                encoder, dtype=self.dtype_policy, batch_norm_decay=batch_norm_decay,
                global_bn=global_bn, **(encoder_options or {}))
            self._arguments["encoder"] = encoder
        else:
            if encoder_options:
                raise ValueError("encoder_options apply to a named encoder; an encoder "
                                 "layer is built with its own arguments. Received: "
                                 f"encoder_options={encoder_options!r}")
            self.encoder = encoder
            self._arguments["encoder"] = keras.saving.serialize_keras_object(encoder)
        self.projection_head = ProjectionHead(
            proj_head_mode, num_proj_layers, proj_out_dim, ft_proj_selector,
            batch_norm_decay=batch_norm_decay, global_bn=global_bn,
            dtype=self.dtype_policy, name="projection_head")
        self.supervised_head = None
        if num_classes is not None:
            self.supervised_head = SupervisedHead(
                num_classes, zero_init=zero_init_logits_layer, dtype=self.dtype_policy,
                name="head_supervised")

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def call(self, inputs, training=None):
        outputs = dict(self.encoder(inputs, training=training))
        outputs.update(self.projection_head(outputs[H], training=training))
        outputs[Z] = output_float(outputs[Z])
        if self.supervised_head is not None:
            head_input = outputs["supervised_head_input"]
            if self.supervised_head_stop_gradient:
                head_input = ops.stop_gradient(head_input)
            outputs[LOGITS] = output_float(self.supervised_head(head_input))
        return outputs

    # ----- the Keras way: compile() / fit() / evaluate() on labels -------------------

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None,
                     training=True):
        return super().compute_loss(x=x, y=y, y_pred=self._compiled_output(y_pred),
                                    sample_weight=sample_weight, training=training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, y, self._compiled_output(y_pred),
                                       sample_weight=sample_weight)

    def _compiled_output(self, y_pred):
        """What `compile(loss=..., metrics=...)` applies to: the supervised logits
        when one loss was given (a supervised fit on labels), the whole dict when
        losses are given per output name (e.g. {'logits_sup': ...})."""
        if isinstance(y_pred, dict) and LOGITS in y_pred and not isinstance(
                getattr(self, "loss", None), dict):
            return y_pred[LOGITS]
        return y_pred

    def get_config(self):
        return dict(name=self.name, **self._arguments)

    @classmethod
    def from_config(cls, config):
        # Configs saved before `encoder_options` held ResNet's arguments at the top.
        config = architecture.normalize_model_kwargs(config)
        if isinstance(config.get("encoder"), dict):
            config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def float32_twin(model, image_size):
    """`model` computing in float32, for inference exports: `model` itself when it
    does; for a mixed-precision model (bfloat16 or float16 arithmetic on float32
    weights), a model of the same config and weights, its frozen layers frozen alike,
    whose arithmetic is float32. ONNX Runtime and LiteRT's builtin ops take no bfloat16
    convolution, and an export is read as the model's function, not its training's
    rounding.

    Raises:
        ValueError: the twin still computes in another dtype (an encoder layer
            given as an object carries its own policy).
    """
    if model.dtype_policy.compute_dtype not in ("bfloat16", "float16"):
        return model
    twin = type(model).from_config(dict(model.get_config(), dtype="float32"))
    twin.build((None, image_size, image_size, 3))
    mixed = sorted({layer.dtype_policy.compute_dtype for layer in twin._flatten_layers()  # pylint: disable=protected-access
                    if hasattr(layer, "dtype_policy")} - {"float32"})
    if mixed:
        raise ValueError(f"The model's float32 copy for export still computes in "
                         f"{', '.join(mixed)} (its encoder carries its own dtype policy); "
                         "export a run trained without --mixed_precision.")
    for ours, theirs in zip(twin._flatten_layers(), model._flatten_layers()):  # pylint: disable=protected-access
        ours.trainable = theirs.trainable
        if hasattr(theirs, "frozen_batch_statistics"):
            ours.frozen_batch_statistics = theirs.frozen_batch_statistics
    twin.set_weights(model.get_weights())
    return twin


def freeze_for_finetuning(model, fine_tune_after_block, batch_statistics=False):
    """Freezes the encoder up to a stage (ResNet: a block group), BN statistics included.

    Frozen layers get `trainable = False`, which in Keras 3 also runs their batch
    norm in inference mode, so neither weights nor moving statistics change.

    Args:
        model: a `SimCLRModel`.
        fine_tune_after_block: -1 trains everything; k freezes the encoder's stages
            0..k (ResNet: 0 the stem, k in 1..3 also block groups 1..k); 4 freezes
            the whole encoder (linear evaluation: only the heads train).
        batch_statistics: the authors' behaviour instead (`--frozen_batch_norm=batch`):
            the frozen layers' batch norm still normalises with batch statistics in
            training and updates its moving averages (their Keras 2 `trainable=False`
            on a block does not reach the batch norm inside it); their weights, gamma
            and beta included, still do not train.

    Returns:
        The list of frozen layers.
    """
    frozen = encoders.frozen_layers(model.encoder, fine_tune_after_block)
    for layer in frozen:
        layer.trainable = False
        if batch_statistics:
            for inner in layer._flatten_layers(include_self=True):  # pylint: disable=protected-access
                if isinstance(inner, BatchNormalization):
                    inner.frozen_batch_statistics = True
    return frozen
