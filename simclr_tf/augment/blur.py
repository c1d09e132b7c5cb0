"""Gaussian blur of the paper: per image (`random_blur`) and batched on the device
(`batch_random_blur`, in the train step), seeded."""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from simclr_tf.augment.common import (
    BLUR_PROBABILITY, BLUR_SIGMA_RANGE, _check_probability, _check_size, _seeds,
    _uniform, random_apply)


def blur_kernel_size(image_size: int) -> int:
    """The blur kernel's side for an image side: 2 * floor(floor(size / 10) / 2) + 1.

    23 at 224 px, 3 at 32 px: the reference's 10%-of-the-image kernel, forced odd.
    """
    return 2 * ((image_size // 10) // 2) + 1


def gaussian_kernel_1d(sigma, kernel_size: int) -> tf.Tensor:
    """Normalised 1-D Gaussian weights, float32 [kernel_size], centred."""
    radius = kernel_size // 2
    x = tf.range(-radius, radius + 1, dtype=tf.float32)
    sigma = tf.cast(sigma, tf.float32)
    weights = tf.exp(-tf.square(x) / (2.0 * tf.square(sigma)))
    return weights / tf.reduce_sum(weights)


def gaussian_blur(image: tf.Tensor, kernel_size: int, sigma,
                  padding: str = "SAME") -> tf.Tensor:
    """Separable Gaussian blur (depthwise, so channels never mix).

    Args:
      image: [H, W, C] or [N, H, W, C] float tensor.
      kernel_size: odd side of the kernel (see `blur_kernel_size`).
      sigma: standard deviation in pixels (python float or scalar tensor).
      padding: 'SAME' (zero padding, the reference's choice) or 'VALID'.

    Returns:
      The blurred tensor, same rank and dtype as `image` (not clipped).
    """
    if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(
            f"`kernel_size` must be a positive odd int. Received: kernel_size={kernel_size!r}")
    image = tf.convert_to_tensor(image)
    single = image.shape.rank == 3
    if single:
        image = image[tf.newaxis]
    channels = image.shape[-1]
    weights = tf.cast(gaussian_kernel_1d(sigma, kernel_size), image.dtype)
    vertical = tf.tile(tf.reshape(weights, [kernel_size, 1, 1, 1]), [1, 1, channels, 1])
    horizontal = tf.tile(tf.reshape(weights, [1, kernel_size, 1, 1]), [1, 1, channels, 1])
    strides = [1, 1, 1, 1]
    image = tf.nn.depthwise_conv2d(image, vertical, strides, padding=padding)
    image = tf.nn.depthwise_conv2d(image, horizontal, strides, padding=padding)
    return image[0] if single else image


def random_blur(image: tf.Tensor, height: int, width: int, p: float = 1.0, *,
                seed=None) -> tf.Tensor:
    """Blurs with sigma ~ U(0.1, 2.0) with probability p (one draw for the tensor).

    Args:
      image: [H, W, C] or [N, H, W, C] float tensor.
      height: image height; sets the kernel size (`blur_kernel_size`).
      width: image width (unused: the reference sizes the kernel from the height).
      p: probability of blurring.
      seed: stateless seed; drawn if None.
    """
    del width
    _check_probability("p", p)
    kernel_size = blur_kernel_size(height)
    seeds = _seeds(seed, 2)

    def blur(x):
        return gaussian_blur(x, kernel_size, _uniform(seeds[0], *BLUR_SIGMA_RANGE))

    return random_apply(blur, p, image, seed=seeds[1])


def batch_random_blur(images_list: Sequence[tf.Tensor], height: int, width: int,
                      blur_probability: float = BLUR_PROBABILITY, *,
                      seed=None) -> list[tf.Tensor]:
    """Blurs batches of views on the device, as SimCLR's train step does.

    For each [n, H, W, 3] tensor of the list (one per view) one sigma ~ U(0.1, 2.0) is
    drawn, the whole tensor is blurred with it, and each image independently keeps the
    blurred version with probability `blur_probability`; the result is clipped to
    [0, 1]. Graph-friendly: call it inside the `tf.function` train step, on each replica.

    Args:
      images_list: list/tuple of float [n, H, W, 3] tensors.
      height: image height (sets the kernel: 23 at 224, 3 at 32).
      width: image width.
      blur_probability: per-image probability of being blurred.
      seed: stateless seed; drawn if None.

    Returns:
      A list of tensors shaped like the inputs.
    """
    _check_size(height, width)
    _check_probability("blur_probability", blur_probability)
    if isinstance(images_list, tf.Tensor) or not isinstance(images_list, (list, tuple)):
        raise ValueError("`images_list` must be a list or tuple of [n, H, W, 3] tensors. "
                         f"Received: images_list={type(images_list).__name__}")
    seeds = _seeds(seed, 2 * len(images_list))
    blurred_list = []
    for i, images in enumerate(images_list):
        images = tf.convert_to_tensor(images)
        blurred = random_blur(images, height, width, p=1.0, seed=seeds[2 * i])
        keep_blurred = tf.cast(
            _uniform(seeds[2 * i + 1], 0.0, 1.0, shape=[tf.shape(images)[0], 1, 1, 1])
            < blur_probability, images.dtype)
        mixed = keep_blurred * blurred + (1.0 - keep_blurred) * images
        blurred_list.append(tf.clip_by_value(mixed, 0.0, 1.0))
    return blurred_list
