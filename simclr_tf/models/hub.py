"""keras-hub image backbones as SimCLR encoders (`--encoder=hub:<spec>`).

keras-hub is optional: `pip install -e '.[hub]'` in a checkout, or `INSTALL_COMMAND`
anywhere, installs it with all its requirements (setup.py's `hub` extra). Nothing else
in the project imports it. `<spec>` is one of
- a local preset directory (it holds a `config.json`, e.g. written by
  `backbone.save_to_preset(dir)`): the backbone with its weights, offline;
- a backbone class of `keras_hub.models` ('ResNetBackbone', 'ViTBackbone',
  'EfficientNetBackbone', ...): random init, its arguments from `--encoder_config`;
- any other preset name or handle ('resnet_50_imagenet', 'kaggle://...', 'hf://...'),
  which keras-hub downloads (online only).

Our images are RGB floats in [0, 1]. A preset's image converter maps [0, 255] pixels
to the backbone's inputs with `x * scale + offset`; the encoder applies the same map
to [0, 1] images (`x * 255 * scale + offset`) and never resizes (the input
pipeline decides the size). Backbones by class name have no converter: they see the
[0, 1] images as they are.

h is the global average of a backbone's final feature map [B, H, W, C], or, for a
token sequence [B, T, D] (ViT-like), the first (class) token ('token') or the mean of
the other tokens ('mean'), per `--vit_pool`.
"""
import difflib
import inspect
import os
import re

import keras
import numpy as np
from keras import ops

from simclr_tf.models.layers import (PACKAGE, TracedOutputShapeMixin, build_by_tracing,
                                     output_float)
from simclr_tf.models.outputs import H

# keras-hub with its own requirements (tensorflow-text, sentencepiece, kagglehub,
# tokenizers, ...; the same pin as setup.py's `hub` extra): they need the `tensorflow`
# wheel that setup.py requires, so nothing installs a second TensorFlow and `pip check`
# passes. A preset name downloads through kagglehub; 'hf://' handles also need
# huggingface_hub (a requirement of tokenizers). Backbones by class name and preset
# directories need no network.
INSTALL_COMMAND = "pip install keras-hub==0.32.0"
POOLS = ("token", "mean")
PRESET_CONFIG_FILE = "config.json"
IMAGE_CONVERTER_FILE = "image_converter.json"
# What keras-hub image backbones call their input shape (EfficientNet: input_shape).
IMAGE_SHAPE_ARGUMENTS = ("image_shape", "input_shape")
DEFAULT_IMAGE_SHAPE = (None, None, 3)
# Preset names are snake case or handles; a spec like this one names a class.
_CLASS_NAME = re.compile(r"[A-Z][A-Za-z0-9_]*$")
_OUTPUT = "output"


def import_keras_hub():
    """The `keras_hub` module, or an ImportError that names the missing module and
    says how to install keras-hub."""
    try:
        import keras_hub  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        raise ImportError(f"--encoder=hub:... {import_error_message(error)}") from error
    return keras_hub


def import_error_message(error):
    """What to do about `error`, the ImportError of `import keras_hub`: names the
    missing module (`error.name`) and gives `INSTALL_COMMAND`."""
    missing = getattr(error, "name", None)
    if isinstance(error, ModuleNotFoundError) and missing == "keras_hub":
        what = "keras-hub is not installed"
    elif isinstance(error, ModuleNotFoundError) and missing:
        what = (f"keras-hub is installed but does not import: it needs the module "
                f"{missing!r}, which is not installed")
    else:
        what = f"keras-hub does not import ({type(error).__name__}: {error})"
    message = (f"needs keras-hub, an optional extra, and {what}. "
               f"Install it with `{INSTALL_COMMAND}` (with its requirements; in a "
               "checkout `pip install -e '.[hub]'` does the same).")
    return message


def build(spec, options, dtype):
    """The encoder of `--encoder=hub:<spec>` (`encoders.build_encoder`'s builder).

    Args:
        spec: a preset directory, a backbone class name or a preset name.
        options: the model's encoder options; reads 'hub_config' (the class's
            arguments) and 'vit_pool', and ignores the ResNet ones.
        dtype: the model's dtype policy.
    """
    return HubEncoder(spec, hub_config=options.get("hub_config"),
                      pool=options.get("vit_pool", "token"), dtype=dtype)


