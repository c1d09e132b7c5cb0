"""run.py's flags parsed from a command line into a FlagValues of their own, so a test
builds the Config run.py would (`run.config_from_flags(flag_values(argv))`), or runs
run.py's main in process (`run_main`), without touching the process-wide FLAGS."""
import copy

from absl import flags

import run
from simclr_tf.config import Config
from simclr_tf.config.tables import train_modes

# The Config's flags and the train modes' own options' (--triplet_margin).
CONFIG_FLAGS = [f.name for f in Config.flag_fields()] + [
    name for name in train_modes.all_options() if name in run.FLAGS]


def flag_values(argv):
    """The FlagValues of `run.py <argv>` (argv without the program name)."""
    values = flags.FlagValues()
    for name in CONFIG_FLAGS:
        values[name] = copy.deepcopy(run.FLAGS[name])
    values(["run.py", *argv])
    return values


def run_main(monkeypatch, argv):
    """run.py's `main` on `argv` (without the program name) in this process, as
    `python run.py <argv>` runs it: the same errors, printed the same way (read them
    with capsys). Returns the exit status (0 when main returns). An exception main
    does not handle propagates (a traceback, in a process).

    Its FlagValues are its own (`flag_values`), with absl's --verbosity given, so that
    main leaves the logging of the test process as it is."""
    values = flag_values(argv)
    flags.DEFINE_integer("verbosity", 0, "absl's --verbosity, given: left as it is.",
                         flag_values=values)
    values["verbosity"].present = 1
    # run.FLAGS is main's for this call only: a later call's flag_values copies the
    # defaults from run.py's own FLAGS, not from this call's command line.
    with monkeypatch.context() as patch:
        patch.setattr(run, "FLAGS", values)
        try:
            run.main(["run.py"])
        except SystemExit as exit_:
            return exit_.code
    return 0
