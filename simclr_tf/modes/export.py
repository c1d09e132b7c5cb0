"""--mode=export: a SavedModel of model_dir's latest checkpoint."""
from simclr_tf import checkpoints, preflight
from simclr_tf.modes import parts

def export_latest(config, strategy, context):
    """--mode=export: a SavedModel of the latest checkpoint in model_dir."""
    model = parts.build_model(config, strategy, context["num_classes"])
    # preflight checked that model_dir has a checkpoint; the newest that loads.
    with preflight.flag_errors("model_dir"):
        latest = checkpoints.load_into(model, config.model_dir, whole_model=True).prefix
    path = parts.export_model(model, config, checkpoints.step_of(latest, 0),
                              write_guard=context.get("write_guard"))
    print(f"Exported {latest} to {path}", flush=True)
    return dict(saved_model=path)
