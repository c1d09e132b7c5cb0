"""simclr_tf: SimCLR v1/v2 (Chen et al. 2020) in Keras 3 / TensorFlow 2.

The library never reads command-line flags: `run.py` turns them into a frozen
`simclr_tf.config.Config` and passes plain values down.

`simclr_tf.load_official(path)` imports one of the authors' released SavedModels as a
`simclr_tf.models.SimCLRModel` (see `simclr_tf.weights.official`); `simclr_tf.SimCLR(network,
options)` pretrains a network with `model.fit` (see `simclr_tf.method.keras_fit`; `options`
a `simclr_tf.method.train.StepOptions`).
"""

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy, so that `import simclr_tf` (and run.py's flag parsing) never waits for
    # TensorFlow.
    if name == "load_official":
        from simclr_tf.weights.official import load_official  # pylint: disable=import-outside-toplevel
        return load_official
    if name == "SimCLR":
        from simclr_tf.method.keras_fit import SimCLR  # pylint: disable=import-outside-toplevel
        return SimCLR
    raise AttributeError(f"module 'simclr_tf' has no attribute {name!r}")
