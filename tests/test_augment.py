"""Tests for simclr_tf.augment: semantics and statistics against the reference.

Statistical checks draw thousands of samples inside tf.data (fast) with a fixed seed,
and compare rates with 5-sigma binomial bounds, so they do not flake even unseeded.
"""
import functools
import itertools
import math

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from simclr_tf import augment
from simclr_tf.augment import color

N = 4000


def _bound(p, n=N, sigmas=5.0):
    return sigmas * math.sqrt(p * (1 - p) / n)


def _draws(fn, image, n=N):
    """fn(image) for n copies, mapped inside tf.data; numpy [n, ...]."""
    dataset = tf.data.Dataset.from_tensors(tf.convert_to_tensor(image)).repeat(n)
    dataset = dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE).batch(n)
    return next(iter(dataset)).numpy()


def _coordinate_image(height, width):
    """Channel 0 = x, channel 1 = y of each pixel centre, as fractions of the side."""
    y, x = np.meshgrid((np.arange(height) + 0.5) / height,
                       (np.arange(width) + 0.5) / width, indexing="ij")
    return np.stack([x, y, np.full_like(x, 0.5)], axis=-1).astype(np.float32)


def _crop_sizes(outputs, in_height, in_width):
    """Crop (height, width) in input pixels, from the slopes of the coordinate ramps."""
    out_h, out_w = outputs.shape[1:3]
    mid_h, mid_w = slice(out_h // 4, 3 * out_h // 4), slice(out_w // 4, 3 * out_w // 4)
    slope_x = np.diff(outputs[:, mid_h, mid_w, 0], axis=2).mean(axis=(1, 2))
    slope_y = np.diff(outputs[:, mid_h, mid_w, 1], axis=1).mean(axis=(1, 2))
    return np.abs(slope_y) * out_h * in_height, np.abs(slope_x) * out_w * in_width


@pytest.fixture(autouse=True)
def _seed():
    tf.random.set_seed(1234)


@pytest.fixture(scope="module")
def rgb_image():
    rng = np.random.RandomState(0)
    return rng.uniform(0.2, 0.8, size=(8, 8, 3)).astype(np.float32)


# ------------------------------------------------------------ eager and in tf.data

AUGMENTATIONS = {
    "preprocess_for_train_v2": lambda x: augment.preprocess_for_train(x, 24, 24),
    "preprocess_for_train_v1": lambda x: augment.preprocess_for_train(
        x, 24, 24, impl="simclrv1", color_jitter_strength=0.5),
    "preprocess_for_train_finetune": lambda x: augment.preprocess_for_train(
        x, 24, 24, color_distort=False),
    "preprocess_for_eval_crop": lambda x: augment.preprocess_for_eval(x, 24, 24),
    "preprocess_for_eval_nocrop": lambda x: augment.preprocess_for_eval(
        x, 24, 24, crop=False),
    # The crops are not clipped (the authors' order: the colour ops and the view clip).
    "random_crop_with_resize": lambda x: tf.clip_by_value(
        augment.random_crop_with_resize(x, 24, 24), 0, 1),
    "center_crop": lambda x: tf.clip_by_value(augment.center_crop(x, 24, 24), 0, 1),
    "random_flip": augment.random_flip,
    "color_jitter": lambda x: augment.color_jitter(x, 1.0),
    "color_jitter_fixed_order": lambda x: augment.color_jitter(x, 1.0, random_order=False),
    "random_color_jitter": lambda x: augment.random_color_jitter(x, 1.0),
    "to_grayscale": augment.to_grayscale,
    "gaussian_blur": lambda x: tf.clip_by_value(augment.gaussian_blur(x, 3, 1.0), 0, 1),
    "random_blur": lambda x: augment.random_blur(x, 32, 32, p=0.5),
    "preprocess_image_train": lambda x: augment.preprocess_image(x, 24, 24, True),
}


@pytest.mark.parametrize("name", sorted(AUGMENTATIONS))
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_augmentation_eager_and_in_tf_data(name, dtype):
    fn = AUGMENTATIONS[name]
    image = np.random.RandomState(1).randint(0, 256, (40, 30, 3)).astype(np.uint8)
    image = tf.constant(image) if dtype == "uint8" else augment.to_float_image(image)
    if name in ("random_flip", "to_grayscale", "gaussian_blur", "random_blur",
                "color_jitter", "color_jitter_fixed_order", "random_color_jitter"):
        image = augment.to_float_image(image)  # These operate on float images.
    eager = fn(image)
    in_data = next(iter(tf.data.Dataset.from_tensors(image).map(fn)))
    for out in (eager, in_data):
        assert out.dtype == tf.float32
        assert out.shape[-1] == 3
        assert float(tf.reduce_min(out)) >= 0.0 and float(tf.reduce_max(out)) <= 1.0
    assert eager.shape == in_data.shape


def test_batch_random_blur_eager_and_in_tf_function():
    views = [tf.random.uniform([4, 32, 32, 3]), tf.random.uniform([4, 32, 32, 3])]
    eager = augment.batch_random_blur(views, 32, 32)
    graph = tf.function(lambda a, b: augment.batch_random_blur((a, b), 32, 32))(*views)
    for out in (*eager, *graph):
        assert out.shape == (4, 32, 32, 3)
        assert 0.0 <= float(tf.reduce_min(out)) and float(tf.reduce_max(out)) <= 1.0


# ------------------------------------------------------------ crop


def test_the_crop_keeps_the_bicubic_overshoot_for_the_colour_ops_as_the_authors():
    """The authors' crop (`crop_and_resize`, `random_crop_with_resize`) resizes
    bicubically without a clip: the overshoot reaches the flip and the colour ops
    (each clips after itself) and the view's one clip at the end (issue 71: this
    code clipped right after the resize). Evaluation still ends clipped."""
    board = (np.indices((8, 8)).sum(axis=0) % 2).astype(np.float32)  # bicubic overshoots
    image = tf.constant(np.repeat(board[..., None], 3, axis=-1))
    seed = tf.constant([3, 4], tf.int64)
    whole = augment.random_crop_with_resize(image, 24, 24, p=0.0, seed=seed)
    box = augment.crop_and_resize(image, 0, 0, 8, 8, 24, 24)
    for crop in (whole, box):
        assert float(tf.reduce_max(crop)) > 1.05 and float(tf.reduce_min(crop)) < -0.05
    # One view: crop -> flip -> colour (each op clipped) -> the one clip at the end.
    seeds = augment._seeds(seed, 3)  # pylint: disable=protected-access
    want = augment.random_crop_with_resize(image, 24, 24, seed=seeds[0])
    want = augment.random_color_jitter(augment.random_flip(want, seed=seeds[1]), 1.0,
                                       seed=seeds[2])
    np.testing.assert_array_equal(augment.preprocess_for_train(image, 24, 24, seed=seed),
                                  tf.clip_by_value(want, 0.0, 1.0))
    for crop in (True, False):
        view = augment.preprocess_for_eval(image, 24, 24, crop=crop)
        assert float(tf.reduce_min(view)) >= 0.0 and float(tf.reduce_max(view)) <= 1.0


def test_crop_area_and_aspect_ranges_and_distribution():
    size = 256
    image = _coordinate_image(size, size)
    out = _draws(lambda x: augment.random_crop_with_resize(x, 48, 48), image, 3000)
    crop_h, crop_w = _crop_sizes(out, size, size)
    area = crop_h * crop_w / size**2
    aspect = crop_w / crop_h
    # Integer crop sizes and slope estimates allow ~2% slack at the ends.
    assert area.min() >= 0.08 * 0.97 and area.max() <= 1.02
    assert aspect.min() >= 0.75 * 0.97 and aspect.max() <= 4 / 3 * 1.03
    # Both ends of the ranges are actually reached.
    assert (area < 0.2).mean() > 0.05 and (area > 0.8).mean() > 0.05
    assert (aspect < 0.85).mean() > 0.05 and (aspect > 1.2).mean() > 0.05
    # The same distribution as the reference's sampler (two-sample KS, p > 1e-6).
    boxes = _draws(lambda x: tf.cast(tf.image.sample_distorted_bounding_box(
        tf.shape(x), tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
        min_object_covered=0.1, aspect_ratio_range=[0.75, 4 / 3],
        area_range=[0.08, 1.0], max_attempts=100,
        use_image_if_no_bounding_boxes=True)[1][:2], tf.float32), image, 3000)
    ref_area = boxes[:, 0] * boxes[:, 1] / size**2
    ref_aspect = boxes[:, 1] / boxes[:, 0]
    assert scipy.stats.ks_2samp(area, ref_area).pvalue > 1e-6
    assert scipy.stats.ks_2samp(aspect, ref_aspect).pvalue > 1e-6


def test_crop_aspect_is_relative_to_output_shape():
    image = _coordinate_image(256, 256)
    out = _draws(lambda x: augment.random_crop_with_resize(x, 32, 64), image, 1000)
    crop_h, crop_w = _crop_sizes(out, 256, 256)
    aspect = crop_w / crop_h
    # 3/4 .. 4/3 times the output's w/h = 2 (or the whole image as fallback).
    fallback = np.abs(aspect - 1.0) < 0.02
    assert fallback.mean() < 0.2
    assert aspect[~fallback].min() >= 1.5 * 0.97
    assert aspect[~fallback].max() <= 8 / 3 * 1.03


def test_flip_rate_in_preprocess_for_train():
    image = _coordinate_image(16, 16)
    out = _draws(lambda x: augment.preprocess_for_train(
        x, 16, 16, crop=False, color_distort=False), image)
    flipped = out[:, 8, 0, 0] > out[:, 8, -1, 0]
    assert abs(flipped.mean() - 0.5) < _bound(0.5)
    # Unflipped outputs are the input itself (no crop, same size).
    np.testing.assert_allclose(out[~flipped][0], image, atol=1e-5)


def test_eval_center_crop_geometry():
    image = _coordinate_image(100, 200)
    out = augment.preprocess_for_eval(image, 64, 64).numpy()[np.newaxis]
    crop_h, crop_w = _crop_sizes(out, 100, 200)
    # 0.875 of the shorter side (100 -> 87.5, rounded to even 88), square.
    np.testing.assert_allclose([crop_h[0], crop_w[0]], [88, 88], rtol=0.02)
    # Centred.
    np.testing.assert_allclose(out[0, 31:33, 31:33, :2].mean(axis=(0, 1)), [0.5, 0.5],
                               atol=0.01)
    whole = augment.preprocess_for_eval(image, 32, 32, crop=False).numpy()[np.newaxis]
    crop_h, crop_w = _crop_sizes(whole, 100, 200)
    np.testing.assert_allclose([crop_h[0], crop_w[0]], [100, 200], rtol=0.02)


def test_eval_center_crop_rule_is_explicit():
    assert augment.SMALL_IMAGE_MAX_SIZE == 32
    assert not augment.eval_center_crop_enabled(32)
    assert augment.eval_center_crop_enabled(33)
    assert augment.eval_center_crop_enabled(224)


# ------------------------------------------------------------ colour


def test_jitter_rate_08_and_grayscale_rate_02(rgb_image):
    out = _draws(lambda x: augment.random_color_jitter(x, 1.0), rgb_image)
    gray = np.ptp(out, axis=-1).max(axis=(1, 2)) < 1e-6
    plain_gray = augment.to_grayscale(rgb_image).numpy()
    unchanged = np.where(
        gray, np.abs(out - plain_gray).max(axis=(1, 2, 3)) < 1e-6,
        np.abs(out - rgb_image).max(axis=(1, 2, 3)) < 1e-6)
    assert abs(gray.mean() - 0.2) < _bound(0.2)
    assert abs((~unchanged).mean() - 0.8) < _bound(0.8)
    # Independence: jitter happens at the same rate with and without grayscale.
    assert abs((~unchanged[gray]).mean() - 0.8) < _bound(0.8, gray.sum())


def test_strength_zero_turns_all_colour_distortion_off_grayscale_included(rgb_image):
    """The authors skip the whole colour distortion at strength 0 (a colour-strength
    ablation's 0 point): no view is jittered or grey, crops and flips are unchanged."""
    seeds = [tf.constant([i, 3], tf.int64) for i in range(300)]
    zero = np.stack([augment.preprocess_for_train(rgb_image, 8, 8, color_jitter_strength=0.0,
                                                  seed=seed).numpy() for seed in seeds])
    plain = np.stack([augment.preprocess_for_train(rgb_image, 8, 8, color_distort=False,
                                                   seed=seed).numpy() for seed in seeds])
    np.testing.assert_array_equal(zero, plain)
    assert (np.ptp(zero, axis=-1).max(axis=(1, 2)) > 1e-3).all()  # none grey


@pytest.mark.parametrize("impl", ["simclrv1", "simclrv2"])
def test_brightness_additive_v1_multiplicative_v2(impl):
    image = np.array([[[0.2, 0.2, 0.2], [0.6, 0.6, 0.6]]], np.float32)
    out = _draws(lambda x: augment.random_brightness(x, 0.8, impl=impl), image)
    low, high = out[:, 0, 0, 0], out[:, 0, 1, 0]
    if impl == "simclrv1":
        delta = low - 0.2
        np.testing.assert_allclose(high - 0.6, delta, atol=1e-5)  # additive
        assert delta.min() >= -0.8 - 1e-6 and delta.max() <= 0.8 + 1e-6
        assert delta.min() < -0.75 and delta.max() > 0.75
        assert abs(delta.mean()) < 5 * 0.8 / math.sqrt(3 * N)
    else:
        factor = low / 0.2
        np.testing.assert_allclose(high / 0.6, factor, rtol=1e-5)  # multiplicative
        assert factor.min() >= 0.2 - 1e-6 and factor.max() <= 1.8 + 1e-6
        assert factor.min() < 0.25 and factor.max() > 1.75
        assert abs(factor.mean() - 1.0) < 5 * 0.8 / math.sqrt(3 * N)


def test_brightness_v2_factor_never_negative():
    image = np.full([1, 1, 3], 0.5, np.float32)
    out = _draws(lambda x: augment.random_brightness(x, 1.2, impl="simclrv2"), image, 2000)
    assert out.min() >= 0.0
    assert (out == 0.0).mean() == 0.0 and out.min() < 0.5 * 0.05


def _hsv(x):
    return tf.image.rgb_to_hsv(x).numpy()


def test_contrast_saturation_hue_ranges(rgb_image):
    s = 1.0
    # Each op alone (the others at strength 0) through color_jitter_nonrand.
    contrast = _draws(lambda x: augment.color_jitter_nonrand(x, contrast=0.8 * s),
                      rgb_image, 2000)
    mean = rgb_image.mean(axis=(0, 1))
    factor = ((contrast - mean) / (rgb_image - mean))[:, 0, 0, 0]
    unclipped = (contrast > 0).all(axis=(1, 2, 3)) & (contrast < 1).all(axis=(1, 2, 3))
    assert factor[unclipped].min() >= 0.2 - 1e-3 and factor.max() <= 1.8 + 1e-3
    assert factor.min() < 0.3

    saturation = _draws(lambda x: augment.color_jitter_nonrand(x, saturation=0.8 * s),
                        rgb_image, 2000)
    sat_factor = _hsv(saturation)[:, 0, 0, 1] / _hsv(rgb_image)[0, 0, 1]
    assert sat_factor.min() >= 0.2 - 1e-3 and sat_factor.min() < 0.3

    hue = _draws(lambda x: augment.color_jitter_nonrand(x, hue=0.2 * s), rgb_image, 2000)
    shift = (_hsv(hue)[:, 0, 0, 0] - _hsv(rgb_image)[0, 0, 0] + 0.5) % 1.0 - 0.5
    assert np.abs(shift).max() <= 0.2 + 1e-3 and np.abs(shift).max() > 0.18


def test_color_jitter_order_is_a_fresh_permutation_per_image(monkeypatch):
    # Replace the four ops by markers that write their index into the image, so the
    # output spells out the order they ran in.
    def marker(k):
        return lambda x, seed: x * 10.0 + float(k + 1)

    monkeypatch.setattr(color, "_jitter_ops", lambda *a: [marker(k) for k in range(4)])
    out = _draws(lambda x: augment.color_jitter_rand(x), np.zeros([1, 1, 3], np.float32),
                 2400)
    codes = np.rint(out[:, 0, 0, 0]).astype(int)
    counts = {p: 0 for p in itertools.permutations("1234")}
    for code in codes:
        counts[tuple(str(code))] += 1
    expected = 2400 / 24
    for count in counts.values():
        assert abs(count - expected) < 5 * math.sqrt(expected)


def test_views_are_independent_under_a_global_seed(rgb_image):
    # Regression: stateful random ops inside tf.cond branches replay the same numbers
    # in identically built branches once tf.random.set_seed is called (the fixture
    # does), so two views built in one map function shared their colour jitter.
    def two_views(x):
        return tf.stack([augment.random_color_jitter(x, 1.0, jitter_probability=1.0),
                         augment.random_color_jitter(x, 1.0, jitter_probability=1.0)])

    out = _draws(two_views, rgb_image, 200)
    same = np.abs(out[:, 0] - out[:, 1]).max(axis=(1, 2, 3)) < 1e-6
    # Equal only when both happen to be grayscale of jitters that agree: never.
    assert same.mean() == 0.0


def test_explicit_seed_is_reproducible(rgb_image):
    seed = tf.constant([3, 4], tf.int64)
    a = augment.preprocess_for_train(rgb_image, 16, 16, seed=seed)
    b = augment.preprocess_for_train(rgb_image, 16, 16, seed=seed)
    c = augment.preprocess_for_train(rgb_image, 16, 16, seed=tf.constant([3, 5], tf.int64))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert np.abs(a.numpy() - c.numpy()).max() > 0
    views = [tf.random.uniform([8, 32, 32, 3]), tf.random.uniform([8, 32, 32, 3])]
    first = augment.batch_random_blur(views, 32, 32, seed=seed)
    second = augment.batch_random_blur(views, 32, 32, seed=seed)
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_grayscale_has_equal_channels(rgb_image):
    gray = augment.to_grayscale(rgb_image).numpy()
    assert gray.shape == rgb_image.shape
    np.testing.assert_allclose(gray[..., 0], gray[..., 1])
    np.testing.assert_allclose(gray[..., 0], gray[..., 2])


# ------------------------------------------------------------ blur


def test_blur_kernel_sizes():
    assert augment.blur_kernel_size(224) == 23
    assert augment.blur_kernel_size(32) == 3
    assert augment.blur_kernel_size(96) == 9


@pytest.mark.parametrize("image_size,support", [(224, 23), (32, 3)])
def test_blur_support_matches_kernel_size(image_size, support):
    delta = np.zeros([41, 41, 3], np.float32)
    delta[20, 20] = 1.0
    out = augment.gaussian_blur(delta, augment.blur_kernel_size(image_size), 50.0).numpy()
    rows, cols = np.nonzero(out[..., 0])
    assert rows.max() - rows.min() + 1 == support
    assert cols.max() - cols.min() + 1 == support


def _numpy_kernel(sigma, size):
    x = np.arange(size) - size // 2
    k = np.exp(-x**2 / (2 * sigma**2))
    return k / k.sum()


def test_gaussian_blur_of_delta_equals_numpy_kernel():
    delta = np.zeros([1, 31, 31, 3], np.float32)
    delta[0, 15, 15] = 1.0
    out = augment.gaussian_blur(delta, 23, 1.7).numpy()[0]
    k = _numpy_kernel(1.7, 23)
    expected = np.zeros([31, 31])
    expected[4:27, 4:27] = np.outer(k, k)
    for c in range(3):
        np.testing.assert_allclose(out[..., c], expected, atol=1e-7)


def _sigma_from_profile(image):
    """Sigma of a blurred delta from its centre row: k1 / k0 = exp(-1 / (2 sigma^2))."""
    c = image.shape[0] // 2
    ratio = image[c, c + 1, 0] / image[c, c, 0]
    return math.sqrt(-1.0 / (2.0 * math.log(ratio)))


@pytest.mark.large  # 11 s
def test_batch_random_blur_rate_sigma_range_and_kernel():
    num_tensors, per_tensor, size = 100, 100, 11
    delta = np.zeros([per_tensor, size, size, 3], np.float32)
    delta[:, size // 2, size // 2] = 1.0
    views = [tf.constant(delta)] * num_tensors
    blur = tf.function(lambda v: augment.batch_random_blur(v, 32, 32))
    outs = [o.numpy() for o in blur(views)]
    blurred_rates, sigmas = [], []
    for out in outs:
        changed = np.abs(out - delta).max(axis=(1, 2, 3)) > 0
        if not changed.any():
            continue  # sigma so small (< ~0.15) that the blur is the identity in float32
        blurred_rates.append(changed.mean())
        one = out[np.argmax(changed)]
        sigma = _sigma_from_profile(one)
        sigmas.append(sigma)
        # The whole blurred image is the 3-tap numpy kernel of that sigma (one sigma
        # for every image of the tensor).
        k = _numpy_kernel(sigma, 3)
        expected = np.zeros([size, size])
        expected[size // 2 - 1:size // 2 + 2, size // 2 - 1:size // 2 + 2] = np.outer(k, k)
        np.testing.assert_allclose(one[..., 0], expected, atol=1e-5)
        np.testing.assert_allclose(out[changed], np.broadcast_to(one, out[changed].shape),
                                   atol=1e-7)
    assert len(sigmas) > 0.9 * num_tensors
    rate = np.mean(blurred_rates)
    assert abs(rate - 0.5) < _bound(0.5, len(blurred_rates) * per_tensor)
    sigmas = np.array(sigmas)
    assert sigmas.min() >= 0.1 - 1e-3 and sigmas.max() <= 2.0 + 1e-3
    # Roughly U(0.1, 2): mean 1.05, sd 0.55; the undetectable smallest sigmas shift the
    # mean up by < 0.01.
    assert abs(sigmas.mean() - 1.05) < 5 * 0.55 / math.sqrt(len(sigmas))
    assert sigmas.max() > 1.8 and sigmas.min() < 0.4


def test_batch_random_blur_uses_23_taps_at_224():
    delta = np.zeros([2, 41, 41, 3], np.float32)
    delta[:, 20, 20] = 1.0
    outs = augment.batch_random_blur([tf.constant(delta)] * 20, 224, 224,
                                     blur_probability=1.0)
    checked = 0
    for out in outs:
        out = out.numpy()[0]
        if np.abs(out - delta[0]).max() == 0:
            continue
        sigma = _sigma_from_profile(out)
        k = _numpy_kernel(sigma, 23)
        expected = np.zeros([41, 41])
        expected[9:32, 9:32] = np.outer(k, k)
        np.testing.assert_allclose(out[..., 0], expected, atol=1e-6)
        checked += sigma > 1.0  # where 23 taps differ measurably from fewer
    assert checked > 0


# ------------------------------------------------------------ argument checks


@pytest.mark.parametrize("call,match", [
    (lambda x: augment.preprocess_for_train(x, 0, 32), "height"),
    (lambda x: augment.preprocess_for_train(x, 32, 32, impl="v3"), "impl"),
    (lambda x: augment.preprocess_for_train(x, 32, 32, color_jitter_strength=2.0),
     "color_jitter_strength"),
    (lambda x: augment.random_apply(tf.identity, 1.5, x), "p"),
    (lambda x: augment.gaussian_blur(x, 4, 1.0), "kernel_size"),
    (lambda x: augment.batch_random_blur(x, 32, 32), "images_list"),
    (lambda x: augment.batch_random_blur([x], 32, 32, blur_probability=-0.1),
     "blur_probability"),
    (lambda x: augment.center_crop(x, 32, 32, crop_proportion=0.0), "crop_proportion"),
])
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(tf.zeros([8, 8, 3]))


def test_view_seed_folds_seed_step_replica_and_chunk_in_this_order():
    # The derivation every run since the first release used (resumed runs and both
    # passes of gradient caching rely on it): fold_in([seed, 1], step), replica, chunk.
    # The folded values are int64: fold_in hashes with the dtype of its data.
    def fold(seed, value):
        return tf.random.experimental.stateless_fold_in(seed, tf.constant(value, tf.int64))

    expected = fold(fold(tf.constant([3, 1], tf.int64), 5), 1)
    np.testing.assert_array_equal(augment.view_seed(3, 5, 1), expected)
    np.testing.assert_array_equal(augment.view_seed(3, 5, 1, 2), fold(expected, 2))
    np.testing.assert_array_equal(augment.view_seed(3, tf.constant(5), tf.constant(1, tf.int32)),
                                  expected)
    seeds = {tuple(augment.view_seed(3, step, replica, chunk).numpy())
             for step in (0, 1) for replica in (0, 1) for chunk in (None, 0, 1)}
    assert len(seeds) == 12


def test_step_views_take_or_draw_the_views_then_blur_them_with_the_steps_seed():
    # The one place a pretraining batch's images become its views (both data paths).
    from simclr_tf.method import train
    rng = np.random.default_rng(0)
    view1, view2 = (tf.constant(rng.random([2, 32, 32, 3]), tf.float32) for _ in range(2))
    blur = functools.partial(augment.batch_random_blur, height=32, width=32,
                             blur_probability=1.0)
    host = train.StepOptions(blur_fn=blur, seed=3).views
    assert not host.drawn_in_step
    got = host((view1, view2), step=5, replica=1, chunk=2)
    expected = blur([view1, view2], seed=augment.view_seed(3, 5, 1, 2))
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(got[0], view1)  # blurred (p = 1, a 3-tap kernel at 32 px)
    # On the device the views are drawn from the sources first; no blur: as drawn.
    drawn = train.StepOptions(view_fn=lambda sources: (sources * 0.5, sources * 0.25)).views
    assert drawn.drawn_in_step
    got = drawn(view1, step=0, replica=0)
    np.testing.assert_array_equal(got[0], view1 * 0.5)
    np.testing.assert_array_equal(got[1], view1 * 0.25)
    with pytest.raises(TypeError, match="views"):
        train.StepOptions(views=host)
