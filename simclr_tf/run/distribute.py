"""Distribution strategies: `create_strategy` (default, mirrored, multi-worker, TPU),
`is_chief`. The cross-replica collectives the loss needs are the method's:
`simclr_tf.method.collectives`.

A multi-worker strategy is created after a bounded wait for the peers of TF_CONFIG
(`simclr_tf.run.cluster`; TensorFlow's own rendezvous waits without bound), and
`peer_failures_named` turns the error of a peer lost mid-run into `PeerLostError`.
"""
import contextlib

import tensorflow as tf
from absl import logging

from simclr_tf.run import cluster

STRATEGIES = ("default", "mirrored", "multiworker", "tpu")
# What a collective raises when a peer is gone: UNAVAILABLE (a heartbeat that
# stopped, a connection reset), DEADLINE_EXCEEDED (a collective timeout), ABORTED.
PEER_FAILURES = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                 tf.errors.AbortedError)


def create_strategy(name, *, tpu_name=None, tpu_zone=None, gcp_project=None,
                    master=None, num_devices=None, peer_wait_secs=0):
    """Creates a `tf.distribute.Strategy`.

    Args:
        name: 'default' (the current/default strategy: one device), 'mirrored'
            (all local GPUs, or CPU logical devices when there is no GPU),
            'multiworker' (MultiWorkerMirroredStrategy; the cluster comes from the
            `TF_CONFIG` environment variable) or 'tpu' (TPUStrategy).
        tpu_name: TPU name or grpc address, for 'tpu'.
        tpu_zone: GCE zone of the TPU, for 'tpu' (optional).
        gcp_project: GCP project of the TPU, for 'tpu' (optional).
        master: TPU master address, used when `tpu_name` is None (the authors'
            `--master` flag).
        num_devices: for 'mirrored', how many local devices to use (the first
            ones); None uses all GPUs, or all logical CPUs without a GPU.
        peer_wait_secs: for 'multiworker', how long to wait for the other tasks of
            TF_CONFIG to answer before TensorFlow's rendezvous (which itself waits
            without bound); 0: no wait of ours.

    Returns:
        The strategy. Build models and optimizers under `strategy.scope()`.

    Raises:
        ValueError: on an unknown name or an impossible `num_devices`.
        ConfigError: for 'multiworker', on a malformed TF_CONFIG.
        simclr_tf.run.cluster.PeerUnavailableError: a peer did not answer in
            `peer_wait_secs`.
        simclr_tf.run.cluster.WaitInterrupted: a SIGTERM came while waiting.
    """
    if name not in STRATEGIES:
        raise ValueError(
            f"Unknown strategy; choose one of {STRATEGIES}. Received: name={name!r}")
    if num_devices is not None and (not isinstance(num_devices, int) or num_devices < 1):
        raise ValueError(
            f"num_devices must be a positive int or None. Received: "
            f"num_devices={num_devices!r}")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=_local_devices(num_devices))
    if name == "multiworker":
        return _create_multiworker_strategy(peer_wait_secs)
    return _create_tpu_strategy(tpu_name or master, tpu_zone, gcp_project)


def _create_multiworker_strategy(peer_wait_secs):
    topology = cluster.from_tf_config()  # a malformed TF_CONFIG fails before any wait
    if topology is not None and topology.peers and peer_wait_secs:
        waited = cluster.wait_for_peers(topology, peer_wait_secs)
        logging.info("Every peer of %s answered after %.1f s.", topology.me, waited)
    # TensorFlow's rendezvous holds the GIL (no Python runs until it returns) and
    # installs its preemption notifier, which takes SIGTERM: a SIGTERM meanwhile is
    # held back, then honoured once it returns, and the handler of before comes back.
    with cluster.sigterm_deferred("the workers connected (TensorFlow's rendezvous)"):
        return tf.distribute.MultiWorkerMirroredStrategy()


@contextlib.contextmanager
def peer_failures_named(strategy):
    """Under a MultiWorkerMirroredStrategy of several tasks, the error of a collective
    whose peer is gone (`PEER_FAILURES`) becomes `cluster.PeerLostError`, naming the
    peers from TF_CONFIG and what to do; otherwise nothing changes."""
    topology = (cluster.from_tf_config()
                if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
                else None)
    if topology is None or not topology.peers:
        yield
        return
    try:
        yield
    except PEER_FAILURES as error:
        raise cluster.PeerLostError(
            cluster.describe_lost_peers(topology, str(error))) from None


def _local_devices(num_devices):
    """Names of the local devices a MirroredStrategy should use."""
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    names = [d.name for d in devices]
    if num_devices is None:
        return names
    if num_devices > len(names):
        raise ValueError(
            f"Asked for {num_devices} devices but only {len(names)} exist "
            f"({names}). Received: num_devices={num_devices}")
    return names[:num_devices]


def _create_tpu_strategy(tpu, zone, project):
    # The resolver also accepts tpu=None on Cloud TPU VMs, where the local TPU is
    # discovered automatically.
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu, zone=zone, project=project)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver is None or resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0)
