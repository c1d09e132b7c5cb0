"""Checks that run before any model is built.

Everything that can be known from the Config, the dataset and the strategy is checked
here, so that a bad flag, split, batch size or path fails with a `ConfigError` that
names the flag and the fix, before any expensive work starts. Two jobs have modules
of their own, re-exported here: `overlap` (the evaluated splits against what trained
the weights) and `weights` (weights that fit the model the flags describe).
"""
import contextlib
import os

import tensorflow as tf
from absl import logging

from simclr_tf.config import architecture, rules, run_dirs
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints, portable, teacher
from simclr_tf.config.tables import encoders as encoder_table
from simclr_tf.config.tables import evaluators as evaluator_table
from simclr_tf.config.tables import modes
from simclr_tf.config.tables import train_modes
from simclr_tf.config import ConfigError
from simclr_tf.data import folders, registry, subsets
from simclr_tf.models import hub
from simclr_tf.run.run_context import RunContext
# The checks of three jobs live beside this module: the evaluated splits' overlap, the
# folders a run reads and writes, and weights that fit the model.
from simclr_tf.run.preflight.overlap import (check_eval_overlap, evaluated_pairs,
                                             knn_bank_split, note_eval_classes)
from simclr_tf.run.preflight.paths import _check_data_dir, _check_model_dir
from simclr_tf.run.preflight.weights import (_check_checkpoint_readable,
                                             _check_official_selector,
                                             _check_recorded_architecture,
                                             check_official_architecture)


def load_source(config):
    """The dataset of --dataset, checked to be readable (prepared, for TFDS). A given
    --data_dir that does not exist is refused, unless TFDS is to download a dataset
    into it: a source that looks elsewhere too (Fashion-MNIST's system copy) would
    otherwise be read without a word."""
    _check_data_dir(config)
    try:
        # Workers of a multi-worker run would download into one data_dir at once:
        # they need it prepared (the error says how).
        source = registry.get_dataset(
            config.dataset, data_dir=config.data_dir,
            skip_corrupt_images=config.skip_corrupt_images,
            download=config.tfds_download and config.strategy != "multiworker")
        source.check_prepared()
        return source
    except folders.CorruptImageError as error:
        raise ConfigError("skip_corrupt_images", f"is off and {error.path!r} is "
                          f"{error.reason.replace('_', ' ')}; delete or replace the file, "
                          "or turn --skip_corrupt_images on to skip such files.") from None
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError("dataset", str(error)) from None


def check_weights_found(config):
    """The weights the command reads are there: --checkpoint resolves, and a mode
    that reads weights finds some (`_check_something_to_load`). `experiment` asks
    before `load_source`, so that a typo in --model_dir or --checkpoint is named as
    such, not as the dataset (the defaults' imagenet2012) it never got to read;
    `check` asks too."""
    if config.checkpoint:
        try:
            checkpoints.resolve(config.checkpoint)
        except FileNotFoundError as error:
            raise ConfigError("checkpoint", str(error)) from None
    _check_something_to_load(config, modes.get(config.mode))


def _check_split(source, flag, split):
    """The split parses and has examples; returns its size."""
    try:
        num_examples = source.num_examples(split)
    except ValueError as error:
        raise ConfigError(flag, f"{error} (dataset {source.name!r} has splits "
                          f"{', '.join(source.splits)}).") from None
    if num_examples == 0:
        raise ConfigError(flag, f"split {split!r} of {source.name!r} has no examples; "
                          "choose a non-empty split (sizes: "
                          f"{dict(source.split_sizes)}).")
    return num_examples


