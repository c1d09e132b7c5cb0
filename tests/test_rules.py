"""simclr_tf.config.rules: each value rule defined once, for the flags and the library alike."""
import pytest

from simclr_tf.config import rules
from simclr_tf.config import Config, ConfigError

# (rule, good arguments, bad arguments, the argument the message names)
CASES = [
    (rules.check_temperature, (0.1,), (0.0,), "temperature"),
    (rules.check_temperature, (0.5,), (float("nan"),), "temperature"),
    (rules.check_weight_decay, (0.0,), (-1e-6,), "weight_decay"),
    (rules.check_num_proj_layers, ("nonlinear", 1), ("nonlinear", 0), "num_proj_layers"),
    (rules.check_num_proj_layers, ("none", 0), ("nonlinear", -1), "num_proj_layers"),
    (rules.check_ft_proj_selector, ("nonlinear", 3, -4), ("nonlinear", 3, 4),
     "ft_proj_selector"),
    (rules.check_ft_proj_selector, ("none", 3, 0), ("none", 3, 1), "ft_proj_selector"),
    (rules.check_fine_tune_after_block, (4,), (5,), "fine_tune_after_block"),
    (rules.check_grad_cache_chunk, (0,), (-1,), "grad_cache_chunk"),
    (rules.check_grad_cache_chunk, (8, 16), (32, 16), "grad_cache_chunk"),
    (rules.check_momentum, (0.0,), (1.0,), "momentum"),
    (rules.check_width_multiplier, (0.25,), (0,), "width_multiplier"),
    (rules.check_ratio, ("sk_ratio", 0.0625), ("sk_ratio", -0.1), "sk_ratio"),
    (rules.check_ratio, ("se_ratio", 1.0), ("se_ratio", 5.0), "se_ratio"),
    (rules.check_float32, ("learning_rate", 3.4e38), ("learning_rate", 1e45), "learning_rate"),
    (rules.check_float32, ("momentum", -0.5), ("momentum", float("nan")), "momentum"),
    (rules.check_float32, ("momentum", 0.9), ("momentum", float("-inf")), "momentum"),
    (rules.check_contrastive_batch_size, (2,), (1,), "train_batch_size"),
    (rules.check_image_size, (8, "cifar"), (7, "cifar"), "image_size"),
    (rules.check_image_size, (32, "imagenet"), (31, "imagenet"), "image_size"),
    (rules.check_proj_out_dim, (128,), (0,), "proj_out_dim"),
    (rules.check_label_fraction, (1.0,), (0.0,), "label_fraction"),
    (rules.check_knn_k, (200,), (0,), "k"),
    (rules.check_knn_temperature, (0.07,), (-1.0,), "temperature"),
    # Temperatures whose inverse overflows float32 (issue 34 item 9).
    (rules.check_temperature, (3e-39,), (1e-40,), "temperature"),
    (rules.check_distill_temperature, (1.0,), (1e-40,), "distill_temperature"),
    (rules.check_distill_temperature, (3e-39,), (2e-39,), "distill_temperature"),
    # kNN votes exp(cos / t), summed over k: beyond float32 below ~1 / ln(max / k).
    (rules.check_knn_temperature, (0.012, 200), (0.0119, 200), "temperature"),
    (rules.check_knn_temperature, (0.0113,), (0.0112,), "temperature"),
    (rules.check_color_jitter_strength, (1.25,), (1.3,), "color_jitter_strength"),
    (rules.check_color_jitter_impl, ("simclrv1",), ("v3",), "impl"),
    (rules.check_serving_max_pixels, (0,), (-1,), "serving_max_pixels"),
    (rules.check_serving_max_pixels, (40_000_000,), (1.5e7,), "serving_max_pixels"),
]


@pytest.mark.parametrize("rule, good, bad, name", CASES,
                         ids=[f"{c[0].__name__}{c[2]}" for c in CASES])
def test_rule_accepts_good_values_and_names_the_bad_one(rule, good, bad, name):
    rule(*good)
    with pytest.raises(ValueError, match=rf"Received: {name}="):
        rule(*bad)


