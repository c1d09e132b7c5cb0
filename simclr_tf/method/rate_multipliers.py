"""Per-variable learning-rate multipliers for Keras optimizers (`RateMultipliers`), for
the online linear head's own rate (`--head_learning_rate`, not the paper's), and the
optimizers that carry them (LARS and Keras' own)."""
import keras

from simclr_tf.method.lars import LARS


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
