"""The parts every mode assembles from the Config: the model, the Trainer, the
exported SavedModel, the encoder to evaluate, the evaluators and their loop (and the
loop hook that runs them during training), TensorBoard scalars (JSON records:
`simclr_tf.records`)."""
import functools
import json
import os

import tensorflow as tf
from absl import logging

from simclr_tf import checkpoints, export, loop, objectives, optimizers, preflight, \
    records, schedules, teacher
from simclr_tf.config import ConfigError
from simclr_tf.data import augment, device_augment
from simclr_tf.evaluation import registry
from simclr_tf.models import SimCLRModel, freeze_for_finetuning
from simclr_tf.train import StepOptions, Trainer

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
        if objectives.get(config.train_mode).freezes:
            freeze_for_finetuning(model, config.fine_tune_after_block)
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
                       objective_options=tuple(json.loads(config.objective_options or
                                                          "{}").items()))


def blur_fn(config):
    """The train step's batched blur (None when off); the Trainer seeds it."""
    if not objectives.get(config.train_mode).blur or not config.use_blur:
        return None
    return functools.partial(augment.batch_random_blur, height=config.image_size,
                             width=config.image_size)


def view_fn(config):
    """--augment_on=device: the views are drawn in the train step."""
    if config.augment_on != "device":  # pretraining only (validation)
        return None
    return device_augment.make_view_fn(config.image_size,
                                       color_jitter_strength=config.color_jitter_strength)


class ExportError(RuntimeError):
    """Exporting the SavedModel failed; the checkpoints are intact."""


def export_model(model, config, step, *, write_guard=None):
    """model_dir/saved_model/<step>; an I/O failure (a full disk) names what is safe
    and how to retry. The rotation keeps every export whose step has no intact
    checkpoint in model_dir: it is the only copy of those weights. `write_guard` (the
    run's lock check) is asked first: a run that lost model_dir exports nothing."""
    if write_guard is not None:
        write_guard()
    try:
        return export.export_for_step(model, config.model_dir, step,
                                      image_size=config.image_size,
                                      keep_hub_module_max=config.keep_hub_module_max,
                                      max_pixels=config.serving_max_pixels,
                                      only_copies=_exports_without_checkpoint(config))
    except (OSError, tf.errors.OpError) as error:
        raise ExportError(
            f"Exporting the SavedModel of step {step} to {config.model_dir}/saved_model "
            f"failed: {str(error).strip().splitlines()[0][:300]}. The checkpoints are "
            "saved and intact; free space (or fix the path) and run the same flags with "
            "--mode=export.") from None


def _exports_without_checkpoint(config):
    """Steps of model_dir's exports that no intact checkpoint of model_dir holds."""
    prefixes, _ = checkpoints.candidates(config.model_dir)
    intact = {checkpoints.step_of(p) for p in prefixes
              if checkpoints.unreadable_reason(p) is None}
    return [s for s in export.exported_steps(config.model_dir) if s not in intact]


def is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver is None or resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0)


def write_scalars(writer, step, values):
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.scalar(name, float(value))
    writer.flush()


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


# ------------------------------------------------------------------ evaluators

# Evaluator name -> its own arguments, read from the Config; the common ones
# (`evaluators_for`) go to every evaluator, so one that reads no flag of its own
# needs no entry.
EVALUATOR_ARGUMENTS = {
    "supervised": lambda config: dict(
        split=config.eval_split, steps=config.eval_steps or None,
        optimizer=config.optimizer, weight_decay=config.weight_decay),
    "knn": lambda config: dict(
        bank_split=preflight.knn_bank_split(config), query_split=config.knn_eval_split,
        k=config.knn_k, temperature=config.knn_temperature,
        max_bank=config.knn_max_bank, max_queries=config.knn_max_queries,
        allow_overlap=config.allow_eval_overlap),
    "linear_probe": lambda config: dict(
        train_split=config.train_split, test_split=config.eval_split, k=config.knn_k,
        temperature=config.knn_temperature,
        cache_dir=os.path.join(config.model_dir, "features") if config.model_dir else None,
        allow_overlap=config.allow_eval_overlap),
    "final_probe": lambda config: dict(train_split=config.train_split,
                                       test_split=config.eval_split,
                                       allow_overlap=config.allow_eval_overlap),
    "distill": lambda config: dict(split=config.eval_split,
                                   steps=config.eval_steps or None),
}


def evaluators_for(config, strategy, source, names, **objects):
    """The evaluators `names` (`simclr_tf.evaluation.registry`) of a run, built from
    the Config here and nowhere else.

    Args:
        config: the run's Config.
        strategy: the run's strategy (the evaluators run the models under it).
        source: the `DatasetSource` evaluated.
        names: registry names, in the order they run.
        **objects: arguments that are objects, not flags (the final probe's
            `baseline` encoder), given to each evaluator built.
    """
    common = dict(source=source, image_size=config.image_size,
                  batch_size=config.eval_batch_size, seed=config.seed)
    return [registry.get_evaluator(name)(
        strategy, **common, **EVALUATOR_ARGUMENTS.get(name, lambda config: {})(config),
        **objects) for name in names]


