"""Config and run.py flags: the authors' flags and defaults, validation, JSON."""
import dataclasses
import json
import os
import subprocess
import sys
from typing import Optional

import pytest

from simclr_tf.config import AUTHORS_FLAGS, Config, ConfigError, validation

ROOT = os.path.join(os.path.dirname(__file__), "..")

# The authors' TF2 run.py flags and their defaults (use_tpu: ours is False).
AUTHORS_DEFAULTS = dict(
    learning_rate=0.3, learning_rate_scaling="linear", warmup_epochs=10.0, weight_decay=1e-6,
    batch_norm_decay=0.9, train_batch_size=512, train_split="train", train_epochs=100,
    train_steps=0, eval_steps=0, eval_batch_size=256, checkpoint_epochs=1,
    checkpoint_steps=0, eval_split="validation", dataset="imagenet2012",
    cache_dataset=False, mode="train", train_mode="pretrain",
    lineareval_while_pretraining=True, checkpoint=None, zero_init_logits_layer=False,
    fine_tune_after_block=-1, master=None, model_dir=None, data_dir=None, use_tpu=False,
    tpu_name=None, tpu_zone=None, gcp_project=None, optimizer="lars", momentum=0.9,
    eval_name=None, keep_checkpoint_max=5, keep_hub_module_max=1, temperature=0.1,
    hidden_norm=True, proj_head_mode="nonlinear", proj_out_dim=128, num_proj_layers=3,
    ft_proj_selector=0, global_bn=True, width_multiplier=1, resnet_depth=50, sk_ratio=0.0,
    se_ratio=0.0, image_size=224, color_jitter_strength=1.0, use_blur=True,
)


def test_all_48_authors_flags_have_their_defaults():
    assert len(AUTHORS_FLAGS) == 48 == len(AUTHORS_DEFAULTS)
    assert set(AUTHORS_FLAGS) == set(AUTHORS_DEFAULTS)
    config = Config()
    for name, default in AUTHORS_DEFAULTS.items():
        assert getattr(config, name) == default, name


def _run(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "run.py"), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_helpfull_lists_every_flag_with_its_default():
    result = _run("--helpfull")
    assert "Traceback" not in result.stderr  # absl's --helpfull exits with status 1
    text = result.stdout
    for field in Config.flag_fields():
        name = field.name
        assert f"--{name}:" in text or f"--[no]{name}:" in text, name
    for name, default in AUTHORS_DEFAULTS.items():
        if default is None:
            continue
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        if isinstance(default, float) and not isinstance(default, bool):
            shown = repr(float(default))
        marker = f"--{name}:" if f"--{name}:" in text else f"--[no]{name}:"
        section = text.split(marker, 1)[1].split("\n  --", 1)[0]
        assert f"(default: '{shown}')" in section.replace("\n    ", " "), (name, shown)


def test_flags_reach_the_config(tmp_path):
    flagfile = tmp_path / "x.flags"
    flagfile.write_text("--temperature=0.5\n--variant=r152_3x_sk1\n")
    sys.path.insert(0, ROOT)
    try:
        import run  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    from absl import flags  # pylint: disable=import-outside-toplevel
    values = flags.FlagValues()
    for name in run.FLAGS:
        if name in {f.name for f in Config.flag_fields()}:
            values[name] = run.FLAGS[name]
    values(["run.py", f"--flagfile={flagfile}", f"--model_dir={tmp_path}",
            "--width_multiplier=0.25", "--variant=r18_0.25x_sk0"])
    config = run.config_from_flags(values)
    assert config.temperature == 0.5
    assert (config.resnet_depth, config.width_multiplier, config.sk_ratio) == (18, 0.25, 0.0)
    values.unparse_flags()


def _bad(**overrides):
    base = dict(model_dir="/tmp/simclr_config_test")
    base.update(overrides)
    return base


