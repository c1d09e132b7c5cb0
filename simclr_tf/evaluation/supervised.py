"""Top-1 / top-5 accuracy and loss of the supervised head over a split.

No optimizer and no Trainer: the model is called in inference mode under any
`tf.distribute` strategy on the batches of the one eval pipeline
(`features.eval_dataset`). Each replica pads its share of a batch to a fixed size
(`features.pad_batch`: padding rows carry label -1), counts the top-1 and top-5 hits
and sums the loss over its labelled rows (label >= 0), and the counts are summed over
replicas. Counting instead of averaging makes the result the same for 1 or many
replicas and any batch size (up to float rounding of the loss).

`SupervisedEval` is the evaluator of --mode=eval (`simclr_tf.evaluation.base`): the
counts of `SupervisedEvaluator` and the weight-decay term under the authors' names.

Example:
>>> evaluate(strategy, model, source, "test", image_size=32, batch_size=256)
{'top_1_accuracy': 0.91, 'top_5_accuracy': 0.99, 'loss': 0.31, 'num_examples': 10000}
"""
import tensorflow as tf

from simclr_tf.method import losses, optimizers
from simclr_tf.evaluation import base, features
from simclr_tf.models.outputs import LOGITS

# What a replica returns per batch: all counts and sums, summed over replicas.
COUNTS = ("top_1_correct", "top_5_correct", "num_labelled", "loss_sum")


def eval_counts(model, images, labels):
    """This replica's top-1 / top-5 hits, labelled examples and summed loss.

    Args:
        model: `model(images, training=False)` -> dict with 'logits_sup'.
        images: float32 [n, H, W, 3].
        labels: int [n] class ids; -1 (unlabelled or padding) is never counted.

    Returns:
        dict of float32 scalars named as `COUNTS`.
    """
    outputs = model(images, training=False)
    if LOGITS not in outputs:
        raise ValueError("The model has no supervised head: its outputs lack "
                         f"'logits_sup'. Received keys: {sorted(outputs)}")
    logits = outputs[LOGITS]
    labels = tf.cast(labels, tf.int32)
    labelled = labels >= 0
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(labels, 0), logits=tf.cast(logits, tf.float32))
    return dict(top_1_correct=losses.top_k_correct(labels, logits, 1),
                top_5_correct=losses.top_k_correct(labels, logits, 5),
                num_labelled=tf.reduce_sum(tf.cast(labelled, tf.float32)),
                loss_sum=tf.reduce_sum(tf.where(labelled, per_example, 0.0)))


class SupervisedEvaluator:
    """Top-1 / top-5 / loss of `logits_sup` over datasets of `eval_dataset` batches.

    Args:
        strategy: the strategy whose scope holds the model's variables.
        model: callable `model(images, training=False) -> dict` with 'logits_sup'.

    Example:
        evaluator = SupervisedEvaluator(strategy, model)
        dataset = features.eval_dataset(source, "test", image_size=32, batch_size=256)
        evaluator(dataset)   # e.g. after restoring each checkpoint
    """

    def __init__(self, strategy, model):
        features.check_strategy_and_model(strategy, model)
        self.strategy, self.model = strategy, model
        self._step = None
        self._per_replica = None

    def __call__(self, dataset, *, steps=None, batch_size=None):
        """dict(top_1_accuracy, top_5_accuracy, loss, num_examples) as Python numbers,
        over the labelled examples (label >= 0).

        Args:
            dataset: global batches, dicts with 'image' and 'label' (an
                `features.eval_dataset`), not yet distributed.
            steps: evaluate at most this many batches (None or 0: all).
            batch_size: the global batch size (None: read from the dataset).
        """
        if steps is not None and (not isinstance(steps, int) or steps < 0):
            raise ValueError(f"steps must be None or an int >= 0. Received: steps={steps!r}")
        per_replica = features.replica_batch_size(self.strategy, dataset, batch_size)
        if self._step is None or self._per_replica != per_replica:
            self._step = features.summed_counts_step(
                self.strategy, lambda batch: eval_counts(self.model, batch["image"],
                                                         batch["label"]), per_replica)
            self._per_replica = per_replica
        totals = features.total_counts(self.strategy, self._step, dataset, COUNTS, steps)
        count = totals["num_labelled"]
        denominator = max(count, 1.0)
        return dict(top_1_accuracy=totals["top_1_correct"] / denominator,
                    top_5_accuracy=totals["top_5_correct"] / denominator,
                    loss=totals["loss_sum"] / denominator, num_examples=int(count))


