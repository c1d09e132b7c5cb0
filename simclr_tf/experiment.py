"""One run of `run.py`: everything between a validated Config and the results.

Checks that need the dataset or the strategy run first, before any model is built
(split names, labels for fine-tuning, batch divisible by the replicas, a writable
model_dir, an existing --checkpoint). Then train (pretrain or finetune) with
checkpoints every `checkpoint_steps`, resuming from model_dir, then evaluate, then
optionally the linear probe of the pretrained encoder next to a random one.
"""
import json
import os
import signal
import threading
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from simclr_tf import checkpoints, distribute, export, official, optimizers, schedules
from simclr_tf.config import ConfigError
from simclr_tf.data import augment, datasets, device_augment, pipeline
from simclr_tf.evaluation import features, knn, probe, supervised, transfer, writers
from simclr_tf.models import SimCLRModel, freeze_for_finetuning
from simclr_tf.train import NonFiniteLossError, Trainer

POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def run(config):
    """Runs `config.mode` and returns a dict of results (also written to model_dir).

    A SIGTERM during training saves a checkpoint at the current step and returns
    early with `results["interrupted"] = True` (nothing is evaluated or exported).
    """
    keras.utils.set_random_seed(config.seed)
    if config.deterministic:
        # Process-wide and irreversible; seeds and the data position are already
        # fixed, this removes the remaining run-to-run differences of kernels.
        tf.config.experimental.enable_op_determinism()
    strategy = create_strategy(config)
    source = load_source(config)
    context = prepare(config, strategy, source)
    results = {}
    if config.mode in ("train", "train_then_eval"):
        results.update(train(config, strategy, context))
        if results.get("interrupted"):
            return results
    if config.mode in ("eval", "train_then_eval"):
        results.update(evaluate(config, strategy, context))
    if config.mode == "export":
        results.update(export_latest(config, strategy, context))
    if config.mode == "linear_probe":
        results.update(linear_probe_mode(config, strategy, context))
    if config.mode == "embed":
        results.update(embed_mode(config, strategy, context))
    if config.final_linear_probe:
        results.update(final_linear_probe(config, context))
    if results and config.model_dir and _is_chief(strategy):
        write_json(os.path.join(config.model_dir, "result.json"), results)
    return results


# ------------------------------------------------------------------ set-up checks


def create_strategy(config):
    name = config.strategy
    if name == "auto":
        if config.use_tpu:
            name = "tpu"
        elif len(tf.config.list_logical_devices("GPU")) > 1:
            name = "mirrored"
        else:
            name = "default"
    logging.info("Distribution strategy: %s", name)
    return distribute.create_strategy(name, tpu_name=config.tpu_name,
                                      tpu_zone=config.tpu_zone,
                                      gcp_project=config.gcp_project, master=config.master)


def load_source(config):
    try:
        return datasets.get_dataset(config.dataset, data_dir=config.data_dir,
                                    skip_corrupt_images=config.skip_corrupt_images)
    except datasets.CorruptImageError as error:
        raise ConfigError("skip_corrupt_images", f"is off and {error.path!r} is "
                          f"{error.reason.replace('_', ' ')}; delete or replace the file, "
                          "or turn --skip_corrupt_images on to skip such files.") from None
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError("dataset", str(error)) from None


def _check_split(source, flag, split):
    try:
        return source.num_examples(split)
    except ValueError as error:
        raise ConfigError(flag, f"{error} (dataset {source.name!r} has splits "
                          f"{', '.join(source.splits)}).") from None


