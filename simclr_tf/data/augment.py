"""SimCLR's image augmentations as pure TensorFlow functions.

Every function takes and returns float32 RGB images with values in [0, 1] (uint8 input
is converted by `to_float_image`); nothing is ever mean/std normalised, so exported
models expect the same [0, 1] pixels. The functions work eagerly, inside `tf.function`
and inside `tf.data` maps.

Randomness: every random function takes `seed`, a stateless seed (int [2] tensor); the
same seed gives the same augmentation. With `seed=None` one seed is drawn by a stateful
op at the top of the call and split for the parts. Inside, only stateless ops run, with
seeds passed down explicitly. Why: a stateful random op inside a `tf.cond` branch gets
its op seed from the branch's own graph, so once `tf.random.set_seed` is called, every
identically built branch (the colour jitter of view 1 and of view 2, say) replays the
same random numbers: the two views would share their jitter. Measured on TF 2.21.

The pretraining recipe (REFERENCE.md, "Augmentation"), in order:

1. `random_crop_with_resize`: a crop covering 8%-100% of the area with aspect ratio
   in [3/4, 4/3] times the output's w/h (`tf.image.sample_distorted_bounding_box`, 100
   attempts, whole image as fallback), bicubic resize to the output size.
2. `random_flip`: horizontal flip with p = 0.5.
3. `random_color_jitter`: with p = 0.8 `color_jitter` (brightness, contrast, saturation,
   hue in a fresh random order per image, clip to [0, 1] after each), then,
   independently, `to_grayscale` with p = 0.2.
4. `batch_random_blur`: Gaussian blur on the accelerator, inside the train step, on
   whole batches of views (one sigma per batch, each image blurred with p = 0.5).

Steps 1-3 run per image in the input pipeline (`preprocess_for_train`); step 4 is kept
out of it on purpose, as in the reference: it is cheap on an accelerator and expensive
on the input host's CPU.

Names follow the SimCLR authors' `data_util.py` so their users find their way:
`preprocess_image`, `preprocess_for_train`, `preprocess_for_eval`,
`random_crop_with_resize`, `distorted_bounding_box_crop`, `center_crop`,
`color_jitter`, `color_jitter_rand`, `color_jitter_nonrand`, `random_brightness`,
`to_grayscale`, `random_color_jitter`, `gaussian_blur`, `random_blur`,
`batch_random_blur`, `random_apply`.

Example:
```python
view = preprocess_for_train(uint8_image, 224, 224, color_jitter_strength=1.0)
v1, v2 = batch_random_blur([views1, views2], 224, 224)  # in the train step
```
"""
from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf

# The reference's constants; REFERENCE.md "Augmentation".
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

IMPLS = ("simclrv1", "simclrv2")

# Colour jitter strength s scales brightness/contrast/saturation by 0.8 s and hue by
# 0.2 s. Contrast and saturation factors U[1 - 0.8 s, 1 + 0.8 s] must stay >= 0, and
# hue deltas must stay within tf.image.adjust_hue's [-0.5, 0.5]: hence s <= 1.25.
MAX_COLOR_JITTER_STRENGTH = 1.25


def _check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"`impl` must be one of {IMPLS}. Received: impl={impl!r}")


def _check_probability(name: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"`{name}` must be in [0, 1]. Received: {name}={p!r}")


def _check_strength(strength: float) -> None:
    if not 0.0 <= strength <= MAX_COLOR_JITTER_STRENGTH:
        raise ValueError(
            f"`color_jitter_strength` must be in [0, {MAX_COLOR_JITTER_STRENGTH}]. "
            f"Received: color_jitter_strength={strength!r}")


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


# ---------------------------------------------------------------- crops and flips


def crop_and_resize(image: tf.Tensor, offset_height, offset_width, crop_height,
                    crop_width, height: int, width: int) -> tf.Tensor:
    """Crops a box out of `image` and resizes it bicubically to [height, width].

    Bicubic interpolation overshoots, so the result is clipped back to [0, 1].
    """
    image = tf.image.crop_to_bounding_box(image, offset_height, offset_width,
                                          crop_height, crop_width)
    image = tf.image.resize(image, [height, width], method="bicubic")
    return tf.clip_by_value(image, 0.0, 1.0)


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
    """SimCLR's random resized crop: area 8%-100%, aspect 3/4-4/3, bicubic resize.

    The aspect-ratio range is relative to the output's width / height, so a non-square
    output gets crops of (roughly) its own shape.

    Args:
      image: [H, W, 3] float image in [0, 1].
      height: output height.
      width: output width.
      p: probability of cropping; otherwise the whole image is only resized.
      seed: stateless seed; drawn if None.

    Returns:
      A [height, width, 3] float32 image in [0, 1].
    """
    _check_size(height, width)
    aspect = width / height
    ratio_range = (CROP_ASPECT_RATIO_RANGE[0] * aspect, CROP_ASPECT_RATIO_RANGE[1] * aspect)

    seeds = _seeds(seed, 2)

    def crop(x):
        return distorted_bounding_box_crop(x, aspect_ratio_range=ratio_range,
                                           seed=seeds[0])

    image = random_apply(crop, p, to_float_image(image), seed=seeds[1])
    image = tf.image.resize(image, [height, width], method="bicubic")
    return tf.clip_by_value(image, 0.0, 1.0)


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
      A [height, width, 3] float32 image in [0, 1].
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


