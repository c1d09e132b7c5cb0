"""The serving module of an export: the model, its variables and the signatures.

`create_serving_module(model, image_size=...)` returns the `ServingModule` and its
signatures (`serving_default` on encoded images, `serving_images` on float images),
every function traced, ready for `tf.saved_model.save`; `simclr_tf.weights.export` writes
them to disk and documents what the SavedModel holds.
"""
import contextlib

import keras
import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf import augment
from simclr_tf.models.outputs import H, LOGITS, Z
from simclr_tf.weights.serving_input import (IMAGE_BYTES_INPUT, IMAGES_INPUT, asserted,
                                             check_images, decode_batch)

SERVING_DEFAULT = "serving_default"
SERVING_IMAGES = "serving_images"
SERVING_OUTPUTS = ("embedding", "projection", "logits", "probabilities")


class ServingModule(tf.Module):
    """The exported object: the model, its variables and the serving functions.

    It tracks the model's variables itself (the `variables` attributes below): a
    module that only holds the Keras model saves, but `saved_model_cli run` then fails
    with "Could not find variable".

    Args:
        model: a built SimCLR model: called on float32 [N, H, W, 3] images it returns
            a dict with at least `final_avg_pool` and `proj_head_output` (and
            `logits_sup` when it has a supervised head).
        image_size: side of the square images the model was trained on.
        crop: centre-crop before resizing in the serving signatures.
        max_pixels: most pixels of one image `serving_default` decodes (0: no limit).
    """

    # tf.Module derives these from its attributes on every access, and properties are
    # not saved; plain attributes with these names are what TF Hub's loaders (and
    # `saved_model_cli`) read, so they shadow the properties.
    variables = ()
    trainable_variables = ()
    non_trainable_variables = ()

    def __init__(self, model, image_size, crop, max_pixels=rules.SERVING_MAX_PIXELS):
        super().__init__(name="simclr_serving")
        self.model = model
        self.variables = _tf_variables(model.variables)
        self.trainable_variables = _tf_variables(model.trainable_variables)
        # The authors' SavedModel attribute (fine-tuning code written for their
        # exports reads it): the same variables, in the same order.
        self.trainable_variables_list = list(self.trainable_variables)
        self.non_trainable_variables = _tf_variables(model.non_trainable_variables)
        # The supervised head's L2 term is added by the training loop, not the model.
        self.regularization_losses = []
        self.image_size = tf.Variable(image_size, dtype=tf.int32, trainable=False,
                                      name="image_size")
        self.max_pixels = tf.Variable(max_pixels, dtype=tf.int64, trainable=False,
                                      name="max_pixels")
        self._size = int(image_size)
        self._crop = bool(crop)
        self._max_pixels = int(max_pixels)

    @tf.function
    def __call__(self, images, trainable=False):
        """The reference's interface: model features of preprocessed images.

        Args:
            images: float32 [N, H, W, 3] preprocessed RGB in [0, 1].
            trainable: run batch norm in training mode (Python bool).

        Returns:
            A dict of float32 tensors keyed with the reference's names, plus
            `default` = `final_avg_pool`.
        """
        with local_batch_norm(self.model):
            features = _call_model(self.model, images, training=trainable)
        outputs = {name: _as_float32(value) for name, value in features.items()}
        outputs["default"] = outputs[H]
        return outputs

    @tf.function(input_signature=[
        tf.TensorSpec(shape=None, dtype=tf.string, name=IMAGE_BYTES_INPUT)])
    def serve_image_bytes(self, image_bytes):
        """`serving_default`: encoded images [N] -> embedding, projection, logits."""
        image_bytes = asserted(image_bytes, tf.equal(tf.rank(image_bytes), 1), [
            f"{IMAGE_BYTES_INPUT}: expected a batch [N] of encoded JPEG/PNG/GIF/BMP "
            "strings; got shape", tf.shape(image_bytes)])
        # set_shape, not ensure_shape: grappler may evaluate an EnsureShape on a fed
        # scalar before the assertion runs, and its message names no fix.
        image_bytes.set_shape([None])
        images = decode_batch(image_bytes, self._preprocess,
                              [self._size, self._size, 3], self._max_pixels)
        return self._serving_outputs(images)

    @tf.function(input_signature=[
        tf.TensorSpec(shape=None, dtype=tf.float32, name=IMAGES_INPUT)])
    def serve_images(self, images):
        """`serving_images`: float32 images [N, H, W, 3] in [0, 1] -> the outputs."""
        images = check_images(images)
        images = tf.map_fn(
            self._preprocess, images,
            fn_output_signature=tf.TensorSpec([self._size, self._size, 3], tf.float32))
        return self._serving_outputs(images)

    def _preprocess(self, image):
        return augment.preprocess_for_eval(image, self._size, self._size,
                                           crop=self._crop)

    def _serving_outputs(self, images):
        with local_batch_norm(self.model):
            features = _call_model(self.model, images, training=False)
        outputs = dict(embedding=_as_float32(features[H]),
                       projection=_as_float32(features[Z]))
        if LOGITS in features:
            outputs["logits"] = _as_float32(features[LOGITS])
            outputs["probabilities"] = tf.nn.softmax(outputs["logits"], axis=-1)
        return outputs


