"""`load_encoder` opens an encoder from a path: our run directory or checkpoint
prefix (architecture from the run's flags.json), one of our SavedModel exports, or
one of the authors' released models.
"""
import os

import tensorflow as tf

class _SavedModelEncoder:
    """One of our SavedModel exports as `model(images, training=False) -> dict`."""

    def __init__(self, path):
        self.loaded = tf.saved_model.load(path)
        self.image_size = int(self.loaded.image_size.numpy())

    def __call__(self, images, training=False):
        return self.loaded(images, trainable=bool(training))


def load_encoder(path, *, strategy=None):
    """Opens an encoder from `path`; returns `(model, image_size, description)`.

    Args:
        path: our run directory or checkpoint prefix (the architecture comes from the
            run's flags.json), one of our SavedModel exports
            (`run/saved_model/<step>`), or an authors' released SavedModel.
        strategy: build our models under this strategy's scope (default strategy
            when None). SavedModel exports run on the default device.

    Raises:
        FileNotFoundError: nothing loadable at `path`.
    """
    from simclr_tf import checkpoints, official  # pylint: disable=import-outside-toplevel
    from simclr_tf.config import Config  # pylint: disable=import-outside-toplevel
    from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
    strategy = strategy or tf.distribute.get_strategy()
    if official.is_official_savedmodel(path):
        with strategy.scope():
            model = official.load_official(path, num_classes=None)
        return model, 224, f"released model {path}"
    run_dir = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    flags_file = os.path.join(run_dir, "flags.json")
    if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        encoder = _SavedModelEncoder(path)
        return encoder, encoder.image_size, f"SavedModel {path}"
    if not tf.io.gfile.exists(flags_file):
        raise FileNotFoundError(
            f"No encoder at {path!r}: expected a run directory or checkpoint prefix with "
            "flags.json beside it, a SavedModel export, or an authors' released model.")
    with tf.io.gfile.GFile(flags_file) as f:
        config = Config.from_json(f.read())
    prefix = checkpoints.resolve_checkpoint_path(path)
    with strategy.scope():
        model = SimCLRModel(**config.model_kwargs(None))
        model.build((None, config.image_size, config.image_size, 3))
    checkpoints.restore_model(model, prefix)
    return model, config.image_size, f"checkpoint {prefix}"
