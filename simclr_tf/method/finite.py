"""Whether a training step's numbers are finite: its logs (the loss, the gradient
norm) and the variables a checkpoint would save. The loop, the checkpoints (which
refuse to save weights that are not finite) and keras_fit ask these, without
importing the training step.
"""
import math

import tensorflow as tf


def non_finite_logs(logs):
    """What is wrong with a step's logs, e.g. 'loss is nan' or 'gradient norm is inf
    (loss 2.3)'; None when the loss and the gradient norm are finite (the weights
    after a step with either non-finite are not: nothing may save them)."""
    loss = float(logs["loss"])
    grad_norm = float(logs.get("grad_norm", 0.0))
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return None
    return (f"loss is {loss}" if not math.isfinite(loss)
            else f"gradient norm is {grad_norm} (loss {loss:g})")


def non_finite_variables(variables):
    """Names of the floating-point variables holding NaN or infinite values."""
    return [v.path if hasattr(v, "path") else v.name for v in variables
            if tf.as_dtype(v.dtype).is_floating
            and not bool(tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))))]
