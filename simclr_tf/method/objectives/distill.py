"""--train_mode=distill: SimCLR v2's distillation (eq. 3) against a fixed teacher."""
import tensorflow as tf

from simclr_tf.method import losses
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
            distill = losses.distillation_loss(teacher_logits, logits,
                                               self.options.distill_temperature)
            metrics = dict(distill_loss=distill,
                           teacher_agreement=losses.agreement(teacher_logits, logits),
                           **base.label_accuracy(labels, logits))
            loss = alpha * distill
            if alpha < 1.0:
                labelled = losses.labelled_cross_entropy(labels, logits)
                metrics["supervised_loss"] = labelled
                loss = loss + (1.0 - alpha) * labelled
            # + weight decay, and this replica's share of the global loss.
            loss, decay, scaled_loss = self.trainer.total_loss(loss)
        grads = tape.gradient(scaled_loss, variables)
        metrics = self.trainer.apply(grads=grads, variables=variables, metrics=metrics,
                                     loss=loss, decay=decay, learning_rate=learning_rate)
        metrics["num_examples"] = tf.cast(tf.shape(images)[0], tf.float32)
        return metrics
