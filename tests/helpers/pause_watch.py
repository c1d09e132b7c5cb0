"""An opt-in pytest plugin that finds where a test process stands still (issue 42):

    PYTHONPATH=tests python -m pytest -p helpers.pause_watch --run_large -n 2

Each process appends to $SIMCLR_TF_PAUSE_LOG (default: pause_watch.log in the
current folder), one line a finding:
- PAUSE: a watch thread's 0.2 s sleep came back over 2 s late, so another thread held
  the GIL that long (a garbage collection, or a C++ call that does not release it,
  such as deleting an autotuned tf.data iterator: docs/pitfalls.md), with the test
  running and the tf.data iterators whose deletion began just before;
- OUTLIVED: a tf.data iterator still alive after the test that made it ended, with
  where it was made (something keeps it: a fixture, or a reference cycle that only a
  later garbage collection frees);
- FREED: such an iterator freed at last, during which test and how long after.
It measures; it asserts nothing, and the suite does not load it.
"""
import collections
import itertools
import os
import threading
import time
import traceback
import weakref

PAUSE_SECONDS = 2.0

_log_path = os.environ.get("SIMCLR_TF_PAUSE_LOG", "pause_watch.log")
_test = {"id": "(collection)"}
_deleted = collections.deque(maxlen=64)  # (time, test, site, lived seconds)
_alive = {}  # number -> (weakref, test, site)
_reported = set()
_numbers = itertools.count()


def _write(line):
    with open(_log_path, "a") as f:
        f.write(f"{os.getpid()}\t{line}\n")


def _site():
    frames = [f for f in traceback.extract_stack(limit=16)[:-2]
              if "_pytest" not in f.filename and "pluggy" not in f.filename
              and "site-packages/tensorflow" not in f.filename]
    return " > ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}"
                      for f in frames[-4:])


def _watch():
    last = time.monotonic()
    while True:
        time.sleep(0.2)
        now = time.monotonic()
        if now - last > PAUSE_SECONDS:
            deleted = [f"{test} {site} (lived {lived:.0f} s)"
                       for at, test, site, lived in list(_deleted) if at >= last - 0.3]
            _write(f"PAUSE {now - last:.1f} s\tin {_test['id']}\tdeleted just before: "
                   f"{deleted or 'none'}")
        last = now


def _track_iterators():
    from tensorflow.python.data.ops import iterator_ops  # pylint: disable=import-outside-toplevel
    original = iterator_ops.OwnedIterator.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        number, made, test, site = next(_numbers), time.monotonic(), _test["id"], _site()

        def freed(_):
            _alive.pop(number, None)
            _deleted.append((time.monotonic(), test, site, time.monotonic() - made))
            if number in _reported:
                _write(f"FREED\t#{number} of {test}, during {_test['id']}, "
                       f"{time.monotonic() - made:.0f} s after it was made")
        _alive[number] = (weakref.ref(self, freed), test, site)

    iterator_ops.OwnedIterator.__init__ = init


def pytest_configure(config):  # pylint: disable=unused-argument
    _track_iterators()
    threading.Thread(target=_watch, daemon=True, name="pause-watch").start()


def pytest_runtest_setup(item):
    _test["id"] = item.nodeid


def pytest_runtest_logfinish(nodeid, location):  # pylint: disable=unused-argument
    for number, (ref, test, site) in list(_alive.items()):
        if test != nodeid and number not in _reported and ref() is not None:
            _reported.add(number)
            _write(f"OUTLIVED\t#{number} made in {test}, alive after {nodeid}\t{site}")
