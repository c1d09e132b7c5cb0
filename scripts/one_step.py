#!/usr/bin/env python
"""One training step from an authors' released model, as their run.py would take it.

    python scripts/one_step.py --checkpoint=SAVED_MODEL_DIR --views=in.npz --out=out.npz \\
        [--train_mode=pretrain|finetune] [the authors' run.py hyper-parameter flags]

    python scripts/one_step.py compare OURS.npz AUTHORS.npz --checkpoint=SAVED_MODEL_DIR

The whole step is the subject (docs/fidelity.md, "Whole-step parity"): the supervised
head trained beside pretraining on stop_gradient(h), weight decay inside LARS and in
the loss, LARS' exclusions, the BN moving statistics, the rate at the step, the
gathered negatives, fine-tuning's frozen blocks and projection-head selector. The
authors' own step on the same input is recorded by `dev/authors_one_step.py`.

--checkpoint: a SavedModel folder in the format of the authors' released models (only
  its `variables/` is read), or its `variables/` folder or checkpoint prefix. The
  architecture is inferred from it as `simclr_tf.weights.official` imports it; every
  variable is loaded, BN moving statistics included. The optimizer starts fresh
  (step 0, zero momentum): a released SavedModel holds no optimizer. A training
  checkpoint of their run.py (`ckpt-N`, with --optimizer=lars) carries LARS' step and
  momentum: they are then used, as their run.py resuming from its model_dir.
--views: an .npz with `images`, float32 [N, H, W, 6] in [0, 1] for pretraining (two
  views of each example on the channel axis: 0-2 the first, 3-5 the second) or
  [N, H, W, 3] for fine-tuning (one view), exactly as the authors' model receives a
  training batch (nothing is augmented here: no blur either), and `labels`, integer
  [N], the classes of the supervised head. The N examples are one global batch, on
  one replica: N must equal --train_batch_size when that is given.
--out: an .npz with every variable of the model after the step, trainable and not,
  keyed by its full name in the authors' model (the names of the checkpoint's object
  graph, without `:0`), float32; and the scalars `contrast_loss`, `supervised_loss`,
  `weight_decay_loss`, `total_loss` as the authors' run.py defines them (0 where a term
  does not apply), and `learning_rate`, the rate of this update.

Flags take the authors' run.py defaults, where ours differ too (e.g. no separate head
rate unless --head_learning_rate is given). The schedule's epoch is --num_examples
examples (default N: one step is one epoch), for the warmup and cosine arithmetic of
their run.py. The architecture flags (--resnet_depth, --width_multiplier, --sk_ratio,
--se_ratio, --proj_head_mode, --num_proj_layers, --proj_out_dim, --num_classes) are
read from the checkpoint; given, they must agree, and so must --image_size with its
stem (their code builds the CIFAR stem at --image_size <= 32, whatever the views'
size: the views may have another size than --image_size, as in their code). Their
run.py's flags that change nothing in one step (data, evaluation, checkpoints, TPU)
are accepted and ignored.

The hyper-parameters that are run.py's flags too are checked by run.py's own rules
(`Config.validate`): e.g. --learning_rate > 0, --temperature > 0, --momentum in [0, 1),
--train_steps >= 0, --head_learning_rate in pretraining with the online head only;
--num_examples, when given, > 0.

Bad input is one line, `one_step.py: ...`, and exit status 2, before the step (the
files and the flags before the model is built): a missing, unreadable or damaged
file, a flag those rules refuse, views with a NaN or Inf or outside [0, 1]. What needs
no TensorFlow (the paths, the .npz files, the flags) is checked before TensorFlow is
imported. out.npz is written whole (a temporary sibling renamed over --out): a failed
write (a full disk) is such a line too, and leaves --out as it was.

A flag that the chosen side does not read is refused (exit status 2): a step's flag
given to `compare`, a tolerance given to the step.

`compare` prints the five largest per-variable differences of the updates (after
minus before, ours against the authors') relative to the size of the authors' update,
the losses' relative differences and the tolerances, then one verdict line: PASS, or
FAIL with its reasons (exit status 1): a difference over --update_tolerance (1e-3) or
--loss_tolerance (1e-5), a variable one step left exactly unchanged (a frozen block, a
head the mode does not train) and the other moved, by any amount (its ratio is then
printed as inf), a NaN or Inf anywhere in either file (a variable, a loss), a variable
or scalar that one file lacks, a shape that differs. Exit status 2: a missing file or
one that holds none of the step's scalars, no --checkpoint or one without the outputs'
variables, a tolerance that is not a finite number >= 0, and an output that is not one
step from --checkpoint (more than half of the variables moved by at least their own
size: another model's weights of the same architecture, which would inflate every
update and pass a wrong step). A start only a little apart (a later checkpoint of the
same run) is not told apart: --checkpoint must be the very model both steps started
from.
"""
import math
import os
import sys
import zipfile
import zlib

import numpy as np
from absl import flags

import script_io  # scripts/script_io.py: out.npz whole or absent
from simclr_tf.config import Config, ConfigError, bounds
from simclr_tf.run import quiet

