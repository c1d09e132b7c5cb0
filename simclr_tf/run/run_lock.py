"""One writer per model_dir: an exclusive lock file, released on exit.

`model_dir/.simclr_lock` holds JSON (pid, host, mode, start time, heartbeat, token).
It is created atomically (written beside, then hard-linked into place, which fails
when a lock is there; on object stores such as gs://, which have no links, an
existence check then a write: best effort). While held, a daemon thread rewrites the
heartbeat every `HEARTBEAT_SECS`; the lock is removed when the run ends, however it
ends short of SIGKILL.

A lock left behind (SIGKILL, a crashed machine) is stale, and taken over with a
warning, when
  - its holder ran on this host and that process is gone: its PID has ended, or now
    belongs to another process (a reused PID: the process start time recorded in the
    lock is not that PID's), or the machine has restarted since (another boot id), or
  - its holder ran on another host and its heartbeat is older than `STALE_SECS`.
On this host a holder that is still the same process keeps the lock however old its
heartbeat looks: the heartbeat's age is read on this machine's clock, which can jump
(NTP, a suspended VM, a clock set by hand), so an age there proves nothing while the
process is alive. Heartbeats stay the only evidence about another host's holder.
`--break_lock` takes a lock over whatever it says: for shared filesystems, when you
know that the other run is dead and do not want to wait `STALE_SECS`.
"""
import json
import os
import socket
import threading
import time
import uuid

import tensorflow as tf
from absl import logging

from simclr_tf.rundir import files
from simclr_tf.config import ConfigError

LOCK_FILE = ".simclr_lock"
HEARTBEAT_SECS = 30
STALE_SECS = 600


class LockLostError(RuntimeError):
    """This run no longer holds model_dir's lock (another run took it over, or it was
    removed): it writes nothing more there."""


# The locks this process holds (`release_held`).
_HELD = set()


class ModelDirLock:
    """Holds model_dir's lock; use `acquire`, then `release` (or `with`). A run asks
    `check()` before each write into model_dir (checkpoints, the export, its result):
    a run whose lock was taken over or removed stops instead of writing beside the
    run that now holds it."""

    def __init__(self, path, record):
        self.path = path
        self.record = record
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name="simclr-lock-heartbeat")
        self._thread.start()
        _HELD.add(self)

    def _beat(self):
        while not self._stop.wait(HEARTBEAT_SECS):
            holder = read(self.path)
            if holder is None or holder.get("token") != self.record["token"]:
                logging.error("The lock %s was taken over by %s; this run no longer "
                              "holds model_dir.", self.path, describe(holder))
                return
            self.record["heartbeat"] = time.time()
            try:
                files.atomic_write(self.path, json.dumps(self.record))
            except (OSError, tf.errors.OpError) as error:
                logging.warning("Could not refresh the lock %s: %s", self.path, error)

    def check(self):
        """Raises LockLostError unless the lock file is still this run's (read now)."""
        holder = read(self.path)
        if holder is not None and holder.get("token") == self.record["token"]:
            return
        what = ("was removed" if holder is None
                else f"was taken over by {describe(holder)}")
        raise LockLostError(
            f"model_dir's lock {self.path} {what}: this run no longer holds "
            f"{os.path.dirname(self.path)} and stopped writing there (its checkpoints "
            "saved so far are intact). One run writes a model_dir at a time: once the "
            "other run has ended, run the same command again to resume.")

    def release(self):
        """Stops the heartbeat and removes the lock if it is still this run's."""
        _HELD.discard(self)
        self._stop.set()
        self._thread.join(timeout=5)
        holder = read(self.path)
        if holder is not None and holder.get("token") == self.record["token"]:
            try:
                tf.io.gfile.remove(self.path)
            except (OSError, tf.errors.OpError):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.release()
        return False


def release_held():
    """Releases every lock this process holds: for a process that must end without
    unwinding (`simclr_tf.run.loop`: a stop signal while the input blocks), so that the
    next run, on any host, need not wait for its lock to go stale."""
    for lock in list(_HELD):
        lock.release()


