"""The used-by line, rehearsed without a TPU (docs/tpu.md).

- `--use_tpu` where no TPU answers is one error line naming the flags, before anything
  is built or written; a TPU attached to the machine (a Cloud TPU VM) is found from
  the filesystem, without network traffic, as the resolver's 'local'.
- The train step of every train mode is one XLA program, as TPUStrategy compiles it:
  compiled (`jit_compile=True`) it equals the uncompiled step, on batches of static
  shapes from the run's own input pipeline; a host-only op in the step fails it.
- The paper's batch split as a TPU v3-8 splits it: 8 replicas (`--cpu_replicas`) of a
  global batch equal one replica on it (loss, gradient, update, BN statistics).
"""
import _thread
import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import run
from simclr_tf import augment
from simclr_tf.config import ConfigError
from simclr_tf.data import registry, pipeline
from simclr_tf.method import collectives
from simclr_tf.method.objectives import pretrain
from simclr_tf.models.outputs import LOGITS
from simclr_tf.run import distribute, experiment
from simclr_tf.run.modes import parts
from simclr_tf.run.modes import train as train_mode
from simclr_tf.rundir import records

from helpers import cli_flags
from helpers.model_fixtures import randomise
from helpers.run_fixtures import RESNET, config
from helpers.standin_model import distributed_pretrain_iterator, random_batch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES = 10  # digits'
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


def _closed_port():
    """A port of 127.0.0.1 where nothing listens (connections refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _hanging_resolver(monkeypatch, seconds=20.0):
    """TPUClusterResolver's stand-in that waits as TensorFlow's connection does for a
    TPU that never answers (it released the GIL: measured), then fails."""
    calls = []

    def resolver(tpu=None, zone=None, project=None):
        calls.append(tpu)
        time.sleep(seconds)
        raise tf.errors.UnavailableError(None, None, "never answered")

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", resolver)
    return calls


def test_a_grpc_tpu_address_that_nothing_answers_is_one_line_at_once(monkeypatch, capsys):
    """2026-12-06, 1: --tpu_name=grpc://127.0.0.1:1 printed nothing for 5+ minutes
    (TensorFlow's connection waits without a deadline). The address is tried first:
    refused, one error naming it, and TensorFlow is not reached."""
    monkeypatch.setattr(distribute, "local_tpu_devices", lambda root="/": [])
    calls = _hanging_resolver(monkeypatch)
    name = f"grpc://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        experiment.create_strategy(config(use_tpu=True, tpu_name=name, model_dir="x"))
    assert time.monotonic() - start < 5 and calls == []
    message = str(info.value)
    assert message.startswith(f"--tpu_name: the TPU {name!r} did not answer") \
        and "connection refused" in message and "check the address" in message, message


def test_a_tpu_that_answers_but_never_starts_is_bounded_said_and_interruptible(
        monkeypatch, capsys, python_sigint):
    """A TPU address that accepts connections but whose TensorFlow never answers (a
    port of something else, a TPU stuck starting): a line says what the run waits for
    and for how long (--peer_wait_secs), the wait ends in one error, and Ctrl-C stops
    it meanwhile."""
    monkeypatch.setattr(distribute, "local_tpu_devices", lambda root="/": [])
    calls = _hanging_resolver(monkeypatch)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        name = f"grpc://127.0.0.1:{listener.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(ConfigError) as info:
            experiment.create_strategy(config(use_tpu=True, tpu_name=name,
                                              peer_wait_secs=1, model_dir="x"))
        assert time.monotonic() - start < 5 and calls == [name]
        assert "(TimeoutError: no answer in 1 s): check the address" in str(info.value)
        assert capsys.readouterr().out.startswith(
            f"Waiting for the TPU {name!r} to connect and start (up to 1 s, "
            "--peer_wait_secs; Ctrl-C stops).")
        threading.Timer(0.5, _thread.interrupt_main).start()  # Ctrl-C
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            experiment.create_strategy(config(use_tpu=True, tpu_name=name,
                                              peer_wait_secs=600, model_dir="x"))
        assert time.monotonic() - start < 5


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


# ------------------------------------------------------- one XLA program per step


def _static(spec):
    """Whether every shape of a dataset's element_spec is fully known."""
    return all(s.shape.is_fully_defined() for s in tf.nest.flatten(spec))


def _tpu_pipeline(cfg, replicas=TPU_REPLICAS):
    """One replica's input pipeline of the --use_tpu run `cfg` (its input function,
    called as TPUStrategy calls it: one pipeline feeding `replicas` replicas), on
    digits' train split."""
    source = registry.get_dataset("digits")
    input_fn = pipeline.build_input_fn(source, "train", global_batch_size=cfg.train_batch_size,
                                       **train_mode.input_options(cfg))
    return input_fn(tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                               num_replicas_in_sync=replicas))