def prepare(config, strategy, source):
    """Validates what depends on the dataset and strategy; returns the run context."""
    training = config.mode in ("train", "train_then_eval")
    evaluating = config.mode in ("eval", "train_then_eval") or config.final_linear_probe
    replicas = strategy.num_replicas_in_sync
    context = dict(source=source, num_classes=source.num_classes or None)
    if training:
        context["num_train_examples"] = _check_split(source, "train_split", config.train_split)
        if config.train_batch_size % replicas:
            raise ConfigError("train_batch_size", f"{config.train_batch_size} is not "
                              f"divisible by the {replicas} replicas; use a multiple of "
                              f"{replicas}.")
        per_replica = config.train_batch_size // replicas
        if (config.train_mode == "finetune" and per_replica % 2 and config.sk_ratio == 0
                and _onednn_cpu_training(strategy)):
            raise ConfigError(
                "train_batch_size", f"gives {per_replica} images per replica; an odd "
                "batch crashes TensorFlow 2.21's oneDNN CPU kernel for the strided 1x1 "
                "shortcut convolutions (Conv2DBackpropFilter aborts). Use an even "
                "per-replica batch, or set TF_ENABLE_ONEDNN_OPTS=0.")
        if config.train_mode == "finetune" and not source.has_labels(config.train_split):
            raise ConfigError("train_mode", f"finetune needs labels, but split "
                              f"{config.train_split!r} of {source.name!r} has none; "
                              "choose a labelled --train_split or --train_mode=pretrain.")
    if evaluating:
        _check_split(source, "eval_split", config.eval_split)
        if not source.has_labels(config.eval_split):
            raise ConfigError("eval_split", f"split {config.eval_split!r} of "
                              f"{source.name!r} has no labels to evaluate against.")
        if config.train_mode == "pretrain" and not config.lineareval_while_pretraining \
                and config.mode != "train":
            raise ConfigError("lineareval_while_pretraining", "is off, so a pretraining "
                              "run has no classifier to evaluate; turn it on or use "
                              "--final_linear_probe.")
    _check_evaluation_splits(config, source, training)
    if config.checkpoint:
        try:
            checkpoints.resolve_checkpoint_path(config.checkpoint)
        except FileNotFoundError as error:
            raise ConfigError("checkpoint", str(error)) from None
        if official.is_official_savedmodel(config.checkpoint):
            context["official"] = check_official_architecture(config)
        else:
            _check_checkpoint_readable(config.checkpoint)
    if config.model_dir:
        try:
            tf.io.gfile.makedirs(config.model_dir)
            # One name per process: the workers of a multi-worker run probe together.
            probe_file = os.path.join(config.model_dir, f".write_test_{os.getpid()}")
            with tf.io.gfile.GFile(probe_file, "w") as f:
                f.write("ok")
            tf.io.gfile.remove(probe_file)
        except (OSError, tf.errors.OpError) as error:
            raise ConfigError("model_dir", f"{config.model_dir!r} is not writable "
                              f"({error}); choose another directory.") from None
        if _is_chief(strategy):
            write_json(os.path.join(config.model_dir, "flags.json"), config.to_dict())
    _check_something_to_load(config)
    return context


def _check_something_to_load(config):
    """--mode=eval / export need a checkpoint now (unless eval waits for one)."""
    if config.mode not in ("eval", "export") or (config.mode == "eval"
                                                  and config.eval_wait_secs > 0):
        return
    if config.model_dir and tf.train.latest_checkpoint(config.model_dir):
        return
    if config.mode == "eval" and config.checkpoint:
        return
    raise ConfigError("model_dir", f"has no checkpoint to {config.mode} in "
                      f"{config.model_dir!r}; train first"
                      + (", pass --checkpoint, or wait for one with --eval_wait_secs."
                         if config.mode == "eval" else "."))


def _check_labelled_split(source, flag, split):
    _check_split(source, flag, split)
    if not source.has_labels(split):
        raise ConfigError(flag, f"split {split!r} of {source.name!r} has no labels; the "
                          "kNN and linear-probe protocols need a labelled split.")


