"""Test session set-up shared by every test module.

The CPU is split into eight logical devices before TensorFlow runs any op, so that
MirroredStrategy tests can run 1, 2, 4 and 8 replicas in one process (8: a TPU v3-8's
replicas, test_tpu). Code that uses the default strategy only ever touches /CPU:0.
"""
import collections
import gc
import os
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

NUM_LOGICAL_CPUS = 8


def _split_the_cpu():
    """Eight logical CPUs, before TensorFlow runs any op (pytest_configure calls this
    before any test module is imported)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)


def _is_xdist_controller(config):
    """Under pytest-xdist (-n 2) the controller process only hands tests to the
    workers: it never imports TensorFlow (6-7 s before the workers start)."""
    option = config.option
    return (not hasattr(config, "workerinput") and getattr(option, "dist", "no") != "no"
            and bool(getattr(option, "tx", None)) and not option.collectonly)


@pytest.fixture(autouse=True)
def _fresh_collective_keys():
    """Each test's MirroredStrategy starts from its own collective-key base.

    Several strategies in one process otherwise reuse collective instance keys, and a
    later test's all-gather meets an earlier one's ("Collective instance 100 expected
    type 0 and data_type 1 but got type 2 and data_type 3").
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.distribute.MirroredStrategy._collective_key_base += 100000  # pylint: disable=protected-access
    yield


@pytest.fixture
def python_sigint():
    """SIGINT with Python's own handler for the test, as a program has it at its start
    (restored after). `_thread.interrupt_main`, a test's Ctrl-C, does nothing while
    SIGINT is ignored, which it is in a process a shell started in the background
    without job control (`(pytest ... &)`: the full suite failed so) and in a
    pytest-xdist worker that replaced a crashed one."""
    import signal  # pylint: disable=import-outside-toplevel
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(autouse=True)
def _no_downloads(monkeypatch):
    """Tests never send traffic: TFDS downloads fail at once (`--tfds_download` is on
    by default); tests of the download path replace the builder."""
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    def refuse(self, *args, **kwargs):
        raise RuntimeError("downloads are disabled in the tests (no network)")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", refuse)
    # Nor does the offline probe: the machine counts as online (the probe's own test
    # points it at 127.0.0.1).
    from simclr_tf.data import tfds_source  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(tfds_source, "network_problem", lambda *args, **kwargs: None)
    yield


# --- Test tiers -------------------------------------------------------------------------
# The default run (`python -m pytest`) is the fast tier: unit and structural tests and
# one shared tiny training run. Tests marked `large` (about 5 s to a minute each) and
# `extra_large` (over a minute, or several processes) run only when asked for; the
# full suite is `python -m pytest --run_large --run_extra_large -n 2` (what CI runs).
# Which tier a new test belongs in: docs/testing.md.

TIERS = ("large", "extra_large")
# Fixtures made once per session and shared by the pytest-xdist workers (a file lock;
# the first to ask makes it): `served` (tests/test_export.py) and `tiny_run` (below).
SHARED_ACROSS_WORKERS = ("served", "tiny_run")
# An unmarked test slower than this is named at the end of the run: it probably belongs
# in a marked tier (machines differ up to 3x, so this is a report, not a failure).
UNMARKED_WARN_SECONDS = 10.0


def pytest_addoption(parser):
    for tier in TIERS:
        parser.addoption(f"--run_{tier}", action="store_true", default=False,
                         help=f"also run the tests marked {tier} (docs/testing.md)")


def pytest_configure(config):
    if not _is_xdist_controller(config):
        _split_the_cpu()
    config.pluginmanager.register(_UnmarkedDurations(), "unmarked-durations")
    # Under pytest-xdist (-n 2), hand the workers one test at a time, in the order
    # below (the longest tiers first): by default each worker is sent a block of
    # consecutive tests up front, which put every extra-large test in one worker's
    # block while the other ran out of work at the end.
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


# `ONEDNN_MAX_CPU_ISA=AVX2` on an AVX-512 CPU approximates an AVX2-only machine's
# speed (docs/testing.md), but not its bfloat16: TensorFlow picks oneDNN's bfloat16
# kernels from the CPU's own flags, and the cap then refuses them ("could not create a
# primitive descriptor"); an AVX2-only CPU runs bfloat16 through Eigen instead. Tests
# marked `bfloat16` skip under that cap, saying why.
_BELOW_AVX512 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"}


def _bfloat16_capped():
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() not in _BELOW_AVX512:
        return False
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


def pytest_collection_modifyitems(config, items):
    if _bfloat16_capped():
        skip = pytest.mark.skip(reason=(
            "ONEDNN_MAX_CPU_ISA caps oneDNN below AVX-512 on an AVX-512 CPU: TensorFlow "
            "still picks oneDNN's bfloat16 kernels, which the cap refuses (an AVX2-only "
            "CPU runs bfloat16 through Eigen)"))
        for item in items:
            if item.get_closest_marker("bfloat16"):
                item.add_marker(skip)
    wanted = {tier for tier in TIERS if config.getoption(f"--run_{tier}")}
    selected, deselected = [], []
    for item in items:
        tiers = {tier for tier in TIERS if item.get_closest_marker(tier)}
        (selected if tiers <= wanted else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    # The longest tiers first (a stable sort keeps each file's order within a tier):
    # under pytest-xdist the long tests start at once and the short ones fill the
    # workers at the end, instead of one worker finishing a long test alone (with
    # --maxschedchunk=1, set in pytest_configure).
    order = {"extra_large": 0, "large": 1}
    items[:] = sorted(selected, key=lambda item: min(
        [order[tier] for tier in TIERS if item.get_closest_marker(tier)] or [2]))
    # A fixture the workers share is made by the first worker that asks while any other
    # that asks waits on its lock: its first test goes first of all, so that it is
    # made while the other worker starts the long tests. (The export fixture's first
    # two tests, handed to both workers at once, cost the second one a 50 s wait.)
    firsts = []
    for name in SHARED_ACROSS_WORKERS:
        first = next((item for item in items if name in item.fixturenames), None)
        if first is not None and first not in firsts:
            firsts.append(first)
    items[:] = firsts + [item for item in items if item not in firsts]


def pytest_collection_finish(session):
    """What the imports and the collection made lives to the end of the session: it
    leaves the cyclic garbage collector's full passes (gc.freeze), which a worker of
    the default tier makes about 25 times (about 10 of its 125 s; about 7 s frozen)."""
    gc.collect()
    gc.freeze()


_SHARED = "set-up seconds of the shared fixture "


class _UnmarkedDurations:
    """Adds up each unmarked test's set-up, call and tear-down time and names, at the
    end of the run, those over UNMARKED_WARN_SECONDS. A module- or session-scoped
    fixture's set-up is the fixture's, not the test's that happened to come first:
    those are listed on their own. Works in one process and under pytest-xdist (the
    reports carry the markers and the fixtures' times to the controller)."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)
        self.shared = {}  # fixture name (scope) -> set-up seconds
        self.current = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        self.current = item
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef):
        start = time.perf_counter()
        yield
        if fixturedef.scope != "function" and self.current is not None:
            self.current.user_properties.append(
                (f"{_SHARED}{fixturedef.argname} ({fixturedef.scope})",
                 time.perf_counter() - start))

    def pytest_runtest_logreport(self, report):
        if any(tier in report.keywords for tier in TIERS):
            return
        self.seconds[report.nodeid] += report.duration
        if report.when == "setup":
            for name, seconds in report.user_properties:
                if name.startswith(_SHARED):
                    self.shared[name[len(_SHARED):]] = seconds
                    self.seconds[report.nodeid] -= seconds

    def pytest_terminal_summary(self, terminalreporter):
        limit = UNMARKED_WARN_SECONDS
        slow = sorted(((s, n) for n, s in self.seconds.items() if s > limit), reverse=True)
        if slow:
            terminalreporter.write_sep(
                "=", f"unmarked tests over {limit:.0f} s: mark them large "
                "(docs/testing.md)", yellow=True)
            for seconds, nodeid in slow:
                terminalreporter.write_line(f"{seconds:7.1f}s {nodeid}")
        shared = sorted(((s, n) for n, s in self.shared.items() if s > limit), reverse=True)
        if shared:
            terminalreporter.write_sep(
                "-", f"shared fixtures over {limit:.0f} s to set up (once each)")
            for seconds, name in shared:
                terminalreporter.write_line(f"{seconds:7.1f}s {name}")


# --- The authors' released model --------------------------------------------------------
RELEASED_R50_ENV = "SIMCLR_TF_RELEASED_R50"


@pytest.fixture(scope="session")
def released_r50():
    """Folder of the authors' released R50 1x (SK0) SavedModel layout, with
    `expected_outputs.npz` beside `variables/`.

    Tests that need the real released weights take this fixture; they skip, saying
    how to run them, unless the environment variable names that folder.
    """
    path = os.environ.get(RELEASED_R50_ENV)
    if not path:
        pytest.skip(f"the authors' released R50 is not available: set {RELEASED_R50_ENV} "
                    "to its folder (.ci/run sets it where the workplace provides the "
                    "model)")
    if not os.path.isdir(os.path.join(path, "variables")):
        pytest.fail(f"{RELEASED_R50_ENV}={path!r} has no variables/ folder: name the "
                    "folder of the released model (it holds variables/variables.index)")
    return path


# --- Shared runs ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The session's one tiny pretraining run (helpers.run_fixtures.TinyRun): the
    eval, export, embed, probe and fine-tune tests start from it instead of training
    their own. Read-only: copy it (`tiny_run.copy_to(tmp_path / "run")`) to write.
    Under pytest-xdist the workers share it (trained by the first that asks)."""
    from helpers.run_fixtures import TinyRun  # pylint: disable=import-outside-toplevel
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    return TinyRun.shared(root / "tiny_run")


@pytest.fixture
def skip_final_export(monkeypatch):
    """Training runs in this test end without their SavedModel export, about a third
    of a tiny run's time: for tests that never look at the export (the result's
    `saved_model` is then None). `--mode=export` is stubbed too: tests of exporting
    do not take this fixture."""
    from simclr_tf.run.modes import export  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(export, "export_model",
                        lambda model, config, step, write_guard=None: None)
