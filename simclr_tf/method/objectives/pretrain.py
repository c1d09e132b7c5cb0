"""--train_mode=pretrain: two views per image, NT-Xent, and the online linear head on
stop_gradient(h) over the labelled examples; with --grad_cache_chunk, by gradient
caching (`simclr_tf.method.grad_cache`)."""
import tensorflow as tf

from simclr_tf.method import collectives, grad_cache, losses
from simclr_tf.method.objectives import base
# The model's output keys: z ("proj_head_output") and the online head's logits
# ("logits_sup"), the authors' names.
from simclr_tf.models.outputs import LOGITS, Z


class Pretrain(base.Objective):
    """NT-Xent on both views + supervised loss on labelled ones + weight decay; batch
    `(images, labels)` as the pipeline delivers them. `self.options` (`StepOptions`:
    `views` makes the two views) and `self.model` are its Trainer's (`base.Objective`)."""

    def non_finite_causes(self):
        return (f"a temperature too low (--temperature={self.options.temperature:g})",)

    def train_step(self, batch):
        """One pretraining step on this replica's part of the global batch (the
        paper's Algorithm 1): the two views -> encoder f -> projection head g ->
        NT-Xent over the negatives of every replica, plus the online head's loss on
        stop_gradient(h) -> gradients of the global loss -> the optimizer's update
        (LARS, the paper's). The Trainer keeps the rest (the compiled function, loss
        scaling, the gradient norm, the counters)."""
        images, labels = batch
        num_examples = tf.cast(tf.shape(labels)[0], tf.float32)
        # Both views of an image carry its label (online linear evaluation).
        labels = tf.concat([labels, labels], axis=0)
        if self.options.grad_cache_chunk:  # the same step, chunk by chunk
            metrics = self._optimize_cached(images, labels)
            metrics["num_examples"] = num_examples
            return metrics
        with tf.name_scope("views"):  # names only (a profile's parts: step_profile)
            views = tf.concat(self.views(images), axis=0)  # [2n, H, W, 3]: BN sees both
        # The rate of this update (the schedule reads the not yet incremented step).
        learning_rate = tf.cast(self.trainer.optimizer.learning_rate, tf.float32)
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            # h = f(x), z = g(h), and the supervised head's logits on stop_gradient(h).
            outputs = self.model(views, training=True)
            z1, z2 = tf.split(outputs[Z], 2, axis=0)
            loss, metrics = self.loss(z1, z2, outputs.get(LOGITS), labels)
            # + the weight decay the optimizer leaves to the loss (under LARS: the
            # supervised head's), and this replica's share of the global loss.
            loss, decay, scaled_loss = self.trainer.total_loss(loss)
        grads = tape.gradient(scaled_loss, variables)
        metrics = self.trainer.apply(grads=grads, variables=variables, metrics=metrics,
                                     loss=loss, decay=decay, learning_rate=learning_rate)
        metrics["num_examples"] = num_examples
        return metrics

    def views(self, images, chunk=None):
        """(view1, view2) of the batch's images (or of chunk `chunk`'s part of them):
        drawn if the step draws them, then blurred (`augment.recipe.StepViews`). Host
        views without blur (the quick start's): the batch's pair as it came."""
        # `options` is the Trainer's `StepOptions`; its `views` an
        # `augment.recipe.StepViews`.
        return self.options.views(images, step=self.trainer.optimizer.iterations,
                                  replica=collectives.replica_id(), chunk=chunk)

    def contrastive(self, z1, z2):
        """The contrastive loss of the views' projections: NT-Xent (a subclass may
        compare another, `pair_losses`)."""
        return losses.nt_xent(z1, z2, temperature=self.options.temperature,
                              hidden_norm=self.options.hidden_norm)

    def loss(self, z1, z2, logits, labels):
        """NT-Xent (+ the supervised loss when `logits` is not None) and metrics."""
        # The name scopes name the ops only (a profile's parts: scripts/step_profile.py).
        with tf.name_scope("nt_xent"):
            contrastive = self.contrastive(z1, z2)
        with tf.name_scope("metrics"):
            metrics = dict(contrast_loss=contrastive.loss,
                           contrast_acc=losses.contrast_acc(contrastive),
                           contrast_entropy=losses.contrast_entropy(contrastive))
        loss = contrastive.loss
        if logits is not None:
            # Every replica's labelled examples, counted once for the loss and its
            # accuracy.
            count = losses.labelled_count(labels)
            with tf.name_scope("supervised_loss"):
                sup_loss = losses.supervised_loss(labels, logits, count)
            with tf.name_scope("metrics"):
                metrics.update(supervised_loss=sup_loss,
                               **base.label_accuracy(labels, logits, count))
            loss = loss + sup_loss
        return loss, metrics

    def _optimize_cached(self, images, labels):
        """`train_step`'s update by gradient caching over chunks of
        `grad_cache_chunk` images (`grad_cache.chunked_pair_gradients`)."""
        has_head = self.model.supervised_head is not None
        names = (Z, LOGITS) if has_head else (Z,)

        def forward(images):
            outputs = self.model(images, training=True)
            return {name: outputs[name] for name in names}

        def objective(first, second):
            logits = tf.concat([first[LOGITS], second[LOGITS]], 0) if has_head else None
            loss, metrics = self.loss(first[Z], second[Z], logits, labels)
            loss, decay, scaled_loss = self.trainer.total_loss(loss)
            return scaled_loss, (loss, decay, metrics)

        learning_rate = tf.cast(self.trainer.optimizer.learning_rate, tf.float32)
        variables = self.model.trainable_variables
        (loss, decay, metrics), grads = grad_cache.chunked_pair_gradients(
            images, self.options.grad_cache_chunk, self.views, forward, objective,
            variables, output_names=names, draws_views=self.options.views.drawn_in_step,
            state_variables=self.model.non_trainable_variables)
        return self.trainer.apply(grads=grads, variables=variables, metrics=metrics,
                                  loss=loss, decay=decay, learning_rate=learning_rate)
