"""--mode=linear_probe (kNN and the L-BFGS probe on frozen h) and the final linear
probe of a training run (--final_linear_probe)."""
import keras
import tensorflow as tf

from simclr_tf.run import distribute, preflight
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints
from simclr_tf.config import ConfigError
from simclr_tf.run.modes import evaluations, parts
from simclr_tf.config.tables import evaluators as evaluator_table


def linear_probe_mode(config, strategy, context):
    """--mode=linear_probe: kNN and the paper's L-BFGS linear probe on frozen h, train
    split -> eval split, features cached in model_dir/features/ (or the
    --evaluators given)."""
    model, prefix = parts.load_trained_encoder(config, strategy, context)
    evaluators = evaluations.evaluators_for(config, strategy, context.source,
                                            evaluator_table.resolve(config).at_checkpoint)
    return dict(evaluations.run_evaluators(evaluators, model, checkpoints.step_of(prefix, 0),
                                     checkpoint=prefix, model_dir=config.model_dir),
                **evaluations.overlap_record(context))


def final_linear_probe(config, strategy, context):
    """Probe accuracy of the trained encoder and of a randomly initialised one, both
    built under the run's strategy (features extracted on every replica)."""
    trained = parts.build_model(config, strategy, context.num_classes)
    if checkpoints.latest(config.model_dir) is None:
        raise ConfigError("final_linear_probe", f"needs a trained checkpoint in "
                          f"{config.model_dir!r}; train first.")
    with preflight.flag_errors("model_dir"):
        weights = checkpoints.load_into(trained, config.model_dir, whole_model=True)
    keras.utils.set_random_seed(config.seed + 1)
    random_init = parts.build_model(config, strategy, context.num_classes)
    evaluators = evaluations.evaluators_for(config, strategy, context.source, ["final_probe"],
                                      baseline=random_init)
    step = checkpoints.step_of(weights.prefix, 0)
    # Its two accuracies are TensorBoard scalars too (once per step: a rerun that
    # measures the same adds no second point).
    writer = recorded = None
    if distribute.is_chief(strategy):
        writer = tf.summary.create_file_writer(config.model_dir)
        recorded = evaluations.recorded_result(config.model_dir, records.record_path(
            config.model_dir, records.RESULT, config.mode), step)
    return dict(evaluations.run_evaluators(evaluators, trained, step, checkpoint=weights.prefix,
                                     writer=writer, recorded=recorded,
                                     model_dir=config.model_dir),
                **evaluations.overlap_record(context))