def _check_evaluation_splits(config, source, training):
    """Splits of the kNN monitor, --mode=linear_probe and --mode=embed."""
    bank_flag = "knn_bank_split" if config.knn_bank_split else "train_split"
    if training and config.knn_eval_split and config.train_mode == "pretrain":
        _check_labelled_split(source, "knn_eval_split", config.knn_eval_split)
        _check_labelled_split(source, bank_flag, _knn_bank_split(config))
    if config.mode == "linear_probe":
        _check_labelled_split(source, "train_split", config.train_split)
        _check_labelled_split(source, "eval_split", config.eval_split)
    if config.mode == "embed":
        _check_split(source, "embed_split", config.embed_split or config.eval_split)


def _knn_bank_split(config):
    return config.knn_bank_split or config.train_split


def _check_checkpoint_readable(path):
    """--checkpoint must be a checkpoint TensorFlow can read (index and data intact)."""
    prefix = checkpoints.resolve_checkpoint_path(path)
    try:
        reader = tf.train.load_checkpoint(prefix)
        reader.get_variable_to_shape_map()
        shards = tf.io.gfile.glob(prefix + ".data-*-of-*")
        expected = int(shards[0].rsplit("-of-", 1)[1]) if shards else 1
        if len(shards) != expected:
            raise ValueError(f"{expected - len(shards)} of its {expected} data files are "
                             "missing")
    except (tf.errors.OpError, ValueError, IndexError) as error:
        reason = str(error).strip().splitlines()[0][:300]
        raise ConfigError("checkpoint", f"{prefix!r} cannot be read ({reason}); pass an "
                          "intact checkpoint prefix, run directory or SavedModel.") from None


# Flags that must agree with a released model's architecture -> SimCLRModel argument.
_OFFICIAL_ARCHITECTURE = dict(resnet_depth="depth", width_multiplier="width_multiplier",
                              sk_ratio="sk_ratio", se_ratio="se_ratio",
                              proj_head_mode="proj_head_mode", proj_out_dim="proj_out_dim")


def check_official_architecture(config):
    """The authors' released model at --checkpoint must match the flags' model."""
    try:
        info = official.inspect_official(config.checkpoint)
    except (ValueError, FileNotFoundError) as error:
        raise ConfigError("checkpoint", f"cannot import the released model: {error}") from None
    ours, wanted = config.model_kwargs(), info.config
    flags = dict(_OFFICIAL_ARCHITECTURE)
    if wanted.get("proj_head_mode") == "nonlinear":
        flags["num_proj_layers"] = "num_proj_layers"
    mismatched = [f"--{flag}={wanted[arg]}" for flag, arg in flags.items()
                  if arg in wanted and not _same(ours[arg], wanted[arg])]
    if mismatched:
        raise ConfigError("checkpoint", f"{config.checkpoint!r} is a released model whose "
                          f"architecture needs {' '.join(mismatched)} (the flags say "
                          "otherwise); pass those flags.")
    return info


def _same(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return float(a) == float(b)


def _onednn_cpu_training(strategy):
    """Whether the replicas run on CPUs with TensorFlow's oneDNN kernels enabled."""
    return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0" and _all_cpu(strategy)


def _all_cpu(strategy):
    """Whether every replica of `strategy` runs on a CPU."""
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy has none: it uses the first GPU, if any
        devices = [d.name for d in tf.config.list_logical_devices("GPU")[:1]] or ["CPU"]
    return all("CPU" in device.upper() for device in devices)


def write_json(path, values):
    """Writes JSON atomically (temporary file, then rename): a kill never leaves half."""
    temporary = f"{path}.tmp{os.getpid()}"
    with tf.io.gfile.GFile(temporary, "w") as f:
        f.write(json.dumps(values, indent=2, sort_keys=True, default=float))
    tf.io.gfile.rename(temporary, path, overwrite=True)


# ------------------------------------------------------------------ model


def build_model(config, strategy, num_classes):
    """Creates and builds the model under the strategy, frozen for fine-tuning."""
    if config.stem == "auto":
        logging.info("Stem: %s (--stem=auto: cifar when image_size <= 32)",
                     config.resolved_stem)
    with strategy.scope():
        model = SimCLRModel(**config.model_kwargs(num_classes),
                            dtype=POLICIES[config.mixed_precision])
        model.build((None, config.image_size, config.image_size, 3))
        if config.train_mode == "finetune":
            freeze_for_finetuning(model, config.fine_tune_after_block)
    return model


def blur_fn(config, optimizer):
    """The train step's batched blur (None when off), seeded by (seed, step, replica,
    chunk)."""
    if config.train_mode != "pretrain" or not config.use_blur:
        return None

    def blur(views, chunk=None):
        # Seeded by (seed, step, replica[, chunk]), not by a stateful generator, whose
        # state no checkpoint keeps: a resumed run blurs exactly as an uninterrupted
        # one, and both passes of gradient caching blur a chunk alike.
        seed = tf.random.experimental.stateless_fold_in(
            tf.constant([config.seed, 1], tf.int64),
            tf.cast(optimizer.iterations, tf.int64))
        seed = tf.random.experimental.stateless_fold_in(
            seed, tf.cast(distribute.replica_id(), tf.int64))
        if chunk is not None:
            seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(chunk, tf.int64))
        return augment.batch_random_blur(views, height=config.image_size,
                                         width=config.image_size, seed=seed)

    return blur


