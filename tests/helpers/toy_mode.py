"""A toy mode, added as docs/design.md says a mode is added: one module holding its
`Mode` row and its function. `--mode=count_weights` counts the weights of model_dir's
latest checkpoint."""
import numpy as np

from simclr_tf.weights import checkpoints
from simclr_tf.config.tables import modes
from simclr_tf.run.modes import parts

MODE = modes.Mode(
    "count_weights", (f"{__name__}:count_weights",),
    "count_weights (the number of weights in model_dir's latest checkpoint)",
    needs_checkpoint=True)


def count_weights(config, strategy, context):
    model = parts.build_model(config, strategy, context.num_classes)
    prefix = checkpoints.load_into(model, config.model_dir, whole_model=True).prefix
    count = sum(int(np.prod(variable.shape)) for variable in model.weights)
    print(f"{count} weights in {prefix}", flush=True)
    return {"count_weights/num_weights": count, "count_weights/checkpoint": prefix}
