#!/usr/bin/env python
"""SimCLR performance benchmarks: train step, input pipeline, NT-Xent. Not a test.

Parts, each printing a table; a run's results (one part, or train, input and ntxent
for `all`) are written to --json, anew (a second run with the same --json replaces the
first's):

  train    train-step throughput (views/s, images/s) of any model configuration on
           synthetic data: warm-up steps, then the median of several timed windows;
           achieved GFLOP/s (forward FLOPs counted by TF's profiler on the forward
           graph, a training step taken as 3x the forward) and the fraction of a
           float32 / bfloat16 matmul peak measured in the same process (MFU).
           Any --train_mode: pretrain (two views per image), finetune and distill
           (one view per image; distill adds its teacher's forward pass, a model
           like the student or --teacher_width_multiplier / --teacher_resnet_depth /
           --teacher_sk_ratio, random weights). --train_modes=finetune,distill
           measures several modes in turn in one process and prints the step-time
           ratio of each to the first.
  profile  where one train step's time goes: TensorFlow's profiler over some steps,
           each op put in one part (convolutions forward and backward, batch norm,
           the heads, NT-Xent and the gather, the optimizer's update, the views, ...;
           scripts/step_profile.py), op seconds per step and shares, the time no op
           ran; with host views, their core-seconds per step on the input pipeline.
           The trace is added to --logdir (nothing there is removed: a run's folder
           keeps its checkpoints). Not under --jit_compile (refused: XLA runs the
           step as one compiled cluster, which no part can claim).
  versus   step times side by side (scripts/side_by_side.py): arms (--arm), each a
           fresh process in turn, --rounds rounds, the order reversed every other
           round; one table of the CPU kind, s/step, the ratio to the first arm per
           round and the MFU. Default arms: the authors' float32 step (their code:
           --authors_dir, --authors_python), ours in float32 and in bfloat16. A lever
           is an arm: a flag ('bf16:--mixed_precision=bfloat16') or an environment
           variable ('inter1:TF_NUM_INTEROP_THREADS=1'). --data, --skip_update and
           the teacher's flags reach every arm (the authors' refuses them). An arm in
           bfloat16 on a CPU without native bfloat16 (AVX2 only: emulated, several
           times float32's time) is left out with one line.
  input    input-pipeline throughput (images/s on one core) of the pretraining
           augmentation, two views per image, from decoded and from encoded (PNG at
           32 px, JPEG at 224 px) images; plus the host part of --augment_on=device.
  ntxent   NT-Xent forward + backward time and peak memory against the batch size.
  memory   peak memory of one train step per global batch size (--batch_sizes), each
           in a fresh process; with --grad_cache_chunk also the plain step of one
           chunk. Not part of `all`.
  collectives  the collectives of one compiled step per train mode under several
           replicas, counted from its graph: kind, count and bytes per replica
           (gradients, z gather, BN statistics, metrics); FAIL when the gradients are
           all-reduced more than once (scripts/collectives.py, its own flags).

An option that the part given does not read (--logdir outside profile, --compare
outside train, ...) is refused, never dropped: each part measures what its options say.

Examples:
  python scripts/benchmark.py train --resnet_depth=18 --image_size=32 \\
      --train_batch_size=256 --use_blur=false --mixed_precision=bfloat16
  python scripts/benchmark.py train --resnet_depth=50 --image_size=224 \\
      --train_batch_size=32 --num_proj_layers=3 --mixed_precision=bfloat16
  python scripts/benchmark.py profile --preset=r18_cifar --mixed_precision=bfloat16
  python scripts/benchmark.py versus --preset=r18_cifar --rounds=3 --warmup=2 \
      --windows=3 --steps=1 --authors_dir=/tmp/simclr_authors/tf2 \
      --authors_python=/tmp/authors-venv/bin/python     # docs/performance.md
  python scripts/benchmark.py train --preset=r18_cifar --data=dataset --dataset=digits
      # run.py's input pipeline instead of a synthetic batch (the views' cost in it)
  python scripts/benchmark.py input --image_sizes=32,224
  python scripts/benchmark.py ntxent --batch_sizes=256,1024,4096
  python scripts/benchmark.py collectives --train_modes=pretrain,finetune,distill
  python scripts/benchmark.py all --preset=smoke      # seconds; what the test runs
  python scripts/benchmark.py memory --preset=r50_224_4096   # ~25 min on 2 CPU cores
  python scripts/benchmark.py train --preset=gpu_r50  # dev/gpu_check.sh
  python scripts/benchmark.py train --preset=vit_s16_224   # ViT-S/16 beside r50_224
  python scripts/benchmark.py train --resnet_depth=18 --width_multiplier=0.25 \\
      --image_size=16 --stem=cifar --train_batch_size=64 --use_blur=false \\
      --num_proj_layers=2 --train_modes=finetune,distill    # distillation's cost
  # ... a big-to-small student: add --teacher_width_multiplier=0.25 --width_multiplier=0.125
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# A plain script: runs from a checkout without `pip install -e .` too.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# ... and its neighbours (step_profile, side_by_side) when loaded as a module.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import script_io  # noqa: E402  (scripts/: TF-free)
from simclr_tf.run import machine, quiet  # noqa: E402

tf = quiet.import_tensorflow()

# Model and step flags the train benchmark accepts: the Config fields of the same name.
TRAIN_FLAGS = dict(
    resnet_depth=int, width_multiplier=float, sk_ratio=float, se_ratio=float,
    image_size=int, train_batch_size=int, num_proj_layers=int, proj_out_dim=int,
    proj_head_mode=str, use_blur=None, mixed_precision=str, jit_compile=None,
    optimizer=str, stem=str, augment_on=str, grad_cache_chunk=int,
    lineareval_while_pretraining=None, global_bn=None, temperature=float, encoder=str,
    vit_pool=str, train_mode=str, dataset=str, train_split=str, data_dir=str)
# Benchmark-only flags: the distillation teacher's architecture where it differs from
# the student's (the Config field of the name without 'teacher_').
TEACHER_FLAGS = dict(teacher_width_multiplier=float, teacher_resnet_depth=int,
                     teacher_sk_ratio=float)
# The parts that read each option (`all` is train, input and ntxent): an option given
# to a part that does not read it is refused, never dropped (`refuse_unread`).
_STEP = ("train", "profile", "versus", "memory", "memory_one", "all")
PART_OPTIONS = dict(
    preset=("train", "profile", "versus", "input", "ntxent", "memory", "memory_one", "all"),
    json=("train", "profile", "versus", "input", "ntxent", "memory", "memory_one", "all"),
    warmup=("train", "profile", "versus", "all"), windows=("train", "profile", "versus", "all"),
    steps=("train", "profile", "versus", "all"),
    matmul_size=("train", "versus", "all"), matmul_seconds=("train", "versus", "all"),
    image_sizes=("input", "all"), input_images=("input", "profile", "all"),
    batch_sizes=("ntxent", "memory", "all"), compare=("train", "all"),
    data=("train", "profile", "versus", "all"), skip_update=("train", "profile", "versus", "all"),
    logdir=("profile",), arm=("versus",), rounds=("versus",), authors_dir=("versus",),
    authors_python=("versus",), train_modes=("train", "all"),
    **{name: _STEP for name in (*TRAIN_FLAGS, *TEACHER_FLAGS)})
# Classes of the supervised head of the one-view modes (and the online linear head).
NUM_CLASSES = 10

PRESETS = {
    # Seconds on a laptop CPU: checks that every part runs.
    "smoke": dict(train=dict(resnet_depth=18, width_multiplier=0.125, image_size=32,
                             train_batch_size=4, use_blur=True, num_proj_layers=2),
                  warmup=1, windows=2, steps=1, matmul_size=256, matmul_seconds=0.2,
                  image_sizes=[32], input_images=16, batch_sizes=[16, 32]),
    # The configurations, on the authors' figures' machine.
    "r18_cifar": dict(train=dict(resnet_depth=18, image_size=32, train_batch_size=256,
                                 use_blur=False, num_proj_layers=3)),
    "r50_224": dict(train=dict(resnet_depth=50, image_size=224, train_batch_size=32,
                               use_blur=True, num_proj_layers=3)),
    # Issue: a global batch of 4096 at 224 px in the memory of one chunk
    # (`memory` part: plain step of 32 images, then 256 and 4096 in chunks of 32).
    "r50_224_4096": dict(train=dict(resnet_depth=50, image_size=224, use_blur=True,
                                    num_proj_layers=3, mixed_precision="bfloat16",
                                    augment_on="device", grad_cache_chunk=32),
                         batch_sizes=[256, 4096]),
    # ViT-S/16 at 224 px (issue "any encoder"): views/s beside r50_224 on the same CPU.
    "vit_s16_224": dict(train=dict(encoder="vit_s16", image_size=224, train_batch_size=32,
                                   use_blur=True, num_proj_layers=3)),
    # The GPU check (dev/gpu_check.sh): R50 at 224 px, bf16, one GPU.
    "gpu_r50": dict(train=dict(resnet_depth=50, image_size=224, train_batch_size=128,
                               use_blur=True, num_proj_layers=3,
                               mixed_precision="bfloat16"),
                    warmup=3, windows=5, steps=10, matmul_size=8192),
    "gpu_vit_s16": dict(train=dict(encoder="vit_s16", image_size=224, train_batch_size=128,
                                   use_blur=True, num_proj_layers=3,
                                   mixed_precision="bfloat16"),
                        warmup=3, windows=5, steps=10, matmul_size=8192),
}


def load_average():
    return tuple(round(x, 2) for x in os.getloadavg())


def device_name():
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(
            tf.config.list_physical_devices("GPU")[0])
        return f"{len(gpus)} GPU ({details.get('device_name', 'GPU')})"
    return f"CPU ({os.cpu_count()} cores visible)"


def _median_rate(fn, work, warmup, windows):
    """Runs fn() warmup times, then `windows` timed times; median work / second."""
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(windows):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return work / statistics.median(seconds), seconds


# ----------------------------------------------------------------- matmul peak


def matmul_peak(size=2048, dtype="float32", seconds=2.0):
    """GFLOP/s of a square matmul chain in a compiled loop (the achievable peak)."""
    a = tf.random.uniform([size, size], dtype=tf.float32)
    a = tf.cast(a / size ** 0.5, dtype)

    @tf.function
    def chain(x, n):
        for _ in tf.range(n):
            x = tf.matmul(x, a)
        return x

    chain(a, tf.constant(1)).numpy()
    n = 1
    while True:  # grow the chain until one call takes >= seconds / 4
        start = time.perf_counter()
        chain(a, tf.constant(n)).numpy()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4 or n >= 4096:
            break
        n *= 2
    rate, _ = _median_rate(lambda: chain(a, tf.constant(n)).numpy(), 2.0 * size ** 3 * n,
                           0, 3)
    return rate / 1e9


# ----------------------------------------------------------------- FLOPs


def forward_flops(model, batch, image_size):
    """FLOPs of one inference forward pass over `batch` images (TF profiler)."""
    spec = tf.TensorSpec([batch, image_size, image_size, 3], tf.float32)
    concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    profile = tf.compat.v1.profiler.profile(graph=concrete.graph, options=options)
    return float(profile.total_float_ops)


# ----------------------------------------------------------------- train step


def build_config(overrides):
    from simclr_tf.config import Config
    values = dict(model_dir="/tmp/unused", train_steps=1, learning_rate=0.1,
                  dataset="digits")
    values.update(overrides)
    return Config.from_dict(values)


def _one_view(config):
    from simclr_tf.config.tables import train_modes
    return train_modes.get(config.train_mode).views == 1


def views_per_image(config):
    """Views the step trains on per image: 2 when pretraining, 1 in the one-view
    modes (finetune, distill)."""
    return 1 if _one_view(config) else 2


def _synthetic_batch(config, rng):
    """A batch of the shape the step of `config.train_mode` reads (docs/design.md,
    "Batches"): `((view1, view2), labels)` when pretraining (or the sources of
    --augment_on=device), `(images, labels)` for finetune and distill."""
    n, size = config.train_batch_size, config.image_size
    labels = rng.integers(0, NUM_CLASSES, size=n).astype(np.int32)
    if _one_view(config):
        if config.augment_on == "device" or config.grad_cache_chunk:
            raise SystemExit(f"--train_mode={config.train_mode}: --augment_on=device and "
                             "--grad_cache_chunk apply to pretraining only.")
        return rng.random(size=(n, size, size, 3), dtype=np.float32), labels
    if config.augment_on == "device":
        from simclr_tf.augment import device as device_augment
        source = device_augment.source_size(size)
        # uint8 directly: an int64 intermediate would be 8x the batch (6 GB at 4096).
        images = rng.integers(0, 256, size=(n, source, source, 3), dtype=np.uint8)
        sizes = np.full([n, 2], source, np.int32)
        seeds = rng.integers(0, 2**31 - 1, size=(n, 2)).astype(np.int64)
        return dict(image=images, size=sizes, seed=seeds), labels
    view1 = rng.random(size=(n, size, size, 3), dtype=np.float32)
    view2 = rng.random(size=(n, size, size, 3), dtype=np.float32)
    return (view1, view2), labels


def teacher_config(config, teacher_overrides):
    """The Config of a distillation teacher: the student's, with the teacher_*
    overrides (e.g. teacher_width_multiplier=0.25 -> width_multiplier=0.25)."""
    import dataclasses
    values = {name[len("teacher_"):]: value
              for name, value in (teacher_overrides or {}).items() if value is not None}
    return dataclasses.replace(config, **values)


def build_teacher(config, strategy, teacher_overrides=None, num_classes=NUM_CLASSES):
    """A `simclr_tf.weights.teacher.Teacher` for timing: a SimCLRModel with a supervised head,
    built like the student (or with the teacher_* overrides), random weights, not
    trainable, in the run's compute dtype."""
    from simclr_tf.weights import teacher
    from simclr_tf.models import SimCLRModel
    from simclr_tf.run.modes import parts
    tconfig = teacher_config(config, teacher_overrides)
    with strategy.scope():
        model = SimCLRModel(**tconfig.model_kwargs(num_classes),
                            dtype=parts.POLICIES[tconfig.mixed_precision], name="teacher")
        model.build((None, tconfig.image_size, tconfig.image_size, 3))
    model.trainable = False
    return teacher.Teacher(model, info=None)