def view_fn(config):
    """--augment_on=device: the views are drawn in the train step."""
    if config.train_mode != "pretrain" or config.augment_on != "device":
        return None
    return device_augment.make_view_fn(config.image_size,
                                       color_jitter_strength=config.color_jitter_strength)


# ------------------------------------------------------------------ modes


def train(config, strategy, context):
    source = context["source"]
    split, subset_ids = config.train_split, None
    num_examples = context["num_train_examples"]
    if config.train_mode == "finetune" and config.label_fraction < 1.0:
        subset = datasets.make_label_subset(source, split, config.label_fraction,
                                            seed=config.seed)
        subset.write(os.path.join(config.model_dir, "label_subset_ids.txt"))
        source, split, subset_ids = subset.source, subset.split, subset.example_ids
        num_examples = subset.num_examples
        logging.info("Fine-tuning on %d labelled examples (%.3g of %s)", num_examples,
                     config.label_fraction, config.train_split)
    plan = schedules.compute_steps(
        num_examples=num_examples, batch_size=config.train_batch_size,
        train_epochs=config.train_epochs, train_steps=config.train_steps,
        warmup_epochs=config.warmup_epochs, checkpoint_epochs=config.checkpoint_epochs,
        checkpoint_steps=config.checkpoint_steps)
    model = build_model(config, strategy, context["num_classes"])
    with strategy.scope():
        learning_rate = schedules.WarmUpAndCosine(
            config.learning_rate, batch_size=config.train_batch_size,
            warmup_steps=plan.warmup_steps, total_steps=plan.total_steps,
            scaling=config.learning_rate_scaling)
        optimizer = optimizers.build_optimizer(
            config.optimizer, learning_rate, momentum=config.momentum,
            weight_decay=config.weight_decay, model=model)
        if config.mixed_precision == "float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    trainer = Trainer(strategy, model, optimizer, train_mode=config.train_mode,
                      temperature=config.temperature, hidden_norm=config.hidden_norm,
                      weight_decay=config.weight_decay, optimizer_name=config.optimizer,
                      blur_fn=blur_fn(config, optimizer), jit_compile=config.jit_compile,
                      view_fn=view_fn(config), grad_cache_chunk=config.grad_cache_chunk)
    if config.jit_compile and _all_cpu(strategy):
        logging.warning("--jit_compile on CPU: XLA is measured ~2-3x slower than TF's "
                        "oneDNN kernels here (docs/performance.md); drop it on CPU.")
    chief = _is_chief(strategy)
    # Non-chief workers save too (see CheckpointState) but into their own scratch dir.
    scratch_dir = None if chief else _worker_scratch_dir(config.model_dir, strategy)
    state = checkpoints.CheckpointState(config.model_dir, model, optimizer,
                                        max_to_keep=config.keep_checkpoint_max,
                                        save_dir=scratch_dir)
    state.remove_partial_writes()
    resumed = state.restore_latest()
    if resumed:
        logging.info("Resumed from %s", resumed)
    elif "official" in context:
        info = context["official"]
        official.load_official_weights(
            model, config.checkpoint,
            supervised_head=model.supervised_head is not None
            and context["num_classes"] == info.config.get("num_classes"))
        logging.info("Initialised from the released model %s", config.checkpoint)
    elif config.checkpoint:
        logging.info("Initialised from %s", checkpoints.initialize_from(model, config.checkpoint))
    step = int(optimizer.iterations.numpy())
    dataset = pipeline.build_distributed_dataset(
        strategy, source, split, global_batch_size=config.train_batch_size,
        is_training=True, train_mode=config.train_mode, image_size=config.image_size,
        color_jitter_strength=config.color_jitter_strength, cache=config.cache_dataset,
        seed=config.seed, label_subset_ids=subset_ids, start_step=step,
        augment_on=config.augment_on if config.train_mode == "pretrain" else "host")
    iterator = iter(dataset)
    writer = tf.summary.create_file_writer(scratch_dir or config.model_dir)
    if step == 0 and chief:
        write_view_summary(config, source, split, writer)
    logs = {}
    start = time.perf_counter()
    print(f"Training {plan.total_steps} steps ({step} done), checkpoint every "
          f"{plan.checkpoint_steps}, batch {config.train_batch_size}, "
          f"{strategy.num_replicas_in_sync} replica(s).", flush=True)
    knn_monitor, knn_every, knn_results = None, 0, {}
    if config.knn_eval_split and config.train_mode == "pretrain":
        knn_monitor, knn_every = make_knn_monitor(config, strategy, model, source), (
            config.knn_eval_every or plan.checkpoint_steps)
    with _StopOnSigterm() as sigterm:
        while step < plan.total_steps:
            chunk = min(plan.checkpoint_steps - step % plan.checkpoint_steps,
                        plan.total_steps - step)
            if knn_every:
                # Stop at kNN steps too: the same steps run in more calls, so training
                # numerics do not change.
                chunk = min(chunk, knn_every - step % knn_every)
            try:
                logs = trainer.run(iterator, chunk, verbose=1 if chief else 0,
                                   hooks=[sigterm.hook])
            except NonFiniteLossError as error:
                # Nothing after the last good checkpoint is saved: the weights of the
                # failing step are not finite.
                raise NonFiniteLossError(
                    f"{error} Last good checkpoint (kept, not overwritten): "
                    f"{state.latest or 'none yet'}.") from None
            except _Terminated:
                step = int(optimizer.iterations.numpy())
                path = state.save(step) if _step_of(state.latest or "") != step else \
                    state.latest
                print(f"SIGTERM received: saved a checkpoint at step {step} ({path}) and "
                      "stopped; run the same command again to resume.", flush=True)
                return dict(global_step=step, interrupted=True)
            step = int(optimizer.iterations.numpy())
            if step % plan.checkpoint_steps == 0 or step == plan.total_steps:
                state.save(step)
                write_scalars(writer, step, {f"train/{SUMMARY_NAMES.get(k, k)}": v
                                             for k, v in logs.items() if k != "num_examples"})
            if knn_monitor is not None and (step % knn_every == 0
                                            or step == plan.total_steps):
                knn_results = run_knn_monitor(knn_monitor, step, writer, verbose=chief)
    results = dict(global_step=step, train_seconds=time.perf_counter() - start,
                   **{f"train/{SUMMARY_NAMES.get(k, k)}": float(v) for k, v in logs.items()})
    results.update(knn_results)
    if scratch_dir is not None:
        writer.close()
        tf.io.gfile.rmtree(scratch_dir)
    if chief:
        results["saved_model"] = export.export_for_step(
            model, config.model_dir, step, image_size=config.image_size,
            keep_hub_module_max=config.keep_hub_module_max)
    return results


