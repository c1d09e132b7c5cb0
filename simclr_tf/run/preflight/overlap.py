"""Preflight: the splits each evaluation of a run compares (`evaluated_pairs`) and the
refusal of an evaluation whose split shares examples with what trained the weights,
fills the kNN bank or fits the probe (`check_eval_overlap`, unless
--allow_eval_overlap; `simclr_tf.evaluation.overlap` counts the shared examples).
"""
import numpy as np
import tensorflow as tf
from absl import logging

from simclr_tf.config import run_dirs
from simclr_tf.weights import checkpoints
from simclr_tf.config import ConfigError
from simclr_tf.data import folders
from simclr_tf.evaluation import overlap
from simclr_tf.config.tables import evaluators as evaluator_table


def knn_bank_split(config):
    return config.knn_bank_split or config.train_split


def evaluated_pairs(config, mode):
    """(train flag, train split, eval flag, eval split, what trained) of each
    evaluation this run makes: the split that trained the weights (or fills a kNN
    bank, or fits a probe) against the split the accuracy is measured on.

    - the kNN evaluator (pretraining's monitor, or named by --evaluators):
      --train_split (and --knn_bank_split, the bank) against --knn_eval_split;
    - a training run that evaluates on --eval_split (train_then_eval, the
      distillation monitor, --final_linear_probe): --train_split against it;
    - --mode=eval and --mode=linear_probe: --train_split (the probe's, and in eval
      the run's) against --eval_split, whichever evaluators measure on it (the
      supervised head, --evaluators=linear_probe); the split that trained the
      weights read is compared with every evaluated split by `check_eval_overlap`,
      from the run's flags.json.
    """
    pairs = []
    run = evaluator_table.resolve(config)
    head = "supervised" in run.at_checkpoint  # `evaluator_table.evaluates_head`
    if "knn" in run.training + run.at_checkpoint:
        pairs.append(("train_split", config.train_split, "knn_eval_split",
                      config.knn_eval_split,
                      "the pretraining data" if mode.trains else "the kNN bank"))
        if knn_bank_split(config) != config.train_split:
            pairs.append(("knn_bank_split", config.knn_bank_split, "knn_eval_split",
                          config.knn_eval_split, "the kNN bank"))
    if mode.trains:
        monitors_eval_split = any("eval_split" in evaluator_table.row(name).splits
                                  for name in run.training)
        if config.eval_split and (head or config.final_linear_probe
                                  or monitors_eval_split):
            pairs.append(("train_split", config.train_split, "eval_split",
                          config.eval_split, "the training data"))
    elif config.eval_split and (head or "eval_split" in mode.labelled_splits or any(
            "eval_split" in evaluator_table.row(name).splits for name in run.at_checkpoint)):
        probes = "train_split" in mode.labelled_splits or any(
            "train_split" in evaluator_table.row(name).splits for name in run.at_checkpoint)
        what = "the probe's training data and the kNN bank" if probes else \
            "the training data"
        pairs.append(("train_split", config.train_split, "eval_split", config.eval_split,
                      what))
    return pairs


def check_eval_overlap(config, source, mode):
    """The overlaps of `evaluated_pairs` (and, for a mode that reads weights, of the
    run that trained them: its flags.json's --train_split against --eval_split):
    refused with the ConfigError of the evaluated split's flag, naming both flags
    and the number of shared examples, unless --allow_eval_overlap.

    Returns:
        None when this run evaluates nothing, else the list of the overlaps allowed
        (dicts: train_flag, train_split, eval_flag, eval_split, examples, of),
        empty when the splits are disjoint (what the result records).
    """
    pairs = evaluated_pairs(config, mode)
    if not pairs:
        return None
    recorded = _trained_split(config, mode)
    if recorded is not None:  # every evaluated split against what trained the weights
        compared = {(train_split, eval_flag) for _, train_split, eval_flag, _, _ in pairs}
        for eval_flag, eval_split in dict.fromkeys(
                (eval_flag, eval_split) for _, _, eval_flag, eval_split, _ in pairs):
            if (recorded[0], eval_flag) not in compared:
                pairs.append(("train_split", recorded[0], eval_flag, eval_split,
                              f"what trained the weights: its flags.json in {recorded[1]}"))
    found = []
    for train_flag, train_split, eval_flag, eval_split, what in pairs:
        try:
            shared, total, unit = overlap.shared_examples(source, train_split, eval_split)
        except ValueError:
            continue  # a split this run does not read (a record's): nothing to compare
        if shared:
            found.append(dict(train_flag=train_flag, train_split=train_split,
                              eval_flag=eval_flag, eval_split=eval_split, examples=shared,
                              of=total, unit=unit, trained=what))
    if found and not config.allow_eval_overlap:
        first = found[0]
        described = [_describe_overlap(each) for each in found]
        described[0] = described[0].split("=", 1)[1]  # ConfigError names the flag
        raise ConfigError(first["eval_flag"], "; ".join(described) + (
            ". An accuracy measured there counts examples that trained the weights, "
            "fill the kNN bank or fit the probe: it is inflated. Choose splits that do not "
            "overlap (e.g. --train_split='train[:90%]' --eval_split='train[90%:]' for a "
            "TFDS dataset with one split; an image folder lists its files class by class, "
            "so give it train/ and val/ subfolders instead), or pass --allow_eval_overlap "
            "to run anyway (result.json then records eval_overlaps_train: true)."))
    for each in found:
        logging.warning("--allow_eval_overlap: %s.", _describe_overlap(each))
    return [{k: v for k, v in each.items() if k != "unit"} for each in found]


