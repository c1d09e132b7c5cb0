"""A keras-hub preset of a SimCLR encoder: `SimCLRBackbone`, `write_preset`, `from_preset`.

keras-hub loads backbones from preset folders (`Backbone.from_preset(folder)`): a
`config.json` (the registered class and its arguments), `model.weights.h5` and
`metadata.json`, written by `Backbone.save_to_preset`. keras-hub's own ResNetBackbone
cannot hold SimCLR's ResNets (selective kernels, SE, the paper's stem and batch-norm
layout), so the preset's class is ours: `SimCLRBackbone`, registered with Keras as
'simclr_tf>SimCLRBackbone' once this module is imported. `import simclr_tf` arranges
that (when keras-hub is imported, before or after it), so

>>> import keras_hub, simclr_tf
>>> backbone = keras_hub.models.Backbone.from_preset("run/keras_hub/1000")
>>> h = backbone(images)  # float32 [N, S, S, 3] RGB in [0, 1], preprocessed -> [N, C]

or `simclr_tf.from_preset(folder)`, the same. The backbone is the encoder alone (no
projection or supervised head): images -> h, the representation downstream tasks use,
in inference mode, on images preprocessed as evaluation does (`simclr_tf.weights.portable`
says how). It fine-tunes like any Keras model (`backbone.trainable`, `training=True`).
The folder also holds a model card, `README.md` (`simclr_tf.weights.cards`): inputs,
preprocessing, the run's recipe and its results at this step.
"""
import io

import keras
import keras_hub
from keras.src.saving import saving_lib

from simclr_tf.models import encoders
from simclr_tf.rundir import files
from simclr_tf.models.layers import PACKAGE
from simclr_tf.models.outputs import H
from simclr_tf.weights.portable import INPUT


@keras.saving.register_keras_serializable(package=PACKAGE)
class SimCLRBackbone(keras_hub.models.Backbone):
    """A SimCLR encoder as a keras-hub backbone: images [N, S, S, 3] -> h [N, C].

    Args:
        encoder: the encoder's name in `simclr_tf.config.tables.encoders` ('resnet',
            'tiny', 'vit_s16', ...) or a serialized encoder layer.
        encoder_options: the encoder's options (ResNet: depth, width_multiplier,
            sk_ratio, se_ratio, stem).
        image_size: S, the side of the images the encoder was trained on.
        batch_norm_decay: the batch-norm momentum (used when fine-tuned).
    """

    def __init__(self, encoder="resnet", encoder_options=None, image_size=224,
                 batch_norm_decay=0.9, dtype=None, **kwargs):
        if isinstance(encoder, dict):
            layer = keras.saving.deserialize_keras_object(encoder)
        else:
            layer = encoders.build_encoder(encoder, dtype=dtype,
                                           batch_norm_decay=batch_norm_decay,
                                           global_bn=False, **(encoder_options or {}))
        images = keras.Input((image_size, image_size, 3), name=INPUT)
        h = layer(images)[H]
        super().__init__(inputs=images, outputs=h, dtype=dtype, **kwargs)
        self.encoder = layer
        self.encoder_spec = encoder
        self.encoder_options = dict(encoder_options or {})
        self.image_size = int(image_size)
        self.batch_norm_decay = batch_norm_decay

    def save_weights(self, filepath, overwrite=True, max_shard_size=None):
        """Keras' `save_weights` (which keras-hub's `save_to_preset` calls for
        model.weights.h5), with the HDF5 file made in memory and then written by Python
        whole (`files.atomic_write`). HDF5 writing a file that the disk cannot hold
        fails inside its library and leaves it broken: after the error, the process
        ended in a segmentation fault (exit 139; keras 3.15.1, h5py 3.14, a full tmpfs
        or a file-size limit). A failed Python write is an OSError like any other."""
        if max_shard_size is not None:  # keras-hub shards presets over 10 GB only
            return super().save_weights(filepath, overwrite, max_shard_size)
        # Keras' own `save_weights_only` on a file in memory (keras-hub reads LoRA
        # weights through the same H5IOStore).
        memory = io.BytesIO()
        store = saving_lib.H5IOStore(memory, mode="w")
        try:
            # pylint: disable-next=protected-access
            saving_lib._save_state(self, weights_store=store, assets_store=None,
                                   inner_path="", visited_saveables=set())
        finally:
            store.close()
        files.atomic_write(str(filepath), memory.getvalue())
        return None

    def get_config(self):
        config = super().get_config()
        config.update(encoder=self.encoder_spec, encoder_options=self.encoder_options,
                      image_size=self.image_size, batch_norm_decay=self.batch_norm_decay)
        return config


def backbone_of(model, image_size):
    """The `SimCLRBackbone` of a `SimCLRModel`'s encoder, with its weights (copied)."""
    config = model.get_config()
    backbone = SimCLRBackbone(
        encoder=config["encoder"], encoder_options=config.get("encoder_options"),
        image_size=image_size, batch_norm_decay=config.get("batch_norm_decay", 0.9),
        name="simclr_backbone")
    ours, theirs = backbone.encoder.weights, model.encoder.weights
    if [tuple(v.shape) for v in ours] != [tuple(v.shape) for v in theirs]:
        raise ValueError(f"The encoder rebuilt from its config has other variables than "
                         f"the model's ({len(ours)} against {len(theirs)}).")
    for variable, value in zip(ours, theirs):
        variable.assign(value)
    return backbone


def write_preset(model, directory, image_size):
    """The preset folder of `model`'s encoder at `directory` (keras-hub's
    `save_to_preset`: config.json, model.weights.h5, metadata.json); its card,
    README.md, is the export's (`simclr_tf.weights.cards`)."""
    backbone_of(model, image_size).save_to_preset(directory)
    return directory


def from_preset(preset, **kwargs):
    """`keras_hub.models.Backbone.from_preset(preset)`: a `SimCLRBackbone`."""
    return keras_hub.models.Backbone.from_preset(preset, **kwargs)
