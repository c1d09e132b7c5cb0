"""--mode=eval: the supervised head's top-1/top-5 on the eval split, for the latest
checkpoint or each new one of a running job."""
import time

import tensorflow as tf

from simclr_tf import checkpoints, preflight, records
from simclr_tf.config import ConfigError
from simclr_tf.modes import parts

# What --mode=eval runs at each checkpoint (`simclr_tf.evaluation.registry` names).
EVALUATORS = ("supervised",)


def evaluate(config, strategy, context):
    """Top-1/top-5 of the supervised head on the eval split, for the latest checkpoint
    (or, with --eval_wait_secs > 0, for each new one until none comes for that long)."""
    model = parts.build_model(config, strategy, context["num_classes"])
    evaluators = parts.evaluators_for(config, strategy, context["source"], EVALUATORS)
    results = {}
    for path in _checkpoints_to_evaluate(config):
        flag = "checkpoint" if path == config.checkpoint else "model_dir"
        with preflight.flag_errors(flag):
            prefix = checkpoints.load_into(model, path, whole_model=True).prefix
        step = checkpoints.step_of(prefix, 0)
        writer = tf.summary.create_file_writer(config.model_dir) if config.model_dir else None
        record = records.record_path(config.model_dir, records.RESULT, config.mode,
                                     step=step) if config.model_dir else None
        results = parts.run_evaluators(
            evaluators, model, step, writer=writer, checkpoint=prefix,
            recorded=parts.recorded_result(config.model_dir, record, step),
            model_dir=config.model_dir)
        results.update(parts.overlap_record(context))
        if config.model_dir:
            records.write_json(record, results)
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
