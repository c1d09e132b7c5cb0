"""TensorFlow's start-up lines, filtered by TF_CPP_MIN_LOG_LEVEL (TF-free: it runs
before TensorFlow is imported)."""
import contextlib
import os
import re
import sys
import tempfile

# What TensorFlow's C++ code writes to stderr before absl's log is initialised, whatever
# TF_CPP_MIN_LOG_LEVEL says: the notice that the log is not initialised yet, and lines
# of a severity (I, W, E, F) with their time, thread and source, e.g. on CPUs with
# AVX512_VNNI, at import, twice: "I0000 00:00:1796.. 23717 port.cc:153] oneDNN custom
# operations are on. ..."
PRE_INIT_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called"
PRE_INIT_LINE = re.compile(r"^([IWEF])\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ")
# The `tensorflow` wheel (CUDA-capable) on a host without NVIDIA's driver says so at
# import (INFO: "Could not find cuda drivers on your machine, GPU will not be used.")
# and logs cuInit's failure as an ERROR when it first lists the devices. After that
# notice the error tells nothing more, and is dropped with it; on a host with a driver
# a failing cuInit is a real error, and is kept.
NO_DRIVER_NOTICE = "Could not find cuda drivers on your machine"
NO_DRIVER_ERROR = "failed call to cuInit"


@contextlib.contextmanager
def stderr_filtered(kept):
    """The lines written to stderr inside the block, by Python or by native code
    (TensorFlow's C++, the TFLite converter, LiteRT), come back at its end as
    `kept(lines)` selects them: stderr goes to a temporary file meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", "replace").splitlines(True)
            sys.stderr.write("".join(kept(lines)))
            sys.stderr.flush()


@contextlib.contextmanager
def tensorflow_start_up_filtered():
    """Applies TF_CPP_MIN_LOG_LEVEL to TensorFlow's start-up lines: every line written
    while TensorFlow is imported comes back except the pre-initialisation notice and
    the lines below the level (0: all come back)."""
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0")
    level = int(level) if level.isdigit() else 0  # not a level: filter nothing
    if level <= 0:
        yield
        return

    def kept(lines):
        no_driver = any(NO_DRIVER_NOTICE in line for line in lines)
        for line in lines:
            match = PRE_INIT_LINE.match(line)
            if not (line.startswith(PRE_INIT_NOTICE) or (
                    match and "IWEF".index(match.group(1)) < level) or (
                    no_driver and match and NO_DRIVER_ERROR in line)):
                yield line
    with stderr_filtered(kept):
        yield
        _list_devices()


# What the TFLite converter logs as warnings on every conversion of ours (flags Keras'
# LiteRT export passes that this converter ignores): noise in a run's output.
CONVERTER_NOTICES = ("Ignored output_format.", "Ignored drop_control_dependency.")
# LiteRT's interpreter announces its CPU delegate on stderr when it is created.
LITERT_NOTICE = "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."


def converters_quiet():
    """The export converters' and LiteRT's notices dropped from stderr (the lines of
    `CONVERTER_NOTICES`, `LITERT_NOTICE`); every other line, errors included, kept."""
    return stderr_filtered(lambda lines: [
        line for line in lines if line.strip() != LITERT_NOTICE and not (
            PRE_INIT_LINE.match(line) and line.rstrip().endswith(CONVERTER_NOTICES))])


# tf.data's notice when a MirroredStrategy of several replicas distributes an input
# made from a generator (Fashion-MNIST's, a folder's): its graph is not rewritten for
# the replicas, and the input runs as it is. Nothing to act on; said once per run.
GENERATOR_NOT_OPTIMIZED = "Input of GeneratorDatasetOp::Dataset will not be optimized"


def dataset_notices_dropped():
    """tf.data's `GENERATOR_NOT_OPTIMIZED` line dropped from stderr; every other line
    kept (wrap the making of a distributed dataset's iterator)."""
    return stderr_filtered(lambda lines: [
        line for line in lines if GENERATOR_NOT_OPTIMIZED not in line])


def _list_devices():
    """Lists the physical devices once TensorFlow is imported, so that what it logs
    when it first looks for them (cuInit's failure) is filtered with its start-up
    lines. Listing them initialises nothing that
    `tf.config.set_logical_device_configuration` must precede."""
    sys.modules["tensorflow"].config.list_physical_devices()


def import_tensorflow(level=1):
    """Imports TensorFlow for an entry point of ours (run.py's way, for scripts/ and
    the docs' snippets), before anything else has imported it: TF_CPP_MIN_LOG_LEVEL
    defaults to `level` (1: TensorFlow's INFO lines off; the environment's value
    wins) and its start-up lines are filtered by it (`tensorflow_start_up_filtered`:
    the oneDNN and CPU-feature notices, absl's InitializeLog warning). Imported
    already, TensorFlow has said its lines: nothing is filtered then.

    Returns:
        The tensorflow module.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", str(level))
    with tensorflow_start_up_filtered():
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf
