"""The SimCLR train / fine-tune steps, compiled around `strategy.run`, and their options
(`StepOptions`).

The steps only: `simclr_tf.run.loop` runs them (checkpoints, hooks, SIGTERM, non-finite
losses). A loop of our own rather than `model.fit`: `fit` fails under
MultiWorkerMirroredStrategy (keras-team/keras#20585), and the contrastive loss needs
a replica context to gather negatives from every replica.

Batches (see docs/design.md):
    pretrain: (images, labels), labels int32 [n] (-1 = unlabelled); images the two
              views float32 [n, H, W, 3] in [0, 1] as `(view1, view2)`, or with
              --augment_on=device the source images the step draws them from
              (`StepOptions.views`, an `augment.StepViews`);
    finetune, distill: (images, labels) (distill: -1 = unlabelled).

Evaluation needs no Trainer: see `simclr_tf.evaluation.supervised`.
"""
import dataclasses
import threading
from typing import Callable, Optional

import keras
import tensorflow as tf
from absl import logging

from simclr_tf.augment.recipe import StepViews
from simclr_tf.config import rules
from simclr_tf.config.tables import train_modes
from simclr_tf.method import collectives, optimizers
from simclr_tf.method.objectives import distill, finetune, pair_losses, pretrain


# Every metric a step can return; which ones it does depends on train_mode, the
# supervised head and loss scaling. Known up front for `simclr_tf.method.keras_fit`, whose
# Keras metric trackers must exist before the first step is traced.
METRICS = ("loss", "contrast_loss", "contrast_acc", "contrast_entropy", "supervised_loss",
           "supervised_acc", "distill_loss", "teacher_agreement", "weight_decay",
           "grad_norm", "learning_rate", "num_examples", "data_wait")


def metric_names():
    """`METRICS` and those a registered train mode's step adds (its row's `metrics`)."""
    extra = [name for row in train_modes.TRAIN_MODES.values() for name in row.metrics
             if name not in METRICS]
    return METRICS + tuple(dict.fromkeys(extra))
# Metrics that are counts: summed over replicas. All others are per-replica means
# over equally sized local batches, so their mean over replicas is the global value
# (grad_norm is already global: the norm of the summed gradients, equal on every
# replica).
_SUMMED = ("num_examples",)
# Logs that train_steps reports for the last step of a call, not as a mean.
LAST = ("learning_rate", "num_examples")


def reduce_op(name):
    """How metric `name` of the replicas' steps combines into the global value."""
    return tf.distribute.ReduceOp.SUM if name in _SUMMED else tf.distribute.ReduceOp.MEAN



