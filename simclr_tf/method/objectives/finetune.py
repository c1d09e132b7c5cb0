"""--train_mode=finetune: the supervised loss on one crop-and-flip view."""
import tensorflow as tf

from simclr_tf.method import losses
from simclr_tf.method.objectives import base


class Finetune(base.Objective):
    """Supervised loss on one view + weight decay; batch `(images, labels)`."""

    def train_step(self, batch):
        """One fine-tuning step on this replica's part of the global batch (SimCLR
        v2, section 2): the view -> the encoder (its frozen blocks under
        stop_gradient, `--fine_tune_after_block`) -> the projection head up to
        `--ft_proj_selector` -> the supervised head -> cross-entropy -> gradients of
        the global loss -> the optimizer's update."""
        images, labels = batch
        # The rate of this update (the schedule reads the not yet incremented step).
        learning_rate = tf.cast(self.trainer.optimizer.learning_rate, tf.float32)
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            logits = base.logits_of(self.model(images, training=True))
            count = losses.labelled_count(labels)  # every replica's, counted once
            sup_loss = losses.supervised_loss(labels, logits, count)
            metrics = dict(supervised_loss=sup_loss,
                           **base.label_accuracy(labels, logits, count))
            # + the weight decay the optimizer leaves to the loss, and this replica's
            # share of the global loss.
            loss, decay, scaled_loss = self.trainer.total_loss(sup_loss)
        grads = tape.gradient(scaled_loss, variables)
        metrics = self.trainer.apply(grads=grads, variables=variables, metrics=metrics,
                                     loss=loss, decay=decay, learning_rate=learning_rate)
        metrics["num_examples"] = tf.cast(tf.shape(images)[0], tf.float32)
        return metrics