BAD = [
    (dict(temperature=0.0), "temperature"),
    (dict(temperature=-1.0), "temperature"),
    (dict(learning_rate=0.0), "learning_rate"),
    (dict(train_batch_size=0), "train_batch_size"),
    (dict(eval_batch_size=-2), "eval_batch_size"),
    (dict(width_multiplier=0), "width_multiplier"),
    (dict(resnet_depth=42), "resnet_depth"),
    (dict(image_size=0), "image_size"),
    (dict(batch_norm_decay=1.0), "batch_norm_decay"),
    (dict(momentum=1.5), "momentum"),
    (dict(weight_decay=-1e-6), "weight_decay"),
    (dict(warmup_epochs=-1.0), "warmup_epochs"),
    (dict(sk_ratio=-0.1), "sk_ratio"),
    (dict(fine_tune_after_block=5), "fine_tune_after_block"),
    # The authors' code rejects layer freezing while pretraining.
    (dict(fine_tune_after_block=2, train_mode="pretrain"), "fine_tune_after_block"),
    (dict(ft_proj_selector=4), "ft_proj_selector"),
    (dict(ft_proj_selector=2, proj_head_mode="linear"), "ft_proj_selector"),
    (dict(num_proj_layers=0), "num_proj_layers"),
    (dict(proj_head_mode="mlp"), "proj_head_mode"),
    (dict(optimizer="sgd"), "optimizer"),
    (dict(mode="export_all"), "mode"),
    (dict(train_epochs=0, train_steps=0), "train_epochs"),
    (dict(checkpoint_epochs=0, checkpoint_steps=0), "checkpoint_epochs"),
    (dict(model_dir=None), "model_dir"),
    (dict(label_fraction=0.0, train_mode="finetune"), "label_fraction"),
    (dict(label_fraction=0.1), "label_fraction"),
    (dict(use_tpu=True, strategy="mirrored"), "strategy"),
    (dict(use_tpu=True, mixed_precision="float16"), "mixed_precision"),
    (dict(jit_compile=True, strategy="mirrored"), "jit_compile"),
    (dict(cpu_replicas=8), "cpu_replicas"),  # splits the CPU for --strategy=mirrored only
    (dict(cpu_replicas=8, use_tpu=True), "cpu_replicas"),
    (dict(cpu_replicas=-1, strategy="mirrored"), "cpu_replicas"),
    (dict(variant="r50_9x"), "variant"),
    (dict(variant="r50_2x_sk1", resnet_depth=101), "variant"),
    (dict(train_batch_size=1), "train_batch_size"),  # pretraining: no negatives
    (dict(sk_ratio=2.0), "sk_ratio"),
    (dict(se_ratio=5.0), "se_ratio"),
    (dict(image_size=7), "image_size"),  # auto -> cifar stem, downsamples by 8
    (dict(image_size=16, stem="imagenet"), "image_size"),
    (dict(learning_rate=1e45), "learning_rate"),  # inf in float32
    (dict(learning_rate=float("nan")), "learning_rate"),
    (dict(learning_rate=1e38, train_batch_size=4096), "learning_rate"),  # x 16: inf
    (dict(learning_rate=1e37, learning_rate_scaling="sqrt", train_batch_size=4096),
     "learning_rate"),  # x 64
    (dict(weight_decay=float("inf")), "weight_decay"),
    (dict(warmup_epochs=1e39), "warmup_epochs"),
    (dict(head_learning_rate=0.0), "head_learning_rate"),
    (dict(encoder="hub:"), "encoder"),
    (dict(encoder=""), "encoder"),
    (dict(encoder="vit_s16", variant="r50_1x_sk0"), "variant"),
    (dict(encoder="vit_b16", sk_ratio=0.0625), "sk_ratio"),
    (dict(encoder="resnet", encoder_config="{}"), "encoder_config"),
    (dict(encoder="hub:ResNetBackbone", encoder_config="[1]"), "encoder_config"),
    (dict(encoder="hub:ResNetBackbone", encoder_config="{bad"), "encoder_config"),
    (dict(encoder="hub:ResNetBackbone", train_mode="finetune", fine_tune_after_block=2),
     "fine_tune_after_block"),
    (dict(head_learning_rate=0.1, train_mode="finetune"), "head_learning_rate"),
    (dict(head_learning_rate=0.1, lineareval_while_pretraining=False),
     "head_learning_rate"),
]


