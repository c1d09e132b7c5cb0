"""Preflight: the splits each evaluation of a run compares (`evaluated_pairs`) and the
refusal of an evaluation whose split shares examples with what trained the weights,
fills the kNN bank or fits the probe (`check_eval_overlap`, unless
--allow_eval_overlap; `simclr_tf.evaluation.overlap` counts the shared examples).

What trained the weights is every run up their chain (`weights_chain`): the run that
wrote them, the run its --checkpoint started from (a fine-tune's pretraining), and so
on up to weights with no record of ours (a released model, a missing directory). A
run is compared when its dataset holds the evaluated dataset's examples
(`registry.dataset_identity`: a folder by its real path, the tinted Fashion-MNIST as
the grey one's). A distilled student's teacher, and the runs up its chain, are
compared too, and an overlap with them is a warning (`_TEACHER_NOTE` says why).
"""
import dataclasses
import os
from typing import Optional

import numpy as np
import tensorflow as tf
from absl import logging

from simclr_tf.config import Config, ConfigError, run_dirs
from simclr_tf.weights import checkpoints, teacher
from simclr_tf.data import folders, registry
from simclr_tf.data.sources import FOLDER_PREFIX
from simclr_tf.evaluation import overlap
from simclr_tf.config.tables import evaluators as evaluator_table
from simclr_tf.config.tables import train_modes

# Why an overlap with a teacher's training split warns instead of refusing: the
# student's weights never took a step on those examples (its own --train_split, and
# its --checkpoint's chain, are compared and refused); what it learnt of them came
# through the teacher's outputs on the student's own images, as any knowledge of the
# task does. A teacher that fitted those examples can still flatter the student there,
# so the run says so and records it.
_TEACHER_NOTE = ("the student never trained on them, but learnt from a teacher that did: "
                 "its accuracy there may be flattered")


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
      supervised head, --evaluators=linear_probe).

    The splits of the runs that trained the weights read (`weights_chain`, from
    their flags.json) are compared with every evaluated split by
    `check_eval_overlap`.
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


@dataclasses.dataclass(frozen=True)
class Trained:
    """One link of `weights_chain`: weights, and the run that trained them.

    Attributes:
        weights: the path as given (a flag, or a run's flags.json).
        role: what they are to the weights read: 'the weights' (those evaluated),
            'the weights <run> started from', 'the teacher <run> distilled from'.
        teacher: reached through a --teacher (the student never trained on its data).
        run: the run directory they belong to, None when not found.
        config: that run's flags.json, None when the chain stops here.
        stopped: why the chain stops here (no record of what trained them), or None.
    """
    weights: str
    role: str
    teacher: bool = False
    run: Optional[str] = None
    config: Optional[Config] = None
    stopped: Optional[str] = None

    def trained(self):
        """What trained them, as an overlap names it."""
        return f"what trained {self.role}: its flags.json in {self.run}"

    def record(self, identity):
        """The result entry (JSON) of this link, compared when its dataset's
        `registry.dataset_identity` is `identity`."""
        entry = dict(weights=self.weights, role=self.role, teacher=self.teacher)
        if self.config is None:
            return dict(entry, stopped=self.stopped)
        return dict(entry, run=self.run, dataset=self.config.dataset,
                    train_split=self.config.train_split,
                    compared=registry.dataset_identity(self.config.dataset) == identity)


def _link(weights, role, through_teacher):
    """The `Trained` of the weights at `weights`: its run's flags.json, or why it
    has none to read. Never raises: a link that cannot be read ends the chain."""
    def stop(reason, run=None):
        return Trained(weights, role, through_teacher, run=run, stopped=reason)
    try:
        resolved = checkpoints.resolve(weights)
    except (FileNotFoundError, ValueError, OSError, tf.errors.OpError):
        return stop("not found (moved or deleted): what trained them is not known")
    if resolved.kind == checkpoints.RELEASED:
        return stop("a released model: what trained it is not recorded")
    run = run_dirs.run_of(resolved.prefix)
    recorded = checkpoints.recorded_run_config(resolved)  # warns when unreadable
    if recorded is None:
        return stop(f"no readable flags.json in {run}: what trained them is not recorded",
                    run)
    return Trained(weights, role, through_teacher, run=run, config=recorded)


def _teacher_weights(link):
    """The teacher the run of `link` distilled from: the weights its teacher.json
    pinned, else its recorded --teacher; None when it learnt from none."""
    if not train_modes.get(link.config.train_mode).needs_teacher:
        return None
    try:
        pin = teacher.read_pin(link.run)
    except (ValueError, OSError, tf.errors.OpError):
        pin = None
    return pin["weights"] if pin else link.config.teacher


def _chain_start(config, mode):
    """[(weights, role, through a teacher)] where `weights_chain` starts: the weights
    a reader mode reads; a training run's own checkpoints when it resumes, else its
    --checkpoint and --teacher."""
    latest = checkpoints.latest(config.model_dir) if config.model_dir else None
    if not mode.trains:
        weights = latest or config.checkpoint
        return [(weights, "the weights", False)] if weights else []
    if latest:
        return [(latest, "the weights this run resumes", False)]
    start = [(config.checkpoint, "the weights this run starts from", False)]
    if train_modes.get(config.train_mode).needs_teacher:
        start.append((config.teacher, "the teacher this run distils from", True))
    return [(weights, role, through) for weights, role, through in start if weights]


