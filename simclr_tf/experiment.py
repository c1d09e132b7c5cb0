"""One run of `run.py`: dispatches `--mode` and assembles the parts from the Config.

`run(config)`: seeds, strategy, `preflight` (every check before a model exists, no
side effects), model_dir and flags.json, then the mode's parts (`MODES`), then
optionally the final linear probe, and result.json. The parts are short assembly
functions: the model (`build_model`), the Trainer (`build_trainer`), checkpoints
(`simclr_tf.checkpoints`), the loop (`simclr_tf.loop`) and the evaluators
(`simclr_tf.evaluation`) do the work.
"""
import contextlib
import functools
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.plugins.hparams import api as hparams_api

from simclr_tf import checkpoints, distribute, export, loop, optimizers, preflight
from simclr_tf import run_lock
from simclr_tf import schedules
from simclr_tf.config import ConfigError
from simclr_tf.data import augment, device_augment, pipeline, subsets
from simclr_tf.evaluation import features, knn, probe, supervised, transfer, writers
from simclr_tf.models import SimCLRModel, freeze_for_finetuning
from simclr_tf.progress import TrainingProgress
from simclr_tf.train import Trainer

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
    source = preflight.load_source(config)
    context = preflight.check(config, strategy, source)
    writes = bool(config.model_dir) and _is_chief(strategy)
    if config.model_dir:
        _create_model_dir(config)
    with _lock(config, writes):
        if writes:
            _start_record(config)
        results = {}
        for part in MODES[config.mode]:
            results.update(part(config, strategy, context))
            if results.get("interrupted"):
                return results
        if config.final_linear_probe and config.mode in _TRAINING_MODES:
            results.update(final_linear_probe(config, context))
        results.update(skipped_images_record(source))
        if results and writes:
            write_json(record_path(config, "result"), results)
    return results


# --mode -> the file names of its record in model_dir. Training keeps flags.json /
# result.json (what `open_encoder` and users read); the other modes never overwrite
# them and write flags.<mode>.json / result.<mode>.json.
_TRAINING_MODES = ("train", "train_then_eval")


def record_path(config, kind):
    """model_dir/<kind>.json for training, model_dir/<kind>.<mode>.json otherwise."""
    name = f"{kind}.json" if config.mode in _TRAINING_MODES else f"{kind}.{config.mode}.json"
    return os.path.join(config.model_dir, name)


# Modes that only read model_dir's checkpoints (and write their own result files), so
# they may follow a running job: no lock.
READER_MODES = ("eval",)


def _lock(config, writes):
    if not writes or config.mode in READER_MODES:
        return contextlib.nullcontext()
    return run_lock.acquire(config.model_dir, config.mode, force=config.break_lock)


def _start_record(config):
    """The run's flags, written once preflight has passed and the lock is held; the
    mode's previous result is removed so that a run that fails leaves none."""
    flags_path = record_path(config, "flags")
    if config.mode in _TRAINING_MODES and tf.io.gfile.exists(flags_path):
        _log_changed_flags(flags_path, config)
    write_json(flags_path, config.to_dict())
    result_path = record_path(config, "result")
    if tf.io.gfile.exists(result_path):
        tf.io.gfile.remove(result_path)


def _log_changed_flags(path, config):
    try:
        with tf.io.gfile.GFile(path) as f:
            before = json.load(f)
    except (ValueError, OSError, tf.errors.OpError):
        return
    now = config.to_dict()
    changed = [f"{k}: {before[k]!r} -> {now[k]!r}" for k in sorted(now)
               if k in before and before[k] != now[k]]
    if changed:
        logging.warning("model_dir's flags.json records other flags; continuing with "
                        "the new ones (%s).", "; ".join(changed))


def skipped_images_record(source):
    """{'skipped_images': count, summary and {path: problem}} of an image folder
    whose scan or input pipeline skipped files; {} otherwise."""
    skipped = dict(getattr(source, "skipped_files", None) or {})
    if not skipped:
        return {}
    return dict(skipped_images=dict(count=len(skipped), summary=source.skipped_summary(),
                                    files=skipped))


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



def _create_model_dir(config):
    try:
        tf.io.gfile.makedirs(config.model_dir)
    except (OSError, tf.errors.OpError) as error:
        raise ConfigError("model_dir", f"{config.model_dir!r} cannot be created "
                          f"({error}); choose another directory.") from None


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