class _Terminated(Exception):
    """Raised from a training hook after a SIGTERM."""


class _StopOnSigterm:
    """While active, SIGTERM makes the next training hook raise `_Terminated`, so the
    loop stops between two steps and saves a checkpoint (preemption notices on cloud
    VMs and Kubernetes arrive as SIGTERM). The previous handler is restored after.
    Only the main thread can install handlers; elsewhere this does nothing."""

    def __init__(self):
        self.received = False
        self._previous = None

    def _handle(self, signum, frame):  # pylint: disable=unused-argument
        self.received = True

    def hook(self, step, logs):  # pylint: disable=unused-argument
        if self.received:
            raise _Terminated()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc_info):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
        return False


def _worker_scratch_dir(model_dir, strategy):
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, f".scratch_{resolver.task_type}_{resolver.task_id}")


# Trainer log names -> the TensorBoard / result.json names users know.
SUMMARY_NAMES = dict(sup_loss="supervised_loss", label_acc="supervised_acc")


def _is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver is None or resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0)


def write_scalars(writer, step, values):
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.scalar(name, float(value))
    writer.flush()


def write_view_summary(config, source, split, writer, num_images=8):
    """An image summary of pretraining views (or fine-tuning crops) as the model sees
    them, from a separate small pipeline so the training stream is untouched."""
    data = pipeline.build_input_fn(
        source, split, global_batch_size=num_images, is_training=True,
        train_mode=config.train_mode, image_size=config.image_size,
        color_jitter_strength=config.color_jitter_strength,
        shuffle_buffer_size=num_images)(None)
    images, _ = next(iter(data))
    if config.train_mode == "pretrain":
        images = tf.concat(images, axis=2)  # view 1 | view 2, side by side
    with writer.as_default(step=0):
        tf.summary.image("train/views", images, max_outputs=num_images)
    writer.flush()