def weights_chain(config, mode):
    """Every run whose training the weights this run evaluates hold: the run that
    wrote them, the one its --checkpoint (flags.json) started from, and so on, then
    each teacher a run distilled from (`Trained.teacher`) and their chains; a run
    reached twice is listed once, first by --checkpoint. The chain stops, with a
    link saying why (`Trained.stopped`), at weights whose run has no readable
    flags.json (a released model, a copied prefix) or that are not found.

    Returns:
        A list of `Trained`, nearest first; [] when the run reads no weights.
    """
    own, taught = [], []  # to visit: --checkpoint links first, so that a run both
    for start in _chain_start(config, mode):  # trained and taught counts as trained
        (taught if start[2] else own).append(start)
    chain, seen = [], set()
    while own or taught:
        weights, role, through_teacher = (own or taught).pop(0)
        link = _link(weights, role, through_teacher)
        if link.config is None:
            chain.append(link)
            continue
        if os.path.realpath(link.run) in seen:
            continue  # a loop, or a run reached again (a teacher's own pretraining)
        seen.add(os.path.realpath(link.run))
        chain.append(link)
        if link.config.checkpoint:
            (taught if through_teacher else own).append(
                (link.config.checkpoint, f"the weights {link.run} started from",
                 through_teacher))
        teacher_weights = _teacher_weights(link)
        if teacher_weights:
            taught.append((teacher_weights, f"the teacher {link.run} distilled from", True))
    return chain


@dataclasses.dataclass(frozen=True)
class OverlapCheck:
    """What `check_eval_overlap` found, for the result (`evaluations.overlap_record`).

    Attributes:
        allowed: the overlaps with what trained the weights, fills the kNN bank or
            fits the probe that --allow_eval_overlap let through (dicts: train_flag,
            train_split, eval_flag, eval_split, examples, of, trained), [] when none.
        teacher: the overlaps with what trained a teacher up the chain (warned).
        trained_by: `Trained.record` of each link of `weights_chain`.
    """
    allowed: list
    teacher: list
    trained_by: list


def check_eval_overlap(config, source, mode):
    """The overlaps of `evaluated_pairs` and of every run up `weights_chain` (its
    flags.json's --train_split against each evaluated split, when its dataset holds
    the same examples): refused with the ConfigError of the evaluated split's flag,
    naming both flags, the run and the number of shared examples, unless
    --allow_eval_overlap; an overlap with a teacher's chain is a warning.

    Returns:
        None when this run evaluates nothing, else an `OverlapCheck`.
    """
    pairs = evaluated_pairs(config, mode)
    if not pairs:
        return None
    chain = weights_chain(config, mode)
    identity = registry.dataset_identity(config.dataset)
    compared = {(train_split, eval_flag) for _, train_split, eval_flag, _, _ in pairs}
    evaluated = dict.fromkeys((eval_flag, eval_split)
                              for _, _, eval_flag, eval_split, _ in pairs)
    taught = []  # the pairs of a teacher's chain: warned
    found, teacher_found = [], []
    for link in chain:
        if link.config is None:
            continue
        if registry.dataset_identity(link.config.dataset) != identity:
            # A folder inside the other (the training folder's train/ subfolder):
            # the same files under two dataset names, compared file by file.
            if _nested_folders(link.config.dataset, config.dataset):
                try:
                    other = registry.get_dataset(
                        link.config.dataset,
                        skip_corrupt_images=config.skip_corrupt_images)
                except (ValueError, OSError):
                    continue  # that folder is gone: nothing to compare
                across = [("train_split", link.config.train_split, eval_flag, eval_split,
                           link.trained()) for eval_flag, eval_split in evaluated]
                (teacher_found if link.teacher else found).extend(
                    _overlaps(source, across, train_source=other))
            continue
        for eval_flag, eval_split in evaluated:
            if (link.config.train_split, eval_flag) in compared:
                continue  # the nearest run with that split names it
            compared.add((link.config.train_split, eval_flag))
            (taught if link.teacher else pairs).append(
                ("train_split", link.config.train_split, eval_flag, eval_split,
                 link.trained()))
    found = _overlaps(source, pairs) + found
    teacher_found = _overlaps(source, taught) + teacher_found
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
    for each in teacher_found:
        logging.warning("%s: %s (result.json records it in eval_overlaps_teacher).",
                        _describe_overlap(each), _TEACHER_NOTE)
    for link in chain:
        if link.stopped:
            logging.info("Overlap check: %s (%s) ends the chain of what trained the "
                         "weights: %s.", link.weights, link.role, link.stopped)
    return OverlapCheck(allowed=_as_recorded(found), teacher=_as_recorded(teacher_found),
                        trained_by=[link.record(identity) for link in chain])


def _nested_folders(name, other):
    """Whether the datasets `name` and `other` are image folders, one inside the
    other (by their real paths)."""
    if not (name.startswith(FOLDER_PREFIX) and other.startswith(FOLDER_PREFIX)):
        return False
    paths = [registry.dataset_identity(each)[len(FOLDER_PREFIX):] for each in (name, other)]
    return any(inner.startswith(outer.rstrip(os.sep) + os.sep)
               for inner, outer in (paths, paths[::-1]))


def _overlaps(source, pairs, train_source=None):
    """The pairs of splits that share examples, as result entries (the training
    splits of `train_source` when given, else of `source`)."""
    found = []
    for train_flag, train_split, eval_flag, eval_split, what in pairs:
        try:
            shared, total, unit = overlap.shared_examples(source, train_split, eval_split,
                                                          train_source)
        except ValueError:
            continue  # a split this run does not read (a record's): nothing to compare
        if shared:
            found.append(dict(train_flag=train_flag, train_split=train_split,
                              eval_flag=eval_flag, eval_split=eval_split, examples=shared,
                              of=total, unit=unit, trained=what))
    return found


def _as_recorded(overlaps):
    """Overlaps as the result records them (the unit is the dataset's)."""
    return [{k: v for k, v in each.items() if k != "unit"} for each in overlaps]


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

