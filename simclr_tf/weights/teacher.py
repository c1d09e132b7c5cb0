"""The fixed teacher of `--train_mode=distill` (SimCLR v2's third stage).

`inspect_teacher(path)` says what a path holds as a teacher (its architecture, its
classes, where they were read) without building anything, so that preflight refuses
a bad teacher before any weights exist; `build_teacher(info, strategy, ...)` builds
it under the run's strategy and loads every variable; `Teacher(images)` is its
logits in inference mode.

A teacher is anything `checkpoints.resolve` reads that has a supervised head:
- our run directory or checkpoint prefix: the architecture from its run's
  flags.json (`checkpoints.recorded_run_config`, which finds the run by
  `run_dirs`, as inherit and open_encoder do), the classes from the shape of the
  head's kernel in the checkpoint;
- one of our SavedModel exports (`run/saved_model/<step>`): its variables, with the
  flags.json of the run it lies in;
- an authors' released model with a supervised head: the architecture and the
  head's input layer from `official.inspect_official`.
"""
import dataclasses
import hashlib
import os
from typing import Optional

import tensorflow as tf
from absl import logging

from simclr_tf.config.tables import train_modes
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints, official
from simclr_tf.models import SimCLRModel
from simclr_tf.models.outputs import LOGITS

RELEASED_IMAGE_SIZE = 224  # the authors' released models were trained at 224 px
# model_dir's record of the teacher a distillation run started with: where the weights
# --teacher resolved to then lie (a run directory resolves to its newest checkpoint,
# which changes while that run trains on) and their digest (`weights_digest`: the
# files there may be replaced by other weights), so that a resumed run learns from the
# same ones.
PIN_FILE = "teacher.json"


class TeacherError(ValueError):
    """A path that cannot be a teacher; the message names the path and the fix
    (preflight reports it as the error of --teacher)."""


class PinUnreadableError(TeacherError):
    """model_dir's `PIN_FILE` cannot be read (preflight reports it as the error of
    --model_dir)."""


@dataclasses.dataclass(frozen=True)
class TeacherInfo:
    """What `inspect_teacher` read.

    Attributes:
        path: the path as given.
        weights: its `checkpoints.Weights`.
        model_kwargs: `SimCLRModel` arguments of the teacher, its supervised head
            included.
        num_classes: the classes its supervised head scores.
        image_size: the image size it was trained at (None: unknown).
        description: one phrase for the run's lines ('checkpoint /run/ckpt-60').
        digest: `weights_digest` of its weights when inspected.
        pinned: model_dir's `PIN_FILE` records these weights in full (this
            --teacher, with their digest; `pin_of`), so a training run has nothing
            to write; set by `resolve`.
        head_labels: the labels its supervised head trained on, from its run's
            flags.json (`head_labels`): (fraction of the split, the split, dataset,
            how), or None when not recorded (a released model).
    """
    path: str
    weights: checkpoints.Weights
    model_kwargs: dict
    num_classes: int
    image_size: Optional[int]
    description: str
    digest: Optional[str] = None
    pinned: bool = False
    head_labels: Optional[tuple] = None


# How the head of a teacher's run trained, by its train mode's row.
ONLINE_HEAD = "a pretraining run whose online head"
FINE_TUNED = "a fine-tune whose head"


def share_of_labels(fraction):
    """'every label', '0.1 of the labels'."""
    return "every label" if fraction >= 1 else f"{fraction:.3g} of the labels"


def head_labels(recorded):
    """(fraction, train split, dataset, how) of the labels the supervised head of the
    run recorded as `recorded` (its Config) trained on: a pretraining run's online
    head reads every label of its split (`ONLINE_HEAD`), a fine-tune those of
    --label_fraction (`FINE_TUNED`); None for another train mode (a distilled
    student's labels are its teacher's)."""
    row = train_modes.TRAIN_MODES.get(recorded.train_mode)
    if row is None:
        return None
    if row.online_head:
        return 1.0, recorded.train_split, recorded.dataset, ONLINE_HEAD
    if row.labels == "required":
        return (recorded.label_fraction, recorded.train_split, recorded.dataset,
                FINE_TUNED)
    return None


def weights_digest(weights):
    """'sha256:<hex>' of the index file of `weights` (a `checkpoints.Weights`: a
    checkpoint of ours, an export's variables or a release's). The index lists every
    tensor with its dtype, shape, place and the CRC32C of its bytes, so other weights
    give another digest; reading it costs a few kB, not the weights.

    Raises:
        TeacherError: the index cannot be read.
    """
    path = weights.prefix + ".index"
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    except (OSError, tf.errors.OpError) as error:
        raise TeacherError(f"{path!r} cannot be read ({error}); pass an intact "
                           "checkpoint, run directory or SavedModel.") from None


