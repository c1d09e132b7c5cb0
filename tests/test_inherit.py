"""A finished run's flags read back (simclr_tf.config.inherit): every mode after training needs
only --model_dir (or --checkpoint), flags given on the command line win, a given flag
that contradicts the weights is refused naming both values."""
import json
import os
import subprocess
import sys

import pytest

import run
from simclr_tf.config import inherit
from simclr_tf.config import Config, ConfigError
from helpers import cli_flags
from helpers.run_fixtures import RESNET, TINY

# The recorded run's flags: TINY's data with the ResNet, whose flags (--variant and
# the depth, width and kernels it sets) are what inheritance has to pair up.
RECORDED = dict(TINY, **RESNET)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _config(argv):
    lines = []
    config = run.config_from_flags(cli_flags.flag_values(argv), report=lines.append)
    return config, lines


def _recorded_run(directory, **overrides):
    """A run directory with only its flags.json (what inherit reads)."""
    os.makedirs(directory, exist_ok=True)
    values = Config.from_dict(dict(dict(RECORDED, mode="train_then_eval", train_steps=4,
                                        strategy="mirrored",
                                        checkpoint="/elsewhere/ckpt-9"),
                                   **overrides)).to_dict()
    with open(os.path.join(directory, "flags.json"), "w") as f:
        json.dump(values, f)
    return str(directory)


def test_a_reader_mode_reads_every_flag_but_the_runs_identity_and_machine(tmp_path):
    run_dir = _recorded_run(tmp_path / "run", train_mode="finetune", label_fraction=0.5)
    config, lines = _config([f"--model_dir={run_dir}", "--mode=eval"])
    for name, value in RECORDED.items():  # the model and the data
        assert getattr(config, name) == value, name
    assert config.label_fraction == 0.5 and config.train_steps == 4
    # Never read: the mode given, the init checkpoint, the machine.
    assert (config.mode, config.checkpoint, config.strategy) == ("eval", None, "auto")
    assert lines == [f"Flags read from {run_dir}/flags.json (flags given here win): "
                     "--dataset=digits --eval_split=test --image_size=16 "
                     "--num_proj_layers=2 --proj_out_dim=16 --resnet_depth=18 --stem=cifar "
                     "--train_mode=finetune --width_multiplier=0.125 (and 10 other flags)"]


def test_flags_given_win_and_are_not_read(tmp_path):
    run_dir = _recorded_run(tmp_path / "run")
    config, _ = _config([f"--model_dir={run_dir}", "--mode=eval", "--eval_split=train",
                         "--image_size=32", "--use_blur=true"])
    assert (config.eval_split, config.image_size, config.use_blur) == ("train", 32, True)
    assert config.resnet_depth == 18  # not given: read
    # A flag given at its default value is given too.
    config, _ = _config([f"--model_dir={run_dir}", "--mode=eval", "--width_multiplier=1"])
    assert config.width_multiplier == 1
    # --variant decides depth, width and selective kernels: none of them is read.
    config, _ = _config([f"--model_dir={run_dir}", "--mode=eval", "--variant=r50_1x_sk0"])
    assert (config.resnet_depth, config.width_multiplier) == (50, 1)
    assert config.is_given("resnet_depth") and not config.is_given("dataset")


def test_another_runs_checkpoint_gives_its_model_and_data_not_its_optimisation(tmp_path):
    run_dir = _recorded_run(tmp_path / "run", learning_rate=0.7)
    for checkpoint in (run_dir, f"{run_dir}/ckpt-4", f"{run_dir}/saved_model/4",
                       f"{run_dir}/saved_model/4/variables/variables"):
        os.makedirs(f"{run_dir}/saved_model/4/variables", exist_ok=True)
        config, _ = _config(["--train_mode=finetune", f"--checkpoint={checkpoint}",
                             f"--model_dir={tmp_path / 'ft'}", "--label_fraction=0.1"])
        assert (config.dataset, config.image_size, config.width_multiplier,
                config.eval_split) == ("digits", 16, 0.125, "test"), checkpoint
        assert config.learning_rate == 0.3 and config.temperature == 0.1  # the defaults
        assert config.train_mode == "finetune" and config.checkpoint == checkpoint
    # A reader mode of another run reads how it was trained too (its heads).
    config, _ = _config(["--mode=eval", f"--checkpoint={run_dir}",
                         f"--model_dir={tmp_path / 'mine'}"])
    assert config.lineareval_while_pretraining and config.dataset == "digits"
    assert config.model_dir == str(tmp_path / "mine")


