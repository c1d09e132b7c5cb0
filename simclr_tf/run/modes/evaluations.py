"""The evaluators a mode runs, built from the Config by name (`evaluators_for`, the
flags each reads: `EVALUATOR_ARGUMENTS`), run at a checkpoint (`run_evaluators`: the
lines they say, their TensorBoard scalars and result entries) or during training
(`evaluation_hook`, a loop hook); the result entries of an allowed overlap."""
import os

import tensorflow as tf

from simclr_tf.run import loop, preflight
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints
from simclr_tf.evaluation import registry


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
    evaluates ({} when nothing is evaluated):

    - `eval_overlaps_train`: True when --allow_eval_overlap let a split be evaluated
      that shares examples with what trained the weights (any run up their chain), a
      kNN bank or a probe's training split;
    - `eval_overlap`: each such overlap (both flags, both splits, the shared examples
      and of how many, and what trained them: the run);
    - `eval_overlaps_teacher`: the overlaps with what trained a teacher up the chain
      (warned, never refused);
    - `eval_trained_by`: the chain compared, nearest first: each run's weights, role,
      run directory, dataset, --train_split and whether it was compared (its dataset
      holds the evaluated examples), or why the chain stopped there (a released
      model, weights not found, no flags.json).
    """
    found = context.eval_overlap
    if found is None:
        return {}
    return {"eval_overlaps_train": bool(found.allowed), "eval_overlap": list(found.allowed),
            "eval_overlaps_teacher": list(found.teacher),
            "eval_trained_by": list(found.trained_by)}


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


def write_scalars(writer, step, values):
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.scalar(name, float(value))
    writer.flush()