# The step's objectives: the paper's modes and Table 2's pair losses.
TRAIN_MODES = ("pretrain", "finetune", "distill", "nt_logistic", "margin_triplet")


def _tpu_config(train_mode, **overrides):
    """A --use_tpu run of `train_mode` as the tests rehearse it: 8 per replica, 16 px,
    and blur on for pretraining (its ops are compiled; at 16 px its kernel is one tap,
    so XLA's other random draws change no pixel:
    test_xla_draws_other_random_numbers_than_tensorflows_kernels)."""
    settings = dict(train_mode=train_mode, use_tpu=True, train_batch_size=8 * TPU_REPLICAS,
                    use_blur=train_mode not in ("finetune", "distill"), model_dir="unused")
    if train_mode == "distill":
        settings["teacher"] = "/a/fine-tuned/run"
    return config(**dict(settings, **overrides))


@pytest.mark.parametrize("train_mode", TRAIN_MODES + ("device_views",))
def test_use_tpu_pipelines_deliver_static_shapes(train_mode):
    """What TPUStrategy's compiled step needs of its input: every shape known when the
    step is traced (fixed image size; the last partial batch dropped, even with the
    split's size not a multiple of the batch: 1437 digits), for every train mode and
    for views drawn on the device; a replica's share of the global batch."""
    cfg = (_tpu_config("pretrain", augment_on="device") if train_mode == "device_views"
           else _tpu_config(train_mode))
    dataset = _tpu_pipeline(cfg)
    assert _static(dataset.element_spec), dataset.element_spec
    images = tf.nest.flatten(dataset.element_spec[0])[0]
    assert images.shape[:3] == (8, 16, 16), dataset.element_spec
    # The control: without dropping the remainder the batch dimension is unknown.
    assert not _static(dataset.unbatch().batch(8).element_spec)


def _teacher():
    """A fixed fine-tuned ResNet as distillation's teacher (`teacher(images) ->
    logits`, inference mode), with random weights."""
    model = parts.build_model(config(train_mode="finetune", model_dir="unused", **RESNET),
                              tf.distribute.get_strategy(), NUM_CLASSES)
    randomise(model, seed=3)
    return lambda images: tf.cast(model(images, training=False)[LOGITS], tf.float32)


def _one_step(cfg, weights, batch, teacher=None):
    """One step of `cfg`'s Trainer under the default strategy (XLA-compiled with
    `cfg.jit_compile`) from `weights` on `batch`: (logs, the weights after, their
    paths)."""
    strategy = tf.distribute.get_strategy()
    model = parts.build_model(cfg, strategy, NUM_CLASSES)
    model.set_weights(weights)
    trainer = parts.build_trainer(cfg, strategy, model, teacher=teacher)
    logs = trainer.train_steps(iter(tf.data.Dataset.from_tensors(batch).repeat()), 1)
    return logs, [w.numpy() for w in model.weights], [w.path for w in model.weights]


# Measured on AVX-512 (2 cores), these tests' steps: the compiled step's loss within
# 1.0e-6 relative of the plain one's, every variable's change (weights and BN moving
# statistics) within 2.3e-5 of the step's largest change (a stem BN gamma, through
# the loss's other rounding).
LOSS_RTOL = 1e-5
UPDATE_TOLERANCE = 1e-4


@pytest.mark.extra_large  # 28-56 s each at load 5: a ResNet step traced, and compiled by XLA
@pytest.mark.parametrize("train_mode", TRAIN_MODES)
def test_each_train_modes_step_is_one_xla_program_equal_to_the_plain_step(train_mode):
    """The step as TPUStrategy runs it: compiled whole by XLA (any op XLA cannot compile
    fails it: test_a_host_only_op_fails_the_xla_compilation), on a replica's batch of
    the --use_tpu pipeline. From the same weights, on the same batch, the compiled and
    the plain step give the same loss and move every variable alike."""
    cfg = _tpu_config(train_mode, **RESNET)
    dataset = _tpu_pipeline(cfg)
    assert _static(dataset.element_spec)
    batch = next(iter(dataset))
    keras.utils.set_random_seed(0)
    initial = [w.numpy() for w in parts.build_model(cfg, tf.distribute.get_strategy(),
                                                    NUM_CLASSES).weights]
    teacher = _teacher() if train_mode == "distill" else None
    plain_logs, plain, names = _one_step(cfg, initial, batch, teacher)
    xla_logs, xla, _ = _one_step(dataclasses.replace(cfg, jit_compile=True), initial, batch,
                                 teacher)
    assert np.isfinite(plain_logs["loss"]) and np.isfinite(xla_logs["loss"])
    np.testing.assert_allclose(xla_logs["loss"], plain_logs["loss"], rtol=LOSS_RTOL)
    changes = [after - before for after, before in zip(plain, initial)]
    largest = max(np.abs(change).max() for change in changes)
    assert largest > 1e-4  # the step moved the weights: the comparison means something
    for name, after_xla, change, before in zip(names, xla, changes, initial):
        assert np.isfinite(after_xla).all(), name
        np.testing.assert_allclose(after_xla - before, change, rtol=0,
                                   atol=UPDATE_TOLERANCE * largest, err_msg=name)


