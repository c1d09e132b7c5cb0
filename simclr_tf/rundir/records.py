"""A run directory's records: the one owner of flags.json and result.json.

A run directory tells every later mode, script and notebook what wrote it (as
keras-hub's `from_preset(dir)` reads `config.json`), so it is written and read here
only:

- `record_path(model_dir, kind, mode)`: where a mode's flags and results go.
- `write_json`: a killed process never leaves half a record (`files.atomic_write`:
  temporary file, then rename).
- `read_config(path)`: the Config a run recorded, read by one tolerant rule (below),
  so that preflight, `checkpoints.open_encoder` and the scripts agree on which old
  run directories open.
- `read_json(path)`: a result (or any record) as a dict. A record of flags
  (flags.json, flags.<mode>.json, flags_history.json) has its values checked
  against the flags' types (`Config.check_record`): `"use_blur": "false"` is a
  `RecordError` naming the file and the key, never read as true nor written back.
- `MetricsLog`: `metrics.jsonl`, one line per logging interval of training and one
  per evaluation during training (what TensorBoard shows, for scripts and plots that
  read no event files).
- `write_result(model_dir, mode, results)`: a mode's result, merged into the one
  already there. Each accuracy has beside it a `protocol/<name>` entry, how it was
  measured (`protocol_of`): evaluator, split, examples, the checkpoint {path
  (`run_relative`), step}, preprocessing, and the evaluator's own settings. They are
  entries of their own, not one nested `protocol` dict, so that the merge keeps the
  protocol of every accuracy it keeps, whichever run measured it.
- `flag_changes(model_dir, config)`: the flags of a training run that differ from
  what flags.json records (every flag but `FREE_FLAGS`); `preflight` refuses those
  outside `EXTENSION_FLAGS` when model_dir holds checkpoints, unless
  --allow_changed_flags. `start_run_record` appends each run's changes to
  `flags_history.json` (a JSON list, oldest first, of {"time", "mode", "changed":
  {flag: {"recorded", "given"}}, "allow_changed_flags", "from_step"}; "given" is the
  value the run applied, "from_step" the step it started from) before flags.json takes
  the new values: flags.json says what wrote the newest checkpoints, the history what
  wrote the earlier ones (`flags_of_step`). So a run that continues model_dir's
  checkpoints writes both with its first checkpoint (`FlagsRecord`): one that fails
  or stops before it (a NaN at step 6 of an extension with --learning_rate=1e30)
  leaves them as they were, and the next command is compared with, and reads, the
  flags of the checkpoints there.
  flags.json's `checkpoint` stays the weights the first step started from: a run
  that continues checkpoints does not read --checkpoint, and
  `preflight.overlap.weights_chain` follows it to what trained them.

A result is never deleted, and never replaced by a smaller one. A run that ends
writes its result as the previous result with its own values over it (one atomic
write), so a rerun of a finished command (a scheduler's retry, the README's way to
resume: it trains no step and has no `train/*` metric) keeps the training's
metrics, an extension updates what it measured again and keeps the rest, and a run
that fails or is interrupted writes nothing: the previous result stays as it was,
readable. `global_step` is that of the newest run that ended; an entry that run did
not measure keeps the value of the run that did (e.g. the final probe of an earlier
`--final_linear_probe` run).

This module needs only TensorFlow's file API, `config` and the mode table.
"""
import datetime
import json
import os
import time

import tensorflow as tf
from absl import logging

from simclr_tf.rundir.files import atomic_write
from simclr_tf.config.tables import modes
from simclr_tf.config import Config, ConfigError, RecordError

