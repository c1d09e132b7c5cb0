"""What a user watches: one view of the whole run, an ETA from steady-state steps,
plain lines when the output is not a terminal (issue 15)."""
import io

import pytest

from simclr_tf.config import rules
from simclr_tf.method import train
from simclr_tf.run import progress
from helpers.standin_trainer import standin_objective


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


class _Clock:
    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


LOGS = dict(contrast_loss=10.5, contrast_acc=0.125, supervised_loss=101.8, supervised_acc=0.3125,
            learning_rate=0.46, examples_per_sec=34.0, loss=114.9)


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere():
    assert progress.style_for("auto", _Stream(tty=True)) == "bar"
    assert progress.style_for("auto", _Stream(tty=False)) == "lines"
    assert progress.style_for("none", _Stream(tty=True)) == "none"
    with pytest.raises(ValueError, match="style must be one of"):
        progress.style_for("fancy")


def test_lines_show_the_run_contrast_first_and_an_eta_without_tracing():
    stream = _Stream(tty=False)
    # The first call (tracing) takes 30 s, then 1 s per step.
    view = progress.TrainingProgress(total_steps=10, start_step=0, steps_per_epoch=2.5,
                                     style="auto", stream=stream,
                                     clock=_Clock([30.0, 31.0, 32.0, 33.0, 33.0]))
    for step in (1, 2, 3, 4):
        view.update(step, LOGS)
    assert stream.getvalue() == ""  # lines come from `log`, at the logging interval
    view.log(4, LOGS)
    line = stream.getvalue()
    assert line.endswith("\n") and "\r" not in line and "\b" not in line
    assert line.startswith("step 4/10 (epoch 1.60 of 4.00) | ")
    assert line.index("contrast_loss 10.5") < line.index("contrast_acc 0.125") < line.index(
        "supervised_loss 101.8") < line.index("supervised_acc 0.3125")
    assert "lr 0.46" in line
    assert "1 s/step, ETA 6s" in line  # (33 - 30) s / (4 - 1) steps; 6 steps left


def test_a_resumed_run_has_one_bar_over_the_steps_left(capsys):
    view = progress.TrainingProgress(total_steps=10, start_step=6, style="bar",
                                     stream=_Stream(tty=True))
    for step in (7, 8, 9, 10):  # e.g. two checkpoint segments
        view.update(step, LOGS)
    out = capsys.readouterr().out
    assert "4/4" in out and "/2" not in out  # one bar, not one per segment
    assert out.index("contrast_loss") < out.index("supervised_loss")


def test_durations_read_like_a_clock():
    assert progress.format_duration(6) == "6s"
    assert progress.format_duration(133) == "2m13s"
    assert progress.format_duration(7260) == "2h01m"


def test_fine_tuning_shows_the_supervised_loss_by_its_one_name():
    stream = _Stream(tty=False)
    view = progress.TrainingProgress(total_steps=4, style="lines", stream=stream)
    view.log(4, dict(supervised_loss=2.3, supervised_acc=0.1, learning_rate=0.1))
    assert "supervised_loss 2.3 supervised_acc 0.1" in stream.getvalue()


class _CountingTrainer:
    """`loop.run_steps`' view of a Trainer: steps, logs, nothing compiled."""
    steps_per_loop, optimizer = 2, None

    def __init__(self):
        self.step = 0
        # What the loop asks of it: the likely causes of a non-finite step.
        self.objective = standin_objective(self, train.StepOptions(temperature=0.5))

    def train_steps(self, iterator, calls):  # pylint: disable=unused-argument
        self.step += calls
        return dict(loss=1.0, learning_rate=0.1, num_examples=4)


def test_the_loop_updates_the_run_progress_after_every_call(capsys):
    from simclr_tf.run import loop  # pylint: disable=import-outside-toplevel

    class Recorder:
        def __init__(self):
            self.steps = []

        def update(self, step, logs):
            self.steps.append((step, float(logs["loss"])))

    recorder = Recorder()
    loop.run_steps(_CountingTrainer(), None, 5, progress=recorder)
    assert recorder.steps == [(2, 1.0), (4, 1.0), (5, 1.0)]  # calls of 2, 2, 1 steps
    logs = loop.run_steps(_CountingTrainer(), None, 3)  # no progress: nothing shown
    assert capsys.readouterr().out == "" and logs["loss"] == 1.0


def test_log_intervals_give_a_short_run_a_curve():
    """Unset: scalars every 1/50 of the run (at most 100 steps), lines about every
    fifth (a multiple of the scalars' interval); a given value is both; 0 is the
    checkpoint interval (the authors' cadence)."""
    assert rules.log_intervals(None, 281, 140) == (5, 55)  # the quick start: 57 points
    assert rules.log_intervals(None, 4, 2) == (1, 1)
    assert rules.log_intervals(None, 100_000, 5000) == (100, 100)
    assert rules.log_intervals(None, 3000, 1000) == (60, 60)
    assert rules.log_intervals(7, 281, 140) == (7, 7)
    assert rules.log_intervals(0, 281, 140) == (140, 140)


def test_a_note_never_glues_onto_the_bar(capsys):
    """An evaluation's line during a bar starts on a line of its own (it read
    'img/s: 134.8298kNN at step 4 ...')."""
    stream = _Stream(tty=True)
    view = progress.TrainingProgress(total_steps=4, style="bar", stream=stream,
                                     clock=_Clock([0.0, 10.0, 11.0]))
    view.update(1, LOGS)
    view.update(2, LOGS)
    view.note("kNN at step 2: top-1 0.5")
    assert stream.getvalue() == "\nkNN at step 2: top-1 0.5\n"
    view.note("and another")  # no bar drawn since: no empty line
    assert stream.getvalue().endswith("0.5\nand another\n")


def test_the_bar_eta_counts_steady_state_steps_only(capsys):
    """The first call (tracing, compiling: 30 s here) is in neither the bar's ETA nor
    its first drawing; then 2 s per step (31 -> 32 s measured from step 1 at 30 s),
    8 steps left: 16 s (Keras' own estimate counted the first call)."""
    view = progress.TrainingProgress(total_steps=10, style="bar", stream=_Stream(tty=True),
                                     clock=_Clock([30.0, 31.0, 32.0]))
    view.update(1, LOGS)
    assert capsys.readouterr().out == ""  # no ETA yet to show
    view.update(2, LOGS)
    out = capsys.readouterr().out
    assert "\x1b[1m16s\x1b[0m 2s/step" in out, out


def test_the_share_of_time_waiting_for_input_is_shown_beside_the_speed():
    view = progress.TrainingProgress(total_steps=10, style="lines", stream=_Stream(tty=False),
                                     clock=_Clock([0.0, 1.0, 2.0]))
    view.update(1, LOGS)
    view.update(2, LOGS)
    line = view.line(2, dict(LOGS, input_share=0.25), now=3.0)
    assert "3 s/step (input wait 25%), ETA 24s" in line  # (3 - 0) s / (2 - 1) steps
