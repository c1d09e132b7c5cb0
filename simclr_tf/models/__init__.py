"""The SimCLR model family: ResNet v1 encoders (+SK, SE), ViT encoders, heads, variants.

Lazy: `from simclr_tf.models import SimCLRModel` imports the modules that define it
when it is asked for; `simclr_tf.models.outputs` (the output names) imports no model.
"""
import importlib

# name -> the module that defines it
_EXPORTS = {
    "ProjectionHead": "simclr_tf.models.heads", "SupervisedHead": "simclr_tf.models.heads",
    "FEATURE_NAMES": "simclr_tf.models.resnet", "ResNet": "simclr_tf.models.resnet",
    "SimCLRModel": "simclr_tf.models.simclr",
    "freeze_for_finetuning": "simclr_tf.models.simclr",
    "ViT": "simclr_tf.models.vit",
    "RELEASED": "simclr_tf.config.variants", "parse_variant": "simclr_tf.config.variants",
    "variant_name": "simclr_tf.config.variants",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # found once: later lookups do not come here
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
