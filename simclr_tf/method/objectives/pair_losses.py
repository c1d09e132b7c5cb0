"""--train_mode=nt_logistic | margin_triplet: SimCLR's step with the paper's Table 2
alternatives to NT-Xent (`nt_logistic`, `margin_triplet`, below) in its place;
everything else (the views, the online head, blur, gradient caching) is pretraining's.
The paper: NT-Xent 63.9, NT-Logistic 51.6, margin triplet 50.9 (ImageNet, linear
evaluation; 57.9 and 57.5 with semi-hard negative mining, which these do not do)."""
import math

import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.method import collectives
from simclr_tf.method.losses import ContrastiveOutput, _gathered  # pylint: disable=protected-access
from simclr_tf.method.objectives.pretrain import Pretrain


class NTLogistic(Pretrain):
    """Pretraining with NT-Logistic at --temperature (with --hidden_norm)."""

    def contrastive(self, z1, z2):
        return nt_logistic(z1, z2, temperature=self.options.temperature,
                                  hidden_norm=self.options.hidden_norm)


class MarginTriplet(Pretrain):
    """Pretraining with the margin triplet loss, margin --triplet_margin (with
    --hidden_norm: cosine similarities)."""

    def contrastive(self, z1, z2):
        return margin_triplet(z1, z2, margin=self.option("triplet_margin"),
                                     hidden_norm=self.options.hidden_norm)


def _pair_loss(z1, z2, per_anchor, *, scale, hidden_norm, gather_fn):
    """The two directions' mean of `per_anchor(positive [n], candidates [n, 2N],
    negative_mask [n, 2N]) -> [n]`, over the similarities of each anchor (a view of
    this replica) with its positive (the other view of its image) and its 2N - 2
    negatives (every other view of the global batch), as `nt_xent` gathers them."""
    z1, z2, z1_all, z2_all, labels = _gathered(z1, z2, hidden_norm, gather_fn)
    positive_mask = tf.one_hot(labels, tf.shape(z1_all)[0], dtype=tf.float32)  # [n, N]
    # In the other view's block the positive is no negative; in the same view's, the
    # anchor itself is none.
    negative_mask = tf.concat([1.0 - positive_mask, 1.0 - positive_mask], axis=1)

    def direction(anchors, others_all, same_all):
        cross = tf.matmul(anchors, others_all, transpose_b=True)  # [n, N]
        same = tf.matmul(anchors, same_all, transpose_b=True)
        positive = tf.reduce_sum(cross * positive_mask, axis=1)
        return cross, per_anchor(positive, tf.concat([cross, same], axis=1), negative_mask)

    sim_ab, loss_a = direction(z1, z2_all, z1_all)
    _, loss_b = direction(z2, z1_all, z2_all)
    return ContrastiveOutput(loss=tf.reduce_mean(loss_a + loss_b),
                             logits_ab=sim_ab * scale, labels=labels)


def _masked_mean(values, mask):
    return tf.reduce_sum(values * mask, axis=1) / tf.reduce_sum(mask, axis=1)


def nt_logistic(z1, z2, *, temperature, hidden_norm=True,
                gather_fn=collectives.cross_replica_concat):
    """NT-Logistic, the paper's Table 2: per anchor, -log sigmoid(s+ / t) minus the
    mean over its negatives of log sigmoid(-s- / t) (the negatives averaged, so that
    they weigh as much as the positive), both directions summed, as `nt_xent`.

    Returns:
        A `ContrastiveOutput` (`logits_ab`: similarities / temperature).
    """
    rules.check_temperature(temperature)
    inv_t = 1.0 / float(temperature)

    def per_anchor(positive, candidates, negative_mask):
        return (-tf.math.log_sigmoid(positive * inv_t)
                - _masked_mean(tf.math.log_sigmoid(-candidates * inv_t), negative_mask))
    return _pair_loss(z1, z2, per_anchor, scale=inv_t, hidden_norm=hidden_norm,
                      gather_fn=gather_fn)


def margin_triplet(z1, z2, *, margin, hidden_norm=True,
                   gather_fn=collectives.cross_replica_concat):
    """Margin triplet, the paper's Table 2: per anchor, the mean over its negatives
    of max(s- - s+ + margin, 0) (no negative mining), both directions summed.

    Returns:
        A `ContrastiveOutput` (`logits_ab`: the similarities).
    """
    if not (math.isfinite(margin) and margin > 0):  # inf: the first loss is NaN
        raise ValueError(f"margin must be a finite number > 0. Received: margin={margin!r}")

    def per_anchor(positive, candidates, negative_mask):
        return _masked_mean(tf.nn.relu(candidates - positive[:, None] + margin),
                            negative_mask)
    return _pair_loss(z1, z2, per_anchor, scale=1.0, hidden_norm=hidden_norm,
                      gather_fn=gather_fn)
