"""SavedModel export for serving: TF Serving, `tf.saved_model.load`, Keras, colabs.

`export_for_step(model, model_dir, step, image_size=...)` writes
`model_dir/saved_model/<step>/` and keeps the newest `keep_hub_module_max` exports.
Each export is one SavedModel with:

- signature `serving_default`: input `image_bytes`, string [N], encoded JPEG / PNG /
  GIF / BMP images (TF Serving's REST API accepts them as `{"b64": ...}` because the
  name ends in `_bytes`). They are decoded to RGB and eval-preprocessed in the graph
  (`augment.preprocess_for_eval`: bicubic resize to `image_size`, with the centre crop
  only above 32 px, `augment.eval_center_crop_enabled`).
- signature `serving_images`: input `images`, float32 [N, H, W, 3], RGB in [0, 1] of
  any size, preprocessed in the graph the same way.
  Both return `embedding` (h, the pooled encoder output downstream tasks use),
  `projection` (z) and, when the model has a supervised head, `logits` and
  `probabilities` (softmax of the logits); all float32.
- the reference's hub interface, so the authors' colabs work unchanged:
  `loaded(images, trainable=False)` on float32 [N, H, W, 3] images that are already
  preprocessed returns the model's feature dict (`initial_conv`, `initial_max_pool`,
  `block_group1`..`block_group4`, `final_avg_pool`, `proj_head_input`,
  `proj_head_output`, `supervised_head_input`, `logits_sup` when present) plus
  `default` (= `final_avg_pool`, as in the authors' hub modules). `trainable=True` runs
  batch norm in training mode (statistics of the batch on each replica, moving
  averages updated), as the authors' hub modules do. Gradients flow to the inputs and
  to `loaded.trainable_variables`.
- attributes `variables`, `trainable_variables`, `regularization_losses` (the TF Hub
  convention) and `image_size` (an int32 scalar variable).

Bad serving input fails with an InvalidArgument error that names the input:
undecodable bytes, a batch of the wrong rank, images without 3 channels or with
values outside [0, 1] (uint8 pixels sent unscaled, say). Wrong dtypes are rejected by
the signature itself (TF Serving and `ConcreteFunction` check the dtype before the
graph runs).

Writes are atomic on POSIX file systems: the SavedModel goes to a hidden temporary
sibling directory that is renamed into place only once complete, so a crash or kill
mid-export never replaces the last good export. (On object stores such as GCS a
directory rename is a copy, so there it is merely "never partially visible under the
final name".)

Example:
```python
path = export_for_step(model, "/tmp/run", step=1000, image_size=224)
loaded = tf.saved_model.load(path)
h = loaded.signatures["serving_default"](image_bytes=tf.constant([jpeg]))["embedding"]
features = loaded(images, trainable=False)["final_avg_pool"]  # the authors' colabs
```
"""
import contextlib
import os
import re
import uuid

import keras
import tensorflow as tf

from simclr_tf.data import augment
from simclr_tf.models.outputs import H, LOGITS, Z

SAVED_MODEL_DIRNAME = "saved_model"
SERVING_DEFAULT = "serving_default"
SERVING_IMAGES = "serving_images"
IMAGE_BYTES_INPUT = "image_bytes"
IMAGES_INPUT = "images"
SERVING_OUTPUTS = ("embedding", "projection", "logits", "probabilities")

# Values this far outside [0, 1] are accepted (then clipped) by `serving_images`:
# images resized bicubically by the client overshoot a little. Anything beyond is a
# client bug, most often uint8 pixels sent without dividing by 255.
IMAGE_VALUE_TOLERANCE = 0.05

_IMAGES_CONTRACT = "images: expected float32 [N, H, W, 3] RGB values in [0, 1]"
_STEP_DIR = re.compile(r"^\d+$")
# Hidden siblings: "<name>.tmp-<id>" while writing, "<name>.old-<id>" while replacing.
_SCRATCH_DIR = re.compile(r"^\..+\.(tmp|old)-[0-9a-f]+$")