# TensorFlow is imported once the checks that need none have passed: a missing path, a
# bad flag or a bad .npz is refused in about a second, not after TensorFlow's 8-15 s
# import. The modules that need it are imported where they are used.

MODES = ("pretrain", "finetune")
OPTIMIZERS = ("lars", "momentum", "adam")
LOSSES = ("contrast_loss", "supervised_loss", "weight_decay_loss", "total_loss")
SCALARS = LOSSES + ("learning_rate",)

# Its own flag values, not absl's global ones: a test calls `main` in a process whose
# global flags are run.py's.
FLAGS = flags.FlagValues()
flags.DEFINE_string("checkpoint", None, "the authors' SavedModel folder (or variables/)",
    flag_values=FLAGS)
flags.DEFINE_string("views", None, "in.npz: images [N, H, W, 6 or 3] in [0, 1], labels [N]",
    flag_values=FLAGS)
flags.DEFINE_string("out", None, "out.npz: every variable after the step, the losses",
    flag_values=FLAGS)
flags.DEFINE_enum("train_mode", "pretrain", MODES, "the step: pretrain or finetune",
    flag_values=FLAGS)
flags.DEFINE_integer("train_batch_size", None, "the global batch: N (default N)",
    flag_values=FLAGS)
flags.DEFINE_integer("num_examples", None, "examples of an epoch for the schedule (default N)",
    flag_values=FLAGS)
flags.DEFINE_float("learning_rate", 0.3, "base learning rate, before batch scaling",
    flag_values=FLAGS)
flags.DEFINE_enum("learning_rate_scaling", "linear", ["linear", "sqrt"], "batch scaling",
    flag_values=FLAGS)
flags.DEFINE_float("warmup_epochs", 10.0, "epochs of linear warmup", flag_values=FLAGS)
flags.DEFINE_integer("train_epochs", 100, "epochs of the run (the cosine's length)",
    flag_values=FLAGS)
flags.DEFINE_integer("train_steps", 0, "steps of the run; overrides --train_epochs",
    flag_values=FLAGS)
flags.DEFINE_float("weight_decay", 1e-6, "weight decay", flag_values=FLAGS)
flags.DEFINE_float("momentum", 0.9, "momentum (LARS, momentum)", flag_values=FLAGS)
flags.DEFINE_enum("optimizer", "lars", OPTIMIZERS, "the optimizer, as the authors' code",
    flag_values=FLAGS)
flags.DEFINE_float("head_learning_rate", None, "ours: the supervised head's base rate",
    flag_values=FLAGS)
flags.DEFINE_float("batch_norm_decay", 0.9, "BN moving-average decay", flag_values=FLAGS)
flags.DEFINE_float("temperature", 0.1, "NT-Xent temperature", flag_values=FLAGS)
flags.DEFINE_bool("hidden_norm", True, "L2-normalise z in NT-Xent", flag_values=FLAGS)
flags.DEFINE_integer("ft_proj_selector", 0, "projection-head layer the supervised head reads",
    flag_values=FLAGS)
flags.DEFINE_integer("fine_tune_after_block", -1, "finetune: freeze up to this block",
    flag_values=FLAGS)
flags.DEFINE_bool("lineareval_while_pretraining", True, "pretrain: the online head",
    flag_values=FLAGS)
flags.DEFINE_enum("frozen_batch_norm", "batch", ["batch", "moving"],
                  "finetune: the frozen blocks' BN: 'batch' as the authors' code (batch "
                  "statistics, moving averages updated; the default here), 'moving' as "
                  "run.py's default", flag_values=FLAGS)
flags.DEFINE_bool("global_bn", True, "cross-replica BN (one replica here: no effect)",
    flag_values=FLAGS)
flags.DEFINE_bool("use_blur", False, "must stay false: the views are given as they are",
    flag_values=FLAGS)
# Read from the checkpoint and the views; given, they must agree.
flags.DEFINE_integer("num_classes", None, "classes of the supervised head (the checkpoint's)",
    flag_values=FLAGS)
flags.DEFINE_integer("image_size", None, "the authors' stem choice: <= 32 the CIFAR stem "
                     "(the checkpoint's stem is used; given, it must agree)", flag_values=FLAGS)
flags.DEFINE_integer("resnet_depth", None, "the checkpoint's", flag_values=FLAGS)
flags.DEFINE_float("width_multiplier", None, "the checkpoint's", flag_values=FLAGS)
flags.DEFINE_float("sk_ratio", None, "the checkpoint's", flag_values=FLAGS)
flags.DEFINE_float("se_ratio", None, "the checkpoint's", flag_values=FLAGS)
flags.DEFINE_string("proj_head_mode", None, "the checkpoint's", flag_values=FLAGS)
flags.DEFINE_integer("num_proj_layers", None, "the checkpoint's", flag_values=FLAGS)
flags.DEFINE_integer("proj_out_dim", None, "the checkpoint's", flag_values=FLAGS)
flags.DEFINE_bool("fused_batch_norm", False, "BN by TF's fused kernel, as run.py trains; "
                  "default: Keras' own ops, in the authors' summation order",
    flag_values=FLAGS)
flags.DEFINE_bool("float64", False, "the model, loss and update in float64 (the structural "
                  "check against dev/authors_one_step.py --float64); out.npz in float64",
    flag_values=FLAGS)
