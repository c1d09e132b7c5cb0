"""Which flags decide a model's variables, and whether a recorded model matches."""
from simclr_tf import variants
from simclr_tf.errors import ConfigError


# The flags that decide a model's variables -> its `Config.model_kwargs()` key: what a
# checkpoint must agree with (the projection head's only where it has one).
ARCHITECTURE_FLAGS = dict(
    encoder="encoder", resnet_depth="depth", width_multiplier="width_multiplier",
    sk_ratio="sk_ratio", se_ratio="se_ratio", stem="stem", proj_head_mode="proj_head_mode",
    proj_out_dim="proj_out_dim", num_proj_layers="num_proj_layers")
HEAD_FLAGS = ("proj_head_mode", "proj_out_dim", "num_proj_layers")
RESNET_FLAGS = ("resnet_depth", "width_multiplier", "sk_ratio", "se_ratio", "stem")


def architecture_mismatches(config, recorded, *, headless_ok=False):
    """The flags of `config` whose model differs from the `recorded` one.

    Args:
        config: a Config.
        recorded: `SimCLRModel` keyword arguments of the model that wrote the weights
            (`Config.model_kwargs()` of its run, or a released model's inferred ones).
        headless_ok: a model without projection head (--proj_head_mode=none) may take
            the weights (the head's are simply not read).

    Returns:
        `['--resnet_depth=50', ...]`: each differing flag with the recorded value.
    """
    ours = config.model_kwargs()
    flags = dict(ARCHITECTURE_FLAGS)
    ours.setdefault("encoder", "resnet")
    recorded = dict(recorded)
    recorded.setdefault("encoder", "resnet")  # records from before --encoder
    if ours["encoder"] != "resnet" and recorded["encoder"] == ours["encoder"]:
        flags = {flag: key for flag, key in flags.items() if flag not in RESNET_FLAGS}
    if recorded.get("proj_head_mode") != "nonlinear":
        del flags["num_proj_layers"]  # only a nonlinear head has hidden layers
    if recorded.get("proj_head_mode") == "none":
        del flags["proj_out_dim"]
    if headless_ok and ours["proj_head_mode"] == "none":
        flags = {flag: key for flag, key in flags.items() if flag not in HEAD_FLAGS}
    return [f"--{flag}={recorded[key]}" for flag, key in flags.items()
            if key in recorded and not _same(ours[key], recorded[key])]


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return float(a) == float(b)


# The flags a --variant sets -> its `variants.parse_variant` key.
VARIANT_FLAGS = dict(resnet_depth="depth", width_multiplier="width_multiplier",
                     sk_ratio="sk_ratio")


def check_variant_flags(variant, given):
    """Raises ConfigError unless `variant` parses and agrees with `given`.

    Args:
        variant: a --variant name such as 'r50_1x_sk1'.
        given: {flag: value} of the VARIANT_FLAGS also set (e.g. {'sk_ratio': 0.0}).
    """
    try:
        parsed = variants.parse_variant(variant)
    except ValueError as error:
        raise ConfigError("variant", str(error)) from None
    for flag, value in given.items():
        if value != parsed[VARIANT_FLAGS[flag]]:
            raise ConfigError("variant", f"{variant} means --{flag}="
                              f"{parsed[VARIANT_FLAGS[flag]]}, but --{flag}={value} was "
                              "also given; drop one.")