def acquire(model_dir, mode, *, force=False):
    """Takes model_dir's lock for a run of `mode`; returns the `ModelDirLock`.

    Args:
        model_dir: an existing directory.
        mode: what the run does (recorded in the lock, shown to a second run).
        force: take the lock over even if it looks held (`--break_lock`).

    Raises:
        ConfigError(model_dir): another live run holds it; names that run and the ways out.
    """
    path = os.path.join(model_dir, LOCK_FILE)
    now = time.time()
    record = dict(pid=os.getpid(), host=socket.gethostname(), mode=mode, started=now,
                  heartbeat=now, token=uuid.uuid4().hex, **process_identity(os.getpid()))
    for _ in range(3):
        try:
            _create(path, json.dumps(record))
            return ModelDirLock(path, record)
        except FileExistsError:
            pass
        holder = read(path)
        why = "--break_lock" if force else stale_reason(holder)
        if why is None:
            raise ConfigError(
                "model_dir", f"{model_dir!r} is in use by {describe(holder)}: one run "
                "writes a model_dir at a time. Wait for it to end, or use another "
                "--model_dir; --mode=eval can follow it meanwhile. If that run is dead "
                "(on this host its lock is taken over once its process has ended; from "
                f"another host after {STALE_SECS} s without a heartbeat), remove {path} "
                "or pass --break_lock.")
        logging.warning("Taking over the lock of %s from %s (%s).", model_dir,
                        describe(holder), why)
        try:
            tf.io.gfile.remove(path)
        except (OSError, tf.errors.NotFoundError):
            pass  # another run took it over first; try again
    raise ConfigError("model_dir", f"could not take the lock {path}: other runs are "
                      "starting on it at the same time; start one run per model_dir.")


def read(path):
    """The lock's record, {} when it is unreadable, None when there is no lock."""
    try:
        with tf.io.gfile.GFile(path) as f:
            text = f.read()
    except (OSError, tf.errors.NotFoundError):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def stale_reason(holder):
    """Why a lock held by `holder` (a record from `read`) is stale, or None if live."""
    if holder is None:
        return "gone"
    if not holder:
        return "its file is unreadable"
    pid = holder.get("pid")
    if holder.get("host") == socket.gethostname():
        if not _alive(pid):
            return f"process {pid} on this host has ended"
        recorded = (holder.get("boot_id"), holder.get("pid_start"))
        if None not in recorded:
            now = process_identity(pid)
            if now.get("boot_id") not in (None, recorded[0]):
                return "this host has restarted since"
            if now.get("pid_start") not in (None, recorded[1]):
                return f"process {pid} on this host has ended (its PID is another's now)"
            if now.get("pid_start") == recorded[1]:
                return None  # the holder itself, alive: whatever the clocks say
    age = time.time() - float(holder.get("heartbeat", 0))
    if age > STALE_SECS:
        return f"no heartbeat for {age:.0f} s"
    return None


def process_identity(pid):
    """What tells process `pid` of this host from any other that has had its PID:
    {boot_id, pid_start} (the kernel's boot id and the process start time, field 22
    of /proc/<pid>/stat, in clock ticks since boot), or {} where /proc does not tell
    (not Linux, the process is gone)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot_id = f.read().strip()
        # Field 2, the command name, is in parentheses and may hold spaces or ')'.
        fields = stat[stat.rindex(b")") + 2:].split()
        return dict(boot_id=boot_id, pid_start=int(fields[22 - 3]))
    except (OSError, ValueError, TypeError, IndexError):
        return {}


def describe(holder):
    if not holder:
        return "an unknown run"
    started = time.strftime("%Y-%m-%d %H:%M:%S",
                            time.localtime(float(holder.get("started", 0))))
    return (f"--mode={holder.get('mode')} run (pid {holder.get('pid')} on "
            f"{holder.get('host')}, since {started})")


def _alive(pid):
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _is_local(path):
    return "://" not in path


def _create(path, text):
    """Creates `path` with `text`, atomically; FileExistsError if it exists."""
    if not _is_local(path):
        if tf.io.gfile.exists(path):
            raise FileExistsError(path)
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(text)
        return
    temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with os.fdopen(descriptor, "w", encoding="utf-8") as f:
            f.write(text)
    finally:
        os.remove(temporary)
