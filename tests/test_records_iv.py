"""Issue 34's records: a resumed run's TensorBoard events (item 13), and, end to end
through run.py's flags, the pairs of flags a record lends (item 1) and flags.json
after a changed-flags extension that fails before its first checkpoint (item 6).
The pieces are tested on their own in test_inherit.py and test_records.py."""
import json
import os
import time

import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import plugin_event_accumulator

import run
from simclr_tf.rundir import records
from simclr_tf.run.modes import train
from helpers import cli_flags
from helpers.run_fixtures import TINY


def _shown(directory, tag):
    """(step, value) of `tag` as TensorBoard shows it: the reader of event files its
    server reads by (`plugin_event_accumulator`), dropping orphaned events (its
    default). The older `event_accumulator.EventAccumulator` purges only TF 1's
    summary kinds, not the tensors TF 2 writes scalars as: it shows every event."""
    reader = plugin_event_accumulator.EventAccumulator(str(directory),
                                                       purge_orphaned_data=True)
    reader.Reload()
    return [(event.step, float(tf.make_ndarray(event.tensor_proto)))
            for event in reader.Tensors(tag)]


def _events(directory):
    """[(step, what)] of every event file in `directory`, in TensorBoard's order."""
    found = []
    for name in sorted(tf.io.gfile.listdir(str(directory))):
        if name.startswith("events.out."):
            found += [(event.step, event.WhichOneof("what")) for event in
                      tf.compat.v1.train.summary_iterator(os.path.join(str(directory),
                                                                       name))]
    return found


def _next_second():
    """Waits for the next second: an event file is named by the second it is opened
    in, and TensorBoard reads the files in the order of their names."""
    now = int(time.time())
    while int(time.time()) == now:
        time.sleep(0.02)


def test_a_resumed_run_marks_its_start_so_tensorboard_shows_each_step_once(tmp_path):
    """Issue 34, item 13: a run killed after logging steps 3 and 4 but before
    checkpointing step 4 resumes from step 2 and logs 3 and 4 again; TensorBoard
    showed `1, 2, 3, 4, 3, 4, 5`. Its SessionLog START at step 3 makes TensorBoard
    drop the first 3 and 4. Without the marker (the control), it does not."""
    for marked in (False, True):
        directory = tmp_path / f"marked_{marked}"
        writer = tf.summary.create_file_writer(str(directory))
        train.write_session_start(writer, 0)
        with writer.as_default():
            for step in (1, 2, 3, 4):
                tf.summary.scalar("train/loss", float(step), step=step)
        writer.close()  # killed: ckpt-2 is the newest checkpoint
        _next_second()
        writer = tf.summary.create_file_writer(str(directory))
        if marked:
            train.write_session_start(writer, 2)
        with writer.as_default():
            for step in (3, 4, 5):
                tf.summary.scalar("train/loss", 10.0 + step, step=step)
        writer.close()
        events = _events(directory)
        assert [step for step, what in events if what == "summary"] == [1, 2, 3, 4, 3, 4, 5]
        assert [step for step, what in events if what == "session_log"] == (
            [0, 3] if marked else [0])
        if marked:
            assert _shown(directory, "train/loss") == [(1, 1.0), (2, 2.0), (3, 13.0),
                                                        (4, 14.0), (5, 15.0)]
        else:
            assert [step for step, _ in _shown(directory, "train/loss")] == [
                1, 2, 3, 4, 3, 4, 5]


