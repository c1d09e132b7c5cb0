"""The train modes of `--train_mode`: one table, asked by the pipeline, the model's
parts, `validation`, `preflight`, `Config`, `keras_fit` and `inherit` instead of
comparing the mode's name; each objective's step is one module of
`simclr_tf.method.objectives`.

This module imports nothing of TensorFlow (run.py checks the flags before TensorFlow
is imported): the built-in objectives' classes are named in
`simclr_tf.method.train.objective_class`, which the Trainer calls; a registered row names
its step class as 'module:Class', imported when a Trainer is built. A new objective is
one file: its `TrainMode` row (`register`) and
its `simclr_tf.method.objectives.base.Objective` subclass (its loss, its slice of the step
options). A file outside simclr_tf is loaded with `load_module(path)`
(`--objective_module=path.py` on run.py's command line), which runs it: its
`register` call adds the row, and the row's `options` become flags of run.py.
"""
import dataclasses
import importlib
import importlib.util
import os
import sys
import types

from simclr_tf.config import bounds, tables


@dataclasses.dataclass(frozen=True)
class Option:
    """A train mode's own option with rules for its value (`option`)."""
    default: object
    checks: tuple = ()


def option(default, *checks):
    """An option of a `TrainMode` (in its `options`) whose value must pass `checks`:
    `simclr_tf.config.bounds`' positive, at_least, within or rule, as a Config
    field declares them (each reads the option's own value)."""
    return Option(default, tuple(checks))


@dataclasses.dataclass(frozen=True)
class TrainMode:
    """What a train mode asks of the rest of the code (the data, the model, the
    checks, the records), for the questions once asked by comparing its name.

    Attributes:
        name: the value of --train_mode.
        objective: 'module:Class' of its `simclr_tf.method.objectives.base.Objective`
            (a registered row); empty for the built-in rows, whose classes
            `simclr_tf.method.train.objective_class` names.
        help: one phrase for --help.
        views: views per image in a batch: 2 gives `((view1, view2), labels)` of
            colour-distorted views (--augment_on=device: the step draws them from
            the batch's source images, `augment.StepViews`),
            1 gives `(images, labels)` of crop-and-flip images.
        labels: 'none' (it learns without them: --label_fraction does not apply,
            and a labelled dataset of one class measures nothing), 'required' (its
            train split must be labelled; --label_fraction trains on a subset) or
            'optional' (it mixes in the labels of a --label_fraction subset).
        needs_teacher: it learns from --teacher (a fixed model with a supervised
            head): the Trainer takes one, and only then.
        online_head: its supervised head is optional (--lineareval_while_pretraining)
            and trains on stop_gradient(h): the head's gradient stops at h, and
            --head_learning_rate applies to it. False: whenever the run has classes
            the model has the head, and its gradient reaches the encoder.
        blur: --use_blur applies (the step blurs its views on the device).
        grad_cache: --grad_cache_chunk applies (a loss that couples the batch).
        freezes: --fine_tune_after_block applies (layers frozen before it trains).
        contrastive_batch: each image's copies would be negatives of each other:
            the batch is checked against the split's size and the loss's rules.
        knn_monitor: --knn_eval_split monitors the representation while training.
        monitors: `simclr_tf.evaluation.registry` names run at every checkpoint of
            training, on --eval_split (distillation: the student against its teacher).
        metrics: the step's log names it may write (`train/<name>` in TensorBoard,
            'loss' as `train/total_loss`), besides the Trainer's own.
        options: its own options that are no Config field: {name: default, or
            `option(default, *checks)` for one whose value has rules}; run.py
            defines each as a flag, and the values reach its step in
            `StepOptions.objective_options`. Stored as (name, default) pairs.
        option_checks: (name, checks) of the options declared with checks (filled
            from `options`' `option(...)` declarations): `validation` runs them on
            the flags before anything is built, `StepOptions` on the step's values.
    """
    name: str
    objective: str
    help: str
    views: int = 1
    labels: str = "none"
    needs_teacher: bool = False
    online_head: bool = False
    blur: bool = False
    grad_cache: bool = False
    freezes: bool = False
    contrastive_batch: bool = False
    knn_monitor: bool = False
    monitors: tuple = ()
    metrics: tuple = ()
    options: tuple = ()
    option_checks: tuple = ()

    def __post_init__(self):
        if self.views not in (1, 2):
            raise ValueError(f"views must be 1 or 2. Received: views={self.views!r}")
        if self.labels not in ("none", "required", "optional"):
            raise ValueError("labels must be 'none', 'required' or 'optional'. "
                             f"Received: labels={self.labels!r}")
        defaults, checks = {}, dict(self.option_checks)
        for name, declared in dict(self.options).items():
            if isinstance(declared, Option):
                defaults[name], checks[name] = declared.default, declared.checks
            else:
                defaults[name] = declared
        object.__setattr__(self, "options", tuple(defaults.items()))
        object.__setattr__(self, "option_checks", tuple(checks.items()))

    @property
    def needs_labels(self):
        """Its train split must be labelled."""
        return self.labels == "required"

    def check_options(self, values):
        """Runs each option's declared checks on its value in `values` ({option:
        value}; its default where absent); ConfigError (a ValueError) naming the
        option's flag."""
        defaults = dict(self.options)
        for name, checks in self.option_checks:
            value = types.SimpleNamespace(**{name: values.get(name, defaults[name])})
            for check in checks:
                check(value, name)

    def option_values(self, given):
        """{option: value} of this row's options: `given`'s ({option: value}; keys of
        no option of this row are left out), the defaults for the others."""
        return {name: given.get(name, default) for name, default in self.options}

    def objective_class(self):
        """The `Objective` subclass of `objective`, imported now (a registered row's;
        `simclr_tf.method.train.objective_class` answers for every row)."""
        if not self.objective:
            raise ValueError(f"train mode {self.name!r} names no objective class: a built-in "
                             "one's is named by simclr_tf.method.train.objective_class, "
                             "a registered row names its own as 'module:Class'.")
        module, _, name = self.objective.partition(":")
        return getattr(importlib.import_module(module), name)


