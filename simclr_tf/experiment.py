"""One run of `run.py`: everything between a validated Config and the results.

Checks that need the dataset or the strategy run first, before any model is built
(split names, labels for fine-tuning, batch divisible by the replicas, a writable
model_dir, an existing --checkpoint). Then train (pretrain or finetune) with
checkpoints every `checkpoint_steps`, resuming from model_dir, then evaluate, then
optionally the linear probe of the pretrained encoder next to a random one.
"""
import functools
import json
import os
import time

import keras
import tensorflow as tf
from absl import logging

from simclr_tf import (checkpoints, distribute, export, official, optimizers, probe,
                       schedules)
from simclr_tf.config import ConfigError
from simclr_tf.data import augment, datasets, pipeline
from simclr_tf.models import SimCLRModel, freeze_for_finetuning
from simclr_tf.train import Trainer

POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def run(config):
    """Runs `config.mode` and returns a dict of results (also written to model_dir)."""
    keras.utils.set_random_seed(config.seed)
    strategy = create_strategy(config)
    source = load_source(config)
    context = prepare(config, strategy, source)
    results = {}
    if config.mode in ("train", "train_then_eval"):
        results.update(train(config, strategy, context))
    if config.mode in ("eval", "train_then_eval"):
        results.update(evaluate(config, strategy, context))
    if config.mode == "export":
        results.update(export_latest(config, strategy, context))
    if config.final_linear_probe:
        results.update(final_linear_probe(config, context))
    if results and config.model_dir:
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
        return datasets.get_dataset(config.dataset, data_dir=config.data_dir)
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
    if config.checkpoint:
        try:
            checkpoints.resolve_checkpoint_path(config.checkpoint)
        except FileNotFoundError as error:
            raise ConfigError("checkpoint", str(error)) from None
        if official.is_official_savedmodel(config.checkpoint):
            context["official"] = check_official_architecture(config)
    if config.model_dir:
        try:
            tf.io.gfile.makedirs(config.model_dir)
            probe_file = os.path.join(config.model_dir, ".write_test")
            with tf.io.gfile.GFile(probe_file, "w") as f:
                f.write("ok")
            tf.io.gfile.remove(probe_file)
        except (OSError, tf.errors.OpError) as error:
            raise ConfigError("model_dir", f"{config.model_dir!r} is not writable "
                              f"({error}); choose another directory.") from None
        write_json(os.path.join(config.model_dir, "flags.json"), config.to_dict())
    return context


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


def write_json(path, values):
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(values, indent=2, sort_keys=True, default=float))


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


def _blur_fn(config):
    if config.train_mode != "pretrain" or not config.use_blur:
        return None
    return functools.partial(augment.batch_random_blur, height=config.image_size,
                             width=config.image_size)


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
                      blur_fn=_blur_fn(config), jit_compile=config.jit_compile)
    state = checkpoints.CheckpointState(config.model_dir, model, optimizer,
                                        max_to_keep=config.keep_checkpoint_max)
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
        seed=config.seed, label_subset_ids=subset_ids, start_step=step)
    iterator = iter(dataset)
    writer = tf.summary.create_file_writer(config.model_dir)
    if step == 0:
        write_view_summary(config, source, split, writer)
    logs = {}
    start = time.perf_counter()
    chief = _is_chief(strategy)
    print(f"Training {plan.total_steps} steps ({step} done), checkpoint every "
          f"{plan.checkpoint_steps}, batch {config.train_batch_size}, "
          f"{strategy.num_replicas_in_sync} replica(s).", flush=True)
    while step < plan.total_steps:
        chunk = min(plan.checkpoint_steps - step % plan.checkpoint_steps,
                    plan.total_steps - step)
        logs = trainer.run(iterator, chunk, verbose=1 if chief else 0)
        step = int(optimizer.iterations.numpy())
        state.save(step)
        write_scalars(writer, step, {f"train/{SUMMARY_NAMES.get(k, k)}": v
                                     for k, v in logs.items() if k != "num_examples"})
    results = dict(global_step=step, train_seconds=time.perf_counter() - start,
                   **{f"train/{SUMMARY_NAMES.get(k, k)}": float(v) for k, v in logs.items()})
    if chief:
        results["saved_model"] = export.export_for_step(
            model, config.model_dir, step, image_size=config.image_size,
            keep_hub_module_max=config.keep_hub_module_max)
    return results


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


def _eval_dataset(config, source, split, batch_size):
    return pipeline.build_input_fn(source, split, global_batch_size=batch_size,
                                   is_training=False, image_size=config.image_size)(None)


def evaluate(config, strategy, context):
    """Top-1/top-5 of the supervised head on the eval split, for the latest checkpoint
    (or, with --eval_wait_secs > 0, for each new one until none comes for that long)."""
    model = build_model(config, strategy, context["num_classes"])
    trainer = Trainer(strategy, model, keras.optimizers.SGD(0.0),
                      train_mode=config.train_mode)
    dataset = _eval_dataset(config, context["source"], config.eval_split,
                            config.eval_batch_size)
    results = {}
    for prefix in _checkpoints_to_evaluate(config):
        checkpoints.restore_model(model, prefix)
        step = _step_of(prefix)
        metrics = trainer.evaluate(dataset, steps=config.eval_steps or None)
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
        if latest is None:
            if not config.checkpoint:
                raise ConfigError("model_dir", f"has no checkpoint to evaluate in "
                                  f"{config.model_dir!r}; train first, pass --checkpoint, "
                                  "or wait for one with --eval_wait_secs.")
            latest = checkpoints.resolve_checkpoint_path(config.checkpoint)
        yield latest
        return
    # Follow a training run: evaluate each new checkpoint as it appears.
    for prefix in tf.train.checkpoints_iterator(config.model_dir, min_interval_secs=1,
                                                timeout=config.eval_wait_secs):
        yield prefix


def export_latest(config, strategy, context):
    """--mode=export: a SavedModel of the latest checkpoint in model_dir."""
    latest = tf.train.latest_checkpoint(config.model_dir)
    if latest is None:
        raise ConfigError("model_dir", f"has no checkpoint to export in "
                          f"{config.model_dir!r}; train first.")
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
    train_data = _eval_dataset(config, source, config.train_split, config.eval_batch_size)
    eval_data = _eval_dataset(config, source, config.eval_split, config.eval_batch_size)
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
        train_x, train_y = probe.extract_features(model, train_data)
        test_x, test_y = probe.extract_features(model, eval_data)
        result = probe.linear_probe(train_x, train_y, test_x, test_y, seed=config.seed)
        results[f"linear_probe/{name}"] = result["top_1_accuracy"]
    print(f"Linear probe (L-BFGS logistic regression on frozen h, {config.eval_split}): "
          f"pretrained encoder {results['linear_probe/pretrained']:.4f} vs randomly "
          f"initialised encoder {results['linear_probe/random_init']:.4f}", flush=True)
    return results