def overlap_record(context):
    """The result entries of what `preflight.check_eval_overlap` found, when this run
    evaluates: `eval_overlaps_train` (True when --allow_eval_overlap let a split that
    shares examples with the weights' training split, a kNN bank or a probe's
    training split be evaluated) and `eval_overlap` (each such overlap: both flags,
    both splits, the shared examples and of how many); {} when nothing is
    evaluated."""
    overlaps = context.get("eval_overlap")
    if overlaps is None:
        return {}
    return {"eval_overlaps_train": bool(overlaps), "eval_overlap": list(overlaps)}


def recorded_result(model_dir, path, step):
    """The entries of the result record at `path` when it is of `step` (a rerun of
    an evaluation already recorded), else None; never raises."""
    if not model_dir or not path:
        return None
    try:
        if not tf.io.gfile.exists(path):
            return None
        recorded = records.read_json(path)
    except (ValueError, OSError, tf.errors.OpError):
        return None
    if not isinstance(recorded, dict) or recorded.get("global_step", step) != step:
        return None
    return recorded


def say_line(text):
    """What the modes print by default: one flushed line."""
    print(text, flush=True)


def run_evaluators(evaluators, model, step, *, writer=None, checkpoint=None,
                   say=say_line, recorded=None, metrics_log=None, model_dir=None):
    """Runs each evaluator on `model` at `step`: what it is about to do (`announce`,
    for one that takes a while) and its line told to `say` (None: silent), its
    scalars to `writer` (None: no TensorBoard) and to `metrics_log` (a
    `records.MetricsLog`, training's metrics.jsonl: one line of them all; None: not
    there). Returns their entries merged, under the names they gave (the mode's
    result entries), with each accuracy's protocol (`Evaluator.protocols`) as the
    entry `protocol/<name>`.

    Args:
        checkpoint: the prefix the weights came from (None: weights in memory).
        recorded: the entries a record already holds for this step (a rerun): an
            evaluator whose values equal them writes no second TensorBoard point.
        model_dir: the run directory the result goes to: the protocols' checkpoint
            paths are relative to it (`records.run_relative`).
    """
    results, logged = {}, {}
    for evaluator in evaluators:
        evaluator.say = say
        if say is not None and evaluator.announce() is not None:
            say(evaluator.announce())
        values = evaluator.run(model, step, checkpoint=checkpoint)
        scalars = evaluator.scalars(values)
        repeated = recorded is not None and all(
            recorded.get(name) == value for name, value in scalars.items())
        if writer is not None and not repeated:
            write_scalars(writer, step, scalars)
        logged.update(scalars)
        if say is not None:
            say(evaluator.describe(values, step=step, checkpoint=checkpoint))
        results.update(values)
        for name, protocol in evaluator.protocols(values, step=step,
                                                  checkpoint=checkpoint).items():
            results[records.PROTOCOL_PREFIX + name] = with_checkpoint(
                protocol, checkpoint, step, model_dir)
    if metrics_log is not None and logged:
        metrics_log.append(step, logged)
    return results


def with_checkpoint(protocol, checkpoint, step, model_dir):
    """`protocol` with its `checkpoint` entry: {path, step} of the weights measured
    (the evaluator's own, e.g. a teacher's, else `checkpoint` at `step`; a path
    None: weights in memory, written to no checkpoint at that step), the path
    relative to `model_dir` (`records.run_relative`)."""
    entry = dict(protocol.get("checkpoint") or dict(path=checkpoint, step=step))
    entry["path"] = records.run_relative(entry.get("path"), model_dir)
    return dict(protocol, checkpoint=entry)


def evaluation_hook(every, evaluators, model, *, writer, say=say_line, metrics_log=None,
                    state=None, model_dir=None):
    """A loop hook running `evaluators` on the training model every `every` steps
    and after the last (`run_evaluators`: TensorBoard, `metrics_log`, the line told
    to `say`); the run's results get the last entries. `state` (the run's
    `checkpoints.CheckpointState`): the protocols name its checkpoint of the step
    evaluated, when one was written at it (hooks run after the step's checkpoint)."""
    def run(step, logs):
        latest = state.latest if state is not None else None
        saved = latest if latest and checkpoints.step_of(latest) == step else None
        return run_evaluators(evaluators, model, step, writer=writer, say=say,
                              metrics_log=metrics_log, checkpoint=saved,
                              model_dir=model_dir)

    return loop.Every(every, run, at_interrupt=False)  # slow: not while preempted