def objective_class(train_mode):
    """The `objectives.base.Objective` subclass of `train_mode`, when a Trainer is
    built: a built-in train mode's named here, one registered from outside names its
    class in its row ('module:Class'). What each asks of the rest of the code is its
    row in the TF-free table `simclr_tf.config.tables.train_modes`."""
    built_in = {"pretrain": pretrain.Pretrain, "finetune": finetune.Finetune,
                "distill": distill.Distill, "nt_logistic": pair_losses.NTLogistic,
                "margin_triplet": pair_losses.MarginTriplet}
    if train_mode in built_in:
        return built_in[train_mode]
    return train_modes.get(train_mode).objective_class()


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """What a training step computes, besides the model and the optimizer: built once
    (from the Config by `simclr_tf.run.modes.parts.step_options`), taken by `Trainer`
    and `simclr_tf.method.keras_fit.SimCLR`. Checked when made.

    Attributes:
        train_mode: a row of `simclr_tf.config.tables.train_modes.TRAIN_MODES`, whose objective
            the step computes: 'pretrain' (two views, NT-Xent plus the supervised
            loss on the labelled examples), 'finetune' (one view, supervised loss
            only) or 'distill' (one view, the distillation loss against the
            Trainer's teacher, plus 1 - distill_alpha times the labelled
            cross-entropy), or a registered one.
        temperature: NT-Xent temperature.
        hidden_norm: L2-normalise projections in NT-Xent.
        blur_fn: optional callable `blur_fn(views, seed=...)` applied on device to
            the list `[view1, view2]` of view batches, returning the blurred list
            (e.g. `functools.partial(simclr_tf.augment.batch_random_blur,
            height=..., width=...)`). Pretraining only. `seed` is a stateless seed
            from `augment.view_seed(seed, step, replica[, chunk])`: a resumed run
            blurs as an uninterrupted one, and both passes of gradient caching blur
            a chunk alike.
        view_fn: optional callable run on device that turns the first element of a
            pretraining batch into `(view1, view2)` (augmentation on the device,
            `simclr_tf.augment.device.make_view_fn`). None: the batch carries
            the views. With `blur_fn` and `seed`, made into `views` (an
            `augment.StepViews`: the batch's images -> the two views) once, here.
        grad_cache_chunk: 0 (off) or the number of images per chunk for gradient
            caching (`simclr_tf.method.grad_cache`): the per-replica batch is processed
            in chunks of this many images (2x views), activation memory bounded by
            one chunk; BN then normalises with per-chunk statistics. Pretraining only;
            must divide the per-replica batch.
        seed: the run's seed, for the blur's seeds.
        distill_temperature: tau of `objectives.distill.distillation_loss` (distill only).
        distill_alpha: weight of the distillation loss; 1 - alpha weighs
            `objectives.distill.labelled_cross_entropy` (SimCLR v2, eq. 3). Distill only.
        objective_options: a registered objective's own options (its row's
            `options`): {name: value} or its (name, value) pairs, defaults filled in.
    """
    train_mode: str = "pretrain"
    temperature: float = 0.1
    hidden_norm: bool = True
    blur_fn: Optional[Callable] = None
    view_fn: Optional[Callable] = None
    grad_cache_chunk: int = 0
    seed: int = 0
    distill_temperature: float = 1.0
    distill_alpha: float = 1.0
    objective_options: tuple = ()
    # How the step's batch becomes its views (`augment.StepViews`, from view_fn,
    # blur_fn and seed): made here, once.
    views: StepViews = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        row = train_modes.get(self.train_mode)
        given = dict(self.objective_options)
        unknown = sorted(set(given) - {name for name, _ in row.options})
        if unknown:
            raise ValueError(f"objective_options of train_mode={self.train_mode!r} are "
                             f"{[name for name, _ in row.options]}. Received: {unknown}")
        row.check_options(given)  # the rules each option declares
        object.__setattr__(self, "objective_options", tuple(row.option_values(given).items()))
        rules.check_temperature(self.temperature)
        rules.check_distill_temperature(self.distill_temperature)
        rules.check_distill_alpha(self.distill_alpha)
        for name in ("blur_fn", "view_fn"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"{name} must be callable or None. Received: "
                                 f"{name}={value!r}")
        rules.check_grad_cache_chunk(self.grad_cache_chunk)
        train_modes.check_grad_cache_mode(self.grad_cache_chunk, self.train_mode)
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "hidden_norm", bool(self.hidden_norm))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "distill_temperature", float(self.distill_temperature))
        object.__setattr__(self, "distill_alpha", float(self.distill_alpha))
        object.__setattr__(self, "views", StepViews(self.view_fn, self.blur_fn, self.seed))


def given_options(owner, options, keywords):
    """The step's options given to `owner` (`Trainer`, `keras_fit.SimCLR`): `options`,
    a `StepOptions`, or `StepOptions()` when None. A field of `StepOptions` among the
    other `keywords` is refused, naming the way to pass it (they were keywords once)."""
    fields = [name for name in keywords if name in _STEP_OPTION_FIELDS]
    if fields:
        example = ", ".join(f"{name}={keywords[name]!r}" for name in fields)
        raise TypeError(
            f"{owner} takes the step's options as one StepOptions, not as keywords: pass "
            f"options=StepOptions({example}) (simclr_tf.method.train.StepOptions). Received: "
            f"{example}")
    if options is None:
        return StepOptions()
    if not isinstance(options, StepOptions):
        raise ValueError(f"options must be a StepOptions. Received: options={options!r}")
    return options


_STEP_OPTION_FIELDS = frozenset(field.name for field in dataclasses.fields(StepOptions)
                                if field.init)