def _call_model(model, images, training):
    """The model's outputs on `images`, an empty batch included.

    The model cannot run on no image: oneDNN's batch norm fails on a batch of zero
    ("input depth must be evenly divisible by filter depth"). In inference mode each
    image's outputs depend on that image alone, so an empty batch runs on one blank
    image and returns none of its rows: every output [0, ...], of the shape and dtype
    it has for any batch. In training mode (the hub interface's `trainable=True`) an
    empty batch has no batch-norm statistics: an InvalidArgument naming the input.
    """
    count = tf.shape(images)[0]
    if training:
        images = asserted(images, count > 0, [
            f"{IMAGES_INPUT}: an empty batch has no statistics for batch norm in "
            "training mode (trainable=True); send at least one image"])
        return model(images, training=True)
    shape = tf.shape(images)
    # An empty batch may also have no height or width: the blank image has >= 1 px.
    blank = tf.zeros(tf.concat([[1], tf.maximum(shape[1:3], 1), shape[3:]], 0),
                     images.dtype)
    batch = tf.cond(count > 0, lambda: images, lambda: blank)
    batch.set_shape(images.shape)
    return {name: value[:count] for name, value in
            model(batch, training=False).items()}


def _tf_variables(variables):
    """The tf.Variables behind Keras variables.

    A Keras 3 variable wraps a tf.Variable and saves as a copy of it; the graph's
    functions read the wrapped one, which TF1-style loaders (`saved_model_cli run`,
    TF Serving) restore only when it is itself part of the saved object graph.
    """
    return [getattr(v, "value", v) if not isinstance(v, tf.Variable) else v
            for v in variables]


@contextlib.contextmanager
def local_batch_norm(model):
    """Traces cross-replica batch norm as plain batch norm.

    An exported model runs on one replica, where both compute the same statistics;
    but synchronised BN outside a strategy goes through the default replica
    context's `all_reduce`, whose tf.custom_gradient is not saved: the loaded model
    would warn "unsaved custom gradients" and fail when asked for gradients.
    Runs at trace time only; the flag is restored afterwards.
    """
    layers = [layer for layer in model._flatten_layers(include_self=True)
              if isinstance(layer, keras.layers.BatchNormalization)
              and layer.synchronized]
    for layer in layers:
        layer.synchronized = False
    try:
        yield
    finally:
        for layer in layers:
            layer.synchronized = True


def _as_float32(value):
    return tf.cast(value, tf.float32) if value.dtype.is_floating else value


def check_image_size(image_size):
    if (not isinstance(image_size, int) or isinstance(image_size, bool)
            or image_size <= 0):
        raise ValueError(
            f"`image_size` must be a positive int. Received: image_size={image_size!r}")


def _build_if_needed(model, image_size):
    if not model.built:
        model(tf.zeros([1, image_size, image_size, 3]), training=False)


def create_serving_module(model, *, image_size, crop=None,
                          max_pixels=rules.SERVING_MAX_PIXELS):
    """The `ServingModule` of a model, with every function traced.

    Args:
        model: a SimCLR model (built here with `image_size` if it is not yet).
        image_size: positive int, side of the model's square input images.
        crop: centre-crop in the serving signatures; None follows the training
            recipe (`augment.eval_center_crop_enabled(image_size)`).
        max_pixels: int >= 0, most pixels (width x height) of one image
            `serving_default` decodes; 0: no limit.

    Returns:
        `(module, signatures)`, the arguments of `tf.saved_model.save`.
    """
    check_image_size(image_size)
    rules.check_serving_max_pixels(max_pixels, "max_pixels")
    if crop is None:
        crop = augment.eval_center_crop_enabled(image_size)
    _build_if_needed(model, image_size)
    module = ServingModule(model, image_size, crop, max_pixels)
    image_spec = tf.TensorSpec([None, None, None, 3], tf.float32, name=IMAGES_INPUT)
    # Both batch-norm modes of the hub interface, traced now so the SavedModel
    # holds them (a restored tf.function can only run what was traced).
    for trainable in (False, True):
        module.__call__.get_concrete_function(image_spec, trainable=trainable)
    signatures = {
        SERVING_DEFAULT: module.serve_image_bytes.get_concrete_function(),
        SERVING_IMAGES: module.serve_images.get_concrete_function(),
    }
    return module, signatures
