"""Helpers for tests that start worker processes on 127.0.0.1."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts"))
from script_io import free_ports  # noqa: E402,F401  pylint: disable=unused-import  (the scripts' own; tests import it from here)


def wait_all(processes, timeout):
    """Waits for `(process, log file)` pairs up to `timeout` seconds in all, kills the
    ones still running, closes the logs, and returns the exit codes."""
    deadline = time.monotonic() + timeout
    try:
        for process, _ in processes:
            process.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        pass  # killed below; the caller checks the return codes
    finally:
        stop_all(processes)
    return [process.returncode for process, _ in processes]


def stop_all(processes):
    """Kills the `(process, log file)` pairs still running and closes their logs."""
    for process, log in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