@pytest.mark.parametrize("overrides, flag", BAD)
def test_bad_values_name_the_flag(overrides, flag):
    with pytest.raises(ConfigError) as info:
        Config.from_dict(_bad(**overrides)).validate()
    assert info.value.flag == flag
    assert str(info.value).startswith(f"--{flag}")


def test_bad_flag_fails_fast_on_the_command_line():
    result = _run("--temperature=0", "--model_dir=/tmp/x")
    assert result.returncode == 2
    assert "--temperature: must be > 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_json_round_trip_and_resolved_values():
    config = Config.from_dict(dict(model_dir="/tmp/m", image_size=32, variant="r50_2x_sk1"))
    assert config.resolved_stem == "cifar"
    assert Config(image_size=224).resolved_stem == "imagenet"
    assert Config(image_size=32, stem="imagenet").resolved_stem == "imagenet"
    assert (config.resnet_depth, config.width_multiplier, config.sk_ratio) == (50, 2, 0.0625)
    again = Config.from_json(config.to_json())
    assert again == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.temperature = 1.0  # type: ignore[misc]


def test_encoder_reaches_the_model_kwargs():
    # Each encoder receives exactly the flags its row of tables.encoders.ENCODERS names.
    resnet = Config(image_size=32, width_multiplier=2.0, vit_pool="mean").model_kwargs()
    assert resnet["encoder"] == "resnet" and resnet["encoder_options"] == dict(
        depth=50, width_multiplier=2, sk_ratio=0.0, se_ratio=0.0, stem="cifar")
    assert type(resnet["encoder_options"]["width_multiplier"]) is int
    vit = Config(encoder="vit_s16", vit_pool="mean").model_kwargs()
    assert vit["encoder"] == "vit_s16" and vit["encoder_options"] == dict(vit_pool="mean")
    hub = Config(encoder="hub:ResNetBackbone", encoder_config='{"a": [1, 2]}').model_kwargs()
    assert hub["encoder_options"] == dict(hub_config={"a": [1, 2]}, vit_pool="token")


def test_head_rate_multiplier():
    assert Config().head_rate_multiplier() == 1.0  # unset: the authors' single rate
    assert Config(learning_rate=2.0, head_learning_rate=0.1).head_rate_multiplier() == 0.05


def test_model_kwargs_follow_the_train_mode():
    pretrain = Config(image_size=32).model_kwargs(num_classes=10)
    assert pretrain["encoder_options"]["stem"] == "cifar" and pretrain["supervised_head_stop_gradient"]
    assert pretrain["num_classes"] == 10
    assert Config(lineareval_while_pretraining=False).model_kwargs(10)["num_classes"] is None
    finetune = Config(train_mode="finetune").model_kwargs(num_classes=5)
    assert not finetune["supervised_head_stop_gradient"] and finetune["num_classes"] == 5


@pytest.mark.parametrize("name", Config.float_fields())
def test_every_float_setting_must_be_a_finite_float32(name):
    for value in (1e45, float("inf"), float("nan")):
        with pytest.raises(ConfigError) as info:
            Config.from_dict(_bad(**{name: value})).validate()
        assert info.value.flag == name and "float32" in str(info.value), str(info.value)


def test_the_training_rules_apply_to_training_only():
    Config.from_dict(_bad(train_batch_size=1, train_mode="finetune")).validate()
    Config.from_dict(_bad(train_batch_size=1, mode="eval")).validate()
    Config.from_dict(_bad(learning_rate=1e38, train_batch_size=4096, mode="export")).validate()
    Config.from_dict(_bad(train_batch_size=2)).validate()


def test_the_smallest_image_sizes_are_accepted():
    Config.from_dict(_bad(image_size=8)).validate()  # auto -> cifar
    Config.from_dict(_bad(image_size=32, stem="imagenet")).validate()
    Config.from_dict(_bad(image_size=33)).validate()  # auto -> imagenet


