"""Issue 34's records, end to end through run.py's flags: the pairs of flags a record
lends (item 1) and flags.json after a changed-flags extension that fails before its
first checkpoint (item 6). The pieces are tested on their own in test_inherit.py and
test_records.py."""
import json

import pytest
import tensorflow as tf

import run
from simclr_tf import records
from helpers import cli_flags
from helpers.run_fixtures import TINY


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
    from simclr_tf import experiment  # pylint: disable=import-outside-toplevel
    from simclr_tf.loop import NonFiniteLossError  # pylint: disable=import-outside-toplevel
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