def supervised_head_classes(prefix):
    """The classes of the supervised head in our checkpoint at `prefix` (a training
    checkpoint or an export's variables), or None when it has none."""
    shapes = checkpoints.object_variable_shapes(prefix, "model", "supervised_head")
    kernels = [shape for shape in shapes.values() if len(shape) == 2]
    return int(kernels[0][-1]) if kernels else None


def inspect_teacher(path):
    """The `TeacherInfo` of `path`, read from its records and variable shapes only.

    Raises:
        TeacherError: nothing loadable at `path`, a checkpoint that cannot be read,
            no supervised head, or an architecture nothing records.
    """
    try:
        weights = checkpoints.resolve(path)
    except FileNotFoundError as error:
        raise TeacherError(str(error)) from None
    reason = checkpoints.unreadable_reason(weights.prefix)
    if reason is not None:
        raise TeacherError(f"{weights.prefix!r} cannot be read ({reason}); pass an intact "
                           "checkpoint, run directory or SavedModel.")
    if weights.kind == checkpoints.RELEASED:
        return _released(path, weights)
    num_classes = supervised_head_classes(weights.prefix)
    if num_classes is None:
        raise TeacherError(f"{weights.prefix!r} has no supervised head: a teacher scores "
                           "classes. Fine-tune it first (--train_mode=finetune "
                           f"--checkpoint={path}), or pass a fine-tuned run.")
    recorded = checkpoints.recorded_run_config(weights)
    if recorded is None:
        raise TeacherError(f"{weights.prefix!r} has no flags.json in its run directory, "
                           "so its architecture is unknown; pass the run directory it "
                           "was trained in (or an export inside it, run/saved_model/"
                           "<step>).")
    kwargs = recorded.model_kwargs(num_classes)
    if kwargs["num_classes"] is None:
        raise TeacherError(f"{weights.prefix!r} holds a supervised head, but its run's "
                           f"flags.json records a model without one (--train_mode="
                           f"{recorded.train_mode}); pass the run that wrote it.")
    kind = "export" if weights.kind == checkpoints.EXPORT else "checkpoint"
    return TeacherInfo(path, weights, kwargs, num_classes, recorded.image_size,
                       f"{kind} {weights.prefix}", weights_digest(weights),
                       head_labels=head_labels(recorded))


def _released(path, weights):
    try:
        info = official.inspect_official(path)
    except (ValueError, FileNotFoundError) as error:
        raise TeacherError(f"cannot import the released model {path!r}: {error}") from None
    kwargs = dict(info.config)
    if kwargs.get("num_classes") is None:
        raise TeacherError(f"the released model {path!r} has no supervised head (a "
                           "pretrained-only release); distil from a fine-tuned release, "
                           "or fine-tune it first (--train_mode=finetune "
                           f"--checkpoint={path}).")
    if not info.ft_proj_selector_inferred:
        raise TeacherError(official.selector_unknown_message(path, info.config)
                           + " As a teacher it must be told: fine-tune it into a run of "
                           "ours with --ft_proj_selector=N and distil from that run.")
    return TeacherInfo(path, weights, kwargs, int(kwargs["num_classes"]),
                       RELEASED_IMAGE_SIZE, f"released model {path}",
                       weights_digest(weights))


def resolve(teacher_flag, model_dir):
    """The teacher a distillation run learns from, resolved once per run (preflight
    asks, and its `RunContext.teacher` carries the answer): what `teacher_flag`
    holds (`inspect_teacher`) or, when model_dir's `PIN_FILE` pins this --teacher,
    the weights it pinned (`pinned_teacher`); `pinned` says whether the pin is
    complete (else the training run writes it: `write_pin`).

    Args:
        teacher_flag: --teacher.
        model_dir: the run's directory (None or '': no pin to read).

    Raises:
        PinUnreadableError: model_dir's `PIN_FILE` cannot be read.
        TeacherError: `teacher_flag` cannot be a teacher, or the pinned weights are
            gone or replaced.
    """
    info = inspect_teacher(teacher_flag)
    try:
        pin = read_pin(model_dir) if model_dir else None
    except ValueError as error:
        raise PinUnreadableError(
            f"its {PIN_FILE}, the record of the teacher this run started with, cannot "
            f"be read ({error}); restore it from a copy, or start a new --model_dir."
        ) from None
    info = pinned_teacher(pin, teacher_flag, info)
    return dataclasses.replace(info, pinned=pin_of(pin, teacher_flag) is not None)


def pinned_weights(info):
    """What `PIN_FILE` records for `info`: the checkpoint prefix of ours (a run
    directory's newest checkpoint at the time), the directory of a release."""
    return info.path if info.weights.kind == checkpoints.RELEASED else info.weights.prefix


def read_pin(model_dir):
    """`{'teacher': the --teacher given, 'weights': what it resolved to}` recorded in
    model_dir, or None."""
    path = os.path.join(model_dir, PIN_FILE)
    if not tf.io.gfile.exists(path):
        return None
    pin = records.read_json(path)  # ValueError: not JSON
    if not isinstance(pin, dict) or not isinstance(pin.get("weights"), str):
        raise ValueError(f"{path!r} holds no 'weights' entry")
    return pin


