"""The paper's losses: SimCLR's NT-Xent contrastive loss, the supervised loss, and their
metrics. The alternatives live with the objectives that use them: the paper's Table 2
(NT-Logistic, margin triplet) in `simclr_tf.method.objectives.pair_losses`, SimCLR v2's
distillation losses in `simclr_tf.method.objectives.distill`.

Every loss here returns the value one replica contributes *before* the division by
`num_replicas_in_sync` that the train step does inside the tape: summing the
divided per-replica values over replicas gives the global-batch loss.
"""
from typing import NamedTuple

import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.method import collectives

# Subtracted from a view's similarity with itself so that softmax ignores it; large
# enough to vanish in float32 softmax at any temperature used in practice.
LARGE_NUM = 1e9


class ContrastiveOutput(NamedTuple):
    """What `nt_xent` returns.

    Attributes:
        loss: float32 scalar, mean over this replica's n anchors of the sum of the
            two directions' cross-entropies.
        logits_ab: float32 [n, n * num_replicas], similarities / temperature of
            this replica's first views with every second view of the global batch.
        labels: int32 [n], the column of each anchor's positive in `logits_ab`.
    """
    loss: tf.Tensor
    logits_ab: tf.Tensor
    labels: tf.Tensor


def nt_xent(z1, z2, *, temperature, hidden_norm=True,
            gather_fn=collectives.cross_replica_concat):
    """NT-Xent loss of SimCLR (the authors' formulation, both directions summed).

    Row i of `z1` and row i of `z2` are the two views of one image. Inside a
    replica context with several replicas the negatives come from the views of
    every replica (gathered with gradient), and the positives' columns are offset
    by this replica's id.

    Scale: the mean over the n anchors of the loss of pair (i, i') *plus* that of
    (i', i), as the authors' code computes it: twice the paper's Algorithm 1, which
    averages l(i, j) over all 2n views. The paper's hyper-parameters were tuned on
    this scale. At chance each direction is log(2N - 1) for N views a side, so a
    batch of 256 starts near 2 log(511) = 12.5 (the quick start's first
    `contrast_loss` 12.8), not 6.2.

    Args:
        z1: [n, d] projections of the first views (any float dtype; the loss is
            computed in float32).
        z2: [n, d] projections of the second views.
        temperature: softmax temperature, > 0.
        hidden_norm: L2-normalise the projections first (cosine similarity).
        gather_fn: concatenates a tensor over replicas along axis 0, in replica
            order. Tests replace it (e.g. to stop its gradient).

    Returns:
        A `ContrastiveOutput`.

    Raises:
        ValueError: on a non-positive temperature or mismatched shapes.
    """
    rules.check_temperature(temperature)
    z1, z2, z1_all, z2_all, labels = _gathered(z1, z2, hidden_norm, gather_fn)
    # The anchor's own view in the same-view blocks sits at its global index.
    self_mask = tf.one_hot(labels, tf.shape(z1_all)[0], dtype=tf.float32)  # [n, N]

    inv_t = 1.0 / float(temperature)
    logits_aa = tf.matmul(z1, z1_all, transpose_b=True) * inv_t - self_mask * LARGE_NUM
    logits_bb = tf.matmul(z2, z2_all, transpose_b=True) * inv_t - self_mask * LARGE_NUM
    logits_ab = tf.matmul(z1, z2_all, transpose_b=True) * inv_t
    logits_ba = tf.matmul(z2, z1_all, transpose_b=True) * inv_t

    # The positive is column `labels` of the ab (ba) block, which comes first.
    loss_a = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.concat([logits_ab, logits_aa], axis=1))
    loss_b = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.concat([logits_ba, logits_bb], axis=1))
    loss = tf.reduce_mean(loss_a + loss_b)
    return ContrastiveOutput(loss=loss, logits_ab=logits_ab, labels=labels)