_STEP_METRICS = ("loss", "weight_decay", "grad_norm", "learning_rate", "num_examples")

TRAIN_MODES = {row.name: row for row in (
    TrainMode("pretrain", "",
              "pretrain: the contrastive objective (and the online linear head on "
              "stop_gradient(h))",
              views=2, labels="none", online_head=True, blur=True, grad_cache=True,
              contrastive_batch=True, knn_monitor=True,
              metrics=("contrast_loss", "contrast_acc", "contrast_entropy",
                       "supervised_loss", "supervised_acc")),
    TrainMode("finetune", "",
              "finetune: the supervised loss on labels",
              labels="required", freezes=True,
              metrics=("supervised_loss", "supervised_acc")),
    TrainMode("distill", "",
              "distill: SimCLR v2's third stage, a student trained on every training "
              "image to match the fixed --teacher's tempered softmax",
              labels="optional", needs_teacher=True, freezes=True, monitors=("distill",),
              metrics=("distill_loss", "teacher_agreement", "supervised_loss",
                       "supervised_acc")),
    *(TrainMode(name, "", help_, views=2, labels="none",
                online_head=True, blur=True, grad_cache=True, contrastive_batch=True,
                knn_monitor=True, options=options,
                metrics=("contrast_loss", "contrast_acc", "contrast_entropy",
                         "supervised_loss", "supervised_acc"))
      for name, help_, options in (
          ("nt_logistic", "nt_logistic: pretraining with the paper's "
           "NT-Logistic loss instead of NT-Xent (its Table 2)", ()),
          ("margin_triplet", "margin_triplet: pretraining with the "
           "paper's margin triplet loss (its Table 2; --triplet_margin)",
           dict(triplet_margin=option(0.5, bounds.positive("e.g. 0.5")))))),
)}


def register(row):
    """Adds `row` to the table (an objective defined outside simclr_tf.method.objectives);
    returns it. An option named like one of run.py's flags is refused: it would take
    that flag's value, and the flag would change both."""
    if isinstance(row, TrainMode):
        _check_option_names(row)
    return tables.add_row(TRAIN_MODES, row, TrainMode, "row")


# run.py's flag names, which an option may not take: the Config, a floor above this
# table, declares them when its module is imported (`reserve_flag_names`).
_FLAG_NAMES = set()


def reserve_flag_names(names):
    """Declares run.py's flag names; a row registered before with an option of one of
    them is refused now (ValueError), one registered after by `register`."""
    _FLAG_NAMES.update(names)
    for row in TRAIN_MODES.values():
        _check_option_names(row)


def _check_option_names(row):
    clashes = [name for name, _ in row.options if name in _FLAG_NAMES]
    if clashes:
        raise ValueError(
            f"train mode {row.name!r}: its option {clashes[0]!r} has the name of "
            f"run.py's flag --{clashes[0]}, whose value it would take (and "
            f"--{clashes[0]} would then set both). Rename the option, e.g. "
            f"'{row.name}_{clashes[0]}'.")


