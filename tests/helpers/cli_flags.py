"""run.py's flags parsed from a command line into a FlagValues of their own, so a test
builds the Config run.py would (`run.config_from_flags(flag_values(argv))`) without
touching the process-wide FLAGS."""
import copy

from absl import flags

import run
from simclr_tf.config import Config

CONFIG_FLAGS = [f.name for f in Config.flag_fields()]


def flag_values(argv):
    """The FlagValues of `run.py <argv>` (argv without the program name)."""
    values = flags.FlagValues()
    for name in CONFIG_FLAGS:
        values[name] = copy.deepcopy(run.FLAGS[name])
    values(["run.py", *argv])
    return values