def evaluate(config, strategy, context):
    """Top-1/top-5 of the supervised head on the eval split, for the latest checkpoint
    (or, with --eval_wait_secs > 0, for each new one until none comes for that long)."""
    model = build_model(config, strategy, context["num_classes"])
    evaluator = supervised.SupervisedEvaluator(strategy, model)
    dataset = features.eval_dataset(context["source"], config.eval_split,
                                    image_size=config.image_size,
                                    batch_size=config.eval_batch_size)
    results = {}
    for prefix in _checkpoints_to_evaluate(config):
        checkpoints.restore_model(model, prefix)
        step = _step_of(prefix)
        metrics = evaluator(dataset, steps=config.eval_steps or None)
        print(f"Eval on {config.eval_split} at step {step}: top-1 "
              f"{metrics['top_1_accuracy']:.4f}, top-5 {metrics['top_5_accuracy']:.4f} "
              f"({metrics['num_examples']} examples, {prefix})", flush=True)
        results = {f"eval/{k}": v for k, v in metrics.items()}
        results["eval/global_step"] = step
        if config.model_dir:
            write_scalars(tf.summary.create_file_writer(config.model_dir), step,
                          {k: v for k, v in results.items() if "accuracy" in k or "loss" in k})
            write_json(os.path.join(config.model_dir, f"result_{step}.json"), results)
    return results


def _step_of(prefix):
    tail = prefix.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _checkpoints_to_evaluate(config):
    """Checkpoint prefixes to evaluate, in order."""
    latest = tf.train.latest_checkpoint(config.model_dir) if config.model_dir else None
    if config.eval_wait_secs <= 0:
        # prepare() has checked that one of the two exists.
        yield latest or checkpoints.resolve_checkpoint_path(config.checkpoint)
        return
    # Follow a training run: evaluate each new checkpoint as it appears.
    for prefix in tf.train.checkpoints_iterator(config.model_dir, min_interval_secs=1,
                                                timeout=config.eval_wait_secs):
        yield prefix


