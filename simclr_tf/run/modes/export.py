"""--mode=export: a SavedModel of model_dir's latest checkpoint; `export_model`, the
export of a model at a step that every mode which exports calls (model_dir's
rotation, the lock's check, an I/O failure named)."""
import tensorflow as tf

from simclr_tf.run import preflight
from simclr_tf.weights import checkpoints, export
from simclr_tf.run.modes import parts


class ExportError(RuntimeError):
    """Exporting the SavedModel failed; the checkpoints are intact."""


def export_model(model, config, step, *, write_guard=None):
    """model_dir/saved_model/<step>; an I/O failure (a full disk) names what is safe
    and how to retry. The rotation keeps every export whose step has no intact
    checkpoint in model_dir: it is the only copy of those weights. `write_guard` (the
    run's lock check) is asked first: a run that lost model_dir exports nothing."""
    if write_guard is not None:
        write_guard()
    try:
        return export.export_for_step(model, config.model_dir, step,
                                      image_size=config.image_size,
                                      keep_hub_module_max=config.keep_hub_module_max,
                                      max_pixels=config.serving_max_pixels,
                                      only_copies=_exports_without_checkpoint(config))
    except (OSError, tf.errors.OpError) as error:
        raise ExportError(
            f"Exporting the SavedModel of step {step} to {config.model_dir}/saved_model "
            f"failed: {str(error).strip().splitlines()[0][:300]}. The checkpoints are "
            "saved and intact; free space (or fix the path) and run the same flags with "
            "--mode=export.") from None


def _exports_without_checkpoint(config):
    """Steps of model_dir's exports that no intact checkpoint of model_dir holds."""
    prefixes, _ = checkpoints.candidates(config.model_dir)
    intact = {checkpoints.step_of(p) for p in prefixes
              if checkpoints.unreadable_reason(p) is None}
    return [s for s in export.exported_steps(config.model_dir) if s not in intact]


def export_latest(config, strategy, context):
    """--mode=export: a SavedModel of the latest checkpoint in model_dir."""
    model = parts.build_model(config, strategy, context.num_classes)
    # preflight checked that model_dir has a checkpoint; the newest that loads.
    with preflight.flag_errors("model_dir"):
        latest = checkpoints.load_into(model, config.model_dir, whole_model=True).prefix
    step = checkpoints.step_of(latest, 0)
    replaced = step in export.exported_steps(config.model_dir)
    path = export_model(model, config, step, write_guard=context.write_guard)
    print(f"Exported {latest} to {path}"
          + (" (replacing the export of the same checkpoint)" if replaced else ""),
          flush=True)
    return dict(saved_model=path)
