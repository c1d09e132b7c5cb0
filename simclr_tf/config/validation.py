"""The checks of a Config that the flags alone decide (`Config.validate` runs them):
each value, then the rules between flags. Checks that need the dataset or the strategy
(split names, labels, replica count) run in `simclr_tf.run.preflight`."""
import json

from simclr_tf.config import rules
from simclr_tf.config.tables import encoders as encoder_table
from simclr_tf.config.tables import evaluators as evaluator_table
from simclr_tf.config.tables import modes
from simclr_tf.config.tables import train_modes
from simclr_tf.config.errors import ConfigError


def validate(config):
    """Checks every value and combination; returns config or raises ConfigError.

    Only what the flags alone decide is checked here; checks that need the
    dataset or the strategy (split names, labels, replica count) run in
    `simclr_tf.run.preflight` before any model is built.
    """
    if config.objective_module:  # its train mode is a choice (run.py loads it first)
        try:
            train_modes.load_module(config.objective_module)
        except ValueError as error:
            raise ConfigError.from_rule("objective_module", error) from None
    check_fields(config)
    _check_combinations(config)
    return config


def check_inert_flags(config):
    """The one rule for flags that would do nothing: a flag given (on the command line
    or in a flagfile: `Config.is_given`) where it does not apply is refused, naming
    where it applies and the fix, instead of being ignored. Where a Config field
    applies, its declaration says (`fields.field(..., applies=...)`); a train mode's
    own option (`--triplet_margin`) applies to the train modes whose rows have it. A
    flag read from a record (`simclr_tf.config.inherit`) is left as the record has it:
    the run it describes is not this command's mistake."""
    for name, applies in config.field_applies():
        if config.is_given(name):
            applies(config, name)
    if not config.is_given("objective_options"):
        return
    for name in objective_options(config):
        owners = train_modes.modes_with_option(name)
        if owners:  # an option of no train mode is `_check_objective_options`' error
            train_modes.applies(lambda row, name=name: name in dict(row.options),
                                "with --train_mode={modes}",
                                f"pass --train_mode={owners[0]}")(config, name)


def objective_option_values(config):
    """{option: value} of the train mode's own options, defaults filled in; another
    mode's, which a record may hold, left out (one given is refused:
    `check_inert_flags`)."""
    return train_modes.get(config.train_mode).option_values(objective_options(config))


def objective_options(config):
    """{option: value} that --objective_options gives (JSON; run.py writes it from the
    train modes' option flags); ConfigError unless a JSON object."""
    try:
        given = json.loads(config.objective_options or "{}")
    except ValueError as error:
        raise ConfigError("objective_options", f"is not valid JSON ({error}).") from None
    if not isinstance(given, dict):
        raise ConfigError("objective_options", "must be a JSON object of the train "
                          f"mode's options; got {config.objective_options!r}.")
    return given


def check_fields(config):
    """Each field's checks, declared where the field is (`Config.field_checks`,
    `simclr_tf.config.bounds`), in one loop: an unset Optional field is not checked, and a
    check that reads other settings runs once every field's own value is checked."""
    checks = [(name, check) for name, check in config.field_checks()
              if getattr(config, name) is not None or not config.is_optional(name)]
    for name, check in sorted(checks, key=lambda item: item[1].reads_others(item[0])):
        check(config, name)


def _check_combinations(config):
    """Rules between flags."""
    mode = modes.get(config.mode)
    objective = train_modes.get(config.train_mode)
    _check_objective_options(config, objective)
    check_inert_flags(config)
    if mode.trains:
        _check_training(config, objective)
    if config.train_steps == 0 and config.train_epochs == 0 and mode.trains:
        raise ConfigError("train_epochs", "and --train_steps are both 0: set one of "
                          "them to say how long to train.")
    if config.checkpoint_steps == 0 and config.checkpoint_epochs == 0:
        raise ConfigError("checkpoint_epochs", "and --checkpoint_steps are both 0: set "
                          "one of them (e.g. --checkpoint_epochs=1).")
    if config.fine_tune_after_block > -1 and not objective.freezes:
        raise ConfigError("fine_tune_after_block", f"is {config.fine_tune_after_block}: "
                          "freezing layers while pretraining is not supported (the "
                          "authors' code raises too); drop it (-1) or use "
                          "--train_mode=finetune.")
    _check_encoder(config)
    evaluator_table.check(config)
    if mode.trains or config.teacher:
        _check_distillation(config, mode, objective)
    if mode.needs_model_dir and config.model_dir in (None, ""):
        raise ConfigError("model_dir", "is required: the directory for checkpoints, "
                          "summaries and exports, e.g. --model_dir=/tmp/simclr_run.")
    if not mode.needs_model_dir and config.model_dir in (None, "") \
            and not config.checkpoint:
        raise ConfigError("model_dir", f"or --checkpoint is required with "
                          f"--mode={config.mode}: the run to evaluate.")
    if config.mode == "embed" and config.embed_output and not config.embed_output.endswith(
            (".npz", ".parquet")):
        raise ConfigError("embed_output", "must end with .npz or .parquet; got "
                          f"{config.embed_output!r}.")
    if config.use_tpu and config.strategy not in ("auto", "tpu"):
        raise ConfigError("strategy", f"--use_tpu conflicts with --strategy={config.strategy}; "
                          "drop one of them.")
    if config.mixed_precision == "float16" and (config.use_tpu or config.strategy == "tpu"):
        raise ConfigError("mixed_precision", "TPUs do not support float16; use "
                          "--mixed_precision=bfloat16.")
    if mode.trains and config.augment_on == "device" and objective.views != 2:
        raise ConfigError("augment_on", "device draws the two pretraining views in the "
                          "train step; fine-tuning's crops run on the host: drop "
                          "--augment_on=device (or pretrain).")
    if mode.trains and config.augment_on == "device" and config.augmentations.strip():
        raise ConfigError("augmentations", "chooses the host's transformations; "
                          "--augment_on=device draws all three: drop one of them.")
    if config.cpu_replicas and config.strategy != "mirrored":
        raise ConfigError("cpu_replicas", f"is {config.cpu_replicas}: it splits the CPU "
                          "into the replicas of --strategy=mirrored; add "
                          "--strategy=mirrored, or drop --cpu_replicas (--strategy="
                          f"{config.strategy}).")
    if config.jit_compile and config.strategy == "mirrored":
        raise ConfigError("jit_compile", "is not supported under MirroredStrategy on "
                          "TensorFlow 2.21 (XLA cannot reach the other replicas' "
                          "variables); drop --jit_compile.")


