"""What a user watches while a run trains: one view of the whole run.

`TrainingProgress` shows step k of N with the epoch, the contrastive loss and its
accuracy first, the online (or fine-tuned) head's loss and accuracy apart, the
learning rate, throughput and an ETA measured on steady-state steps (the first call
of the compiled step, which includes tracing, is left out). Styles:

- 'bar': one Keras progress bar for the whole run (redrawn in place: a terminal);
- 'lines': one plain line per logging interval and at the end, with the
  interval's means (logs, files, schedulers: no carriage returns);
- 'none': nothing.
`style_for('auto')` is 'bar' on a terminal and 'lines' otherwise.
"""
import sys
import time

import keras

STYLES = ("auto", "bar", "lines", "none")

# (log name, label) in the order shown; missing ones are skipped. Each metric has one
# name on the console, in TensorBoard (train/<name>), result.json and fit()'s logs
# (the authors' names); while pretraining, supervised_* is the online linear head's
# (on stop_gradient(h)); while distilling, the student's on the batch's labelled
# examples.
_SHOWN = (("contrast_loss", "contrast_loss"), ("contrast_acc", "contrast_acc"),
          ("distill_loss", "distill_loss"), ("teacher_agreement", "teacher_agreement"),
          ("supervised_loss", "supervised_loss"), ("supervised_acc", "supervised_acc"),
          ("learning_rate", "lr"), ("examples_per_sec", "img/s"),
          ("input_share", "input_wait"))


def _shown(logs):
    """(name, label) of the logs shown, in order."""
    return [(name, label) for name, label in _SHOWN if name in logs]


def style_for(style, stream=None):
    """'auto' -> 'bar' on a terminal, 'lines' otherwise; other styles unchanged."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}. Received: style={style!r}")
    if style != "auto":
        return style
    stream = stream or sys.stdout
    return "bar" if getattr(stream, "isatty", lambda: False)() else "lines"


def format_duration(seconds):
    seconds = int(round(max(seconds, 0)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class _SteadyBar(keras.utils.Progbar):
    """Keras' progress bar whose ETA counts steady-state steps only (Keras' own
    counts the first call, which includes tracing and compiling: it showed 2:03 for
    a 34 s run)."""

    def __init__(self, target, seconds_per_step, **kwargs):
        super().__init__(target, **kwargs)
        self._seconds_per_step = seconds_per_step

    def _estimate_step_duration(self, current, now):
        steady = self._seconds_per_step()
        return steady if steady is not None else super()._estimate_step_duration(
            current, now)


class TrainingProgress:
    """Progress of one training run, from `start_step` to `total_steps`.

    Args:
        total_steps: the step the run trains to.
        start_step: the step it starts from (a resumed run starts after 0).
        steps_per_epoch: steps in one epoch (float), for the epoch shown; 0 to omit.
        style: see the module docstring ('auto' is resolved here).
        stream: where to write (stdout).
        clock: a function returning seconds (tests).
    """

    def __init__(self, *, total_steps, start_step=0, steps_per_epoch=0.0, style="auto",
                 stream=None, clock=time.perf_counter):
        self.stream = stream or sys.stdout
        self.style = style_for(style, self.stream)
        self.total_steps, self.start_step = int(total_steps), int(start_step)
        self.steps_per_epoch = float(steps_per_epoch)
        self._clock = clock
        self._steady_since = None  # (time, step) after the first call
        self._last_step = self.start_step
        self._bar, self._bar_drawn = None, False
        if self.style == "bar":
            self._bar = _SteadyBar(
                self.total_steps - self.start_step, self.seconds_per_step, verbose=1,
                stateful_metrics=[label for _, label in _SHOWN])

    def seconds_per_step(self, now=None):
        """Steady-state seconds per step (None before two calls)."""
        if self._steady_since is None:
            return None
        since_time, since_step = self._steady_since
        steps = self._last_step - since_step
        if steps <= 0:
            return None
        return ((now if now is not None else self._clock()) - since_time) / steps

    def update(self, step, logs):
        """After a compiled call that brought the run to `step`, with its logs."""
        now = self._clock()
        self._last_step = int(step)
        first = self._steady_since is None
        if first:
            self._steady_since = (now, self._last_step)  # tracing excluded
        # The bar appears with the second call: its ETA needs a steady-state step.
        if self._bar is not None and (not first or self._last_step >= self.total_steps):
            values = [(label, float(logs[name])) for name, label in _shown(logs)]
            self._bar.update(self._last_step - self.start_step, values=values)
            self._bar_drawn = True

    def note(self, text):
        """A line of its own while the run trains (an evaluation's result): in the
        'bar' style after a line break, so it never glues onto the bar, which is
        redrawn below it; printed in every style ('none' only hides the progress)."""
        if self._bar is not None and self._bar_drawn:
            self.stream.write("\n")
            self._bar_drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def log(self, step, logs):
        """In the 'lines' style, one line for `step` with `logs` (the interval's
        means: the loop calls this every `log_every` steps and at the end)."""
        if self.style == "lines":
            self.stream.write(self.line(step, logs) + "\n")
            self.stream.flush()

    def line(self, step, logs, now=None):
        """One plain line: step k/N (epoch), losses, accuracies, rate, speed, ETA."""
        parts = [f"step {step}/{self.total_steps}"]
        if self.steps_per_epoch > 0:
            parts[0] += (f" (epoch {step / self.steps_per_epoch:.2f} of "
                         f"{self.total_steps / self.steps_per_epoch:.2f})")
        metrics = [f"{label} {float(logs[name]):.4g}" for name, label in _shown(logs)
                   if name not in ("learning_rate", "examples_per_sec", "input_share")]
        if metrics:
            parts.append(" ".join(metrics))
        if "learning_rate" in logs:
            parts.append(f"lr {float(logs['learning_rate']):.4g}")
        speed = self.seconds_per_step(now)
        if speed is not None:
            remaining = speed * (self.total_steps - step)
            wait = (f" (input wait {float(logs['input_share']):.0%})"
                    if "input_share" in logs else "")
            parts.append(f"{speed:.3g} s/step{wait}, ETA {format_duration(remaining)}")
        return " | ".join(parts)
