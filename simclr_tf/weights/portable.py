"""ONNX and LiteRT files of a SimCLR model, by Keras' own `Model.export`.

Both hold the model on images that are already preprocessed, at one size:

- input `images`: float32 [N, S, S, 3], RGB in [0, 1], S = the run's --image_size, N
  any batch (dynamic in both formats). Preprocessed as evaluation does
  (`augment.preprocess_for_eval`): above 32 px, the centre 87.5% cropped and resized
  back to S (bicubic); at 32 px or less, the image resized to S. The SavedModel's
  `serving_images` does this in its graph for images of any size; these files hold
  only ops every runtime has (LiteRT's builtin set lacks the bicubic resize), so the
  caller does it.
- outputs `embedding` (h) [N, C], `projection` (z) [N, d] and, when the model has a
  supervised head, `logits` [N, classes] and `probabilities` (their softmax): the
  SavedModel's outputs, float32, by name.

What a runtime does with bad input (docs/serving.md, "ONNX and LiteRT"): ONNX Runtime
refuses another size, channel count or dtype (INVALID_ARGUMENT naming the input's
dimension); LiteRT's interpreter refuses another channel count or dtype but runs other
sizes (it resizes the input tensor, and the global average pooling gives outputs of
the right shape): check the size before calling it. The file cannot prevent this: its
input's `shape_signature` is [-1, S, S, 3], but the signature runner resizes
non-strictly (a strict `resize_tensor_input` refuses, measured with ai-edge-litert
2.3). The folder's card says so (`simclr_tf.weights.cards`).

Conversion needs TensorFlow alone for LiteRT (`tf.lite.TFLiteConverter`, builtin ops
only: a conversion that would need TensorFlow's own ops fails here rather than
writing a file that ordinary runtimes cannot run) and tf2onnx for ONNX; running the
files needs onnxruntime and ai-edge-litert: `pip install -e '.[export]'`.
"""
import contextlib
import io
import os
import warnings

import keras
import numpy as np
import tensorflow as tf

from simclr_tf.models.outputs import H, LOGITS, Z
from simclr_tf.weights.serving import local_batch_norm

INPUT = "images"
EMBEDDING, PROJECTION, LOGITS_OUTPUT, PROBABILITIES = (
    "embedding", "projection", "logits", "probabilities")
ONNX_FILE, LITERT_FILE = "model.onnx", "model.tflite"
EXPORT_EXTRA = "pip install -e '.[export]'"
# The ONNX file format is one protocol buffer, which cannot exceed 2 GB.
ONNX_MAX_BYTES = 2 ** 31


def inference_model(model, image_size):
    """A functional Keras model: `images` [N, S, S, 3] -> the serving outputs.

    It shares `model`'s layers and variables (nothing is copied) and runs them in
    inference mode (batch norm on its moving statistics).
    """
    if not model.built:
        model(tf.zeros([1, image_size, image_size, 3]), training=False)
    images = keras.Input((image_size, image_size, 3), name=INPUT, dtype="float32")
    with local_batch_norm(model):
        features = model(images, training=False)
    outputs = {EMBEDDING: keras.ops.cast(features[H], "float32"),
               PROJECTION: keras.ops.cast(features[Z], "float32")}
    if LOGITS in features:
        logits = keras.ops.cast(features[LOGITS], "float32")
        outputs[LOGITS_OUTPUT] = logits
        outputs[PROBABILITIES] = keras.ops.softmax(logits, axis=-1)
    return keras.Model(images, outputs, name="simclr_inference")


def _signature(image_size):
    return [tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name=INPUT)]


def write_onnx(model, directory, image_size):
    """`directory/model.onnx` (`Model.export(format='onnx')`, through tf2onnx)."""
    require("onnx")
    size = sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in model.weights)
    if size >= ONNX_MAX_BYTES:
        raise ValueError(
            f"The model's weights take {size / 2 ** 30:.1f} GiB, more than an ONNX "
            "file holds (2 GiB, one protocol buffer); export saved_model or litert.")
    path = os.path.join(directory, ONNX_FILE)
    with _quiet():
        inference_model(model, image_size).export(
            path, format="onnx", input_signature=_signature(image_size), verbose=False)
    return path


def write_litert(model, directory, image_size):
    """`directory/model.tflite` (`Model.export(format='litert')`, builtin ops only)."""
    path = os.path.join(directory, LITERT_FILE)
    with _quiet():
        inference_model(model, image_size).export(
            path, format="litert", input_signature=_signature(image_size), verbose=False,
            target_spec={"supported_ops": [tf.lite.OpsSet.TFLITE_BUILTINS]})
    return path


def require(fmt):
    """Raises ImportError naming what `fmt`'s export needs and the install line."""
    needed = {"onnx": ("tf2onnx", "onnx")}.get(fmt, ())
    for module in needed:
        try:
            __import__(module)
        except ImportError as error:
            raise ImportError(
                f"{fmt} needs {module}, an optional extra "
                f"({type(error).__name__}: {error}); install the export extra with "
                f"`{EXPORT_EXTRA}` (onnx, tf2onnx, onnxruntime, ai-edge-litert).") from None


@contextlib.contextmanager
def _quiet():
    """tf2onnx and the TFLite converter print their progress on stdout; a run's
    output is its own lines (and Keras' tf2onnx patch warns of numpy's np.object).
    Errors still propagate."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield
