"""A full disk under a writer of records (embeddings, the projector view, result
files) is an error naming the file and the space left there, exit 1 from run.py, never
a traceback; the file there before is kept. (Checkpoints and exports: test_recovery,
test_reliability, test_export.)"""
import errno
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf import errors, experiment
from simclr_tf.evaluation import writers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_recognised_from_every_writer_and_named():
    """Python's, NumPy's and pyarrow's OSError (ENOSPC, EDQUOT) and TensorFlow's file
    system's ResourceExhaustedError are a full disk; a GPU out of memory and other
    errors are not."""
    tf_full = tf.errors.ResourceExhaustedError(
        None, None, "/data/run/result.json.tmp7-0a1b2c3d.json; No space left on device")
    for error in (OSError(errno.ENOSPC, "No space left on device"),
                  OSError(errno.EDQUOT, "Disk quota exceeded"), tf_full):
        assert errors.no_space_left(error), error
    for error in (OSError(errno.ENOENT, "No such file"), ValueError("No space left"),
                  tf.errors.ResourceExhaustedError(None, None, "OOM when allocating")):
        assert not errors.no_space_left(error) and errors.disk_full(error) is None
    full = errors.disk_full(tf_full)
    assert isinstance(full, OSError) and full.path.startswith("/data/run/result.json")
    assert errors.disk_full(full) is full
    with pytest.raises(errors.DiskFullError) as info:
        with errors.full_disk_reported("/data/out.npz", "The old file is kept."):
            _no_space()
    assert info.value.path == "/data/out.npz" and "The old file is kept." in str(info.value)
    assert errors.free_space("gs://bucket/out.npz") == "unknown"
    assert errors.free_space(os.path.join(REPO, "no", "such", "folder")).endswith("B")


def test_embed_on_a_full_disk_names_the_file_and_keeps_the_old_one(tiny_run, tmp_path,
                                                                   monkeypatch):
    """--mode=embed: the embeddings file that does not fit is a DiskFullError naming
    it and the space left; the previous file stays, whole, and no temporary file. The
    projector view's checkpoint likewise, leaving no scratch folder."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="embed", embed_projector_size=8,
                           embed_output=str(tmp_path / "out" / "test.npz"))
    experiment.run(cfg)
    before = open(cfg.embed_output, "rb").read()
    with monkeypatch.context() as patch:
        patch.setattr(np, "savez", _no_space)
        with pytest.raises(errors.DiskFullError) as info:
            experiment.run(cfg)
    message = str(info.value)
    assert cfg.embed_output in message and "free there now" in message
    assert open(cfg.embed_output, "rb").read() == before
    assert os.listdir(tmp_path / "out") == ["test.npz"]

    def checkpoint_full(self, prefix, **kwargs):
        os.makedirs(prefix + "-1_temp")  # where TensorFlow writes first
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{prefix}-1_temp/part-00000-of-00001; No space left on device")

    projector = os.path.join(cfg.model_dir, "projector")
    kept = sorted(os.listdir(projector))
    monkeypatch.setattr(tf.train.Checkpoint, "save", checkpoint_full)
    with pytest.raises(errors.DiskFullError, match="embedding.ckpt failed: no space"):
        writers.write_projector(projector, np.ones([2, 4]), [0, 1], ["a", "b"])
    assert sorted(os.listdir(projector)) == kept


def test_a_full_model_dir_is_named_at_preflight_and_its_probe_removed(tiny_run, tmp_path,
                                                                      monkeypatch):
    """preflight's write probe of model_dir on a full disk: a DiskFullError naming
    the directory (not 'not writable ... another user's'), and no probe file left."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval")
    listed = sorted(os.listdir(cfg.model_dir))
    real_write = tf.io.gfile.GFile.write

    def write(self, data):
        if ".write_test" in self.name:
            raise tf.errors.ResourceExhaustedError(None, None,
                                                   f"{self.name}; No space left on device")
        return real_write(self, data)

    monkeypatch.setattr(tf.io.gfile.GFile, "write", write)
    with pytest.raises(errors.DiskFullError, match=f"Writing {cfg.model_dir} failed: no "
                       "space left on the device .* Nothing was written"):
        experiment.run(cfg)
    assert sorted(os.listdir(cfg.model_dir)) == listed