# ---------------------------------------------------------------- colour


def random_brightness(image: tf.Tensor, max_delta: float,
                      impl: str = "simclrv2", *, seed=None) -> tf.Tensor:
    """Random brightness: v2 multiplies, v1 adds.

    Args:
      image: float image.
      max_delta: 0.8 * strength in SimCLR.
      impl: 'simclrv2' multiplies by U[max(0, 1 - max_delta), 1 + max_delta];
        'simclrv1' adds U[-max_delta, max_delta] (tf.image.random_brightness).
      seed: stateless seed; drawn if None.
    """
    _check_impl(impl)
    if seed is None:
        seed = new_seed()
    if impl == "simclrv2":
        return image * _uniform(seed, max(1.0 - max_delta, 0.0), 1.0 + max_delta)
    return tf.image.adjust_brightness(image, _uniform(seed, -max_delta, max_delta))


# The tf.image.random_* distributions, drawn from explicit stateless seeds.
def _random_contrast(image, max_delta, seed):
    return tf.image.adjust_contrast(
        image, _uniform(seed, 1.0 - max_delta, 1.0 + max_delta))


def _random_saturation(image, max_delta, seed):
    return tf.image.adjust_saturation(
        image, _uniform(seed, 1.0 - max_delta, 1.0 + max_delta))


def _random_hue(image, max_delta, seed):
    return tf.image.adjust_hue(image, _uniform(seed, -max_delta, max_delta))


def _jitter_ops(brightness, contrast, saturation, hue, impl):
    """The four jitter ops `op(x, seed)`, each followed by the reference's clip."""

    def clipped(op, strength):

        def apply(x, seed):
            # An op with zero strength is the identity: skip the work.
            if strength == 0:
                return x
            return tf.clip_by_value(op(x, strength, seed), 0.0, 1.0)

        return apply

    return [
        clipped(lambda x, d, seed: random_brightness(x, d, impl=impl, seed=seed),
                brightness),
        clipped(_random_contrast, contrast),
        clipped(_random_saturation, saturation),
        clipped(_random_hue, hue),
    ]


def color_jitter_nonrand(image: tf.Tensor, brightness: float = 0.0,
                         contrast: float = 0.0, saturation: float = 0.0,
                         hue: float = 0.0, impl: str = "simclrv2", *, seed=None
                         ) -> tf.Tensor:
    """Brightness, contrast, saturation and hue jitter in this fixed order.

    Args:
      image: [H, W, 3] float image in [0, 1].
      brightness: max brightness delta (v1) or factor spread (v2).
      contrast: contrast factor ~ U[1 - contrast, 1 + contrast].
      saturation: saturation factor ~ U[1 - saturation, 1 + saturation].
      hue: hue delta ~ U[-hue, hue].
      impl: 'simclrv1' or 'simclrv2' (brightness semantics).
      seed: stateless seed; drawn if None.
    """
    _check_impl(impl)
    ops = _jitter_ops(brightness, contrast, saturation, hue, impl)
    seeds = _seeds(seed, len(ops))
    for k, op in enumerate(ops):
        image = op(image, seeds[k])
    return image


def color_jitter_rand(image: tf.Tensor, brightness: float = 0.0,
                      contrast: float = 0.0, saturation: float = 0.0,
                      hue: float = 0.0, impl: str = "simclrv2", *, seed=None
                      ) -> tf.Tensor:
    """Like `color_jitter_nonrand`, in a fresh random order for every call (image).

    Args: as `color_jitter_nonrand`.
    """
    _check_impl(impl)
    ops = _jitter_ops(brightness, contrast, saturation, hue, impl)
    seeds = _seeds(seed, len(ops) + 1)
    # The ranks of i.i.d. uniforms are a uniformly random permutation.
    order = tf.argsort(_uniform(seeds[-1], 0.0, 1.0, shape=[len(ops)]))
    for position in range(len(ops)):
        # tf.switch_case keeps this graph-friendly: the permutation is a tensor.
        image = tf.switch_case(
            order[position],
            [lambda k=k, op=op: op(image, seeds[k]) for k, op in enumerate(ops)])
    return image


