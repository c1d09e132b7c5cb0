"""LARS, the optimizer factory and the reference's weight-decay rules.

Which variables escape weight decay and trust-ratio scaling is decided by the
model's structure (a variable's rank, normalization layers, what the encoder
declares, the supervised head), never by variable-name patterns, whose spelling
changed between Keras versions. The rules hold for any encoder (ResNet, ViT, ...):
see `no_decay_variables`.
"""
import keras
import tensorflow as tf

from simclr_tf.config import rules

# The layers whose weights the loss's weight decay leaves alone under momentum and
# Adam (the reference: batch norm; a ViT's LayerNorm is their counterpart).
NORMALIZATION_LAYERS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
                        keras.layers.GroupNormalization)


def _all_layers(model):
    """The model and every layer nested in it, depth first."""
    # `_flatten_layers` is Keras' own recursive walk (it also sees layers held in
    # attributes of custom layers, which `model.layers` does not list).
    return list(model._flatten_layers(include_self=True, recursive=True))


def _unique(variables):
    seen, result = set(), []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            result.append(v)
    return result


def _bias_variables(layers):
    return [layer.bias for layer in layers
            if isinstance(getattr(layer, "bias", None), keras.Variable)]


def normalization_variables(model):
    """All weights (trainable or not) of the model's normalization layers (batch
    norm; layer and group norm in other encoders)."""
    return _unique(w for layer in _all_layers(model)
                   if isinstance(layer, NORMALIZATION_LAYERS)
                   for w in layer.weights)


def _encoder_no_decay(model):
    encoder = getattr(model, "encoder", None)
    declared = getattr(encoder, "no_decay_variables", None)
    return list(declared()) if declared is not None else []


def no_decay_variables(model):
    """Variables that LARS (and AdamW) must neither decay nor scale by trust ratio.

    By structure, for any encoder: every variable with at most one dimension (norm
    scales, offsets and statistics, biases), the encoder's `no_decay_variables()`
    (e.g. a ViT's class token and position embedding), and all weights of
    `model.supervised_head` when the model has one (not None). For ResNet this is
    exactly the reference's set: batch-norm weights, biases and the head.

    Args:
        model: a Keras model (built, so that its variables exist).

    Returns:
        A list of variables, without duplicates.
    """
    excluded = [w for w in model.weights if len(w.shape) <= 1]
    excluded += _encoder_no_decay(model)
    head = getattr(model, "supervised_head", None)
    if head is not None:
        excluded += list(head.weights)
    return _unique(excluded)


def lars_excluded_variables(model):
    """What LARS excludes from decay and trust scaling: `no_decay_variables`."""
    return no_decay_variables(model)


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