# Splits up to this size have their labels read for `note_eval_classes`: a pass over
# a TFDS split's records reads their images' bytes too (ImageNet's validation split,
# 50,000 examples and 6 GB, is left out; CIFAR's and the offline test splits are in).
_CLASS_CHECK_MAX_EXAMPLES = 20_000


def note_eval_classes(config, source, mode):
    """A warning, naming the class counts, for each evaluated split (of
    `evaluated_pairs`) that holds one class, or under half of the dataset's, where
    the dataset has several: its top-1 measures those classes only (0.0 for a head
    that never answers them). Image folders list their files class by class, so a
    slice of one split ('train[90%:]') takes the classes at its end. Returns the
    warnings (for tests)."""
    if source.num_classes <= 1:
        return []
    said = []
    evaluated = dict.fromkeys((flag, split) for _, _, flag, split, _ in
                              evaluated_pairs(config, mode))  # each split's labels once
    for flag, split in evaluated:
        if not split or not source.has_labels(split) or \
                source.num_examples(split) > _CLASS_CHECK_MAX_EXAMPLES:
            continue
        labels = source.load_labels(split)
        classes, counts = np.unique(labels[labels >= 0], return_counts=True)
        if len(classes) == 0 or (len(classes) > 1 and 2 * len(classes) >= source.num_classes):
            continue
        names = getattr(source, "class_names", ())
        shown = ", ".join(f"{names[c] if c < len(names) else c}: {n}"
                          for c, n in list(zip(classes.tolist(), counts.tolist()))[:10])
        folder = (" Image folders list their files class by class, so a slice of one "
                  "split ('train[90%:]') holds the classes at its end: hold out a split "
                  "folder of its own (train/ and val/ subfolders) instead."
                  if isinstance(source, folders.ImageFolderSource) else "")
        message = (f"--{flag}={split!r} holds {len(classes)} of the dataset's "
                   f"{source.num_classes} classes ({shown}): its accuracy measures those "
                   f"classes only.{folder}")
        logging.warning("%s", message)
        said.append(message)
    return said


def _describe_overlap(overlap):
    every = " (all of them)" if overlap["examples"] == overlap["of"] else ""
    return (f"--{overlap['eval_flag']}={overlap['eval_split']!r} shares "
            f"{overlap['examples']} of its {overlap['of']} {overlap['unit']}{every} "
            f"with --{overlap['train_flag']}={overlap['train_split']!r} ("
            f"{overlap['trained']})")


def _trained_split(config, mode):
    """(--train_split, flags.json path) of the run whose weights a mode that reads
    weights evaluates, when it recorded one on this dataset; else None."""
    if mode.trains:
        return None
    try:
        if config.model_dir and checkpoints.latest(config.model_dir):
            weights = checkpoints.resolve(checkpoints.latest(config.model_dir))
        elif config.checkpoint:
            weights = checkpoints.resolve(config.checkpoint)
        else:
            return None
        recorded = checkpoints.recorded_run_config(weights)
    except (ValueError, FileNotFoundError, OSError, tf.errors.OpError):
        return None
    if recorded is None or recorded.dataset != config.dataset:
        return None
    return recorded.train_split, run_dirs.run_of(weights.prefix)