def _flags(*argv):
    sys.path.insert(0, ROOT)
    try:
        import run  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    from absl import flags  # pylint: disable=import-outside-toplevel
    values = flags.FlagValues()
    for field in Config.flag_fields():
        values[field.name] = run.FLAGS[field.name]
    values(["run.py", "--model_dir=/tmp/unused", *argv])
    return run, values


@pytest.mark.parametrize("argv, ok", [
    (["--variant=r50_1x_sk1", "--sk_ratio=0"], False),  # the default, given explicitly
    (["--variant=r50_2x_sk0", "--width_multiplier=1"], False),
    (["--variant=r101_1x_sk0", "--resnet_depth=50"], False),
    (["--variant=r50_1x_sk1", "--sk_ratio=0.0625", "--resnet_depth=50"], True),
    (["--variant=r50_1x_sk1"], True),
])
def test_an_explicit_flag_must_agree_with_the_variant(argv, ok):
    run, values = _flags(*argv)
    try:
        if ok:
            run.config_from_flags(values)
            return
        with pytest.raises(ConfigError) as info:
            run.config_from_flags(values)
        assert info.value.flag == "variant"
        flag = argv[1].split("=")[0]
        assert argv[0].split("=")[1] in str(info.value) and flag in str(info.value)
    finally:
        values.unparse_flags()


def test_device_views_with_fine_tuning_are_a_flag_error_not_a_silent_host():
    with pytest.raises(ConfigError, match=r"^--augment_on: device draws the two "
                       r"pretraining views .*drop --augment_on=device"):
        Config.from_dict(_bad(augment_on="device", train_mode="finetune")).validate()
    Config.from_dict(_bad(augment_on="device", train_mode="finetune", mode="eval")).validate()
    with pytest.raises(ConfigError, match=r"^--augmentations: chooses the host's "
                       r"transformations; --augment_on=device draws all three"):
        Config.from_dict(_bad(augment_on="device", augmentations="crop")).validate()
    with pytest.raises(ConfigError, match=r"^--augmentations: .*'cutout' unknown"):
        Config.from_dict(_bad(augmentations="crop,cutout")).validate()


def test_grad_cache_is_for_pretraining_with_one_rule_for_flags_and_library():
    from simclr_tf.method import train  # pylint: disable=import-outside-toplevel
    with pytest.raises(ConfigError) as flag_error:
        Config.from_dict(_bad(grad_cache_chunk=8, train_mode="finetune")).validate()
    with pytest.raises(ValueError) as library_error:
        train.StepOptions(grad_cache_chunk=8, train_mode="finetune")
    assert str(flag_error.value) == "--" + str(library_error.value).replace(
        "grad_cache_chunk ", "grad_cache_chunk: ", 1)


def test_the_pairs_of_flags_are_the_ones_the_help_texts_name():
    """Issue 34, item 1: which flag overrides or sets which is declared once, on the
    field (`Config.flag_pairs`, what inheritance and the records read); every flag a
    help text says it overrides or sets is declared, and nothing else."""
    import re  # pylint: disable=import-outside-toplevel
    names = {f.name for f in Config.flag_fields()}
    said = {}
    for field in Config.flag_fields():
        for phrase in re.findall(r"\b(?:overrides|sets)\b([^.(;]*)", field.metadata["help"]):
            found = tuple(word for word in re.findall(r"\w+", phrase) if word in names)
            if found:
                said[field.name] = found
    assert {flag: decided for flag, (decided, _) in Config.flag_pairs().items()} == said
    assert said == {"train_steps": ("train_epochs",),
                    "checkpoint_steps": ("checkpoint_epochs",),
                    "variant": ("resnet_depth", "width_multiplier", "sk_ratio")}
    for flag in said:  # unset by default: a flag not given overrides nothing
        assert not getattr(Config(), flag)