@pytest.mark.parametrize("flag, value, rule, arguments", [
    ("temperature", 0.0, rules.check_temperature, (0.0,)),
    ("ft_proj_selector", 4, rules.check_ft_proj_selector, ("nonlinear", 3, 4)),
    ("color_jitter_strength", 2.0, rules.check_color_jitter_strength, (2.0,)),
    ("momentum", 1.5, rules.check_momentum, (1.5,)),
    ("serving_max_pixels", -1, rules.check_serving_max_pixels, (-1,)),
])
def test_the_flag_error_is_the_rule_error(flag, value, rule, arguments):
    with pytest.raises(ValueError) as expected:
        rule(*arguments)
    with pytest.raises(ConfigError) as info:
        Config.from_dict({flag: value, "model_dir": "/tmp/unused"}).validate()
    assert info.value.flag == flag
    assert str(info.value) == f"--{flag}: " + str(expected.value)[len(flag) + 1:]


def test_the_library_raises_the_same_error():
    from simclr_tf.models.heads import ProjectionHead  # pylint: disable=import-outside-toplevel
    with pytest.raises(ValueError) as expected:
        rules.check_ft_proj_selector("nonlinear", 3, 4)
    with pytest.raises(ValueError) as info:
        ProjectionHead("nonlinear", 3, 128, ft_proj_selector=4)
    assert str(info.value) == str(expected.value)


def test_float32_range_is_float32_rounding():
    rules.check_float32("x", rules.FLOAT32_MAX)
    rules.check_float32("x", 3.4028235e38)  # rounds down to the largest float32
    with pytest.raises(ValueError):
        rules.check_float32("x", 3.4028236e38)  # rounds up to inf
    rules.check_float32("x", 1e-50)  # underflows to 0: finite, left to the value rules


def test_stems_and_their_minimum_image_size():
    assert rules.resolve_stem("auto", 32) == "cifar"
    assert rules.resolve_stem("auto", 33) == "imagenet"
    assert rules.resolve_stem("imagenet", 8) == "imagenet"
    with pytest.raises(ValueError, match="--stem=cifar"):
        rules.check_image_size(16, "imagenet")  # the message names the other stem


@pytest.mark.parametrize("flag", ["temperature", "distill_temperature", "knn_temperature"])
def test_every_temperature_flag_refuses_an_inverse_beyond_float32(flag):
    """--distill_temperature=1e-40 was accepted and the first step's loss was NaN: 1e40
    is inf in float32. Every temperature flag is refused in validation instead, naming
    itself."""
    with pytest.raises(ConfigError) as info:
        Config.from_dict({flag: 1e-40, "model_dir": "/tmp/unused"}).validate()
    assert info.value.flag == flag and "overflows float32" in str(info.value)


def test_the_float32_limit_of_a_temperature_is_its_inverse():
    """The smallest accepted temperature: its inverse is the largest float32, within
    rounding (what TensorFlow holds)."""
    smallest = 1.0 / rules.FLOAT32_MAX
    rules.check_temperature(smallest * (1 + 1e-7))
    with pytest.raises(ValueError):
        rules.check_temperature(smallest * (1 - 1e-7))


def test_knn_votes_at_the_smallest_temperature_stay_finite():
    """At the smallest knn temperature the rule allows for k, k votes of the largest
    cosine sum to a finite float32 (and one step below, they do not)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    k = 200
    smallest = 1.0 / (np.log(rules.FLOAT32_MAX) - np.log(k))
    with np.errstate(over="ignore"):
        assert np.isfinite(np.float32(k) * np.exp(np.float32(1.0 / (smallest * 1.0001))))
        assert not np.isfinite(np.float32(k) * np.exp(np.float32(1.0 / (smallest * 0.999))))
    rules.check_knn_temperature(smallest * 1.0001, k)
    with pytest.raises(ValueError):
        rules.check_knn_temperature(smallest * 0.999, k)