def build_trainer(config, strategy, model, *, plan=None):
    """The Trainer of `config` for a built `model`: learning-rate schedule, optimizer
    and loss weight decay (resolved once), views and blur, under the strategy.

    Args:
        plan: the run's `schedules.StepPlan` (warmup + cosine over its steps); None
            for a constant rate (benchmarks).
    """
    with strategy.scope():
        learning_rate = config.learning_rate
        if plan is not None:
            learning_rate = schedules.WarmUpAndCosine(
                config.learning_rate, batch_size=config.train_batch_size,
                warmup_steps=plan.warmup_steps, total_steps=plan.total_steps,
                scaling=config.learning_rate_scaling)
        optimizer, decay = optimizers.build_optimization(
            config.optimizer, learning_rate, model=model, momentum=config.momentum,
            weight_decay=config.weight_decay,
            loss_scaling=config.mixed_precision == "float16",
            head_rate_multiplier=config.head_rate_multiplier())
    if config.jit_compile and preflight.all_cpu(strategy):
        logging.warning("--jit_compile on CPU: XLA is measured ~2-3x slower than TF's "
                        "oneDNN kernels here (docs/performance.md); drop it on CPU.")
    return Trainer(strategy, model, optimizer, train_mode=config.train_mode,
                   temperature=config.temperature, hidden_norm=config.hidden_norm,
                   weight_decay_loss=decay, blur_fn=blur_fn(config), seed=config.seed,
                   jit_compile=config.jit_compile, view_fn=view_fn(config),
                   grad_cache_chunk=config.grad_cache_chunk)


