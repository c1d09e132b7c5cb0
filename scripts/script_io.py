"""What every script that writes files or starts run.py needs, without TensorFlow.

- `write_whole(path, write)`: a file is whole or absent (a temporary sibling, then
  os.replace); a failed write is a `WriteFailed` naming the file, the old one intact.
  `write_text` and `save_figure` (a matplotlib figure; `pyplot()` gets matplotlib)
  are its two uses.
- `Children`: run.py processes that stop with the script. SIGTERM or SIGINT to the
  script is forwarded to every child (run.py saves a checkpoint on both and exits),
  and SIGHUP (a closed terminal or SSH session, which never reaches a child in its own
  session) as SIGTERM, unless the script ignores SIGHUP (`nohup`); the script waits
  for them, then stops with `Stopped`: a restart resumes the point.
- `parse_bool`: argparse's type for a true/false option; `free_ports`: loopback ports.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import threading
import uuid


class WriteFailed(OSError):
    """A file could not be written; the file at the path is as it was."""


def write_whole(path, write):
    """Writes `path` whole or not at all: `write(scratch)` writes a temporary sibling
    (which ends like `path`: matplotlib and numpy pick the format from it), then it is
    renamed over `path`. Raises WriteFailed naming `path` when the write fails."""
    folder = os.path.dirname(os.path.abspath(path))
    root, extension = os.path.splitext(os.path.basename(path))
    scratch = os.path.join(folder, f".{root}.tmp{os.getpid()}-{uuid.uuid4().hex[:6]}"
                           f"{extension}")
    try:
        os.makedirs(folder, exist_ok=True)
        write(scratch)
        os.replace(scratch, path)
    except OSError as error:
        raise WriteFailed(f"{path} could not be written ({error.strerror or error}); "
                          + ("the file there is as it was before" if os.path.exists(path)
                             else "nothing was written there")) from None
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)
    return path


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None when matplotlib (the
    plot extra: pip install -e '.[plot]') is not installed."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    return plt


def save_figure(plt, fig, path, dpi):
    """`fig` as the PNG `path`, written whole (`write_whole`), then closed, also when
    the write fails (WriteFailed). Returns `path`."""
    try:
        return write_whole(path, lambda scratch: fig.savefig(scratch, dpi=dpi))
    finally:
        plt.close(fig)


def write_text(path, text):
    """`write_whole` of a text file."""
    def write(scratch):
        with open(scratch, "w") as f:
            f.write(text)
    return write_whole(path, write)


def given_options(parser, argv):
    """The dest names of what `argv` gives explicitly to the argparse `parser`
    (abbreviated or not, `--name value` or `--name=value`; positionals too): what a
    script must not drop where it does not read it."""
    defaults = {action: action.default for action in parser._actions}  # pylint: disable=protected-access
    try:
        for action in defaults:
            action.default = argparse.SUPPRESS
        return set(vars(parser.parse_args(argv)))
    finally:
        for action, default in defaults.items():
            action.default = default


class Stopped(RuntimeError):
    """The script was asked to stop (SIGTERM / SIGINT / SIGHUP): its children were stopped and
    waited for. `signum` is the signal."""

    def __init__(self, signum):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class Children:
    """Starts child processes that stop with this one. Use as a context manager in the
    main thread (it installs the SIGTERM and SIGINT handlers and puts the old ones back);
    `run` may be called from any thread."""

    def __init__(self):
        # Reentrant: the handler runs in the main thread, which may hold it (a child
        # started from the main thread) when the signal comes.
        self._lock = threading.RLock()
        self._running = set()
        self.stopped_by = None
        self._old = {}

    def __enter__(self):
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
                continue  # under nohup: a hangup is meant to change nothing
            self._old[signum] = signal.signal(signum, self._forward)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._old.items():
            signal.signal(signum, handler)
        return False

    @staticmethod
    def _for_child(signum):
        """The signal a child gets for `signum`: SIGHUP as SIGTERM (run.py saves a
        checkpoint on SIGTERM and SIGINT)."""
        return signal.SIGTERM if signum == signal.SIGHUP else signum

    @staticmethod
    def _signal(child, signum):
        """`signum` to the child's process group (each child leads its own): what it
        started (strace's tracee, a wrapper's command) stops with it."""
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:  # exited meanwhile
            pass

    def _forward(self, signum, frame):  # pylint: disable=unused-argument
        with self._lock:
            self.stopped_by = self.stopped_by or signum
            for child in self._running:
                if child.poll() is None:
                    self._signal(child, self._for_child(signum))

    def run(self, command, timeout=None, **kwargs):
        """subprocess.run(command, timeout=timeout, **kwargs)'s return code; Stopped
        when the script was asked to stop, before or while the child ran (the child was
        given the same signal and has exited). After `timeout` seconds the child is
        killed, as subprocess.run does, and TimeoutExpired raised."""
        with self._lock:
            self.check()
            # Its own process group: a terminal's Ctrl-C reaches the child only through
            # us, once, and a child is never left behind by a stop that skips it.
            child = subprocess.Popen(command, start_new_session=True, **kwargs)
            self._running.add(child)
            if self.stopped_by:  # the signal came while it started (the main thread's)
                self._signal(child, self._for_child(self.stopped_by))
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        finally:
            with self._lock:
                self._running.discard(child)
        self.check()
        return code

    def check(self):
        """Raises Stopped when the script was asked to stop: for work done in the
        script's own process between children (a stop arriving then is only noted)."""
        if self.stopped_by:
            raise Stopped(self.stopped_by)


def parse_bool(text):
    """argparse's type for an option of true or false (also 1/0, yes/no)."""
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def free_ports(count):
    """`count` free TCP ports on the loopback interface (workers never leave it)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