@pytest.mark.parametrize("values, ok", [
    (dict(use_blur=False, image_size=16, width_multiplier=1, learning_rate=1,
          head_learning_rate=None, log_every_steps=5, checkpoint="/r/ckpt-1",
          a_key_of_another_version="anything"), True),
    (dict(use_blur="false"), False), (dict(use_blur=0), False),
    (dict(image_size=16.0), False), (dict(image_size=True), False),
    (dict(learning_rate="0.1"), False), (dict(learning_rate=None), False),
    (dict(dataset=None), False), (dict(checkpoint=3), False),
    (dict(log_every_steps=2.5), False), (dict(train_split=["train"]), False)])
def test_a_record_is_checked_against_the_flags_types(values, ok):
    """Issue 34, item 3: a record's value of another type than its flag's is an
    error naming the file and the key (and, where it is plain, the value meant)."""
    from simclr_tf.config import RecordError  # pylint: disable=import-outside-toplevel
    if ok:
        Config.check_record(values, "/r/flags.json")
        return
    with pytest.raises(RecordError) as raised:
        Config.check_record(values, "/r/flags.json")
    (key, value), = values.items()
    assert "'/r/flags.json'" in str(raised.value) and f'"{key}": ' in str(raised.value)
    assert isinstance(raised.value, ValueError)
    if value == "false":
        assert '("use_blur": false)' in str(raised.value)
    if isinstance(value, float) and value == 16.0:
        assert '("image_size": 16)' in str(raised.value)


def _declared(kind):
    """The flags whose declaration lists a check of `kind` (a `bounds` class name)."""
    return [field.name for field in Config.flag_fields()
            if any(type(check).__name__ == kind for check in field.metadata["checks"])]


@pytest.mark.parametrize("name", _declared("_Positive") + _declared("_AtLeast"))
def test_every_declared_bound_is_checked_by_the_one_loop(name):
    # --cpu_replicas is bounded above too: its own rule (rules.check_cpu_replicas).
    assert len(_declared("_Positive")) == 7 and len(_declared("_AtLeast")) == 13
    with pytest.raises(ConfigError) as info:
        Config.from_dict(_bad(**{name: -1})).validate()
    assert info.value.flag == name
    assert (" must be a finite number > 0 (e.g. " if name in _declared("_Positive")
            else " must be >= 0; got -1.") in str(info.value), str(info.value)


def test_a_new_field_is_checked_by_its_declaration_alone():
    # What adding a flag takes: the field, its checks declared on it; nothing in
    # validation.py.
    from simclr_tf import config as config_module
    from simclr_tf.config import bounds, rules

    @dataclasses.dataclass(frozen=True)
    class Extended(Config):
        queue_size: int = config_module._run(  # pylint: disable=protected-access
            4096, "A queue of negatives.", checks=(bounds.positive("e.g. 4096"),))
        queue_temperature: Optional[float] = config_module._run(  # pylint: disable=protected-access
            None, "Its temperature.", checks=(bounds.rule(
                lambda tau: rules.check_softmax_temperature("queue_temperature", tau,
                                                            "e.g. 0.2")),))

    Extended(model_dir="/tmp/x").validate()  # Optional and unset: not checked
    for values, message in ((dict(queue_size=0), "--queue_size: must be a finite number "
                             "> 0 (e.g. 4096); got 0."),
                            (dict(queue_temperature=0.0), "--queue_temperature: must be > 0"),
                            (dict(queue_temperature=1e45), "--queue_temperature: must be a "
                             "finite number within float32")):
        with pytest.raises(ConfigError) as info:
            Extended(model_dir="/tmp/x", **values).validate()
        assert str(info.value).startswith(message), str(info.value)


def test_a_check_reading_another_flag_runs_after_that_flag_is_checked():
    # --image_size's rule reads the stem resolved from --stem: a bad --stem is named
    # as such, not as an --image_size error (or a KeyError).
    with pytest.raises(ConfigError) as info:
        Config.from_dict(_bad(stem="bogus", image_size=4)).validate()
    assert info.value.flag == "stem" and "must be one of auto, imagenet, cifar" in str(
        info.value)