def get(name):
    """The `TrainMode` called `name`; ValueError naming the train modes otherwise."""
    return tables.get_row(TRAIN_MODES, name, "train_mode")


def check_grad_cache_mode(chunk, train_mode):
    """Gradient caching applies to pretraining only (the train modes whose row has
    `grad_cache`): it exists for the contrastive loss, which couples the whole batch;
    the supervised loss does not."""
    if chunk and not get(train_mode).grad_cache:
        raise ValueError("grad_cache_chunk applies to pretraining only (the supervised "
                         "loss needs no whole-batch coupling): drop it or pretrain. "
                         f"Received: grad_cache_chunk={chunk!r}, train_mode={train_mode!r}")


def help_text():
    """The --train_mode help: every train mode's phrase."""
    return "; ".join(row.help for row in TRAIN_MODES.values()) + "."


def load_module(path):
    """Runs the objective file `path` (--objective_module) once, as module
    'simclr_tf_objective_<stem>'; its `register` call adds its row. Returns the module."""
    if not os.path.isfile(path):
        raise ValueError(f"objective_module must be a Python file. Received: "
                         f"objective_module={path!r}")
    name = "simclr_tf_objective_" + os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its 'module:Class' row resolves by this name
    try:
        spec.loader.exec_module(module)
    except SystemExit as error:  # sys.exit() in the file: say so, never exit quietly
        del sys.modules[name]
        raise ValueError(
            f"objective_module {path!r} exited while it was loaded (SystemExit("
            f"{error.code!r}){_line_in(error, path)}): an objective file defines its "
            "Objective class and calls register(...), and must not exit.") from None
    except Exception as error:
        del sys.modules[name]
        raise ValueError(
            f"objective_module {path!r} failed while it was loaded"
            f"{_line_in(error, path)}: {type(error).__name__}: {error}") from error
    except BaseException:  # Ctrl-C
        del sys.modules[name]
        raise
    return module


def _line_in(error, path):
    """', line N' of the last frame of `error`'s traceback in the file `path`."""
    line = None
    frame = error.__traceback__
    while frame is not None:
        if os.path.abspath(frame.tb_frame.f_code.co_filename) == os.path.abspath(path):
            line = frame.tb_lineno
        frame = frame.tb_next
    if line is None and isinstance(error, SyntaxError) and error.lineno:
        line = error.lineno
    return f", line {line}" if line else ""


def all_options():
    """{option: default} of every registered row's own options."""
    return {name: default for row in TRAIN_MODES.values() for name, default in row.options}


def modes_where(test):
    """The names of the train modes whose rows pass `test(row)`, in the table's order
    (the rows registered since import included)."""
    return [row.name for row in TRAIN_MODES.values() if test(row)]


def modes_with_option(name):
    """The train modes whose rows have the option `name`."""
    return modes_where(lambda row: name in dict(row.options))


def applies(rows, what, fix, others=(), holds=lambda *values: True):
    """Where a Config field applies (`fields.field(..., applies=...)`: `bounds.applies`)
    when that is in some train modes: those whose rows pass `rows(row)`, and there
    when `holds(*the values of the settings others names)`. `what` says where, its
    '{modes}' the train modes' names (from the table as it is then)."""
    return bounds.applies(("train_mode",) + tuple(others),
                          lambda mode, *values: rows(get(mode)) and holds(*values),
                          lambda: what.format(modes=bounds.either(modes_where(rows))), fix)


# Flags that apply in the train modes of a kind (the Config fields name them).
FROZEN_BLOCKS = applies(lambda row: row.freezes, "where a block is frozen (--train_mode="
                        "{modes} with --fine_tune_after_block >= 0)",
                        "freeze blocks with --fine_tune_after_block (e.g. 4)",
                        ("fine_tune_after_block",), lambda block: block >= 0)
LABELLED = applies(lambda row: row.labels != "none", "to a train mode that learns from "
                   "labels (--train_mode={modes})", "fine-tune (--train_mode=finetune)")
ONLINE_HEAD = applies(lambda row: row.online_head, "to the online linear head of "
                      "pretraining (--train_mode={modes} with "
                      "--lineareval_while_pretraining)", "pretrain with that head "
                      "(fine-tuning trains everything at --learning_rate)",
                      ("lineareval_while_pretraining",), lambda head: head)
