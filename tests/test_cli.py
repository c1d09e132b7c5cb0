"""The command line a user meets: --help by topic, the `simclr-tf` command (issue 15)."""
import dataclasses
import os
import shutil
import subprocess
import sys

from simclr_tf.config import Config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
import run  # noqa: E402  pylint: disable=wrong-import-position


def test_every_flag_is_in_exactly_one_help_group():
    grouped = [name for _, names in run.HELP_GROUPS for name in names]
    assert sorted(grouped) == sorted(f.name for f in dataclasses.fields(Config))
    assert len(grouped) == len(set(grouped))


def test_help_lists_the_flags_by_topic_without_internals():
    result = subprocess.run([sys.executable, os.path.join(REPO, "run.py"), "--help"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("SimCLR v1/v2: pretrain image encoders")
    assert "Config" not in out.split("Run:")[0]  # the intro speaks to users
    positions = [out.index(f"\n{title}:\n") for title, _ in run.HELP_GROUPS]
    assert positions == sorted(positions)
    for field in dataclasses.fields(Config):
        assert f"  --{field.name}=" in out, field.name
    hidden_norm = out.split("--hidden_norm=true")[1].split("\n  --")[0]
    assert "Temperature" not in hidden_norm and "L2-normalise" in hidden_norm


def test_the_installed_command_takes_the_same_flags():
    command = shutil.which("simclr-tf")
    assert command, "pip install -e . installs the simclr-tf command (setup.py)"
    result = subprocess.run([command, "--help"], capture_output=True, text=True,
                            timeout=60, cwd="/")
    assert result.returncode == 0 and "\nData:\n" in result.stdout, result.stderr
    bad = subprocess.run([command, "--temperature=0", "--model_dir=/tmp/x"],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert bad.returncode == 2 and "run.py: error: --temperature" in bad.stderr
