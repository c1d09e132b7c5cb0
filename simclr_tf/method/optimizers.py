"""The optimizer factory of `--optimizer`: the optimizer (LARS, `simclr_tf.method.lars`;
momentum, Adam, AdamW) and the loss's weight decay (`simclr_tf.method.loss_decay`),
resolved once from the model's structure.
"""
import keras

from simclr_tf.config import rules
from simclr_tf.method.lars import LARS, lars_excluded_variables
from simclr_tf.method.rate_multipliers import (AdamWithRates, AdamWWithRates, LARSWithRates,
                                               NesterovSGD)
from simclr_tf.method.loss_decay import weight_decay_loss


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
