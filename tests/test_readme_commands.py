"""The README's commands that suggest a variation, run as written (issue 33, item 7:
"Any other student: --width_multiplier=0.125 instead of --checkpoint" failed with the
distillation flagfile, which sets --checkpoint). Each test takes the command from the
README's text, moves the run directories it names under tmp_path and shortens the run;
nothing else is added."""
import json
import os
import shlex

import pytest

from helpers import cli_flags, run_fixtures

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme_command(needle):
    """The README's one `python run.py ...` line that contains `needle`, as argv."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.startswith("python run.py")
                 and needle in line]
    assert len(lines) == 1, (needle, lines)
    return shlex.split(lines[0])


@pytest.mark.large
def test_the_readmes_other_student_distils_as_written(tmp_path, monkeypatch, capsys):
    """The README's narrower student: the quick-start distillation flagfile with
    --checkpoint= (no initialisation) and another width. Its teacher here is a
    fine-tuning run of the quick start's model (as stage 2 leaves it, untrained); the
    student takes the teacher's model and data flags but the width it is given."""
    argv = _readme_command("--flagfile=flags/quickstart_distill.flags --checkpoint= ")
    given = dict(arg[2:].split("=", 1) for arg in argv[2:] if "=" in arg)
    assert given["checkpoint"] == ""
    teacher_dir = tmp_path / "ft10"
    teacher = run_fixtures.write_run(teacher_dir, train_mode="finetune",
                                     width_multiplier=0.25, label_fraction=0.1)
    student_dir = tmp_path / "student"
    # The flagfile's teacher and the README's model_dir are /tmp paths: moved here.
    # Two steps instead of 30 epochs; nothing else differs from the README's line.
    # run.py's main in process (`cli_flags.run_main`): the subject is the command line
    # the README gives, not the process (a TensorFlow import less, ~7 s).
    monkeypatch.chdir(REPO)  # the flagfile's path is the repository's
    status = cli_flags.run_main(monkeypatch, argv[2:] + [
        f"--teacher={teacher_dir}", f"--model_dir={student_dir}", "--train_steps=2",
        "--checkpoint_steps=2", "--mode=train"])
    printed = capsys.readouterr()
    assert status == 0, printed.err[-3000:]
    with open(student_dir / "flags.json", encoding="utf-8") as f:
        student = json.load(f)
    assert student["train_mode"] == "distill" and not student["checkpoint"]
    assert student["width_multiplier"] == float(given["width_multiplier"]) != 0.25
    # docs/distillation.md's from-scratch recipe (row (d)), not the self-distillation's.
    assert (student["distill_temperature"], student["learning_rate"]) == (1.0, 2.0)
    for flag in ("dataset", "image_size", "resnet_depth", "stem", "num_proj_layers"):
        assert student[flag] == getattr(teacher, flag), flag
    assert os.path.exists(student_dir / "ckpt-2.index")
    assert "Initialised from" not in printed.out  # from scratch: no --checkpoint
