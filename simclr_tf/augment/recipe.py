"""The paper's augmentation recipe, top to bottom (its Appendix A; the authors'
data_util.py): the crop, the flip, one training view, the two views of an image on the
input host, and how the training step gets its two views (drawn on the device when
--augment_on=device, then blurred); the evaluation preprocessing. Colour distortion is
`color`, blur `blur`, the device's batched path `device`, shared constants `common`.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

import tensorflow as tf

from simclr_tf.augment.color import random_color_jitter
from simclr_tf.augment.common import (
    CROP_AREA_RANGE, CROP_ASPECT_RATIO_RANGE, CROP_MAX_ATTEMPTS, CROP_MIN_OBJECT_COVERED,
    EVAL_CROP_PROPORTION, FLIP_PROBABILITY, _check_impl, _check_size, _check_strength,
    _seeds, new_seed, random_apply, to_float_image)


# ---------------------------------------------------------------- crops and flips


def crop_and_resize(image: tf.Tensor, offset_height, offset_width, crop_height,
                    crop_width, height: int, width: int) -> tf.Tensor:
    """Crops a box out of `image` and resizes it bicubically to [height, width].

    Bicubic interpolation overshoots [0, 1] near edges; as in the authors' code the
    result is not clipped here: the colour ops clip after themselves and a view (or
    an evaluation image) is clipped once at its end.
    """
    image = tf.image.crop_to_bounding_box(image, offset_height, offset_width,
                                          crop_height, crop_width)
    return tf.image.resize(image, [height, width], method="bicubic")


def distorted_bounding_box_crop(
    image: tf.Tensor,
    *,
    min_object_covered: float = CROP_MIN_OBJECT_COVERED,
    aspect_ratio_range: Sequence[float] = CROP_ASPECT_RATIO_RANGE,
    area_range: Sequence[float] = CROP_AREA_RANGE,
    max_attempts: int = CROP_MAX_ATTEMPTS,
    seed=None) -> tf.Tensor:
    """Returns a random crop sampled by `tf.image.sample_distorted_bounding_box`.

    The bounding box is the whole image, so `min_object_covered` is a lower bound on the
    crop's area fraction; after `max_attempts` failed draws the whole image is returned.

    Args:
      image: [H, W, C] tensor.
      min_object_covered: see `tf.image.sample_distorted_bounding_box`.
      aspect_ratio_range: (min, max) of the crop's width / height in pixels.
      area_range: (min, max) fraction of the image area the crop may cover.
      max_attempts: draws before falling back to the whole image.
      seed: stateless seed; drawn if None.

    Returns:
      The cropped [h, w, C] tensor.
    """
    whole_image = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image),
        bounding_boxes=whole_image,
        seed=new_seed() if seed is None else seed,
        min_object_covered=min_object_covered,
        aspect_ratio_range=list(aspect_ratio_range),
        area_range=list(area_range),
        max_attempts=max_attempts,
        use_image_if_no_bounding_boxes=True)
    return tf.slice(image, begin, size)


def random_crop_with_resize(image: tf.Tensor, height: int, width: int,
                            p: float = 1.0, *, seed=None) -> tf.Tensor:
    """SimCLR's random resized crop: area 10%-100% (8%-100% asked; min_object_covered
    0.1 over the whole image is the floor, as in the authors' code), aspect 3/4-4/3,
    bicubic resize.

    The aspect-ratio range is relative to the output's width / height, so a non-square
    output gets crops of (roughly) its own shape.

    Args:
      image: [H, W, 3] float image in [0, 1].
      height: output height.
      width: output width.
      p: probability of cropping; otherwise the whole image is only resized.
      seed: stateless seed; drawn if None.

    Returns:
      A [height, width, 3] float32 image, not clipped: bicubic overshoots [0, 1].
    """
    _check_size(height, width)
    aspect = width / height
    ratio_range = (CROP_ASPECT_RATIO_RANGE[0] * aspect, CROP_ASPECT_RATIO_RANGE[1] * aspect)

    seeds = _seeds(seed, 2)

    def crop(x):
        return distorted_bounding_box_crop(x, aspect_ratio_range=ratio_range,
                                           seed=seeds[0])

    image = random_apply(crop, p, to_float_image(image), seed=seeds[1])
    # Not clipped (the authors' order): the bicubic overshoot reaches the colour ops,
    # which clip after themselves, and the view's clip at its end.
    return tf.image.resize(image, [height, width], method="bicubic")


def random_flip(image: tf.Tensor, p: float = FLIP_PROBABILITY, *, seed=None
                ) -> tf.Tensor:
    """Flips `image` left-right with probability `p` (0.5 in SimCLR).

    Args:
      image: [H, W, C] tensor.
      p: flip probability.
      seed: stateless seed; drawn if None.
    """
    return random_apply(tf.image.flip_left_right, p, image, seed=seed)


def _crop_shape(image_height, image_width, aspect_ratio: float,
                crop_proportion: float):
    """The largest box of `aspect_ratio` (w / h) in the image, scaled by the proportion."""
    image_height_f = tf.cast(image_height, tf.float32)
    image_width_f = tf.cast(image_width, tf.float32)
    image_wider = image_width_f / image_height_f > aspect_ratio
    full_height = tf.where(image_wider, image_height_f, image_width_f / aspect_ratio)
    full_width = tf.where(image_wider, image_height_f * aspect_ratio, image_width_f)
    crop_height = tf.cast(tf.math.rint(crop_proportion * full_height), tf.int32)
    crop_width = tf.cast(tf.math.rint(crop_proportion * full_width), tf.int32)
    return tf.maximum(crop_height, 1), tf.maximum(crop_width, 1)


def center_crop(image: tf.Tensor, height: int, width: int,
                crop_proportion: float = EVAL_CROP_PROPORTION) -> tf.Tensor:
    """Centre crop of `crop_proportion` of the image, resized bicubically.

    The crop is the largest centred box with the output's aspect ratio, shrunk by
    `crop_proportion`: for a square output, 0.875 of the shorter side.

    Args:
      image: [H, W, 3] float image.
      height: output height.
      width: output width.
      crop_proportion: in (0, 1].

    Returns:
      A [height, width, 3] float32 image, not clipped: bicubic overshoots [0, 1].
    """
    _check_size(height, width)
    if not 0.0 < crop_proportion <= 1.0:
        raise ValueError("`crop_proportion` must be in (0, 1]. "
                         f"Received: crop_proportion={crop_proportion!r}")
    shape = tf.shape(image)
    crop_height, crop_width = _crop_shape(shape[0], shape[1], width / height,
                                          crop_proportion)
    # The +1 puts an odd leftover pixel on the top/left margin, as the reference does.
    offset_height = (shape[0] - crop_height + 1) // 2
    offset_width = (shape[1] - crop_width + 1) // 2
    return crop_and_resize(image, offset_height, offset_width, crop_height, crop_width,
                           height, width)


def view_seed(seed: int, step, replica, chunk=None) -> tf.Tensor:
    """The stateless seed of the views drawn in a train step: the one place it is
    derived, from (seed, step, replica[, chunk]) in this order.

    Not a stateful generator, whose state no checkpoint keeps: a resumed run draws
    exactly as an uninterrupted one, and both passes of gradient caching draw a
    chunk alike.

    Args:
      seed: the run's seed (int).
      step: the global step (the optimizer's iterations: int or int tensor).
      replica: the replica id (int or int tensor).
      chunk: the gradient-caching chunk (int or int tensor), or None.

    Returns:
      int64 [2].
    """
    derived = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, 1], tf.int64), tf.cast(step, tf.int64))
    derived = tf.random.experimental.stateless_fold_in(derived, tf.cast(replica, tf.int64))
    if chunk is not None:
        derived = tf.random.experimental.stateless_fold_in(derived, tf.cast(chunk, tf.int64))
    return derived


@dataclasses.dataclass(frozen=True)
class StepViews:
    """How a pretraining step turns the images of its batch into its two views: the
    data path, decided once (`StepOptions` makes it from its `view_fn` and `blur_fn`,
    which `simclr_tf.run.modes.parts.step_options` sets from --augment_on and
    --use_blur).

    A pretraining batch is `(images, labels)`, its images as the input pipeline
    delivers them: the two views drawn on the host, `(view1, view2)` (--augment_on=host,
    the authors' way), or the source images the views are drawn from on the device
    (`device.make_view_fn`'s input, --augment_on=device). Either way the step calls
    `views(images, step=..., replica=...[, chunk=...])` and gets `(view1, view2)`,
    drawn if need be and blurred (step 4 of the recipe in `augment/__init__.py`).

    Attributes:
      draw: None (the images are the views) or `draw(images) -> (view1, view2)`.
      blur: None or `blur([view1, view2], seed=...) -> [view1, view2]`.
      seed: the run's seed; the blur's seed is `view_seed(seed, step, replica[, chunk])`.
    """
    draw: Optional[Callable] = None
    blur: Optional[Callable] = None
    seed: int = 0

    @property
    def drawn_in_step(self) -> bool:
        """Whether the step draws the views from source images (then gradient caching
        draws them chunk by chunk: the whole batch's views never exist at once)."""
        return self.draw is not None

    def __call__(self, images, *, step, replica, chunk=None):
        view1, view2 = images if self.draw is None else self.draw(images)
        if self.blur is None:
            return view1, view2
        return tuple(self.blur([view1, view2], seed=view_seed(self.seed, step, replica, chunk)))


# ---------------------------------------------------------------- recipes


def preprocess_for_train(image: tf.Tensor, height: int, width: int, *,
                         color_jitter_strength: float = 1.0, crop: bool = True,
                         flip: bool = True, color_distort: bool = True,
                         impl: str = "simclrv2", seed=None) -> tf.Tensor:
    """One training view: crop+resize, flip, colour distortion (no blur: see module).

    Pretraining uses all three; fine-tuning and linear evaluation pass
    `color_distort=False` (crop and flip only).

    Args:
      image: [H, W, 3] uint8 or float image in [0, 1].
      height: output height.
      width: output width.
      color_jitter_strength: jitter strength s in [0, 1.25]; 0 turns the whole
        colour distortion off, grayscale included (as the authors' code).
      crop: random resized crop; if False the whole image is only resized.
      flip: random horizontal flip.
      color_distort: random colour jitter (p 0.8) and grayscale (p 0.2).
      impl: 'simclrv2' or 'simclrv1' (brightness semantics).
      seed: stateless seed; drawn if None (two calls give independent views).

    Returns:
      A float32 [height, width, 3] image in [0, 1].
    """
    _check_size(height, width)
    _check_strength(color_jitter_strength)
    _check_impl(impl)
    seeds = _seeds(seed, 3)
    image = to_float_image(image)
    if crop:
        image = random_crop_with_resize(image, height, width, seed=seeds[0])
    else:
        image = tf.image.resize(image, [height, width], method="bicubic")
    if flip:
        image = random_flip(image, seed=seeds[1])
    if color_distort and color_jitter_strength > 0:
        # Strength 0 skips all colour distortion, grayscale included, as the
        # authors' code does (`if color_jitter_strength > 0`).
        image = random_color_jitter(image, color_jitter_strength, impl=impl,
                                    seed=seeds[2])
    image = tf.reshape(image, [height, width, 3])
    return tf.clip_by_value(image, 0.0, 1.0)


def two_views(image: tf.Tensor, size: int, *, seed, color_jitter_strength: float = 1.0,
              crop: bool = True, flip: bool = True, color_distort: bool = True,
              impl: str = "simclrv2"):
    """The two views of one image, drawn on the input host (--augment_on=host, the
    authors' way): `preprocess_for_train` twice, with the image's seed split in two, so
    the views are independent by construction (the package docstring, "Randomness").
    The step then blurs them (`StepViews`).

    Returns:
      (view1, view2), each float32 [size, size, 3] in [0, 1].
    """
    image = to_float_image(image)
    seeds = tf.random.experimental.stateless_split(seed, 2)

    def view(view_seed):
        return preprocess_for_train(image, size, size, crop=crop, flip=flip,
                                    color_distort=color_distort,
                                    color_jitter_strength=color_jitter_strength, impl=impl,
                                    seed=view_seed)

    return view(seeds[0]), view(seeds[1])


def preprocess_for_eval(image: tf.Tensor, height: int, width: int,
                        crop: bool = True) -> tf.Tensor:
    """Evaluation preprocessing: centre crop of 0.875 (if `crop`) and bicubic resize.

    Callers pass `crop=eval_center_crop_enabled(image_size)` to follow the reference,
    which does not crop images of 32 px or less.

    Args:
      image: [H, W, 3] uint8 or float image.
      height: output height.
      width: output width.
      crop: centre crop `EVAL_CROP_PROPORTION` of the image before resizing.

    Returns:
      A float32 [height, width, 3] image in [0, 1].
    """
    _check_size(height, width)
    image = to_float_image(image)
    if crop:
        image = center_crop(image, height, width, EVAL_CROP_PROPORTION)
    else:
        image = tf.image.resize(image, [height, width], method="bicubic")
    return tf.clip_by_value(tf.reshape(image, [height, width, 3]), 0.0, 1.0)


def preprocess_image(image: tf.Tensor, height: int, width: int,
                     is_training: bool = False, color_distort: bool = True,
                     test_crop: bool = True, *, color_jitter_strength: float = 1.0,
                     impl: str = "simclrv2", seed=None) -> tf.Tensor:
    """The reference's entry point: train or eval preprocessing of one image.

    Args:
      image: [H, W, 3] uint8 or float image.
      height: output height.
      width: output width.
      is_training: `preprocess_for_train` if True, else `preprocess_for_eval`.
      color_distort: colour distortion when training.
      test_crop: centre crop when evaluating.
      color_jitter_strength: jitter strength when training.
      impl: 'simclrv1' or 'simclrv2'.
      seed: stateless seed for training; drawn if None.
    """
    if is_training:
        return preprocess_for_train(image, height, width,
                                    color_jitter_strength=color_jitter_strength,
                                    color_distort=color_distort, impl=impl, seed=seed)
    return preprocess_for_eval(image, height, width, crop=test_crop)