@pytest.mark.extra_large  # 39 s at load 5: the tiny model's step with its views, by XLA
def test_views_drawn_on_the_device_compile_to_xla():
    """--augment_on=device moves crop, flip, colour jitter and grayscale into the step:
    they compile too (at 32 px, where the blur is three taps). Their random draws are
    XLA's, not TensorFlow's kernels' (test_xla_draws_other_random_numbers_than_
    tensorflows_kernels), so the compiled step sees other views than the plain one:
    it has to compile and give finite values, not the plain step's."""
    cfg = _tpu_config("pretrain", augment_on="device", image_size=32)
    batch = next(iter(_tpu_pipeline(cfg)))
    keras.utils.set_random_seed(0)
    initial = [w.numpy() for w in parts.build_model(cfg, tf.distribute.get_strategy(),
                                                    NUM_CLASSES).weights]
    logs, after, _ = _one_step(dataclasses.replace(cfg, jit_compile=True), initial, batch)
    assert np.isfinite(logs["loss"]) and all(np.isfinite(w).all() for w in after)


def test_xla_draws_other_random_numbers_than_tensorflows_kernels():
    """TensorFlow's stateless random ops give other numbers compiled by XLA (as
    TPUStrategy compiles the step) than in its own kernels, for the same seed, Philox
    asked for or not (TF 2.21 on CPU); seeds derived by split and fold_in are the same.
    So a TPU run blurs (and draws device views) unlike a CPU run of the same seed;
    crops and colours drawn on the host are the same. At 16 px the blur is one tap: any
    draw leaves the images as they are."""
    seed = tf.constant([1, 2], tf.int64)
    for alg in ("auto_select", "philox"):
        def draw(alg=alg):
            return tf.random.stateless_uniform([1000], seed, alg=alg)

        plain, xla = tf.function(draw)(), tf.function(draw, jit_compile=True)()
        assert not np.allclose(plain, xla)
        for values in (plain, xla):  # both U(0, 1)
            assert 0 <= values.numpy().min() and values.numpy().max() < 1
            assert abs(values.numpy().mean() - 0.5) < 0.05

    def derived():
        return (tf.random.experimental.stateless_split(seed, 2),
                tf.random.experimental.stateless_fold_in(seed, 3))
    for a, b in zip(tf.function(derived)(), tf.function(derived, jit_compile=True)()):
        np.testing.assert_array_equal(a, b)
    images = tf.random.uniform([4, 16, 16, 3], seed=0)
    for blur_seed in ([0, 1], [5, 7]):
        [blurred] = augment.batch_random_blur([images], 16, 16, blur_probability=1.0,
                                              seed=tf.constant(blur_seed, tf.int64))
        np.testing.assert_array_equal(blurred, images)


@pytest.mark.large  # 9.5 s at load 5: the step traced twice; XLA stops at the op
def test_a_host_only_op_fails_the_xla_compilation(monkeypatch):
    """The XLA compilation is a real check of the step: one host-only op in it (a
    Python function, as tf.numpy_function runs) and the compiled step fails naming
    it, where the plain step runs."""
    contrastive = pretrain.Pretrain.contrastive

    def through_the_host(self, z1, z2):
        [z1] = tf.numpy_function(lambda z: z, [z1], [tf.float32])
        return contrastive(self, tf.ensure_shape(z1, z2.shape), z2)

    monkeypatch.setattr(pretrain.Pretrain, "contrastive", through_the_host)
    cfg = _tpu_config("pretrain", use_blur=False)
    batch = next(iter(_tpu_pipeline(cfg)))
    initial = [w.numpy() for w in parts.build_model(cfg, tf.distribute.get_strategy(),
                                                    NUM_CLASSES).weights]
    logs, _, _ = _one_step(cfg, initial, batch)
    assert np.isfinite(logs["loss"])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Detected unsupported operations.*PyFunc"):
        _one_step(dataclasses.replace(cfg, jit_compile=True), initial, batch)


# ------------------------------------------------------ 8 replicas = 1 replica