def evaluate(strategy, model, source, split, *, image_size, batch_size=256, steps=None):
    """One-call form of `SupervisedEvaluator` over `features.eval_dataset(...)`."""
    dataset = features.eval_dataset(source, split, image_size=image_size,
                                    batch_size=batch_size)
    return SupervisedEvaluator(strategy, model)(dataset, steps=steps, batch_size=batch_size)


class SupervisedEval(base.Evaluator):
    """The supervised head on a split, with the loss's weight-decay term at these
    weights (the authors' eval/regularization_loss: with LARS the head's only).

    Args (besides `base.Evaluator`'s):
        split: the labelled split evaluated.
        steps: evaluate at most this many batches (None: all).
        optimizer, weight_decay: the run's; they decide which weights decay
            (`optimizers.weight_decay_loss`).

    `run` returns the authors' names ('eval/label_top_1_accuracy', ...,
    'eval/regularization_loss'), ours beside them ('eval/supervised_loss',
    'eval/num_examples') and 'global_step'.
    """

    def __init__(self, strategy, *, split, steps=None, optimizer="lars", weight_decay=0.0,
                 **common):
        super().__init__(strategy, **common)
        self.split, self.steps = split, steps
        self.optimizer, self.weight_decay = optimizer, weight_decay
        self.dataset = features.eval_dataset(self.source, split, image_size=self.image_size,
                                             batch_size=self.batch_size)
        self._model = self._counts = self._regularization = None

    def run(self, model, step, *, checkpoint=None):
        if model is not self._model:
            # Once per model: the compiled step and the decayed variables.
            self._counts = SupervisedEvaluator(self.strategy, model)
            self._regularization = optimizers.weight_decay_loss(model, self.optimizer,
                                                                self.weight_decay)
            self._model = model
        metrics = self._counts(self.dataset, steps=self.steps)
        # The authors' names; ours (supervised_loss, num_examples) beside them.
        return {"eval/label_top_1_accuracy": metrics["top_1_accuracy"],
                "eval/label_top_5_accuracy": metrics["top_5_accuracy"],
                "eval/regularization_loss": float(self._regularization()),
                "eval/supervised_loss": metrics["loss"],
                "eval/num_examples": metrics["num_examples"], "global_step": step}

    def protocols(self, values, *, step, checkpoint=None):
        counted = values["eval/num_examples"]
        common = self.protocol(
            "supervised", self.split, counted,
            method="top-k of the supervised head's logits (logits_sup), counted over "
            "the split's labelled examples", batches=self.steps)
        return {"eval/label_top_1_accuracy": dict(common, top_k=1),
                "eval/label_top_5_accuracy": dict(common, top_k=5)}

    def announce(self):
        size = self.source.num_examples(self.split)
        if size < base.ANNOUNCE_EXAMPLES:
            return None
        batches = -(-size // self.batch_size)
        if self.steps:
            batches = min(batches, self.steps)
        return f"Evaluating the supervised head on {self.split}: {batches} batches ..."

    def describe(self, values, *, step, checkpoint=None):
        return (f"Eval on {self.split} at step {step}: top-1 "
                f"{values['eval/label_top_1_accuracy']:.4f}, top-5 "
                f"{values['eval/label_top_5_accuracy']:.4f} "
                f"({values['eval/num_examples']} examples, {checkpoint})")
