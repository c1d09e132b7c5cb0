"""SavedModel export for serving: TF Serving, `tf.saved_model.load`, Keras, colabs.

`export_for_step(model, model_dir, step, image_size=...)` writes
`model_dir/saved_model/<step>/` and keeps the newest `keep_hub_module_max` exports.
Each export is one SavedModel with:

- signature `serving_default`: input `image_bytes`, string [N], encoded JPEG / PNG /
  GIF / BMP images (TF Serving's REST API accepts them as `{"b64": ...}` because the
  name ends in `_bytes`). They are decoded to RGB and eval-preprocessed in the graph
  (`augment.preprocess_for_eval`: bicubic resize to `image_size`, with the centre crop
  only above 32 px, `augment.eval_center_crop_enabled`). An image with more than
  `max_pixels` pixels (width x height as its header declares them; default
  `rules.SERVING_MAX_PIXELS`, 40 MP) is rejected before it is decoded: a few bytes
  can declare a 12000 x 12000 PNG, which took 3 s and 2.5 GB to serve here.
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
  convention), `image_size` (an int32 scalar variable) and `max_pixels` (int64; 0:
  no limit).

Bad serving input fails with an InvalidArgument error that names the input: a batch
of the wrong rank, images without 3 channels or with values outside [0, 1] (uint8
pixels sent unscaled, say), and for `image_bytes` the first bad image's index in the
batch and why: not JPEG/PNG/GIF/BMP data, an unreadable header, over `max_pixels`, or
a corrupt or truncated body. Wrong dtypes are rejected by the signature itself (TF
Serving and `ConcreteFunction` check the dtype before the graph runs).

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

from simclr_tf import rules
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

# The formats tf.io.decode_image reads, by their leading bytes.
_FORMATS = (("JPEG", (b"\xff\xd8\xff",)), ("PNG", (b"\x89PNG\r\n\x1a\n",)),
            ("GIF", (b"GIF87a", b"GIF89a")), ("BMP", (b"BM",)))
# No quotes: the error message shows them escaped.
_NOT_AN_IMAGE = ("not JPEG, PNG, GIF or BMP data (send the raw bytes of the encoded "
                 "file; over REST base64 in a b64 object)")


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
        images = decode_batch(image_bytes, self._preprocess,
                              [self._size, self._size, 3], self._max_pixels)
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


def decode_batch(image_bytes, preprocess, shape, max_pixels):
    """Decodes and preprocesses a batch of encoded images; names the first bad one.

    Each image is checked from its header (format, then width x height against
    `max_pixels`) before it is decoded. A graph cannot catch an op's error, but
    tf.data can drop the element that raised it: the images go through a dataset
    whose failures are dropped, and a missing index is then explained, from that
    image's header alone, by one InvalidArgument error naming it.

    Args:
        image_bytes: string [N], encoded images.
        preprocess: float32 RGB image in [0, 1] [h, w, 3] -> float32 `shape`.
        shape: static shape of a preprocessed image.
        max_pixels: most pixels of one image; 0: no limit.

    Returns:
        float32 [N, *shape].
    """
    count = tf.shape(image_bytes, out_type=tf.int64)[0]

    def decode(index, encoded):
        kind = _image_format(encoded)
        encoded = _checked(encoded, kind >= 0, ["unknown format"])
        if max_pixels:
            height, width = tf.unstack(_header_size(encoded, kind))
            encoded = _checked(encoded, height * width <= max_pixels, ["too large"])
        image = tf.io.decode_image(encoded, channels=3, dtype=tf.float32,
                                   expand_animations=False)
        return index, preprocess(image)

    end = (tf.constant(-1, tf.int64), tf.zeros(shape, tf.float32))
    decoded = tf.data.Dataset.from_tensor_slices((tf.range(count), image_bytes)).map(
        decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # The end marker makes the batch non-empty even when every image failed.
    indices, images = decoded.ignore_errors().concatenate(
        tf.data.Dataset.from_tensors(end)).batch(count + 1).get_single_element()
    indices, images = indices[:-1], images[:-1]
    complete = tf.equal(tf.size(indices, out_type=tf.int64), count)

    def explain():
        # In order, the indices kept; the first that differs from its position is
        # the first image dropped.
        gaps = tf.where(tf.not_equal(indices, tf.range(tf.size(indices,
                                                               out_type=tf.int64))))
        first = tf.concat([gaps[:, 0], tf.size(indices, out_type=tf.int64)[None]], 0)[0]
        encoded = tf.gather(image_bytes, first)
        assertion = tf.debugging.Assert(complete, [
            f"{IMAGE_BYTES_INPUT}: could not decode image", first, "of",
            tf.strings.length(encoded), "bytes:", _problem(encoded, max_pixels)])
        with tf.control_dependencies([assertion]):
            return tf.identity(complete)

    checked = tf.cond(complete, lambda: complete, explain)
    with tf.control_dependencies([checked]):
        images = tf.identity(images)
    images.set_shape([None, *shape])
    return images


def _image_format(encoded):
    """Index in `_FORMATS` of the format `encoded` starts like, or -1."""
    kind = tf.constant(-1)
    for index, (_, magics) in reversed(list(enumerate(_FORMATS))):
        matches = tf.reduce_any([tf.strings.substr(encoded, 0, len(magic)) == magic
                                 for magic in magics])
        kind = tf.where(matches, index, kind)
    return kind


def _header_size(encoded, kind):
    """int64 [height, width] as the header of `encoded` (of format `kind`) declares.

    Reads no more than the header: PNG's IHDR, GIF's logical screen, BMP's info
    header (as tf.io.decode_bmp reads it; a negative height is top-down) and,
    through libjpeg, JPEG's frame header. Fails where the header cannot be read.
    """
    head = tf.strings.substr(tf.strings.join([tf.strings.substr(encoded, 0, 32),
                                              b"\0" * 32]), 0, 32)
    head = tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)

    def number(start, length, big_endian):
        places = range(length) if big_endian else reversed(range(length))
        value = tf.constant(0, tf.int64)
        for place in places:
            value = value * 256 + head[start + place]
        return value

    def signed32(value):
        return tf.where(value >= 2 ** 31, value - 2 ** 32, value)

    def jpeg():
        return tf.cast(tf.image.extract_jpeg_shape(encoded)[:2], tf.int64)

    def png():
        has_ihdr = tf.equal(tf.strings.substr(encoded, 12, 4), b"IHDR")
        with tf.control_dependencies([tf.debugging.Assert(has_ihdr, ["no IHDR"])]):
            return tf.stack([number(20, 4, True), number(16, 4, True)])

    def gif():
        return tf.stack([number(8, 2, False), number(6, 2, False)])

    def bmp():
        return tf.abs(tf.stack([signed32(number(22, 4, False)),
                                signed32(number(18, 4, False))]))

    return tf.switch_case(kind, [jpeg, png, gif, bmp])


def _problem(encoded, max_pixels):
    """Why `encoded` failed, from its header alone (a string scalar)."""
    kind = _image_format(encoded)

    def header_size(data):
        return _header_size(_checked(data, kind >= 0, ["unknown format"]), kind)

    # The header is read inside a dataset, which turns a header too broken to read
    # into the [-1, -1] that follows it.
    size = tf.data.Dataset.from_tensors(encoded).map(header_size).ignore_errors(
        ).concatenate(tf.data.Dataset.from_tensors(tf.constant([-1, -1], tf.int64))
                      ).take(1)
    height, width = tf.unstack(size.get_single_element())
    name = tf.gather([name for name, _ in _FORMATS], tf.maximum(kind, 0))
    cases = [(kind < 0, lambda: tf.constant(_NOT_AN_IMAGE)),
             (height < 0, lambda: tf.strings.join(["unreadable ", name, " header"]))]
    if max_pixels:
        cases.append((height * width > max_pixels, lambda: tf.strings.format(
            "{} x {} = {} pixels (width x height), over the limit of "
            f"{max_pixels} set at export (max_pixels); send a smaller image",
            (width, height, width * height))))
    return tf.case(cases, default=lambda: tf.strings.join(["corrupt or truncated ", name,
                                                           " data"]))


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
    _check_image_size(image_size)
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


def _save(module, path, signatures):
    # Keras' batch norm and our layers use no tf.custom_gradient, but if one ever
    # does, its gradient is saved so loading prints no "unsaved custom gradients".
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=True)
    tf.saved_model.save(module, path, signatures=signatures, options=options)


def _scratch_path(path, kind):
    parent, name = os.path.split(path.rstrip("/"))
    return os.path.join(parent, f".{name}.{kind}-{uuid.uuid4().hex[:12]}")


def export_saved_model(model, export_dir, *, image_size, crop=None,
                       max_pixels=rules.SERVING_MAX_PIXELS):
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
        max_pixels: most pixels of one served image (see `create_serving_module`).

    Returns:
        `export_dir`.

    Raises:
        ValueError: bad `image_size` or `max_pixels`, or empty `export_dir`.
    """
    if not export_dir or not str(export_dir).strip("/"):
        raise ValueError(f"`export_dir` must be a directory path. "
                         f"Received: export_dir={export_dir!r}")
    export_dir = str(export_dir).rstrip("/")
    module, signatures = create_serving_module(model, image_size=image_size, crop=crop,
                                               max_pixels=max_pixels)
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
                    crop=None, max_pixels=rules.SERVING_MAX_PIXELS):
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
        max_pixels: most pixels of one served image (see `create_serving_module`).

    Returns:
        The export's path.

    Raises:
        ValueError: bad `step`, `keep_hub_module_max`, `image_size` or `max_pixels`.
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
                              image_size=image_size, crop=crop, max_pixels=max_pixels)
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
    "ServingModule", "create_serving_module", "decode_batch", "export_for_step",
    "export_saved_model",
    "exported_steps", "latest_export",
]