def _dataset_input(config, strategy):
    """The training pipeline of run.py on --dataset (its views drawn on the host's
    input threads, or only decoded there with --augment_on=device), repeated."""
    from simclr_tf.data import pipeline
    from simclr_tf.run import preflight
    from simclr_tf.run.modes import train as train_mode
    source = preflight.load_source(config)
    options = train_mode.input_options(config)
    dataset = pipeline.build_distributed_dataset(
        strategy, source, config.train_split, global_batch_size=config.train_batch_size,
        label_subset_ids=None, labelled_ids=None, start_step=0, **options)
    return iter(dataset)


def _make_trainer(overrides, prefetch=2, teacher_overrides=None, data="synthetic"):
    """(config, model, trainer, iterator) for `overrides`, on synthetic data (or, with
    `data="dataset"`, run.py's input pipeline on --dataset); the trainer's teacher
    (distill) is `trainer.teacher`."""
    import keras
    from simclr_tf.run.modes import parts
    config = build_config(overrides)
    strategy = tf.distribute.get_strategy()
    # The dataset first: one it cannot read is said before a model is built.
    inputs = _dataset_input(config, strategy) if data == "dataset" else None
    keras.utils.set_random_seed(0)
    needs_head = _one_view(config) or config.lineareval_while_pretraining
    model = parts.build_model(config, strategy, NUM_CLASSES if needs_head else None)
    teacher = None
    if config.train_mode == "distill":
        teacher = build_teacher(config, strategy, teacher_overrides)
    trainer = parts.build_trainer(config, strategy, model, teacher=teacher)
    if inputs is not None:
        return config, model, trainer, inputs
    batch = _synthetic_batch(config, np.random.default_rng(0))
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    if prefetch:
        dataset = dataset.prefetch(prefetch)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    return config, model, trainer, iterator