class Trainer:
    """Runs SimCLR training steps under any `tf.distribute` strategy.

    The model is called on images [B, H, W, 3] and returns a dict with
    'proj_head_output' (pretraining) and 'logits_sup' (when it has a supervised
    head); `model.supervised_head` is that head or None.

    Args:
        strategy: the strategy the model and optimizer were created under.
        model: a built Keras model following the contract above.
        optimizer: a Keras optimizer (e.g. from `optimizers.build_optimization`),
            wrapped in `keras.optimizers.LossScaleOptimizer` when the model
            computes in float16. Built here on `model.trainable_variables`.
        options: the step's `StepOptions` (train mode, temperature, blur, views,
            gradient caching, seed); None: `StepOptions()`, pretraining's defaults.
        weight_decay_loss: the weight decay that enters the loss, an
            `optimizers.LossWeightDecay` (from `optimizers.build_optimization`,
            which resolves its variables once); None for none.
        steps_per_loop: training steps per call of the compiled function (fewer
            host round trips, e.g. on TPU); `simclr_tf.run.loop` sees every call.
        jit_compile: XLA-compile the step. Off by default: on CPU it is slower and
            it fails under MirroredStrategy.
        teacher: train_mode 'distill': the fixed teacher, `teacher(images) ->
            logits` (a `simclr_tf.weights.teacher.Teacher`, built under the same
            strategy); it runs in inference mode and receives no gradient.
        **unexpected: none is taken; a `StepOptions` field among them is refused
            with the way to pass it (`options=StepOptions(...)`).

    Example:
        with strategy.scope():
            model = ...; model(tf.zeros([1, 32, 32, 3]))
            optimizer, decay = optimizers.build_optimization(
                'lars', schedule, weight_decay=1e-6, model=model)
        trainer = Trainer(strategy, model, optimizer, StepOptions(temperature=0.5),
                          weight_decay_loss=decay)
        logs = trainer.train_steps(iter(strategy.experimental_distribute_dataset(ds)), steps)
    """

    def __init__(self, strategy, model, optimizer, options=None, *, weight_decay_loss=None,
                 steps_per_loop=1, jit_compile=False, teacher=None, **unexpected):
        self.options = given_options("Trainer", options, unexpected)
        if unexpected:
            raise TypeError("Trainer got unexpected keyword arguments: "
                            f"{', '.join(sorted(unexpected))}")
        row = train_modes.get(self.options.train_mode)
        if row.needs_teacher != (teacher is not None):
            raise ValueError("A train mode that learns from a teacher (distill) needs a "
                             "teacher, and only it takes one. Received: train_mode="
                             f"{self.options.train_mode!r}, teacher={teacher!r}")
        self.teacher = teacher
        check_arguments(model, steps_per_loop=steps_per_loop)
        _check_optimizer(model, optimizer)
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.weight_decay_loss = weight_decay_loss or optimizers.LossWeightDecay([], 0.0)
        self.steps_per_loop = steps_per_loop
        self.jit_compile = jit_compile
        with strategy.scope():
            optimizer.build(model.trainable_variables)
            # The train mode's loss (`simclr_tf.method.objectives`); its `state()` is saved
            # with the model's checkpoint.
            self.objective = objective_class(row.name)(self, teacher=teacher)
        self._train_function = None

    @property
    def step(self):
        """The global step: optimizer updates applied so far."""
        return int(self.optimizer.iterations.numpy())

    # ----- the step (runs in a replica context) ------------------------------------

    def train_step(self, batch):
        """One optimisation step of the objective of `train_mode`; returns this
        replica's metrics.

        Every op of the step waits for the batch, also those with no data input (the
        optimizer's step counter, the learning rate, seed state): otherwise they run
        while the read of the batch blocks, and a checkpoint saved then (a stop signal
        while the input hangs, `simclr_tf.run.loop`) would count a step whose weights it
        does not hold. (Inside the replica function: `merge_call`s inherit these
        dependencies from the replica threads of a MirroredStrategy.)"""
        with tf.control_dependencies(tf.nest.flatten(batch, expand_composites=True)):
            return self.objective.train_step(batch)

    def total_loss(self, loss):
        """(loss + weight decay, the decay, the replica's scaled loss to differentiate)."""
        with tf.name_scope("weight_decay"):  # names only (scripts/step_profile.py)
            decay = self.weight_decay_loss()
        loss = loss + decay
        # The optimizer sums gradients over replicas, so each replica contributes
        # 1/R of the global loss. This must happen inside the tape.
        replica_loss = loss / collectives.num_replicas_in_sync()
        return loss, decay, self.optimizer.scale_loss(replica_loss)

    def apply(self, *, grads, variables, metrics, loss, decay, learning_rate):
        """Applies this replica's `grads` to `variables`; returns `metrics` with the
        step's logs.

        The gradients are summed over replicas once, here (the step's one gradient
        all-reduce, as in the authors' step): the norm is taken of that sum and the
        optimizer is given it as already summed (`apply_summed_gradients`)."""
        pairs = _with_gradients(grads, variables, self.model)
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            # Loss scaling checks the scaled local gradients before its inner optimizer
            # sums them (one all-reduce there), and skips non-finite float16 steps
            # itself: no norm is taken.
            self.optimizer.apply_gradients(pairs)
        else:
            with tf.name_scope("gradient_sum"):  # names only (scripts/collectives.py)
                summed = collectives.cross_replica_sum([g for g, _ in pairs])
            # Checked after the step (`_check_finite`); an Inf gradient with a finite
            # loss would otherwise only show up as a NaN loss one step later.
            with tf.name_scope("grad_norm"):  # names only (scripts/step_profile.py)
                metrics["grad_norm"] = tf.cast(tf.linalg.global_norm(summed), tf.float32)
            # Keras' apply_gradients, which calls the optimizer's update per variable
            # (`LARS.update_step`; first `RateMultipliers.update_step` with head rates).
            apply_summed_gradients(self.optimizer,
                                   list(zip(summed, [v for _, v in pairs])))
        metrics.update(loss=loss, weight_decay=decay, learning_rate=learning_rate)
        return metrics

    # ----- distributed functions ---------------------------------------------------

    def _reduce(self, per_replica):
        """Per-replica scalars -> global values: sums for `_SUMMED`, means otherwise."""
        return {name: self.strategy.reduce(reduce_op(name), value, axis=None)
                for name, value in per_replica.items()}

    def _compiled(self, step_fn):
        """`step_fn` XLA-compiled when `jit_compile`: the per-replica step only, since
        the loop around it reads the iterator, which XLA cannot compile."""
        return tf.function(step_fn, jit_compile=True) if self.jit_compile else step_fn

    def _make_train_function(self):
        train_step = self._compiled(self.train_step)

        # TensorFlow refuses Timestamp under op determinism (--deterministic): those
        # runs go without `data_wait`.
        measure_wait = not _op_determinism_enabled()

        def one_step(iterator):
            if not measure_wait:
                return self._reduce(self.strategy.run(train_step, args=(next(iterator),)))
            # Seconds this step waited for its batch (the input pipeline's share of
            # the step: `data_wait`), bracketed by timestamps ordered around the read.
            # It orders no computation: the step's values are unchanged.
            start = tf.timestamp()
            with tf.control_dependencies([start]):
                batch = next(iterator)
            with tf.control_dependencies(tf.nest.flatten(batch, expand_composites=True)):
                waited = tf.cast(tf.timestamp() - start, tf.float32)
            logs = self._reduce(self.strategy.run(train_step, args=(batch,)))
            logs["data_wait"] = waited
            return logs

        @tf.function
        def train_function(iterator, num_steps):
            logs = one_step(iterator)
            sums = dict(logs)
            for _ in tf.range(num_steps - 1):
                logs = one_step(iterator)
                sums = {name: sums[name] + value for name, value in logs.items()}
            steps = tf.cast(num_steps, tf.float32)
            return {name: logs[name] if name in LAST else sums[name] / steps
                    for name in logs}

        return train_function

    def train_steps(self, iterator, num_steps=1):
        """Runs `num_steps` (>= 1) steps in one compiled call; returns their logs:
        means over the steps (as the authors' summaries), except `learning_rate` and
        `num_examples`, the last step's.

        Args:
            iterator: an iterator over a distributed dataset
                (`iter(strategy.experimental_distribute_dataset(...))` or
                `iter(strategy.distribute_datasets_from_function(...))`).
            num_steps: steps to run.

        Returns:
            Dict of numpy float32 scalars (means over replicas; num_examples, the
            images in the global batch, summed over replicas).
        """
        if self._train_function is None:
            self._train_function = self._make_train_function()
        logs = self._train_function(iterator, tf.constant(num_steps, tf.int32))
        return {name: value.numpy() for name, value in logs.items()}


