"""Evaluator names -> classes: `get_evaluator`, `register_evaluator`.

```python
evaluator = get_evaluator("knn")(strategy, source=source, image_size=32,
                                 batch_size=256, bank_split="train", query_split="test")
values = evaluator.run(model, step)   # see simclr_tf.evaluation.base
```

The names are one table here rather than entries each module adds when imported: the
table is the list of what exists, read in one place, and an evaluator cannot be
missing because nothing happened to import its module (the same choice as
`simclr_tf.data.registry` for datasets). User code adds its own with
`register_evaluator(name, cls)`, touching no file of the package. The modes build
them from the Config in one place, `simclr_tf.run.modes.evaluations.evaluators_for`.
"""
import difflib

from simclr_tf.evaluation import base, distill, knn, supervised, transfer
from simclr_tf.config.tables import evaluators as evaluator_table

EVALUATORS = {
    "supervised": supervised.SupervisedEval,   # --mode=eval: the supervised head
    "knn": knn.KnnEval,                        # the kNN monitor of pretraining
    "linear_probe": transfer.LinearProbeEval,  # --mode=linear_probe: probe and kNN
    "final_probe": transfer.FinalProbeEval,    # --final_linear_probe
    "distill": distill.DistillEval,            # the monitor of --train_mode=distill
}


def register_evaluator(name, cls, **needs):
    """Registers the `base.Evaluator` subclass `cls` under `name` (replacing any), and
    its row of `tables.evaluators` (what --evaluators checks before TensorFlow is
    imported): `needs` are `EvaluatorRow`'s fields (splits, objects,
    during_training, at_checkpoint, every), by default none."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string. Received: name={name!r}")
    if not (isinstance(cls, type) and issubclass(cls, base.Evaluator)):
        raise ValueError("cls must be a subclass of simclr_tf.evaluation.base.Evaluator. "
                         f"Received: cls={cls!r}")
    evaluator_table.register(evaluator_table.EvaluatorRow(name, **needs))
    EVALUATORS[name] = cls


def get_evaluator(name):
    """The evaluator class registered as `name`."""
    if name not in EVALUATORS:
        close = difflib.get_close_matches(str(name), EVALUATORS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"No evaluator is registered as {name!r}.{hint} Known: "
                         f"{sorted(EVALUATORS)}; add one with register_evaluator(name, "
                         f"cls). Received: name={name!r}")
    return EVALUATORS[name]
