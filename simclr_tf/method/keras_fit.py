"""`SimCLR`: SimCLR pretraining (or fine-tuning) through `keras.Model.fit`.

The step is the loop's: `SimCLR.train_step` calls `train.Trainer.train_step` (NT-Xent
over negatives gathered from every replica with gradients, the online head, the loss
weight decay, blur and device views, gradient caching, the optimizer update), so `fit`
and `simclr_tf.run.loop` train alike, weight for weight (`tests/test_fit.py`). What this
module adds is the Keras side: metric trackers and the checks `fit` needs.

Keras runs `train_step` once per replica under `strategy.run` and then averages what
the replicas return (TPUStrategy: takes the first). Each replica therefore all-reduces
the step's metrics first (means, `num_examples` summed: `train.reduce_op`), so every
replica holds the global values and both reductions return them. The logs are the
loop's: means over the epoch's steps, the learning rate and the batch size of the last.

A step whose loss or gradient norm is not finite, or an epoch that ends with weights
that are not, stops `fit` with `NonFiniteTrainingError` before any other callback sees
it (a guard callback runs first): TerminateOnNaN would only stop the epoch, after
which ModelCheckpoint writes the NaN weights and BackupAndRestore deletes its backup.
What they wrote before holds the last finite state.

Not supported: MultiWorkerMirroredStrategy (`fit` fails there upstream,
keras-team/keras#20585: use `run.py --strategy=multiworker`), `compile(loss=...)` or
metrics (the loss is SimCLR's), `evaluate` (use `simclr_tf.evaluation` on `network`),
saving the whole model as .keras (save weights; the network saves on its own).
"""
import keras
import tensorflow as tf

from simclr_tf.method import finite, train
from simclr_tf.config.tables import train_modes


class NonFiniteTrainingError(FloatingPointError):
    """`SimCLR.fit` stopped: a step's loss or gradient norm, or the weights at the end
    of an epoch, are NaN or infinite; no callback saw them."""


class SimCLR(keras.Model):
    """A network trained by SimCLR's step under `fit`; calling it calls the network.

    Create it, the network and the optimizer under the strategy's scope.

    Args:
        network: a built Keras model following the Trainer's contract (a dict with
            'proj_head_output', 'logits_sup' when it has a supervised head;
            `network.supervised_head`), e.g. `simclr_tf.models.SimCLRModel`.
        options: the step's `simclr_tf.method.train.StepOptions` (train_mode, temperature,
            ...); None: `StepOptions()`, pretraining's defaults.
        weight_decay_loss: as for `simclr_tf.method.train.Trainer`.
        **kwargs: `keras.Model` arguments (name, ...). A `StepOptions` field among
            them is refused with the way to pass it (`options=StepOptions(...)`).

    Example:
        with strategy.scope():
            network = SimCLRModel(encoder_options=dict(depth=18, stem="cifar"),
                                  num_classes=10)
            network.build((None, 32, 32, 3))
            optimizer, decay = optimizers.build_optimization(
                "lars", schedule, weight_decay=1e-6, model=network)
            model = SimCLR(network, StepOptions(temperature=0.5),
                           weight_decay_loss=decay)
        model.compile(optimizer=optimizer)
        model.fit(dataset, epochs=10, steps_per_epoch=100)
    """

    def __init__(self, network, options=None, *, weight_decay_loss=None, **kwargs):
        self.options = train.given_options("SimCLR", options, kwargs)
        if train_modes.get(self.options.train_mode).needs_teacher:
            raise ValueError("train_mode='distill' runs in the custom loop only (run.py "
                             "--train_mode=distill, or simclr_tf.method.train.Trainer with a "
                             "teacher); SimCLR under fit() pretrains and fine-tunes.")
        super().__init__(**kwargs)
        train.check_arguments(network)
        network_strategy = getattr(network, "distribute_strategy", self.distribute_strategy)
        if network_strategy is not self.distribute_strategy:
            raise ValueError(
                "Create the network and SimCLR under the same strategy's scope. Received: "
                f"network under {type(network_strategy).__name__}, SimCLR under "
                f"{type(self.distribute_strategy).__name__}")
        self.network = network
        self.weight_decay_loss = weight_decay_loss
        self._trainer = None
        self._trackers = {}
        self._logged = ()
        self.built = True

    def call(self, images, training=False):
        return self.network(images, training=training)

    def compile(self, optimizer, loss=None, loss_weights=None, metrics=None,
                weighted_metrics=None, run_eagerly=False, steps_per_execution=1,
                jit_compile=False, auto_scale_loss=True):
        """Sets the optimizer (e.g. from `optimizers.build_optimization(...,
        model=network)`); the loss is SimCLR's, so `loss` and metrics must be None.

        `jit_compile` is False by default, as the loop's (Keras' "auto" would
        XLA-compile the step on a GPU); the other arguments are Keras'.
        """
        given = [f"{name}={value!r}" for name, value in [
            ("loss", loss), ("loss_weights", loss_weights), ("metrics", metrics),
            ("weighted_metrics", weighted_metrics)] if value is not None]
        if given:
            raise ValueError(
                "SimCLR trains with its own loss (NT-Xent, the online head's loss and "
                "weight decay) and logs its own metrics: call compile(optimizer=...) "
                f"only. Received: {', '.join(given)}")
        _check_strategy(self.distribute_strategy)
        super().compile(optimizer=optimizer, run_eagerly=run_eagerly,
                        steps_per_execution=steps_per_execution, jit_compile=jit_compile,
                        auto_scale_loss=auto_scale_loss)
        self._trainer = train.Trainer(
            self.distribute_strategy, self.network, self.optimizer, self.options,
            weight_decay_loss=self.weight_decay_loss)
        # Created before any step is traced: metric variables cannot be created inside
        # a replica context. Which of them a step updates is known once it is traced.
        with self.distribute_strategy.scope():
            self._trackers = {name: _LastValue(name=name) if name in train.LAST
                              else keras.metrics.Mean(name=name)
                              for name in train.metric_names()}

    def fit(self, *args, **kwargs):
        _check_strategy(self.distribute_strategy)
        # SimCLR's input is a tf.data pipeline that shuffles itself; Keras' default
        # shuffle=True would only warn that it ignores it on every fit.
        kwargs.setdefault("shuffle", False)
        if len(args) > 5:
            raise ValueError("Pass fit's callbacks (and the arguments after them) by "
                             "keyword: callbacks=[...].")
        callbacks = kwargs.get("callbacks")
        guard = _FiniteGuard(self)
        if isinstance(callbacks, keras.callbacks.CallbackList):
            guard.set_model(self)
            callbacks.callbacks.insert(0, guard)
        else:
            # First: its check runs before any other callback's batch or epoch end.
            kwargs["callbacks"] = [guard, *(callbacks or [])]
        return super().fit(*args, **kwargs)

    @property
    def metrics(self):
        return [self._trackers[name] for name in self._logged]

    def train_step(self, data):
        """The Trainer's step on this replica; returns the global logs so far."""
        metrics = self._trainer.train_step(data)
        unknown = sorted(set(metrics) - set(train.metric_names()))
        if unknown:
            raise ValueError(f"The step returned metrics missing from train.METRICS: {unknown}")
        # The metrics of every replica's step: each replica gets the global values.
        context = tf.distribute.get_replica_context()
        by_op = {}
        for name, value in metrics.items():
            by_op.setdefault(train.reduce_op(name), {})[name] = value
        for op, values in by_op.items():
            for name, value in context.all_reduce(op, values).items():
                self._trackers[name].update_state(value)
        # At trace time: the logs of this step function (train_mode, head, scaling).
        self._logged = tuple(name for name in train.metric_names() if name in metrics)
        return {name: self._trackers[name].result() for name in self._logged}

    def get_config(self):
        raise NotImplementedError(
            "SimCLR is not saved whole (.keras): its step holds callables and variable "
            "references (weight_decay_loss, blur_fn, view_fn). Save the training state "
            "with ModelCheckpoint(..., save_weights_only=True) or save_weights, and the "
            "network with network.save(...) or run.py --mode=export.")

    def test_step(self, data):
        raise ValueError(
            "SimCLR has no evaluation step: evaluate the network with "
            "simclr_tf.evaluation (supervised top-1, kNN, linear probe) instead of "
            "fit(validation_data=...) or evaluate().")