def bench_train(overrides, *, warmup=2, windows=3, steps=2, peaks=None,
                teacher_overrides=None, skip_update=False, data="synthetic"):
    """Train-step throughput of the configuration `overrides` (Config fields; for
    distill, the teacher's `teacher_overrides`). `skip_update`: the step without the
    optimizer's update (the gradients are still computed, and read by the gradient
    norm): the most any faster update could save. `data`: 'synthetic' (a batch in
    memory, views ready) or 'dataset' (run.py's pipeline on --dataset, the views'
    cost included)."""
    config, model, trainer, iterator = _make_trainer(overrides,
                                                     teacher_overrides=teacher_overrides,
                                                     data=data)
    if skip_update:  # on the instance only, past Keras' attribute tracking
        object.__setattr__(trainer.optimizer, "apply_gradients", lambda pairs: None)
    load_before = load_average()
    start = time.perf_counter()
    trainer.train_steps(iterator, 1)
    first_step = time.perf_counter() - start
    per_image = views_per_image(config)
    views = per_image * config.train_batch_size * steps
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rate, seconds = _median_rate(lambda: trainer.train_steps(iterator, steps), views,
                                 max(warmup - 1, 0), windows)
    # Pages the step touched for the first time (fresh memory from the system), per
    # step of the warm-up and timed windows: each costs a page fault and its zeroing.
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    faults_per_step = faults / (steps * (max(warmup - 1, 0) + windows))
    # Inference-graph FLOPs of the forward pass over all views; a training step is
    # about 3x (forward + backward for activations and for weights).
    flops_per_view = forward_flops(model, 2, config.image_size) / 2
    train_flops_per_view = 3.0 * flops_per_view
    if config.grad_cache_chunk:
        train_flops_per_view = 4.0 * flops_per_view  # one extra forward
    teacher_flops_per_view = None
    if trainer.teacher is not None:  # distill: + the teacher's forward, no backward
        teacher_flops_per_view = forward_flops(trainer.teacher.model, 2,
                                               config.image_size) / 2
        train_flops_per_view += teacher_flops_per_view
    achieved = rate * train_flops_per_view / 1e9
    peaks = peaks or {}
    compute = "bfloat16" if config.mixed_precision == "bfloat16" else (
        "float16" if config.mixed_precision == "float16" else "float32")
    peak = peaks.get(compute)
    teacher = None
    if trainer.teacher is not None:
        tconfig = teacher_config(config, teacher_overrides)
        teacher = dict(resnet_depth=tconfig.resnet_depth,
                       width_multiplier=tconfig.width_multiplier,
                       sk_ratio=tconfig.sk_ratio,
                       params=int(trainer.teacher.model.count_params()))
    return dict(
        config={k: getattr(config, k) for k in overrides},
        train_mode=config.train_mode, views_per_image=per_image, teacher=teacher,
        student_params=int(model.count_params()),
        compute_dtype=compute, views_per_sec=rate, images_per_sec=rate / per_image,
        step_seconds=per_image * config.train_batch_size / rate, window_seconds=seconds,
        steps_per_window=steps, first_step_seconds=first_step,
        forward_gflops_per_view=flops_per_view / 1e9,
        teacher_forward_gflops_per_view=(None if teacher_flops_per_view is None
                                         else teacher_flops_per_view / 1e9),
        train_gflops_per_view=train_flops_per_view / 1e9,
        achieved_gflops_per_sec=achieved, matmul_peak_gflops_per_sec=peak,
        mfu=achieved / peak if peak else None,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        minor_page_faults_per_step=faults_per_step,
        load_average_before=load_before, load_average_after=load_average())