def blur_fn(config):
    """The train step's batched blur (None when off); the Trainer seeds it."""
    if config.train_mode != "pretrain" or not config.use_blur:
        return None
    return functools.partial(augment.batch_random_blur, height=config.image_size,
                             width=config.image_size)


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
        subset = subsets.make_label_subset(source, split, config.label_fraction,
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
    trainer = build_trainer(config, strategy, model, plan=plan)
    chief = _is_chief(strategy)
    # Non-chief workers save too (see CheckpointState) but into their own scratch dir.
    scratch_dir = None if chief else _worker_scratch_dir(config.model_dir, strategy)
    state = checkpoints.CheckpointState(config.model_dir, model, trainer.optimizer,
                                        max_to_keep=config.keep_checkpoint_max,
                                        save_dir=scratch_dir)
    initialized_from = initialize(config, model, state)
    step = trainer.step
    dataset = pipeline.build_distributed_dataset(
        strategy, source, split, global_batch_size=config.train_batch_size,
        is_training=True, train_mode=config.train_mode, image_size=config.image_size,
        color_jitter_strength=config.color_jitter_strength, cache=config.cache_dataset,
        seed=config.seed, label_subset_ids=subset_ids, start_step=step,
        augment_on=config.augment_on if config.train_mode == "pretrain" else "host")
    writer = tf.summary.create_file_writer(scratch_dir or config.model_dir)
    if step == 0 and chief:
        write_hparams(writer, config)
        write_view_summary(config, source, split, writer)
    steps_per_epoch = num_examples / config.train_batch_size
    print(f"Training {plan.total_steps} steps ({plan.total_steps / steps_per_epoch:.3g} "
          f"epochs of {num_examples} examples; {step} done), checkpoint every "
          f"{plan.checkpoint_steps}, batch {config.train_batch_size}, "
          f"{strategy.num_replicas_in_sync} replica(s).", flush=True)
    progress = TrainingProgress(total_steps=plan.total_steps, start_step=step,
                                steps_per_epoch=steps_per_epoch,
                                style=config.progress if chief else "none")

    def log(step, logs):
        progress.log(step, logs)
        return write_train_summaries(writer, step, logs, trainer.optimizer)

    hooks = [loop.Every(config.log_every_steps or plan.checkpoint_steps, log)]
    if config.knn_eval_split and config.train_mode == "pretrain":
        monitor = make_knn_monitor(config, strategy, model, source)
        hooks.append(loop.Every(config.knn_eval_every or plan.checkpoint_steps,
                                lambda step, logs: run_knn_monitor(monitor, step, writer,
                                                                   verbose=chief)))
    if scratch_dir is not None:
        hooks.append(loop.AtEnd(lambda step, logs: _remove_scratch(writer, scratch_dir)))
    if chief:
        hooks.append(loop.AtEnd(lambda step, logs: dict(saved_model=_export(
            model, config, step))))
    results = loop.train(trainer=trainer, iterator=iter(dataset), checkpoints=state,
                         total_steps=plan.total_steps, checkpoint_steps=plan.checkpoint_steps,
                         hooks=hooks, verbose=chief, progress=progress)
    if results["interrupted"]:
        return results
    del results["logs"], results["interrupted"]  # the summaries' train/* are in
    return dict(results, **{"train/initialized_from": initialized_from})


def initialize(config, model, state):
    """The weights a training run starts from: model_dir's newest checkpoint that
    loads (resume), else --checkpoint, else random. Returns what was used, for the
    record ("resumed <prefix>", the prefix read, or "random")."""
    resumed = state.recover()
    if resumed:
        print(f"Resumed from {resumed}.", flush=True)
        initialized_from = f"resumed {resumed}"
    elif config.checkpoint:
        # A supervised head that fits is loaded, from any source (the authors' TF2
        # behaviour), unless --zero_init_logits_layer keeps it at zero (their TF1
        # protocol, the paper's).
        weights = checkpoints.load_into(
            model, config.checkpoint, whole_model=False,
            supervised_head=not config.zero_init_logits_layer)
        print(f"Initialised from {weights.prefix} ({weights.kind}).", flush=True)
        initialized_from = weights.prefix
    else:
        initialized_from = "random"
        if config.train_mode == "finetune":
            print("Fine-tuning from randomly initialised weights: no --checkpoint was "
                  "given and model_dir has none, so this is supervised training from "
                  "scratch (recorded as train/initialized_from=random). Pass "
                  "--checkpoint=<a pretraining run> to fine-tune a pretrained encoder.",
                  flush=True)
    return initialized_from


class ExportError(RuntimeError):
    """Exporting the SavedModel failed; the checkpoints are intact."""


def _export(model, config, step):
    """model_dir/saved_model/<step>; an I/O failure (a full disk) names what is safe
    and how to retry."""
    try:
        return export.export_for_step(model, config.model_dir, step,
                                      image_size=config.image_size,
                                      keep_hub_module_max=config.keep_hub_module_max,
                                      max_pixels=config.serving_max_pixels)
    except (OSError, tf.errors.OpError) as error:
        raise ExportError(
            f"Exporting the SavedModel of step {step} to {config.model_dir}/saved_model "
            f"failed: {str(error).strip().splitlines()[0][:300]}. The checkpoints are "
            "saved and intact; free space (or fix the path) and run the same flags with "
            "--mode=export.") from None


def write_hparams(writer, config):
    """The run's configuration in TensorBoard's hparams plugin (None values as '')."""
    values = {name: ("" if value is None else value)
              for name, value in config.to_dict().items()
              if value is None or isinstance(value, (bool, int, float, str))}
    with writer.as_default(step=0):
        hparams_api.hparams(values)
    writer.flush()


def write_train_summaries(writer, step, logs, optimizer):
    """TensorBoard scalars of a checkpoint interval under the authors' names, as
    their means over the interval; `train/learning_rate` is the rate at `step`, as
    theirs. Returns the values (for result.json)."""
    values = {f"train/{SUMMARY_NAMES.get(k, k)}": float(v) for k, v in logs.items()
              if k not in ("num_examples",)}
    values["train/learning_rate"] = float(optimizer.learning_rate)
    write_scalars(writer, step, values)
    return values


def _remove_scratch(writer, scratch_dir):
    writer.close()
    tf.io.gfile.rmtree(scratch_dir)


def _worker_scratch_dir(model_dir, strategy):
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, f".scratch_{resolver.task_type}_{resolver.task_id}")