def check(config, strategy, source):
    """Validates what depends on the dataset and strategy; returns the run context
    (a `run_context.RunContext`: source, classes, training examples, teacher, overlaps).

    Nothing is created or written: `experiment` makes model_dir and writes the run's
    record only once every check has passed.
    """
    mode = modes.get(config.mode)
    check_weights_found(config)
    _check_encoder(config)
    if mode.trains or mode.exports:
        _check_export_formats(config, mode)
    num_classes, num_train_examples, teacher_info = source.num_classes or None, None, None
    if mode.trains:
        num_train_examples = _check_training(config, strategy, source)
        _check_more_than_one_class(config, mode, source)
    if mode.trains and train_modes.get(config.train_mode).needs_teacher:
        teacher_info = _check_teacher(config, source)
        num_classes = teacher_info.num_classes
        if config.eval_split:  # the distillation monitor's split
            try:
                _check_split(source, "eval_split", config.eval_split)
            except ConfigError as error:
                reason = str(error).split(": ", 1)[1]
                raise ConfigError("eval_split", f"{reason} The distillation monitor "
                                  "evaluates the student on it at every checkpoint; "
                                  "--eval_split='' turns it off.") from None
    if evaluator_table.evaluates_head(config) or (
            mode.trains and config.final_linear_probe):
        _check_evaluating(config, source)
    _check_evaluation_splits(config, source, mode)
    if config.checkpoint:
        _check_checkpoint(config, mode, num_classes)
    if config.model_dir:
        _check_model_dir(config.model_dir, reader=not mode.trains)
        latest = checkpoints.latest(config.model_dir)
        if latest:  # what every mode loads first (training resumes it)
            _check_recorded_architecture(config, checkpoints.resolve(latest), "model_dir")
        if latest and mode.trains:  # what no override can change is refused above
            _check_recorded_flags(config)
        if not latest and mode.trains and not config.checkpoint:
            _check_recorded_start(config)
    eval_overlap = check_eval_overlap(config, source, mode)
    note_eval_classes(config, source, mode)
    return RunContext(source=source, num_classes=num_classes,
                      num_train_examples=num_train_examples, teacher=teacher_info,
                      eval_overlap=eval_overlap)


def _check_encoder(config):
    """--encoder names an encoder of the table (`tables.encoders.ENCODERS`, the one
    list of names) or a keras-hub backbone (keras-hub imports), and a patch-based one
    divides the image size (`tables.encoders.EncoderSpec.patch_size`). Nothing is made:
    making the encoder would draw seeds from the global RNG and change the run's
    initialisation."""
    name = config.encoder
    if name.startswith(rules.HUB_ENCODER_PREFIX):
        _require_keras_hub("encoder", name)
        return  # hub.build names a bad spec before any weights exist
    if name not in encoder_table.ENCODERS:
        raise ConfigError("encoder", f"must be one of {', '.join(encoder_table.ENCODERS)} or "
                          f"{rules.HUB_ENCODER_PREFIX}<backbone>; got {name!r}.")
    spec = encoder_table.encoder_spec(name)
    patch = spec.patch_size if spec else None
    if patch and config.image_size % patch:
        size = config.image_size
        raise ConfigError("image_size", f"{size} is not a multiple of the patch size "
                          f"{patch} of --encoder={name}; use e.g. "
                          f"{max(patch, size - size % patch)} or 224.")


def _check_export_formats(config, mode):
    """The packages each format of --export_format needs import (an optional extra),
    before a training run spends its time and fails at its end, every missing one in
    one error (one round trip, not one per extra); `--mode=export` has a format to
    write."""
    formats = rules.export_formats(config.export_format)
    if not formats and mode.exports:
        raise ConfigError("export_format", f"--mode={config.mode} writes the exports of "
                          "--export_format, and 'none' names no format; name the ones to "
                          "write, e.g. --export_format=saved_model or saved_model,onnx.")
    missing = []
    if "keras_hub" in formats:
        try:
            _require_keras_hub("export_format", "keras_hub")
        except ConfigError as error:
            missing.append(str(error).split(": ", 1)[1])
    if "onnx" in formats:
        try:
            portable.require("onnx")
        except ImportError as error:
            missing.append(str(error))
    if missing:
        raise ConfigError("export_format", "; ".join(missing))


def _require_keras_hub(flag, subject):
    """A keras-hub encoder needs keras-hub: else the ConfigError of `flag`, what
    `subject` is followed by what is missing and the install line."""
    try:
        import keras_hub  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError as error:
        raise ConfigError(flag, f"{subject} {hub.import_error_message(error)}") from None