# The authors' run.py flags that change nothing in one step on given views, accepted
# so that their command lines run: data, evaluation, checkpoints, the cluster.
# (--zero_init_logits_layer: their TF2 code zeroes nothing, even with it.)
IGNORED = dict(
    use_tpu=(flags.DEFINE_bool, False), zero_init_logits_layer=(flags.DEFINE_bool, False),
    color_jitter_strength=(flags.DEFINE_float, 1.0), cache_dataset=(flags.DEFINE_bool, False),
    dataset=(flags.DEFINE_string, None), train_split=(flags.DEFINE_string, None),
    eval_split=(flags.DEFINE_string, None), eval_steps=(flags.DEFINE_integer, 0),
    eval_batch_size=(flags.DEFINE_integer, 256), checkpoint_epochs=(flags.DEFINE_float, 1.0),
    checkpoint_steps=(flags.DEFINE_integer, 0), mode=(flags.DEFINE_string, None),
    model_dir=(flags.DEFINE_string, None), data_dir=(flags.DEFINE_string, None),
    master=(flags.DEFINE_string, None), tpu_name=(flags.DEFINE_string, None),
    tpu_zone=(flags.DEFINE_string, None), gcp_project=(flags.DEFINE_string, None),
    eval_name=(flags.DEFINE_string, None), keep_checkpoint_max=(flags.DEFINE_integer, 5),
    keep_hub_module_max=(flags.DEFINE_integer, 1))
for _name, (_define, _default) in IGNORED.items():
    _define(_name, _default, "the authors' run.py flag; no effect on one step",
            flag_values=FLAGS)
# compare
flags.DEFINE_float("update_tolerance", 1e-3, "compare: largest update difference / its size",
    flag_values=FLAGS)
flags.DEFINE_float("loss_tolerance", 1e-5, "compare: largest relative loss difference",
    flag_values=FLAGS)


# The flags that are run.py's too: checked by its own rules (`Config.validate`).
CONFIG_FLAGS = ("train_mode", "learning_rate", "learning_rate_scaling", "warmup_epochs",
                "train_epochs", "train_steps", "weight_decay", "momentum", "optimizer",
                "head_learning_rate", "batch_norm_decay", "temperature", "hidden_norm",
                "fine_tune_after_block", "lineareval_while_pretraining",
                "frozen_batch_norm", "global_bn")
VIEWS = "an .npz with `images` and `labels` (numpy.savez(path, images=..., labels=...))"
OUTPUT = "the out.npz of one_step.py or authors_one_step.py"


class InputError(ValueError):
    """Bad input: the message names the problem and what to do."""


# ----- the input (no TensorFlow) -----------------------------------------------------