# Trainer log names -> the authors' TensorBoard / result.json names (train/total_loss,
# train/contrast_loss, train/contrast_acc, train/contrast_entropy,
# train/supervised_loss, train/supervised_acc, train/weight_decay,
# train/learning_rate); our extras (grad_norm, examples_per_sec) keep their names.
SUMMARY_NAMES = dict(loss="total_loss", sup_loss="supervised_loss",
                     label_acc="supervised_acc")


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
    # The weight-decay term of the loss at these weights (the authors'
    # eval/regularization_loss): with LARS the supervised head's only.
    regularization = optimizers.weight_decay_loss(model, config.optimizer,
                                                  config.weight_decay)
    dataset = features.eval_dataset(context["source"], config.eval_split,
                                    image_size=config.image_size,
                                    batch_size=config.eval_batch_size)
    results = {}
    for path in _checkpoints_to_evaluate(config):
        flag = "checkpoint" if path == config.checkpoint else "model_dir"
        prefix = checkpoints.load_into(model, path, whole_model=True, flag=flag).prefix
        step = checkpoints.step_of(prefix, 0)
        metrics = evaluator(dataset, steps=config.eval_steps or None)
        print(f"Eval on {config.eval_split} at step {step}: top-1 "
              f"{metrics['top_1_accuracy']:.4f}, top-5 {metrics['top_5_accuracy']:.4f} "
              f"({metrics['num_examples']} examples, {prefix})", flush=True)
        # The authors' names; ours (supervised_loss, num_examples) beside them.
        results = {"eval/label_top_1_accuracy": metrics["top_1_accuracy"],
                   "eval/label_top_5_accuracy": metrics["top_5_accuracy"],
                   "eval/regularization_loss": float(regularization()),
                   "eval/supervised_loss": metrics["loss"],
                   "eval/num_examples": metrics["num_examples"], "global_step": step}
        if config.model_dir:
            write_scalars(tf.summary.create_file_writer(config.model_dir), step,
                          {k: v for k, v in results.items() if "accuracy" in k or "loss" in k})
            write_json(os.path.join(config.model_dir, f"result_{step}.json"), results)
    if not results:
        # Only a waiting evaluator gets here (preflight found nothing to load yet).
        raise ConfigError("eval_wait_secs", f"no checkpoint appeared in "
                          f"{config.model_dir!r} in {config.eval_wait_secs} s of waiting, "
                          "so nothing was evaluated; start the training run with this "
                          "--model_dir first, or wait longer (a larger --eval_wait_secs).")
    return results


def _checkpoints_to_evaluate(config):
    """Paths of the weights to evaluate, in order."""
    if config.eval_wait_secs <= 0:
        # preflight has checked that one of the two exists.
        yield config.model_dir if checkpoints.latest(config.model_dir) else config.checkpoint
        return
    # Follow a training run: evaluate each new checkpoint as it appears (found like
    # a resume finds them, so a damaged state file does not stop the evaluator).
    last, since = None, time.monotonic()
    while time.monotonic() - since <= config.eval_wait_secs:
        prefix = checkpoints.latest(config.model_dir)
        if prefix is not None and prefix != last:
            last = prefix
            yield prefix
            since = time.monotonic()
        else:
            time.sleep(1)


def export_latest(config, strategy, context):
    """--mode=export: a SavedModel of the latest checkpoint in model_dir."""
    model = build_model(config, strategy, context["num_classes"])
    # preflight checked that model_dir has a checkpoint; the newest that loads.
    latest = checkpoints.load_into(model, config.model_dir, whole_model=True,
                                   flag="model_dir").prefix
    path = _export(model, config, checkpoints.step_of(latest, 0))
    print(f"Exported {latest} to {path}", flush=True)
    return dict(saved_model=path)


def final_linear_probe(config, context):
    """Probe accuracy of the trained encoder and of a randomly initialised one."""
    source = context["source"]
    strategy = tf.distribute.get_strategy()
    trained = build_model(config, strategy, context["num_classes"])
    if checkpoints.latest(config.model_dir) is None:
        raise ConfigError("final_linear_probe", f"needs a trained checkpoint in "
                          f"{config.model_dir!r}; train first.")
    checkpoints.load_into(trained, config.model_dir, whole_model=True, flag="model_dir")
    keras.utils.set_random_seed(config.seed + 1)
    random_init = build_model(config, strategy, context["num_classes"])
    results = {}
    for name, model in (("pretrained", trained), ("random_init", random_init)):
        extractor = features.FeatureExtractor(strategy, model, (features.H,))
        train, test = (features.extract(strategy, model, source, split,
                                        image_size=config.image_size,
                                        batch_size=config.eval_batch_size,
                                        extractor=extractor)
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
        strategy, model, source, bank_split=preflight.knn_bank_split(config),
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
    if checkpoints.latest(config.model_dir) is not None:
        return model, checkpoints.load_into(model, config.model_dir, whole_model=True,
                                            flag="model_dir").prefix
    if config.checkpoint:
        return model, checkpoints.load_into(model, config.checkpoint,
                                            whole_model=False).prefix
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


# --mode -> what it runs, in order (a SIGTERM during training stops the rest). A new
# mode is a function `(config, strategy, context) -> results` here, its name in this
# table and in the flag's choices (`config.Config.mode`).
MODES = {
    "train": (train,),
    "eval": (evaluate,),
    "train_then_eval": (train, evaluate),
    "export": (export_latest,),
    "linear_probe": (linear_probe_mode,),
    "embed": (embed_mode,),
}
