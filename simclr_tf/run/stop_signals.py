"""Stopping training on a signal: SIGTERM (preemption) or SIGINT (Ctrl-C) asks the
loop to stop between two calls, also while a compiled call waits for input that
does not come (`StopOnSignals`; `simclr_tf.run.loop` saves, logs and returns). Python
runs a signal handler only between bytecodes, never inside such a call, so a watcher
thread, woken through `signal.set_wakeup_fd`, cancels a call still running
`STOP_GRACE_SECS` after the signal and longer than `STALL_FACTOR` times the longest
call so far, and tells the loop (`on_stuck`) when a cancelled call is still blocked
`CANCEL_WAIT_SECS` later.
"""
import contextlib
import signal
import socket
import threading
import time

import tensorflow as tf
# The eager runtime's cancellation of a running function call (what tf.data and
# tf.distribute use to stop blocked ops); no public API offers it.
from tensorflow.python.eager import cancellation


# The signals that stop training with a checkpoint at the current step.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


# How long a compiled call may run on after a stop signal before it is taken as blocked
# on its input and cancelled: at least STOP_GRACE_SECS after the signal, and
# STALL_FACTOR times the longest call so far (the first, which traces, aside) since
# the call began. A call cancelled
# while it computes could have applied part of an update; one that waits that long
# past its usual time waits for its batch, before any update of that step.
STOP_GRACE_SECS = 5.0
STALL_FACTOR = 2.0
# The first call traces and compiles the step and has no earlier call to measure a
# stall against: cancelled only this long after the signal (a loaded machine traced
# past STOP_GRACE_SECS, and the call was cancelled mid-step at step 0).
FIRST_CALL_GRACE_SECS = 60.0
# How long the watcher waits for a cancelled call to return before it stops the run
# itself (a read that cannot be cancelled).
CANCEL_WAIT_SECS = 2.0


class StopOnSignals:
    """While active, a SIGTERM or SIGINT sets `requested`, so the loop stops between
    two calls (a second one while the checkpoint is written changes nothing: the write
    finishes). Without this, Ctrl-C would raise KeyboardInterrupt in the middle of a
    step and lose everything since the last checkpoint.

    Python runs the handler only between bytecodes of the main thread, so a signal
    that comes while a compiled call blocks (on input that never comes) would wait
    for it forever. The signal also wakes a watcher thread (`signal.set_wakeup_fd`),
    which cancels the call in flight (`calling`) once it has run past the grace
    (`STOP_GRACE_SECS`, `STALL_FACTOR`); the loop then stops at the step reached.
    A call still running `CANCEL_WAIT_SECS` after that has a read that cannot be
    cancelled: the watcher then calls `on_stuck(signum)` (the loop's stop, then the
    end of the process). The previous handlers and wakeup fd are restored after.
    Only the main thread can install handlers; elsewhere this only times the calls.
    `stopping` serialises the stop between the main thread and the watcher; the
    first to stop keeps its result in `result`."""

    def __init__(self, on_stuck=None):
        self.received = None  # the first signal's number
        self.cancelled = False  # a call was cancelled: its input was blocked
        self.stopping = threading.Lock()
        self.result = None
        self.segment = None  # the `Means` of the calls of the segment in flight
        self._on_stuck = on_stuck
        self._grace = STOP_GRACE_SECS
        self._first_grace = max(FIRST_CALL_GRACE_SECS, STOP_GRACE_SECS)
        self._factor = STALL_FACTOR
        self._cancellation = cancellation.CancellationManager()
        self._call_started = None  # time.monotonic() of the call in flight
        self._calls = 0
        self._longest_call = 0.0  # of the calls after the first (which traces)
        self._previous = {}
        self._previous_fd = None
        self._sockets = ()
        self._closed = threading.Event()
        self._watcher = None

    def _handle(self, signum, frame):  # pylint: disable=unused-argument
        if self.received is None:
            self.received = signum

    @property
    def requested(self):
        return self.received is not None

    @contextlib.contextmanager
    def calling(self):
        """Around one compiled call: timed, and cancelled by the watcher when it
        blocks after a stop signal (then `cancelled` is True and the call raises
        `tf.errors.CancelledError`)."""
        self._call_started = time.monotonic()
        self._calls += 1
        try:
            with cancellation.CancellationManagerContext(self._cancellation):
                yield
        except tf.errors.CancelledError:
            if not self._cancellation.is_cancelled:
                raise
            self.cancelled = True
        finally:
            elapsed = time.monotonic() - self._call_started
            self._call_started = None
            if not self.cancelled and self._calls > 1:
                self._longest_call = max(self._longest_call, elapsed)

    def _watch(self, reader):
        numbers = {int(s) for s in STOP_SIGNALS}
        signalled = None
        while not self._closed.is_set():
            try:
                woken = reader.recv(64)
            except socket.timeout:
                woken = b""
            except OSError:
                return
            if signalled is None and numbers & set(woken):
                signalled = time.monotonic()
                self.received = self.received or next(n for n in woken if n in numbers)
            started = self._call_started
            if signalled is None or started is None:
                continue
            now = time.monotonic()
            grace = self._grace if self._calls > 1 else self._first_grace
            if (now - signalled >= grace
                    and now - started >= self._factor * self._longest_call):
                self._cancellation.start_cancel()
                deadline = now + CANCEL_WAIT_SECS
                while self._call_started is started and time.monotonic() < deadline:
                    time.sleep(0.05)
                if self._call_started is started and self._on_stuck is not None:
                    self.cancelled = True
                    self._on_stuck(self.received)
                return

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        reader.settimeout(0.2)
        self._sockets = (reader, writer)
        self._previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._watcher = threading.Thread(target=self._watch, args=(reader,), daemon=True,
                                         name="simclr-stop-signal-watcher")
        self._watcher.start()
        return self

    def __exit__(self, *exc_info):
        if self._watcher is not None:
            signal.set_wakeup_fd(self._previous_fd)
            self._closed.set()
            self._watcher.join()
            for end in self._sockets:
                end.close()
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        # The watcher is gone: drop the callback, which usually closes over this
        # object (`loop.train`'s `stop_stuck`) and the training iterator. Kept, the
        # cycle holds the iterator (its prefetched batches, its threads) until a
        # garbage collection at some later, unrelated allocation.
        self._on_stuck = None
        return False