@pytest.mark.large  # 16 s (33 s on a loaded machine): 4 tiny steps, resumed from 2
def test_after_a_kill_and_a_resume_tensorboard_agrees_with_metrics_jsonl(
        tmp_path, skip_final_export):
    """Issue 34, item 13, end to end: the run's own event files, read by
    TensorBoard's reader, hold each step once, with the values metrics.jsonl holds
    (the resumed run's for steps 3 and 4)."""
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    from helpers.run_fixtures import config  # pylint: disable=import-outside-toplevel
    run_dir = tmp_path / "run"
    cfg = config(model_dir=str(run_dir), mode="train", train_steps=4, checkpoint_steps=2,
                 log_every_steps=1, progress="none", train_split="train[:256]")
    experiment.run(cfg)
    # Killed after logging step 4, before ckpt-4 was written.
    for name in os.listdir(run_dir):
        if name.startswith("ckpt-4") or name == "checkpoint":
            os.remove(run_dir / name)
    _next_second()
    assert experiment.run(cfg)["train/initialized_from"].endswith("ckpt-2")
    lines = records.read_metrics(str(run_dir / records.METRICS_FILE))
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    assert [step for step, what in _events(run_dir) if what == "summary"].count(3) >= 2
    shown = _shown(run_dir, "train/contrast_loss")
    assert [step for step, _ in shown] == [1, 2, 3, 4]
    # Values compared as a flat list (pytest >= 9.2's approx takes no nested tuples).
    assert [value for _, value in shown] == pytest.approx(
        [line["train/contrast_loss"] for line in lines], rel=1e-6)


def _command(*argv):
    """The Config run.py builds for `argv` (flags read from the record included)."""
    return run.config_from_flags(cli_flags.flag_values(list(argv)))


@pytest.mark.large  # 32 s: four short runs of the tiny model
def test_an_extension_by_epochs_and_a_failed_changed_flags_one_through_run_py(
        tmp_path, skip_final_export):
    """Issue 34, items 1 and 6, as a user types them: a run of --train_steps=2,
    extended with --train_epochs=1 alone, trains the epoch (not 'Training 2 steps;
    2 done'); an extension with --allow_changed_flags --learning_rate=1e30 that
    fails before its first checkpoint leaves flags.json and the history as they
    were, so the next command without it is not refused and reads 0.5, not 1e30."""
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    from simclr_tf.run.loop import NonFiniteLossError  # pylint: disable=import-outside-toplevel
    run_dir = tmp_path / "run"
    first = [f"--{name}={value}" for name, value in TINY.items() if name != "train_split"]
    experiment.run(_command(*first, f"--model_dir={run_dir}", "--mode=train",
                            "--train_steps=2", "--checkpoint_steps=2",
                            "--train_split=train[:128]", "--optimizer=momentum",
                            "--progress=none"))
    extended = _command(f"--model_dir={run_dir}", "--train_epochs=1")
    assert (extended.train_steps, extended.train_epochs) == (0, 1)
    assert experiment.run(extended)["global_step"] == 128 // 32 + 1
    history = records.read_json(records.history_path(str(run_dir)))
    assert [entry["changed"] for entry in history] == [
        {"train_epochs": dict(recorded=100, given=1),
         "train_steps": dict(recorded=2, given=0)}]

    flags_json = (run_dir / "flags.json").read_text()
    history_json = (run_dir / records.HISTORY_FILE).read_text()
    with pytest.raises(NonFiniteLossError):
        experiment.run(_command(f"--model_dir={run_dir}", "--train_epochs=2",
                                "--learning_rate=1e30", "--allow_changed_flags",
                                "--checkpoint_steps=100"))  # none before the NaN
    assert tf.train.latest_checkpoint(str(run_dir)).endswith("ckpt-5")
    assert (run_dir / "flags.json").read_text() == flags_json
    assert (run_dir / records.HISTORY_FILE).read_text() == history_json

    again = _command(f"--model_dir={run_dir}", "--train_epochs=2")
    assert again.learning_rate == TINY["learning_rate"]
    assert experiment.run(again)["global_step"] == 2 * 128 // 32 + 1
    recorded = json.loads((run_dir / "flags.json").read_text())
    assert (recorded["train_epochs"], recorded["learning_rate"]) == (2, 0.5)
    assert [entry["changed"] for entry in records.read_json(
        records.history_path(str(run_dir)))][1:] == [
            {"train_epochs": dict(recorded=1, given=2)}]