# ----------------------------------------------------------------- profile


def bench_profile(overrides, *, warmup=2, windows=3, steps=1, logdir, input_images=256,
                  teacher_overrides=None, skip_update=False, data="synthetic"):
    """Where the step's time goes (scripts/step_profile.py): `windows` windows of
    `steps` steps timed untraced, then the same traced by TensorFlow's profiler and
    split into parts; with host augmentation, the host pipeline's core-seconds per
    step beside them (it runs outside the step, on the input pipeline's threads).
    `teacher_overrides`, `skip_update` and `data` as `bench_train`'s. The trace is
    added to `logdir` (TensorFlow's plugins/profile/<time>/), whatever else is there:
    nothing of it is removed (a run's folder keeps its checkpoints), and only the trace
    written here is read."""
    import step_profile
    config, _, trainer, iterator = _make_trainer(overrides,
                                                 teacher_overrides=teacher_overrides,
                                                 data=data)
    if skip_update:  # as bench_train's
        object.__setattr__(trainer.optimizer, "apply_gradients", lambda pairs: None)
    trainer.train_steps(iterator, 1)
    for _ in range(max(warmup - 1, 0)):
        trainer.train_steps(iterator, steps)
    untraced = []
    for _ in range(windows):
        start = time.perf_counter()
        trainer.train_steps(iterator, steps)
        untraced.append((time.perf_counter() - start) / steps)
    earlier = step_profile.traces(logdir)
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(windows):
        trainer.train_steps(iterator, steps)
    wall = time.perf_counter() - start
    tf.profiler.experimental.stop()
    space = step_profile.read_xspace(logdir, earlier=earlier)
    summary = step_profile.summarise(step_profile.op_events(space), windows * steps, wall)
    summary.update(config={k: getattr(config, k) for k in overrides},
                   data=data, skip_update=skip_update,
                   untraced_step_seconds=statistics.median(untraced),
                   untraced_window_seconds=untraced, logdir=logdir)
    if config.augment_on == "host" and not _one_view(config):
        host = bench_input(config.image_size, num_images=input_images)
        summary["host_views_core_seconds_per_step"] = (
            config.train_batch_size / host["images_per_sec_per_core"])
    return summary


# ----------------------------------------------------------------- memory