def test_nothing_to_read_leaves_the_flags_alone(tmp_path):
    config, lines = _config([f"--model_dir={tmp_path / 'new'}", "--dataset=digits",
                             "--image_size=16", "--eval_split=test"])
    assert lines == [] and config.resnet_depth == 50
    assert inherit.inherit(config)[1] is None


def test_an_unreadable_record_is_a_flag_error(tmp_path):
    (tmp_path / "flags.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"--model_dir: .*flags.json' cannot be read"):
        _config([f"--model_dir={tmp_path}", "--mode=eval"])
    (tmp_path / "flags.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="holds list, not a JSON object"):
        _config([f"--model_dir={tmp_path}", "--mode=eval"])


def test_inheriting_needs_no_tensorflow():
    code = ("import sys, simclr_tf.config.inherit; "
            "assert 'tensorflow' not in sys.modules, 'TensorFlow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.large  # 32 s: five modes of run.py on the shared tiny run
def test_every_mode_after_training_needs_only_the_run(tiny_run, tmp_path):
    """eval, export, linear_probe, embed with --model_dir alone; fine-tuning with
    --checkpoint alone; a given flag that contradicts the weights is refused."""
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    run_dir = str(tmp_path / "run")
    tiny_run.copy_to(run_dir)
    eval_config, _ = _config(["--mode=eval", f"--model_dir={run_dir}"])
    result = experiment.run(eval_config)
    assert result["global_step"] == tiny_run.STEPS
    assert 0 <= result["eval/label_top_1_accuracy"] <= 1
    for mode in ("export", "linear_probe", "embed"):
        config, _ = _config([f"--mode={mode}", f"--model_dir={run_dir}"])
        assert experiment.run(config), mode
    assert os.listdir(os.path.join(run_dir, "saved_model"))
    finetune, _ = _config(["--train_mode=finetune", f"--checkpoint={run_dir}",
                           "--label_fraction=0.1", "--train_steps=1",
                           "--train_batch_size=16", f"--model_dir={tmp_path / 'ft'}"])
    assert experiment.run(finetune)["global_step"] == 1
    with pytest.raises(ConfigError, match=r"--width_multiplier=0.125"):
        experiment.run(_config(["--mode=eval", f"--model_dir={run_dir}",
                                "--width_multiplier=0.25"])[0])


def test_a_fine_tune_onto_a_pretraining_run_is_told_to_use_a_directory_of_its_own(
        tmp_path):
    """Issue 33, 6: fine-tune flags with --model_dir=<a pretraining run> are refused
    as such (model_dir, naming the run), not as a flag of the pretraining record the
    user never typed (its --head_learning_rate); with --allow_changed_flags (continue
    that run as a fine-tune) an error about such a flag (its --grad_cache_chunk, which
    fine-tuning refuses) says where it was read. Its --head_learning_rate, which a
    fine-tune would ignore, is left as the record has it: only a flag given where it
    would do nothing is refused (`validation.check_inert_flags`)."""
    run_dir = _recorded_run(tmp_path / "pretrain", head_learning_rate=0.1,
                            grad_cache_chunk=8)
    argv = ["--train_mode=finetune", f"--model_dir={run_dir}", f"--checkpoint={run_dir}"]
    with pytest.raises(ConfigError) as refused:
        _config(argv)
    assert refused.value.flag == "model_dir" and repr(run_dir) in str(refused.value)
    assert "head_learning_rate" not in str(refused.value)
    _config(["--train_mode=finetune", f"--model_dir={tmp_path / 'new'}",
             f"--checkpoint={run_dir}"])  # the way it says
    with pytest.raises(ConfigError) as inherited:
        _config(argv + ["--allow_changed_flags"])
    assert inherited.value.flag == "grad_cache_chunk"
    assert os.path.join(run_dir, "flags.json") in str(inherited.value)
    continued, _ = _config(argv + ["--allow_changed_flags", "--grad_cache_chunk=0"])
    assert continued.head_learning_rate == 0.1 and continued.train_mode == "finetune"


def test_an_error_about_a_given_flag_is_left_as_it_is(tmp_path):
    run_dir = _recorded_run(tmp_path / "run")
    with pytest.raises(ConfigError) as given:
        _config([f"--model_dir={run_dir}", "--temperature=0"])
    assert given.value.flag == "temperature" and "flags.json" not in str(given.value)


def test_an_allowed_overlap_is_not_inherited(tmp_path):
    """A run trained with --allow_eval_overlap does not lend the permission: an eval of
    it on its training examples is refused again unless that command allows it."""
    run_dir = _recorded_run(tmp_path / "run", allow_eval_overlap=True)
    config, _ = _config([f"--model_dir={run_dir}", "--mode=eval"])
    assert config.allow_eval_overlap is False
    config, _ = _config([f"--model_dir={run_dir}", "--mode=eval", "--allow_eval_overlap"])
    assert config.allow_eval_overlap is True


# ------------------------------------------------ pairs of flags (issue 34, item 1)


def _pair_value(name):
    """A value of flag `name` other than its default, as a command line gives it."""
    return {"train_epochs": 2, "train_steps": 6, "checkpoint_epochs": 3,
            "checkpoint_steps": 2, "variant": "r18_0.125x_sk0", "resnet_depth": 34,
            "width_multiplier": 0.25, "sk_ratio": 0.0625}[name]


@pytest.mark.parametrize("flag, decided", [
    (flag, name) for flag, (names, _) in Config.flag_pairs().items() for name in names])
def test_a_given_flag_wins_over_the_recorded_one_of_its_pair(tmp_path, flag, decided):
    """Issue 34, item 1: a run recorded with --train_steps=4 extended with
    --train_epochs=2 trained nothing (the inherited steps overrode the given epochs).
    For every pair the Config declares: the given one is used, the recorded one of
    its pair is not read (its default: unset), and the line says so."""
    recorded = {flag: _pair_value(flag)}
    run_dir = _recorded_run(tmp_path / "run", **recorded)
    config, lines = _config([f"--model_dir={run_dir}", f"--{decided}={_pair_value(decided)}"])
    assert getattr(config, decided) == _pair_value(decided)
    assert getattr(config, flag) == getattr(Config(), flag)  # not read: unset
    assert f"not its --{flag}, as --{decided} was given" in lines[0]
    # Not given, the pair is read as recorded.
    config, _ = _config([f"--model_dir={run_dir}"])
    assert getattr(config, flag) == _pair_value(flag)


def test_extending_a_run_by_epochs_trains_the_epochs_and_records_what_it_applied(
        tmp_path):
    """The issue's case: the plan is the epochs given, and flags_history.json records
    the steps' override dropped as well as the epochs (what the run applies)."""
    from simclr_tf.method import schedules  # pylint: disable=import-outside-toplevel
    from simclr_tf.rundir import records
    run_dir = _recorded_run(tmp_path / "run", mode="train")
    config, _ = _config([f"--model_dir={run_dir}", "--train_epochs=2"])
    plan = schedules.compute_steps(
        num_examples=1437, batch_size=config.train_batch_size,
        train_epochs=config.train_epochs, train_steps=config.train_steps,
        warmup_epochs=config.warmup_epochs, checkpoint_epochs=config.checkpoint_epochs,
        checkpoint_steps=config.checkpoint_steps)
    assert plan.total_steps == 2 * 1437 // 32 + 1  # two epochs of digits' train split
    assert records.flag_changes(run_dir, config) == [
        ("train_epochs", 100, 2), ("train_steps", 4, 0)]
    records.start_run_record(config)
    history = records.read_json(records.history_path(run_dir))
    assert history[-1]["changed"] == {"train_epochs": dict(recorded=100, given=2),
                                      "train_steps": dict(recorded=4, given=0)}
    assert records.read_config(os.path.join(run_dir, "flags.json")).train_steps == 0


def test_a_variant_run_is_extended_without_retyping_the_variant(tmp_path):
    """--variant is read from the record with the flags it sets (it was never read, so
    an extension without it changed --variant and was refused); one of those flags
    given keeps it unread, and the variant alone is not a change of the model."""
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    run_dir = _recorded_run(tmp_path / "run", mode="train", variant="r18_0.125x_sk0")
    config, _ = _config([f"--model_dir={run_dir}", "--train_steps=8"])
    assert config.variant == "r18_0.125x_sk0" and config.resnet_depth == 18
    assert records.flag_changes(run_dir, config) == [("train_steps", 4, 8)]
    config, _ = _config([f"--model_dir={run_dir}", "--width_multiplier=0.125"])
    assert config.variant is None and config.resnet_depth == 18
    assert records.flag_changes(run_dir, config) == []


def test_the_most_telling_difference_from_a_run_comes_first(tmp_path):
    """Another dataset or model is listed (and named by the error) before a rate or
    a warmup (issue 44, item 16)."""
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    run_dir = _recorded_run(tmp_path / "run", mode="train")
    config, _ = _config([f"--model_dir={run_dir}", "--warmup_epochs=3",
                         "--learning_rate=0.123", "--resnet_depth=34", "--dataset=fashion_mnist"])
    assert [flag for flag, _, _ in records.flag_changes(run_dir, config)] == [
        "dataset", "resnet_depth", "learning_rate", "warmup_epochs"]
    # Within the data flags the dataset before its splits (newcomer report VI).
    config, _ = _config([f"--model_dir={run_dir}", "--train_split=test",
                         "--dataset=fashion_mnist"])
    assert [flag for flag, _, _ in records.flag_changes(run_dir, config)][:2] == [
        "dataset", "train_split"]
    # The order names every help group once: a new group must be placed in it.
    from simclr_tf.config import fields  # pylint: disable=import-outside-toplevel
    assert sorted(records._CHANGE_ORDER) == sorted(fields.HELP_GROUPS)  # pylint: disable=protected-access


# ------------------------------------------- a record's types (issue 34, item 3)


@pytest.mark.parametrize("key, value", [
    ("use_blur", "false"), ("image_size", 16.0), ("train_steps", "4"),
    ("learning_rate", None), ("dataset", 3), ("mode", True)])
def test_a_value_of_the_wrong_type_in_the_record_is_a_model_dir_error(tmp_path, key, value):
    """A hand-edited flags.json with "use_blur": "false" was read as true (and
    written back); every key, read or not, is checked: a --model_dir error naming
    the file and the key, for the run's own record and for --checkpoint's run."""
    run_dir = _recorded_run(tmp_path / "run", **{key: value} if key != "mode" else {})
    if key == "mode":
        record = json.load(open(os.path.join(run_dir, "flags.json")))
        record["mode"] = value
        json.dump(record, open(os.path.join(run_dir, "flags.json"), "w"))
    # With a new --model_dir beside it, the record read is still --checkpoint's.
    new_dir = f"--model_dir={tmp_path / 'new'}"
    for argv, flag in (([f"--model_dir={run_dir}", "--mode=eval"], "model_dir"),
                       ([f"--checkpoint={run_dir}", "--mode=eval"], "checkpoint"),
                       ([f"--checkpoint={run_dir}", new_dir, "--train_mode=finetune"],
                        "checkpoint")):
        with pytest.raises(ConfigError) as raised:
            _config(argv)
        assert raised.value.flag == flag
        assert os.path.join(run_dir, "flags.json") in str(raised.value)
        assert f'"{key}": {json.dumps(value)}' in str(raised.value)