# A mode that trains (`modes.Mode.trains`) keeps flags.json / result.json (what
# `open_encoder` and users read); the others never overwrite them and write
# flags.<mode>.json / result.<mode>.json.
FLAGS, RESULT = "flags", "result"
# Config.to_dict() writes it beside the flags; it follows from stem and image_size.
DERIVED_KEYS = ("resolved_stem",)
# A model_dir's training record is a contract: with its checkpoints there, a training
# run whose flags differ from flags.json in any flag but these is refused
# (`preflight`, naming each) unless --allow_changed_flags. These change neither the
# optimisation nor the data: where the run is and shows, evaluation, export,
# checkpoint bookkeeping, hardware.
FREE_FLAGS = (
    "mode", "model_dir", "checkpoint", "break_lock", "allow_changed_flags", "reevaluate",
    "progress", "log_every_steps", "data_dir", "tfds_download", "cache_dataset",
    "skip_corrupt_images", "master", "use_tpu", "tpu_name", "tpu_zone", "gcp_project",
    "strategy", "cpu_replicas", "peer_wait_secs", "jit_compile", "deterministic",
    "checkpoint_epochs", "checkpoint_steps",
    "keep_checkpoint_max", "keep_hub_module_max", "serving_max_pixels", "export_format",
    "eval_steps",
    "eval_batch_size", "eval_split", "eval_name", "eval_wait_secs", "final_linear_probe",
    "allow_eval_overlap", "evaluators",
    "knn_eval_split", "knn_bank_split", "knn_eval_every", "knn_k", "knn_temperature",
    "knn_max_bank", "knn_max_queries", "embed_split", "embed_output",
    "embed_projection", "embed_projector_size")
# The run's length: extending a finished run is allowed without the override, and
# recorded in the history like every other change.
EXTENSION_FLAGS = ("train_steps", "train_epochs")
HISTORY_FILE = "flags_history.json"


METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """`model_dir/metrics.jsonl`: one JSON object per logging interval of training,
    `{"step": 100, "time": <unix seconds>, "train/contrast_loss": ..., ...}` (the
    TensorBoard scalars of that step, under the same names), and one per evaluation
    during training (the kNN or the distillation monitor: `{"step": 100, "time": ...,
    "knn/top_1_accuracy": ..., "knn/rankme": ..., ...}`), oldest first. A step may
    thus have two lines, each with its own names; merge them by step.

    Each line is appended with one write and a reader skips a line cut short (a
    kill mid-write). A run that resumes from step s first drops the lines after s
    (steps it trains again) and any line cut short (the file's only line too: the
    next append would otherwise continue it, and both be lost), so every step's
    lines appear once.

    Args:
        model_dir: the run directory.
        start_step: the step the run starts from.
        write_guard: called before each write (`run_lock.ModelDirLock.check`).
    """

    def __init__(self, model_dir, *, start_step, write_guard=None):
        self.path = os.path.join(model_dir, METRICS_FILE)
        self._guard = write_guard
        if tf.io.gfile.exists(self.path):
            with tf.io.gfile.GFile(self.path) as f:
                text = f.read()
            kept = [line for line in _metric_lines(text.splitlines())
                    if line["step"] <= start_step]
            if len(kept) != len(text.splitlines()) or text[-1:] not in ("", "\n"):
                atomic_write(self.path, "".join(
                    json.dumps(line) + "\n" for line in kept))

    def append(self, step, values):
        if self._guard is not None:
            self._guard()
        line = json.dumps(dict({"step": int(step), "time": round(time.time(), 3)},
                               **{k: float(v) for k, v in values.items()}))
        try:
            with tf.io.gfile.GFile(self.path, "a") as f:
                f.write(line + "\n")
        except (OSError, tf.errors.OpError):
            # A file system without appends (object stores): the whole file, anew.
            previous = read_metrics(self.path) if tf.io.gfile.exists(self.path) else []
            atomic_write(self.path, "".join(json.dumps(old) + "\n" for old in previous)
                         + line + "\n")


def read_metrics(path):
    """The lines of a `metrics.jsonl` as dicts (a line cut short is skipped)."""
    with tf.io.gfile.GFile(path) as f:
        return _metric_lines(f)


def _metric_lines(texts):
    """The lines of `texts` that are metrics lines, as dicts."""
    lines = []
    for text in texts:
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("step"), int):
            lines.append(line)
    return lines


