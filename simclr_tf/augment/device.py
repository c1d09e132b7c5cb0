"""SimCLR's pretraining augmentations batched on the accelerator (`--augment_on=device`).

The host only decodes an image and resizes it to fit a fixed square (`host_preprocess`,
aspect ratio kept, zero padded, uint8); the train step then draws both views of every
image here (`make_view_fn`), with the distributions of the host path
(`simclr_tf.augment`):

1. crop: the box sampler of `tf.image.sample_distorted_bounding_box` re-implemented
   vectorised (100 attempts per image at once, the same integer arithmetic: height
   uniform over the admissible integers, then width = rint(height * aspect), offsets
   uniform, whole image as fallback; area >= min_object_covered = 0.1 of the image),
   within each image's valid (unpadded) region;
2. bicubic resize of the crop as `tf.image.resize(method='bicubic')` computes it
   (Keys a = -0.5, half-pixel centres, its 1024-entry weight table, out-of-crop taps
   dropped and the rest renormalised), expressed as two interpolation matrices per
   image, `out = A_y @ image @ A_x^T`: matmuls, which accelerators do best; the
   horizontal flip (p = 0.5) is folded into A_x by reversing its rows;
3. colour jitter with p = 0.8 (brightness, contrast, saturation, hue, each clipped,
   in a fresh random order per image) and, independently, grayscale with p = 0.2.

Blur stays `augment.batch_random_blur` (the trainer's `blur_fn`), as on the host path.

Difference from the host path: the crop is taken from the host-resized image
(`source_size`: the image size itself at <= 32 px, where CIFAR images are unchanged and
the distributions are identical; 8/7 of it, 256 at 224, otherwise), not from the
full-resolution original, so small crops of large images are blurrier; the crop
geometry relative to the image is the same.

Randomness: stateless, from the batch's first per-image seed (a function of the
stream position, so resumed runs replay it); each row draws independently.
"""
from __future__ import annotations

import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf import augment

# tf.image.resize bicubic: ResizeBicubic's Keys kernel (a = -0.5) sampled in a table.
_KEYS_A = -0.5
_TABLE_SIZE = 1024
_GRAY_WEIGHTS = (0.2989, 0.5870, 0.1140)  # tf.image.rgb_to_grayscale


def source_size(image_size: int) -> int:
    """The square side the host resizes images to for `--augment_on=device`."""
    if image_size <= augment.SMALL_IMAGE_MAX_SIZE:
        return image_size
    return int(round(image_size * 8 / 7))


def host_preprocess(image, image_size: int, seed, size: int | None = None):
    """The host part: fit the image into [size, size] (aspect kept, zero padded), uint8.

    Args:
      image: [H, W, 3] uint8 or float in [0, 1].
      image_size: the training image size (sets the default `size`).
      seed: int64 [2] stateless seed of this image.
      size: the square side; `source_size(image_size)` if None.

    Returns:
      dict(image=uint8 [size, size, 3], size=int32 [2] (the valid height and width),
      seed=int64 [2]).
    """
    size = source_size(image_size) if size is None else size
    image = tf.convert_to_tensor(image)
    shape = tf.shape(image)
    if image.dtype != tf.uint8:
        image = tf.image.convert_image_dtype(augment.to_float_image(image), tf.uint8,
                                             saturate=True)

    def resize():
        resized = tf.image.resize(tf.cast(image, tf.float32), [size, size],
                                  method="bicubic", preserve_aspect_ratio=True,
                                  antialias=True)
        return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)

    fits = tf.logical_and(tf.equal(shape[0], size), tf.equal(shape[1], size))
    image = tf.cond(fits, lambda: tf.identity(image), resize)
    valid = tf.shape(image)[:2]
    image = tf.image.pad_to_bounding_box(image, 0, 0, size, size)
    return dict(image=tf.reshape(image, [size, size, 3]), size=tf.cast(valid, tf.int32),
                seed=tf.cast(seed, tf.int64))


# ------------------------------------------------------------------ crop sampling


def _uniform(seed, shape):
    return tf.random.stateless_uniform(shape, seed, 0.0, 1.0)


def _randint(u, n):
    """Uniform integers in [0, n) from uniforms u in [0, 1) (n >= 1, float)."""
    return tf.minimum(tf.floor(u * n), n - 1.0)


def sample_crop_boxes(sizes, seed, aspect_ratio_range=augment.CROP_ASPECT_RATIO_RANGE,
                      area_range=augment.CROP_AREA_RANGE,
                      min_object_covered=augment.CROP_MIN_OBJECT_COVERED,
                      max_attempts=augment.CROP_MAX_ATTEMPTS):
    """Crop boxes with `tf.image.sample_distorted_bounding_box`'s distribution.

    The bounding box is the whole image (as in SimCLR); every image's attempts are
    drawn at once and the first admissible one is kept.

    Args:
      sizes: int [n, 2], each image's (height, width).
      seed: stateless seed (int [2]).
      aspect_ratio_range: (min, max) crop width / height.
      area_range: (min, max) fraction of the image area.
      min_object_covered: minimum fraction of the image the crop covers.
      max_attempts: draws per image before falling back to the whole image.

    Returns:
      int32 [n, 4]: (offset_y, offset_x, height, width).
    """
    sizes = tf.cast(sizes, tf.float32)
    n = tf.shape(sizes)[0]
    image_h, image_w = sizes[:, 0:1], sizes[:, 1:2]  # [n, 1]: broadcast over attempts
    shape = [n, max_attempts]
    seeds = tf.random.experimental.stateless_split(seed, 4)
    ratio = aspect_ratio_range[0] + _uniform(seeds[0], shape) * (
        aspect_ratio_range[1] - aspect_ratio_range[0])
    min_area = area_range[0] * image_w * image_h
    max_area = area_range[1] * image_w * image_h
    # GenerateRandomCrop of sample_distorted_bounding_box_op.cc, vectorised.
    height = tf.math.rint(tf.sqrt(min_area / ratio))
    max_height = tf.math.rint(tf.sqrt(max_area / ratio))
    too_wide = tf.math.rint(max_height * ratio) > image_w
    capped = tf.floor((image_w + 0.5 - 1e-7) / ratio)
    capped = tf.where(tf.math.rint(capped * ratio) > image_w, capped - 1.0, capped)
    max_height = tf.where(too_wide, capped, max_height)
    max_height = tf.minimum(max_height, image_h)
    height = tf.minimum(height, max_height)
    height = height + _randint(_uniform(seeds[1], shape), max_height - height + 1.0)
    width = tf.math.rint(height * ratio)
    area = width * height
    grow = area < min_area
    height = tf.where(grow, height + 1.0, height)
    width = tf.math.rint(height * ratio)
    area = width * height
    shrink = area > max_area
    height = tf.where(shrink, height - 1.0, height)
    width = tf.math.rint(height * ratio)
    area = width * height
    valid = ((area >= min_area) & (area <= max_area) & (width <= image_w)
             & (height <= image_h) & (width > 0) & (height > 0)
             & (area / (image_w * image_h) >= min_object_covered))
    offset_y = tf.where(height < image_h,
                        _randint(_uniform(seeds[2], shape), tf.maximum(image_h - height, 1.0)),
                        0.0)
    offset_x = tf.where(width < image_w,
                        _randint(_uniform(seeds[3], shape), tf.maximum(image_w - width, 1.0)),
                        0.0)
    boxes = tf.stack([offset_y, offset_x, height, width], axis=-1)  # [n, attempts, 4]
    first = tf.argmax(tf.cast(valid, tf.int32), axis=1, output_type=tf.int32)
    chosen = tf.gather(boxes, first, axis=1, batch_dims=1)  # [n, 4]
    whole = tf.concat([tf.zeros([n, 2]), sizes], axis=1)
    chosen = tf.where(tf.reduce_any(valid, axis=1, keepdims=True), chosen, whole)
    return tf.cast(chosen, tf.int32)


# ------------------------------------------------------------------ crop + resize


def _keys(x):
    """Keys cubic kernel (a = -0.5) at distance |x| <= 2."""
    x = tf.abs(x)
    a = _KEYS_A
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return tf.where(x <= 1.0, near, tf.where(x < 2.0, far, 0.0))


def resize_matrix(offset, length, out_size: int, source_size: int):
    """[n, out_size, source_size] bicubic weights resizing rows [offset, offset+length).

    Matches ResizeBicubic(half_pixel_centers=True) on the cropped rows, table
    quantisation and border renormalisation included.

    Args:
      offset: int [n], first source row of each crop.
      length: int [n], rows in each crop (>= 1).
      out_size: output rows.
      source_size: rows of the (padded) source image.
    """
    offset = tf.cast(offset, tf.float32)[:, None, None]
    length = tf.cast(length, tf.float32)[:, None, None]
    scale = length / float(out_size)
    out = tf.range(out_size, dtype=tf.float32)[None, :, None]
    position = (out + 0.5) * scale - 0.5  # in crop coordinates
    base = tf.floor(position)
    delta = tf.math.rint((position - base) * _TABLE_SIZE) / _TABLE_SIZE
    taps = tf.constant([-1.0, 0.0, 1.0, 2.0])[None, None, :]
    index = base + taps  # [n, out, 4]
    weights = _keys(taps - delta)
    inside = (index >= 0.0) & (index <= length - 1.0)
    weights = tf.where(inside, weights, 0.0)
    weights = weights / tf.reduce_sum(weights, axis=-1, keepdims=True)
    columns = tf.cast(tf.clip_by_value(index, 0.0, length - 1.0) + offset, tf.int32)
    one_hot = tf.one_hot(columns, source_size, dtype=tf.float32)  # [n, out, 4, src]
    return tf.einsum("nok,noks->nos", weights, one_hot)


