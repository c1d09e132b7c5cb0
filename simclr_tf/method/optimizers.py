"""How `--optimizer` becomes the run's optimizer, resolved once from the model's
structure: the factory (`build_optimization`: LARS, `simclr_tf.method.lars`; momentum,
Adam, AdamW); the weight decay that enters the loss, as the reference adds it (which
variables each optimizer decays there, `weight_decay_loss_variables`, and the term,
`LossWeightDecay`; LARS decays the rest inside its update); and per-variable
learning-rate multipliers (`RateMultipliers`), for the online linear head's own rate
(`--head_learning_rate`, not the paper's), with the optimizers that carry them.
"""
import keras
import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.method.lars import LARS, lars_excluded_variables
from simclr_tf.method.lars import _encoder_no_decay, _unique  # pylint: disable=protected-access


def build_optimization(name, learning_rate, *, model, momentum=0.9, weight_decay=0.0,
                       loss_scaling=False, head_rate_multiplier=1.0):
    """The optimizer and the loss's weight decay for `--optimizer`, resolved once.

    Which variables decay where is decided here, from the model's structure: LARS
    decays inside its update (all but its exclusions) and the loss decays the
    supervised head's kernel; momentum and Adam decay every non-BN trainable
    variable through the loss.

    Args:
        name: 'lars', 'momentum', 'adam' or 'adamw'.
        learning_rate: float or `LearningRateSchedule`.
        model: the built model (its trainable variables as they will train: after
            freezing for fine-tuning).
        momentum: momentum for 'lars' and 'momentum'.
        weight_decay: the decay coefficient.
        loss_scaling: wrap the optimizer in `keras.optimizers.LossScaleOptimizer`
            (float16 compute).
        head_rate_multiplier: the supervised head trains at this multiple of
            `learning_rate` (`--head_learning_rate / --learning_rate`); 1.0 = the
            same rate, as the authors' code.

    Returns:
        `(optimizer, loss_weight_decay)`: a Keras optimizer (build it under the
        strategy's scope) and a `LossWeightDecay` for the Trainer.
    """
    optimizer = build_optimizer(name, learning_rate, momentum=momentum,
                                weight_decay=weight_decay, model=model,
                                head_rate_multiplier=head_rate_multiplier)
    if loss_scaling:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer, weight_decay_loss(model, name, weight_decay)


def build_optimizer(name, learning_rate, *, momentum=0.9, weight_decay=0.0, model=None,
                    head_rate_multiplier=1.0):
    """Creates the optimizer named by the `--optimizer` flag.

    Weight decay follows the reference: LARS decays inside its update (with the
    structural exclusions of `model`); momentum and Adam get it through
    `weight_decay_loss` in the loss, so they are created without decay. AdamW
    (ours, for ViT recipes) decays decoupled, in its update, all but the
    ndim <= 1 variables and the encoder's declared ones.

    Args:
        name: 'lars', 'momentum' (SGD with Nesterov momentum, as the authors'
            code), 'adam' or 'adamw'.
        learning_rate: float or `LearningRateSchedule`.
        momentum: momentum for 'lars' and 'momentum'.
        weight_decay: decay coefficient (used here only by 'lars' and 'adamw').
        model: the built model, required for 'lars' and 'adamw' (exclusions) and for a
            `head_rate_multiplier` other than 1 (its supervised head).
        head_rate_multiplier: the supervised head's rate as a multiple of
            `learning_rate` (`RateMultipliers`). LARS leaves the head out of trust
            scaling, so under every optimizer here this is the head's actual rate.

    Returns:
        A `keras.optimizers.Optimizer`; build it under the strategy's scope.
    """
    if name not in rules.OPTIMIZERS:
        raise ValueError(f"name must be one of {rules.OPTIMIZERS}. Received: name={name!r}")
    head_variables = []
    if head_rate_multiplier != 1.0:
        head = getattr(model, "supervised_head", None)
        if head is None:
            raise ValueError("head_rate_multiplier needs a model with a supervised head. "
                             f"Received: head_rate_multiplier={head_rate_multiplier!r}, "
                             f"model={model!r}")
        head_variables = head.trainable_weights
    if name == "lars":
        if model is None:
            raise ValueError("build_optimizer('lars', ...) needs the model for its "
                             "exclusions. Received: model=None")
        lars_class = LARSWithRates if head_variables else LARS
        optimizer = lars_class(learning_rate, momentum=momentum, weight_decay=weight_decay,
                               excluded_variables=lars_excluded_variables(model))
    elif name == "momentum":
        # Nesterov, as the authors' code (TF2 model.py and TF1 model_util.py).
        if not head_variables:
            return keras.optimizers.SGD(learning_rate, momentum=float(momentum),
                                        nesterov=True)
        optimizer = NesterovSGD(learning_rate, momentum=float(momentum))
    elif name == "adamw":
        if model is None:
            raise ValueError("build_optimizer('adamw', ...) needs the model for its "
                             "exclusions. Received: model=None")
        optimizer = AdamWWithRates(learning_rate, weight_decay=float(weight_decay))
        # Decoupled decay of every weight but the no-decay ones; unlike under LARS,
        # the supervised head's kernel is decayed here (it has no loss decay).
        head = getattr(model, "supervised_head", None)
        head_ids = {id(w) for w in (head.weights if head is not None else [])}
        optimizer.exclude_from_weight_decay(var_list=[
            v for v in lars_excluded_variables(model)
            if id(v) not in head_ids or len(v.shape) <= 1])
    else:
        if not head_variables:
            return keras.optimizers.Adam(learning_rate)
        optimizer = AdamWithRates(learning_rate)
    if head_variables:
        optimizer.set_rate_multiplier(head_variables, head_rate_multiplier)
    return optimizer


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

    Called, it returns weight_decay * sum(0.5 * ||w||^2) over them (a float32
    scalar; a constant 0 when there are none or the coefficient is 0).

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