def spec_kind(spec):
    """'directory', 'class' or 'preset': how `load_backbone` reads `spec`."""
    if os.path.isfile(os.path.join(spec, PRESET_CONFIG_FILE)):
        return "directory"
    if os.path.isdir(spec) or (os.sep in spec and "://" not in spec):
        raise ValueError(f"{spec!r} is not a keras-hub preset directory (it has no "
                         f"{PRESET_CONFIG_FILE}; write one with "
                         f"`backbone.save_to_preset(dir)`). Received: spec={spec!r}")
    if _CLASS_NAME.match(spec):
        _backbone_class(spec)
        return "class"
    return "preset"


def _backbone_class(name):
    keras_hub = import_keras_hub()
    cls = getattr(keras_hub.models, name, None)
    if isinstance(cls, type) and issubclass(cls, keras_hub.models.Backbone):
        return cls
    backbones = sorted(n for n in dir(keras_hub.models) if n.endswith("Backbone"))
    close = difflib.get_close_matches(name, backbones, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ValueError(
        f"{name!r} is not a backbone class of keras_hub.models; {hint}image backbones "
        "include ResNetBackbone, ViTBackbone, EfficientNetBackbone (a lowercase name "
        f"is read as a preset). Received: spec={name!r}")


def load_backbone(spec, hub_config=None, dtype=None):
    """The keras-hub backbone of `spec` and its preset's image converter (or None).

    Args:
        spec: see `spec_kind`.
        hub_config: for a class name, its arguments (image shape (None, None, 3)
            unless given); must be empty for a preset.
        dtype: dtype policy, passed to the backbone.
    """
    keras_hub = import_keras_hub()
    kind = spec_kind(spec)
    if kind == "class":
        return _from_class(_backbone_class(spec), dict(hub_config or {}), dtype), None
    if hub_config:
        raise ValueError(f"hub_config (--encoder_config) applies to a backbone class, "
                         f"not to the preset {spec!r}. Received: hub_config={hub_config!r}")
    if kind == "directory":
        backbone = keras_hub.models.Backbone.from_preset(spec, dtype=dtype)
        has_converter = os.path.isfile(os.path.join(spec, IMAGE_CONVERTER_FILE))
        converter = (keras_hub.layers.ImageConverter.from_preset(spec)
                     if has_converter else None)
        return backbone, converter
    try:
        backbone = keras_hub.models.Backbone.from_preset(spec, dtype=dtype)
    except Exception as error:  # pylint: disable=broad-except
        raise RuntimeError(
            f"keras-hub could not load the preset {spec!r} ({type(error).__name__}: "
            f"{error}). Preset names are downloaded (Kaggle / Hugging Face): online "
            "only. Offline, save the backbone once with `save_to_preset(dir)` and pass "
            "--encoder=hub:<dir>.") from error
    try:
        converter = keras_hub.layers.ImageConverter.from_preset(spec)
    except FileNotFoundError:
        converter = None
    return backbone, converter


def _from_class(cls, arguments, dtype):
    parameters = inspect.signature(cls.__init__).parameters
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    for name in IMAGE_SHAPE_ARGUMENTS:
        if name in parameters:
            # JSON gives lists; keras-hub indexes and compares tuples.
            arguments[name] = tuple(arguments.get(name, DEFAULT_IMAGE_SHAPE))
    if dtype is not None and ("dtype" in parameters or takes_kwargs):
        arguments["dtype"] = dtype
    try:
        return cls(**arguments)
    except (TypeError, ValueError) as error:
        shown = {k: v for k, v in arguments.items() if k != "dtype"}
        raise ValueError(
            f"{cls.__name__}(**{shown}) failed: {error}. Pass the class's arguments "
            "in --encoder_config as JSON; a backbone that needs a fixed size (ViT) "
            "takes \"image_shape\": [S, S, 3] with S = --image_size.") from error


def _pixel_map(converter):
    """(scale, offset) of a converter for [0, 1] images, numpy float32; None for the
    identity."""
    if converter is None or (converter.scale is None and converter.offset is None):
        return None, None
    scale = 1.0 if converter.scale is None else converter.scale
    offset = 0.0 if converter.offset is None else converter.offset
    return (np.asarray(scale, "float32") * 255.0, np.asarray(offset, "float32"))


@keras.saving.register_keras_serializable(package=PACKAGE)
class HubEncoder(TracedOutputShapeMixin, keras.layers.Layer):
    """A keras-hub image backbone behind the encoder interface of
    `simclr_tf.models.encoders`.

    Calling it on images [B, H, W, 3] (RGB in [0, 1]) returns the backbone's pyramid
    outputs (`P2`.. for a `FeaturePyramidBackbone`) and `final_avg_pool` (h, float32
    [B, output_dim]). The backbone is one stage: fine-tuning trains it all (-1) or
    freezes it all (4).

    Args:
        spec: a preset directory, a `keras_hub.models` backbone class name or a
            preset name (module docstring).
        hub_config: the class's arguments (a class name only).
        pool: for token outputs, 'token' (h = the first token, the class token) or
            'mean' (the mean of the others). Feature maps are always averaged.

    Example:
    >>> encoder = HubEncoder("ResNetBackbone", hub_config=dict(
    ...     input_conv_filters=[64], input_conv_kernel_sizes=[7],
    ...     stackwise_num_filters=[64, 128], stackwise_num_blocks=[2, 2],
    ...     stackwise_num_strides=[1, 2], block_type="basic_block"))
    >>> encoder(images)["final_avg_pool"].shape  # (B, 128)
    """

    def __init__(self, spec, hub_config=None, pool="token", **kwargs):
        kwargs.setdefault("name", "hub")
        super().__init__(**kwargs)
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}. Received: pool={pool!r}")
        self.spec = spec
        self.hub_config = dict(hub_config or {})
        self.pool = pool
        backbone, converter = load_backbone(spec, self.hub_config, self.dtype_policy)
        _check_image_backbone(backbone, spec, pool)
        # What trains is --fine_tune_after_block's decision, not a flag saved in
        # the preset (a backbone saved frozen would otherwise never train).
        backbone.trainable = True
        self.backbone = backbone
        self._scale, self._offset = _pixel_map(converter)
        pyramid = dict(getattr(backbone, "pyramid_outputs", None) or {})
        self._pyramid_names = tuple(pyramid)
        # The same layers and variables as `backbone`, with the pyramid levels out too.
        self.features = keras.Model(backbone.inputs, {**pyramid, _OUTPUT: backbone.output},
                                    name="features")

    @property
    def output_dim(self):
        """Width of h (`final_avg_pool`)."""
        return int(self.backbone.output.shape[-1])

    @property
    def feature_names(self):
        return self._pyramid_names + (H,)

    def stages(self):
        """One stage, the whole backbone (its blocks are not ours to count)."""
        return [[self.backbone]]

    def no_decay_variables(self):
        """By structure: variables with at most one dimension above 1 (a class token
        (1, 1, D), norms, biases) and the weights of Embedding layers (position
        embeddings)."""
        layers = self.backbone._flatten_layers(include_self=False)  # pylint: disable=protected-access
        embedded = {id(w) for layer in layers if isinstance(layer, keras.layers.Embedding)
                    for w in layer.weights}
        return [w for w in self.backbone.weights
                if id(w) in embedded or sum(d != 1 for d in w.shape) <= 1]

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def call(self, inputs, training=None):
        x = inputs
        if self._scale is not None:
            x = x * ops.cast(self._scale, x.dtype) + ops.cast(self._offset, x.dtype)
        outputs = self.features(x, training=training)
        features = {name: outputs[name] for name in self._pyramid_names}
        # h in float32 whatever the compute dtype (float64 stays): heads and probes read it.
        final = output_float(outputs[_OUTPUT])
        if len(final.shape) == 4:
            pooled = ops.mean(final, axis=(1, 2))
        elif self.pool == "token":
            pooled = final[:, 0]
        else:
            pooled = ops.mean(final[:, 1:], axis=1)
        features[H] = pooled
        return features

    def get_config(self):
        config = super().get_config()
        config.update(spec=self.spec, hub_config=self.hub_config, pool=self.pool)
        return config


def _check_image_backbone(backbone, spec, pool):
    inputs, output = backbone.inputs, backbone.output
    if (len(inputs) != 1 or len(inputs[0].shape) != 4 or isinstance(output, (dict, list))
            or len(output.shape) not in (3, 4)):
        raise ValueError(
            f"{spec!r} is not an image backbone with one output: it takes "
            f"{[tuple(i.shape) for i in inputs]} and returns "
            f"{keras.tree.map_structure(lambda t: tuple(t.shape), output)}; expected "
            "images [B, H, W, C] -> a feature map [B, h, w, C] or tokens [B, T, D].")
    if getattr(backbone, "data_format", "channels_last") == "channels_first":
        raise ValueError(f"{spec!r} is channels_first; SimCLR images are channels_last. "
                         "Build it with data_format='channels_last'.")
    if len(output.shape) == 3 and pool == "token" and not getattr(
            backbone, "use_class_token", True):
        raise ValueError(f"{spec!r} has no class token (use_class_token=False): use "
                         "pool='mean' (--vit_pool=mean).")
