"""One run of `run.py`: dispatches `--mode` and assembles the parts from the Config.

`run(config)`: seeds, strategy, `preflight` (every check before a model exists, no
side effects), model_dir and its flags record, then the mode's functions
(`mode_functions`: one module each of `simclr_tf.run.modes`; pretraining is
`simclr_tf.run.modes.train.train`), then optionally the final linear probe, and the result record (both written by
`simclr_tf.rundir.records`: flags.json, result.json). The modes assemble their parts
(`simclr_tf.run.modes.parts`: the model, the Trainer); checkpoints
(`simclr_tf.weights.checkpoints`), the loop (`simclr_tf.run.loop`) and the evaluators
(`simclr_tf.evaluation`) do the work.
"""
import contextlib

import keras
import tensorflow as tf
from absl import logging

from simclr_tf.run import distribute, preflight
from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints
from simclr_tf.config.tables import evaluators as evaluator_table
from simclr_tf.config.tables import modes
from simclr_tf.run import run_lock
from simclr_tf.config import ConfigError, rules
from simclr_tf.run.modes import embed, evaluate, evaluations, linear_probe, train
from simclr_tf.run.modes import export as export_mode

ExportError = export_mode.ExportError  # run.py catches it as experiment.ExportError



def run(config):
    """Runs `config.mode` and returns a dict of results (also written to model_dir).

    A SIGTERM during training saves a checkpoint at the current step and returns
    early with `results["interrupted"] = True` (nothing is evaluated or exported).
    """
    mode = modes.get(config.mode)
    # Before any op runs: TensorFlow fixes its devices when it first makes them.
    distribute.split_cpu(config.cpu_replicas)
    keras.utils.set_random_seed(config.seed)
    if config.deterministic:
        # Process-wide and irreversible; seeds and the data position are already
        # fixed, this removes the remaining run-to-run differences of kernels.
        tf.config.experimental.enable_op_determinism()
    strategy = create_strategy(config)
    # A multi-worker run whose peer stops ends with PeerLostError naming it.
    with distribute.peer_failures_named(strategy):
        return _run(config, mode, strategy)


def _run(config, mode, strategy):
    """`run` once the strategy exists: checks, model_dir, lock, the mode's parts."""
    # The run it reads before the data: a typo in --model_dir is named as such, not
    # as the defaults' dataset that the command never got to read.
    preflight.check_weights_found(config)
    source = preflight.load_source(config)
    context = preflight.check(config, strategy, source)
    recorded = recorded_results(config, mode, context)
    if recorded is not None:
        _say_recorded(config, recorded)
        return recorded
    writes = bool(config.model_dir) and distribute.is_chief(strategy)
    if config.model_dir:
        _create_model_dir(config)
    with _lock(config, writes) as lock:
        # Asked before each write into model_dir (a run that lost its lock stops).
        context = context.replace(write_guard=lock.check if lock is not None else None)
        record, latest = None, None
        if writes:
            # Continuing checkpoints, the flags go in with the first new one (the
            # training mode writes them then: `train.train`): flags.json describes
            # the checkpoints there, whether or not this run saves one.
            latest = checkpoints.latest(config.model_dir) if mode.trains else None
            record = records.start_run_record(
                config, continues=latest is not None,
                from_step=checkpoints.step_of(latest, 0) if latest is not None else 0)
        context = context.replace(flags_record=record)
        results = {}
        for part in mode_functions(mode):
            results.update(part(config, strategy, context))
            if results.get("interrupted"):
                break
        if (record is not None and not record.written
                and checkpoints.latest(config.model_dir) != latest):
            # A training mode of another module that saved without writing them.
            if lock is not None:
                lock.check()
            record.write()
        if results.get("interrupted"):
            return results
        if config.final_linear_probe and mode.trains:
            results.update(linear_probe.final_linear_probe(config, strategy, context))
        results.update(skipped_images_record(source))
        results["data"] = source.provenance()  # what the run read: its files, if any
        if results and writes:  # merged into the previous result (records)
            if lock is not None:
                lock.check()
            records.write_result(config.model_dir, config.mode, results)
    if results.get(export_mode.EXPORT_FAILED):
        raise ExportError(results[export_mode.EXPORT_FAILED])
    return results


def mode_functions(mode):
    """The functions `mode` (a `tables.modes.Mode`) runs, in order (a SIGTERM during
    training stops the rest): a built-in mode's named here, a mode registered from
    outside names its own in its row (`Mode.functions`). What each mode needs (lock,
    checkpoint, labels) is its row in the TF-free table `simclr_tf.config.tables.modes`."""
    built_in = {
        "train": (train.train,),
        "eval": (evaluate.evaluate,),
        "train_then_eval": (train.train, evaluate.evaluate),
        "export": (export_mode.export_latest,),
        "linear_probe": (linear_probe.linear_probe_mode,),
        "embed": (embed.embed_mode,),
    }
    return built_in.get(mode.name) or mode.functions()