def pin_of(pin, teacher_flag):
    """`pin` (`read_pin`) when it records this --teacher's weights in full (with
    their digest), else None: write the pin (`write_pin`). A run given another
    --teacher (a changed flag, allowed) is not held to the old weights; a pin written
    before pins had digests gets one."""
    if pin is None or pin.get("teacher") != teacher_flag or not pin.get("digest"):
        return None
    return pin


def pinned_teacher(pin, teacher_flag, info):
    """The teacher a run learns from: `info` (what --teacher resolves to now), or,
    when model_dir's `pin` (`read_pin`) records this --teacher, the pinned weights,
    which must be the same weights as when the run started.

    A pin without a digest (written by an older version) is taken at its word, with
    a warning: the weights now at its path are the teacher, and the run records their
    digest (`pin_of`, `write_pin`).

    Raises:
        TeacherError: the pinned weights no longer load, or their path now holds other
            weights (the teacher's run redone, a release replaced).
    """
    if pin is None or pin.get("teacher") != teacher_flag:
        return info
    pinned = pin["weights"]
    if pinned != pinned_weights(info):
        try:
            info = inspect_teacher(pinned)
        except TeacherError as error:
            raise TeacherError(
                f"this run started distilling from {pinned!r} ({teacher_flag!r} then), "
                f"which no longer loads ({error}); a resumed run must learn from the same "
                "teacher. Restore it, or start a new --model_dir.") from None
        info = dataclasses.replace(info, path=teacher_flag, description=(
            f"{info.description}, pinned by {PIN_FILE} (--teacher now resolves to newer "
            "weights)"))
    if not pin.get("digest"):
        logging.warning("%s (written by an older version) names the teacher's weights "
                        "by their path only: the weights at %s now are taken as the ones "
                        "this run started with, and their digest is recorded.", PIN_FILE,
                        pinned)
        return info
    if pin["digest"] != info.digest:
        raise TeacherError(
            f"this run started distilling from the weights at {pinned!r} ({teacher_flag!r} "
            f"then), and that path now holds other weights (digest {info.digest[:19]}..., "
            f"pinned {pin['digest'][:19]}...): the teacher was retrained or replaced there "
            "since. A resumed run must learn from the same teacher: restore those "
            "weights, or start a new --model_dir (or, to go on learning from the new ones, "
            f"delete its {PIN_FILE}).")
    return info


def write_pin(model_dir, teacher_flag, info, write_guard=None):
    """Records the teacher's weights in model_dir (`PIN_FILE`): where they lie and
    their digest."""
    if write_guard is not None:
        write_guard()
    records.write_json(os.path.join(model_dir, PIN_FILE),
                       dict(teacher=teacher_flag, weights=pinned_weights(info),
                            digest=info.digest or weights_digest(info.weights),
                            description=info.description, num_classes=info.num_classes))


class Teacher:
    """A built teacher: `teacher(images)` -> float32 logits [n, classes], in
    inference mode (moving batch-norm statistics, no dropout). Its model is not
    trainable: no optimizer sees its variables, and nothing saves them with the
    student's checkpoints (a resumed run loads the teacher again from its path).

    Attributes:
        model: the teacher's `SimCLRModel`.
        info: its `TeacherInfo`.
    """

    def __init__(self, model, info):
        self.model, self.info = model, info

    def __call__(self, images):
        return tf.cast(self.model(images, training=False)[LOGITS], tf.float32)


def build_teacher(info, strategy, *, image_size, dtype="float32"):
    """Builds the teacher of `info` under `strategy` and loads every variable, the
    weights `info.digest` names.

    Args:
        info: a `TeacherInfo` (`inspect_teacher`).
        strategy: the run's strategy: the teacher's variables live with the
            student's, one copy per replica.
        image_size: the side of the images it will see (the student's).
        dtype: Keras dtype policy ('mixed_bfloat16' runs it in bfloat16; its logits
            are float32 either way).

    Returns:
        A `Teacher`.
    """
    with strategy.scope():
        model = SimCLRModel(**info.model_kwargs, dtype=dtype, name="teacher")
        model.build((None, image_size, image_size, 3))
    if info.weights.kind == checkpoints.RELEASED:
        official.load_official_weights(model, info.path, supervised_head=True)
    else:
        checkpoints.restore_model(model, info.weights.prefix)
    # What was loaded is what was inspected (and pinned): no teacher run rewrote the
    # files in between.
    if info.digest is not None and weights_digest(info.weights) != info.digest:
        raise TeacherError(f"the weights at {info.weights.prefix!r} were replaced while "
                           "this run loaded them (another run writing there?); run the "
                           "same command again once that run is done.")
    model.trainable = False
    return Teacher(model, info)
