"""Test session set-up shared by every test module.

The CPU is split into four logical devices before TensorFlow runs any op, so that
MirroredStrategy tests can run 1, 2 and 4 replicas in one process. Code that uses the
default strategy only ever touches /CPU:0.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

NUM_LOGICAL_CPUS = 4

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS
)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_collective_keys():
    """Each test's MirroredStrategy starts from its own collective-key base.

    Several strategies in one process otherwise reuse collective instance keys, and a
    later test's all-gather meets an earlier one's ("Collective instance 100 expected
    type 0 and data_type 1 but got type 2 and data_type 3").
    """
    tf.distribute.MirroredStrategy._collective_key_base += 100000  # pylint: disable=protected-access
    yield


@pytest.fixture(autouse=True)
def _no_downloads(monkeypatch):
    """Tests never send traffic: TFDS downloads fail at once (`--tfds_download` is on
    by default); tests of the download path replace the builder."""
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    def refuse(self, *args, **kwargs):
        raise RuntimeError("downloads are disabled in the tests (no network)")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", refuse)
    yield