def crop_resize_flip(images, boxes, out_height: int, out_width: int, flip=None):
    """Crops `boxes` out of `images`, resizes them bicubically, optionally flips.

    Args:
      images: [n, S, S', 3] uint8 or float in [0, 1].
      boxes: int [n, 4] (offset_y, offset_x, height, width).
      out_height, out_width: output size.
      flip: optional bool [n], flip these left-right.

    Returns:
      float32 [n, out_height, out_width, 3], the bicubic overshoot of [0, 1] kept.
    """
    images = augment.to_float_image(images)
    rows = resize_matrix(boxes[:, 0], boxes[:, 2], out_height, images.shape[1])
    cols = resize_matrix(boxes[:, 1], boxes[:, 3], out_width, images.shape[2])
    if flip is not None:
        cols = tf.where(flip[:, None, None], tf.reverse(cols, axis=[1]), cols)
    out = tf.einsum("nos,nswc->nowc", rows, images)
    # Not clipped, as the host's crop (the authors' order): `augment_views` clips the
    # view at its end, the colour ops after themselves.
    return tf.einsum("npw,nowc->nopc", cols, out)


# ------------------------------------------------------------------ colour


def rgb_to_hsv(rgb):
    """[..., 3] RGB in [0, 1] -> HSV with h in [0, 1) (tf.image.rgb_to_hsv)."""
    r, g, b = tf.unstack(rgb, axis=-1)
    value = tf.reduce_max(rgb, axis=-1)
    chroma = value - tf.reduce_min(rgb, axis=-1)
    safe_chroma = tf.where(chroma > 0, chroma, 1.0)
    saturation = tf.where(value > 0, chroma / tf.where(value > 0, value, 1.0), 0.0)
    hue = tf.where(tf.equal(value, r), (g - b) / safe_chroma,
                   tf.where(tf.equal(value, g), (b - r) / safe_chroma + 2.0,
                            (r - g) / safe_chroma + 4.0))
    hue = tf.where(chroma > 0, hue / 6.0, 0.0)
    hue = hue - tf.floor(hue)
    return tf.stack([hue, saturation, value], axis=-1)


def hsv_to_rgb(hsv):
    """Inverse of `rgb_to_hsv`."""
    hue, saturation, value = tf.unstack(hsv, axis=-1)
    h6 = hue * 6.0

    def channel(n):
        k = tf.math.floormod(n + h6, 6.0)
        return value - value * saturation * tf.clip_by_value(tf.minimum(k, 4.0 - k), 0.0, 1.0)

    return tf.stack([channel(5.0), channel(3.0), channel(1.0)], axis=-1)


def _per_image(factor):
    return factor[:, None, None, None]


def adjust_brightness(images, factor, impl="simclrv2"):
    """v2: images * factor; v1: images + factor (per image [n])."""
    if impl == "simclrv2":
        return images * _per_image(factor)
    return images + _per_image(factor)


def adjust_contrast(images, factor):
    """(x - channel mean) * factor + channel mean, per image (tf.image.adjust_contrast)."""
    mean = tf.reduce_mean(images, axis=[1, 2], keepdims=True)
    return (images - mean) * _per_image(factor) + mean


def adjust_saturation(images, factor):
    """Saturation scaled by factor and clipped to [0, 1] (tf.image.adjust_saturation)."""
    hue, saturation, value = tf.unstack(rgb_to_hsv(images), axis=-1)
    saturation = tf.clip_by_value(saturation * factor[:, None, None], 0.0, 1.0)
    return hsv_to_rgb(tf.stack([hue, saturation, value], axis=-1))


def adjust_hue(images, delta):
    """Hue rotated by delta (fraction of a turn) (tf.image.adjust_hue)."""
    hue, saturation, value = tf.unstack(rgb_to_hsv(images), axis=-1)
    hue = tf.math.floormod(hue + delta[:, None, None], 1.0)
    return hsv_to_rgb(tf.stack([hue, saturation, value], axis=-1))


