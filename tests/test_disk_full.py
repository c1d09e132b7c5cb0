"""A full disk under a writer of records (embeddings, the projector view, result
files) is an error naming the file and the space left there, exit 1 from run.py's main,
never a traceback; the file there before is kept. (Checkpoints and exports: test_recovery,
test_reliability, test_export.)"""
import errno
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.config import errors
from simclr_tf.run import experiment
from simclr_tf.evaluation import writers
from helpers import cli_flags

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


def _gfile_write_fails_for(name):
    """A tf.io.gfile.GFile.write that fails as on a full disk for files whose name
    holds `name` (TensorFlow's file system: a record's writer)."""
    real_write = tf.io.gfile.GFile.write

    def write(self, data):
        if name in self.name:
            raise tf.errors.ResourceExhaustedError(None, None,
                                                   f"{self.name}; No space left on device")
        return real_write(self, data)

    return write


# 2 s in process once the tiny run is there (2 x 15-25 s as run.py processes: large).
def test_run_py_reports_a_full_disk_under_any_writer_without_a_traceback(
        tiny_run, tmp_path, monkeypatch, capsys):
    """run.py's main (in process, as the command line runs it) --mode=embed with no
    space for the embeddings, and --mode=eval with none for its result record (a
    writer with no handling of its own): 'run.py: error' naming the file and the
    space left, exit 1, the old embeddings kept."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="embed")
    output = os.path.join(cfg.model_dir, "embeddings", "test.npz")

    def run(*flags):
        status = cli_flags.run_main(monkeypatch, [f"--model_dir={cfg.model_dir}",
                                                  "--embed_projector_size=0", *flags])
        return status, capsys.readouterr().err

    status, error = run("--mode=embed")
    assert status == 0, error[-3000:]
    before = open(output, "rb").read()
    with monkeypatch.context() as patch:
        patch.setattr(np, "savez", _no_space)
        status, error = run("--mode=embed")
    assert status == 1, error[-3000:]
    assert f"run.py: error: Writing {output} failed: no space left on the device (" \
        in error and "free there now" in error, error[-3000:]
    assert "Traceback" not in error
    assert open(output, "rb").read() == before
    with monkeypatch.context() as patch:
        patch.setattr(tf.io.gfile.GFile, "write", _gfile_write_fails_for("result_4"))
        status, error = run("--mode=eval")
    assert status == 1, error[-3000:]
    assert "run.py: error: Writing " in error and "result_4" in error \
        and "no space left on the device" in error, error[-3000:]
    assert "Traceback" not in error


def test_a_full_model_dir_is_named_at_preflight_and_its_probe_removed(tiny_run, tmp_path,
                                                                      monkeypatch):
    """preflight's write probe of model_dir on a full disk: a DiskFullError naming
    the directory (not 'not writable ... another user's'), and no probe file left."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval")
    listed = sorted(os.listdir(cfg.model_dir))
    monkeypatch.setattr(tf.io.gfile.GFile, "write", _gfile_write_fails_for(".write_test"))
    with pytest.raises(errors.DiskFullError, match=f"Writing {cfg.model_dir} failed: no "
                       "space left on the device .* Nothing was written"):
        experiment.run(cfg)
    assert sorted(os.listdir(cfg.model_dir)) == listed


def test_an_atomic_write_on_a_full_disk_names_the_file_and_keeps_it(tmp_path):
    """Every record goes through files.atomic_write: a full disk there is a
    DiskFullError naming the record (not its temporary file) and the space left,
    with the old record intact and no temporary file left behind."""
    from simclr_tf.rundir import files

    record = tmp_path / "result.json"
    record.write_text('{"old": 1}')

    def no_space(scratch):
        with open(scratch, "w") as f:
            f.write("{")
        raise OSError(errno.ENOSPC, "No space left on device", scratch)

    with pytest.raises(errors.DiskFullError) as raised:
        files.atomic_write(str(record), no_space)
    assert raised.value.path == str(record)
    assert str(record) in str(raised.value) and " free there now" in str(raised.value)
    assert record.read_text() == '{"old": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]
    with pytest.raises(ValueError, match="not a disk"):  # other errors pass unchanged
        files.atomic_write(str(record), lambda scratch: (_ for _ in ()).throw(
            ValueError("not a disk")))