def test_the_given_flags_survive_dataclasses_replace_and_are_no_setting():
    config = Config(model_dir="/tmp/x", seed=0).with_given({"model_dir", "seed"})
    replaced = dataclasses.replace(config, resnet_depth=18)
    assert replaced.is_given("seed") and not replaced.is_given("resnet_depth")
    assert replaced == Config(model_dir="/tmp/x", resnet_depth=18)  # not compared
    assert "_given" not in replaced.to_dict() and "_given" not in json.loads(
        replaced.to_json())
    assert "_given" not in {field.name for field in Config.flag_fields()}
    with pytest.raises(ConfigError, match="_given"):
        Config.from_dict({"_given": ["seed"]})  # no setting of a record


@pytest.mark.parametrize("given, ok", [
    (None, True),  # built in code: the default sk_ratio counts as not chosen
    ({"variant"}, True),
    ({"variant", "sk_ratio"}, False),  # --sk_ratio=0 given explicitly contradicts sk1
])
def test_the_variant_is_checked_and_applied_once_where_the_config_is_built(given, ok):
    values = _bad(variant="r101_2x_sk1", sk_ratio=0.0)
    if not ok:
        with pytest.raises(ConfigError, match=r"^--variant: r101_2x_sk1 means "
                           r"--sk_ratio=0.0625, but --sk_ratio=0.0 was also given"):
            Config.from_dict(values, given=given)
        return
    config = Config.from_dict(values, given=given).validate()
    assert (config.resnet_depth, config.width_multiplier, config.sk_ratio) == (101, 2, 0.0625)


# ------------------------------------ a train mode's own options; flags that do nothing
def _from_flags(argv):
    """The Config run.py builds from `argv` (and the record it reads)."""
    import run  # pylint: disable=import-outside-toplevel
    from helpers import cli_flags  # pylint: disable=import-outside-toplevel
    return run.config_from_flags(cli_flags.flag_values(argv))


@pytest.mark.parametrize("margin", ["-1", "0", "nan", "inf"])
def test_a_triplet_margin_that_is_no_finite_positive_number_is_refused(margin):
    """Round VI, 26: -1 and nan were tracebacks from inside the traced step, inf a NaN
    loss blamed on --temperature; the rule is the option's declaration
    (`train_modes.option`), run by validation before anything is built."""
    with pytest.raises(ConfigError) as info:
        _from_flags(["--train_mode=margin_triplet", f"--triplet_margin={margin}",
                     "--model_dir=/tmp/x"])
    assert info.value.flag == "triplet_margin"
    assert str(info.value).startswith("--triplet_margin: must be a finite number > 0")
    taken = _from_flags(["--train_mode=margin_triplet", "--triplet_margin=0.3",
                         "--model_dir=/tmp/x"])
    assert validation.objective_option_values(taken) == {"triplet_margin": 0.3}


def test_a_bad_triplet_margin_fails_fast_on_the_command_line():
    result = _run("--train_mode=margin_triplet", "--triplet_margin=inf", "--model_dir=/tmp/x")
    assert result.returncode == 2
    assert result.stderr.strip() == ("run.py: error: --triplet_margin: must be a finite "
                                     "number > 0 (e.g. 0.5); got inf."), result.stderr


def test_an_options_rules_are_its_declaration():
    """A registered train mode declares its option's rule where it declares the option;
    validation runs it with nothing added to validation.py."""
    from simclr_tf.config import bounds  # pylint: disable=import-outside-toplevel
    from simclr_tf.config.tables import train_modes  # pylint: disable=import-outside-toplevel
    before = dict(train_modes.TRAIN_MODES)
    train_modes.register(train_modes.TrainMode(
        "toy_checked", "x:Y", "toy_checked: a test row", views=2, contrastive_batch=True,
        options=dict(toy_rate=train_modes.option(0.1, bounds.within(0, 1, "0.1")))))
    try:
        base = dict(model_dir="/tmp/x", train_mode="toy_checked", train_batch_size=32)
        Config(**base, objective_options='{"toy_rate": 0.5}').validate()
        with pytest.raises(ConfigError, match=r"^--toy_rate: must be in \(0, 1\)"):
            Config(**base, objective_options='{"toy_rate": 1.5}').validate()
    finally:
        train_modes.TRAIN_MODES.clear()
        train_modes.TRAIN_MODES.update(before)


