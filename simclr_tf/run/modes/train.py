"""--mode=train: the training run (pretrain, fine-tune or distil) from a Config: data,
schedule, model (and the distillation teacher), Trainer, checkpoints, hooks
(summaries, progress, the kNN or distillation monitor, the final export) and the
loop."""
import os
import time

import numpy as np
import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

from simclr_tf.config import rules
from simclr_tf.method import schedules
from simclr_tf.run import distribute, loop, machine, preflight, quiet
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints
from simclr_tf.weights import teacher as teacher_module
from simclr_tf.data import pipeline, subsets
from simclr_tf.run.modes import evaluations, parts
from simclr_tf.run.modes import export as export_mode
from simclr_tf.run.progress import TrainingProgress
from simclr_tf.config.tables import evaluators as evaluator_table
from simclr_tf.config.tables import train_modes


def train(config, strategy, context):
    source = context.source
    objective = train_modes.get(config.train_mode)
    split, subset_ids, labelled_ids = config.train_split, None, None
    num_examples = context.num_train_examples
    if objective.labels == "required" and config.label_fraction < 1.0:
        subset = label_subset(config, source, split)
        source, split, subset_ids = subset.source, subset.split, subset.example_ids
        print(describe_label_subset(config, subset, num_examples), flush=True)
        num_examples = subset.num_examples
    if objective.labels == "optional":
        labelled_ids = distillation_labels(config, source, split)
    plan = step_plan(config, num_examples)
    model = parts.build_model(config, strategy, context.num_classes)
    teacher = None
    if objective.needs_teacher:
        with preflight.flag_errors("teacher"):
            teacher = parts.build_teacher(config, strategy, context.teacher)
        print(describe_teacher(config, teacher.info), flush=True)
    trainer = parts.build_trainer(config, strategy, model, plan=plan, teacher=teacher)
    chief = distribute.is_chief(strategy)
    # Non-chief workers save too (see CheckpointState) but into their own scratch dir.
    scratch_dir = None if chief else _worker_scratch_dir(config.model_dir, strategy)
    guard = context.write_guard
    state = checkpoints.CheckpointState(config.model_dir, model, trainer.optimizer,
                                        max_to_keep=config.keep_checkpoint_max,
                                        save_dir=scratch_dir, write_guard=guard,
                                        objective_state=trainer.objective.state())
    initialized_from = initialize(config, model, state)
    if teacher is not None and chief:
        # What a resume learns from: these weights, whatever --teacher resolves to then.
        if not teacher.info.pinned:
            teacher_module.write_pin(config.model_dir, config.teacher, teacher.info,
                                     write_guard=guard)
    step = trainer.step
    dataset = pipeline.build_distributed_dataset(
        strategy, source, split, global_batch_size=config.train_batch_size,
        label_subset_ids=subset_ids, labelled_ids=labelled_ids, start_step=step,
        **input_options(config))
    writer = tf.summary.create_file_writer(scratch_dir or config.model_dir)
    if chief:
        write_session_start(writer, step)
    if step == 0 and chief:
        write_hparams(writer, config)
        write_view_summary(config, source, split, writer)
    steps_per_epoch = num_examples / config.train_batch_size
    note = rules.small_batch_note(config.train_batch_size) if (
        objective.contrastive_batch and chief) else None
    if note:
        print(f"Warning: {note}", flush=True)
    hint = machine.bfloat16_hint(
        mixed_precision=config.mixed_precision, given=config.is_given("mixed_precision"),
        all_cpu=preflight.all_cpu(strategy)) if step == 0 and chief else None
    if hint:  # a new run only: a resumed one keeps its precision
        print(f"Hint: {hint}", flush=True)
    print(f"Training {plan.total_steps} steps ({plan.total_steps / steps_per_epoch:.3g} "
          f"epochs of {num_examples} examples; {step} done), checkpoint every "
          f"{plan.checkpoint_steps}, batch {config.train_batch_size}, "
          f"{strategy.num_replicas_in_sync} replica(s).", flush=True)
    progress = TrainingProgress(total_steps=plan.total_steps, start_step=step,
                                steps_per_epoch=steps_per_epoch,
                                style=config.progress if chief else "none")

    scalars_every, lines_every = rules.log_intervals(
        config.log_every_steps, plan.total_steps, plan.checkpoint_steps)
    metrics_log = records.MetricsLog(config.model_dir, start_step=step,
                                     write_guard=guard) if chief else None

    def log(step, logs):
        values = write_train_summaries(writer, step, logs)
        if metrics_log is not None:
            metrics_log.append(step, values)
        return values

    hooks = [loop.Every(scalars_every, log),
             loop.Every(lines_every, lambda step, logs: progress.log(step, logs))]
    for every, monitors in training_monitors(config, strategy, source, teacher,
                                             plan.checkpoint_steps):
        hooks.append(evaluations.evaluation_hook(every, monitors, model, writer=writer,
                                                 say=progress.note if chief else None,
                                                 metrics_log=metrics_log, state=state,
                                                 model_dir=config.model_dir))
    if scratch_dir is not None:
        hooks.append(loop.AtEnd(lambda step, logs: _remove_scratch(writer, scratch_dir)))
    export_failure = []
    if chief:
        def export_at_end(step, logs):  # pylint: disable=unused-argument
            try:
                return export_mode.export_model(model, config, step, write_guard=guard)
            except export_mode.ExportError as error:
                # The run's record is written first (experiment raises it after).
                export_failure.append(str(error))
                return {}
        hooks.append(loop.AtEnd(export_at_end))
    # Continuing model_dir's checkpoints, flags.json takes this run's flags with its
    # first checkpoint (`records.FlagsRecord`).
    saving = _RecordsFlagsWhenSaving(state, context.flags_record)
    with quiet.dataset_notices_dropped():
        iterator = iter(dataset)
    results = loop.train(trainer=trainer, iterator=iterator, checkpoints=saving,
                         total_steps=plan.total_steps, checkpoint_steps=plan.checkpoint_steps,
                         hooks=hooks, progress=progress)
    if results["interrupted"]:
        return results
    del results["logs"], results["interrupted"]  # the summaries' train/* are in
    first = max(step, (plan.total_steps - 1) // scalars_every * scalars_every)
    protocols = training_protocols(
        config, results, split=split if subset_ids is None else (
            f"{config.train_split}, its --label_fraction={config.label_fraction:g} "
            f"subset (model_dir/label_subset_ids.txt)"),
        steps=(first + 1, plan.total_steps), checkpoint=state.latest)
    return dict(results, **{"train/initialized_from": initialized_from},
                **protocols, **evaluations.overlap_record(context),
                **({export_mode.EXPORT_FAILED: export_failure[0]} if export_failure else {}))


def training_monitors(config, strategy, source, teacher, checkpoint_steps):
    """[(every, evaluators)]: the monitors of the training model
    (`tables.evaluators.resolve`: --evaluators, else the train mode's), one hook's
    worth per interval flag in the order first named: the kNN monitor every
    --knn_eval_every steps (0: at every checkpoint), the others (e.g. distillation's
    student against its teacher) at every checkpoint."""
    objects = dict(teacher=teacher)
    groups = {}
    for name in evaluator_table.resolve(config).training:
        row = evaluator_table.row(name)
        built = evaluations.evaluators_for(config, strategy, source, [name], **{
            each: objects[each] for each in row.objects if each in objects})
        groups.setdefault(row.every, []).extend(built)
    return [((getattr(config, flag) if flag else 0) or checkpoint_steps, monitors)
            for flag, monitors in groups.items()]


class _RecordsFlagsWhenSaving:
    """A `CheckpointState` whose saves also write the run's pending flags record
    (`records.FlagsRecord`, once, after the first save): a run that fails or is
    killed before its first checkpoint leaves flags.json and flags_history.json
    describing the checkpoints there."""

    def __init__(self, state, record):
        self._state, self._record = state, record

    def save(self, step):
        prefix = self._state.save(step)
        if self._record is not None:
            self._record.write()
        return prefix

    def __getattr__(self, name):
        return getattr(self._state, name)


def write_session_start(writer, step):
    """Writes TensorBoard's restart marker, a `SessionLog.START` event, at the first
    step this run logs: step + 1 of the checkpoint it resumed (0 on a fresh start,
    whose step-0 summaries it writes again). TensorBoard's reader (its
    `purge_orphaned_data`, on by default) then drops the events of that step and
    later ones written before, by a run killed after its last checkpoint: the steps
    this run trains and logs again appear once, as metrics.jsonl's lines
    (`records.MetricsLog`). PyTorch's `SummaryWriter(purge_step=...)` writes the same
    event. TF 2's summary API has no call for it; the writer's own op takes a whole
    `Event` (`tf.raw_ops.ImportEvent`, what `summary_ops_v2.import_event` calls), so
    it lands in this run's event file, before its summaries."""
    event = tf.compat.v1.Event(
        step=step + 1 if step else 0, wall_time=time.time(),
        session_log=tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START))
    tf.raw_ops.ImportEvent(writer=writer._resource,  # pylint: disable=protected-access
                           event=event.SerializeToString())
    writer.flush()