def _rss_mb():
    """The process's current resident memory (Linux), MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def bench_memory_one(overrides, teacher_overrides=None):
    """Peak memory of ONE train step of `overrides` (run it in a fresh process)."""
    config, _, trainer, iterator = _make_trainer(overrides, prefetch=0,
                                                 teacher_overrides=teacher_overrides)
    gpu = bool(tf.config.list_logical_devices("GPU"))
    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    # The input batch's size from the iterator's spec (no second copy of the batch).
    input_mb = sum(spec.shape.num_elements() * spec.dtype.size
                   for spec in tf.nest.flatten(iterator.element_spec)) / 2**20
    before = _rss_mb()
    start = time.perf_counter()
    logs = trainer.train_steps(iterator, 1)
    seconds = time.perf_counter() - start
    peak = _peak_memory_bytes() / 2**20
    return dict(train_batch_size=config.train_batch_size,
                grad_cache_chunk=config.grad_cache_chunk, augment_on=config.augment_on,
                train_mode=config.train_mode,
                views=views_per_image(config) * config.train_batch_size,
                input_batch_mb=input_mb,
                memory_before_step_mb=None if gpu else before, peak_memory_mb=peak,
                peak_memory_kind="GPU peak" if gpu else "CPU RSS high-water",
                first_step_seconds=seconds, loss=float(logs["loss"]),
                load_average=load_average())


def bench_memory(overrides, batch_sizes, teacher_overrides=None):
    """One step per global batch size, each in a fresh process (peak memory is a
    per-process high-water mark); with gradient caching also the plain step of one
    chunk, the memory that the chunked steps are measured against."""
    chunk = overrides.get("grad_cache_chunk") or 0
    runs = [dict(overrides, train_batch_size=b) for b in batch_sizes]
    if chunk:
        runs.insert(0, dict(overrides, train_batch_size=chunk, grad_cache_chunk=0))
    import tempfile
    rows = []
    # Each child stops with this script (SIGTERM, SIGINT, SIGHUP): script_io.Stopped.
    with script_io.Children() as children:
        for run in runs:
            command = memory_command(run, teacher_overrides)
            with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
                code = children.run(command, stdout=out, stderr=err, text=True)
                out.seek(0)
                err.seek(0)
                stdout, stderr = out.read(), err.read()
            lines = [l for l in stdout.splitlines() if l.startswith("MEMORY ")]
            if code or not lines:
                raise RuntimeError(f"{' '.join(command)} failed (exit {code}):\n"
                                   f"{stderr[-3000:]}")
            rows.append(json.loads(lines[-1][len("MEMORY "):]))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def memory_command(run, teacher_overrides):
    """The command line of the child that measures one step of `run`."""
    command = [sys.executable, os.path.abspath(__file__), "memory_one"]
    command += [f"--{k}={v}" for k, v in run.items()]
    return command + [f"--{k}={v}" for k, v in (teacher_overrides or {}).items()]


# ----------------------------------------------------------------- input pipeline


def _source_image(image_size, rng):
    # CIFAR images are 32x32; ImageNet's average about 400x350.
    shape = (32, 32, 3) if image_size <= 32 else (375, 500, 3)
    return rng.integers(0, 256, size=shape).astype(np.uint8)


def bench_input(image_size, *, num_images=256, encoded=False, augment_on="host"):
    """Images / s (two views each) through the pretraining preprocessing on one core."""
    from simclr_tf import augment
    rng = np.random.default_rng(0)
    image = _source_image(image_size, rng)
    if encoded:
        data = (tf.io.encode_png(image) if image_size <= 32
                else tf.io.encode_jpeg(image, quality=90)).numpy()
        source = tf.data.Dataset.from_tensors(tf.constant(data))
        decode = lambda x: tf.io.decode_image(x, channels=3, expand_animations=False)  # noqa
    else:
        source = tf.data.Dataset.from_tensors(tf.constant(image))
        decode = tf.identity
    seeds = tf.data.Dataset.range(num_images).map(
        lambda i: tf.random.experimental.stateless_fold_in(tf.constant([1, 2], tf.int64), i))
    dataset = tf.data.Dataset.zip(source.repeat(num_images), seeds)

    if augment_on == "device":
        from simclr_tf.augment import device as device_augment

        def preprocess(data, seed):
            return device_augment.host_preprocess(decode(data), image_size, seed)
    else:
        def preprocess(data, seed):
            x = augment.to_float_image(decode(data))
            s = tf.random.experimental.stateless_split(seed, 2)
            return tuple(augment.preprocess_for_train(x, image_size, image_size,
                                                      seed=s[k]) for k in range(2))

    dataset = dataset.map(preprocess, num_parallel_calls=1).batch(32)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1  # one core
    options.autotune.enabled = False
    dataset = dataset.with_options(options)

    def consume():
        for _ in dataset:
            pass

    rate, _ = _median_rate(consume, num_images, 1, 3)
    return dict(image_size=image_size, source=("encoded" if encoded else "decoded"),
                augment_on=augment_on, images_per_sec_per_core=rate,
                load_average=load_average())


# ----------------------------------------------------------------- NT-Xent


def _peak_memory_bytes():
    if tf.config.list_logical_devices("GPU"):
        return tf.config.experimental.get_memory_info("GPU:0")["peak"]
    # CPU: the process's resident high-water mark (Linux: kilobytes).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def bench_ntxent(batch_size, dim=128, temperature=0.1, windows=3):
    """NT-Xent forward + backward seconds and peak memory for a batch of n images."""
    from simclr_tf.method import losses
    z1 = tf.random.normal([batch_size, dim])
    z2 = tf.random.normal([batch_size, dim])

    @tf.function
    def step(z1, z2):
        with tf.GradientTape() as tape:
            tape.watch([z1, z2])
            loss = losses.nt_xent(z1, z2, temperature=temperature).loss
        return loss, tape.gradient(loss, [z1, z2])

    gpu = bool(tf.config.list_logical_devices("GPU"))
    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
    before = _peak_memory_bytes()
    rate, seconds = _median_rate(lambda: [t.numpy() for t in tf.nest.flatten(step(z1, z2))],
                                 1, 1, windows)
    after = _peak_memory_bytes()
    # The four [n, n] logit blocks, their softmax and gradients: ~ 8 n^2 float32.
    return dict(batch_size=batch_size, seconds=1 / rate,
                peak_memory_mb=(after if gpu else after - before) / 2**20,
                peak_memory_kind="GPU peak" if gpu else "CPU RSS high-water increase",
                logits_mb=4 * 2 * batch_size * batch_size * 4 / 2**20,
                load_average=load_average())


# ----------------------------------------------------------------- main


def mode_ratios(rows, train_modes):
    """Each mode's step time over the first mode's (--train_modes), per precision:
    measured side by side in one process, so the machine's drift is shared."""
    ratios = []
    per_precision = len(train_modes)
    for start in range(0, len(rows), per_precision):
        group = rows[start:start + per_precision]
        reference = group[0]
        for row in group[1:]:
            ratios.append(dict(
                train_mode=row["train_mode"], reference=reference["train_mode"],
                mixed_precision=row["config"].get("mixed_precision"),
                step_seconds=row["step_seconds"],
                reference_step_seconds=reference["step_seconds"],
                step_seconds_ratio=row["step_seconds"] / reference["step_seconds"],
                train_flops_ratio=(row["train_gflops_per_view"] * row["views_per_image"])
                / (reference["train_gflops_per_view"] * reference["views_per_image"])))
    return ratios