@pytest.mark.parametrize("argv, flag, where", [
    # Round VI, 27: trained NT-Xent, and flags.json kept no trace of the margin.
    (["--triplet_margin=0.9"], "triplet_margin",
     "applies only with --train_mode=margin_triplet, so with --train_mode=pretrain it "
     "would do nothing: drop it, or pass --train_mode=margin_triplet."),
    (["--train_mode=nt_logistic", '--objective_options={"triplet_margin": 0.3}'],
     "triplet_margin", "so with --train_mode=nt_logistic it would do nothing"),
    # Round VI, 27: accepted with no effect (nothing is frozen).
    (["--frozen_batch_norm=batch"], "frozen_batch_norm",
     "applies only where a block is frozen (--train_mode=finetune or distill with "
     "--fine_tune_after_block >= 0), so with --train_mode=pretrain, "
     "--fine_tune_after_block=-1 it would do nothing: drop it, or freeze blocks"),
    (["--train_mode=finetune", "--fine_tune_after_block=-1", "--frozen_batch_norm=batch"],
     "frozen_batch_norm", "--fine_tune_after_block=-1 it would do nothing"),
    (["--frozen_batch_norm=moving"], "frozen_batch_norm", "drop it"),  # given: its default too
    (["--label_fraction=0.1"], "label_fraction",
     "applies only to a train mode that learns from labels (--train_mode=finetune or "
     "distill), so with --train_mode=pretrain it would do nothing"),
    (["--train_mode=finetune", "--head_learning_rate=0.1"], "head_learning_rate",
     "(--train_mode=pretrain, nt_logistic or margin_triplet with "
     "--lineareval_while_pretraining), so with --train_mode=finetune, "
     "--lineareval_while_pretraining=true it would do nothing"),
    (["--nolineareval_while_pretraining", "--head_learning_rate=0.1"], "head_learning_rate",
     "--lineareval_while_pretraining=false it would do nothing"),
    # 2026-12-06, 2: trained on this machine's CPU, exit 0.
    (["--tpu_name=my-tpu", "--tpu_zone=us-central1-a", "--gcp_project=proj"], "tpu_name",
     "applies only to a TPU run (--use_tpu or --strategy=tpu), so with --use_tpu=false, "
     "--strategy=auto it would do nothing: drop it, or add --use_tpu."),
    (["--tpu_zone=us-central1-a"], "tpu_zone", "applies only to a TPU run"),
    (["--gcp_project=proj"], "gcp_project", "applies only to a TPU run"),
    (["--master=grpc://10.0.0.2:8470", "--strategy=mirrored"], "master",
     "--strategy=mirrored it would do nothing"),
    (["--peer_wait_secs=60"], "peer_wait_secs",
     "applies only to a run that waits for peers (--strategy=multiworker, or a TPU: "
     "--use_tpu)"),
    # The same kind: training's own flags given to a mode that does not train.
    (["--mode=eval", "--allow_changed_flags"], "allow_changed_flags",
     "applies only to training"),
    (["--mode=linear_probe", "--grad_cache_chunk=8"], "grad_cache_chunk",
     "applies only to training"),
    # 2026-12-06, 4: evaluated as without it.
    (["--mode=eval", "--jit_compile"], "jit_compile",
     "applies only to training (--mode=train or train_then_eval), so with --mode=eval "
     "it would do nothing: drop it, or train (--mode=train)."),
])
def test_a_flag_given_where_it_would_do_nothing_is_refused(argv, flag, where, tmp_path):
    """One rule (`validation.check_inert_flags`): each field declares where it applies,
    a train mode's option applies to its train mode; given on the command line or in
    a flagfile where it would do nothing, the flag is refused naming where it applies."""
    for given in (argv, [f"--flagfile={tmp_path / 'f.flags'}"]):
        (tmp_path / "f.flags").write_text("\n".join(argv) + "\n")
        with pytest.raises(ConfigError) as info:
            _from_flags(given + ["--model_dir=/tmp/x"])
        assert info.value.flag == flag and where in str(info.value), str(info.value)