def _check_training(config, strategy, source):
    """Train split, per-replica batch and labels; returns the split's size."""
    num_examples = _check_split(source, "train_split", config.train_split)
    objective = train_modes.get(config.train_mode)
    if objective.contrastive_batch and config.train_batch_size > num_examples:
        # The input repeats the split to fill a batch: an image would meet its own
        # copies among NT-Xent's negatives. (A fine-tune's repeats do no such harm.)
        raise ConfigError("train_batch_size", (
            f"{config.train_batch_size} is more than the {num_examples} examples of "
            f"--train_split={config.train_split!r}: a pretraining batch would hold "
            "images more than once, each copy a negative of the others in the "
            f"contrastive loss. Use --train_batch_size={num_examples} or less, or a "
            "larger --train_split."))
    replicas = strategy.num_replicas_in_sync
    if config.train_batch_size % replicas:
        raise ConfigError("train_batch_size", f"{config.train_batch_size} is not "
                          f"divisible by the {replicas} replicas; use a multiple of "
                          f"{replicas}.")
    per_replica = config.train_batch_size // replicas
    try:
        rules.check_grad_cache_chunk(config.grad_cache_chunk, per_replica)
    except ValueError as error:
        raise ConfigError.from_rule("grad_cache_chunk", f"{error} (--train_batch_size="
                                    f"{config.train_batch_size} over {replicas} replicas)"
                                    ) from None
    spec = encoder_table.encoder_spec(config.encoder)
    if (objective.views == 1 and per_replica % 2 and spec is not None
            and spec.odd_batch_onednn_crash(config.model_kwargs()["encoder_options"])
            and _onednn_cpu_training(strategy)):
        raise ConfigError(
            "train_batch_size", f"gives {per_replica} images per replica; an odd "
            "batch crashes TensorFlow 2.21's oneDNN CPU kernel for the strided 1x1 "
            "shortcut convolutions (Conv2DBackpropFilter aborts). Use an even "
            "per-replica batch, or set TF_ENABLE_ONEDNN_OPTS=0.")
    if objective.needs_labels and not source.has_labels(config.train_split):
        raise ConfigError("train_mode", f"{config.train_mode} needs labels, but split "
                          f"{config.train_split!r} of {source.name!r} has none; "
                          "choose a labelled --train_split or --train_mode=pretrain.")
    if objective.needs_teacher and config.distill_alpha < 1.0 \
            and not source.has_labels(config.train_split):
        raise ConfigError("distill_alpha", f"is {config.distill_alpha}, which mixes in "
                          f"labels, but split {config.train_split!r} of {source.name!r} "
                          "has none; choose a labelled --train_split, or "
                          "--distill_alpha=1 to distil without labels.")
    if objective.needs_teacher and config.distill_alpha < 1.0 \
            and subsets.authors_subset(source, config.train_split, config.label_fraction):
        raise ConfigError("label_fraction", f"{config.label_fraction} of {source.name} "
                          "is the authors' subset, a dataset of its own: distillation "
                          "labels the examples of --train_split by id, which that subset "
                          "has not. Use --distill_alpha=1 (the paper's setting: no "
                          "labels) or another --label_fraction.")
    return num_examples


def _check_more_than_one_class(config, mode, source):
    """Pretraining on a labelled dataset of one class (an image folder with one class
    subfolder): what would measure the representation by its labels (the online
    head, which learns to answer the one class: loss 0, top-1 1.0; the kNN monitor;
    the final probe; train_then_eval's eval of the head) measures nothing. Refused,
    naming the flag of each: the run is then a plain pretraining, as written."""
    if train_modes.get(config.train_mode).labels != "none" or source.num_classes != 1:
        return
    used = [(flag, fix) for flag, fix, on in (
        ("lineareval_while_pretraining", "--lineareval_while_pretraining=false",
         config.lineareval_while_pretraining),
        ("knn_eval_split", "no --knn_eval_split", bool(config.knn_eval_split)),
        ("final_linear_probe", "no --final_linear_probe", config.final_linear_probe),
        ("mode", "--mode=train", evaluator_table.evaluates_head(config))) if on]
    if not used:
        return
    names = getattr(source, "class_names", ())
    one = f" ({names[0]!r})" if names else ""
    raise ConfigError(used[0][0], (
        f"{source.name!r} has one class{one}: the online linear head would learn to "
        "answer it always (loss 0, top-1 1.0), and a kNN monitor, a linear probe or an "
        "eval of the head measure nothing with one class. Pretrain without them: "
        f"{', '.join(fix for _, fix in used)}; or give the folder more class "
        "subfolders, or put its images in the folder itself (unlabelled: pretraining "
        "only, no head)."))


def _check_teacher(config, source):
    """--teacher holds a model with a supervised head, readable, whose classes are
    the dataset's, and that can see --image_size images; returns its
    `teacher.TeacherInfo`, resolved once (`teacher.resolve`: a run that resumes with
    the same --teacher gets the weights it started with, `teacher.PIN_FILE`). Nothing
    is built."""
    try:
        info = teacher.resolve(config.teacher, config.model_dir)
    except teacher.PinUnreadableError as error:
        raise ConfigError("model_dir", str(error)) from None
    except teacher.TeacherError as error:
        raise ConfigError("teacher", str(error)) from None
    encoder = info.model_kwargs.get("encoder", "resnet")
    if isinstance(encoder, str) and encoder.startswith(rules.HUB_ENCODER_PREFIX):
        _require_keras_hub("teacher", f"{config.teacher!r} is a {encoder} model:")
    spec = encoder_table.encoder_spec(encoder) if isinstance(encoder, str) else None
    if spec is not None and spec.patch_size and info.image_size not in (
            None, config.image_size):
        raise ConfigError("teacher", f"{config.teacher!r} is a {encoder} model trained at "
                          f"{info.image_size} px, whose position embedding fits that size "
                          f"only, and --image_size is {config.image_size}; pass "
                          f"--image_size={info.image_size}.")
    classes = source.num_classes or None
    if classes is not None and classes != info.num_classes:
        raise ConfigError("teacher", f"{config.teacher!r} scores {info.num_classes} "
                          f"classes, but --dataset={config.dataset} has {classes}: a "
                          "student learns the teacher's classes from this dataset's "
                          "images, so both must be the same; pass a teacher fine-tuned "
                          "on this dataset.")
    _check_teacher_labels(config, info)
    return info