class RateMultipliers:
    """Mixin for Keras optimizers: chosen variables train at a multiple of the rate.

    `set_rate_multiplier(variables, factor)` before `build()`; each update of one of
    those variables then uses `factor * learning_rate` (the schedule's value at that
    step). Every other variable's update is computed exactly as without the mixin.
    Used for the online linear head's own learning rate (`--head_learning_rate`).
    Put it first in the bases: its `update_step` hands the optimizer's own
    `update_step` the multiplied rate.
    """

    def set_rate_multiplier(self, variables, factor):
        if self.built:
            raise ValueError("set_rate_multiplier() must be called before build().")
        factor = float(factor)
        if not factor > 0 or factor == float("inf"):
            raise ValueError(f"factor must be a finite number > 0. Received: factor={factor!r}")
        keys = dict(getattr(self, "_rate_keys", {}))
        keys.update((self._var_key(v), factor) for v in variables)
        self._rate_keys = keys

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        keys = getattr(self, "_rate_keys", {})
        self._rate_factors = tuple(keys.get(self._var_key(v), 1.0) for v in variables)

    def rate_multiplier(self, variable):
        """The factor of a built variable's learning rate (1.0 unless set)."""
        return self._rate_factors[self._get_variable_index(variable)]

    def _rate(self, variable, learning_rate):
        factor = self.rate_multiplier(variable)
        return learning_rate if factor == 1.0 else learning_rate * factor

    def update_step(self, gradient, variable, learning_rate):
        super().update_step(gradient, variable, self._rate(variable, learning_rate))


@keras.saving.register_keras_serializable(package="simclr_tf")
class LARSWithRates(RateMultipliers, LARS):
    """`LARS` with `RateMultipliers` (the online head, excluded from trust scaling,
    then steps at its own rate)."""


@keras.saving.register_keras_serializable(package="simclr_tf")
class NesterovSGD(RateMultipliers, keras.optimizers.SGD):
    """Keras SGD (Nesterov by default) with `RateMultipliers`."""

    def __init__(self, learning_rate=0.01, momentum=0.9, nesterov=True, **kwargs):
        super().__init__(learning_rate, momentum=momentum, nesterov=nesterov, **kwargs)


@keras.saving.register_keras_serializable(package="simclr_tf")
class AdamWithRates(RateMultipliers, keras.optimizers.Adam):
    """Keras Adam with `RateMultipliers` (Adam's step is proportional to the rate)."""


@keras.saving.register_keras_serializable(package="simclr_tf")
class AdamWWithRates(RateMultipliers, keras.optimizers.AdamW):
    """Keras AdamW with `RateMultipliers` (the multiplied rate drives the Adam step;
    the decoupled decay keeps the schedule's rate)."""