def read_npz(name, path, what):
    """{key: array} of the .npz at `path`; an InputError naming `name` (e.g. '--views')
    and saying `what` to pass where it is missing or not a readable .npz."""
    if not os.path.isfile(path):
        raise InputError(f"{name}={path}: no such file; pass {what}")
    try:
        data = np.load(path)
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                return {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise InputError(f"{name}={path} is not a readable .npz ({error}); pass "
                         f"{what}") from error
    raise InputError(f"{name}={path} is not an .npz but a single array (numpy.save's "
                     f".npy); pass {what}")


def nonfinite(name, array):
    """'NAME holds 1 NaN and 0 Inf values' where `array` holds a non-finite value,
    else None."""
    array = np.asarray(array)
    if not np.issubdtype(array.dtype, np.inexact):
        return None
    nans, infs = int(np.isnan(array).sum()), int(np.isinf(array).sum())
    return f"{name} holds {nans} NaN and {infs} Inf values" if nans or infs else None


def read_views(path, train_mode):
    """(images, labels) of `path`, checked: rank, channels, dtype, range, labels."""
    if not path:
        raise InputError(f"--views is required: {VIEWS}")
    arrays = read_npz("--views", path, VIEWS)
    missing = [key for key in ("images", "labels") if key not in arrays]
    if missing:
        raise InputError(f"--views={path} lacks {missing}; it holds {sorted(arrays)}")
    images, labels = arrays["images"], arrays["labels"]
    channels = 6 if train_mode == "pretrain" else 3
    shape = ("[N, H, W, 6]: two views of each example on the channel axis"
             if channels == 6 else "[N, H, W, 3]: one view")
    if images.dtype != np.float32:
        raise InputError(f"--views: images must be float32 in [0, 1]. Received dtype "
                         f"{images.dtype}: convert with images.astype(np.float32) (/ 255 "
                         "for 8-bit pixels)")
    if images.ndim != 4 or images.shape[-1] != channels:
        raise InputError(f"--views: --train_mode={train_mode} takes images {shape}. "
                         f"Received shape {list(images.shape)}")
    if images.size == 0:
        raise InputError("--views: images are empty: pass N >= 1 examples of at least "
                         f"1x1 px. Received shape {list(images.shape)}")
    problem = nonfinite("images", images)
    if problem:
        raise InputError(f"--views: {problem}; the authors' model takes finite values "
                         "in [0, 1]")
    if images.min() < 0.0 or images.max() > 1.0:
        raise InputError(f"--views: images must be in [0, 1] (the authors' model takes "
                         f"no normalisation). Received values in [{images.min():g}, "
                         f"{images.max():g}]")
    if labels.shape != (images.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise InputError(f"--views: labels must be integer class indices [N] = "
                         f"[{images.shape[0]}]. Received dtype {labels.dtype}, shape "
                         f"{list(labels.shape)}")
    return images, labels.astype(np.int64)


def check_checkpoint_path(path, required):
    """--checkpoint is given (else `required` says why it is needed) and exists; what
    it holds is `read_checkpoint`'s question."""
    if not path:
        raise InputError(f"--checkpoint is required: {required}")
    # A checkpoint prefix (.../variables/variables) is no file itself: its .index is.
    if not (os.path.exists(path) or os.path.exists(path + ".index")):
        raise InputError(f"--checkpoint={path}: no such file or folder; pass the "
                         "authors' SavedModel folder, its variables/ folder or its "
                         "checkpoint prefix")


def check_out(path):
    """--out names a file in an existing folder."""
    if not path:
        raise InputError("--out=PATH.npz is required: where the variables after the step go")
    if os.path.isdir(path):
        raise InputError(f"--out={path} is a folder; name the .npz file to write")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError(f"--out={path}: its folder {folder} does not exist")


def step_config(n):
    """The step's hyper-parameters as run.py's Config, checked by run.py's own rules
    (`Config.validate`; ConfigError naming the flag); `n`: the views' examples, the
    global batch. Also --train_batch_size and --use_blur against the views."""
    if FLAGS.train_batch_size is not None and FLAGS.train_batch_size != n:
        raise InputError(f"--train_batch_size={FLAGS.train_batch_size} but --views holds "
                         f"N={n} examples: the step takes them as one global batch")
    if FLAGS.use_blur:
        raise InputError("--use_blur=true: this tool applies no augmentation; the views are "
                         "given as the model receives them (blur them before, as the "
                         "authors' model does inside its call)")
    values = {name: FLAGS[name].value for name in CONFIG_FLAGS}
    # validate() asks a training run for its folder: the step writes beside --out.
    values.update(train_batch_size=n, mode="train",
                  model_dir=os.path.dirname(os.path.abspath(FLAGS.out)))
    try:
        # Given: the flags typed (this tool's defaults are the authors', not run.py's:
        # a default that differs is no choice of the user's to question).
        config = Config.from_dict(values, given={
            name for name in CONFIG_FLAGS if FLAGS[name].present}).validate()
    except ConfigError as error:
        if error.flag == "train_batch_size" and FLAGS.train_batch_size is None:
            raise InputError(f"{error} (--views holds N={n} examples: the global "
                             "batch)") from error
        raise
    if FLAGS.num_examples is not None:  # not run.py's flag (its dataset's size there);
        # bounds' checks read the value by name, from a Config or from these flags.
        bounds.positive("the examples of an epoch, e.g. 1281167",
                        unset="use N, the views' examples")(FLAGS, "num_examples")
    return config


# ----- the checkpoint and the step (TensorFlow) --------------------------------------

def readable_prefix(path):
    """The checkpoint prefix of --checkpoint=`path`, every tensor in it read once: a
    damaged file is named here, before the model is built (reading the R50's 132 MB
    takes 0.07 s)."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from simclr_tf.weights import official
    try:
        prefix = official.checkpoint_prefix(path)
    except FileNotFoundError as error:
        raise InputError(_not_official(path)) from error
    try:
        reader = tf.train.load_checkpoint(prefix)
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
    # IndexError: TensorFlow's 'Read less bytes than requested' from a truncated file.
    except (IndexError, tf.errors.OpError) as error:
        raise InputError(f"--checkpoint={path}: the checkpoint cannot be read "
                         f"({' '.join(str(error).split())}); it is damaged or "
                         "incomplete: copy it again") from error
    return prefix


def _not_official(path):
    return (f"--checkpoint={path} is not a model in the authors' released TF2 format (a "
            "SavedModel folder whose variables/ carry their names, resnet/block_group1/...)."
            " Pass such a folder, its variables/ folder or its checkpoint prefix; our own "
            "run directories are resumed with run.py instead")


def read_checkpoint(path):
    """`official.inspect_official(path)`, or an InputError saying what the checkpoint
    is: unreadable, not the authors' format, or not a model ours can represent."""
    from simclr_tf.weights import official  # pylint: disable=import-outside-toplevel
    readable_prefix(path)
    if not official.is_official_savedmodel(path):
        raise InputError(_not_official(path))
    try:
        return official.inspect_official(path)
    except ValueError as error:
        raise InputError(f"--checkpoint={path} cannot be imported: {error}") from error


def check_flags(config, labels):
    """The flags and the labels against the checkpoint's model (`config`), before the
    build."""
    from simclr_tf.config import rules  # pylint: disable=import-outside-toplevel
    resnet = config["encoder_options"]
    # Their code builds the CIFAR stem when its --image_size flag is <= 32 (the views'
    # size does not enter); the checkpoint's stem is the one that loads.
    if FLAGS.image_size is not None and \
            (FLAGS.image_size <= 32) != (resnet["stem"] == "cifar"):
        built = "cifar" if FLAGS.image_size <= 32 else "imagenet"
        raise InputError(
            f"--image_size={FLAGS.image_size}: the authors' code builds the {built} stem "
            f"then (the CIFAR stem at image_size <= 32), but the checkpoint has the "
            f"{resnet['stem']} stem, whose variables would not load there. Drop "
            "--image_size (the checkpoint's stem is used) or give one that fits it")
    given = dict(resnet_depth=(FLAGS.resnet_depth, resnet["depth"]),
                 width_multiplier=(FLAGS.width_multiplier, resnet["width_multiplier"]),
                 sk_ratio=(FLAGS.sk_ratio, resnet["sk_ratio"]),
                 se_ratio=(FLAGS.se_ratio, resnet["se_ratio"]),
                 proj_head_mode=(FLAGS.proj_head_mode, config["proj_head_mode"]),
                 num_proj_layers=(FLAGS.num_proj_layers, config["num_proj_layers"]),
                 proj_out_dim=(FLAGS.proj_out_dim, config["proj_out_dim"]),
                 num_classes=(FLAGS.num_classes, config["num_classes"]))
    wrong = [f"--{name}={flag} (the checkpoint: {value})"
             for name, (flag, value) in given.items() if flag is not None and flag != value]
    if wrong:
        raise InputError("These flags contradict the checkpoint: " + ", ".join(wrong)
                         + ". Drop them: they are read from it")
    needs_head = FLAGS.train_mode == "finetune" or FLAGS.lineareval_while_pretraining
    if needs_head and config["num_classes"] is None:
        raise InputError(
            f"--train_mode={FLAGS.train_mode} trains the supervised head, but the checkpoint "
            "has none (the authors' code would start one at random, which no other run can "
            "repeat). Use a checkpoint with its head, or --nolineareval_while_pretraining")
    if needs_head and (labels.min() < 0 or labels.max() >= config["num_classes"]):
        raise InputError(f"--views: labels must be in [0, {config['num_classes']}) (the "
                         f"checkpoint's classes). Received [{labels.min()}, {labels.max()}]")
    try:  # the Config's own rule, on the checkpoint's head (an index into its outputs)
        rules.check_ft_proj_selector(config["proj_head_mode"], config["num_proj_layers"],
                                     FLAGS.ft_proj_selector)
    except ValueError as error:
        raise ConfigError.from_rule("ft_proj_selector", error) from None


def build_model(info):
    """The checkpoint's model, every variable loaded, as the authors' flags build it."""
    # pylint: disable=import-outside-toplevel
    from simclr_tf.models import freeze_for_finetuning
    from simclr_tf.weights import official
    pretrain = FLAGS.train_mode == "pretrain"
    overrides = dict(ft_proj_selector=FLAGS.ft_proj_selector,
                     batch_norm_decay=FLAGS.batch_norm_decay, global_bn=FLAGS.global_bn,
                     supervised_head_stop_gradient=pretrain)
    if pretrain and not FLAGS.lineareval_while_pretraining:
        overrides["num_classes"] = None  # the authors' model has no head then
    if FLAGS.float64:
        overrides["dtype"] = "float64"
    try:
        model = official.load_official(info.prefix, **overrides)
    except ValueError as error:  # e.g. a selector whose width the head's kernel lacks
        raise InputError(f"--checkpoint={FLAGS.checkpoint} does not load as these flags "
                         f"build the model: {error}") from error
    if not pretrain:
        freeze_for_finetuning(model, FLAGS.fine_tune_after_block,
                              batch_statistics=FLAGS.frozen_batch_norm == "batch")
    return model


def one_step(model, named, prefix, images, labels, head_rate_multiplier):
    """Runs one step of --train_mode on (images, labels); returns its logs. `named`:
    `named_variables(model, prefix)`; `head_rate_multiplier`: the online head's rate
    over --learning_rate (`Config.head_rate_multiplier`)."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from simclr_tf.method import optimizers, schedules
    from simclr_tf.method.train import StepOptions, Trainer
    from simclr_tf.models.layers import keras_batch_norm
    n = images.shape[0]
    plan = schedules.compute_steps(
        num_examples=FLAGS.num_examples or n, batch_size=n, train_epochs=FLAGS.train_epochs,
        train_steps=FLAGS.train_steps, warmup_epochs=FLAGS.warmup_epochs)
    rate = schedules.WarmUpAndCosine(
        FLAGS.learning_rate, batch_size=n, warmup_steps=plan.warmup_steps,
        total_steps=plan.total_steps, scaling=FLAGS.learning_rate_scaling)
    optimizer, decay = optimizers.build_optimization(
        FLAGS.optimizer, rate, model=model, momentum=FLAGS.momentum,
        weight_decay=FLAGS.weight_decay, head_rate_multiplier=head_rate_multiplier)
    strategy = tf.distribute.get_strategy()
    trainer = Trainer(strategy, model, optimizer,
                      StepOptions(train_mode=FLAGS.train_mode, temperature=FLAGS.temperature,
                                  hidden_norm=FLAGS.hidden_norm),
                      weight_decay_loss=decay)
    restore_optimizer(optimizer, named, prefix)
    if FLAGS.float64:
        images = images.astype(np.float64)
    if FLAGS.train_mode == "pretrain":  # [N, H, W, 6] -> the two views, as theirs splits
        first, second = np.split(images, 2, axis=-1)
        batch = ((first, second), labels.astype(np.int32))
    else:
        batch = (images, labels.astype(np.int32))
    dataset = tf.data.Dataset.from_tensors(batch)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    if FLAGS.fused_batch_norm:
        return trainer.train_steps(iterator, 1)
    with keras_batch_norm():  # traced here: the step computes BN as the authors' code
        return trainer.train_steps(iterator, 1)


def restore_optimizer(optimizer, named, prefix):
    """The step and LARS momentum a training checkpoint of the authors' code carries
    (their released SavedModels carry none: the optimizer then starts fresh).
    `named`: {the authors' full name: our variable}."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from simclr_tf.weights.official.names import read_official_optimizer
    state = read_official_optimizer(prefix)
    if state is None:
        return
    step, slots = state
    if FLAGS.optimizer != "lars" or set(slots) - {"Momentum"}:
        raise InputError(
            f"--checkpoint={FLAGS.checkpoint} carries the state of an optimizer with slots "
            f"{sorted(slots)}; this tool continues LARS' ('Momentum'), with "
            "--optimizer=lars. Pass the model's SavedModel to start the optimizer fresh")
    reader = tf.train.load_checkpoint(prefix)
    optimizer.iterations.assign(step)
    momentum = slots.get("Momentum", {})
    for name, variable in named.items():
        if name in momentum and variable.trainable:
            slot = optimizer.momentums[optimizer._get_variable_index(variable)]  # pylint: disable=protected-access
            slot.assign(reader.get_tensor(momentum[name]).astype(slot.dtype))


def named_variables(model, prefix):
    """{the authors' full name: our variable} for every variable of `model`."""
    # pylint: disable=import-outside-toplevel
    from simclr_tf.weights.official.names import read_official_names
    from simclr_tf.weights.official.roles import official_roles, our_roles
    _, names = read_official_names(prefix)
    theirs, _ = official_roles(names)
    ours = our_roles(model)
    return {theirs[key]: variable for key, variable in ours.items()}


def write_out(path, arrays):
    """`arrays` as an .npz exactly at `path` (np.savez would add .npz to a name without
    it), whole or not at all (script_io.WriteFailed naming it)."""
    def write(scratch):
        with open(scratch, "wb") as f:
            np.savez(f, **arrays)
    script_io.write_whole(path, write)


def run():
    # What needs no TensorFlow first: a bad path or flag is refused in a second.
    check_out(FLAGS.out)
    images, labels = read_views(FLAGS.views, FLAGS.train_mode)
    check_checkpoint_path(FLAGS.checkpoint, "the authors' SavedModel folder")
    config = step_config(images.shape[0])
    quiet.import_tensorflow()  # run.py's way: TensorFlow's start-up lines filtered
    info = read_checkpoint(FLAGS.checkpoint)
    check_flags(info.config, labels)
    model = build_model(info)
    named = named_variables(model, info.prefix)
    logs = one_step(model, named, info.prefix, images, labels,
                    config.head_rate_multiplier())
    dtype = np.float64 if FLAGS.float64 else np.float32
    out = {name: np.asarray(variable.numpy(), dtype) for name, variable in named.items()}
    values = dict(contrast_loss=logs.get("contrast_loss", 0.0),
                  supervised_loss=logs.get("supervised_loss", 0.0),
                  weight_decay_loss=logs["weight_decay"], total_loss=logs["loss"],
                  learning_rate=logs["learning_rate"])
    out.update({name: dtype(value) for name, value in values.items()})
    write_out(FLAGS.out, out)
    print(f"{FLAGS.train_mode} step on {images.shape[0]} examples of "
          f"{images.shape[1]}x{images.shape[2]} px: "
          + ", ".join(f"{name} {float(value):.6g}" for name, value in values.items())
          + f"; {len(out) - len(values)} variables -> {FLAGS.out}")


# ----- compare -----------------------------------------------------------------------

def read_output(role, path):
    """{name: array} of a step's out.npz (`role`: OURS.npz or AUTHORS.npz, for the
    messages); an InputError where it is no step's output."""
    arrays = read_npz(role, path, OUTPUT)
    if not set(SCALARS) & set(arrays):
        raise InputError(f"{role}={path} holds none of a step's scalars "
                         f"({', '.join(SCALARS)}): it is not {OUTPUT}")
    for name, value in arrays.items():
        if not np.issubdtype(value.dtype, np.number) or (name in SCALARS and value.size != 1):
            kind = "a number" if name in SCALARS else "an array of numbers"
            raise InputError(f"{role}={path}: {name} is not {kind} (dtype {value.dtype}, "
                             f"shape {list(value.shape)}): it is not {OUTPUT}")
    return arrays


def faults(ours, theirs):
    """What fails a comparison whatever the tolerances, one phrase each: a variable or
    scalar one output lacks, a shape that differs, a NaN or Inf on either side."""
    found = []
    sides = (("ours", ours, theirs), ("the authors'", theirs, ours))
    for side, mine, other in sides:
        lacks = sorted(set(other) - set(mine))
        if lacks:
            found.append(f"{side} lacks {_some(lacks)}")
    shapes = [f"{name} ({list(ours[name].shape)} against {list(theirs[name].shape)})"
              for name in sorted(set(ours) & set(theirs))
              if ours[name].shape != theirs[name].shape]
    if shapes:
        found.append(f"shapes differ: {_some(shapes)}")
    for side, mine, _ in sides:
        bad = [problem for name in sorted(mine) if (problem := nonfinite(name, mine[name]))]
        if bad:
            found.append(f"{side}: {_some(bad)}")
    return found


def _some(items, shown=5):
    """The first `shown` of `items`, and how many more."""
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def update_differences(ours, theirs, before):
    """Per variable both outputs hold with one shape, the difference of the updates
    relative to the authors' update: {name: (max|ours - theirs| / max|theirs|,
    ||ours - theirs|| / ||theirs||)} (0 or infinite where theirs did not move:
    `_relative`), and {scalar both hold: relative difference}. A NaN or Inf on either side
    makes its difference NaN or Inf (never within a tolerance); what is left out is
    `faults`'."""
    updates = {}
    for name in sorted((set(ours) & set(theirs)) - set(SCALARS)):
        if ours[name].shape != theirs[name].shape:
            continue
        start = before[name]
        mine, reference = ours[name] - start, theirs[name] - start
        gap = mine - reference
        with np.errstate(invalid="ignore"):  # Inf / Inf: NaN, as meant
            updates[name] = (_relative(np.max(np.abs(gap)), np.max(np.abs(reference))),
                             _relative(np.linalg.norm(gap), np.linalg.norm(reference)))
    losses = {name: abs(float(ours[name]) - float(theirs[name])) /
              max(abs(float(theirs[name])), 1e-12)
              for name in SCALARS if name in theirs and name in ours}
    return updates, losses


def _relative(difference, size):
    """`difference` relative to `size`; where the size is 0 (the authors' step left the
    variable unchanged), 0 if ours left it unchanged too, else infinite: no movement
    there is within a tolerance."""
    if size > 0:
        return float(difference / size)
    return 0.0 if difference == 0 else float("inf") if difference > 0 else float("nan")


def unchanged_apart(ours, theirs, before, names):
    """The variables among `names` that one side's step left exactly as they were at
    the start and the other's moved: (moved by ours only, moved by the authors' only).
    A variable a step does not train (a frozen block, a head outside the mode) keeps
    its value to the bit on both sides: a movement is a fault whatever its size."""
    left = {side: {name for name in names if np.array_equal(arrays[name], before[name])}
            for side, arrays in (("ours", ours), ("theirs", theirs))}
    return sorted(left["theirs"] - left["ours"]), sorted(left["ours"] - left["theirs"])


def far_from_start(arrays, before):
    """Where `arrays` (one side's output) is not one step from `before` (the
    --checkpoint): the variables whose "update" is at least as large as their value
    at the start, when they are more than half of those not zero at the start; else
    an empty list. One step moves a variable by a fraction of itself (LARS by about
    --learning_rate x 1e-3); another model's weights, or another start, by as much as
    the weights (about 1.4 times for two independent initialisations), so every
    "update" would be inflated and every relative difference with it."""
    sized = [name for name in before if name in arrays and np.any(before[name])
             and arrays[name].shape == before[name].shape]
    far = [name for name in sized
           if np.linalg.norm(arrays[name] - before[name]) >= np.linalg.norm(before[name])]
    return far if 2 * len(far) > len(sized) else []


def initial_values(checkpoint, wanted):
    """{name: value} in the checkpoint of the names among `wanted` (the step's start)."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from simclr_tf.weights.official.names import read_official_names
    prefix, names = read_official_names(checkpoint)
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(names[name]) for name in wanted if name in names}


def fingerprint(after, before):
    """A small record of a step, for a test against the authors' (the R50's values
    would not fit the repository): per variable `name`, the update's norm
    (`name/norm`) and its projection on a fixed unit direction drawn from the name
    (`name/projection`); and the step's scalars."""
    record = {}
    for name in sorted(after):
        if name in SCALARS:
            record[name] = np.float64(after[name])
            continue
        update = np.asarray(after[name], np.float64) - np.asarray(before[name], np.float64)
        seed = zlib.crc32(name.encode("utf-8"))
        direction = np.random.default_rng(seed).standard_normal(update.shape)
        record[f"{name}/norm"] = np.linalg.norm(update)
        record[f"{name}/projection"] = np.sum(update * direction) / np.linalg.norm(direction)
    return record


def _worst_first(item):
    """Sort key of (name, difference): NaN first, then the largest."""
    return (not math.isnan(item[1]), -item[1])


def compare(ours_path, theirs_path):
    """Prints the comparison of two steps' outputs and one verdict line, PASS or FAIL
    with its reasons; returns the exit status (0 PASS, 1 FAIL)."""
    for name in ("update_tolerance", "loss_tolerance"):
        # run.py's rules of a float flag >= 0 (bounds' checks read the value by name).
        for check in (bounds.float32(), bounds.at_least(0)):
            check(FLAGS, name)
    check_checkpoint_path(FLAGS.checkpoint, "the model both steps started from (an "
                          "update is the value after the step minus the checkpoint's)")
    ours, theirs = read_output("OURS.npz", ours_path), read_output("AUTHORS.npz", theirs_path)
    quiet.import_tensorflow()  # run.py's way: TensorFlow's start-up lines filtered
    readable_prefix(FLAGS.checkpoint)
    both = sorted(name for name in (set(ours) & set(theirs)) - set(SCALARS)
                  if ours[name].shape == theirs[name].shape)  # else one of the `faults`
    before = initial_values(FLAGS.checkpoint, both)
    wrong = [f"{name} (absent)" if name not in before else
             f"{name} ({list(before[name].shape)} there)" for name in both
             if name not in before or before[name].shape != theirs[name].shape]
    if wrong:
        raise InputError(f"--checkpoint={FLAGS.checkpoint} does not hold the outputs' "
                         f"variables: {_some(wrong)}; pass the model both steps started "
                         "from")
    for role, path, arrays in (("OURS.npz", ours_path, ours),
                               ("AUTHORS.npz", theirs_path, theirs)):
        far = far_from_start(arrays, before)
        if far:
            raise InputError(
                f"{role}={path} is not one step from --checkpoint={FLAGS.checkpoint}: "
                f"{len(far)} variables ({_some(far, 2)}) moved by at least their own "
                "size, as far as another model's weights; pass the model both steps "
                "started from")
    found = faults(ours, theirs)
    updates, losses = update_differences(ours, theirs, before)
    moved_by_ours, moved_by_theirs = unchanged_apart(ours, theirs, before, both)
    if moved_by_ours:
        found.append(f"ours moved {len(moved_by_ours)} variables the authors' step left "
                     f"unchanged: {_some(moved_by_ours)}")
    if moved_by_theirs:
        found.append(f"ours left unchanged {len(moved_by_theirs)} variables the "
                     f"authors' step moved: {_some(moved_by_theirs)}")
    largest = sorted(((name, value) for name, (value, _) in updates.items()),
                     key=_worst_first)
    print(f"{len(largest)} variables; largest update difference / update size: "
          + ", ".join(f"{name} {value:.2e}" for name, value in largest[:5]))
    print("losses (relative): " + ", ".join(f"{name} {value:.2e}"
                                            for name, value in losses.items()))
    print(f"tolerances: --update_tolerance={FLAGS.update_tolerance:g} (on each variable's "
          f"max|difference| / max|update|), --loss_tolerance={FLAGS.loss_tolerance:g}")
    apart = set(moved_by_ours) | set(moved_by_theirs)  # reported above
    over = [f"{name} {value:.2e}" for name, value in largest
            if not value <= FLAGS.update_tolerance and name not in apart]
    if over:
        found.append(f"{len(over)} of {len(largest)} update differences over "
                     f"--update_tolerance: {_some(over)}")
    over = [f"{name} {value:.2e}" for name, value in sorted(losses.items(), key=_worst_first)
            if not value <= FLAGS.loss_tolerance]
    if over:
        found.append(f"over --loss_tolerance: {_some(over)}")
    if not largest:
        found.append("no variable compared")
    print("FAIL: " + "; ".join(found) if found else "PASS")
    return 1 if found else 0


COMPARE_FLAGS = ("checkpoint", "update_tolerance", "loss_tolerance")


def refuse_unread(comparing):
    """A flag given to the side that does not read it is an InputError, not dropped:
    the step's flags to `compare` (which reads two finished outputs), the tolerances to
    the step."""
    given = [name for name in FLAGS if FLAGS[name].present]
    if comparing:
        unread = [name for name in given if name not in COMPARE_FLAGS]
        where = "compare reads two finished steps' outputs: only --checkpoint and the "
        where += "tolerances apply"
    else:
        unread = [name for name in given if name in COMPARE_FLAGS[1:]]
        where = "the tolerances apply to compare only"
    if unread:
        raise InputError(f"{', '.join('--' + name for name in unread)} would do nothing "
                         f"here ({where}); leave {'them' if len(unread) > 1 else 'it'} out")


def main(argv):
    """The command line `argv` (argv[0] the program); returns the exit status."""
    if any(arg in ("-h", "--help", "--helpfull") for arg in argv[1:]):
        print(__doc__ + "\nFlags:\n" + FLAGS.get_help())
        return 0
    try:
        FLAGS.unparse_flags()
        try:
            argv = FLAGS(list(argv))
        except flags.Error as error:
            raise InputError(f"{error} (python scripts/one_step.py --help lists the "
                             "flags)") from error
        comparing = len(argv) > 1 and argv[1] == "compare"
        refuse_unread(comparing)
        if comparing:
            if len(argv) != 4:
                raise InputError("compare takes two .npz files: OURS.npz AUTHORS.npz")
            return compare(argv[2], argv[3])
        if len(argv) > 1:
            raise InputError(f"Unexpected arguments {argv[1:]}: flags are --name=value; "
                             "the one subcommand is compare")
        run()
    except (InputError, ConfigError, script_io.WriteFailed) as error:
        print(f"one_step.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
