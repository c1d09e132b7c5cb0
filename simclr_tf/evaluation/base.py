"""What an evaluator is: built once from plain arguments, then run on a model at a step.

    evaluator = registry.get_evaluator("knn")(
        strategy, source=source, image_size=32, batch_size=256, seed=0,
        bank_split="train", query_split="test")
    values = evaluator.run(model, step)     # {'knn/top_1_accuracy': 0.93, ...}
    print(evaluator.describe(values, step=step))
    write_scalars(writer, step, evaluator.scalars(values))

The contract (big_vision's evaluators: one small interface, the trainer only calls it):

- The constructor takes the strategy that holds the models' variables and keyword
  arguments only: the common ones every evaluator accepts (`source`, `image_size`,
  `batch_size`, `seed`; `modes.evaluations.evaluators_for` passes them to each) and its own
  (splits, k, ...). Never a Config nor flags, so an evaluator is built the same way in
  a mode, a test or a notebook. What does not depend on the weights (the eval
  dataset, sampled ids) is prepared here, once.
- `run(model, step, *, checkpoint=None)` evaluates `model` (built under that strategy;
  called in inference mode) and returns {name: value} under the final record and
  TensorBoard names ('eval/label_top_1_accuracy', 'knn/top_1_accuracy'): the modes
  merge them into their results as they are, so the names are decided here, once.
  `checkpoint` is the prefix the weights were read from (None: weights in memory);
  an evaluator that records it or caches by encoder uses it.
- `scalars(values)`: the entries that are TensorBoard scalars. By default the floats
  (measurements); ints (counts, steps) and strings (a checkpoint path) go to the
  records only.
- `protocols(values, *, step, checkpoint=None)`: {accuracy name: how it was
  measured}, a JSON-able dict per accuracy `run` returned (`protocol` makes the
  common part: evaluator, split, examples counted, the split's size, the eval
  preprocessing; each evaluator adds its own: k and temperature, the probe's C and
  how it was chosen, ...). The modes write each as the result entry
  `protocol/<name>` with a `checkpoint` {path, step} added where the evaluator gave
  none. {} by default.
- `describe(values, *, step, checkpoint=None)`: the one line printed for a run.
- `announce()`: for an evaluator that takes more than a few seconds, the line printed
  before it starts (what it computes, on how many examples), so a run is never silent
  for minutes; None by default. While it runs, `self.tell(text)` prints a line for
  each phase (the modes set `say`; nothing is printed without it).

A new evaluator is a module with an `Evaluator` subclass and one line in
`simclr_tf.evaluation.registry.EVALUATORS` (plus, when it reads flags of its own, one
line in `simclr_tf.run.modes.evaluations.EVALUATOR_ARGUMENTS`).
"""
import numpy as np
import tensorflow as tf

from simclr_tf.evaluation import features


# Splits at least this large are announced before they are read (several seconds on
# a CPU; ImageNet's validation split takes minutes).
ANNOUNCE_EXAMPLES = 5000


class Evaluator:
    """The base of every evaluator (see the module docstring for the contract).

    Args:
        strategy: the `tf.distribute.Strategy` whose scope holds the models.
        source: the `DatasetSource` the splits are read from.
        image_size: the model's input size (eval preprocessing resizes to it).
        batch_size: global batch of the evaluation pipeline.
        seed: seed of whatever the evaluator samples (subsets, held-out parts).
    """

    def __init__(self, strategy, *, source, image_size, batch_size=256, seed=0):
        if not isinstance(strategy, tf.distribute.Strategy):
            raise ValueError("strategy must be a tf.distribute.Strategy. Received: "
                             f"strategy={strategy!r}")
        if (not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool)
                or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int. Received: "
                             f"batch_size={batch_size!r}")
        self.strategy, self.source = strategy, source
        self.image_size, self.batch_size, self.seed = image_size, int(batch_size), seed
        self.say = None  # set by the modes (`evaluations.run_evaluators`): prints a line

    def run(self, model, step, *, checkpoint=None):
        """{record / TensorBoard name: value} of `model` at `step`."""
        raise NotImplementedError(f"{type(self).__name__} must define run(model, step).")

    def scalars(self, values):
        """The entries of `values` that are TensorBoard scalars: the floats."""
        return {name: value for name, value in values.items()
                if isinstance(value, (float, np.floating))}

    def protocols(self, values, *, step, checkpoint=None):  # pylint: disable=unused-argument
        """{accuracy name in `values`: its protocol} (see the module docstring)."""
        return {}

    def protocol(self, evaluator, split, examples, **fields):
        """The common part of a protocol: `evaluator` (its registry name), the split
        and the examples counted in it, the split's size (more when a subset or
        fewer steps were evaluated), the eval preprocessing at this image size;
        then `fields`."""
        return dict(evaluator=evaluator, split=split, examples=int(examples),
                    split_examples=int(self.source.num_examples(split)),
                    preprocessing=features.preprocessing_record(self.image_size),
                    **fields)

    def announce(self):
        """The line printed before a long evaluation starts, or None."""
        return None

    def tell(self, text):
        """A line about a phase of the evaluation, when the caller prints (`say`)."""
        if self.say is not None:
            self.say(text)

    def describe(self, values, *, step, checkpoint=None):  # pylint: disable=unused-argument
        """The line printed after a run (subclasses say it in their own words)."""
        shown = ", ".join(f"{name} {value:.4f}" for name, value in self.scalars(values).items())
        return f"{type(self).__name__} at step {step}: {shown}"
