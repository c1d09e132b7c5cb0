"""simclr_tf.run.cluster: TF_CONFIG's tasks, the bounded wait for peers, SIGTERM during it,
and the names of peers lost mid-run (tests/test_multiworker.py runs run.py workers)."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from simclr_tf.run import cluster, distribute
from simclr_tf.config.errors import ConfigError

from helpers.process_fixtures import free_ports

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tf_config(workers, index=0, job="worker", chief=None):
    spec = {"cluster": {"worker": workers}, "task": {"type": job, "index": index}}
    if chief is not None:
        spec["cluster"]["chief"] = chief
    return {"TF_CONFIG": json.dumps(spec)}


def _cluster(ports, index):
    return cluster.from_tf_config(_tf_config([f"127.0.0.1:{p}" for p in ports], index))


# ------------------------------------------------------------------ TF_CONFIG


def test_the_tasks_of_tf_config():
    found = cluster.from_tf_config(_tf_config(["h0:2222", "h1:2223"], 1, chief=["[::1]:2224"]))
    assert str(found.me) == "worker 1 at h1:2223"
    assert [str(t) for t in found.peers] == ["chief 0 at [::1]:2224", "worker 0 at h0:2222"]
    assert (found.find("chief", 0).host, found.find("chief", 0).port) == ("::1", 2224)
    assert found.find("worker", 2) is None


@pytest.mark.parametrize("environ", [
    {}, {"TF_CONFIG": " "},  # unset: one worker, as TensorFlow runs it
    {"TF_CONFIG": json.dumps({"cluster": {"worker": ["h0:1"], "evaluator": ["h9:1"]},
                              "task": {"type": "evaluator", "index": 0}})},
], ids=["unset", "blank", "evaluator"])  # an evaluator takes no part in the collectives
def test_no_cluster_to_wait_for(environ):
    assert cluster.from_tf_config(environ) is None


@pytest.mark.parametrize("text, words", [
    ("{", "is not JSON"),
    ('{"task": {"type": "worker", "index": 0}}', "has no 'cluster'"),
    ('{"cluster": {"worker": ["h:1"]}}', "'task' must name"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker"}}', "'task' must name"),
    ('{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 2}}',
     "task index 2 is out of range: the cluster has 2 'worker' task(s), 0 to 1"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": "0"}}',
     "task index '0' is out of range"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "chief", "index": 0}}',
     "task type 'chief' is not a job of its cluster ('worker')"),
    ('{"cluster": {"worker": ["h"]}, "task": {"type": "worker", "index": 0}}',
     "the address of worker 0, 'h', is not 'host:port'"),
    ('{"cluster": {"worker": ["h:1", "h:99999"]}, "task": {"type": "worker", "index": 0}}',
     "the address of worker 1, 'h:99999'"),
    ('{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}',
     "job must list addresses"),
])
def test_a_malformed_tf_config_names_the_problem_and_the_fix(text, words):
    with pytest.raises(ConfigError) as info:
        cluster.from_tf_config({"TF_CONFIG": text})
    message = str(info.value)
    assert info.value.flag == "strategy"
    assert message.startswith("--strategy: multiworker reads the cluster from the "
                              "TF_CONFIG environment variable"), message
    assert words in message and "Set TF_CONFIG on every worker" in message, message


# ------------------------------------------------------------------ the wait


def test_two_workers_waiting_for_each_other_both_go_on():
    """Each worker's own port answers while it waits, so the wait is symmetric."""
    ports = free_ports(2)
    waited, errors = {}, []

    def wait(index):
        try:
            waited[index] = cluster.wait_for_peers(_cluster(ports, index), 20,
                                                   poll_secs=0.05, out=lambda *a, **k: None)
        except Exception as error:  # pylint: disable=broad-except
            errors.append(error)

    first = threading.Thread(target=wait, args=(0,))
    first.start()
    time.sleep(0.5)  # worker 1 starts later
    second = threading.Thread(target=wait, args=(1,))
    second.start()
    first.join(30)
    second.join(30)
    assert not errors and sorted(waited) == [0, 1], errors
    assert waited[0] >= 0.4 and waited[1] < 5


def test_a_peer_that_never_answers_is_named_after_the_timeout():
    ports = free_ports(2)
    lines = []
    start = time.monotonic()
    with pytest.raises(cluster.PeerUnavailableError) as info:
        cluster.wait_for_peers(_cluster(ports, 0), 0.6, poll_secs=0.1,
                               out=lambda line, **kwargs: lines.append(line))
    assert 0.6 <= time.monotonic() - start < 5
    message = str(info.value)
    assert f"worker 0 at 127.0.0.1:{ports[0]} (this process) waited 0.6 s" in message
    assert f"worker 1 at 127.0.0.1:{ports[1]}: connection refused" in message
    assert "--peer_wait_secs" in message and "Start each of them" in message
    # One progress line (the next would come after 30 s), naming who is awaited.
    assert lines == [f"Waiting for worker 1 at 127.0.0.1:{ports[1]} of the multi-worker "
                     "cluster (TF_CONFIG) to answer (0 s of 0.6 s, --peer_wait_secs)."]


def test_a_peer_already_listening_ends_the_wait_at_once():
    ports = free_ports(2)
    with socket.create_server(("127.0.0.1", ports[1])):
        assert cluster.wait_for_peers(_cluster(ports, 0), 10, out=None) < 2
    # The wait's own listener is closed: TensorFlow can bind the port.
    socket.create_server(("", ports[0])).close()


