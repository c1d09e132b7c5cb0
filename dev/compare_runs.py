"""Bit-exactness check for refactorings: the same tiny runs from two checkouts.

`run` trains six tiny deterministic runs on the offline 'digits' dataset with the
checkout this script lives in (pretraining with blur and online eval; device views
with gradient caching; momentum; LARS with the online head at its own rate;
fine-tuning the first on a 50% label subset, then eval; distilling that fine-tune into
a narrower student, where the checkout has --train_mode=distill) and saves every
tensor of their last checkpoints (model and optimizer slots) and their results.
`compare` says whether two such outputs are identical, bit for
bit. A change that only moves code must give identical outputs.

    git worktree add /tmp/before <commit before the change>
    python dev/compare_runs.py run /tmp/runs_before --repo=/tmp/before
    python dev/compare_runs.py run /tmp/runs_after
    python dev/compare_runs.py compare /tmp/runs_before /tmp/runs_after

About 3 minutes per `run` on 2 CPU cores.
"""
import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = dict(dataset="digits", train_split="train[:256]", eval_split="test", image_size=16,
            stem="cifar", resnet_depth=18, width_multiplier=0.125, num_proj_layers=2,
            proj_out_dim=16, train_batch_size=32, eval_batch_size=128,
            color_jitter_strength=0.5, temperature=0.5, learning_rate=0.5,
            weight_decay=1e-4, warmup_epochs=0.1, deterministic=True, train_steps=4,
            checkpoint_steps=2)
RUNS = {
    "pretrain_blur": dict(use_blur=True, mode="train_then_eval"),
    "device_grad_cache": dict(use_blur=True, augment_on="device", grad_cache_chunk=8,
                              mode="train"),
    "momentum": dict(use_blur=True, optimizer="momentum", mode="train"),
    # LARS with the online head at its own rate (the quick start's
    # --head_learning_rate): the rate multipliers' path.
    "head_rate": dict(head_learning_rate=0.1, mode="train"),
}
# Result entries that measure time, not numbers.
_TIMINGS = ("seconds", "examples_per_sec", "saved_model")


def run(out, repo=REPO):
    if os.path.isdir(out) and os.listdir(out):
        # Its runs would resume from the checkpoints there and train nothing: the
        # comparison would be of whatever code wrote them.
        raise SystemExit(f"error: {out!r} is not empty; give a new output folder.")
    sys.path.insert(0, repo)  # this checkout's simclr_tf, not an installed one
    import numpy as np  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
    tf = quiet.import_tensorflow()
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    from simclr_tf.config import Config  # pylint: disable=import-outside-toplevel

    configs = {name: dict(TINY, **extra) for name, extra in RUNS.items()}
    configs["finetune"] = dict(TINY, train_mode="finetune", label_fraction=0.5,
                               checkpoint=os.path.join(out, "pretrain_blur"),
                               fine_tune_after_block=2, mode="train_then_eval")
    from simclr_tf.config import rules  # pylint: disable=import-outside-toplevel
    if "distill" in rules.TRAIN_MODES:  # a checkout from before distillation has none
        # A width-0.0625 student of the fine-tune, with half the labels mixed in.
        configs["distill"] = dict(TINY, train_mode="distill", width_multiplier=0.0625,
                                  teacher=os.path.join(out, "finetune"),
                                  distill_temperature=0.5, distill_alpha=0.5,
                                  label_fraction=0.5, mode="train")
    results, tensors = {}, {}
    for name, values in configs.items():
        model_dir = os.path.join(out, name)
        result = experiment.run(Config.from_dict(dict(values, model_dir=model_dir))
                                .validate())
        results[name] = {k: v for k, v in result.items()
                         if not any(t in k for t in _TIMINGS)}
        reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
        for key in reader.get_variable_to_shape_map():
            if not key.startswith("_CHECKPOINTABLE"):
                tensors[f"{name}/{key}"] = reader.get_tensor(key)
    np.savez(os.path.join(out, "tensors.npz"), **tensors)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True, default=float)
    print(f"{len(tensors)} tensors and the results of {len(results)} runs in {out}")


def compare(a, b):
    import numpy as np  # pylint: disable=import-outside-toplevel
    with np.load(os.path.join(a, "tensors.npz")) as ta, \
            np.load(os.path.join(b, "tensors.npz")) as tb:
        only = sorted(set(ta.files) ^ set(tb.files))
        differ = [k for k in sorted(set(ta.files) & set(tb.files))
                  if not np.array_equal(ta[k], tb[k])]
        count = len(ta.files)
    with open(os.path.join(a, "results.json")) as fa, open(os.path.join(b, "results.json")) as fb:
        # Paths inside the outputs (the fine-tune's initialized_from) name their own
        # output folder: compared relative to it.
        ra = _relative(json.load(fa), a)
        rb = _relative(json.load(fb), b)
    results_differ = [f"{run}/{k}" for run in sorted(set(ra) | set(rb))
                      for k in sorted(set(ra.get(run, {})) | set(rb.get(run, {})))
                      if ra.get(run, {}).get(k) != rb.get(run, {}).get(k)]
    print(f"{count} tensors: {len(differ)} differ, {len(only)} in one output only; "
          f"{len(results_differ)} result entries differ")
    for name in (differ + only + results_differ)[:20]:
        print("  ", name)
    return 0 if not (differ or only or results_differ) else 1


def _relative(value, out):
    """`value` (a results.json, or any part of it) with the output folder's path in
    its strings, at any depth (a distillation's `eval_trained_by` lists the runs its
    weights came from), as `<out>`."""
    if isinstance(value, str):
        return value.replace(os.path.abspath(out), "<out>")
    if isinstance(value, dict):
        return {k: _relative(v, out) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, out) for v in value]
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run")
    one.add_argument("out")
    one.add_argument("--repo", default=REPO, help="the checkout to run (default: this one)")
    both = sub.add_parser("compare")
    both.add_argument("a")
    both.add_argument("b")
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.out, args.repo)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
