"""model_dir's lock against clocks that jump (issue 34 item 5): on this host a holder
that is still the same process keeps the lock however old its heartbeat looks; a
reused PID or a restarted machine does not hold it. (The lock's other behaviours:
tests/test_recovery.py; the soak's clock-jump second writer: test_reliability.py.)"""
import json
import os
import socket
import subprocess
import time
import types

import pytest

from simclr_tf.run import run_lock
from simclr_tf.config import ConfigError

JUMP = run_lock.STALE_SECS + 100  # the export read its clock 700 s ahead


def _clock_ahead(monkeypatch, seconds):
    """run_lock reads a clock `seconds` ahead (as after an NTP step or a VM resume)."""
    real = time.time
    monkeypatch.setattr(run_lock, "time", types.SimpleNamespace(
        time=lambda: real() + seconds, strftime=time.strftime, localtime=time.localtime))


@pytest.fixture
def other_process():
    """A live process of this host that is not this one."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def _write_lock(directory, pid, **fields):
    record = dict(pid=pid, host=socket.gethostname(), mode="train", started=time.time(),
                  heartbeat=time.time(), token="holder", **run_lock.process_identity(pid))
    record.update(fields)
    (directory / run_lock.LOCK_FILE).write_text(json.dumps(record))


def test_the_lock_records_what_tells_its_process_from_a_reused_pid(tmp_path):
    with run_lock.acquire(str(tmp_path), "train"):
        record = run_lock.read(str(tmp_path / run_lock.LOCK_FILE))
        assert record["pid"] == os.getpid()
        assert record["pid_start"] == run_lock.process_identity(os.getpid())["pid_start"]
        assert record["boot_id"]
    assert run_lock.process_identity(999_999_999) == {}  # no such process


def test_a_second_writer_whose_clock_jumped_ahead_is_refused(tmp_path, monkeypatch):
    """The issue's case: the writer's clock reads > STALE_SECS ahead, so the holder's
    heartbeat looks stale to it; the holder is alive and the same process: refused,
    and the holder keeps writing."""
    lock = run_lock.acquire(str(tmp_path), "train")
    try:
        _clock_ahead(monkeypatch, JUMP)
        with pytest.raises(ConfigError, match="is in use by --mode=train run"):
            run_lock.acquire(str(tmp_path), "export")
        monkeypatch.undo()
        lock.check()  # still this run's: no LockLostError
    finally:
        lock.release()


@pytest.mark.parametrize("change, taken", [
    ({}, False),  # alive, the same process: held, whatever the heartbeat's age
    (dict(pid_start=1), True),  # the PID now belongs to another process
    (dict(boot_id="another-boot"), True),  # the machine restarted since
])
def test_another_live_process_keeps_its_lock_however_old_its_heartbeat(
        tmp_path, other_process, change, taken):
    _write_lock(tmp_path, other_process.pid, heartbeat=time.time() - JUMP, **change)
    if taken:
        run_lock.acquire(str(tmp_path), "export").release()
    else:
        with pytest.raises(ConfigError, match=f"pid {other_process.pid} on"):
            run_lock.acquire(str(tmp_path), "export")
        assert run_lock.read(str(tmp_path / run_lock.LOCK_FILE))["token"] == "holder"


def test_a_reused_pid_does_not_hold_a_fresh_lock(tmp_path, other_process):
    """A record whose PID is alive but is another process (the run died, its PID went
    to a new process) is stale at once, heartbeat fresh or not."""
    _write_lock(tmp_path, other_process.pid, pid_start=1)
    assert "PID is another's now" in run_lock.stale_reason(
        run_lock.read(str(tmp_path / run_lock.LOCK_FILE)))


def test_a_record_without_the_process_identity_keeps_the_heartbeat_rule(
        tmp_path, other_process):
    """Locks written before the start time was recorded (or where /proc does not
    tell): a live PID holds it until its heartbeat is STALE_SECS old, as before."""
    _write_lock(tmp_path, other_process.pid)
    path = tmp_path / run_lock.LOCK_FILE
    record = json.loads(path.read_text())
    del record["pid_start"], record["boot_id"]
    path.write_text(json.dumps(record))
    assert run_lock.stale_reason(run_lock.read(str(path))) is None
    record["heartbeat"] = time.time() - JUMP
    path.write_text(json.dumps(record))
    assert "no heartbeat" in run_lock.stale_reason(run_lock.read(str(path)))


def test_another_hosts_holder_is_judged_by_its_heartbeat(tmp_path, other_process):
    _write_lock(tmp_path, other_process.pid, host="another-host")
    path = tmp_path / run_lock.LOCK_FILE
    assert run_lock.stale_reason(run_lock.read(str(path))) is None
    _write_lock(tmp_path, other_process.pid, host="another-host",
                heartbeat=time.time() - JUMP)
    assert "no heartbeat" in run_lock.stale_reason(run_lock.read(str(path)))
