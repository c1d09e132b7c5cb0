"""Import of the authors' released SimCLR v1/v2 TF2 models into `SimCLRModel`.

The authors release SavedModels whose `variables/` part is an object-based TF2
checkpoint. Its keys are object-graph paths with numeric indices, but the checkpoint's
`_CHECKPOINTABLE_OBJECT_GRAPH` entry gives every variable its full name in the authors'
Keras model (`resnet/block_group2/bottleneck_block_3/conv2d_fixed_padding_12/
conv2d_12/kernel`). Those names are a scope tree; this module reads the tree by
structure: which block group, which block of the group, which role in the block. The
numeric suffixes Keras appends to repeated layer names are only used to order siblings
of one kind (Keras numbers layers in creation order); they are never matched against
expected values, so models whose counters differ (other depths, SE, other head sizes)
map the same way.

Everything in the checkpoint must find a place in our model and every weight of our
model (BN moving statistics included) must be filled, with equal shapes; anything else
raises `ValueError` naming the variables. The architecture (depth, width, selective
kernels, squeeze-excitation, stem, projection head, classes) is inferred from the
names and shapes, so no flag has to be guessed.

Example:
>>> model = load_official("/models/r50_1x_sk0/saved_model")
>>> outputs = model(images, training=False)        # RGB floats in [0, 1]
>>> h, logits = outputs["final_avg_pool"], outputs["logits_sup"]

The package is split by job: `names` reads the checkpoint's variable names, `roles`
maps them to the roles of the authors' model and of ours, `infer` infers the
architecture, `load` copies the weights.
"""
from simclr_tf.weights.official.infer import (OfficialModelInfo, infer_official_config,
                                              inspect_official, selector_from_graph,
                                              selector_unknown_message)
from simclr_tf.weights.official.load import load_official, load_official_weights
from simclr_tf.weights.official.names import (checkpoint_prefix, is_official_savedmodel,
                                              read_official_names)

__all__ = ["OfficialModelInfo", "checkpoint_prefix", "infer_official_config",
           "inspect_official", "is_official_savedmodel", "load_official",
           "load_official_weights", "read_official_names", "selector_from_graph",
           "selector_unknown_message"]