def _check_objective_options(config, objective):
    """--objective_options is a JSON object of train modes' options, and the train
    mode's own pass their declared checks (`TrainMode.check_options`). An option of
    another train mode is `check_inert_flags`' (refused when given)."""
    given = objective_options(config)
    unknown = sorted(name for name in given if not train_modes.modes_with_option(name))
    if unknown:
        known = [name for name, _ in objective.options]
        raise ConfigError("objective_options", f"must be a JSON object of the options of "
                          f"--train_mode={config.train_mode} ({', '.join(known) or 'none'}); "
                          f"got {config.objective_options!r}.")
    objective.check_options(given)


def _check_distillation(config, mode, objective):
    """--teacher names the teacher of a distillation run, and only then; the labels
    it mixes in come with --distill_alpha < 1."""
    distilling = mode.trains and objective.needs_teacher
    if distilling and not config.teacher:
        raise ConfigError("teacher", "is required with --train_mode=distill: the "
                          "fine-tuned model to distil, e.g. --teacher=<a fine-tuning "
                          "run directory> (a checkpoint, one of our exports or an "
                          "authors' released fine-tuned model also work).")
    if config.teacher and mode.trains and not distilling:
        raise ConfigError("teacher", f"is the teacher of --train_mode=distill; drop it "
                          f"with --train_mode={config.train_mode} (or distil).")
    if not distilling:
        return
    if config.label_fraction < 1.0 and config.distill_alpha == 1.0:
        raise ConfigError("label_fraction", f"is {config.label_fraction}, but "
                          "--distill_alpha=1.0 uses no labels: pass --distill_alpha < 1 "
                          "to mix in the cross-entropy on that labelled subset, or drop "
                          "--label_fraction.")


def _check_encoder(config):
    """--encoder is named, the flags exclusive to other encoders are not given, and
    its rules hold (all from `tables.encoders.ENCODERS`: no branch on names here)."""
    name = config.encoder
    if not name or name == rules.HUB_ENCODER_PREFIX:
        raise ConfigError("encoder", f"is empty: name an encoder, e.g. resnet, vit_s16 "
                          f"or {rules.HUB_ENCODER_PREFIX}ResNetBackbone; got {name!r}.")
    spec = encoder_table.encoder_spec(name)
    defaults = type(config)()
    for flag, owners in encoder_table.exclusive_owners().items():
        if (spec is None or flag not in spec.exclusive_flags) \
                and getattr(config, flag) != getattr(defaults, flag):
            raise ConfigError(flag, f"applies to --encoder={' / '.join(owners)} only; "
                              f"drop it with --encoder={name}.")
    if config.encoder_config is not None:
        try:
            parsed = json.loads(config.encoder_config)
        except ValueError as error:
            raise ConfigError("encoder_config", f"is not valid JSON ({error}); "
                              "pass the backbone's arguments as a JSON object.") from None
        if not isinstance(parsed, dict):
            raise ConfigError("encoder_config", "must be a JSON object of the "
                              f"backbone's arguments; got {config.encoder_config!r}.")
    if spec is not None and spec.fine_tune_after_block is not None \
            and config.fine_tune_after_block not in spec.fine_tune_after_block:
        raise ConfigError("fine_tune_after_block", f"{config.fine_tune_after_block}: "
                          f"{spec.fine_tune_reason}.")


def _check_training(config, objective):
    """What only a training run uses: the contrastive batch, the scaled rate, a batch
    that --cpu_replicas divides (known from the flags: said before TensorFlow splits
    the CPU, which took 22 s; preflight checks the strategy's own replicas)."""
    if config.cpu_replicas and config.train_batch_size % config.cpu_replicas:
        raise ConfigError("train_batch_size", f"{config.train_batch_size} is not "
                          f"divisible by the {config.cpu_replicas} replicas "
                          f"(--cpu_replicas={config.cpu_replicas}); use a multiple of "
                          f"{config.cpu_replicas}.")
    if objective.contrastive_batch:
        try:
            rules.check_contrastive_batch_size(config.train_batch_size)
        except ValueError as error:
            raise ConfigError.from_rule("train_batch_size", error) from None
    try:  # the schedule's own rule, in the flags' words
        rules.checked_peak_learning_rate(config.learning_rate, config.train_batch_size,
                                         config.learning_rate_scaling)
    except ValueError:
        peak = rules.scaled_learning_rate(config.learning_rate, config.train_batch_size,
                                          config.learning_rate_scaling)
        raise ConfigError("learning_rate", f"{config.learning_rate!r} scaled by "
                          f"--learning_rate_scaling={config.learning_rate_scaling} for "
                          f"--train_batch_size={config.train_batch_size} is {peak!r}, "
                          "beyond float32's range; use a smaller --learning_rate, "
                          "e.g. 0.3 (linear) or 0.075 (sqrt).") from None