def _print_table(title, rows, columns):
    print(f"\n{title}")
    print(" | ".join(name for name, _ in columns))
    print(" | ".join("---" for _ in columns))
    for row in rows:
        cells = []
        for _, key in columns:
            value = key(row) if callable(key) else row.get(key)
            cells.append(f"{value:.3g}" if isinstance(value, float) else str(value))
        print(" | ".join(cells))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("train", "profile", "versus", "input", "ntxent",
                                         "memory", "all", "memory_one", "collectives"),
                        help="collectives: the step's collectives counted from its "
                             "graph (scripts/collectives.py; its own flags)")
    parser.add_argument("--preset", choices=sorted(PRESETS))
    parser.add_argument("--json", default="benchmark.json", help="results file")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (incl. compile)")
    parser.add_argument("--windows", type=int, default=3, help="timed windows (median)")
    parser.add_argument("--steps", type=int, default=2, help="steps per timed window")
    parser.add_argument("--matmul_size", type=int, default=2048)
    parser.add_argument("--matmul_seconds", type=float, default=2.0)
    parser.add_argument("--image_sizes", default="32,224")
    parser.add_argument("--input_images", type=int, default=256)
    parser.add_argument("--batch_sizes", default="256,512,1024,2048,4096")
    parser.add_argument("--compare", default="",
                        help="comma-separated mixed_precision values to run in turn "
                             "(e.g. none,bfloat16)")
    parser.add_argument("--data", choices=("synthetic", "dataset"), default="synthetic",
                        help="train, profile, versus: a synthetic batch with its views ready, or "
                             "run.py's input pipeline on --dataset (digits unless "
                             "given), the views drawn as --augment_on says")
    parser.add_argument("--skip_update", action="store_true",
                        help="train, profile, versus: leave the optimizer's update out of the step (the "
                             "gradients are still computed): the ceiling of what a "
                             "faster update could save, for `versus`")
    parser.add_argument("--logdir", default="/tmp/simclr_profile",
                        help="profile: where TensorFlow's profiler writes the trace "
                             "(TensorBoard's profile plugin reads it too)")
    parser.add_argument("--arm", action="append", default=[],
                        help="versus: NAME:SPEC, one per arm (repeat the flag); SPEC "
                             "is 'authors' (their code: --authors_dir, --authors_python) "
                             "or this script's train flags and environment variables, "
                             "e.g. 'bf16:--mixed_precision=bfloat16' or "
                             "'inter1:TF_NUM_INTEROP_THREADS=1'; the first arm is the "
                             "reference of the ratios (default: authors, ours, "
                             "ours_bf16)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="versus: rounds over the arms, each arm a fresh process, "
                             "the order reversed every other round")
    parser.add_argument("--authors_dir", default=os.environ.get("SIMCLR_TF_AUTHORS_DIR"),
                        help="versus: the tf2/ folder of a google-research/simclr "
                             "checkout (dev/authors_baseline.py)")
    parser.add_argument("--authors_python", default=os.environ.get(
        "SIMCLR_TF_AUTHORS_PYTHON"), help="versus: the Python of the authors' "
                                          "environment (with tf_keras)")
    parser.add_argument("--train_modes", default="",
                        help="comma-separated train modes to run in turn in this "
                             "process, e.g. finetune,distill (each overrides "
                             "--train_mode); prints each one's step time over the "
                             "first's")
    for name, kind in TRAIN_FLAGS.items():
        parser.add_argument(f"--{name}", type=script_io.parse_bool if kind is None else kind)
    for name, kind in TEACHER_FLAGS.items():
        parser.add_argument(f"--{name}", type=kind,
                            help="distill: the teacher's, where it differs from the "
                                 "student's")
    args = parser.parse_args(argv)
    given = script_io.given_options(parser, argv) - {"part"}
    refuse_unread(parser, args.part, given)
    train_overrides = {}
    settings = dict(warmup=args.warmup, windows=args.windows, steps=args.steps,
                    matmul_size=args.matmul_size, matmul_seconds=args.matmul_seconds,
                    image_sizes=[int(s) for s in args.image_sizes.split(",")],
                    input_images=args.input_images,
                    batch_sizes=[int(b) for b in args.batch_sizes.split(",")])
    if args.preset:
        preset = dict(PRESETS[args.preset])
        train_overrides.update(preset.pop("train", {}))
        settings.update({k: v for k, v in preset.items() if k not in given})
    train_overrides.update({k: getattr(args, k) for k in TRAIN_FLAGS
                            if getattr(args, k) is not None})
    settings["teacher"] = {k: getattr(args, k) for k in TEACHER_FLAGS
                           if getattr(args, k) is not None}
    settings["train_modes"] = [m for m in args.train_modes.split(",") if m]
    settings.update(logdir=args.logdir, rounds=args.rounds, skip_update=args.skip_update,
                    data=args.data)
    if args.part == "profile" and train_overrides.get("jit_compile"):
        parser.error("--jit_compile: profile splits the step into TensorFlow's ops, and "
                     "under XLA they run as one compiled cluster that no part can claim "
                     "(its table would be empty); leave --jit_compile out, or time it "
                     "whole with `train --jit_compile=true`")
    if args.part == "versus":
        import side_by_side
        try:
            settings["arms"] = side_by_side.parse_arms(
                args.arm or side_by_side.DEFAULT_ARMS, args.authors_dir,
                args.authors_python)
        except ValueError as error:
            parser.error(str(error))
        if args.rounds < 1:
            parser.error(f"--rounds={args.rounds}: give at least 1")
        # What every arm's `benchmark.py train` is given besides the model: the data,
        # the update left out, the teacher (the authors' arm refuses what it lacks).
        settings["arm_overrides"] = dict(train_overrides, **settings["teacher"])
        if args.data != "synthetic":
            settings["arm_overrides"]["data"] = args.data
        if args.skip_update:
            settings["arm_overrides"]["skip_update"] = True
        settings["arms"] = _native_arms(parser, settings["arms"], train_overrides)
        for arm in settings["arms"]:  # an arm that cannot run: said before any runs
            try:
                command = side_by_side.arm_command(arm, settings["arm_overrides"], dict(
                    warmup=1, windows=1, steps=1, matmul_size=1, matmul_seconds=0),
                    "result.json")
            except side_by_side.ArmFailed as error:
                parser.error(f"--arm={arm['name']}: {error}")
            if not arm["authors"]:  # our arm's `train` command line, parsed as it will be
                _check_arm(parser, arm["name"], command[command.index("train"):])
    from simclr_tf.config import rules
    for mode in settings["train_modes"] + [train_overrides.get("train_mode", "pretrain")]:
        if mode not in rules.TRAIN_MODES:
            parser.error(f"train mode {mode!r} is not one of {rules.TRAIN_MODES}")
    return args, settings, train_overrides