def _check_teacher_labels(config, info):
    """A teacher whose head trained on more labels than this run has: refused when
    --label_fraction says the experiment has fewer (the labels would reach the student
    through the teacher), else said (a pretraining run's online head saw every label:
    a fully supervised teacher, not the semi-supervised one of a 1%/10% experiment)."""
    if info.head_labels is None:
        return
    fraction, split, dataset, how = info.head_labels
    seen = (f"{config.teacher!r} is {how} trained on "
            f"{teacher.share_of_labels(fraction)} of {split!r} of {dataset}")
    if fraction > config.label_fraction:
        raise ConfigError("teacher", f"{seen}, and this run's --label_fraction is "
                          f"{config.label_fraction:.3g}: the student would learn those "
                          "labels through the teacher. Distil from a teacher fine-tuned "
                          f"on {config.label_fraction:.3g} of the labels (--train_mode="
                          f"finetune --label_fraction={config.label_fraction:.3g}), or "
                          "drop --label_fraction.")
    if how == teacher.ONLINE_HEAD:
        logging.warning("--teacher: %s: the student learns from all the "
                        "labels. For a semi-supervised result (the paper's 1%%/10%%), "
                        "distil from the fine-tune on those labels "
                        "(docs/distillation.md).", seen)


def _check_evaluating(config, source):
    """The eval split has labels, and the run has a classifier to evaluate."""
    _check_split(source, "eval_split", config.eval_split)
    if not source.has_labels(config.eval_split):
        raise ConfigError("eval_split", f"split {config.eval_split!r} of "
                          f"{source.name!r} has no labels to evaluate against.")
    if train_modes.get(config.train_mode).online_head \
            and not config.lineareval_while_pretraining \
            and evaluator_table.evaluates_head(config):
        raise ConfigError("lineareval_while_pretraining", "is off, so a pretraining "
                          "run has no classifier to evaluate; turn it on or use "
                          "--final_linear_probe.")


def _check_checkpoint(config, mode, num_classes):
    """--checkpoint exists, reads, and (a released model) fits the flags' model."""
    try:
        weights = checkpoints.resolve(config.checkpoint)
    except FileNotFoundError as error:
        raise ConfigError("checkpoint", str(error)) from None
    _check_checkpoint_readable(weights.prefix)
    if weights.kind == checkpoints.RELEASED:
        info = check_official_architecture(config)
        _check_official_selector(config, mode, num_classes, info)
    else:
        _check_recorded_architecture(config, weights, "checkpoint")


def _check_recorded_flags(config):
    """A training run continues model_dir's checkpoints only with the optimisation
    and data its flags.json records (`records.flag_changes`, less the run's length,
    `records.EXTENSION_FLAGS`), unless --allow_changed_flags."""
    changed = [change for change in records.flag_changes(config.model_dir, config)
               if change[0] not in records.EXTENSION_FLAGS]
    if not changed or config.allow_changed_flags:
        return
    listed = "; ".join(f"--{flag}: {old!r} recorded, {new!r} given"
                       for flag, old, new in changed)
    raise ConfigError(changed[0][0], (
        f"model_dir {config.model_dir!r} holds checkpoints of a training run whose "
        f"flags.json records other settings of the optimisation or the data ({listed}). "
        "Nothing was changed. To resume that run, pass the recorded values; for a new "
        "run, use another --model_dir; to continue these checkpoints with the new "
        "values, pass --allow_changed_flags (recorded in "
        f"{records.HISTORY_FILE})."))


