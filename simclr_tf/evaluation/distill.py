"""The student against its teacher on a split: both top-1 accuracies and how often
the student's class is the teacher's (`DistillEval`, the monitor of
--train_mode=distill, run at every checkpoint and after the last step).

Counts, as `simclr_tf.evaluation.supervised`: each replica pads its share of a batch
(padding rows carry id -1 and are never counted), counts its hits, and the counts are
summed over replicas, so the result is the same for any number of replicas and any
batch size. The agreement counts every example of the split (a split without labels
has one too); the accuracies count the labelled ones.
"""
import tensorflow as tf

from simclr_tf.method import losses
from simclr_tf.method.objectives.distill import same_class
from simclr_tf.weights import checkpoints
from simclr_tf.evaluation import base, features
from simclr_tf.models.outputs import LOGITS

COUNTS = ("student_correct", "teacher_correct", "agreed", "num_labelled", "num_examples")


def distill_counts(student, teacher, images, labels, ids):
    """This replica's counts of `COUNTS` for one (padded) batch.

    Args:
        student: `student(images, training=False)` -> dict with 'logits_sup'.
        teacher: `teacher(images)` -> logits (a `simclr_tf.weights.teacher.Teacher`).
        images: float32 [n, H, W, 3].
        labels: int [n], -1 unlabelled or padding.
        ids: int [n], -1 for padding rows.
    """
    student_logits = tf.cast(student(images, training=False)[LOGITS], tf.float32)
    teacher_logits = tf.cast(teacher(images), tf.float32)
    real = tf.cast(ids >= 0, tf.float32)
    same = same_class(teacher_logits, student_logits)
    return dict(student_correct=losses.top_k_correct(labels, student_logits, 1),
                teacher_correct=losses.top_k_correct(labels, teacher_logits, 1),
                agreed=tf.reduce_sum(same * real),
                num_labelled=tf.reduce_sum(tf.cast(labels >= 0, tf.float32)),
                num_examples=tf.reduce_sum(real))


class DistillEval(base.Evaluator):
    """The student's and the teacher's top-1 on `split`, and their agreement.

    Args (besides `base.Evaluator`'s):
        split: the split evaluated (labels optional: without them only the
            agreement is measured).
        teacher: the run's `simclr_tf.weights.teacher.Teacher`, built under `strategy`.
        steps: evaluate at most this many batches (None: all).

    `run` returns 'distill/student_top_1_accuracy', 'distill/teacher_top_1_accuracy'
    (when the split has labels), 'distill/teacher_agreement', 'distill/num_examples'
    and 'global_step'.
    """

    def __init__(self, strategy, *, split, teacher, steps=None, **common):
        super().__init__(strategy, **common)
        self.split, self.teacher, self.steps = split, teacher, steps
        self.dataset = features.eval_dataset(self.source, split, image_size=self.image_size,
                                             batch_size=self.batch_size)
        self.labelled = self.source.has_labels(split)
        self._model = self._step = None
        self._labelled = 0  # labelled examples counted by the last run

    def run(self, model, step, *, checkpoint=None):
        if model is not self._model:
            per_replica = features.replica_batch_size(self.strategy, self.dataset,
                                                      self.batch_size)
            self._step = features.summed_counts_step(
                self.strategy, lambda batch: distill_counts(
                    model, self.teacher, batch["image"], batch["label"], batch["id"]),
                per_replica)
            self._model = model
        totals = features.total_counts(self.strategy, self._step, self.dataset, COUNTS,
                                       self.steps)
        agreed = totals["agreed"] / max(totals["num_examples"], 1.0)
        values = {"distill/teacher_agreement": agreed}
        self._labelled = int(totals["num_labelled"])
        if self.labelled:
            labelled = max(totals["num_labelled"], 1.0)
            values["distill/student_top_1_accuracy"] = totals["student_correct"] / labelled
            values["distill/teacher_top_1_accuracy"] = totals["teacher_correct"] / labelled
        values.update({"distill/num_examples": int(totals["num_examples"]),
                       "global_step": step})
        return values

    def protocols(self, values, *, step, checkpoint=None):
        if "distill/student_top_1_accuracy" not in values:
            return {}
        counted = self._labelled
        common = dict(method="top-1 of the supervised head's logits, counted over the "
                      "split's labelled examples", batches=self.steps)
        weights = self.teacher.info.weights
        teacher_checkpoint = dict(path=weights.prefix, step=checkpoints.step_of(
            weights.prefix), weights=f"the teacher ({weights.kind})")
        return {
            "distill/student_top_1_accuracy": self.protocol(
                "distill", self.split, counted, model="the student", **common),
            "distill/teacher_top_1_accuracy": self.protocol(
                "distill", self.split, counted, model="the teacher (fixed)",
                checkpoint=teacher_checkpoint, **common)}

    def announce(self):
        size = self.source.num_examples(self.split)
        if size < base.ANNOUNCE_EXAMPLES:
            return None
        return (f"Evaluating the student and the teacher on {self.split} "
                f"({size} examples) ...")

    def describe(self, values, *, step, checkpoint=None):
        accuracy = ""
        if "distill/student_top_1_accuracy" in values:
            accuracy = (f"student top-1 {values['distill/student_top_1_accuracy']:.4f}, "
                        f"teacher {values['distill/teacher_top_1_accuracy']:.4f}, ")
        return (f"Distillation on {self.split} at step {step}: {accuracy}agreement "
                f"{values['distill/teacher_agreement']:.4f} "
                f"({values['distill/num_examples']} examples)")
