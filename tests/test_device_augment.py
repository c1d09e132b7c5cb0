"""--augment_on=device (simclr_tf.augment.device): the host path's distributions.

Reuses the statistical checks of tests/test_augment.py (5-sigma binomial bounds, KS
tests against TF's own sampler) on the batched device implementation, and checks the
deterministic parts (bicubic crop-resize, colour ops) against tf.image numerically.
"""
import itertools
import math

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from simclr_tf import augment
from simclr_tf.augment import device as device_augment
from test_augment import _bound, _coordinate_image, _crop_sizes

N = 4000
SEED = tf.constant([7, 11], tf.int64)


def _batch(image, n):
    return tf.repeat(tf.convert_to_tensor(image)[None], n, axis=0)


def test_crop_resize_equals_host_bicubic():
    rng = np.random.default_rng(0)
    image = rng.uniform(size=(40, 30, 3)).astype(np.float32)
    boxes = np.array([[0, 0, 40, 30], [5, 3, 20, 11], [10, 20, 7, 10], [39, 29, 1, 1],
                      [2, 1, 33, 25]], np.int32)
    out = device_augment.crop_resize_flip(_batch(image, len(boxes)), boxes, 24, 24).numpy()
    for box, got in zip(boxes, out):
        want = augment.crop_and_resize(image, *box, 24, 24).numpy()
        np.testing.assert_allclose(got, want, atol=2e-5)
    flipped = device_augment.crop_resize_flip(_batch(image, len(boxes)), boxes, 24, 24,
                                              flip=tf.ones([len(boxes)], tf.bool)).numpy()
    np.testing.assert_allclose(flipped, out[:, :, ::-1], atol=1e-6)


def test_crop_box_distribution_equals_tf_sampler():
    sizes = [(256, 256), (300, 450), (32, 32)]
    for height, width in sizes:
        boxes = device_augment.sample_crop_boxes(
            tf.constant([[height, width]] * N), SEED).numpy()
        ref = tf.data.Dataset.range(N).map(lambda i: tf.image.stateless_sample_distorted_bounding_box(
            [height, width, 3], tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
            seed=tf.stack([i, 3]), min_object_covered=0.1, aspect_ratio_range=[0.75, 4 / 3],
            area_range=[0.08, 1.0], max_attempts=100,
            use_image_if_no_bounding_boxes=True)).batch(N)
        begin, size, _ = next(iter(ref))
        ref_hw = size.numpy()[:, :2]
        ref_yx = begin.numpy()[:, :2]
        area = boxes[:, 2] * boxes[:, 3] / (height * width)
        ref_area = ref_hw[:, 0] * ref_hw[:, 1] / (height * width)
        aspect = boxes[:, 3] / boxes[:, 2]
        ref_aspect = ref_hw[:, 1] / ref_hw[:, 0]
        assert area.min() >= 0.1 - 1e-6 and area.max() <= 1.0
        assert (boxes[:, 0] + boxes[:, 2] <= height).all()
        assert (boxes[:, 1] + boxes[:, 3] <= width).all()
        assert scipy.stats.ks_2samp(area, ref_area).pvalue > 1e-6, (height, width)
        assert scipy.stats.ks_2samp(aspect, ref_aspect).pvalue > 1e-6, (height, width)
        # Offsets relative to the free room, and the whole-image fallback rate.
        room = np.maximum(height - boxes[:, 2], 1)
        ref_room = np.maximum(height - ref_hw[:, 0], 1)
        assert scipy.stats.ks_2samp(boxes[:, 0] / room, ref_yx[:, 0] / ref_room).pvalue > 1e-6
        whole = (area == 1.0).mean()
        ref_whole = (ref_area == 1.0).mean()
        assert abs(whole - ref_whole) < 5 * math.sqrt(max(ref_whole, 1e-3) / N)


@pytest.mark.large  # 4 s
def test_crops_stay_in_the_valid_region_and_end_to_end_geometry():
    # A 256 x 256 coordinate image padded to 300: crops never see the padding, and the
    # crop sizes measured from the output ramps follow the boxes.
    image = np.zeros([300, 300, 3], np.float32)
    image[:256, :256] = _coordinate_image(256, 256)
    views = device_augment.augment_views(
        _batch(image, 1000), tf.constant([[256, 256]] * 1000), SEED, 48,
        color_distort=False, flip=False).numpy()
    crop_h, crop_w = _crop_sizes(views, 256, 256)
    area = crop_h * crop_w / 256**2
    assert area.min() >= 0.1 * 0.97 and area.max() <= 1.02
    assert views[..., 2].min() > 0.45  # channel 2 is 0.5 inside, 0 in the padding


def test_flip_jitter_and_grayscale_rates():
    rng = np.random.RandomState(0)
    rgb = rng.uniform(0.2, 0.8, size=(8, 8, 3)).astype(np.float32)
    ramp = _coordinate_image(8, 8)
    flipped = device_augment.augment_views(
        _batch(ramp, N), tf.constant([[8, 8]] * N), SEED, 8, crop=False,
        color_distort=False).numpy()
    is_flipped = flipped[:, 4, 0, 0] > flipped[:, 4, -1, 0]
    assert abs(is_flipped.mean() - 0.5) < _bound(0.5)
    np.testing.assert_allclose(flipped[~is_flipped][0], ramp, atol=1e-5)

    out = device_augment.augment_views(_batch(rgb, N), tf.constant([[8, 8]] * N), SEED, 8,
                                       crop=False, flip=False).numpy()
    gray = np.ptp(out, axis=-1).max(axis=(1, 2)) < 1e-6
    plain_gray = augment.to_grayscale(rgb).numpy()
    unchanged = np.where(gray, np.abs(out - plain_gray).max(axis=(1, 2, 3)) < 1e-5,
                         np.abs(out - rgb).max(axis=(1, 2, 3)) < 1e-5)
    assert abs(gray.mean() - 0.2) < _bound(0.2)
    assert abs((~unchanged).mean() - 0.8) < _bound(0.8)
    assert abs((~unchanged[gray]).mean() - 0.8) < _bound(0.8, gray.sum())