# Leading bytes of the formats tf.io.decode_image reads.
_MAGIC_NUMBERS = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a", b"BM")


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
    """

    # tf.Module derives these from its attributes on every access, and properties are
    # not saved; plain attributes with these names are what TF Hub's loaders (and
    # `saved_model_cli`) read, so they shadow the properties.
    variables = ()
    trainable_variables = ()
    non_trainable_variables = ()

    def __init__(self, model, image_size, crop):
        super().__init__(name="simclr_serving")
        self.model = model
        self.variables = _tf_variables(model.variables)
        self.trainable_variables = _tf_variables(model.trainable_variables)
        self.non_trainable_variables = _tf_variables(model.non_trainable_variables)
        # The supervised head's L2 term is added by the training loop, not the model.
        self.regularization_losses = []
        self.image_size = tf.Variable(image_size, dtype=tf.int32, trainable=False,
                                      name="image_size")
        self._size = int(image_size)
        self._crop = bool(crop)

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
        with _local_batch_norm(self.model):
            features = self.model(images, training=trainable)
        outputs = {name: _as_float32(value) for name, value in features.items()}
        outputs["default"] = outputs[H]
        return outputs

    @tf.function(input_signature=[
        tf.TensorSpec(shape=None, dtype=tf.string, name=IMAGE_BYTES_INPUT)])
    def serve_image_bytes(self, image_bytes):
        """`serving_default`: encoded images [N] -> embedding, projection, logits."""
        image_bytes = _checked(image_bytes, tf.equal(tf.rank(image_bytes), 1), [
            f"{IMAGE_BYTES_INPUT}: expected a batch [N] of encoded JPEG/PNG/GIF/BMP "
            "strings; got shape", tf.shape(image_bytes)])
        # set_shape, not ensure_shape: grappler may evaluate an EnsureShape on a fed
        # scalar before the assertion runs, and its message names no fix.
        image_bytes.set_shape([None])
        indices = tf.range(tf.shape(image_bytes)[0])
        images = tf.map_fn(
            lambda args: self._preprocess(_decode_image(*args)), (image_bytes, indices),
            fn_output_signature=tf.TensorSpec([self._size, self._size, 3], tf.float32))
        return self._serving_outputs(images)

    @tf.function(input_signature=[
        tf.TensorSpec(shape=None, dtype=tf.float32, name=IMAGES_INPUT)])
    def serve_images(self, images):
        """`serving_images`: float32 images [N, H, W, 3] in [0, 1] -> the outputs."""
        images = _check_images(images)
        images = tf.map_fn(
            self._preprocess, images,
            fn_output_signature=tf.TensorSpec([self._size, self._size, 3], tf.float32))
        return self._serving_outputs(images)

    def _preprocess(self, image):
        return augment.preprocess_for_eval(image, self._size, self._size,
                                           crop=self._crop)

    def _serving_outputs(self, images):
        with _local_batch_norm(self.model):
            features = self.model(images, training=False)
        outputs = dict(embedding=_as_float32(features[H]),
                       projection=_as_float32(features[Z]))
        if LOGITS in features:
            outputs["logits"] = _as_float32(features[LOGITS])
            outputs["probabilities"] = tf.nn.softmax(outputs["logits"], axis=-1)
        return outputs


def _tf_variables(variables):
    """The tf.Variables behind Keras variables.

    A Keras 3 variable wraps a tf.Variable and saves as a copy of it; the graph's
    functions read the wrapped one, which TF1-style loaders (`saved_model_cli run`,
    TF Serving) restore only when it is itself part of the saved object graph.
    """
    return [getattr(v, "value", v) if not isinstance(v, tf.Variable) else v
            for v in variables]


@contextlib.contextmanager
def _local_batch_norm(model):
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


def _checked(tensor, condition, message):
    """`tensor`, available only after asserting `condition` (fails with `message`).

    The explicit dependency makes the assertion fail first: otherwise a later op on
    the bad input may fail before it, with a message that explains nothing.
    """
    assertion = tf.debugging.Assert(condition, message, summarize=8)
    with tf.control_dependencies([assertion]):
        return tf.identity(tensor)


def _decode_image(encoded, index):
    """Decodes one encoded image to float32 RGB in [0, 1], naming bad input."""
    known = tf.reduce_any([tf.strings.substr(encoded, 0, len(magic)) == magic
                           for magic in _MAGIC_NUMBERS])
    encoded = _checked(encoded, known, [
        f"{IMAGE_BYTES_INPUT}: could not decode image", index,
        "of", tf.strings.length(encoded), "bytes: not JPEG, PNG, GIF or BMP data "
        "(send the encoded file's raw bytes; over REST as {\"b64\": ...})"])
    # A known header with a corrupt body still fails inside the decoder, with the
    # decoder's own message; the op name then says which input it was.
    image = tf.io.decode_image(encoded, channels=3, dtype=tf.float32,
                               expand_animations=False,
                               name=f"{IMAGE_BYTES_INPUT}_decode_image")
    return image


def _check_images(images):
    """Asserts float32 [N, H, W, 3] in [0, 1] (within the tolerance), then clips."""
    # Pad the shape so that the channel test never indexes past a too-short shape.
    shape = tf.shape(images)
    padded = tf.concat([shape, tf.zeros([4], tf.int32)], axis=0)
    images = _checked(
        images, tf.logical_and(tf.equal(tf.size(shape), 4), tf.equal(padded[3], 3)),
        [_IMAGES_CONTRACT + "; got shape", shape])
    tolerance = IMAGE_VALUE_TOLERANCE
    in_range = tf.reduce_all(tf.logical_and(images >= -tolerance,
                                            images <= 1.0 + tolerance))
    images = _checked(images, in_range, [
        _IMAGES_CONTRACT + " (uint8 pixels must be divided by 255; NaN/Inf are "
        "rejected); got min", tf.reduce_min(images), "max", tf.reduce_max(images)])
    images.set_shape([None, None, None, 3])
    return tf.clip_by_value(images, 0.0, 1.0)


def _check_image_size(image_size):
    if (not isinstance(image_size, int) or isinstance(image_size, bool)
            or image_size <= 0):
        raise ValueError(
            f"`image_size` must be a positive int. Received: image_size={image_size!r}")


def _build_if_needed(model, image_size):
    if not model.built:
        model(tf.zeros([1, image_size, image_size, 3]), training=False)


def create_serving_module(model, *, image_size, crop=None):
    """The `ServingModule` of a model, with every function traced.

    Args:
        model: a SimCLR model (built here with `image_size` if it is not yet).
        image_size: positive int, side of the model's square input images.
        crop: centre-crop in the serving signatures; None follows the training
            recipe (`augment.eval_center_crop_enabled(image_size)`).

    Returns:
        `(module, signatures)`, the arguments of `tf.saved_model.save`.
    """
    _check_image_size(image_size)
    if crop is None:
        crop = augment.eval_center_crop_enabled(image_size)
    _build_if_needed(model, image_size)
    module = ServingModule(model, image_size, crop)
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


def _save(module, path, signatures):
    # Keras' batch norm and our layers use no tf.custom_gradient, but if one ever
    # does, its gradient is saved so loading prints no "unsaved custom gradients".
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=True)
    tf.saved_model.save(module, path, signatures=signatures, options=options)


def _scratch_path(path, kind):
    parent, name = os.path.split(path.rstrip("/"))
    return os.path.join(parent, f".{name}.{kind}-{uuid.uuid4().hex[:12]}")


def export_saved_model(model, export_dir, *, image_size, crop=None):
    """Writes the serving SavedModel of `model` to `export_dir`, atomically.

    The SavedModel is written to a hidden sibling directory and renamed to
    `export_dir` once complete; an existing `export_dir` is replaced only then. If
    writing fails, the temporary directory is removed and the error re-raised.

    Args:
        model: a SimCLR model (see `ServingModule`), also one built under a
            MirroredStrategy; call this inside or outside its `scope()`.
        export_dir: the SavedModel directory to (re)place.
        image_size: positive int, side of the model's square input images.
        crop: centre-crop in the serving signatures; None: the training recipe's rule.

    Returns:
        `export_dir`.

    Raises:
        ValueError: bad `image_size` or empty `export_dir`.
    """
    if not export_dir or not str(export_dir).strip("/"):
        raise ValueError(f"`export_dir` must be a directory path. "
                         f"Received: export_dir={export_dir!r}")
    export_dir = str(export_dir).rstrip("/")
    module, signatures = create_serving_module(model, image_size=image_size, crop=crop)
    parent = os.path.dirname(export_dir)
    if parent:
        tf.io.gfile.makedirs(parent)
    tmp_dir = _scratch_path(export_dir, "tmp")
    try:
        _save(module, tmp_dir, signatures)
    except BaseException:
        if tf.io.gfile.exists(tmp_dir):
            tf.io.gfile.rmtree(tmp_dir)
        raise
    old_dir = None
    if tf.io.gfile.exists(export_dir):
        old_dir = _scratch_path(export_dir, "old")
        tf.io.gfile.rename(export_dir, old_dir)
    tf.io.gfile.rename(tmp_dir, export_dir)
    if old_dir is not None:
        tf.io.gfile.rmtree(old_dir)
    return export_dir


def exported_steps(model_dir):
    """Steps of the complete exports under `model_dir/saved_model/`, ascending."""
    base = os.path.join(model_dir, SAVED_MODEL_DIRNAME)
    if not tf.io.gfile.isdir(base):
        return []
    steps = []
    for name in tf.io.gfile.listdir(base):
        name = name.rstrip("/")
        if _STEP_DIR.match(name) and tf.io.gfile.exists(
                os.path.join(base, name, "saved_model.pb")):
            steps.append(int(name))
    return sorted(steps)


def latest_export(model_dir):
    """Path of the newest complete export under `model_dir/saved_model/`, or None."""
    steps = exported_steps(model_dir)
    if not steps:
        return None
    return os.path.join(model_dir, SAVED_MODEL_DIRNAME, str(steps[-1]))


def export_for_step(model, model_dir, step, *, image_size, keep_hub_module_max=1,
                    crop=None):
    """Exports to `model_dir/saved_model/<step>/`, keeping the newest exports.

    After a successful export, older exports beyond `keep_hub_module_max` are
    deleted (the one just written is always kept), as are scratch directories that
    an export killed mid-write left behind. Only one process may export into a
    `model_dir` at a time (the chief).

    Args:
        model: a SimCLR model (see `ServingModule`).
        model_dir: the run's directory.
        step: non-negative int, the training step of the weights.
        image_size: positive int, side of the model's square input images.
        keep_hub_module_max: exports kept, >= 0; 0 keeps all (the reference's flag).
        crop: centre-crop in the serving signatures; None: the training recipe's rule.

    Returns:
        The export's path.

    Raises:
        ValueError: bad `step`, `keep_hub_module_max` or `image_size`.
    """
    step = _as_int(step, "step")
    if step < 0:
        raise ValueError(f"`step` must be >= 0. Received: step={step!r}")
    keep = keep_hub_module_max
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
        raise ValueError("`keep_hub_module_max` must be an int >= 0 (0 keeps all). "
                         f"Received: keep_hub_module_max={keep_hub_module_max!r}")
    base = os.path.join(model_dir, SAVED_MODEL_DIRNAME)
    path = export_saved_model(model, os.path.join(base, str(step)),
                              image_size=image_size, crop=crop)
    for name in tf.io.gfile.listdir(base):
        name = name.rstrip("/")
        if _SCRATCH_DIR.match(name):
            tf.io.gfile.rmtree(os.path.join(base, name))
    if keep:
        older = [s for s in exported_steps(model_dir) if s != step]
        for old_step in older[:len(older) - (keep - 1)]:
            tf.io.gfile.rmtree(os.path.join(base, str(old_step)))
    return path


def _as_int(value, name):
    # Accepts Python and numpy ints and scalar integer tensors (optimizer.iterations).
    if isinstance(value, bool):
        raise ValueError(f"`{name}` must be an int. Received: {name}={value!r}")
    if hasattr(value, "numpy"):
        value = value.numpy()
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"`{name}` must be an int. Received: {name}={value!r}") from None
    if as_int != value:
        raise ValueError(f"`{name}` must be an int. Received: {name}={value!r}")
    return as_int


__all__ = [
    "IMAGE_BYTES_INPUT", "IMAGES_INPUT", "IMAGE_VALUE_TOLERANCE",
    "SAVED_MODEL_DIRNAME", "SERVING_DEFAULT", "SERVING_IMAGES", "SERVING_OUTPUTS",
    "ServingModule", "create_serving_module", "export_for_step", "export_saved_model",
    "exported_steps", "latest_export",
]
