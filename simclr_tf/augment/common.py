"""Constants and primitives shared by the augmentation modules (`augment`, `color`,
`blur`): the reference's probabilities and ranges, argument checks, stateless seeds
and `random_apply`. `simclr_tf.augment` re-exports the public names.
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from simclr_tf.config import rules

# The reference's constants: the paper's Appendix A, as the authors' data_util.py sets them.
CROP_AREA_RANGE = (0.08, 1.0)
CROP_ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)
CROP_MIN_OBJECT_COVERED = 0.1
CROP_MAX_ATTEMPTS = 100
FLIP_PROBABILITY = 0.5
COLOR_JITTER_PROBABILITY = 0.8
GRAYSCALE_PROBABILITY = 0.2
BLUR_PROBABILITY = 0.5
BLUR_SIGMA_RANGE = (0.1, 2.0)
EVAL_CROP_PROPORTION = 0.875

# Evaluation centre-crops 0.875 of the image, except for images of at most this many
# pixels on a side (CIFAR-sized inputs), where the reference resizes the whole image:
# a 28-pixel crop of a 32-pixel CIFAR image throws away too much of the object.
# `eval_center_crop_enabled` is the one place that applies this rule.
SMALL_IMAGE_MAX_SIZE = 32

_check_impl = rules.check_color_jitter_impl
_check_strength = rules.check_color_jitter_strength


def _check_probability(name: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"`{name}` must be in [0, 1]. Received: {name}={p!r}")


def _check_size(height: int, width: int) -> None:
    for name, value in (("height", height), ("width", width)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")


def to_float_image(image: tf.Tensor) -> tf.Tensor:
    """Converts an image to float32 in [0, 1].

    Args:
      image: uint8 (scaled by 1/255) or float (cast, assumed already in [0, 1]) tensor.

    Returns:
      A float32 tensor of the same shape.
    """
    image = tf.convert_to_tensor(image)
    if image.dtype.is_integer:
        return tf.image.convert_image_dtype(image, tf.float32)
    return tf.cast(image, tf.float32)


def eval_center_crop_enabled(image_size: int) -> bool:
    """Whether evaluation centre-crops at this output size (the reference's rule).

    Args:
      image_size: output side in pixels.

    Returns:
      False for images of at most `SMALL_IMAGE_MAX_SIZE` (32) pixels, True otherwise.
    """
    return image_size > SMALL_IMAGE_MAX_SIZE


def new_seed() -> tf.Tensor:
    """A fresh stateless seed (int64 [2]) from TF's stateful generator."""
    return tf.random.uniform([2], 0, 2**31 - 1, dtype=tf.int64)


def _seeds(seed, num: int) -> tf.Tensor:
    """`num` independent seeds ([num, 2]) derived from `seed` (drawn if None)."""
    if seed is None:
        seed = new_seed()
    return tf.random.experimental.stateless_split(seed, num)


def _uniform(seed, minval, maxval, shape=()):
    return tf.random.stateless_uniform(shape, seed, minval, maxval)


def random_apply(func: Callable[[tf.Tensor], tf.Tensor], p: float,
                 x: tf.Tensor, *, seed=None) -> tf.Tensor:
    """Returns `func(x)` with probability `p`, else `x`.

    Args:
      func: the transformation; if random, it must take its randomness from a seed
        drawn outside (see module docstring), not from stateful ops.
      p: probability of applying it, in [0, 1].
      x: the input tensor.
      seed: stateless seed of the decision; drawn if None.
    """
    _check_probability("p", p)
    if seed is None:
        seed = new_seed()
    return tf.cond(_uniform(seed, 0.0, 1.0) < p, lambda: func(x), lambda: tf.identity(x))
