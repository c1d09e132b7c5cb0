"""A full disk under a writer of records (embeddings, the projector view, result
files) is an error naming the file and the space left there, exit 1 from run.py, never
a traceback; the file there before is kept. (Checkpoints and exports: test_recovery,
test_reliability, test_export.)"""
import errno
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.config import errors
from simclr_tf.run import experiment
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


# run.py whose writes fail as on a full disk: np.savez (the embeddings), or
# TensorFlow's file system for one file name (a record).
_DISK_FULL_RUN = """
import errno, runpy, sys
import numpy as np
import tensorflow as tf
which = sys.argv.pop(1)
def savez(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")
real_write = tf.io.gfile.GFile.write
def write(self, data):
    if which in self.name:
        raise tf.errors.ResourceExhaustedError(None, None,
                                               f"{self.name}; No space left on device")
    return real_write(self, data)
if which == "npz":
    np.savez = savez
else:
    tf.io.gfile.GFile.write = write
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.large  # 2 x 15-25 s
def test_run_py_reports_a_full_disk_under_any_writer_without_a_traceback(tiny_run,
                                                                          tmp_path):
    """run.py --mode=embed with no space for the embeddings, and --mode=eval with none
    for its result record (a writer with no handling of its own): 'run.py: error'
    naming the file and the space left, exit 1, the old embeddings kept."""
    cfg = tiny_run.copy_to(tmp_path / "run", mode="embed")
    output = os.path.join(cfg.model_dir, "embeddings", "test.npz")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")

    def run(which, *flags):
        return subprocess.run([sys.executable, "-c", _DISK_FULL_RUN, which,
                               os.path.join(REPO, "run.py"), f"--model_dir={cfg.model_dir}",
                               "--embed_projector_size=0", *flags],
                              capture_output=True, text=True, timeout=300, cwd=REPO, env=env)

    first = run("none", "--mode=embed")
    assert first.returncode == 0, first.stderr[-3000:]
    before = open(output, "rb").read()
    full = run("npz", "--mode=embed")
    assert full.returncode == 1, full.stderr[-3000:]
    assert f"run.py: error: Writing {output} failed: no space left on the device (" \
        in full.stderr and "free there now" in full.stderr, full.stderr[-3000:]
    assert "Traceback" not in full.stderr
    assert open(output, "rb").read() == before
    record = run("result_4", "--mode=eval")
    assert record.returncode == 1, record.stderr[-3000:]
    assert "run.py: error: Writing " in record.stderr and "result_4" in record.stderr \
        and "no space left on the device" in record.stderr, record.stderr[-3000:]
    assert "Traceback" not in record.stderr


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
