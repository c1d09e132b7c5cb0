"""The multi-worker cluster of TF_CONFIG and the bounded wait for its peers (TF-free).

`MultiWorkerMirroredStrategy()` blocks in TensorFlow's rendezvous until every worker
of TF_CONFIG has connected: without a bound, without a log line, and (TF 2.21) with
SIGTERM taken by TensorFlow's preemption notifier, so a worker whose peer never
starts waits forever and cannot be stopped but by SIGKILL. `wait_for_peers` runs
before it, in Python:

    listen on this task's own TF_CONFIG port (so that peers waiting for it see it)
    until every peer has answered, or --peer_wait_secs passed:
        connect to each peer not seen yet, saying who connects ("worker 0")
        a peer that connected to us, saying who it is, has answered too
        a progress line every 30 s
    timeout: PeerUnavailableError naming each missing task, its address and why
    SIGTERM: WaitInterrupted (run.py: exit 143)

The wait is symmetric: each worker waits for all the others. A peer's port answers
while the peer waits too (its own listener) and once its TensorFlow server is up; in
between, while the peer closes its listener and starts TensorFlow, it does not, which
is why a peer's own connection counts: a peer that saw us first and went on is not
missed. The listener is closed before TensorFlow binds the same port. Only the
addresses that TF_CONFIG names are contacted.

`describe_lost_peers` turns the error that TensorFlow raises when a peer dies
mid-run into a message that names the peers from TF_CONFIG (`PeerLostError`, raised
by `simclr_tf.run.distribute`).
"""
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import threading
import time

from simclr_tf.config.errors import ConfigError

# The TF_CONFIG jobs whose tasks take part in MultiWorkerMirroredStrategy's
# collectives ('evaluator' and 'ps' tasks do not).
COLLECTIVE_JOBS = ("chief", "worker")
# Seconds between two rounds of connection attempts, and between two progress lines.
POLL_SECS = 0.5
REPORT_EVERY_SECS = 30
# What a waiting task sends once connected: this, its job and index, a newline.
HELLO = b"simclr_tf peer wait: "
_EXAMPLE = ('{"cluster": {"worker": ["host0:2222", "host1:2222"]}, '
            '"task": {"type": "worker", "index": 0}}')


class ClusterError(RuntimeError):
    """A multi-worker cluster that cannot run (run.py: exit 1)."""


class PeerUnavailableError(ClusterError):
    """Peers of TF_CONFIG did not answer within --peer_wait_secs."""


class PeerLostError(ClusterError):
    """A peer stopped, or could no longer be reached, while the run was going on."""


class WaitInterrupted(Exception):
    """A SIGTERM arrived while this worker waited for its peers (nothing was trained)."""

    def __init__(self, signum, while_doing="waiting for the multi-worker peers"):
        self.signum = int(signum)
        super().__init__(
            f"interrupted ({signal.Signals(signum).name}) while {while_doing}, before "
            "anything was trained: run the same command again to start.")


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of TF_CONFIG's cluster: its job ('chief', 'worker'), index, address."""

    job: str
    index: int
    address: str  # 'host:port', as TF_CONFIG names it
    host: str
    port: int

    def __str__(self):
        return f"{self.job} {self.index} at {self.address}"


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The collective tasks of TF_CONFIG and this process's own (`me`)."""

    me: Task
    tasks: tuple  # every chief and worker task, in TF_CONFIG's order, `me` included

    @property
    def peers(self):
        """Every collective task but this one."""
        return tuple(task for task in self.tasks if task != self.me)

    def find(self, job, index):
        """The task `job` `index`, or None."""
        return next((t for t in self.tasks if (t.job, t.index) == (job, index)), None)


def _config_error(problem):
    return ConfigError("strategy", f"multiworker reads the cluster from the TF_CONFIG "
                       f"environment variable: {problem} Set TF_CONFIG on every worker "
                       f"to the same cluster and that worker's own task, e.g. {_EXAMPLE}.")


