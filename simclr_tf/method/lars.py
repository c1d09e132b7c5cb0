"""LARS, the paper's optimizer (§2.2; You et al. 2017), and the variables it excludes
from weight decay and trust-ratio scaling (`lars_excluded_variables`).

Which variables are excluded is decided by the model's structure (a variable's rank,
what the encoder declares, the supervised head), never by variable-name patterns,
whose spelling changed between Keras versions. The rule holds for any encoder
(ResNet, ViT, ...): see `lars_excluded_variables`.
"""
import keras
import tensorflow as tf

from simclr_tf.config import rules


@keras.saving.register_keras_serializable(package="simclr_tf")
class LARS(keras.optimizers.Optimizer):
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
        # The schedule's rate (the online head's own, --head_learning_rate, when the
        # factory made an `optimizers.LARSWithRates`: it multiplies the rate first).
        lr = tf.cast(learning_rate, dtype)
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


def _unique(variables):
    seen, result = set(), []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            result.append(v)
    return result


def _encoder_no_decay(model):
    encoder = getattr(model, "encoder", None)
    declared = getattr(encoder, "no_decay_variables", None)
    return list(declared()) if declared is not None else []


def lars_excluded_variables(model):
    """The variables LARS neither decays nor scales by trust ratio, by structure:

    - every variable with at most one dimension: batch-norm scales, offsets and
      statistics, biases (a ViT's LayerNorm too);
    - the encoder's own `no_decay_variables()` (e.g. a ViT's class token and
      position embedding);
    - every weight of `model.supervised_head` when the model has one (not None):
      its kernel decays in the loss instead (`optimizers.LossWeightDecay`).

    For ResNet this is exactly the reference's set: batch-norm weights, biases and
    the supervised head. AdamW (`optimizers.build_optimizer`) spares the same but the
    head's kernel.

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
