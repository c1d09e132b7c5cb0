"""simclr_tf.config.run_dirs: the run a path belongs to and its flags.json, the one reader that
inherit, the checkpoints' record (preflight, the teacher) and open_encoder ask."""
import io
import json
import os
import subprocess
import sys

import pytest

from simclr_tf.config import inherit, run_dirs
from simclr_tf.config import Config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(directory):
    """A run directory with flags.json and an export's directories (no weights)."""
    os.makedirs(os.path.join(directory, "saved_model", "4", "variables"))
    with open(os.path.join(directory, "flags.json"), "w") as f:
        json.dump({"resnet_depth": 18}, f)
    return str(directory)


def _forms(run):
    return [run, run + "/", os.path.join(run, "ckpt-4"),
            os.path.join(run, "saved_model", "4"),
            os.path.join(run, "saved_model", "4", "variables", "variables")]


def test_every_path_form_of_a_run_finds_its_flags(tmp_path):
    run = _run(tmp_path / "run")
    for path in _forms(run):
        assert run_dirs.run_of(path) == run, path
        assert run_dirs.flags_file(path) == os.path.join(run, "flags.json"), path
    assert run_dirs.read_flags(run_dirs.flags_file(run)) == {"resnet_depth": 18}
    # A prefix outside any run (a copied checkpoint) and a bare export have none.
    os.makedirs(tmp_path / "copied")
    assert run_dirs.flags_file(str(tmp_path / "copied" / "ckpt-4")) is None
    os.makedirs(tmp_path / "exports" / "4" / "variables")
    assert run_dirs.flags_file(str(tmp_path / "exports" / "4")) is None


class _FakeGFile:
    """tf.io.gfile over {path: content}: directories are the paths' parents."""

    def __init__(self, files):
        self.files = files

    def exists(self, path):
        return path in self.files or self.isdir(path)

    def isdir(self, path):
        return any(name.startswith(path.rstrip("/") + "/") for name in self.files)

    def GFile(self, path):  # pylint: disable=invalid-name
        return io.StringIO(self.files[path])


def test_a_remote_path_is_read_with_tensorflows_file_api(monkeypatch):
    fake = _FakeGFile({"gs://bucket/run/flags.json": '{"resnet_depth": 50}',
                       "gs://bucket/run/ckpt-4.index": "",
                       "gs://bucket/run/saved_model/4/variables/variables.index": ""})
    monkeypatch.setattr(run_dirs, "_gfile", lambda: fake)
    monkeypatch.setattr(os.path, "exists", lambda path: pytest.fail(f"local {path}"))
    for path in _forms("gs://bucket/run"):
        assert run_dirs.run_of(path) == "gs://bucket/run", path
        assert run_dirs.flags_file(path) == "gs://bucket/run/flags.json", path
    assert run_dirs.read_flags("gs://bucket/run/flags.json") == {"resnet_depth": 50}
    # inherit reads a remote --checkpoint's run by the same reader.
    config = Config(mode="eval", checkpoint="gs://bucket/run/ckpt-4").with_given(
        {"mode", "checkpoint"})
    assert inherit.recorded_run(config) == ("gs://bucket/run/flags.json", False)
    assert inherit.inherit(config)[0].resnet_depth == 50


def test_reading_a_local_run_imports_no_tensorflow(tmp_path):
    run = _run(tmp_path / "run")
    code = ("import sys\n"
            "from simclr_tf.config import inherit, run_dirs\n"
            f"paths = {_forms(run)!r}\n"
            "assert {run_dirs.flags_file(p) for p in paths} == "
            f"{{{os.path.join(run, 'flags.json')!r}}}\n"
            "assert not [m for m in ('tensorflow', 'keras') if m in sys.modules]\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr


@pytest.mark.large
def test_a_path_inherit_reads_a_run_of_is_one_open_encoder_opens(tiny_run, tmp_path):  # 8 s
    """The run directory, a checkpoint prefix, the export and its variables' prefix:
    inherit reads the run's flags.json, and open_encoder opens each (the prefixes
    with the model that flags.json records); a copied prefix without its run's record
    is neither."""
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    run = tiny_run.directory
    for path in _forms(run):
        config = Config(mode="eval", checkpoint=path).with_given({"mode", "checkpoint"})
        assert inherit.recorded_run(config) == (os.path.join(run, "flags.json"), False)
        model, image_size, _ = checkpoints.open_encoder(path)
        assert image_size == tiny_run.config.image_size, path
    import shutil  # pylint: disable=import-outside-toplevel
    os.makedirs(tmp_path / "copied")
    for name in os.listdir(run):
        if name.startswith("ckpt-4."):
            shutil.copy(os.path.join(run, name), tmp_path / "copied")
    copied = str(tmp_path / "copied" / "ckpt-4")
    assert inherit.recorded_run(Config(mode="eval", checkpoint=copied)) is None
    with pytest.raises(FileNotFoundError, match="No encoder at"):
        checkpoints.open_encoder(copied)