def record_path(model_dir, kind, mode, *, step=None):
    """The path of a record in `model_dir`.

    Args:
        model_dir: the run directory.
        kind: FLAGS ('flags') or RESULT ('result').
        mode: the `--mode` that writes it: a mode that trains writes `<kind>.json`,
            the others `<kind>.<mode>.json` (an unknown mode too).
        step: for the result of one evaluated checkpoint (`--mode=eval`):
            `result_<step>.json`.

    Example:
        >>> record_path("/run", "flags", "train")
        '/run/flags.json'
        >>> record_path("/run", "result", "eval", step=100)
        '/run/result_100.json'
    """
    if kind not in (FLAGS, RESULT):
        raise ValueError(f"kind must be {FLAGS!r} or {RESULT!r}. Received: kind={kind!r}")
    if step is not None:
        if kind != RESULT:
            raise ValueError(f"only a result has a step. Received: kind={kind!r}, "
                             f"step={step!r}")
        return os.path.join(model_dir, f"{RESULT}_{step}.json")
    trains = mode in modes.MODES and modes.MODES[mode].trains
    name = f"{kind}.json" if trains else f"{kind}.{mode}.json"
    return os.path.join(model_dir, name)


def write_json(path, values):
    """Writes `values` as JSON, atomically (the records' one format: indented, keys
    sorted, numpy and other numbers as floats)."""
    atomic_write(path, json.dumps(values, indent=2, sort_keys=True, default=float))