def input_options(config):
    """The training input pipeline's options of `config` (`pipeline.build_input_fn`'s
    keywords but the split's subsets and the start): the same under every strategy.
    Its batches have static shapes (fixed image size, the last partial batch
    dropped), as TPUStrategy's compiled step needs (docs/tpu.md)."""
    return dict(parts.view_options(config), cache=config.cache_dataset, seed=config.seed)


def step_plan(config, num_examples):
    """The run's steps (`schedules.compute_steps`) over `num_examples` examples."""
    return schedules.compute_steps(
        num_examples=num_examples, batch_size=config.train_batch_size,
        train_epochs=config.train_epochs, train_steps=config.train_steps,
        warmup_epochs=config.warmup_epochs, checkpoint_epochs=config.checkpoint_epochs,
        checkpoint_steps=config.checkpoint_steps)


def planned_steps(config, context):
    """The step `train` trains this run to (`context`: preflight's), counted over
    the --label_fraction subset when fine-tuning on one; writes nothing."""
    num_examples = context.num_train_examples
    if train_modes.get(config.train_mode).labels == "required" and config.label_fraction < 1.0:
        num_examples = subsets.make_label_subset(
            context.source, config.train_split, config.label_fraction,
            seed=config.seed).num_examples
    return step_plan(config, num_examples).total_steps


