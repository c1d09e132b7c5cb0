"""What every mode builds from the Config: the model, the Trainer (its step options,
blur and views), the training views (`view_options`, `draw_views`), the teacher, the
encoder to evaluate. The evaluators a mode runs:
`simclr_tf.run.modes.evaluations`; the export of a model: `simclr_tf.run.modes.export`."""
import dataclasses
import functools

import numpy as np
from absl import logging

from simclr_tf.method import optimizers, schedules
from simclr_tf.run import preflight
from simclr_tf.weights import checkpoints, teacher
from simclr_tf.config import ConfigError, rules, validation
from simclr_tf.augment.blur import batch_random_blur
from simclr_tf.data import pipeline
from simclr_tf.augment import device as device_augment
from simclr_tf.models.simclr import SimCLRModel, freeze_for_finetuning
from simclr_tf.config.tables import train_modes
from simclr_tf.method.train import StepOptions, Trainer

POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def build_model(config, strategy, num_classes):
    """Creates and builds the model under the strategy, frozen for fine-tuning
    (and distillation: --fine_tune_after_block, default -1, freezes nothing)."""
    if config.stem == "auto":
        logging.info("Stem: %s (--stem=auto: cifar when image_size <= 32)",
                     config.resolved_stem)
    with strategy.scope():
        model = SimCLRModel(**config.model_kwargs(num_classes),
                            dtype=POLICIES[config.mixed_precision])
        model.build((None, config.image_size, config.image_size, 3))
        if train_modes.get(config.train_mode).freezes:
            freeze_for_finetuning(model, config.fine_tune_after_block,
                                  batch_statistics=config.frozen_batch_norm == "batch")
    return model


def build_trainer(config, strategy, model, *, plan=None, teacher=None):
    """The Trainer of `config` for a built `model`: learning-rate schedule, optimizer
    and loss weight decay (resolved once), views and blur, under the strategy.

    Args:
        plan: the run's `schedules.StepPlan` (warmup + cosine over its steps); None
            for a constant rate (benchmarks).
        teacher: --train_mode=distill: the built `teacher.Teacher` (`build_teacher`).
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
    return Trainer(strategy, model, optimizer, step_options(config),
                   weight_decay_loss=decay, jit_compile=config.jit_compile,
                   teacher=teacher)


def build_teacher(config, strategy, info):
    """--teacher built under the strategy with every variable loaded, in the run's
    compute dtype (bfloat16 with --mixed_precision=bfloat16), seeing the student's
    --image_size images."""
    return teacher.build_teacher(info, strategy, image_size=config.image_size,
                                 dtype=POLICIES[config.mixed_precision])


def step_options(config):
    """The train step's `StepOptions` of `config`, made once (`Trainer` and
    `keras_fit.SimCLR` take them)."""
    return StepOptions(train_mode=config.train_mode, temperature=config.temperature,
                       hidden_norm=config.hidden_norm, blur_fn=blur_fn(config),
                       view_fn=view_fn(config), grad_cache_chunk=config.grad_cache_chunk,
                       seed=config.seed, distill_temperature=config.distill_temperature,
                       distill_alpha=config.distill_alpha,
                       objective_options=tuple(
                           validation.objective_option_values(config).items()))


def blur_fn(config):
    """The train step's batched blur (None when off); the Trainer seeds it."""
    if not train_modes.get(config.train_mode).blur or not config.use_blur:
        return None
    return functools.partial(batch_random_blur, height=config.image_size,
                             width=config.image_size)


def view_fn(config):
    """--augment_on=device: the views are drawn in the train step."""
    if config.augment_on != "device":  # pretraining only (validation)
        return None
    return device_augment.make_view_fn(config.image_size,
                                       color_jitter_strength=config.color_jitter_strength,
                                       impl=COLOR_JITTER_IMPL)


# No flag chooses the colour jitter's brightness: SimCLR v2's (multiplicative), the
# default of both augmentation paths; passed from here so that what a run used is
# named in one place (`describe_views` says it).
COLOR_JITTER_IMPL = "simclrv2"


def view_options(config):
    """`pipeline.build_input_fn`'s keyword arguments that choose the training views of
    `config`: its train mode (one view or two), size, colour strength and brightness,
    --augment_on and --augmentations. Training's stream, its view summary and
    `draw_views` (scripts/plot_run.py) take them from here."""
    return dict(train_mode=config.train_mode, image_size=config.image_size,
                color_jitter_strength=config.color_jitter_strength,
                impl=COLOR_JITTER_IMPL, augment_on=config.augment_on,
                augmentations=config.augmentations)


def draw_views(config, source, split, example_ids, seed):
    """The training views of examples of `split` as the train step of `config` sees
    them: the input pipeline with `view_options(config)`, then, when the step takes two
    views, its `augment.StepViews` (the views drawn on the device with
    --augment_on=device; --use_blur's blur) at step 0 with the run's seed replaced
    by `seed`. A draw of the run's recipe, not the views training drew for these
    examples (those follow from their position in the stream).

    Args:
        example_ids: ids of `split` (positions in its canonical order).
        seed: the seed of the draw (the pipeline's and the blur's).

    Returns:
        float32 [n, views, S, S, 3] in [0, 1], in the order of the sorted ids.
    """
    ids = np.unique(np.asarray(example_ids, np.int64))
    # The ids alone, unshuffled (a buffer of one): the batch is them in order.
    images, _ = next(iter(pipeline.build_input_fn(
        source, split, global_batch_size=len(ids), seed=seed, label_subset_ids=ids,
        shuffle_buffer_size=1, **view_options(config))(None)))
    if train_modes.get(config.train_mode).views == 1:
        return images.numpy()[:, None]
    step_views = dataclasses.replace(step_options(config).views, seed=seed)
    return np.stack([view.numpy() for view in step_views(images, step=0, replica=0)],
                    axis=1)


def describe_views(config):
    """The training views of `config` in words, e.g. "pretrain's two views: crop +
    flip + colour 0.5 (simclrv2), blur", "finetune's view: crop + flip",
    "pretrain's two views: resize only"."""
    row = train_modes.get(config.train_mode)
    words = dict(crop="crop", flip="flip",
                 color=f"colour {config.color_jitter_strength:g} ({COLOR_JITTER_IMPL})")
    recipe = " + ".join(words[name] for name in rules.augmentations(
        config.augmentations, row.views)) or "resize only"
    if blur_fn(config) is not None:
        recipe += ", blur"
    if row.views == 2 and config.augment_on == "device":
        recipe += " (drawn on the device)"
    return f"{config.train_mode}'s {'two views' if row.views == 2 else 'view'}: {recipe}"


def load_trained_encoder(config, strategy, context):
    """The encoder to evaluate (no supervised head): model_dir's latest checkpoint,
    else --checkpoint (ours, an export or a released model). Returns (model, prefix)."""
    model = build_model(config, strategy, None)
    if checkpoints.latest(config.model_dir) is not None:
        with preflight.flag_errors("model_dir"):
            return model, checkpoints.load_into(model, config.model_dir,
                                                whole_model=True).prefix
    if config.checkpoint:
        with preflight.flag_errors("checkpoint"):
            return model, checkpoints.load_into(model, config.checkpoint,
                                                whole_model=False).prefix
    raise ConfigError("model_dir", f"has no checkpoint in {config.model_dir!r}; train "
                      "first or pass --checkpoint.")
