"""The fixed teacher of `--train_mode=distill` (SimCLR v2's third stage).

`inspect_teacher(path)` says what a path holds as a teacher (its architecture, its
classes, where they were read) without building anything, so that preflight refuses
a bad teacher before any weights exist; `build_teacher(info, strategy, ...)` builds
it under the run's strategy and loads every variable; `Teacher(images)` is its
logits in inference mode.

A teacher is anything `checkpoints.resolve` reads that has a supervised head:
- our run directory or checkpoint prefix: the architecture from its run's
  flags.json (`checkpoints.recorded_run_config`), the classes from the shape of
  the head's kernel in the checkpoint;
- one of our SavedModel exports (`run/saved_model/<step>`): its variables, with the
  flags.json of the run it lies in;
- an authors' released model with a supervised head: the architecture and the
  head's input layer from `official.inspect_official`.
"""
import dataclasses
import os
from typing import Optional

import tensorflow as tf

from simclr_tf import checkpoints, official, records
from simclr_tf.models import SimCLRModel
from simclr_tf.models.outputs import LOGITS

RELEASED_IMAGE_SIZE = 224  # the authors' released models were trained at 224 px
# model_dir's record of the teacher a distillation run started with: the weights
# --teacher resolved to then (a run directory resolves to its newest checkpoint, which
# changes while that run trains on), so that a resumed run learns from the same ones.
PIN_FILE = "teacher.json"


class TeacherError(ValueError):
    """A path that cannot be a teacher; the message names the path and the fix
    (preflight reports it as the error of --teacher)."""


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
    """
    path: str
    weights: checkpoints.Weights
    model_kwargs: dict
    num_classes: int
    image_size: Optional[int]
    description: str


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
                       f"{kind} {weights.prefix}")


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
                       RELEASED_IMAGE_SIZE, f"released model {path}")


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
    """`pin` (`read_pin`) when it records this --teacher, else None: a run given
    another --teacher (a changed flag, allowed) is not held to the old weights."""
    return pin if pin is not None and pin.get("teacher") == teacher_flag else None


def write_pin(model_dir, teacher_flag, info, write_guard=None):
    """Records the teacher's weights in model_dir (`PIN_FILE`)."""
    if write_guard is not None:
        write_guard()
    records.write_json(os.path.join(model_dir, PIN_FILE),
                       dict(teacher=teacher_flag, weights=pinned_weights(info),
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
    """Builds the teacher of `info` under `strategy` and loads every variable.

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
    model.trainable = False
    return Teacher(model, info)
