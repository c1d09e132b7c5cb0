"""--mode=eval: the supervised head's top-1/top-5 on the eval split, for the latest
checkpoint or each new one of a running job."""
import time

import tensorflow as tf

from simclr_tf import checkpoints, optimizers, preflight, records
from simclr_tf.config import ConfigError
from simclr_tf.evaluation import features, supervised
from simclr_tf.modes import parts

def evaluate(config, strategy, context):
    """Top-1/top-5 of the supervised head on the eval split, for the latest checkpoint
    (or, with --eval_wait_secs > 0, for each new one until none comes for that long)."""
    model = parts.build_model(config, strategy, context["num_classes"])
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
        with preflight.flag_errors(flag):
            prefix = checkpoints.load_into(model, path, whole_model=True).prefix
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
            parts.write_scalars(tf.summary.create_file_writer(config.model_dir), step,
                          {k: v for k, v in results.items() if "accuracy" in k or "loss" in k})
            records.write_json(records.record_path(config.model_dir, records.RESULT,
                                                   config.mode, step=step), results)
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