# What a training command measures after training, with the flag of the split each
# is measured on: its mode's eval (`tables.evaluators.evaluates_head`), the final
# probe's two halves.
_EVAL_ENTRIES = ("eval/label_top_1_accuracy",)
_PROBE_ENTRIES = ("linear_probe/pretrained", "linear_probe/random_init")


def recorded_results(config, mode, context):
    """result.json, when running this command would only measure again what it
    recorded; else None (also with --reevaluate).

    That is a training command on a finished run: model_dir's newest checkpoint is
    the last step the flags plan (`train.planned_steps`), flags.json records the
    same optimisation and data (`records.flag_changes`: a change goes through the
    changed-flags rules and is recorded), and result.json holds, at that step, every
    entry the command measures (`_EVAL_ENTRIES` for a mode that evaluates,
    `_PROBE_ENTRIES` with --final_linear_probe), measured on the splits the flags
    name (their protocols), and its export, if it recorded one, is still there.
    """
    if not mode.trains or config.reevaluate or not config.model_dir:
        return None
    latest = checkpoints.latest(config.model_dir)
    if latest is None or records.flag_changes(config.model_dir, config):
        return None
    step = checkpoints.step_of(latest)
    if step != train.planned_steps(config, context):
        return None
    result = evaluations.recorded_result(config.model_dir, records.record_path(
        config.model_dir, records.RESULT, config.mode), step)
    if result is None or result.get("global_step") != step:
        return None
    wanted = ((_EVAL_ENTRIES if evaluator_table.evaluates_head(config) else ())
              + (_PROBE_ENTRIES if config.final_linear_probe else ()))
    for name in wanted:
        protocol = records.protocol_of(result, name) or {}
        measured_at = (protocol.get("checkpoint") or {}).get("step")
        if name not in result or protocol.get("split") != config.eval_split or (
                name != "linear_probe/random_init" and measured_at != step):
            return None
        if name in _EVAL_ENTRIES and protocol.get("batches") != (config.eval_steps or None):
            return None
        if name in _PROBE_ENTRIES and (protocol.get("train") or {}).get(
                "split") != config.train_split:
            return None
    for fmt in rules.export_formats(config.export_format):  # each asked for, still there
        if not result.get(fmt) or not tf.io.gfile.exists(result[fmt]):
            return None
    return dict(result, recorded=True)


def _say_recorded(config, result):
    """The lines of a finished run's recorded results (`recorded_results`)."""
    shown = [f"\n  {name}: {result[name]:.4f}" for name in _EVAL_ENTRIES + _PROBE_ENTRIES
             if isinstance(result.get(name), (int, float))]
    print(f"{config.model_dir} holds this run, finished (step {result['global_step']}), "
          "and its result.json records what this command measures: nothing to train or "
          "measure again (--reevaluate measures it again)" + (":" if shown else ".")
          + "".join(shown), flush=True)


def _lock(config, writes):
    if not writes or not modes.get(config.mode).takes_lock:
        return contextlib.nullcontext()
    return run_lock.acquire(config.model_dir, config.mode, force=config.break_lock)


def skipped_images_record(source):
    """{'skipped_images': count, summary and {path: problem}} of an image folder
    whose scan or input pipeline skipped files; {} otherwise."""
    skipped = dict(getattr(source, "skipped_files", None) or {})
    if not skipped:
        return {}
    return dict(skipped_images=dict(count=len(skipped), summary=source.skipped_summary(),
                                    files=skipped))


# ------------------------------------------------------------------ set-up checks


def create_strategy(config):
    name = config.strategy
    if name == "auto":
        if config.use_tpu:
            name = "tpu"
        elif len(tf.config.list_logical_devices("GPU")) > 1:
            name = "mirrored"
        else:
            name = "default"
    logging.info("Distribution strategy: %s", name)
    return distribute.create_strategy(name, tpu_name=config.tpu_name,
                                      tpu_zone=config.tpu_zone,
                                      gcp_project=config.gcp_project, master=config.master,
                                      num_devices=config.cpu_replicas or None,
                                      peer_wait_secs=config.peer_wait_secs)


def _create_model_dir(config):
    try:
        tf.io.gfile.makedirs(config.model_dir)
    except (OSError, tf.errors.OpError) as error:
        raise ConfigError("model_dir", f"{config.model_dir!r} cannot be created "
                          f"({error}); choose another directory.") from None
