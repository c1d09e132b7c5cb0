"""Colour distortion of the paper: colour jitter (brightness, contrast, saturation,
hue in random order, v1 and v2 variants) and grayscale, per image, seeded."""
from __future__ import annotations

import tensorflow as tf

from simclr_tf.augment.common import (
    COLOR_JITTER_PROBABILITY, GRAYSCALE_PROBABILITY, _check_impl,
    _check_probability, _check_strength, _seeds, _uniform, new_seed, random_apply,
    to_float_image)


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