class RateMultipliers:
    """Mixin for Keras optimizers: chosen variables train at a multiple of the rate.

    `set_rate_multiplier(variables, factor)` before `build()`; each update of one of
    those variables then uses `factor * learning_rate` (the schedule's value at that
    step). Every other variable's update is computed exactly as without the mixin.
    Used for the online linear head's own learning rate (`--head_learning_rate`).
    Put it first in the bases; an optimizer that writes its own `update_step` (LARS)
    calls `self._rate(variable, learning_rate)` there.
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


@keras.saving.register_keras_serializable(package="simclr_tf")
class LARS(RateMultipliers, keras.optimizers.Optimizer):
    """Layer-wise Adaptive Rate Scaling with classic (heavy-ball) momentum.

    For each variable w with gradient g, unless w is excluded:
        g <- g + weight_decay * w
        trust = eeta * ||w|| / ||g||     (1 if either norm is 0)
    and trust = 1 without decay for excluded variables. Then
        v <- momentum * v + lr * trust * g
        w <- w - v                      (w - (momentum * v + lr * trust * g) if nesterov)

    Args:
        learning_rate: float, `LearningRateSchedule` or callable.
        momentum: momentum coefficient in [0, 1).
        eeta: trust coefficient, > 0.
        weight_decay: L2 coefficient added to the gradient inside the update, >= 0.
        nesterov: use Nesterov momentum.
        excluded_variables: variables excluded from weight decay and trust scaling
            (e.g. `lars_excluded_variables(model)`). Resolved once in `build()`.
            Not part of `get_config()`: pass them again when re-creating.
        name: optimizer name.
        **kwargs: other `keras.optimizers.Optimizer` arguments (clipnorm,
            loss_scale_factor, ...). Keras' own decoupled `weight_decay` is not
            used: the decay happens inside the LARS update.

    Example:
        optimizer = LARS(schedule, weight_decay=1e-6,
                         excluded_variables=lars_excluded_variables(model))
    """

    def __init__(self, learning_rate=0.001, momentum=0.9, eeta=0.001, weight_decay=0.0,
                 nesterov=False, excluded_variables=None, name="lars", **kwargs):
        # Keras' base class would apply its own (decoupled) decay from
        # `self.weight_decay`; this optimizer decays inside the update instead.
        super().__init__(learning_rate=learning_rate, weight_decay=None, name=name,
                         **kwargs)
        rules.check_momentum(momentum)
        if not isinstance(eeta, (int, float)) or not eeta > 0:
            raise ValueError(f"eeta must be > 0. Received: eeta={eeta!r}")
        rules.check_weight_decay(weight_decay)
        self.momentum = float(momentum)
        self.eeta = float(eeta)
        self.lars_weight_decay = float(weight_decay)
        self.nesterov = bool(nesterov)
        # Only the variables' keys are kept: a list of variables stored on the
        # optimizer would be tracked as optimizer state (and checkpointed).
        self._excluded_keys = frozenset(
            self._var_key(v) for v in (excluded_variables or []))

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Adds variables to the exclusions (weight decay and trust scaling).

        Args:
            var_list: variables to exclude. Must be called before `build()`.
            var_names: not supported: exclusions are structural, not by name.
        """
        if var_names:
            raise ValueError(
                "LARS excludes variables by identity (see lars_excluded_variables), "
                f"not by name. Received: var_names={var_names!r}")
        if self.built:
            raise ValueError("exclude_from_weight_decay() must be called before build().")
        self._excluded_keys = self._excluded_keys | frozenset(
            self._var_key(v) for v in (var_list or []))

    def build(self, variables):
        """Creates the momentum slots and resolves the exclusions to per-index flags."""
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum")
        # Indexed like `self._get_variable_index`, which maps the per-replica copies
        # seen in `update_step` under a strategy back to the built variable.
        self._excluded_flags = tuple(
            self._var_key(v) in self._excluded_keys for v in variables)

    def is_excluded(self, variable):
        """Whether a built variable is excluded from decay and trust scaling."""
        return self._excluded_flags[self._get_variable_index(variable)]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        lr = tf.cast(self._rate(variable, learning_rate), dtype)
        grad = tf.cast(gradient, dtype)
        if isinstance(grad, tf.IndexedSlices):
            grad = tf.convert_to_tensor(grad)
        weights = tf.convert_to_tensor(variable)
        if self._excluded_flags[index]:
            scaled_lr = lr
        else:
            if self.lars_weight_decay:
                grad = grad + tf.cast(self.lars_weight_decay, dtype) * weights
            w_norm = tf.norm(weights)
            g_norm = tf.norm(grad)
            trust = tf.where(
                tf.logical_and(w_norm > 0, g_norm > 0),
                tf.cast(self.eeta, dtype) * tf.math.divide_no_nan(w_norm, g_norm),
                tf.ones_like(w_norm))
            scaled_lr = lr * trust
        velocity = self.momentums[index]
        momentum = tf.cast(self.momentum, dtype)
        new_velocity = momentum * velocity + scaled_lr * grad
        self.assign(velocity, new_velocity)
        if self.nesterov:
            self.assign_sub(variable, momentum * new_velocity + scaled_lr * grad)
        else:
            self.assign_sub(variable, new_velocity)

    def get_config(self):
        config = super().get_config()
        config.update(momentum=self.momentum, eeta=self.eeta,
                      weight_decay=self.lars_weight_decay, nesterov=self.nesterov)
        return config


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
        optimizer = LARS(learning_rate, momentum=momentum, weight_decay=weight_decay,
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
            v for v in no_decay_variables(model)
            if id(v) not in head_ids or len(v.shape) <= 1])
    else:
        if not head_variables:
            return keras.optimizers.Adam(learning_rate)
        optimizer = AdamWithRates(learning_rate)
    if head_variables:
        optimizer.set_rate_multiplier(head_variables, head_rate_multiplier)
    return optimizer