def _parse_address(job, index, address):
    match = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):(\d+)", str(address))
    port = int(match.group(2)) if match else 0
    if not match or not 0 < port < 65536:
        raise _config_error(f"the address of {job} {index}, {address!r}, is not "
                            "'host:port' (a port from 1 to 65535).")
    return Task(job, index, address, match.group(1).strip("[]"), port)


def from_tf_config(environ=None):
    """The Cluster of the TF_CONFIG environment variable, or None when there is none to
    wait for: TF_CONFIG unset (one worker, as TensorFlow does) or a task outside the
    collective jobs (an evaluator).

    Raises:
        ConfigError: naming --strategy, when TF_CONFIG is not JSON, has no cluster or
            task, or names a task the cluster lacks or an address that is not
            'host:port'.
    """
    text = (os.environ if environ is None else environ).get("TF_CONFIG", "").strip()
    if not text:
        return None
    try:
        spec = json.loads(text)
    except ValueError as error:
        raise _config_error(f"it is not JSON ({error}).") from None
    cluster, task = (spec.get("cluster"), spec.get("task")) if isinstance(spec, dict) \
        else (None, None)
    if not isinstance(cluster, dict) or not cluster:
        raise _config_error("it has no 'cluster' (a dict of job name -> addresses).")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise _config_error(f"its 'task' must name this worker's type and index; got "
                            f"{task!r}.")
    job, index = task["type"], task["index"]
    if job not in cluster:
        raise _config_error(f"its task type {job!r} is not a job of its cluster "
                            f"({', '.join(map(repr, cluster))}).")
    addresses = cluster[job]
    if not isinstance(addresses, list) or not addresses:
        raise _config_error(f"its cluster's {job!r} job must list addresses; got "
                            f"{addresses!r}.")
    if not isinstance(index, int) or isinstance(index, bool) or \
            not 0 <= index < len(addresses):
        raise _config_error(f"its task index {index!r} is out of range: the cluster has "
                            f"{len(addresses)} {job!r} task(s), 0 to {len(addresses) - 1}.")
    if job not in COLLECTIVE_JOBS:
        return None
    tasks = []
    for name in COLLECTIVE_JOBS:
        members = cluster.get(name, [])
        if not isinstance(members, list):
            raise _config_error(f"its cluster's {name!r} job must list addresses; got "
                                f"{members!r}.")
        tasks += [_parse_address(name, i, address) for i, address in enumerate(members)]
    me = next(t for t in tasks if (t.job, t.index) == (job, index))
    return Cluster(me=me, tasks=tuple(tasks))


# ------------------------------------------------------------------ the bounded wait


def wait_for_peers(cluster, timeout_secs, *, poll_secs=POLL_SECS,
                   report_every_secs=REPORT_EVERY_SECS, out=print):
    """Returns once every peer has answered (the seconds waited): its port accepted a
    TCP connection, or it connected to ours saying who it is.

    While it waits, this task's own port accepts connections, so that peers waiting
    for it see it; that listener is closed on return, before TensorFlow binds the
    port. A SIGTERM (main thread) stops the wait at once.

    Args:
        cluster: a `Cluster`.
        timeout_secs: how long to wait, in seconds (> 0).
        poll_secs: seconds between two rounds of connection attempts.
        report_every_secs: seconds between two progress lines (the first is printed
            as soon as a peer does not answer).
        out: where progress lines go (`print`-like).

    Raises:
        PeerUnavailableError: after `timeout_secs`, naming each peer that never
            answered, with the last reason (refused, timed out, unknown host).
        ClusterError: when this task's own port is in use by another process.
        WaitInterrupted: on SIGTERM.
    """
    start = time.monotonic()
    missing = {task: "not tried" for task in cluster.peers}
    last_report = None
    with _listening(cluster.me) as listener, _raise_on_sigterm():
        while True:
            for task in list(missing):
                reason = _connect(task, cluster.me,
                                  timeout=min(2.0, max(poll_secs, 0.1)))
                if reason is None:
                    del missing[task]
                else:
                    missing[task] = reason
            for job, index in _callers(listener):
                missing.pop(cluster.find(job, index), None)
            waited = time.monotonic() - start
            if not missing:
                return waited
            if waited >= timeout_secs:
                raise PeerUnavailableError(_unavailable_message(cluster, missing,
                                                                timeout_secs))
            if last_report is None or waited - last_report >= report_every_secs:
                out(f"Waiting for {_and(missing)} of the multi-worker cluster (TF_CONFIG) "
                    f"to answer ({waited:.0f} s of {timeout_secs} s, --peer_wait_secs).",
                    flush=True)
                last_report = waited
            time.sleep(min(poll_secs, max(timeout_secs - waited, 0.0)))