def _return_gradients(trainer):
    """The trainer's step also logs the gradient its optimizer applies, per variable:
    summed over the replicas, so every replica holds it and the logs' mean over the
    replicas is it."""
    apply = trainer.apply

    def apply_and_log(*, grads, variables, metrics, **kwargs):
        summed = collectives.cross_replica_sum(list(grads))
        metrics.update({f"gradient:{v.path}": g for g, v in zip(summed, variables)})
        return apply(grads=grads, variables=variables, metrics=metrics, **kwargs)

    trainer.apply = apply_and_log


def _pretrain_step(cfg, weights, batch):
    """One pretraining step of `cfg` under its own strategy (experiment.create_strategy:
    --strategy=mirrored --cpu_replicas=N is N replicas), the paper's schedule at its
    first step (warmup 0: the scaled peak rate): (logs, weights after, names)."""
    distribute.split_cpu(cfg.cpu_replicas)
    strategy = experiment.create_strategy(cfg)
    assert strategy.num_replicas_in_sync == (cfg.cpu_replicas or 1)
    model = parts.build_model(cfg, strategy, NUM_CLASSES)
    model.set_weights(weights)
    plan = train_mode.step_plan(cfg, num_examples=10 * cfg.train_batch_size)
    trainer = parts.build_trainer(cfg, strategy, model, plan=plan)
    _return_gradients(trainer)
    logs = trainer.train_steps(distributed_pretrain_iterator(strategy, [batch]), 1)
    return logs, [w.numpy() for w in model.weights], [w.path for w in model.weights]


# Measured (AVX-512, 2 cores): 8 replicas of 32 against one of 256, the losses equal
# (grad_norm within 5.6e-7 relative), each gradient within 5.3e-6 of the largest
# gradient entry, each variable's change within 3.6e-6 of the step's largest change.
# Per-replica BN instead (--noglobal_bn) is off by 0.6% in the loss and by 0.51 of
# the largest gradient entry.
REPLICA_LOSS_RTOL = 1e-5
REPLICA_GRADIENT_TOLERANCE = 5e-5
REPLICA_UPDATE_TOLERANCE = 5e-5


@pytest.mark.extra_large  # 61-66 s at load 5: eight replicas' step traced on two cores
def test_eight_replicas_of_32_equal_one_replica_of_256():
    """The paper's batch as a TPU v3-8 splits it (8 x 512 of 4096), at 8 x 32 of 256 on
    the tiny encoder: NT-Xent over every replica's views (gathered with their
    gradient), BN statistics over the global batch (synchronised), the loss divided
    by the replicas inside the tape, LARS at the linearly scaled rate (0.3 x 256 /
    256): the loss, the gradient the optimizer applies, and every variable after the
    update (BN moving statistics included) equal one replica's on the same batch."""
    common = dict(train_batch_size=256, train_steps=1, warmup_epochs=0, learning_rate=0.3,
                  model_dir="unused")
    view1, view2, labels = random_batch(256, 16, num_classes=NUM_CLASSES, seed=7)
    batch = (view1, view2, labels)
    one_cfg = config(**common)
    keras.utils.set_random_seed(0)
    initial = [w.numpy() for w in parts.build_model(one_cfg, tf.distribute.get_strategy(),
                                                    NUM_CLASSES).weights]
    one_logs, one, names = _pretrain_step(one_cfg, initial, batch)
    eight_logs, eight, _ = _pretrain_step(
        config(strategy="mirrored", cpu_replicas=TPU_REPLICAS, **common), initial, batch)
    # The rate is a mean over the replicas too: 0.29999998 on eight.
    for logs in (one_logs, eight_logs):
        assert logs["learning_rate"] == pytest.approx(0.3, rel=1e-6)
    assert eight_logs["num_examples"] == 256
    for name in ("loss", "contrast_loss", "contrast_acc", "contrast_entropy",
                 "supervised_loss", "grad_norm"):
        assert np.isfinite(one_logs[name]), name
        np.testing.assert_allclose(eight_logs[name], one_logs[name], rtol=REPLICA_LOSS_RTOL,
                                   err_msg=name)
    gradients = [name for name in one_logs if name.startswith("gradient:")]
    assert len(gradients) > 10
    largest = max(np.abs(one_logs[name]).max() for name in gradients)
    for name in gradients:
        np.testing.assert_allclose(eight_logs[name], one_logs[name], rtol=0,
                                   atol=REPLICA_GRADIENT_TOLERANCE * largest, err_msg=name)
    changes = [after - before for after, before in zip(one, initial)]
    largest = max(np.abs(change).max() for change in changes)
    for name, after, change, before in zip(names, eight, changes, initial):
        np.testing.assert_allclose(after - before, change, rtol=0,
                                   atol=REPLICA_UPDATE_TOLERANCE * largest, err_msg=name)
