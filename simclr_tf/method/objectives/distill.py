"""--train_mode=distill: SimCLR v2's distillation (eq. 3) against a fixed teacher, and its
losses (`distillation_loss`, eq. 2; `labelled_cross_entropy`, eq. 3's labelled term)."""
import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.method.objectives import base


class Distill(base.Objective):
    """Alpha times the cross-entropy against the teacher's tempered softmax, plus
    1 - alpha times the cross-entropy on the labelled examples (none when alpha is
    1), on one view, + weight decay; batch `(images, labels)`, labels -1 for the
    unlabelled.

    The teacher sees the student's images, in inference mode (moving BN statistics),
    outside the tape: it gets no gradient, and its weights never change.
    """

    def non_finite_causes(self):
        return ("a temperature too low (--distill_temperature="
                f"{self.options.distill_temperature:g})",)

    def train_step(self, batch):
        """One distillation step on this replica's part of the global batch (SimCLR
        v2, eq. 3): the teacher's logits (fixed) and the student's on the same view
        -> alpha x the cross-entropy against the teacher's tempered softmax (+ 1 -
        alpha x the labelled cross-entropy) -> gradients of the global loss -> the
        optimizer's update."""
        images, labels = batch
        teacher_logits = self.teacher(images)  # the loss stops its gradient
        alpha = self.options.distill_alpha
        # The rate of this update (the schedule reads the not yet incremented step).
        learning_rate = tf.cast(self.trainer.optimizer.learning_rate, tf.float32)
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            logits = base.logits_of(self.model(images, training=True))
            distill = distillation_loss(teacher_logits, logits,
                                               self.options.distill_temperature)
            metrics = dict(distill_loss=distill,
                           teacher_agreement=agreement(teacher_logits, logits),
                           **base.label_accuracy(labels, logits))
            loss = alpha * distill
            if alpha < 1.0:
                labelled = labelled_cross_entropy(labels, logits)
                metrics["supervised_loss"] = labelled
                loss = loss + (1.0 - alpha) * labelled
            # + weight decay, and this replica's share of the global loss.
            loss, decay, scaled_loss = self.trainer.total_loss(loss)
        grads = tape.gradient(scaled_loss, variables)
        metrics = self.trainer.apply(grads=grads, variables=variables, metrics=metrics,
                                     loss=loss, decay=decay, learning_rate=learning_rate)
        metrics["num_examples"] = tf.cast(tf.shape(images)[0], tf.float32)
        return metrics


def distillation_loss(teacher_logits, student_logits, temperature):
    """SimCLR v2's distillation loss (Chen et al. 2020b, eq. 2) over this replica's
    examples: the cross-entropy of the student's tempered softmax against the
    teacher's, -sum_y P_T(y|x; tau) log P_S(y|x; tau), averaged over the examples.

    The mean over the replica's n examples, like `nt_xent`: the train step divides it
    by `num_replicas_in_sync` inside the tape, so the sum over replicas is the mean
    over the global batch. No tau^2 factor (the paper's equation; the authors' colab
    `add_kd_loss` multiplies by tau^2, the same at tau = 1: docs/distillation.md).
    The teacher receives no gradient.

    Args:
        teacher_logits: [n, C] logits of the fixed teacher (any float dtype).
        student_logits: [n, C] logits of the student (computed in float32).
        temperature: tau > 0, the same for both softmaxes.

    Returns:
        A float32 scalar.
    """
    rules.check_distill_temperature(temperature)
    teacher_logits = tf.stop_gradient(tf.cast(teacher_logits, tf.float32))
    student_logits = tf.cast(student_logits, tf.float32)
    if teacher_logits.shape[-1] is not None and student_logits.shape[-1] is not None \
            and teacher_logits.shape[-1] != student_logits.shape[-1]:
        raise ValueError("The teacher and the student must score the same classes. "
                         f"Received: teacher_logits.shape={teacher_logits.shape}, "
                         f"student_logits.shape={student_logits.shape}")
    inv_t = 1.0 / float(temperature)
    teacher_probs = tf.nn.softmax(teacher_logits * inv_t, axis=-1)
    per_example = tf.nn.softmax_cross_entropy_with_logits(
        labels=teacher_probs, logits=student_logits * inv_t)
    return tf.reduce_mean(per_example)


def labelled_cross_entropy(labels, logits):
    """The cross-entropy on the labelled examples (label >= 0) of this replica,
    summed and divided by all n of its examples: the term over D^L of SimCLR v2's
    eq. 3, whose sums over D^L and D share the batch's size as normaliser (so its
    weight is the batch's labelled share). As `distillation_loss`, the train step's
    division by the replicas makes the sum over replicas the global-batch value.

    Args:
        labels: int [n] class ids, -1 for unlabelled.
        logits: [n, C] (computed in float32).

    Returns:
        A float32 scalar (0 when no example is labelled).
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(labels, 0), logits=logits)
    total = tf.reduce_sum(tf.where(labels >= 0, per_example, 0.0))
    return total / tf.cast(tf.maximum(tf.shape(labels)[0], 1), tf.float32)


def same_class(teacher_logits, student_logits):
    """Per example, 1.0 where the student's argmax is the teacher's, else 0.0."""
    same = tf.equal(tf.argmax(tf.cast(teacher_logits, tf.float32), -1, output_type=tf.int32),
                    tf.argmax(tf.cast(student_logits, tf.float32), -1, output_type=tf.int32))
    return tf.cast(same, tf.float32)


def agreement(teacher_logits, student_logits):
    """Fraction of this replica's examples whose student argmax is the teacher's."""
    return tf.reduce_mean(same_class(teacher_logits, student_logits))
