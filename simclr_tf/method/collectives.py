"""The cross-replica collectives the loss needs.

SimCLR's negatives are the whole global batch, so every replica gathers the
projections of all replicas (with gradient). The helpers below are identities
outside a multi-replica replica context, so the same loss code runs on one device,
under MirroredStrategy, MultiWorkerMirroredStrategy and TPUStrategy.
"""
import tensorflow as tf


def _multi_replica_context():
    """The replica context when inside `strategy.run` with > 1 replicas, else None."""
    context = tf.distribute.get_replica_context()
    # None means cross-replica context (inside `strategy.scope()` but not `run`):
    # there is nothing to gather from there.
    if context is None or context.num_replicas_in_sync == 1:
        return None
    return context


def cross_replica_concat(tensor):
    """Concatenates `tensor` from every replica along axis 0, in replica order.

    Gradients flow back to every replica: replica r receives the sum over all
    replicas of the gradient with respect to its slice (the all-gather's adjoint).
    Outside a multi-replica replica context this is the identity.

    Args:
        tensor: a tensor with the same shape on every replica.

    Returns:
        A tensor of `num_replicas_in_sync * tensor.shape[0]` rows.
    """
    context = _multi_replica_context()
    if context is None:
        return tensor
    return context.all_gather(tensor, axis=0)


def cross_replica_sum(tensor):
    """Sums `tensor` over replicas (identity outside a multi-replica context)."""
    context = _multi_replica_context()
    if context is None:
        return tensor
    return context.all_reduce(tf.distribute.ReduceOp.SUM, tensor)


def replica_id():
    """This replica's global index (0..num_replicas_in_sync-1) as an int32 tensor."""
    context = _multi_replica_context()
    if context is None:
        return tf.constant(0, tf.int32)
    # TPU replica ids come back as uint32 tensors; plain ints elsewhere.
    return tf.cast(tf.cast(context.replica_id_in_sync_group, tf.uint32), tf.int32)


def num_replicas_in_sync():
    """How many replicas compute this step together (1 outside any strategy)."""
    context = tf.distribute.get_replica_context()
    if context is not None:
        return context.num_replicas_in_sync
    return tf.distribute.get_strategy().num_replicas_in_sync
