"""--train_mode=finetune: the supervised loss on one crop-and-flip view."""
import tensorflow as tf

from simclr_tf.method import losses
from simclr_tf.method.objectives import base


class Finetune(base.Objective):
    """Supervised loss on one view + weight decay; batch `(images, labels)`."""

    def train_step(self, batch):
        images, labels = batch

        def compute_loss():
            logits = base.logits_of(self.model(images, training=True))
            sup_loss = losses.supervised_loss(labels, logits)
            return sup_loss, dict(supervised_loss=sup_loss,
                                  **base.label_accuracy(labels, logits))

        metrics = self.trainer.optimize(compute_loss)
        metrics["num_examples"] = tf.cast(tf.shape(images)[0], tf.float32)
        return metrics