def export_latest(config, strategy, context):
    """--mode=export: a SavedModel of the latest checkpoint in model_dir."""
    latest = tf.train.latest_checkpoint(config.model_dir)  # prepare() checked it exists
    model = build_model(config, strategy, context["num_classes"])
    checkpoints.restore_model(model, latest)
    path = export.export_for_step(model, config.model_dir, _step_of(latest),
                                  image_size=config.image_size,
                                  keep_hub_module_max=config.keep_hub_module_max)
    print(f"Exported {latest} to {path}", flush=True)
    return dict(saved_model=path)


def final_linear_probe(config, context):
    """Probe accuracy of the trained encoder and of a randomly initialised one."""
    source = context["source"]
    strategy = tf.distribute.get_strategy()
    trained = build_model(config, strategy, context["num_classes"])
    latest = tf.train.latest_checkpoint(config.model_dir)
    if latest is None:
        raise ConfigError("final_linear_probe", f"needs a trained checkpoint in "
                          f"{config.model_dir!r}; train first.")
    checkpoints.restore_model(trained, latest)
    keras.utils.set_random_seed(config.seed + 1)
    random_init = build_model(config, strategy, context["num_classes"])
    results = {}
    for name, model in (("pretrained", trained), ("random_init", random_init)):
        train, test = (features.extract(strategy, model, source, split,
                                        image_size=config.image_size,
                                        batch_size=config.eval_batch_size)
                       for split in (config.train_split, config.eval_split))
        result = probe.linear_probe(train[features.H], train["labels"],
                                    test[features.H], test["labels"], seed=config.seed)
        results[f"linear_probe/{name}"] = result["top_1_accuracy"]
    print(f"Linear probe (L-BFGS logistic regression on frozen h, {config.eval_split}): "
          f"pretrained encoder {results['linear_probe/pretrained']:.4f} vs randomly "
          f"initialised encoder {results['linear_probe/random_init']:.4f}", flush=True)
    return results


# ------------------------------------------------------------------ frozen-encoder
# evaluation: kNN monitor, --mode=linear_probe, --mode=embed


def make_knn_monitor(config, strategy, model, source):
    """The kNN monitor of a pretraining run (see `simclr_tf.evaluation.knn.KnnMonitor`)."""
    return knn.KnnMonitor(
        strategy, model, source, bank_split=_knn_bank_split(config),
        query_split=config.knn_eval_split, image_size=config.image_size,
        batch_size=config.eval_batch_size, k=config.knn_k,
        temperature=config.knn_temperature, max_bank=config.knn_max_bank,
        max_queries=config.knn_max_queries, seed=config.seed)


def run_knn_monitor(monitor, step, writer, verbose=True):
    """Evaluates, logs to TensorBoard (knn/...) and prints; returns result entries."""
    result = monitor.evaluate()
    values = {"knn/top_1_accuracy": result["top_1_accuracy"],
              "knn/seconds": result["seconds"]}
    write_scalars(writer, step, values)
    if verbose:
        print(f"kNN at step {step}: top-1 {result['top_1_accuracy']:.4f} on "
              f"{monitor.query_split} ({result['num_queries']} queries, bank of "
              f"{result['bank_size']} from {monitor.bank_split}, k={monitor.k}, "
              f"T={monitor.temperature:g}) in {result['seconds']:.1f} s", flush=True)
    return dict(values, **{"knn/global_step": step})


def load_trained_encoder(config, strategy, context):
    """The encoder to evaluate (no supervised head): model_dir's latest checkpoint,
    else --checkpoint (ours, an export or a released model). Returns (model, prefix)."""
    model = build_model(config, strategy, None)
    latest = tf.train.latest_checkpoint(config.model_dir) if config.model_dir else None
    if latest is not None:
        checkpoints.restore_model(model, latest)
        return model, latest
    if "official" in context:
        official.load_official_weights(model, config.checkpoint, supervised_head=False)
        return model, official.checkpoint_prefix(config.checkpoint)
    if config.checkpoint:
        return model, checkpoints.initialize_from(model, config.checkpoint)
    raise ConfigError("model_dir", f"has no checkpoint in {config.model_dir!r}; train "
                      "first or pass --checkpoint.")


