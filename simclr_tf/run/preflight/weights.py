"""Preflight: weights that load into the model the flags describe: a checkpoint TensorFlow
can read, a released model's inferred architecture and its supervised head's input,
and our run's recorded architecture against the flags.
"""
from simclr_tf.config import rules
from simclr_tf.weights import checkpoints, official
from simclr_tf.config import ConfigError, architecture_mismatches


def _check_checkpoint_readable(prefix, flag="checkpoint"):
    """The checkpoint at `prefix` must be one TensorFlow can read
    (`checkpoints.unreadable_reason`: index, data files, none short)."""
    reason = checkpoints.unreadable_reason(prefix)
    if reason is not None:
        raise ConfigError(flag, f"{prefix!r} cannot be read ({reason}); pass an "
                          "intact checkpoint prefix, run directory or SavedModel.")


def check_official_architecture(config):
    """The authors' released model at --checkpoint must match the flags' model."""
    try:
        info = official.inspect_official(config.checkpoint)
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError("checkpoint", f"cannot import the released model: {error}") from None
    mismatched = architecture_mismatches(config, info.config)
    if mismatched:
        raise ConfigError("checkpoint", f"{config.checkpoint!r} is a released model whose "
                          f"architecture needs {' '.join(mismatched)} (the flags say "
                          "otherwise); pass those flags.")
    return info


_SELECTOR_SOURCES = {"widths": "the width it reads says so",
                     "graph": "its saved_model.pb's graph says so"}


def _check_official_selector(config, mode, num_classes, info):
    """A released supervised head that loads must read the layer it was trained on:
    --ft_proj_selector equals the one the model tells (`official.inspect_official`),
    or is given when the model cannot tell."""
    released_classes = info.config["num_classes"]
    head_loads = (released_classes is not None and
                  config.model_kwargs(num_classes)["num_classes"] == released_classes and
                  not (mode.trains and config.zero_init_logits_layer))
    if not head_loads:
        return
    if not info.ft_proj_selector_inferred:
        if not config.is_given("ft_proj_selector"):
            raise ConfigError("ft_proj_selector", official.selector_unknown_message(
                config.checkpoint, info.config) + " Pass --ft_proj_selector=N, or "
                "--zero_init_logits_layer to train a fresh head.")
        return
    layers = rules.num_head_layers(info.config["proj_head_mode"],
                                   info.config["num_proj_layers"])
    released = info.config["ft_proj_selector"] % (layers + 1)
    if config.ft_proj_selector % (layers + 1) != released:
        raise ConfigError("ft_proj_selector", f"is {config.ft_proj_selector}, but the "
                          f"supervised head of the released model {config.checkpoint!r} "
                          f"reads projection output {info.config['ft_proj_selector']} "
                          f"({_SELECTOR_SOURCES[info.ft_proj_selector_source]}); pass "
                          f"--ft_proj_selector={info.config['ft_proj_selector']}, or "
                          "--zero_init_logits_layer to train a fresh head on the other "
                          "layer.")


def _check_recorded_architecture(config, weights, flag):
    """Our checkpoint at `weights` must fit the flags' model, when its run's flags.json
    says what model wrote it (else loading checks, after the build)."""
    recorded = checkpoints.recorded_run_config(weights)
    if recorded is None:
        return
    mismatched = architecture_mismatches(config, recorded.model_kwargs(), headless_ok=True)
    if mismatched:
        raise ConfigError(flag, f"{weights.prefix!r} was written by a model of another "
                          "architecture (its run's flags.json records it): pass "
                          f"{' '.join(mismatched)} (the flags say otherwise).")
