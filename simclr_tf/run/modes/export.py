"""--mode=export: the exports of --export_format (a SavedModel by default) of
model_dir's latest checkpoint; `export_model`, the exports of a model at a step that
every mode which exports calls (model_dir's rotation, the lock's check, an I/O failure
named)."""
import tensorflow as tf

from simclr_tf.config import errors, rules
from simclr_tf.models.simclr import float32_twin
from simclr_tf.rundir import records
from simclr_tf.run import preflight, quiet
from simclr_tf.weights import cards, checkpoints, export
from simclr_tf.run.modes import parts


class ExportError(RuntimeError):
    """Exporting failed; the checkpoints (and the formats written before) are intact."""


# result.json's entry of a training run whose export failed after it trained: the
# error, which run.py reports once the record is written (experiment._run).
EXPORT_FAILED = "export_failed"


def export_model(model, config, step, *, write_guard=None):
    """model_dir/<format>/<step> for each format of --export_format (the SavedModel
    first); an I/O failure (a full disk) or a format the model does not fit names
    what is safe and how to retry. Each format's rotation keeps every export whose
    step has no intact checkpoint in model_dir: it is the only copy of those
    weights. `write_guard` (the run's lock check) is asked first: a run that lost
    model_dir exports nothing.

    Returns:
        {format: the export's path}, in the order of `rules.EXPORT_FORMATS`.
    """
    if write_guard is not None:
        write_guard()
    written = {}
    formats = rules.export_formats(config.export_format)
    if formats and model is not None:  # once for every format (export_for_step's rule)
        model = float32_twin(model, config.image_size)
    run = _run_record(config, step)
    for fmt in formats:
        try:
            with quiet.converters_quiet():
                written[fmt] = export.export_for_step(
                    model, config.model_dir, step, fmt=fmt, image_size=config.image_size,
                    keep_hub_module_max=config.keep_hub_module_max,
                    max_pixels=config.serving_max_pixels,
                    only_copies=_exports_without_checkpoint(config, fmt), run=run)
        except Exception as error:  # pylint: disable=broad-except
            # Any failure of a converter (the TFLite converter's ConverterError, say)
            # is this one line: the checkpoints and the run's record are kept.
            where = f"{config.model_dir}/{export.FORMATS[fmt].dirname}"
            done = "".join(f" The {name} export is written: {path}." for name, path
                           in written.items())
            retry = (f"free space (or fix the path) and run the same flags with "
                     f"--mode=export --export_format={fmt}"
                     if isinstance(error, (OSError, tf.errors.OpError)) else
                     f"--export_format without {fmt} exports the other formats")
            # A full disk said once, with the space left (not a scratch file's name
            # and a second advice, which would crowd out the rest).
            reason = (f"no space left on the device ({errors.free_space(where)} free "
                      "there now)" if errors.disk_full(error) is not None
                      else str(error).strip().splitlines()[0][:300])
            raise ExportError(
                f"Exporting the {fmt} of step {step} to {where} failed: {reason}. The "
                f"checkpoints are saved and intact.{done} To export it, {retry}.") from None
    return written


def _run_record(config, step):
    """The run's recorded flags at `step` and its training result, for the exports'
    cards (a record that cannot be read leaves its part out: the export is what
    matters). flags.json holds the flags of the newest checkpoints; an older step's
    are those flags_history.json gives (`records.flags_of_step`: an export of ckpt-2
    showed a later run's --train_steps)."""
    flags, result = {}, {}
    for kind, into in ((records.FLAGS, flags), (records.RESULT, result)):
        path = records.record_path(config.model_dir, kind, "train")
        if tf.io.gfile.exists(path):
            try:
                into.update(records.read_json(path))
            except (ValueError, OSError):
                pass
    flags, unknown = records.flags_of_step(
        flags or config.to_dict(), records.read_history(config.model_dir), step)
    # A change at a step the history does not name matters below the newest
    # checkpoint (damaged or not: an export falls back past a damaged one).
    prefixes, _ = checkpoints.candidates(config.model_dir)
    newest = max((checkpoints.step_of(p, -1) for p in prefixes), default=-1)
    return cards.RunRecord(flags=flags, result=result,
                           unknown_changes=tuple(unknown) if step < newest else ())


def _exports_without_checkpoint(config, fmt):
    """Steps of model_dir's exports of `fmt` that no intact checkpoint holds."""
    prefixes, _ = checkpoints.candidates(config.model_dir)
    intact = {checkpoints.step_of(p) for p in prefixes
              if checkpoints.unreadable_reason(p) is None}
    return [s for s in export.exported_steps(config.model_dir, fmt) if s not in intact]


def export_latest(config, strategy, context):
    """--mode=export: a SavedModel of the latest checkpoint in model_dir."""
    model = parts.build_model(config, strategy, context.num_classes)
    # preflight checked that model_dir has a checkpoint; the newest that loads.
    with preflight.flag_errors("model_dir"):
        latest = checkpoints.load_into(model, config.model_dir, whole_model=True).prefix
    step = checkpoints.step_of(latest, 0)
    replaced = {fmt for fmt in rules.export_formats(config.export_format)
                if step in export.exported_steps(config.model_dir, fmt)}
    written = export_model(model, config, step, write_guard=context.write_guard)
    for fmt, path in written.items():
        print(f"Exported {latest} to {path}" + (
            " (replacing the export of the same checkpoint)" if fmt in replaced else ""),
            flush=True)
    return written