def _gathered(z1, z2, hidden_norm, gather_fn):
    """This replica's projections (float32, L2-normalised with `hidden_norm`), the
    global batch's ([N, d], N = n * replicas) and each anchor's global index [n].
    ValueError unless both are [n, d]."""
    if z1.shape.rank != 2 or z2.shape.rank != 2 or (
            z1.shape.is_fully_defined() and z2.shape.is_fully_defined()
            and z1.shape != z2.shape):
        raise ValueError(
            "z1 and z2 must both be [n, d] with the same shape. Received: "
            f"z1.shape={z1.shape}, z2.shape={z2.shape}")
    # float32 whatever the compute dtype: exp(1/temperature) and the 1e9 mask
    # overflow float16 and lose most of their digits in bfloat16.
    z1 = tf.cast(z1, tf.float32)
    z2 = tf.cast(z2, tf.float32)
    if hidden_norm:
        z1 = tf.math.l2_normalize(z1, axis=-1)
        z2 = tf.math.l2_normalize(z2, axis=-1)
    n = tf.shape(z1)[0]
    labels = tf.range(n, dtype=tf.int32) + collectives.replica_id() * n
    return z1, z2, gather_fn(z1), gather_fn(z2), labels


def contrast_acc(output):
    """Fraction of this replica's anchors whose most similar second view is the positive.

    Args:
        output: a `ContrastiveOutput`.
    """
    predicted = tf.argmax(output.logits_ab, axis=1, output_type=tf.int32)
    return tf.reduce_mean(tf.cast(tf.equal(predicted, output.labels), tf.float32))


def contrast_entropy(output):
    """Mean entropy (nats) of softmax(logits_ab) over this replica's anchors.

    Args:
        output: a `ContrastiveOutput`.
    """
    log_p = tf.nn.log_softmax(output.logits_ab, axis=1)
    return tf.reduce_mean(-tf.reduce_sum(tf.exp(log_p) * log_p, axis=1))


def labelled_count(labels):
    """The number of labelled examples (label >= 0) of the global batch: this
    replica's, summed over the replicas (one 4-byte all-reduce; the identity on one
    device). `supervised_loss` and the online head's accuracy share it."""
    with tf.name_scope("labelled_count"):  # names only (scripts/collectives.py)
        return collectives.cross_replica_sum(
            tf.reduce_sum(tf.cast(tf.cast(labels, tf.int32) >= 0, tf.float32)))


def supervised_loss(labels, logits, count=None):
    """Softmax cross-entropy over the labelled examples of the global batch.

    Examples with label -1 (unlabelled) are ignored. The mean is over the labelled
    examples of *all* replicas, scaled by the number of replicas so that, like
    `nt_xent`, the train step divides it by `num_replicas_in_sync` and the sum over
    replicas is the exact global mean even when replicas hold different numbers of
    labelled examples. Without labelled examples the loss is 0.

    Args:
        labels: int [b] class ids, -1 for unlabelled.
        logits: [b, num_classes] (computed in float32 whatever their dtype).
        count: `labelled_count(labels)` when the caller has it already; None counts.

    Returns:
        A float32 scalar.
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    labelled = labels >= 0
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.maximum(labels, 0), logits=logits)
    # tf.where rather than a multiply: a masked example must not leak NaN/Inf.
    local_sum = tf.reduce_sum(tf.where(labelled, per_example, 0.0))
    if count is None:
        count = labelled_count(labels)
    replicas = float(collectives.num_replicas_in_sync())
    return local_sum * replicas / tf.maximum(count, 1.0)


def top_k_correct(labels, logits, k):
    """How many labelled examples (label >= 0) have their label in the top k logits.

    Top-1 is the label equal to the argmax (the first of tied maxima), as the
    authors' accuracy: `tf.math.in_top_k` counts every tied class as in the top k, so
    a zero-initialised head (all logits equal) would score 1.0. Top-k > 1 keeps
    in_top_k's ties, as the authors' `TopKCategoricalAccuracy`.

    Args:
        labels: int [b] class ids, -1 for unlabelled (never counted as correct).
        logits: [b, num_classes].
        k: int >= 1; clipped to the number of classes.

    Returns:
        float32 scalar count.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int. Received: k={k!r}")
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    num_classes = logits.shape[-1]
    if num_classes is not None:
        k = min(k, num_classes)
    if k == 1:
        hit = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels)
    else:
        hit = tf.math.in_top_k(targets=tf.maximum(labels, 0), predictions=logits, k=k)
    return tf.reduce_sum(tf.cast(tf.logical_and(hit, labels >= 0), tf.float32))
