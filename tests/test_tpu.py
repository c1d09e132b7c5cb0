"""The used-by line, rehearsed without a TPU (docs/tpu.md).

- `--use_tpu` where no TPU answers is one error line naming the flags, before anything
  is built or written; a TPU attached to the machine (a Cloud TPU VM) is found from
  the filesystem, without network traffic, as the resolver's 'local'.
- `--cpu_replicas` splits the CPU into the replicas of `--strategy=mirrored`, before
  TensorFlow makes its devices.
"""
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

import run
from simclr_tf.config import ConfigError
from simclr_tf.run import distribute, experiment
from simclr_tf.rundir import records

from helpers import cli_flags
from helpers.run_fixtures import config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU_REPLICAS = 8  # a TPU v3-8's cores: the paper's 4096 is 8 x 512


# ------------------------------------------------------------- finding a TPU


def _no_tpu_here(monkeypatch):
    """This machine as one without a TPU, whatever runs the tests: nothing attached,
    no TPU in the environment, and a resolver that must not be reached (it may ask the
    GCE metadata server, over the network)."""
    monkeypatch.setattr(distribute, "local_tpu_devices", lambda root="/": [])
    for variable in distribute.TPU_ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)

    def never(*args, **kwargs):
        raise AssertionError("TPUClusterResolver was reached")

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", never)


