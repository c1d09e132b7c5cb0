"""Every flagfile under flags/ parses into a valid Config and carries its record."""
import glob
import os
import re
import sys

import pytest
from absl import flags

from simclr_tf.config import inherit
from simclr_tf.config import Config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FLAGFILES = sorted(glob.glob(os.path.join(ROOT, "flags", "*.flags")))
BASE_FILES = {"imagenet_pretrain_base.flags", "simclrv2_distill_base.flags"}

sys.path.insert(0, ROOT)
import run  # noqa: E402  pylint: disable=wrong-import-position
sys.path.pop(0)


@pytest.fixture(autouse=True)
def _no_recorded_runs(monkeypatch):
    """The flagfiles name run directories outside the repository (/tmp/simclr_...);
    one left there by a run on this machine must not lend its flags to the test."""
    monkeypatch.setattr(inherit, "recorded_run", lambda config: None)


def _parse(path, *extra):
    values = flags.FlagValues()
    for field in Config.flag_fields():
        values[field.name] = run.FLAGS[field.name]
    try:
        values(["run.py", f"--flagfile={path}", *extra])
        return run.config_from_flags(values)
    finally:
        values.unparse_flags()


def test_there_is_a_flagfile_per_paper_configuration():
    names = {os.path.basename(p) for p in FLAGFILES}
    for expected in ("quickstart.flags", "simclrv1_r50_1x_pretrain.flags",
                     "simclrv1_r50_2x_pretrain.flags", "simclrv1_r50_4x_pretrain.flags",
                     "simclrv2_r152_3x_sk1_pretrain.flags", "imagenet_linear_eval.flags",
                     "simclrv2_finetune_1pct.flags", "simclrv2_finetune_10pct.flags",
                     "cifar10_r18_pretrain.flags", "cifar10_r50_pretrain.flags"):
        assert expected in names


