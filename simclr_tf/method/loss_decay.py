"""The weight decay that enters the loss, as the reference adds it: which variables
each optimizer decays there (`weight_decay_loss_variables`) and the term
(`LossWeightDecay`). LARS decays the rest inside its update (`simclr_tf.method.lars`).
"""
import keras
import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.method.lars import _encoder_no_decay, _unique  # pylint: disable=protected-access

# The layers whose weights the loss's weight decay leaves alone under momentum and
# Adam (the reference: batch norm; a ViT's LayerNorm is their counterpart).
NORMALIZATION_LAYERS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
                        keras.layers.GroupNormalization)


def _all_layers(model):
    """The model and every layer nested in it, depth first."""
    # `_flatten_layers` is Keras' own recursive walk (it also sees layers held in
    # attributes of custom layers, which `model.layers` does not list).
    return list(model._flatten_layers(include_self=True, recursive=True))


def _bias_variables(layers):
    return [layer.bias for layer in layers
            if isinstance(getattr(layer, "bias", None), keras.Variable)]


def normalization_variables(model):
    """All weights (trainable or not) of the model's normalization layers (batch
    norm; layer and group norm in other encoders)."""
    return _unique(w for layer in _all_layers(model)
                   if isinstance(layer, NORMALIZATION_LAYERS)
                   for w in layer.weights)


def weight_decay_loss_variables(model, optimizer_name):
    """The variables whose 0.5 * ||w||^2 enters the loss, per the reference.

    Args:
        model: a built Keras model.
        optimizer_name: 'lars' (only the supervised head's non-bias weights: LARS
            decays everything else itself), 'momentum' / 'adam' (every trainable
            variable that is not a normalization layer's weight nor one the encoder
            declares, biases included: the reference's rule) or 'adamw' (none: its
            decay is decoupled, in the update).
    """
    if optimizer_name not in rules.OPTIMIZERS:
        raise ValueError(
            f"optimizer_name must be one of {rules.OPTIMIZERS}. Received: "
            f"optimizer_name={optimizer_name!r}")
    if optimizer_name == "adamw":
        return []
    if optimizer_name == "lars":
        head = getattr(model, "supervised_head", None)
        if head is None:
            return []
        head_biases = {id(b) for b in _bias_variables(_all_layers(head))}
        return [w for w in head.trainable_weights if id(w) not in head_biases]
    skip = {id(w) for w in normalization_variables(model) + _encoder_no_decay(model)}
    return [w for w in _unique(model.trainable_variables) if id(w) not in skip]


class LossWeightDecay:
    """The weight-decay term the reference adds to the loss, its variables resolved once.

    `loss_weight_decay()` returns weight_decay * sum(0.5 * ||w||^2) over them (a
    float32 scalar; a constant 0 when there are none or the coefficient is 0).

    Args:
        variables: the variables to decay (see `weight_decay_loss_variables`).
        weight_decay: the decay coefficient (>= 0).
    """

    def __init__(self, variables, weight_decay):
        rules.check_weight_decay(weight_decay)
        self.variables = list(variables)
        self.weight_decay = float(weight_decay)

    def __call__(self):
        if not self.variables or not self.weight_decay:
            return tf.constant(0.0, tf.float32)
        return self.weight_decay * tf.add_n(
            [tf.nn.l2_loss(tf.cast(w, tf.float32)) for w in self.variables])


def weight_decay_loss(model, optimizer_name, weight_decay):
    """The reference's loss weight decay of `model` under `optimizer_name` (see
    `weight_decay_loss_variables` for which weights each optimizer decays there)."""
    return LossWeightDecay(weight_decay_loss_variables(model, optimizer_name), weight_decay)
