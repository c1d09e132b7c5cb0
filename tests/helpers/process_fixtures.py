"""Helpers for tests that start worker processes on 127.0.0.1."""
import socket
import subprocess
import time


def free_ports(count):
    """`count` free TCP ports on the loopback interface (the workers never leave it)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


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