def _op_determinism_enabled():
    """Whether `tf.config.experimental.enable_op_determinism` is on (TensorFlow 2.21
    has no public getter; without the private one, assume on: then nothing is timed)."""
    from tensorflow.python.framework import config as framework_config  # pylint: disable=import-outside-toplevel
    getter = getattr(framework_config, "is_op_determinism_enabled", None)
    return True if getter is None else bool(getter())


def apply_summed_gradients(optimizer, pairs):
    """`optimizer.apply_gradients(pairs)` for gradients already summed over replicas.

    A Keras optimizer on TensorFlow sums the gradients over replicas inside
    `apply_gradients` (`TFOptimizer._all_reduce_sum_gradients`, an all-reduce in
    a replica context of several replicas). Given gradients the step has summed
    itself, it is told so for this call: its reduction is skipped, so the step
    all-reduces its gradients once, not twice. The update is unchanged: the same
    sum, made by the same `ReplicaContext.all_reduce` call. Outside a replica
    context of several replicas there is nothing to sum and the call is plain.
    (Keras is pinned; a version without that method is refused, not run with
    gradients summed twice; `scripts/collectives.py` counts the step's all-reduces
    and tests/test_collectives.py fails on a second one.)

    Args:
        optimizer: a Keras optimizer (not a `LossScaleOptimizer`, which checks the
            local gradients before summing them).
        pairs: (summed gradient, variable) pairs.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return optimizer.apply_gradients(pairs)
    _skippable_gradient_sum(optimizer)
    # MirroredStrategy runs the replicas' steps in threads of their own, all on this
    # optimizer: the switch is per thread.
    _ALREADY_SUMMED.active = True
    try:
        return optimizer.apply_gradients(pairs)
    finally:
        _ALREADY_SUMMED.active = False


# Keras' TensorFlow optimizer's all-reduce of the gradients (keras 3.15, TFOptimizer).
_KERAS_GRADIENT_SUM = "_all_reduce_sum_gradients"
_ALREADY_SUMMED = threading.local()
_ALREADY_SUMMED_LOCK = threading.Lock()


def _skippable_gradient_sum(optimizer):
    """Gives `optimizer` (once) a gradient sum that `apply_summed_gradients` skips."""
    with _ALREADY_SUMMED_LOCK:
        if _KERAS_GRADIENT_SUM in vars(optimizer):
            return
        keras_sum = getattr(optimizer, _KERAS_GRADIENT_SUM, None)
        if keras_sum is None:
            raise NotImplementedError(
                f"{type(optimizer).__name__} has no {_KERAS_GRADIENT_SUM} (a Keras other "
                f"than {keras.__version__}?): simclr_tf cannot tell it that the gradients "
                "are summed already. Install the Keras of setup.py.")

        def gradient_sum(grads_and_vars):
            if getattr(_ALREADY_SUMMED, "active", False):
                return list(grads_and_vars)
            return keras_sum(grads_and_vars)

        setattr(optimizer, _KERAS_GRADIENT_SUM, gradient_sum)


def _with_gradients(grads, variables, model=None):
    """(gradient, variable) pairs without the variables that get no gradient.

    Fine-tuning from `ft_proj_selector` leaves the projection head's later layers out
    of the loss (they still run, for z): the optimizer would skip them anyway, with a
    warning at every trace. Any other variable without a gradient is warned about
    once, at trace time (it is likely a bug). Numerics are unchanged: the optimizer
    was built on every trainable variable.
    """
    pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
    head = getattr(model, "projection_head", None)
    expected = {id(v) for v in head.variables} if head is not None else set()
    unexpected = [v.path for g, v in zip(grads, variables)
                  if g is None and id(v) not in expected]
    if unexpected:
        logging.warning("No gradient reaches these variables (they do not train): %s",
                        ", ".join(unexpected))
    return pairs


def check_arguments(model, *, steps_per_loop=1):
    """The Trainer's own arguments but the optimizer and the step's options (the
    loss, the optimizer and `StepOptions` check theirs); also checked by
    `simclr_tf.method.keras_fit.SimCLR` before it has an optimizer."""
    if not isinstance(steps_per_loop, int) or steps_per_loop < 1:
        raise ValueError(
            "steps_per_loop must be a positive int. Received: "
            f"steps_per_loop={steps_per_loop!r}")
    if not model.built:
        raise ValueError("The model must be built (called once) before the Trainer.")


def _check_optimizer(model, optimizer):
    compute_dtype = getattr(model.dtype_policy, "compute_dtype", "float32")
    if compute_dtype == "float16" and not isinstance(
            optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError(
            "A float16 model needs loss scaling: wrap the optimizer in "
            "keras.optimizers.LossScaleOptimizer. Received: "
            f"optimizer={type(optimizer).__name__}")
