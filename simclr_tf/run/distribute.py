"""Distribution strategies: `create_strategy` (default, mirrored, multi-worker, TPU),
`is_chief`, and `split_cpu` (--cpu_replicas). The cross-replica collectives the loss
needs are the method's: `simclr_tf.method.collectives`.

A TPU is found without network traffic (`tpu_to_resolve`): a --tpu_name given, else
the TPU attached to this machine (a Cloud TPU VM: TensorFlow's resolver's 'local'),
else one the environment names (TPU_NAME, read by the resolver); otherwise a
ConfigError says what to give, before anything is built or written.

A multi-worker strategy is created after a bounded wait for the peers of TF_CONFIG
(`simclr_tf.run.cluster`; TensorFlow's own rendezvous waits without bound), and
`peer_failures_named` turns the error of a peer lost mid-run into `PeerLostError`.
"""
import contextlib
import glob
import os

import tensorflow as tf
from absl import logging

from simclr_tf.config import ConfigError
from simclr_tf.run import cluster

STRATEGIES = ("default", "mirrored", "multiworker", "tpu")
# Group keys a MirroredStrategy's collectives may use before the next strategy's
# (`_mirrored_strategy`): a strategy makes one group per set of devices, a few.
MIRRORED_KEY_STRIDE = 100_000
# What a collective raises when a peer is gone: UNAVAILABLE (a heartbeat that
# stopped, a connection reset), DEADLINE_EXCEEDED (a collective timeout), ABORTED.
PEER_FAILURES = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                 tf.errors.AbortedError)

# A TPU attached to this machine, seen in the filesystem only (TPUClusterResolver with
# tpu=None would ask the GCE metadata server, over the network): Cloud TPU VMs of v2-v4
# have /dev/accel<N>; every Cloud TPU chip is a PCI device of Google's vendor id with
# one of these device ids (JAX's rule: jax/_src/hardware_utils.py).
ACCEL_DEVICES = "dev/accel[0-9]*"
PCI_DEVICES = "sys/bus/pci/devices/*"
GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_PCI_DEVICE_IDS = ("0x0027", "0x0056", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076")
# What TensorFlow 2.21's TPU client reads when tpu=None (tensorflow/python/tpu/client/
# client.py: `_get_tpu_name`, `_get_tpu_node_config`).
TPU_ENVIRONMENT = ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG")
# Seconds a grpc:// TPU address has to accept a TCP connection before TensorFlow's
# connection (which waits without bound) is tried.
GRPC_PROBE_SECS = 10
# What the errors say to give, in the flags' words.
_NAME_A_TPU = ("name the Cloud TPU (--tpu_name=<its name> with --tpu_zone and "
               "--gcp_project, or --tpu_name=grpc://<address>:8470), or run on the "
               "Cloud TPU VM itself, where --use_tpu alone finds its TPU (docs/tpu.md)")


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
            without bound); 0: no wait of ours. For 'tpu', how long TensorFlow's
            connection to the TPU and its start may take (0: without bound).

    Returns:
        The strategy. Build models and optimizers under `strategy.scope()`.

    Raises:
        ValueError: on an unknown name or an impossible `num_devices`.
        ConfigError: for 'multiworker', on a malformed TF_CONFIG; for 'tpu', when no
            TPU is named nor attached (`tpu_to_resolve`), or the TPU does not answer.
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
        return _mirrored_strategy(_local_devices(num_devices))
    if name == "multiworker":
        return _create_multiworker_strategy(peer_wait_secs)
    return _create_tpu_strategy(tpu_to_resolve(tpu_name or master), tpu_zone, gcp_project,
                                peer_wait_secs)


def _mirrored_strategy(devices):
    """A MirroredStrategy whose collectives are numbered apart from every earlier one
    of this process. Each numbers its collective ops from its class's key base, and
    TensorFlow's collective executor, one per process, remembers each instance key's
    op: a second strategy (a fine-tune after a pretraining, in one notebook) would
    reuse the first one's keys and fail at its first step ("Collective instance 169
    expected type 2 and data_type 3 but got type 0 and data_type 1")."""
    # pylint: disable-next=protected-access
    tf.distribute.MirroredStrategy._collective_key_base += MIRRORED_KEY_STRIDE
    return tf.distribute.MirroredStrategy(devices=devices)


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


def split_cpu(replicas):
    """--cpu_replicas: the host CPU as `replicas` logical devices, the replicas of a
    MirroredStrategy (`create_strategy('mirrored', num_devices=replicas)`). Call it
    before any op runs: TensorFlow fixes its devices when it first initialises them.
    Initialised already (a notebook, a test session), it has to hold at least that
    many. 0: nothing to do.

    Raises:
        ConfigError: (--cpu_replicas) this machine has a GPU (the replicas are then
            the GPUs), or TensorFlow's devices exist already, fewer.
    """
    if not replicas:
        return
    if tf.config.list_physical_devices("GPU"):  # lists, initialises nothing
        raise ConfigError("cpu_replicas", f"is {replicas}, but this machine has a GPU: "
                          "--strategy=mirrored makes one replica per GPU; drop "
                          "--cpu_replicas.")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError:  # "Virtual devices cannot be modified after being initialized"
        existing = len(tf.config.list_logical_devices("CPU"))
        if existing < replicas:
            raise ConfigError(
                "cpu_replicas", f"is {replicas}, but TensorFlow made its devices "
                f"already, {existing} CPU device(s), and cannot split them once made: "
                f"use at most {existing}, or split in a new process before anything "
                "runs.") from None