def linear_probe_mode(config, strategy, context):
    """--mode=linear_probe: kNN and the paper's L-BFGS linear probe on frozen h, train
    split -> eval split, features cached in model_dir/features/."""
    model, prefix = load_trained_encoder(config, strategy, context)
    cache_dir = os.path.join(config.model_dir, "features") if config.model_dir else None
    row = transfer.evaluate_protocols(
        model, context["source"], strategy=strategy, image_size=config.image_size,
        train_split=config.train_split, test_split=config.eval_split,
        batch_size=config.eval_batch_size, knn_k=config.knn_k,
        knn_temperature=config.knn_temperature, cache_dir=cache_dir,
        encoder_id=transfer.encoder_identity(prefix), seed=config.seed)
    print(f"Linear probe (L-BFGS logistic regression on frozen h, C={row['linear_probe_c']:g} "
          f"chosen on a held-out part of {config.train_split}): top-1 "
          f"{row['linear_probe_top_1']:.4f} on {config.eval_split}; weighted kNN "
          f"(k={config.knn_k}) {row['knn_top_1']:.4f}; {row['num_train']} / "
          f"{row['num_test']} examples, features {'cached' if row['cached'] else 'computed'}"
          f" ({prefix}).", flush=True)
    return {"linear_probe/top_1_accuracy": row["linear_probe_top_1"],
            "linear_probe/c": row["linear_probe_c"],
            "linear_probe/validation_accuracy": row["linear_probe_validation_accuracy"],
            "knn/top_1_accuracy": row["knn_top_1"], "linear_probe/checkpoint": prefix,
            "linear_probe/num_train": row["num_train"],
            "linear_probe/num_test": row["num_test"]}


PROJECTOR_THUMBNAIL = 64  # sprite tiles at most this many pixels a side


def embed_mode(config, strategy, context):
    """--mode=embed: h (and z) of a split with ids and names to .npz / .parquet, and a
    TensorBoard projector view of a sample (model_dir/projector)."""
    source = context["source"]
    split = config.embed_split or config.eval_split
    path = config.embed_output
    if path is None:
        if not config.model_dir:
            raise ConfigError("embed_output", "is required when there is no --model_dir.")
        path = os.path.join(config.model_dir, "embeddings", f"{features.slug(split)}.npz")
    model, prefix = load_trained_encoder(config, strategy, context)
    outputs = (features.H, features.Z) if config.embed_projection else (features.H,)
    embedded = features.extract(strategy, model, source, split,
                                image_size=config.image_size,
                                batch_size=config.eval_batch_size, outputs=outputs)
    names = features.example_names(source, split, embedded["ids"])
    writers.write_embeddings(path, embedded, names=names)
    print(f"Wrote {len(names)} embeddings of {source.name}:{split} "
          f"(h{' and z' if config.embed_projection else ''}, {prefix}) to {path}", flush=True)
    results = {"embed/output": path, "embed/num_examples": len(names)}
    if config.embed_projector_size and config.model_dir:
        sample = features.bounded_ids(source, split, config.embed_projector_size,
                                      seed=config.seed)
        rows = (np.arange(len(names)) if sample is None
                else np.searchsorted(embedded["ids"], sample))
        images = features.sample_images(source, split, embedded["ids"][rows],
                                        image_size=config.image_size)
        side = min(config.image_size, PROJECTOR_THUMBNAIL)
        images = tf.image.resize(images, [side, side]).numpy()
        log_dir = os.path.join(config.model_dir, "projector")
        writers.write_projector(log_dir, embedded[features.H][rows],
                                embedded["labels"][rows], names[rows], images)
        print(f"Projector view of {len(rows)} examples: tensorboard --logdir {log_dir}",
              flush=True)
        results["embed/projector"] = log_dir
    return results