def _and(tasks):
    names = [str(task) for task in tasks]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _unavailable_message(cluster, missing, timeout_secs):
    reasons = "; ".join(f"{task}: {reason}" for task, reason in missing.items())
    return (f"{cluster.me} (this process) waited {timeout_secs} s for the other workers "
            f"of TF_CONFIG, and {len(missing)} of {len(cluster.peers)} never answered "
            f"({reasons}). Start each of them with the same command and its own "
            "TF_CONFIG task, check that TF_CONFIG lists the same cluster on every "
            "worker and that these addresses are reachable from here, or wait longer "
            "(a larger --peer_wait_secs; 0 waits without bound, in TensorFlow).")


def _connect(task, me, timeout):
    """None when `task`'s port accepts a TCP connection (then says who `me` is), else
    why not."""
    return unreachable(task.host, task.port, timeout,
                       hello=HELLO + f"{me.job} {me.index}\n".encode())


def unreachable(host, port, timeout, hello=b""):
    """None when `host`:`port` accepts a TCP connection within `timeout` seconds (then
    sends `hello`, if any), else why not, in a few words."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as peer:
            try:
                if hello:
                    peer.sendall(hello)
            except OSError:
                pass  # it answered; a TensorFlow server may close on what it reads
            return None
    except socket.gaierror as error:
        return f"unknown host ({error.strerror})"
    except socket.timeout:
        return "connection timed out"
    except ConnectionRefusedError:
        return "connection refused (nothing listens there yet)"
    except OSError as error:
        return error.strerror or type(error).__name__


@contextlib.contextmanager
def _listening(task):
    """Listens on `task`'s port, on every interface as TensorFlow's server does."""
    try:
        if socket.has_dualstack_ipv6():
            listener = socket.create_server(("", task.port), family=socket.AF_INET6,
                                            dualstack_ipv6=True)
        else:
            listener = socket.create_server(("", task.port))
    except OSError as error:
        raise ClusterError(
            f"The port of {task} (this process, TF_CONFIG) cannot be opened: "
            f"{error.strerror or error}. Another process uses it (an earlier run of "
            "this worker still going?): stop it, or give this worker a free port in "
            "TF_CONFIG on every worker.") from None
    listener.setblocking(False)
    try:
        yield listener
    finally:
        listener.close()


def _callers(listener):
    """(job, index) of each peer that connected since the last call, from what it
    said; every connection is closed, so that the backlog never fills up."""
    callers = []
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:  # BlockingIOError: no more for now
            return callers
        with connection:
            connection.settimeout(0.2)
            try:
                said = connection.recv(256)
            except OSError:
                continue
        match = re.fullmatch(re.escape(HELLO) + rb"(\w+) (\d+)\n", said)
        if match:
            callers.append((match.group(1).decode(), int(match.group(2))))


@contextlib.contextmanager
def _raise_on_sigterm(while_doing="waiting for the multi-worker peers", restore=None):
    """While active (main thread only), a SIGTERM raises WaitInterrupted; then the
    handler of before (or `restore`) is put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):  # pylint: disable=unused-argument
        raise WaitInterrupted(signum, while_doing)

    previous = signal.signal(signal.SIGTERM, interrupt)
    previous = previous if restore is None else restore
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