def local_tpu_devices(root="/"):
    """The files that show a TPU attached to this machine (a Cloud TPU VM): its
    /dev/accel* devices and the PCI devices of Google TPUs; [] without one. Reads the
    filesystem only, under `root` (tests plant a machine elsewhere)."""
    found = sorted(glob.glob(os.path.join(root, ACCEL_DEVICES)))
    for device in sorted(glob.glob(os.path.join(root, PCI_DEVICES))):
        try:
            with open(os.path.join(device, "vendor")) as f:
                vendor = f.read().strip()
            with open(os.path.join(device, "device")) as f:
                device_id = f.read().strip()
        except OSError:
            continue
        if vendor == GOOGLE_PCI_VENDOR and device_id in TPU_PCI_DEVICE_IDS:
            found.append(device)
    return found


def tpu_to_resolve(tpu_name, *, root="/", environ=None):
    """The `tpu` of TensorFlow's TPUClusterResolver for --tpu_name (or --master), found
    without network traffic: the name given; else 'local' when a TPU is attached to
    this machine (`local_tpu_devices`: a Cloud TPU VM); else None when the
    environment names one (`TPU_ENVIRONMENT`: the resolver reads it).

    Raises:
        ConfigError: (--tpu_name) none of these: no TPU answers here; or 'local'
            where none is attached.
    """
    environ = os.environ if environ is None else environ
    attached = local_tpu_devices(root)
    if tpu_name == "local" and not attached:
        raise ConfigError("tpu_name", "is 'local', but no TPU is attached to this "
                          "machine (no /dev/accel*, no Google TPU on its PCI bus): "
                          f"{_NAME_A_TPU}.")
    if tpu_name:
        return tpu_name
    if attached:
        return "local"
    named = [variable for variable in TPU_ENVIRONMENT if environ.get(variable)]
    if named:
        return None
    raise ConfigError("tpu_name", "is not given and no TPU answers here: none is "
                      "attached to this machine (no /dev/accel*, no Google TPU on its "
                      f"PCI bus) and {' / '.join(TPU_ENVIRONMENT)} are unset. To train "
                      f"on a TPU, {_NAME_A_TPU}; to train here, drop --use_tpu.")


def _create_tpu_strategy(tpu, zone, project, wait_secs=0):
    """TPUStrategy over `tpu` (`tpu_to_resolve`'s). TensorFlow's errors (a name the
    Cloud TPU API does not know, a metadata server that does not answer, a TPU that
    does not initialise) become one ConfigError naming the flags.

    TensorFlow's connection and the TPU's start wait on the TPU without a deadline and
    without a line, deaf to Ctrl-C (a grpc:// address nothing answered: 5+ minutes,
    fault 1 of 2026-12-06). So a grpc:// address is tried first (one TCP connection,
    `GRPC_PROBE_SECS`), and the calls run in `cluster.bounded_call`: said, bounded by
    `wait_secs` (--peer_wait_secs; 0: without bound) and stopped by Ctrl-C."""
    address = _grpc_address(tpu)
    if address is not None:
        reason = cluster.unreachable(*address, timeout=GRPC_PROBE_SECS)
        if reason is not None:
            raise ConfigError("tpu_name", _tpu_failure(tpu, zone, project,
                                                       ConnectionError(reason)))

    def connect():
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu, zone=zone, project=project)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return resolver

    shown = f"the TPU {tpu!r}" if tpu else f"the TPU of {' / '.join(TPU_ENVIRONMENT)}"
    try:
        resolver = cluster.bounded_call(connect, wait_secs or None,
                                        f"{shown} to connect and start")
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as error:
        # TimeoutError is an OSError: the bound passed.
        raise ConfigError("tpu_name", _tpu_failure(tpu, zone, project, error)) from None
    return tf.distribute.TPUStrategy(resolver)


def _grpc_address(tpu):
    """(host, port) of a --tpu_name 'grpc://host:port', else None."""
    if not (tpu and tpu.startswith("grpc://")):
        return None
    host, _, port = tpu[len("grpc://"):].rstrip("/").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError("tpu_name", f"is {tpu!r}: a grpc address is "
                          "grpc://<host>:<port>, e.g. grpc://10.0.0.2:8470.")
    return host.strip("[]"), int(port)


def _tpu_failure(tpu, zone, project, error):
    """What to do when the TPU `tpu` (None: the environment's) did not answer."""
    said = str(error).strip().splitlines()[0] if str(error).strip() else ""
    shown = f"{tpu!r}" if tpu else f"of {' / '.join(TPU_ENVIRONMENT)}"
    message = f"the TPU {shown} did not answer ({type(error).__name__}: {said})"
    if tpu == "local":
        return (f"{message}. A TPU is attached: is TensorFlow the TPU build "
                "(tensorflow-tpu, docs/tpu.md), and is no other process holding it?")
    if tpu and tpu.startswith("grpc://"):
        return f"{message}: check the address and that the TPU is up."
    if not (zone and project):
        return (f"{message}. A TPU name is looked up in the Cloud TPU API of "
                "--gcp_project in --tpu_zone; unset, they are asked of the GCE metadata "
                "server, which only a GCE VM has: give both, or "
                "--tpu_name=grpc://<address>:8470.")
    return f"{message}: check --tpu_name, --tpu_zone and --gcp_project (docs/tpu.md)."


def is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver is None or resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0)
