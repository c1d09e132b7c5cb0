"""The ground floor, without TensorFlow: the run's configuration and its rules.

- `run_config`: `Config`, the frozen, validated configuration (one field per flag),
  which `run.py` builds from its flags; `simclr_tf.config.Config` is the same class.
- `fields`, `validation`, `bounds`, `rules`, `record_types`, `errors`: how a field is
  declared, checked and read back from a record.
- `architecture`, `variants`, `inherit`, `run_dirs`: which flags decide a model, the
  authors' variant names, what a run inherits from the run it continues.
- `tables/`: one row per --mode, --encoder, --train_mode and evaluator.

Lazy: importing one of these modules (the loss imports `rules`) loads that module and
what it imports, not the whole floor.
"""
import importlib
import importlib.util


def __getattr__(name):
    # A module of this package, else a name of `run_config` (`Config`, `ConfigError`,
    # `RecordError`, ...), imported on first use.
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    run_config = importlib.import_module(f"{__name__}.run_config")
    try:
        value = getattr(run_config, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value  # found once: later lookups do not come here
    return value