@pytest.mark.parametrize("path", FLAGFILES, ids=os.path.basename)
def test_flagfile_is_a_valid_experiment_record(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # included flagfiles are relative to the repository root
    if os.path.basename(path) in BASE_FILES:
        # A base needs the including file's model_dir (and a distillation's teacher).
        teacher = ("--teacher=/tmp/simclr_teacher",) if "distill" in path else ()
        _parse(path, "--model_dir=/tmp/simclr_base", *teacher)
        return
    config = _parse(path)
    header = [line for line in open(path) if line.startswith("#")]
    text = "".join(header)
    assert "Command: python run.py --flagfile=flags/" + os.path.basename(path) in text
    assert "Expected" in text or "Paper" in text
    assert "Hardware" in text
    assert config.model_dir


def test_paper_settings_reach_the_config(monkeypatch):
    monkeypatch.chdir(ROOT)
    v2 = _parse(os.path.join(ROOT, "flags", "simclrv2_r152_3x_sk1_pretrain.flags"))
    assert (v2.resnet_depth, v2.width_multiplier, v2.sk_ratio) == (152, 3, 0.0625)
    assert (v2.learning_rate, v2.learning_rate_scaling, v2.train_batch_size) == (
        0.075, "sqrt", 4096)
    assert v2.num_proj_layers == 3 and v2.use_blur and v2.temperature == 0.1
    linear = _parse(os.path.join(ROOT, "flags", "imagenet_linear_eval.flags"))
    assert linear.train_mode == "finetune" and linear.fine_tune_after_block == 4
    # The authors' README command: Nesterov momentum, lr 0.1, weight decay 1e-6.
    assert (linear.optimizer, linear.learning_rate, linear.weight_decay) == (
        "momentum", 0.1, 1e-6)
    one_pct = _parse(os.path.join(ROOT, "flags", "simclrv2_finetune_1pct.flags"))
    assert one_pct.label_fraction == 0.01 and one_pct.ft_proj_selector == 1
    cifar = _parse(os.path.join(ROOT, "flags", "cifar10_r18_pretrain.flags"))
    assert cifar.resolved_stem == "cifar" and not cifar.use_blur


def test_distillation_flagfiles_carry_the_papers_settings(monkeypatch):
    """Self-distillation at temperature 0.1, big-to-small at 1.0 (SimCLR v2's text),
    no labels, 400 epochs, a student without the projection head; each variant's
    teacher is the previous stage's run."""
    monkeypatch.chdir(ROOT)
    for pct in ("1pct", "10pct"):
        self_distill = _parse(os.path.join(
            ROOT, "flags", f"simclrv2_r152_3x_sk1_self_distill_{pct}.flags"))
        small = _parse(os.path.join(
            ROOT, "flags", f"simclrv2_r50_distill_from_r152_3x_sk1_{pct}.flags"))
        for config in (self_distill, small):
            assert (config.train_mode, config.distill_alpha, config.train_epochs,
                    config.proj_head_mode) == ("distill", 1.0, 400, "none")
        assert (self_distill.resnet_depth, self_distill.width_multiplier,
                self_distill.distill_temperature) == (152, 3, 0.1)
        assert self_distill.teacher.endswith(f"r152_3x_sk1_finetune_{pct}")
        assert (small.resnet_depth, small.sk_ratio, small.distill_temperature) == (50, 0.0, 1.0)
        assert small.teacher == self_distill.model_dir


def test_the_shared_machine_commands_give_each_user_the_quick_starts_paths(monkeypatch):
    """Issue 33, 10: the quick-start flagfiles' /tmp/simclr_quickstart* are shared by
    every user of a machine; docs/usage.md's commands (flags after the flagfile, as
    the shell expands $USER) put every path the runs write or read under /tmp/<user>."""
    monkeypatch.chdir(ROOT)
    text = open(os.path.join(ROOT, "docs", "usage.md")).read()
    section = text.split("## On a machine shared with other users")[1].split("\n## ")[0]
    block = section.split("```bash\n")[1].split("```")[0].replace("\\\n", " ")
    commands = [line.split() for line in block.splitlines() if line.strip()]
    assert len(commands) == 3
    for command in commands:
        assert command[:2] == ["python", "run.py"]
        argv = [arg.replace("$USER", "someone") for arg in command[2:]]
        config = _parse(argv[0].split("=", 1)[1], *argv[1:])
        for flag in ("model_dir", "checkpoint", "teacher"):
            path = getattr(config, flag)
            assert path is None or path.startswith("/tmp/someone/"), (flag, path)


@pytest.mark.parametrize("argv, error", [
    # Typed before a flagfile that sets it otherwise: the typed value would be lost.
    ("--train_batch_size=0 --flagfile={q}", r"--train_batch_size=0 comes before "
     r"--flagfile=.*quickstart.flags, which sets --train_batch_size=256: .* '0' would "
     r"be ignored\. Give --train_batch_size after the --flagfile"),
    ("--train_batch_size 0 --flagfile {q}", r"--train_batch_size=0 comes before"),
    ("--use_blur --flagfile={q}", r"--use_blur=true comes before .*--use_blur=false"),
    ("--temperature=0.5 --flagfile={nested}", r"--temperature=0.5 comes before "
     r"--flagfile=.*outer.flags, which sets --temperature=0.2"),  # via a nested one
    # After it (the documented override), the same value, or flagfile over flagfile.
    ("--flagfile={q} --train_batch_size=0", None),
    ("--nouse_blur --temperature=.2 --flagfile={q}", None),
    ("--flagfile={q} --flagfile={other}", None),
    ("--model_dir /tmp/x --flagfile={other}", None),
    ("--train_batch_size=0 --flagfile={q} --train_batch_size=0", None),  # given again
])
def test_a_flag_typed_before_a_flagfile_that_overrides_it_is_refused(
        argv, error, tmp_path):
    """absl lets the last value win: `--train_batch_size=0 --flagfile=f` trained with
    f's 256 and recorded it, without a word; run.py refuses it before parsing."""
    quickstart = os.path.join(ROOT, "flags", "quickstart.flags")
    other = tmp_path / "other.flags"
    other.write_text("--train_batch_size=64\n--temperature=0.1\n")
    nested = tmp_path / "outer.flags"
    nested.write_text(f"# includes the quick start\n--flagfile={quickstart}\n")
    args = ["run.py"] + argv.format(q=quickstart, other=other, nested=nested).split()
    if error is None:
        run.check_flagfile_order(args)
    else:
        with pytest.raises(flags.Error, match=error):
            run.check_flagfile_order(args)


@pytest.mark.parametrize("argv, error", [
    # An unset shell variable: absl would read '--flagfile=...' as the model_dir.
    ("--model_dir --flagfile={q}", r"--model_dir has no value: the argument after it, "
     r"'--flagfile=.*', is a flag \(an unset shell variable\?\)"),
    ("--dataset --train_steps=2", "--dataset has no value"),
    ("--model_dir /tmp/x --flagfile={q}", None),
    ("--use_blur --flagfile={q}", None),  # a boolean takes no value
    ("--learning_rate -1 --flagfile={q}", None),  # absl's to check: a value, not a flag
])
def test_a_flag_without_its_value_before_another_flag_is_refused(argv, error, capsys):
    """`--model_dir $UNSET --flagfile=f` swallowed the flagfile (its first line then
    read as a stray argument, the error naming a dataset never given); run.py names
    the flag without a value, exit 2."""
    quickstart = os.path.join(ROOT, "flags", "quickstart.flags")
    args = ["run.py"] + argv.format(q=quickstart).split()
    if error is None:
        run.check_values_present(args)
        return
    with pytest.raises(SystemExit) as info:
        run.parse_flags(args)
    assert info.value.code == 2
    assert re.search(error, capsys.readouterr().err)