class _LastValue(keras.metrics.Metric):
    """The last value (the loop logs the last step's learning rate and batch size)."""

    def __init__(self, name, dtype="float32"):
        super().__init__(name=name, dtype=dtype)
        # Every replica holds the same (all-reduced) value: read the first's.
        self.value = self.add_variable(shape=(), initializer="zeros", dtype=self.dtype,
                                       aggregation="only_first_replica", name="value")

    def update_state(self, value):
        self.value.assign(tf.cast(value, self.dtype))

    def result(self):
        return tf.identity(self.value)

    def reset_state(self):
        self.value.assign(tf.zeros_like(self.value))


class _FiniteGuard(keras.callbacks.Callback):
    """Raises NonFiniteTrainingError at the end of a step whose loss or gradient norm
    is not finite, and at the end of an epoch whose weights are not (a finite step
    can still leave them infinite, e.g. an infinite rate), before the callbacks
    after it run their batch or epoch end."""

    def __init__(self, simclr):
        super().__init__()
        self._simclr = simclr

    def _step(self):
        return int(self._simclr.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        # The logs are running means over the epoch: one non-finite step makes them so.
        what = finite.non_finite_logs(logs) if logs and "loss" in logs else None
        if what is not None:
            self._stop(f"the training {what} by step {self._step()}")

    def on_epoch_end(self, epoch, logs=None):
        model = self._simclr
        bad = finite.non_finite_variables(model.network.weights + model.optimizer.variables)
        if bad:
            self._stop(f"after step {self._step()} (epoch {epoch + 1}), {len(bad)} weight "
                       f"or optimizer tensors hold NaN or infinite values (e.g. "
                       f"{', '.join(bad[:3])})")

    @staticmethod
    def _stop(what):
        raise NonFiniteTrainingError(
            f"SimCLR.fit stopped: {what}. No callback has seen these weights: what "
            "ModelCheckpoint and BackupAndRestore wrote before holds the last finite "
            "state (resume from it). Likely a learning rate too high (the schedule's "
            "base rate, or the warmup), a temperature too low, or float16 overflow.")


def _check_strategy(strategy):
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        raise ValueError(
            "SimCLR.fit does not run under MultiWorkerMirroredStrategy: Keras' fit fails "
            "there with 'Attempt to convert a value (PerReplica...) with an unsupported "
            "type' (keras-team/keras#20585). Train on several workers with the loop: "
            "`python run.py --strategy=multiworker ...` (simclr_tf.run.loop). Received: "
            f"strategy={type(strategy).__name__}")