# The training accuracies a result holds -> what they count.
TRAINING_ACCURACIES = {
    "train/contrast_acc": (
        "the contrastive task's top-1: each view picks its partner's projection among "
        "the global batch's other views (NT-Xent's logits), the mean over the steps"),
    "train/supervised_acc": (
        "the supervised head's top-1 on the labelled images of the training batches "
        "(pretraining: the online head on stop_gradient(h), both views), the mean over "
        "the steps"),
}


def training_protocols(config, results, *, split, steps, checkpoint):
    """`protocol/<name>` entries of the training accuracies in `results` (means over
    the last logging interval's training batches, not an evaluation: augmented
    views of the training split, at the weights of each step)."""
    first, last = steps
    views = train_modes.get(config.train_mode).views
    names = dict(crop="random resized crop", flip="horizontal flip", color=(
        f"colour jitter (strength {config.color_jitter_strength:g}) and grayscale"))
    transforms = [names[t] for t in rules.augmentations(config.augmentations, views)]
    transforms += ["Gaussian blur"] if views == 2 and config.use_blur else []
    augmentation = (" and " if len(transforms) == 2 else ", ").join(transforms) or (
        "resize only")
    if views == 2:
        augmentation = ("two random views per image: " + augmentation
                        + (" (drawn on the device)" if config.augment_on == "device" else ""))
    found = {}
    for name, method in TRAINING_ACCURACIES.items():
        if name not in results:
            continue
        found[records.PROTOCOL_PREFIX + name] = dict(
            evaluator="training", method=method, split=split,
            examples=(last - first + 1) * config.train_batch_size, steps=[first, last],
            preprocessing=dict(image_size=config.image_size, augmentation=augmentation),
            checkpoint=dict(path=records.run_relative(checkpoint, config.model_dir),
                            step=last, weights="each training step's own; this is "
                            "the checkpoint at the interval's end"))
    return found


def label_subset(config, source, split):
    """The --label_fraction subset of `split` (`subsets.make_label_subset`, seeded by
    --seed), its ids recorded in model_dir/label_subset_ids.txt."""
    subset = subsets.make_label_subset(source, split, config.label_fraction,
                                       seed=config.seed)
    subset.write(os.path.join(config.model_dir, "label_subset_ids.txt"))
    return subset


def describe_label_subset(config, subset, of):
    """The line saying what a --label_fraction fine-tune trains on: the examples kept
    of the `of` of --train_split, and when every class's minimum of one example kept
    more than the fraction asks (--label_fraction=1e-9: one per class)."""
    kept = subset.num_examples
    line = (f"Fine-tuning on {kept} labelled examples: --label_fraction="
            f"{config.label_fraction:g} of the {of} of {config.train_split}")
    asked = int(round(config.label_fraction * of))
    if subset.example_ids is not None and kept > asked:
        line += (f", which asks for {asked}; each class keeps at least one example, "
                 f"so {kept} are kept")
    return line + "."