def _check_recorded_start(config):
    """A training run that stopped before its first checkpoint starts again as its
    flags.json records it: from the --checkpoint it names (--checkpoint is never read
    from a record), not from random weights."""
    path = records.record_path(config.model_dir, records.FLAGS, "train")
    try:
        recorded = records.read_json(path) if tf.io.gfile.exists(path) else None
    except (ValueError, OSError, tf.errors.OpError):
        return  # an unreadable record is reported where it is read
    started_from = recorded.get("checkpoint") if isinstance(recorded, dict) else None
    if started_from:
        raise ConfigError("checkpoint", f"model_dir {config.model_dir!r} records a run "
                          f"that starts from --checkpoint={started_from} and holds no "
                          "checkpoint of its own yet (it stopped before its first); pass "
                          f"--checkpoint={started_from} again to run it as recorded, or "
                          "use another --model_dir.")


def _check_something_to_load(config, mode):
    """A mode that reads weights finds some now: model_dir's, or --checkpoint's where
    the mode may read it instead; a mode that follows a running job (no lock) may
    wait for them with --eval_wait_secs (`run_dirs.weights_needed_now`)."""
    if not run_dirs.weights_needed_now(config, mode):
        return
    if config.model_dir and checkpoints.latest(config.model_dir):
        return
    if config.model_dir and tf.io.gfile.exists(config.model_dir + ".index"):
        run_dir = os.path.dirname(config.model_dir.rstrip("/"))
        raise ConfigError("model_dir", f"{config.model_dir!r} is a checkpoint, not a run "
                          "directory: " + (
                              f"pass --checkpoint={config.model_dir} (with a --model_dir "
                              "of yours for the records), or " if not mode.needs_model_dir
                              else "pass ") + f"--model_dir={run_dir} for its run's latest "
                          "checkpoint.")
    raise run_dirs.nothing_to_load(config, mode)


def _check_labelled_split(source, flag, split):
    _check_split(source, flag, split)
    if not source.has_labels(split):
        raise ConfigError(flag, f"split {split!r} of {source.name!r} has no labels; the "
                          "kNN and linear-probe protocols need a labelled split.")


def _check_evaluation_splits(config, source, mode):
    """Splits of the kNN monitor, of the mode's protocols and of --mode=embed."""
    bank_flag = "knn_bank_split" if config.knn_bank_split else "train_split"
    run = evaluator_table.resolve(config)
    if "knn" in run.training + run.at_checkpoint:
        _check_labelled_split(source, "knn_eval_split", config.knn_eval_split)
        _check_labelled_split(source, bank_flag, knn_bank_split(config))
    for flag in mode.labelled_splits:
        _check_labelled_split(source, flag, getattr(config, flag))
    if config.mode == "embed":
        _check_split(source, "embed_split", config.embed_split or config.eval_split)


@contextlib.contextmanager
def flag_errors(flag):
    """Turns the checkpoints package's errors into the ConfigError of `flag`, the
    flag that named the path, saying which flags to check.

    The package names no flag (a library user has none); the modes wrap their loads
    in this, so that `run.py` reports e.g. `--model_dir: ... does not fit the model`.

    Args:
        flag: 'model_dir' or 'checkpoint'.

    Example:
        >>> with preflight.flag_errors("model_dir"):
        ...     checkpoints.load_into(model, config.model_dir, whole_model=True)
    """
    try:
        yield
    except checkpoints.CheckpointMismatchError as error:
        flags = " ".join(f"--{name}" for name in architecture.architecture_flag_names())
        raise ConfigError(flag, f"{error.prefix!r} does not fit the model the flags "
                          f"describe ({error.reason}). Pass the flags of the run that "
                          f"wrote it ({flags}); for its supervised head also a --dataset "
                          "with as many classes.") from None
    except checkpoints.UnrecoverableCheckpointsError as error:
        raise ConfigError(
            flag, "no checkpoint in %r loads, and these are not interrupted writes:\n  %s"
            "\nNothing was changed. To start this run again from step 0, move them out "
            "of model_dir (or use another --model_dir); to go on from one of them, "
            "repair it or pass the flags of the run that wrote it."
            % (error.directory, "\n  ".join(error.failures))) from None
    except checkpoints.NoLoadableCheckpointError as error:
        if error.failures:  # its message names no flag
            raise ConfigError(flag, str(error)) from None
        raise ConfigError(flag, f"has no checkpoint in {error.directory!r}; train "
                          "first.") from None
    except teacher.TeacherError as error:  # building --teacher: its message names no flag
        raise ConfigError(flag, str(error)) from None


def _onednn_cpu_training(strategy):
    """Whether the replicas run on CPUs with TensorFlow's oneDNN kernels enabled."""
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0" and all_cpu(strategy)


def all_cpu(strategy):
    """Whether every replica of `strategy` runs on a CPU."""
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy has none: it uses the first GPU, if any
        devices = [d.name for d in tf.config.list_logical_devices("GPU")[:1]] or ["CPU"]
    return all("CPU" in device.upper() for device in devices)
