"""Loading a released model: its variables copied into a built `SimCLRModel`, strictly
both ways, or the model built from the inferred architecture and loaded."""
import logging

import tensorflow as tf

from simclr_tf.models.simclr import SimCLRModel
from simclr_tf.weights.official.infer import inspect_official, selector_unknown_message
from simclr_tf.weights.official.names import read_official_names
from simclr_tf.weights.official.roles import official_roles, our_roles

logger = logging.getLogger(__name__)

def load_official_weights(model, path, supervised_head=True):
    """Copies every variable of a released model into a built `SimCLRModel`.

    Strict both ways: each checkpoint variable must land on one of our variables with
    the same shape, and each of our variables (BN moving statistics included) must be
    filled. The only exception is the supervised head when `supervised_head=False`:
    then neither the checkpoint's nor the model's head is touched (fine-tuning on
    another label set).

    Args:
        model: a built `SimCLRModel` whose architecture matches the checkpoint
            (`inspect_official(path).config` gives it).
        path: the released SavedModel directory (see `checkpoint_prefix`).
        supervised_head: also load the supervised (logits) head.

    Returns:
        The number of variables assigned.

    Raises:
        FileNotFoundError: no checkpoint at `path`.
        ValueError: naming every variable that is missing, left over or mis-shaped.
    """
    prefix, names = read_official_names(path)
    official, _ = official_roles(names)
    ours = our_roles(model)
    if not supervised_head:
        official = {k: v for k, v in official.items() if k[0] != "supervised"}
        ours = {k: v for k, v in ours.items() if k[0] != "supervised"}
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    missing = sorted(ours[k].path for k in set(ours) - set(official))
    unused = sorted(official[k] for k in set(official) - set(ours))
    mismatched = [
        f"{official[k]} {tuple(shapes[names[official[k]]])} -> {ours[k].path} "
        f"{tuple(ours[k].shape)}"
        for k in sorted(set(ours) & set(official), key=str)
        if tuple(shapes[names[official[k]]]) != tuple(ours[k].shape)]
    if missing or unused or mismatched:
        raise ValueError(
            f"The released model at {prefix!r} does not fit this SimCLRModel "
            f"({model.get_config()}); build it from inspect_official(path).config.\n"
            f"  our variables with no counterpart ({len(missing)}): {missing[:10]}\n"
            f"  checkpoint variables left over ({len(unused)}): {unused[:10]}\n"
            f"  shape mismatches ({len(mismatched)}): {mismatched[:10]}")
    for key, variable in ours.items():
        value = reader.get_tensor(names[official[key]])
        variable.assign(value.astype(variable.dtype))
    skipped = len(names) - len(official)
    expected_skipped = 0 if supervised_head else sum(
        1 for full in names if full.startswith("head_supervised/"))
    if skipped != expected_skipped:  # count check: nothing else may stay behind
        raise ValueError(f"{skipped} checkpoint variables were not loaded, expected "
                         f"{expected_skipped}.")
    logger.info("Loaded %d of %d variables from %s%s.", len(ours), len(names), prefix,
                "" if supervised_head else " (supervised head skipped)")
    return len(ours)


def load_official(path, **overrides):
    """Builds our `SimCLRModel` for a released model and loads all its variables.

    Args:
        path: a released SavedModel directory, its `variables/` folder or the
            checkpoint prefix.
        **overrides: `SimCLRModel` arguments replacing the inferred ones. Typical:
            `ft_proj_selector` (which head layer feeds the supervised head; read
            from the input width or the SavedModel's graph, and required when
            neither tells: see `OfficialModelInfo.ft_proj_selector_source`),
            `supervised_head_stop_gradient`, `batch_norm_decay`,
            `global_bn`, `dtype`, `name`. `num_classes` different from the
            checkpoint's (None drops the head) gives a fresh supervised head that is
            not loaded. Architecture arguments (depth, width...) that contradict the
            checkpoint raise ValueError.

    Returns:
        A built `SimCLRModel` with every variable of the checkpoint.

    Raises:
        FileNotFoundError: no checkpoint at `path`.
        ValueError: anything in the checkpoint our model cannot hold, or a
            supervised head to load whose input layer nothing tells (pass
            `ft_proj_selector`).
    """
    info = inspect_official(path)
    config = dict(info.config)
    load_head = config["num_classes"] is not None and (
        "num_classes" not in overrides or overrides["num_classes"] == config["num_classes"])
    if load_head and not info.ft_proj_selector_inferred and \
            "ft_proj_selector" not in overrides:
        raise ValueError(selector_unknown_message(path, config) +
                         " Pass ft_proj_selector=..., or num_classes=None to "
                         "leave the supervised head out.")
    config.update(overrides)
    model = SimCLRModel(**config)
    model.build((None, None, None, 3))
    load_official_weights(model, info.prefix, supervised_head=load_head)
    return model