def test_the_papers_line_without_a_tpu_is_one_error_line_before_anything_is_written(
        tmp_path, monkeypatch, capsys):
    """`run.py --train_mode=pretrain --train_batch_size=4096 --use_tpu` (it ended in
    TPUClusterResolver's traceback, "Please provide a TPU Name to connect to."): one
    line naming --tpu_name, --tpu_zone and --gcp_project and the way to run here,
    exit 2, model_dir not made."""
    _no_tpu_here(monkeypatch)
    model_dir = tmp_path / "run"
    status = cli_flags.run_main(monkeypatch, ["--train_mode=pretrain", "--train_batch_size=4096",
                                              "--use_tpu", f"--model_dir={model_dir}"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("run.py: error: --tpu_name: is not given and no TPU answers here")
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for words in ("--tpu_name=grpc://", "--tpu_zone", "--gcp_project",
                  "--use_tpu alone finds its TPU", "drop --use_tpu", "docs/tpu.md"):
        assert words in err, (words, err)
    assert not model_dir.exists()


def _machine(root, *, accel=False, pci=()):
    """A filesystem under `root` as a machine shows its devices: /dev/accel0 and PCI
    devices [(vendor, device)]."""
    if accel:
        (root / "dev").mkdir(parents=True, exist_ok=True)
        (root / "dev" / "accel0").write_text("")
    for i, (vendor, device) in enumerate(pci):
        folder = root / "sys" / "bus" / "pci" / "devices" / f"0000:00:{i + 4:02x}.0"
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(vendor + "\n")
        (folder / "device").write_text(device + "\n")
    return str(root)


def test_a_tpu_is_found_from_the_filesystem_and_the_environment_only(tmp_path):
    """A TPU VM's chip (/dev/accel* on v2-v4, a Google TPU PCI device on all) is the
    resolver's 'local'; a GCE VM's other Google devices (gVNIC, 0x1ae0:0x0042) are
    not a TPU; TPU_NAME is left to the resolver (tpu=None); a name given is used."""
    bare = _machine(tmp_path / "bare", pci=[("0x1ae0", "0x0042"), ("0x8086", "0x1237")])
    v3_vm = _machine(tmp_path / "v3", accel=True)
    v5e_vm = _machine(tmp_path / "v5e", pci=[("0x1ae0", "0x0063")])
    assert distribute.local_tpu_devices(bare) == []
    assert distribute.local_tpu_devices(v5e_vm) == [
        os.path.join(v5e_vm, "sys/bus/pci/devices/0000:00:04.0")]
    for root in (v3_vm, v5e_vm):
        assert distribute.tpu_to_resolve(None, root=root, environ={}) == "local"
        assert distribute.tpu_to_resolve("local", root=root, environ={}) == "local"
    assert distribute.tpu_to_resolve(None, root=bare, environ={"TPU_NAME": "t1"}) is None
    for name in ("my-tpu", "grpc://10.0.0.2:8470"):
        assert distribute.tpu_to_resolve(name, root=bare, environ={}) == name
    with pytest.raises(ConfigError, match="^--tpu_name: is not given and no TPU answers"):
        distribute.tpu_to_resolve(None, root=bare, environ={"TPU_NAME": ""})
    with pytest.raises(ConfigError, match="^--tpu_name: is 'local', but no TPU is attached"):
        distribute.tpu_to_resolve("local", root=bare, environ={})


class _Resolver:
    """TPUClusterResolver's stand-in: records its arguments, then fails as told."""

    calls = []

    def __init__(self, error):
        self.error = error

    def __call__(self, tpu=None, zone=None, project=None):
        self.calls.append(dict(tpu=tpu, zone=zone, project=project))
        raise self.error


@pytest.mark.parametrize("tpu_name, zone, project, error, words", [
    # The name looked up without a zone and project: TF asks the metadata server.
    ("my-tpu", None, None, OSError("<urlopen error [Errno -2] Name or service not known>"),
     ("'my-tpu' did not answer (OSError: <urlopen error", "give both",
      "--tpu_name=grpc://")),
    ("my-tpu", "us-central1-b", "proj", ValueError("Could not lookup TPU metadata"),
     ("check --tpu_name, --tpu_zone and --gcp_project",)),
    ("grpc://10.0.0.2:8470", None, None, tf.errors.UnavailableError(None, None, "down"),
     ("check the address",)),
    # A TPU VM whose TensorFlow is not the TPU build.
    (None, None, None, tf.errors.NotFoundError(None, None, "No TPU devices found"),
     ("'local' did not answer", "tensorflow-tpu")),
])
def test_a_tpu_that_does_not_answer_is_one_error_naming_the_flags(
        monkeypatch, tpu_name, zone, project, error, words):
    """TensorFlow's errors from the resolver, the connection or the TPU's start become
    one ConfigError (run.py: one line, exit 2) naming what to check. With no
    --tpu_name on a machine with a TPU attached, the resolver is asked for 'local'."""
    monkeypatch.setattr(distribute, "local_tpu_devices", lambda root="/": ["/dev/accel0"])
    _Resolver.calls = []
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver",
                        _Resolver(error))
    with pytest.raises(ConfigError) as info:
        experiment.create_strategy(config(use_tpu=True, tpu_name=tpu_name, tpu_zone=zone,
                                          gcp_project=project, model_dir="unused"))
    assert _Resolver.calls == [dict(tpu=tpu_name or "local", zone=zone, project=project)]
    message = str(info.value)
    assert message.startswith("--tpu_name: the TPU") and "\n" not in message, message
    for word in words:
        assert word in message, (word, message)


# ---------------------------------------------------------- --cpu_replicas


def test_cpu_replicas_are_the_mirrored_strategys_replicas(monkeypatch):
    """In this session TensorFlow made 8 CPU devices already (conftest): 8 or fewer are
    used as they are (the first ones), more is an error naming the flag; a GPU is one
    too (the replicas are then the GPUs)."""
    distribute.split_cpu(TPU_REPLICAS)
    distribute.split_cpu(0)
    for replicas in (2, TPU_REPLICAS):
        strategy = experiment.create_strategy(config(strategy="mirrored",
                                                     cpu_replicas=replicas, model_dir="x"))
        assert strategy.num_replicas_in_sync == replicas
    with pytest.raises(ConfigError, match=r"^--cpu_replicas: is 9, .* 8 CPU device\(s\)"):
        distribute.split_cpu(9)
    gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    listed = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [gpu] if kind == "GPU" else listed(kind))
    with pytest.raises(ConfigError, match="^--cpu_replicas: is 8, but this machine has a GPU"):
        distribute.split_cpu(TPU_REPLICAS)


@pytest.mark.large  # 19 s (39 s at load 5): a run.py process, whose devices are the subject
def test_run_py_splits_the_cpu_before_tensorflow_makes_its_devices(tmp_path):
    """In a process of its own, run.py's --cpu_replicas=2 makes two replicas: nothing
    made TensorFlow's devices before the split. flags.json records it; a later run
    without it continues the same checkpoints (a hardware flag: records.FREE_FLAGS)."""
    model_dir = tmp_path / "run"
    command = [sys.executable, "run.py", "--encoder=tiny", "--dataset=digits",
               "--image_size=16", "--width_multiplier=0.125", "--train_batch_size=32",
               "--train_steps=1", "--use_blur=false", "--export_format=none",
               "--strategy=mirrored", "--cpu_replicas=2", f"--model_dir={model_dir}"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "batch 32, 2 replica(s)." in done.stdout, done.stdout
    recorded = json.loads((model_dir / "flags.json").read_text())
    assert recorded["cpu_replicas"] == 2 and recorded["strategy"] == "mirrored"
    later = run.config_from_flags(cli_flags.flag_values(
        command[2:-3] + [f"--model_dir={model_dir}"]))
    assert later.cpu_replicas == 0 and records.flag_changes(str(model_dir), later) == []
