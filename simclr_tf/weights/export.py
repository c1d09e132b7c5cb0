"""Exports: the SavedModel for serving (TF Serving, `tf.saved_model.load`, Keras,
colabs), and ONNX, LiteRT and keras-hub beside it (`FORMATS`, --export_format).

`export_for_step(model, model_dir, step, image_size=..., fmt="saved_model")` writes
`model_dir/<format>/<step>/` (`simclr_tf.weights.portable` writes the ONNX and LiteRT
files, `simclr_tf.weights.hub_preset` the keras-hub preset; below, the SavedModel),
each with its card, `README.md` (`simclr_tf.weights.cards`: inputs, preprocessing,
outputs, step, parity, the run's recipe and results of that step), and keeps the
newest `keep_hub_module_max` exports of that format;
it never deletes an export newer than the one written (an export of an earlier
checkpoint, because the newest one is unreadable, leaves the newer export) nor one
its caller names as the only copy of its step's weights (`only_copies`).
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
  `probabilities` (softmax of the logits); all float32. An empty batch returns empty
  outputs of the same shapes ([0, dim]).
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
of the wrong rank, images without 3 channels, of zero height or width, or with values
outside [0, 1] (uint8 pixels sent unscaled, say), and for `image_bytes` the first bad
image's index in the batch and why: not JPEG/PNG/GIF/BMP data, an unreadable header, a
zero-sized image, over `max_pixels`, or a corrupt or truncated body. (The hub
interface with `trainable=True` refuses an empty batch: batch norm has no statistics
of it.) Wrong dtypes are rejected by the signature itself (TF
Serving and `ConcreteFunction` check the dtype before the graph runs).

Writes are atomic on POSIX file systems: the SavedModel (or another format's files)
and its card go to a hidden temporary
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
import dataclasses
import os
import re
import uuid

import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.models.simclr import float32_twin
from simclr_tf.weights import cards
# Re-exported: `export` is the public face of the SavedModel export.
from simclr_tf.weights.serving import (  # noqa: F401
    SERVING_DEFAULT, SERVING_IMAGES, SERVING_OUTPUTS, ServingModule, check_image_size,
    create_serving_module)
from simclr_tf.weights.serving_input import (  # noqa: F401
    IMAGE_BYTES_INPUT, IMAGE_VALUE_TOLERANCE, IMAGES_INPUT, decode_batch)

SAVED_MODEL_DIRNAME = "saved_model"
_STEP_DIR = re.compile(r"^\d+$")
# Hidden siblings: "<name>.tmp-<id>" while writing, "<name>.old-<id>" while replacing.
_SCRATCH_DIR = re.compile(r"^\..+\.(tmp|old)-[0-9a-f]+$")


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """A format of --export_format: its exports are model_dir/<dirname>/<step>/, each
    complete once it holds `marker` (written atomically: a folder renamed into place)."""
    dirname: str
    marker: str


FORMATS = {
    "saved_model": ExportFormat(SAVED_MODEL_DIRNAME, "saved_model.pb"),
    "onnx": ExportFormat("onnx", "model.onnx"),  # simclr_tf.weights.portable
    "litert": ExportFormat("litert", "model.tflite"),
    "keras_hub": ExportFormat("keras_hub", "model.weights.h5"),  # weights.hub_preset
}
assert tuple(FORMATS) == rules.EXPORT_FORMATS


def _save(module, path, signatures):
    # Keras' batch norm and our layers use no tf.custom_gradient, but if one ever
    # does, its gradient is saved so loading prints no "unsaved custom gradients".
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=True)
    tf.saved_model.save(module, path, signatures=signatures, options=options)


def _scratch_path(path, kind):
    parent, name = os.path.split(path.rstrip("/"))
    return os.path.join(parent, f".{name}.{kind}-{uuid.uuid4().hex[:12]}")


def _write_atomically(export_dir, write, card=""):
    """`write(tmp_dir)` and the `card` (README.md) into a hidden sibling, renamed to
    `export_dir` once complete; an existing `export_dir` is replaced only then. If
    writing fails, the temporary directory is removed and the error re-raised."""
    export_dir = _checked_dir(export_dir)
    parent = os.path.dirname(export_dir)
    if parent:
        tf.io.gfile.makedirs(parent)
    tmp_dir = _scratch_path(export_dir, "tmp")
    try:
        write(tmp_dir)
        if card:
            cards.write_card(tmp_dir, card)
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


def _checked_dir(export_dir):
    if not export_dir or not str(export_dir).strip("/"):
        raise ValueError(f"`export_dir` must be a directory path. "
                         f"Received: export_dir={export_dir!r}")
    return str(export_dir).rstrip("/")


def export_saved_model(model, export_dir, *, image_size, crop=None,
                       max_pixels=rules.SERVING_MAX_PIXELS, card=""):
    """Writes the serving SavedModel of `model` (and `card`, its README.md) to
    `export_dir`, atomically.

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
        card: the folder's README.md (`cards.export_card`); "" writes none.

    Returns:
        `export_dir`.

    Raises:
        ValueError: bad `image_size` or `max_pixels`, or empty `export_dir`.
    """
    export_dir = _checked_dir(export_dir)
    module, signatures = create_serving_module(model, image_size=image_size, crop=crop,
                                               max_pixels=max_pixels)
    return _write_atomically(export_dir, lambda tmp: _save(module, tmp, signatures),
                             card)


def export_format(model, export_dir, fmt, *, image_size, card=""):
    """Writes `model` in format `fmt` ('onnx', 'litert', 'keras_hub') and `card` (the
    folder's README.md; "" writes none) to `export_dir`, atomically (see
    `export_saved_model`)."""
    # Imported here: the ONNX converter and keras-hub are optional extras.
    # pylint: disable=import-outside-toplevel
    if fmt == "keras_hub":
        from simclr_tf.weights import hub_preset

        def write(tmp):
            hub_preset.write_preset(model, tmp, image_size)
    else:
        from simclr_tf.weights import portable
        writer = {"onnx": portable.write_onnx, "litert": portable.write_litert}[fmt]

        def write(tmp):
            tf.io.gfile.makedirs(tmp)
            writer(model, tmp, image_size)
    return _write_atomically(export_dir, write, card)


def exported_steps(model_dir, fmt="saved_model"):
    """Steps of the complete exports of format `fmt` in model_dir, ascending."""
    kind = FORMATS[fmt]
    base = os.path.join(model_dir, kind.dirname)
    if not tf.io.gfile.isdir(base):
        return []
    steps = []
    for name in tf.io.gfile.listdir(base):
        name = name.rstrip("/")
        if _STEP_DIR.match(name) and tf.io.gfile.exists(
                os.path.join(base, name, kind.marker)):
            steps.append(int(name))
    return sorted(steps)


def latest_export(model_dir, fmt="saved_model"):
    """Path of the newest complete export of format `fmt` in model_dir, or None."""
    steps = exported_steps(model_dir, fmt)
    if not steps:
        return None
    return os.path.join(model_dir, FORMATS[fmt].dirname, str(steps[-1]))


def export_for_step(model, model_dir, step, *, image_size, fmt="saved_model",
                    keep_hub_module_max=1, crop=None, max_pixels=rules.SERVING_MAX_PIXELS,
                    only_copies=(), run=None):
    """Exports to `model_dir/<format>/<step>/` with its card (README.md,
    `cards.export_card`), keeping the newest exports.

    After a successful export, exports of earlier steps beyond `keep_hub_module_max`
    are deleted (`rotation`), as are scratch directories that an export killed
    mid-write left behind. The export just written, every newer one and those of
    `only_copies` are always kept. Only one process may export into a `model_dir`
    at a time (the chief). Each format keeps its own exports.

    Args:
        model: a SimCLR model (see `ServingModule`).
        model_dir: the run's directory.
        step: non-negative int, the training step of the weights.
        image_size: positive int, side of the model's square input images.
        fmt: a key of `FORMATS` (`rules.EXPORT_FORMATS`).
        keep_hub_module_max: exports kept, >= 0; 0 keeps all (the reference's flag).
        crop: centre-crop in the serving signatures; None: the training recipe's rule.
        max_pixels: most pixels of one served image (see `create_serving_module`).
        only_copies: steps whose export is the only copy of their weights (no
            intact checkpoint holds them; `modes.export.export_model` knows): kept.
        run: the run's record for the card (`cards.RunRecord`: flags.json and
            result.json); None: the card names no recipe and no results.

    Returns:
        The export's path.

    Raises:
        ValueError: bad `step`, `keep_hub_module_max`, `image_size`, `max_pixels` or
            `fmt`.
    """
    step = _as_int(step, "step")
    if step < 0:
        raise ValueError(f"`step` must be >= 0. Received: step={step!r}")
    keep = keep_hub_module_max
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
        raise ValueError("`keep_hub_module_max` must be an int >= 0 (0 keeps all). "
                         f"Received: keep_hub_module_max={keep_hub_module_max!r}")
    if fmt not in FORMATS:
        raise ValueError(f"`fmt` must be one of {', '.join(FORMATS)}. Received: fmt={fmt!r}")
    # Checked before the card is made of them (the writers check them again).
    check_image_size(image_size)
    rules.check_serving_max_pixels(max_pixels, "max_pixels")
    base = os.path.join(model_dir, FORMATS[fmt].dirname)
    target = os.path.join(base, str(step))
    if model is not None:  # a mixed-precision model is exported computing in float32
        model = float32_twin(model, image_size)
    card = cards.export_card(fmt, step=step, image_size=image_size,
                             widths=cards.output_widths(model, image_size), crop=crop,
                             max_pixels=max_pixels, run=run or cards.RunRecord())
    if fmt == "saved_model":
        path = export_saved_model(model, target, image_size=image_size, crop=crop,
                                  max_pixels=max_pixels, card=card)
    else:
        path = export_format(model, target, fmt, image_size=image_size, card=card)
    for name in tf.io.gfile.listdir(base):
        name = name.rstrip("/")
        if _SCRATCH_DIR.match(name):
            tf.io.gfile.rmtree(os.path.join(base, name))
    for old_step in rotation(exported_steps(model_dir, fmt), step, keep, only_copies):
        tf.io.gfile.rmtree(os.path.join(base, str(old_step)))
    return path


def rotation(exported, step, keep, only_copies=()):
    """The exports to delete once `step` is written: of the exports of earlier steps
    that are not the only copy of their weights, all but the newest `keep - 1`;
    none when `keep` is 0 (keep all). An export of a later step is never deleted: it
    holds newer weights than the one written (whose checkpoint was the newest that
    loaded).

    Example:
        >>> rotation([2, 4, 6], 4, 1)
        [2]
        >>> rotation([2, 4, 6], 6, 1, only_copies=[2])
        [4]
    """
    if not keep:
        return []
    older = [s for s in sorted(exported) if s < step and s not in set(only_copies)]
    return older[:max(0, len(older) - (keep - 1))]


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
    "export_format", "export_saved_model", "ExportFormat", "FORMATS",
    "exported_steps", "latest_export", "rotation",
]
