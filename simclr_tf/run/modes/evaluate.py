"""--mode=eval: the supervised head's top-1/top-5 on the eval split, for the latest
checkpoint or each new one of a running job."""
import time

import tensorflow as tf

from simclr_tf.run import preflight
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints
from simclr_tf.config import ConfigError
from simclr_tf.run.modes import evaluations, parts
from simclr_tf.config.tables import evaluators as evaluator_table


def evaluate(config, strategy, context):
    """Top-1/top-5 of the supervised head on the eval split, for the latest checkpoint
    (or, with --eval_wait_secs > 0, for each new one until none comes for that long)."""
    model = parts.build_model(config, strategy, context.num_classes)
    # --evaluators, else the mode row's (`tables.evaluators.resolve`): the supervised head.
    evaluators = evaluations.evaluators_for(config, strategy, context.source,
                                            evaluator_table.resolve(config).at_checkpoint)
    # One TensorBoard writer (one events file) for every checkpoint evaluated.
    writer = tf.summary.create_file_writer(config.model_dir) if config.model_dir else None
    results = {}
    for path in _checkpoints_to_evaluate(config):
        prefix = _load(model, config, path)
        if prefix is None:
            continue
        step = checkpoints.step_of(prefix, 0)
        record = records.record_path(config.model_dir, records.RESULT, config.mode,
                                     step=step) if config.model_dir else None
        results = evaluations.run_evaluators(
            evaluators, model, step, writer=writer, checkpoint=prefix,
            recorded=evaluations.recorded_result(config.model_dir, record, step),
            model_dir=config.model_dir)
        results.update(evaluations.overlap_record(context))
        if config.model_dir:
            records.write_json(record, results)
    if not results:
        # Only a waiting evaluator gets here (preflight found nothing to load yet).
        raise ConfigError("eval_wait_secs", f"no checkpoint appeared in "
                          f"{config.model_dir!r} in {config.eval_wait_secs} s of waiting, "
                          "so nothing was evaluated; start the training run with this "
                          "--model_dir first, or wait longer (a larger --eval_wait_secs).")
    return results


def _load(model, config, path):
    """Loads every variable from `path`; returns the prefix read, or None when a
    waiting evaluator's checkpoint was deleted before it was read (the training run
    keeps only its newest --keep_checkpoint_max): it is skipped, and the next one is
    evaluated."""
    flag = "checkpoint" if path == config.checkpoint else "model_dir"
    try:
        with preflight.flag_errors(flag):
            return checkpoints.load_into(model, path, whole_model=True).prefix
    # The index gone (FileNotFoundError), or a data file while it was read (RestoreV2's
    # NotFoundError).
    except (FileNotFoundError, tf.errors.OpError):
        reason = checkpoints.unreadable_reason(path)
        if config.eval_wait_secs <= 0 or reason is None:
            raise
    if checkpoints.deleted(path):
        reason = ("deleted before it was read: a training run keeps only its newest "
                  "--keep_checkpoint_max checkpoints")
    print(f"{path} can no longer be read ({reason}). Skipped; the evaluator goes on "
          "with the next one.", flush=True)
    return None


def _checkpoints_to_evaluate(config):
    """Paths of the weights to evaluate, in order."""
    if config.eval_wait_secs <= 0:
        # preflight has checked that one of the two exists.
        yield config.model_dir if checkpoints.latest(config.model_dir) else config.checkpoint
        return
    # Follow a training run: evaluate each new checkpoint as it appears (found like
    # a resume finds them, so a damaged state file does not stop the evaluator), never
    # one older than the last (a resumed run may set a damaged newest checkpoint
    # aside, which leaves an older one the newest).
    last, since = -1, time.monotonic()
    while time.monotonic() - since <= config.eval_wait_secs:
        prefix = checkpoints.latest(config.model_dir)
        if prefix is not None and checkpoints.step_of(prefix, 0) > last:
            last = checkpoints.step_of(prefix, 0)
            yield prefix
            since = time.monotonic()
        else:
            time.sleep(1)