def _jitter_ops(strength, impl):
    """[(op(images, u) with u ~ U[0, 1) per image)] for brightness, contrast,
    saturation, hue at jitter strength s, each followed by the reference's clip."""
    b, c, s, h = 0.8 * strength, 0.8 * strength, 0.8 * strength, 0.2 * strength

    def between(u, low, high):
        return low + u * (high - low)

    if impl == "simclrv2":
        brightness = lambda x, u: adjust_brightness(  # noqa: E731
            x, between(u, max(1.0 - b, 0.0), 1.0 + b), impl)
    else:
        brightness = lambda x, u: adjust_brightness(x, between(u, -b, b), impl)  # noqa
    ops = [(brightness, b),
           (lambda x, u: adjust_contrast(x, between(u, 1.0 - c, 1.0 + c)), c),
           (lambda x, u: adjust_saturation(x, between(u, 1.0 - s, 1.0 + s)), s),
           (lambda x, u: adjust_hue(x, between(u, -h, h)), h)]
    return [(lambda x, u, op=op: tf.clip_by_value(op(x, u), 0.0, 1.0)) if amount else
            (lambda x, u: x) for op, amount in ops]


def color_jitter(images, strength, seed, impl="simclrv2"):
    """Always-on colour jitter of each image, in a fresh random order per image.

    Every op is computed for the whole batch at every position and each image keeps
    the one its order names (4 x 4 evaluations): static shapes, no gathers.
    """
    ops = _jitter_ops(strength, impl)
    n = tf.shape(images)[0]
    seeds = tf.random.experimental.stateless_split(seed, 2)
    factors = _uniform(seeds[0], [len(ops), n])
    order = tf.argsort(_uniform(seeds[1], [n, len(ops)]), axis=1)  # a permutation per image
    for position in range(len(ops)):
        chosen = order[:, position]
        out = images
        for k, op in enumerate(ops):
            out = tf.where(tf.equal(chosen, k)[:, None, None, None], op(images, factors[k]),
                           out)
        images = out
    return images


def to_grayscale(images):
    gray = tf.tensordot(images, tf.constant(_GRAY_WEIGHTS), axes=[[3], [0]])[..., None]
    return tf.tile(gray, [1, 1, 1, 3])


def augment_views(images, sizes, seed, image_size: int, *, color_jitter_strength=1.0,
                  impl="simclrv2", crop=True, flip=True, color_distort=True):
    """One batch of views: crop + resize, flip, colour jitter (p 0.8), grayscale (p 0.2).

    Args:
      images: uint8 or float [n, S, S, 3] (zero padded beyond `sizes`).
      sizes: int [n, 2], the valid height and width of each image.
      seed: stateless seed (int [2]).
      image_size: output side.
      color_jitter_strength, impl: as `augment.preprocess_for_train`.
      crop, flip, color_distort: which augmentations to apply.

    Returns:
      float32 [n, image_size, image_size, 3] in [0, 1].
    """
    seeds = tf.random.experimental.stateless_split(seed, 6)
    n = tf.shape(images)[0]
    if crop:
        boxes = sample_crop_boxes(sizes, seeds[0], aspect_ratio_range=augment.CROP_ASPECT_RATIO_RANGE)
    else:
        boxes = tf.concat([tf.zeros([n, 2], tf.int32), tf.cast(sizes, tf.int32)], axis=1)
    flips = _uniform(seeds[1], [n]) < augment.FLIP_PROBABILITY if flip else None
    views = crop_resize_flip(images, boxes, image_size, image_size, flips)
    if color_distort and color_jitter_strength > 0:  # 0: none, grayscale included
        jittered = color_jitter(views, color_jitter_strength, seeds[2], impl=impl)
        apply = _uniform(seeds[3], [n]) < augment.COLOR_JITTER_PROBABILITY
        views = tf.where(apply[:, None, None, None], jittered, views)
        gray = _uniform(seeds[4], [n]) < augment.GRAYSCALE_PROBABILITY
        views = tf.where(gray[:, None, None, None], to_grayscale(views), views)
    return tf.clip_by_value(views, 0.0, 1.0)


def make_view_fn(image_size: int, *, color_jitter_strength: float = 1.0,
                 impl: str = "simclrv2"):
    """The Trainer's `view_fn`: `host_preprocess` batches -> (view1, view2).

    Example:
      trainer = Trainer(..., StepOptions(view_fn=make_view_fn(224), blur_fn=...))
    """
    rules.check_color_jitter_impl(impl)
    rules.check_color_jitter_strength(color_jitter_strength)

    def view_fn(inputs):
        seeds = tf.random.experimental.stateless_split(inputs["seed"][0], 2)
        return tuple(augment_views(inputs["image"], inputs["size"], seeds[k], image_size,
                                   color_jitter_strength=color_jitter_strength, impl=impl)
                     for k in range(2))

    return view_fn
