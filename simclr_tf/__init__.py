"""simclr_tf: SimCLR v1/v2 (Chen et al. 2020) in Keras 3 / TensorFlow 2.

The library never reads command-line flags: `run.py` turns them into a frozen
`simclr_tf.config.Config` and passes plain values down.

`simclr_tf.load_official(path)` imports one of the authors' released SavedModels as a
`simclr_tf.models.SimCLRModel` (see `simclr_tf.weights.official`); `simclr_tf.SimCLR(network,
options)` pretrains a network with `model.fit` (see `simclr_tf.method.keras_fit`; `options`
a `simclr_tf.method.train.StepOptions`). `simclr_tf.from_preset(folder)` loads a
keras-hub preset of an encoder (`--export_format=keras_hub`; `simclr_tf.weights.hub_preset`),
as keras-hub's own `Backbone.from_preset(folder)` does once simclr_tf is imported.
"""
import importlib.abc
import importlib.util
import sys


__version__ = "0.1.0"


def __getattr__(name):
    # Lazy, so that `import simclr_tf` (and run.py's flag parsing) never waits for
    # TensorFlow.
    if name == "load_official":
        from simclr_tf.weights.official import load_official  # pylint: disable=import-outside-toplevel
        return load_official
    if name == "from_preset":
        from simclr_tf.weights.hub_preset import from_preset  # pylint: disable=import-outside-toplevel
        return from_preset
    if name == "SimCLR":
        from simclr_tf.method.keras_fit import SimCLR  # pylint: disable=import-outside-toplevel
        return SimCLR
    raise AttributeError(f"module 'simclr_tf' has no attribute {name!r}")


class _RegisterWithKerasHub(importlib.abc.MetaPathFinder):
    """Registers our keras-hub backbone (`weights.hub_preset.SimCLRBackbone`) with
    Keras right after keras-hub is imported, so that `keras_hub.models.Backbone.
    from_preset(folder)` finds its class, without importing keras-hub (or
    TensorFlow) for users who never do. Removes itself at its first use."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras_hub":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)
                import simclr_tf.weights.hub_preset  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
            spec.loader.exec_module = exec_module
        return spec


if "keras_hub" in sys.modules:
    import simclr_tf.weights.hub_preset  # noqa: F401,E402  pylint: disable=unused-import,wrong-import-position
elif not any(isinstance(finder, _RegisterWithKerasHub) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWithKerasHub())
