"""The evaluators a run may name with --evaluators, without TensorFlow: what each
needs of the flags and of the run (`EvaluatorRow`, `EVALUATORS`), and the one
function that says which a run runs (`resolve`).

The classes are `simclr_tf.evaluation.registry`'s (which imports TensorFlow); this
table holds their names and needs, so that `validation` refuses a bad --evaluators
before TensorFlow is imported. `registry.register_evaluator` adds a row here too.

Which a run runs, with --evaluators empty (its default), as before the flag:
- a training mode: its train mode's monitors (`train_modes.TrainMode`): kNN when
  the row has `knn_monitor` and --knn_eval_split is set, then the row's `monitors`
  when --eval_split is set (distillation's student against its teacher);
- a mode that reads a checkpoint: its `tables.modes.Mode.evaluators`
  (--mode=eval: the supervised head; --mode=linear_probe: kNN and the probe);
  train_then_eval's eval after training runs its row's, whatever --evaluators says.
"""
import dataclasses
from typing import Optional

from simclr_tf.config.errors import ConfigError
from simclr_tf.config.tables import modes, train_modes

FLAG = "evaluators"


@dataclasses.dataclass(frozen=True)
class EvaluatorRow:
    """What an evaluator needs, for the checks of --evaluators.

    Attributes:
        name: its `simclr_tf.evaluation.registry` name.
        splits: the split flags it evaluates on: each must be set.
        objects: arguments that are objects of the run, not flags: 'teacher' (a
            distillation's, during training) or 'baseline' (the final probe's random
            encoder: --final_linear_probe runs it, --evaluators cannot).
        during_training: it can monitor the training model (a training mode).
        at_checkpoint: it can measure a checkpoint read whole (--mode=eval,
            --mode=linear_probe).
        every: during training, the flag of the steps between its evaluations (0:
            at every checkpoint); None: at every checkpoint.
    """
    name: str
    splits: tuple = ()
    objects: tuple = ()
    during_training: bool = True
    at_checkpoint: bool = True
    every: Optional[str] = None


EVALUATORS = {row.name: row for row in (
    EvaluatorRow("supervised", splits=("eval_split",), during_training=False),
    EvaluatorRow("knn", splits=("knn_eval_split",), every="knn_eval_every"),
    EvaluatorRow("linear_probe", splits=("train_split", "eval_split"),
                 during_training=False),
    EvaluatorRow("final_probe", splits=("train_split", "eval_split"),
                 objects=("baseline",), during_training=False),
    EvaluatorRow("distill", splits=("eval_split",), objects=("teacher",),
                 at_checkpoint=False),
)}


def register(row):
    """Adds `row` (an evaluator registered outside this package); returns it."""
    if not isinstance(row, EvaluatorRow):
        raise ValueError(f"register takes an EvaluatorRow. Received: row={row!r}")
    EVALUATORS[row.name] = row
    return row


def row(name):
    """The row of `name`; an evaluator registered without one needs nothing."""
    return EVALUATORS.get(name) or EvaluatorRow(name)


def parse(value):
    """The names of an --evaluators value, in order ('' or None: ())."""
    return tuple(name.strip() for name in (value or "").split(",") if name.strip())


@dataclasses.dataclass(frozen=True)
class RunEvaluators:
    """What `resolve` found: registry names, in the order they run.

    Attributes:
        training: run on the training model during training (a training mode).
        at_checkpoint: run on each checkpoint the mode reads (--mode=eval,
            --mode=linear_probe, train_then_eval's eval after training).
    """
    training: tuple = ()
    at_checkpoint: tuple = ()


def resolve(config):
    """The evaluators `config`'s run runs: --evaluators when given, else its mode's
    (a training mode: its train mode's monitors); see the module's docstring."""
    mode = modes.get(config.mode)
    given = parse(config.evaluators)
    if mode.trains:
        return RunEvaluators(training=given or default_monitors(config),
                             at_checkpoint=mode.evaluators)
    return RunEvaluators(at_checkpoint=given or mode.evaluators)


def evaluates_head(config):
    """Whether the run evaluates the supervised head on --eval_split at a checkpoint
    (`resolve`'s at_checkpoint names 'supervised': --mode=eval unless --evaluators
    leaves it out, train_then_eval's eval after training): it then needs labels on
    --eval_split and a run that has the head."""
    return "supervised" in resolve(config).at_checkpoint


def default_monitors(config):
    """A training run's monitors without --evaluators: its train mode's."""
    objective = train_modes.get(config.train_mode)
    return (("knn",) if objective.knn_monitor and config.knn_eval_split else ()) + (
        tuple(objective.monitors) if config.eval_split else ())


def check(config):
    """--evaluators names evaluators of the table, once each, that this mode can
    run and whose flags are set; a ConfigError of --evaluators naming the fix
    otherwise. Empty (the default) is always valid."""
    given = parse(config.evaluators)
    if not given:
        return
    if any(not part.strip() for part in config.evaluators.split(",")):
        raise ConfigError(FLAG, f"has an empty name in {config.evaluators!r}; give "
                          "comma-separated evaluator names, e.g. --evaluators=supervised,knn.")
    mode = modes.get(config.mode)
    where = "during training" if mode.trains else "on the checkpoint it reads"
    if not mode.trains and not mode.evaluators:
        raise ConfigError(FLAG, f"is {config.evaluators!r}, but --mode={config.mode} runs "
                          "no evaluators; drop --evaluators, or use --mode=eval or "
                          "--mode=linear_probe.")
    provided = ("teacher",) if mode.trains and train_modes.get(
        config.train_mode).needs_teacher else ()
    for position, name in enumerate(given):
        if name not in EVALUATORS:
            raise ConfigError(FLAG, f"names {name!r}, which is no evaluator; choose from "
                              f"{', '.join(EVALUATORS)} (comma-separated; empty for the "
                              "mode's own).")
        if name in given[:position]:
            raise ConfigError(FLAG, f"names {name!r} twice; name each evaluator once.")
        row = EVALUATORS[name]
        missing = [each for each in row.objects if each not in provided]
        if missing == ["baseline"]:
            raise ConfigError(FLAG, f"names {name!r}, which --final_linear_probe runs "
                              "after training (beside its random-init baseline); drop it "
                              "and pass --final_linear_probe.")
        if missing:
            raise ConfigError(FLAG, f"names {name!r}, which needs a distillation's "
                              f"teacher: it runs only with --train_mode=distill and "
                              f"--mode=train or train_then_eval; drop it.")
        if not (row.during_training if mode.trains else row.at_checkpoint):
            raise ConfigError(FLAG, f"names {name!r}, which --mode={config.mode} cannot "
                              f"run {where}; drop it (it runs "
                              + ("on a checkpoint read whole: --mode=eval)."
                                 if row.at_checkpoint else "during training)."))
        for flag in row.splits:
            if not getattr(config, flag):
                raise ConfigError(FLAG, f"names {name!r}, which evaluates on --{flag}, "
                                  f"and --{flag} is not set; set it, or drop {name!r}.")