def distillation_labels(config, source, split):
    """The ids of the examples whose labels distillation mixes in (--distill_alpha <
    1): all (None) or the --label_fraction subset, written to model_dir as
    fine-tuning's. With alpha = 1 the labels train nothing: the split's own (None)
    then only measure train/supervised_acc."""
    if config.distill_alpha == 1.0 or config.label_fraction == 1.0:
        return None
    subset = label_subset(config, source, split)
    print(f"Distilling with the labels of {len(subset.example_ids)} examples "
          f"({config.label_fraction:.3g} of {split}), weight 1 - alpha = "
          f"{1 - config.distill_alpha:.3g}.", flush=True)
    return subset.example_ids


def describe_teacher(config, info):
    """The line naming the teacher a distillation run learns from."""
    size = "" if info.image_size in (None, config.image_size) else (
        f"; trained at {info.image_size} px, it sees the student's {config.image_size} px")
    labels = "" if info.head_labels is None else (
        f", its head trained on {teacher_module.share_of_labels(info.head_labels[0])} of "
        f"{info.head_labels[1]!r}")
    return (f"Teacher: {info.description} ({info.num_classes} classes{labels}, inference "
            f"mode{size}); distillation temperature {config.distill_temperature:g}, "
            f"alpha {config.distill_alpha:g}.")


def initialize(config, model, state):
    """The weights a training run starts from: model_dir's newest checkpoint that
    loads (resume), else --checkpoint, else random. Returns what was used, for the
    record ("resumed <prefix>", the prefix read, or "random")."""
    with preflight.flag_errors("model_dir"):
        resumed = state.recover()
    if resumed:
        print(f"Resumed from {resumed}.", flush=True)
        initialized_from = f"resumed {resumed}"
    elif config.checkpoint:
        # A supervised head that fits is loaded, from any source (the authors' TF2
        # behaviour), unless --zero_init_logits_layer keeps it at zero (their TF1
        # protocol, the paper's).
        with preflight.flag_errors("checkpoint"):
            weights = checkpoints.load_into(
                model, config.checkpoint, whole_model=False,
                supervised_head=not config.zero_init_logits_layer)
        print(f"Initialised from {weights.prefix} ({weights.kind}).", flush=True)
        initialized_from = weights.prefix
    else:
        initialized_from = "random"
        if train_modes.get(config.train_mode).labels == "required":
            print("Fine-tuning from randomly initialised weights: no --checkpoint was "
                  "given and model_dir has none, so this is supervised training from "
                  "scratch (recorded as train/initialized_from=random). Pass "
                  "--checkpoint=<a pretraining run> to fine-tune a pretrained encoder.",
                  flush=True)
    return initialized_from


def write_hparams(writer, config):
    """The run's configuration in TensorBoard's hparams plugin (None values as '')."""
    values = {name: ("" if value is None else value)
              for name, value in config.to_dict().items()
              if value is None or isinstance(value, (bool, int, float, str))}
    with writer.as_default(step=0):
        hparams_api.hparams(values)
    writer.flush()


def write_train_summaries(writer, step, logs):
    """TensorBoard scalars of a checkpoint interval under the authors' names, as
    their means over the interval; `train/learning_rate` is the rate the interval's
    last step trained with, the one the console's last line shows (the authors write
    the rate after that step: 0.0 at the end of the cosine). Returns the values (for
    result.json)."""
    values = {f"train/{SUMMARY_NAMES.get(k, k)}": float(v) for k, v in logs.items()
              if k not in ("num_examples",)}
    evaluations.write_scalars(writer, step, values)
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
SUMMARY_NAMES = dict(loss="total_loss")


def write_view_summary(config, source, split, writer, num_images=8):
    """An image summary of the split's first images' training views as the train step
    sees them (`parts.draw_views`: pretraining's two side by side), drawn apart from
    the training stream, which stays untouched."""
    ids = range(min(num_images, source.num_examples(split)))
    views = parts.draw_views(config, source, split, ids, config.seed)
    images = np.concatenate(list(views.transpose(1, 0, 2, 3, 4)), axis=2)
    with writer.as_default(step=0):
        tf.summary.image("train/views", images, max_outputs=num_images)
    writer.flush()