def color_jitter(image: tf.Tensor, strength: float, random_order: bool = True,
                 impl: str = "simclrv2", *, seed=None) -> tf.Tensor:
    """SimCLR's colour jitter of strength s (always applied; see random_color_jitter).

    Brightness 0.8 s, contrast 0.8 s, saturation 0.8 s, hue 0.2 s, each followed by a
    clip to [0, 1].

    Args:
      image: [H, W, 3] float image in [0, 1].
      strength: `color_jitter_strength`, in [0, 1.25] (1.0 ImageNet, 0.5 CIFAR).
      random_order: a fresh random order per image (SimCLR) or the fixed order.
      impl: 'simclrv2' (multiplicative brightness) or 'simclrv1' (additive).
      seed: stateless seed; drawn if None.
    """
    _check_strength(strength)
    _check_impl(impl)
    jitter = color_jitter_rand if random_order else color_jitter_nonrand
    return jitter(to_float_image(image), 0.8 * strength, 0.8 * strength,
                  0.8 * strength, 0.2 * strength, impl=impl, seed=seed)


def to_grayscale(image: tf.Tensor, keep_channels: bool = True) -> tf.Tensor:
    """ITU-R 601 luma; with `keep_channels` tiled back to 3 identical channels."""
    image = tf.image.rgb_to_grayscale(image)
    if keep_channels:
        image = tf.tile(image, [1, 1, 3])
    return image


def random_color_jitter(image: tf.Tensor, strength: float = 1.0, *,
                        impl: str = "simclrv2",
                        jitter_probability: float = COLOR_JITTER_PROBABILITY,
                        grayscale_probability: float = GRAYSCALE_PROBABILITY,
                        seed=None) -> tf.Tensor:
    """Colour distortion: jitter with p = 0.8, then independently grayscale p = 0.2.

    Args:
      image: [H, W, 3] float image in [0, 1].
      strength: `color_jitter_strength`.
      impl: 'simclrv1' or 'simclrv2'.
      jitter_probability: probability of `color_jitter`.
      grayscale_probability: probability of `to_grayscale`.
      seed: stateless seed; drawn if None.
    """
    _check_strength(strength)
    _check_impl(impl)
    _check_probability("jitter_probability", jitter_probability)
    _check_probability("grayscale_probability", grayscale_probability)
    seeds = _seeds(seed, 3)
    image = random_apply(lambda x: color_jitter(x, strength, impl=impl, seed=seeds[0]),
                         jitter_probability, to_float_image(image), seed=seeds[1])
    return random_apply(to_grayscale, grayscale_probability, image, seed=seeds[2])


# ---------------------------------------------------------------- blur


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
      color_jitter_strength: jitter strength s in [0, 1.25].
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
        image = tf.clip_by_value(
            tf.image.resize(image, [height, width], method="bicubic"), 0.0, 1.0)
    if flip:
        image = random_flip(image, seed=seeds[1])
    if color_distort:
        image = random_color_jitter(image, color_jitter_strength, impl=impl,
                                    seed=seeds[2])
    image = tf.reshape(image, [height, width, 3])
    return tf.clip_by_value(image, 0.0, 1.0)


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
        image = tf.clip_by_value(
            tf.image.resize(image, [height, width], method="bicubic"), 0.0, 1.0)
    return tf.reshape(image, [height, width, 3])


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


__all__ = [
    "BLUR_PROBABILITY", "BLUR_SIGMA_RANGE", "COLOR_JITTER_PROBABILITY",
    "CROP_AREA_RANGE", "CROP_ASPECT_RATIO_RANGE", "CROP_MAX_ATTEMPTS",
    "CROP_MIN_OBJECT_COVERED", "EVAL_CROP_PROPORTION", "FLIP_PROBABILITY",
    "GRAYSCALE_PROBABILITY", "IMPLS", "MAX_COLOR_JITTER_STRENGTH",
    "SMALL_IMAGE_MAX_SIZE", "batch_random_blur", "blur_kernel_size", "center_crop",
    "color_jitter", "color_jitter_nonrand", "color_jitter_rand", "crop_and_resize",
    "distorted_bounding_box_crop", "eval_center_crop_enabled", "gaussian_blur",
    "gaussian_kernel_1d", "new_seed", "preprocess_for_eval", "preprocess_for_train",
    "preprocess_image", "random_apply", "random_blur", "random_brightness",
    "random_color_jitter", "random_crop_with_resize", "random_flip", "to_float_image",
    "to_grayscale",
]