def refuse_unread(parser, part, given):
    """An option that `part` does not read is an error (PART_OPTIONS), not dropped."""
    for name in sorted(given):
        parts = PART_OPTIONS.get(name)
        if parts is not None and part not in parts:
            readers = [p for p in parts if p != "memory_one"]
            parser.error(f"--{name} does nothing in `{part}`: only "
                         f"{', '.join(readers)} read it; leave it out")


def _check_arm(parser, name, argv):
    """The error `train` would stop an arm with (a typo in its flags, an option it
    does not read), said before any arm runs (was: after the arms before it ran)."""
    import contextlib
    import io
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            parse_args(argv)
    except SystemExit:
        lines = said.getvalue().strip().splitlines() or ["refused"]
        parser.error(f"--arm={name}: {lines[-1].split('error: ', 1)[-1]}")


def _compute(arm, overrides):
    """The mixed precision an arm of `versus` trains in: its own flag's, or the
    shared model's ('none' for the authors' float32 step)."""
    if arm["authors"]:
        return "none"
    value = overrides.get("mixed_precision") or "none"
    for token in arm["flags"]:
        if token.startswith("--mixed_precision="):
            value = token.split("=", 1)[1]
    return value


def _native_arms(parser, arms, overrides):
    """`arms` without those in bfloat16 on a CPU without native bfloat16 (an AVX2-only
    CPU emulates it: a step several times float32's, docs/performance.md), each left
    out with one line; an error when that would leave out the reference (the first)."""
    if machine.native_bfloat16():
        return arms
    kept = []
    for index, arm in enumerate(arms):
        if _compute(arm, overrides) != "bfloat16":
            kept.append(arm)
            continue
        why = (f"arm {arm['name']} trains in bfloat16, which this CPU ({machine.cpu_kind()}) "
               "has no native instructions for (avx512_bf16 or amx_bf16): emulated, its step "
               "takes several times float32's")
        if index == 0:
            parser.error(f"{why}; the reference arm cannot be left out: run versus on a "
                         "CPU with native bfloat16, or give float32 arms")
        print(f"benchmark.py versus: {why}; left out", flush=True)
    return kept