@contextlib.contextmanager
def sigterm_deferred(while_doing):
    """Holds SIGTERM back in the main thread during a call that runs no Python (one
    that holds the GIL) and may replace the SIGTERM handler; then puts the handler of
    before back and honours a SIGTERM that came meanwhile (WaitInterrupted).

    The threads that the call starts inherit the held-back mask; threads that existed
    before and do not hold SIGTERM back would still take it (run.py holds it back
    while TensorFlow is imported, so that TensorFlow's threads do).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        # `signal.signal` installs the handler for the OS too (the call may have
        # replaced it behind Python's back); unblocking then delivers a pending
        # SIGTERM at once.
        with _raise_on_sigterm(while_doing, restore=previous):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


# ------------------------------------------------------- a bounded TensorFlow call


def bounded_call(function, timeout_secs, waiting_for, *, report_every_secs=REPORT_EVERY_SECS,
                 out=print):
    """`function()`'s result (or its exception), run in a thread of its own while this
    one waits at most `timeout_secs` (None: without bound), saying what it waits for
    at once and every `report_every_secs`. For TensorFlow calls that wait on a network
    peer without a deadline (TPU connection and start-up): they release the GIL, so
    Ctrl-C (KeyboardInterrupt) and SIGTERM reach this thread meanwhile.

    Raises:
        TimeoutError: `timeout_secs` passed first (the call is left in its daemon
            thread; the process can exit).
    """
    done, outcome = threading.Event(), {}

    def call():
        try:
            outcome["value"] = function()
        except BaseException as error:  # pylint: disable=broad-except
            outcome["error"] = error
        finally:
            done.set()

    threading.Thread(target=call, name="bounded_call", daemon=True).start()
    start = time.monotonic()
    bound = "without bound" if timeout_secs is None else f"up to {timeout_secs} s"
    out(f"Waiting for {waiting_for} ({bound}, --peer_wait_secs; Ctrl-C stops).",
        flush=True)
    last_report = start
    while not done.wait(timeout=0.5):
        now = time.monotonic()
        if timeout_secs is not None and now - start >= timeout_secs:
            raise TimeoutError(f"no answer in {timeout_secs} s")
        if now - last_report >= report_every_secs:
            out(f"Still waiting for {waiting_for} ({now - start:.0f} s).", flush=True)
            last_report = now
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


# ------------------------------------------------------------------ a peer lost mid-run


_TASK_NAME = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")


def describe_lost_peers(cluster, error_message):
    """The message of `PeerLostError` for a TensorFlow error of a collective: the peers
    that `error_message` names (every peer when it names none), from TF_CONFIG."""
    named = []
    for job, index in _TASK_NAME.findall(error_message):
        task = cluster.find(job, int(index))
        if task is not None and task != cluster.me and task not in named:
            named.append(task)
    # TensorFlow's message: "Graph execution error:", "Detected at node ...", the
    # node's definition (indented lines), then what happened.
    first_line = next((line.strip() for line in error_message.splitlines()
                       if line.strip() and not line[0].isspace()
                       and not line.startswith(("Graph execution error",
                                                "Detected at node"))), "")
    who = (f"{_and(named)} stopped or can no longer be reached" if named else
           f"a peer ({_and(cluster.peers)}) stopped or can no longer be reached")
    return (f"{who}, so {cluster.me} (this process) cannot go on: a multi-worker run "
            f"needs every worker of TF_CONFIG (TensorFlow: {first_line[:300]}). The "
            "checkpoints already written are kept: restart every worker with the same "
            "command (a worker that stopped too); they resume from the latest one.")