def test_this_workers_port_in_use_is_named():
    ports = free_ports(2)
    with socket.create_server(("", ports[0])):
        with pytest.raises(cluster.ClusterError, match=rf"The port of worker 0 at "
                           rf"127.0.0.1:{ports[0]} \(this process, TF_CONFIG\) cannot be "
                           "opened.*Another process uses it"):
            cluster.wait_for_peers(_cluster(ports, 0), 1, out=None)


# Runs in a child (a SIGTERM must not reach pytest): waits for a peer that never comes.
_WAIT_FOREVER = """
import json, sys
from simclr_tf.run import cluster
ports = json.loads(sys.argv[1])
topology = cluster.from_tf_config({"TF_CONFIG": json.dumps({
    "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
    "task": {"type": "worker", "index": 0}})})
try:
    cluster.wait_for_peers(topology, 600)
except cluster.WaitInterrupted as error:
    print(error, flush=True)
    sys.exit(128 + error.signum)
"""


def _child(code, *args):
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=REPO))


def test_sigterm_stops_the_wait_at_once():
    child = _child(_WAIT_FOREVER, json.dumps(free_ports(2)))
    assert child.stdout.readline().startswith("Waiting for worker 1")
    child.send_signal(signal.SIGTERM)
    start = time.monotonic()
    output, _ = child.communicate(timeout=30)
    assert child.returncode == 143, output
    assert time.monotonic() - start < 5
    assert output.startswith("interrupted (SIGTERM) while waiting for the multi-worker "
                             "peers, before anything was trained"), output


# The call that holds SIGTERM back stands for TensorFlow's rendezvous.
_DEFERRED = """
import os, signal, sys, time
from simclr_tf.run import cluster
try:
    with cluster.sigterm_deferred("the workers connected"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as TensorFlow's notifier does
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print("still running", flush=True)
except cluster.WaitInterrupted as error:
    print(error, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    sys.exit(128 + error.signum)
"""


def test_a_sigterm_held_back_during_the_rendezvous_is_honoured_after_it():
    child = _child(_DEFERRED)
    output, _ = child.communicate(timeout=30)
    assert child.returncode == 143, output
    assert output.splitlines() == [
        "still running", "interrupted (SIGTERM) while the workers connected, before "
        "anything was trained: run the same command again to start. True"]


# ------------------------------------------------------------------ a peer lost mid-run

# What TensorFlow 2.21 raised in the survivor of two workers on 127.0.0.1 (abridged).
_HEARTBEAT_LOST = """Graph execution error:

Detected at node CollectiveReduceV2 defined at (most recent call last):
  File "run.py", line 205, in <module>

Collective ops is aborted by: Error reported from /job:worker/task:1: The following \
tasks are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error."""
_LEADER_LOST = """Graph execution error:

Detected at node CollectiveReduceV2 defined at (most recent call last):

Collective ops is aborted by: Socket closed
Additional GRPC error information from remote target /job:worker/replica:0/task:0 \
while calling /tensorflow.WorkerService/CompleteInstance:"""


@pytest.mark.parametrize("index, text, lost, said", [
    (0, _HEARTBEAT_LOST, "worker 1 at h1:2", "Collective ops is aborted by: Error reported "
     "from /job:worker/task:1: The following tasks are unhealthy"),
    (1, _LEADER_LOST, "worker 0 at h0:1", "Collective ops is aborted by: Socket closed"),
], ids=["heartbeat", "leader"])
def test_the_peer_lost_is_named_from_tf_config(index, text, lost, said):
    topology = cluster.from_tf_config(_tf_config(["h0:1", "h1:2"], index))
    message = cluster.describe_lost_peers(topology, text)
    assert message.startswith(f"{lost} stopped or can no longer be reached, so "
                              f"{topology.me} (this process) cannot go on"), message
    assert f"(TensorFlow: {said}" in message
    assert "The checkpoints already written are kept: restart every worker with the " \
        "same command" in message


def test_a_lost_peer_that_tensorflow_does_not_name_is_one_of_the_peers():
    topology = cluster.from_tf_config(_tf_config(["h0:1", "h1:2", "h2:3"], 1))
    message = cluster.describe_lost_peers(topology, "Deadline Exceeded")
    assert message.startswith("a peer (worker 0 at h0:1 and worker 2 at h2:3) stopped")


def test_peer_failures_named_under_multiworker_only(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["h0:1", "h1:2"]}, "task": {"type": "worker", "index": 0}}))
    failure = tf.errors.UnavailableError(None, None, _HEARTBEAT_LOST)
    multiworker = tf.distribute.MultiWorkerMirroredStrategy.__new__(
        tf.distribute.MultiWorkerMirroredStrategy)
    with pytest.raises(cluster.PeerLostError, match="^worker 1 at h1:2 stopped"):
        with distribute.peer_failures_named(multiworker):
            raise failure
    # Not a multi-worker strategy: TensorFlow's error as it was.
    with pytest.raises(tf.errors.UnavailableError):
        with distribute.peer_failures_named(tf.distribute.get_strategy()):
            raise failure


def test_a_malformed_tf_config_fails_before_the_wait_and_the_strategy(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
         "task": {"type": "worker", "index": 2}}))
    start = time.monotonic()
    with pytest.raises(ConfigError, match="task index 2 is out of range"):
        distribute.create_strategy("multiworker", peer_wait_secs=600)
    assert time.monotonic() - start < 1