def main(argv=None):
    """The command line `argv`; a flag that run.py's rules refuse (a dataset that
    cannot be read, a bad combination) is one line and exit status 2."""
    from simclr_tf.config import ConfigError
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["collectives"]:  # its own flags; it splits the CPU before any op
        import collectives
        return collectives.main(argv[1:])
    try:
        return measure(argv)
    except ConfigError as error:
        print(f"benchmark.py: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def measure(argv):
    """`main` but for the refusal of a flag."""
    args, settings, overrides = parse_args(argv)
    results = dict(device=device_name(), cpu_kind=machine.cpu_kind(),
                   tensorflow=tf.__version__, load_average_start=load_average(),
                   argv=argv)
    print(f"{results['device']}, TF {tf.__version__}, load average "
          f"{results['load_average_start']}", flush=True)
    if args.part == "memory_one":  # the child process of the memory part
        print("MEMORY " + json.dumps(bench_memory_one(overrides, settings["teacher"])),
              flush=True)
        return None
    if args.part == "versus":  # each arm in fresh processes, interleaved
        import side_by_side
        try:
            with script_io.Children() as children:
                results["versus"] = side_by_side.run(
                    settings["arms"], settings["arm_overrides"], rounds=settings["rounds"],
                    children=children,
                    timing=dict(warmup=settings["warmup"], windows=settings["windows"],
                                steps=settings["steps"],
                                matmul_size=settings["matmul_size"],
                                matmul_seconds=settings["matmul_seconds"]))
        except side_by_side.ArmFailed as error:  # no table from a failed arm
            print(f"benchmark.py versus: error: {error}", file=sys.stderr)
            raise SystemExit(1) from None
        except script_io.Stopped as stop:  # the running arm was stopped and waited for
            print(f"benchmark.py versus: {stop}: the running arm was stopped; no table",
                  file=sys.stderr)
            raise SystemExit(128 + stop.signum) from None
    if args.part == "profile":
        summary = bench_profile(overrides, warmup=settings["warmup"],
                                windows=settings["windows"], steps=settings["steps"],
                                logdir=settings["logdir"],
                                input_images=settings["input_images"],
                                teacher_overrides=settings["teacher"],
                                skip_update=settings["skip_update"], data=settings["data"])
        results["profile"] = summary
        print(f"\nWhere the step's time goes: {machine.cpu_kind()}, "
              f"{summary['config']}, data {summary['data']}"
              + (", the update left out" if summary["skip_update"] else ""))
        print(f"step {summary['untraced_step_seconds']:.3g} s untraced, "
              f"{summary['wall_seconds_per_step']:.3g} s traced; op time "
              f"{summary['op_seconds_per_step']:.3g} s per step")
        _print_table("Parts of the step (op seconds per step, share of op time)",
                     summary["rows"] + [dict(part="no op running (wall)",
                                             seconds_per_step=summary[
                                                 "no_op_seconds_per_step"])],
                     [("part", "part"), ("s/step", "seconds_per_step"),
                      ("share", lambda r: "" if "share" not in r
                       else f"{100 * r['share']:.1f}%"),
                      ("ops/step", lambda r: "" if "ops_per_step" not in r
                       else f"{r['ops_per_step']:.0f}")])
        if "host_views_core_seconds_per_step" in summary:
            print(f"views on the host (input pipeline, outside the step): "
                  f"{summary['host_views_core_seconds_per_step']:.3g} core-seconds "
                  "per step")
    if args.part in ("train", "all"):
        precisions = [p for p in args.compare.split(",") if p] or [None]
        # The peak of float32 and of each dtype the runs compute in (bfloat16 where
        # the CPU computes it natively, a GPU's float16): a bfloat16 matmul under
        # ONEDNN_MAX_CPU_ISA=AVX2 aborts the process.
        computes = {overrides.get("mixed_precision") if p is None else p
                    for p in precisions} - {None, "none"}
        dtypes = ["float32"] + sorted(computes)
        if machine.native_bfloat16() and "bfloat16" not in dtypes:
            dtypes.append("bfloat16")
        if tf.config.list_logical_devices("GPU") and "float16" not in dtypes:
            dtypes.append("float16")
        peaks = {dtype: matmul_peak(settings["matmul_size"], dtype,
                                    settings["matmul_seconds"]) for dtype in dtypes}
        results["matmul_peak_gflops_per_sec"] = peaks
        print("matmul peak GFLOP/s: " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()),
              flush=True)
        train_modes = settings["train_modes"] or [None]
        rows = []
        for precision in precisions:
            for train_mode in train_modes:
                run = dict(overrides)
                if precision is not None:
                    run["mixed_precision"] = precision
                if train_mode is not None:
                    run["train_mode"] = train_mode
                rows.append(bench_train(run, warmup=settings["warmup"],
                                        windows=settings["windows"],
                                        steps=settings["steps"], peaks=peaks,
                                        teacher_overrides=settings["teacher"],
                                        skip_update=settings["skip_update"],
                                        data=settings["data"]))
                print(json.dumps(rows[-1], default=str), flush=True)
        results["train"] = rows
        _print_table("Train step", rows, [
            ("config", lambda r: " ".join(f"{k}={v}" for k, v in r["config"].items())),
            ("teacher", lambda r: "" if not r["teacher"] else
             f"r{r['teacher']['resnet_depth']} x{r['teacher']['width_multiplier']:g}"),
            ("dtype", "compute_dtype"), ("s/step", "step_seconds"),
            ("views/s", "views_per_sec"), ("images/s", "images_per_sec"),
            ("train GFLOP/view", "train_gflops_per_view"),
            ("GFLOP/s", "achieved_gflops_per_sec"), ("MFU", "mfu"),
            ("load", "load_average_after")])
        if len(train_modes) > 1:
            results["train_mode_ratios"] = mode_ratios(rows, train_modes)
            for line in results["train_mode_ratios"]:
                print(f"step time {line['train_mode']} / {line['reference']}"
                      f"{' (' + line['mixed_precision'] + ')' if line['mixed_precision'] else ''}"
                      f": {line['step_seconds_ratio']:.3g} "
                      f"({line['step_seconds']:.3g} s / {line['reference_step_seconds']:.3g} s;"
                      f" train FLOPs ratio {line['train_flops_ratio']:.3g})")
    if args.part in ("input", "all"):
        rows = []
        for size in settings["image_sizes"]:
            for encoded in (False, True):
                for augment_on in ("host", "device"):
                    rows.append(bench_input(size, num_images=settings["input_images"],
                                            encoded=encoded, augment_on=augment_on))
                    print(json.dumps(rows[-1]), flush=True)
        results["input"] = rows
        _print_table("Input pipeline (one core; host part only for augment_on=device)",
                     rows, [("px", "image_size"), ("from", "source"),
                            ("augment_on", "augment_on"),
                            ("images/s/core", "images_per_sec_per_core"),
                            ("load", "load_average")])
    if args.part in ("ntxent", "all"):
        rows = [bench_ntxent(b) for b in sorted(settings["batch_sizes"])]
        results["ntxent"] = rows
        _print_table("NT-Xent forward + backward (d = 128)", rows, [
            ("batch", "batch_size"), ("seconds", "seconds"), ("peak MB", "peak_memory_mb"),
            ("logits MB", "logits_mb"), ("memory", "peak_memory_kind"),
            ("load", "load_average")])
    if args.part == "memory":  # not in "all": whole steps in child processes
        try:
            rows = bench_memory(overrides, sorted(settings["batch_sizes"]),
                                settings["teacher"])
        except script_io.Stopped as stop:  # the running step was stopped and waited for
            print(f"benchmark.py memory: {stop}: the running step was stopped; no table",
                  file=sys.stderr)
            raise SystemExit(128 + stop.signum) from None
        results["memory"] = rows
        _print_table("Peak memory of one train step (each in a fresh process)", rows, [
            ("batch", "train_batch_size"), ("views", "views"), ("chunk", "grad_cache_chunk"),
            ("augment_on", "augment_on"), ("input MB", "input_batch_mb"),
            ("before step MB", "memory_before_step_mb"), ("peak MB", "peak_memory_mb"),
            ("memory", "peak_memory_kind"), ("first step s", "first_step_seconds"),
            ("load", "load_average")])
    results["load_average_end"] = load_average()
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2, default=str)
    print(f"\nwrote {args.json}")
    return results


if __name__ == "__main__":
    main()