def read_json(path):
    """The JSON record at `path` as a dict (a list for flags_history.json); a record
    of flags has its values' types checked (`check_types`).

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: the file is not JSON (json.JSONDecodeError).
        RecordError (a ValueError): a flag of the record has a value of another type.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"No record at {path!r}; a run writes it once its "
                                "checks have passed.")
    with tf.io.gfile.GFile(path) as f:
        values = json.loads(f.read())
    check_types(path, values)
    return values


def check_types(path, values):
    """Raises RecordError naming `path` and the key when the record of flags read
    from `path` holds a value of the wrong type for its flag (`Config.check_record`):
    flags.json and flags.<mode>.json, and each entry of flags_history.json (its
    "mode", "allow_changed_flags" and each change's "recorded" and "given"). Other
    records (results) hold no flags."""
    name = os.path.basename(path)
    if name == HISTORY_FILE:
        if not isinstance(values, list):
            raise RecordError(f"{path!r} holds {type(values).__name__}, not a JSON list "
                              "of changes: correct it or move it aside.")
        for number, entry in enumerate(values, 1):
            changed = entry.get("changed") if isinstance(entry, dict) else None
            if not isinstance(changed, dict):
                raise RecordError(f"{path!r}: entry {number} is no {{\"changed\": "
                                  "{flag: {\"recorded\", \"given\"}}} object: correct "
                                  "it or move the file aside.")
            Config.check_record(entry, path, f"(entry {number})")
            for flag, change in changed.items():
                if not isinstance(change, dict):
                    raise RecordError(f"{path!r}: entry {number} records {flag!r} as "
                                      f"{json.dumps(change)}, not {{\"recorded\", "
                                      "\"given\"}: correct it or move the file aside.")
                for key in ("recorded", "given"):
                    if key in change:
                        Config.check_record({flag: change[key]}, path,
                                            f"(entry {number}, \"{key}\")")
    elif (name.startswith(FLAGS + ".") and name.endswith(".json")
          and isinstance(values, dict)):
        Config.check_record(values, path)


def read_config(path):
    """The Config a run recorded in its flags file (`record_path(.., "flags", mode)`).

    The rule, the one for every reader of a run directory (preflight, `open_encoder`,
    the scripts), so that a directory which passes preflight also opens elsewhere:

    - a key this version does not know is ignored and named in one warning: the
      record is from a newer version (a flag added since) or an older one (a flag
      removed since);
    - a key the record lacks takes today's default: every flag added since was added
      with the old behaviour as its default, so the default is what the old run did;
    - derived keys (`resolved_stem`, which follows from stem and image_size) are
      ignored.

    Args:
        path: the flags file, e.g. `record_path(run_dir, "flags", "train")`.

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: the file is not a JSON object of settings (RecordError: a value
            is not of its flag's type, `check_types`).
    """
    values = read_json(path)
    if not isinstance(values, dict):
        raise ValueError(f"{path!r} holds {type(values).__name__}, not a JSON object of "
                         "settings; rewrite it with the run's flags or remove it.")
    known = {f.name for f in Config.flag_fields()}
    unknown = sorted(set(values) - known - set(DERIVED_KEYS))
    if unknown:
        logging.warning("%s records settings this version does not know (%s): a record "
                        "of a newer or older version; ignoring them.", path,
                        ", ".join(unknown))
    return Config.from_dict({k: v for k, v in values.items() if k in known})


def start_run_record(config, *, continues=False, from_step=0):
    """The run's flags in model_dir, once preflight has passed and the lock is held.
    The mode's previous result stays (`write_result` merges into it). A training
    run's flags.json that records other flags is named in a warning (the checkpoints
    were written by those).

    Args:
        config: the run's Config.
        continues: a training run continues checkpoints in model_dir: its flags
            (flags.json, and its changes in flags_history.json) are not written now
            but with its first checkpoint, by the `FlagsRecord` returned.
        from_step: the step the run starts from (its checkpoints are the later
            ones), recorded with its changes.

    Returns:
        None (written now), or with `continues` the `FlagsRecord` to write.

    Raises:
        ConfigError: (--model_dir) flags_history.json cannot be read or holds a value
            of the wrong type: nothing was trained yet (the history is kept).
    """
    flags_path = record_path(config.model_dir, FLAGS, config.mode)
    if not modes.get(config.mode).trains:
        write_json(flags_path, config.to_dict())
        return None
    changes = flag_changes(config.model_dir, config)
    record = FlagsRecord(config, changes,
                         _read_history(config.model_dir) if changes else None,
                         started_from=_started_from(config) if continues
                         else config.checkpoint, from_step=from_step)
    if changes:
        logging.warning(
            "model_dir's flags.json records other flags; continuing with the new ones "
            "(%s), recorded in %s%s.", "; ".join(
                f"{flag}: {old!r} -> {new!r}" for flag, old, new in changes),
            history_path(config.model_dir),
            " with this run's first checkpoint" if continues else "")
    if continues:
        return record
    record.write()
    return None


def _started_from(config):
    """The --checkpoint that model_dir's checkpoints started from, as its flags.json
    records it (None: random; the one given when no record can be read), for a run
    that continues them: such a run does not read --checkpoint (it resumes
    model_dir), so the record keeps the weights the first step started from, which
    `preflight.overlap.weights_chain` follows to what trained them."""
    path = record_path(config.model_dir, FLAGS, config.mode)
    try:
        recorded = read_json(path) if tf.io.gfile.exists(path) else None
    except (ValueError, OSError, tf.errors.OpError):
        recorded = None
    if not isinstance(recorded, dict):
        return config.checkpoint
    return recorded.get("checkpoint")


class FlagsRecord:
    """A training run's flags, to write into model_dir (`start_run_record`): its
    changes appended to flags_history.json, then flags.json, whose `checkpoint` is
    `started_from` (the weights its first step started from; the changes record
    `from_step`, that step). `write()` writes them once; later calls do nothing."""

    def __init__(self, config, changes, history, *, started_from, from_step=0):
        self.config, self.changes, self.history = config, changes, history
        self.started_from, self.from_step = started_from, int(from_step)
        self.written = False

    def write(self):
        if self.written:
            return
        if self.changes:
            write_json(history_path(self.config.model_dir), self.history + [dict(
                time=datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"),
                mode=self.config.mode, allow_changed_flags=self.config.allow_changed_flags,
                from_step=self.from_step,
                changed={flag: dict(recorded=old, given=new)
                         for flag, old, new in self.changes})])
        write_json(record_path(self.config.model_dir, FLAGS, self.config.mode),
                   dict(self.config.to_dict(), checkpoint=self.started_from))
        self.written = True


PROTOCOL_PREFIX = "protocol/"


def protocol_of(result, name):
    """How the accuracy `name` of a result was measured (its `protocol/<name>` entry:
    evaluator, split, examples, checkpoint, preprocessing, the evaluator's own
    settings), or None."""
    return result.get(PROTOCOL_PREFIX + name)


def run_relative(path, model_dir):
    """`path` as a result records it: relative to the run directory when the path is
    in it or in a directory beside it (a run and its neighbours moved together stay
    readable: 'ckpt-4', '../finetune/ckpt-4'), else as given; None stays None."""
    if not path or not model_dir or "://" in str(path) or "://" in str(model_dir):
        return path
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(model_dir))
    return relative if not relative.startswith(os.path.join(os.pardir, os.pardir)) \
        else path


def write_result(model_dir, mode, results):
    """Writes the result of `mode` in `model_dir`: the previous one (if readable)
    with `results` over it, atomically (the module docstring says why).

    Returns:
        The merged result.
    """
    path = record_path(model_dir, RESULT, mode)
    merged = {}
    if tf.io.gfile.exists(path):
        try:
            merged = read_json(path)
        except (ValueError, OSError, tf.errors.OpError) as error:
            logging.warning("%s cannot be read (%s); writing this run's result over it.",
                            path, error)
        if not isinstance(merged, dict):
            merged = {}
    merged.update(results)
    write_json(path, merged)
    return merged


def flag_changes(model_dir, config):
    """[(flag, recorded value, given value)] of the flags outside `FREE_FLAGS` in
    which `config` differs from model_dir's flags.json (read by `read_config`'s
    rule: a flag it lacks has today's default); [] without a readable record."""
    path = record_path(model_dir, FLAGS, "train")
    try:
        if not tf.io.gfile.exists(path):
            return []
        recorded = read_config(path)
    except RecordError as error:  # a value that would be read as another
        raise ConfigError("model_dir", str(error)) from None
    except (ValueError, TypeError, OSError, tf.errors.OpError) as error:
        logging.warning("Cannot read %s (%s); its flags are not compared.", path, error)
        return []
    # A flag that sets others (--variant) is compared in those.
    setting = [flag for flag, (_, sets) in Config.flag_pairs().items() if sets]
    changed = [f for f in Config.flag_fields()
               if f.name not in FREE_FLAGS and f.name not in setting
               and getattr(recorded, f.name) != getattr(config, f.name)]
    # The most telling difference first: another dataset or model before a rate, and
    # within the data flags the dataset before its splits.
    changed.sort(key=lambda f: (_CHANGE_ORDER.index(f.metadata["group"]),
                                f.name not in ("dataset", "encoder")))
    return [(f.name, getattr(recorded, f.name), getattr(config, f.name)) for f in changed]


# `flag_changes`' order: the help groups (`fields.HELP_GROUPS`) by what a difference
# in them says about the run.
_CHANGE_ORDER = ("Data", "Model", "Run", "Contrastive objective and augmentation",
                 "Fine-tuning", "Distillation", "Optimisation and schedule",
                 "Checkpoints and export", "Evaluation", "Hardware and distribution")


def flags_of_step(flags, history, step):
    """The flags that wrote the checkpoint of `step`, from the newest ones (flags.json)
    and flags_history.json: each change recorded from a step at or after `step` is
    undone, newest first. Returns (those flags, the flags changed at a step the
    history does not name: entries written before it recorded "from_step", whose
    value at `step` is not known)."""
    flags, unknown = dict(flags), []
    for entry in reversed(history or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("changed"), dict):
            continue
        start = entry.get("from_step")
        if not isinstance(start, int):
            unknown += [flag for flag in entry["changed"] if flag not in unknown]
        elif start >= step:
            for flag, change in entry["changed"].items():
                if isinstance(change, dict) and "recorded" in change:
                    flags[flag] = change["recorded"]
    return flags, unknown


def read_history(model_dir):
    """model_dir's flags_history.json as a list ([] without one, or one that cannot
    be read: for readers that can do without it)."""
    try:
        return _read_history(model_dir)
    except ConfigError:
        return []


def history_path(model_dir):
    """model_dir's `flags_history.json` (see the module docstring)."""
    return os.path.join(model_dir, HISTORY_FILE)


def _read_history(model_dir):
    """model_dir's flags_history.json as a list ([] without one).

    Raises:
        ConfigError: (--model_dir) it cannot be read, or holds a value of the wrong
            type: the run stops before it trains rather than write over the record
            of what wrote the earlier checkpoints.
    """
    path = history_path(model_dir)
    try:
        if not tf.io.gfile.exists(path):
            return []
        return read_json(path)
    except RecordError as error:
        raise ConfigError("model_dir", str(error)) from None
    except (ValueError, OSError, tf.errors.OpError) as error:
        raise ConfigError("model_dir", f"{path!r} cannot be read ({error}); it records "
                          "which flags wrote the earlier checkpoints: repair it or move "
                          "it aside.") from None
