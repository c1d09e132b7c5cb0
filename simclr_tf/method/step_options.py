"""The options of a training step besides the model and the optimizer (`StepOptions`),
checked when made: what the Config decides about the step (train mode, temperature,
blur, views, gradient caching, seed, distillation, a registered objective's options).
`simclr_tf.method.train.Trainer` and `simclr_tf.method.keras_fit.SimCLR` take them.
"""
import dataclasses
from typing import Callable, Optional

from simclr_tf.augment.recipe import StepViews
from simclr_tf.config import rules
from simclr_tf.config.tables import train_modes


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