@pytest.mark.parametrize("argv, words", [
    # 2026-12-06, 3: no line in 180 s (TensorFlow making a million logical devices).
    (["--cpu_replicas=1000000"], "--cpu_replicas: must be from 0 (off) to 512"),
    # ... and "not divisible" came from preflight, 22 s later (after the CPU was split).
    (["--cpu_replicas=3", "--train_batch_size=16"],
     "--train_batch_size: 16 is not divisible by the 3 replicas (--cpu_replicas=3); use "
     "a multiple of 3."),
])
def test_cpu_replicas_the_flags_refuse_are_refused_by_the_flags(argv, words):
    """What the flags alone decide about --cpu_replicas is refused with them, before
    TensorFlow splits the CPU."""
    with pytest.raises(ConfigError) as info:
        _from_flags(["--strategy=mirrored", "--model_dir=/tmp/x"] + argv)
    assert str(info.value).startswith(words), str(info.value)
    # An evaluation does not train: its batches need not divide.
    assert _from_flags(["--strategy=mirrored", "--cpu_replicas=3", "--mode=eval",
                        "--model_dir=/tmp/x"]).cpu_replicas == 3


def test_where_those_flags_apply_they_are_taken():
    finetune = ["--train_mode=finetune", "--model_dir=/tmp/x"]
    assert _from_flags(finetune + ["--fine_tune_after_block=4",
                                   "--frozen_batch_norm=batch"]).frozen_batch_norm == "batch"
    assert _from_flags(finetune + ["--label_fraction=0.1"]).label_fraction == 0.1
    assert _from_flags(["--head_learning_rate=0.1", "--model_dir=/tmp/x"]
                       ).head_learning_rate == 0.1
    assert _from_flags(["--use_tpu", "--tpu_name=my-tpu", "--tpu_zone=z", "--gcp_project=p",
                        "--model_dir=/tmp/x"]).tpu_name == "my-tpu"
    assert _from_flags(["--strategy=tpu", "--master=grpc://10.0.0.2:8470",
                        "--model_dir=/tmp/x"]).master == "grpc://10.0.0.2:8470"
    assert _from_flags(["--mode=train_then_eval", "--jit_compile", "--model_dir=/tmp/x"]
                       ).jit_compile


def test_those_flags_read_from_a_record_are_left_as_recorded(tmp_path):
    """A run trained before the rule with --frozen_batch_norm=batch and nothing frozen
    (round VI, 27) is read back, not refused: the command did not give the flag. A
    margin given to a margin_triplet run, whose train mode is read from its record,
    reaches the step (it was dropped: run.py gathered the options of the train mode
    given, the default pretrain)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorded = Config(model_dir=str(run_dir), frozen_batch_norm="batch",
                      train_mode="margin_triplet", objective_options='{"triplet_margin": 0.3}')
    (run_dir / "flags.json").write_text(recorded.to_json())
    evaluated = _from_flags(["--mode=eval", f"--model_dir={run_dir}"])
    assert evaluated.frozen_batch_norm == "batch"
    assert validation.objective_option_values(evaluated) == {"triplet_margin": 0.3}
    resumed = _from_flags([f"--model_dir={run_dir}", "--triplet_margin=0.7"])
    assert resumed.train_mode == "margin_triplet"
    assert validation.objective_option_values(resumed) == {"triplet_margin": 0.7}
    with pytest.raises(ConfigError, match="--frozen_batch_norm: applies only where"):
        _from_flags(["--mode=eval", f"--model_dir={run_dir}", "--frozen_batch_norm=batch"])