def test_colour_ops_equal_tf_image():
    rng = np.random.RandomState(1)
    images = rng.uniform(0, 1, size=(5, 6, 7, 3)).astype(np.float32)
    factors = np.array([0.2, 0.7, 1.0, 1.5, 1.8], np.float32)
    deltas = np.array([-0.2, -0.05, 0.0, 0.1, 0.2], np.float32)
    for i in range(5):
        np.testing.assert_allclose(
            device_augment.adjust_contrast(images, factors)[i],
            tf.image.adjust_contrast(images[i], factors[i]), atol=1e-5)
        np.testing.assert_allclose(
            device_augment.adjust_saturation(images, factors)[i],
            tf.image.adjust_saturation(images[i], factors[i]), atol=1e-5)
        np.testing.assert_allclose(
            device_augment.adjust_hue(images, deltas)[i],
            tf.image.adjust_hue(images[i], deltas[i]), atol=1e-5)
    np.testing.assert_allclose(device_augment.to_grayscale(images),
                               augment.to_grayscale(images[0]).numpy()[None] * 0
                               + tf.tile(tf.image.rgb_to_grayscale(images), [1, 1, 1, 3]),
                               atol=1e-6)
    np.testing.assert_allclose(device_augment.rgb_to_hsv(images), tf.image.rgb_to_hsv(images),
                               atol=1e-5)


@pytest.mark.parametrize("impl", ["simclrv1", "simclrv2"])
def test_brightness_and_other_factor_ranges(impl):
    image = np.array([[[0.2, 0.2, 0.2], [0.6, 0.6, 0.6]]], np.float32)
    u = tf.random.stateless_uniform([N], SEED)
    brightness = device_augment._jitter_ops(1.0, impl)[0]
    out = brightness(_batch(image, N), u).numpy()
    low = out[:, 0, 0, 0]
    if impl == "simclrv1":
        delta = low - 0.2
        assert delta.min() >= -0.8 - 1e-6 and delta.min() < -0.15  # clipped at 0
        assert delta.max() > 0.75 and delta.max() <= 0.8 + 1e-6
    else:
        factor = low / 0.2
        assert factor.min() >= 0.2 - 1e-6 and factor.min() < 0.25 and factor.max() > 1.75
        assert abs(factor.mean() - 1.0) < 5 * 0.8 / math.sqrt(3 * N)


def test_jitter_order_is_a_fresh_permutation_per_image(monkeypatch):
    def marker(k):
        return lambda x, u: x * 10.0 + float(k + 1)

    monkeypatch.setattr(device_augment, "_jitter_ops", lambda *a: [marker(k) for k in range(4)])
    out = device_augment.color_jitter(tf.zeros([2400, 1, 1, 3]), 1.0, SEED).numpy()
    codes = np.rint(out[:, 0, 0, 0]).astype(int)
    counts = {p: 0 for p in itertools.permutations("1234")}
    for code in codes:
        counts[tuple(str(code))] += 1
    for count in counts.values():
        assert abs(count - 100) < 5 * math.sqrt(100)


@pytest.mark.large  # 5 s
def test_view_fn_two_independent_views_in_a_compiled_step():
    rng = np.random.default_rng(2)
    raw = rng.integers(0, 256, size=(8, 50, 40, 3)).astype(np.uint8)
    inputs = [device_augment.host_preprocess(x, 32, tf.constant([i, 1], tf.int64))
              for i, x in enumerate(raw)]
    batch = {k: tf.stack([x[k] for x in inputs]) for k in inputs[0]}
    assert batch["image"].dtype == tf.uint8 and batch["image"].shape == (8, 32, 32, 3)
    np.testing.assert_array_equal(batch["size"][0], [32, 26])  # aspect kept, padded
    view_fn = device_augment.make_view_fn(32, color_jitter_strength=0.5)
    v1, v2 = tf.function(view_fn)(batch)
    e1, _ = view_fn(batch)
    np.testing.assert_allclose(v1, e1, atol=1e-5)  # seeded: eager == compiled
    for v in (v1, v2):
        assert v.shape == (8, 32, 32, 3) and v.dtype == tf.float32
        assert 0.0 <= float(tf.reduce_min(v)) and float(tf.reduce_max(v)) <= 1.0
    assert (np.abs(v1 - v2).max(axis=(1, 2, 3)) > 1e-3).all()


def test_strength_zero_turns_all_colour_distortion_off_on_device():
    rgb = np.random.RandomState(1).uniform(0.2, 0.8, size=(8, 8, 3)).astype(np.float32)
    images, sizes = _batch(rgb, 500), tf.constant([[8, 8]] * 500)
    zero = device_augment.augment_views(images, sizes, SEED, 8, color_jitter_strength=0.0)
    plain = device_augment.augment_views(images, sizes, SEED, 8, color_distort=False)
    np.testing.assert_array_equal(zero.numpy(), plain.numpy())
    assert (np.ptp(zero.numpy(), axis=-1).max(axis=(1, 2)) > 1e-3).all()  # none grey
