#!/usr/bin/env python
"""Whole-step parity with the authors' code: every case of docs/fidelity.md's table.

    python dev/whole_step_parity.py --authors_python=/tmp/authors-venv/bin/python \\
        --authors_dir=simclr/tf2 --workdir=/tmp/parity \\
        [--reference=../shared/reference/official_r50_1x_sk0] [--cases=name,...]

Not a test, and not run by CI: it needs the authors' tf2/ folder and their
environment (dev/authors_one_step.py says how to make it). Per case it makes the
model with the authors' code (`authors_one_step.py --make_checkpoint`, once; the R50
1x without selective kernels is --reference where given), draws seeded views, and
runs one step on both sides: `scripts/one_step.py` (ours) and `authors_one_step.py`
(theirs), in float32 and in float64, and theirs once more with oneDNN off, the noise
floor of float32 summation order. It prints, per case, the largest difference of the
update (after minus before) over all variables, as max|ours - theirs| / max|theirs|
and as ||ours - theirs|| / ||theirs||, the largest relative difference of the losses,
and the same for the authors' code against itself (oneDNN off against on).
Exits 1 when a float64 difference exceeds --float64_tolerance (1e-5): float64 leaves
no summation-order noise, so a difference there is in what the steps compute.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "scripts"))
import one_step  # noqa: E402  (scripts/one_step.py: the comparison)

HERE = os.path.dirname(os.path.abspath(__file__))
# Models made with the authors' code: their architecture flags.
MODELS = {
    "r50_sk0": ["--resnet_depth=50", "--num_proj_layers=3", "--num_classes=1000"],
    "r50_sk1": ["--resnet_depth=50", "--sk_ratio=0.0625", "--num_proj_layers=3",
                "--num_classes=1000"],
    "r18_se": ["--resnet_depth=18", "--se_ratio=0.25", "--num_proj_layers=2",
               "--num_classes=10"],
}
SIZES = {"r50_sk0": 64, "r50_sk1": 64, "r18_se": 32}
COMMON = ["--train_batch_size=8", "--warmup_epochs=0", "--train_steps=10",
          "--weight_decay=1e-4"]
# name: (model, train_mode, the step's flags)
CASES = {
    "r50_sk0_pretrain": ("r50_sk0", "pretrain", []),
    "r50_sk1_pretrain": ("r50_sk1", "pretrain", []),
    "r18_se_cifar_pretrain": ("r18_se", "pretrain", []),
    "r18_se_pretrain_no_online_head": ("r18_se", "pretrain",
                                       ["--nolineareval_while_pretraining"]),
    "r18_se_pretrain_sqrt_t0.5_no_norm": ("r18_se", "pretrain", [
        "--learning_rate_scaling=sqrt", "--learning_rate=0.05", "--temperature=0.5",
        "--nohidden_norm"]),
    "r18_se_pretrain_momentum": ("r18_se", "pretrain", ["--optimizer=momentum"]),
    "r18_se_pretrain_in_warmup": ("r18_se", "pretrain", ["--warmup_epochs=10"]),
    "r18_se_finetune_all_sel0": ("r18_se", "finetune", [
        "--fine_tune_after_block=-1", "--ft_proj_selector=0", "--learning_rate=0.1"]),
    "r18_se_finetune_all_sel1": ("r18_se", "finetune", [
        "--fine_tune_after_block=-1", "--ft_proj_selector=1", "--learning_rate=0.1"]),
    "r18_se_finetune_head_sel0": ("r18_se", "finetune", [
        "--fine_tune_after_block=4", "--ft_proj_selector=0", "--learning_rate=0.1"]),
    "r18_se_finetune_head_sel1": ("r18_se", "finetune", [
        "--fine_tune_after_block=4", "--ft_proj_selector=1", "--learning_rate=0.1"]),
    "r18_se_finetune_after2_sel1": ("r18_se", "finetune", [
        "--fine_tune_after_block=2", "--ft_proj_selector=1", "--learning_rate=0.1"]),
    "r50_sk0_finetune_head_sel1": ("r50_sk0", "finetune", [
        "--fine_tune_after_block=4", "--ft_proj_selector=1", "--learning_rate=0.1"]),
}


def run(command, env=None):
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode:
        raise SystemExit(f"failed ({result.returncode}): {' '.join(command)}\n"
                         f"{result.stderr[-3000:]}")
    return result.stdout


def views(path, train_mode, size, num_classes, seed):
    if not os.path.exists(path):
        rng = np.random.default_rng(seed)
        channels = 6 if train_mode == "pretrain" else 3
        np.savez(path, images=rng.uniform(size=(8, size, size, channels)).astype(np.float32),
                 labels=rng.integers(0, num_classes, 8).astype(np.int64))
    return path


def differences(ours_path, theirs_path, checkpoint):
    """(max-relative, norm-relative, loss) worst over the variables and losses; exits
    naming it where an output lacks a name the other holds or holds a NaN or Inf."""
    ours, theirs = dict(np.load(ours_path)), dict(np.load(theirs_path))
    found = one_step.faults(ours, theirs)
    if found:
        raise SystemExit(f"{ours_path} against {theirs_path}: " + "; ".join(found))
    updates, losses = one_step.update_differences(
        ours, theirs, one_step.initial_values(checkpoint, theirs))
    # np.max: a NaN (a checkpoint's) is the maximum, where max() may pass over it.
    return (float(np.max([largest for largest, _ in updates.values()])),
            float(np.max([norm for _, norm in updates.values()])),
            float(np.max([losses[name] for name in one_step.LOSSES])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors_python", required=True)
    parser.add_argument("--authors_dir", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--reference", default=None)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--float64_tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    unknown = sorted(set(args.cases.split(",")) - set(CASES))
    if unknown:
        parser.error(f"--cases: unknown {unknown}; the cases are {sorted(CASES)}")
    os.makedirs(args.workdir, exist_ok=True)
    authors = [args.authors_python, os.path.join(HERE, "authors_one_step.py"),
               f"--authors_dir={args.authors_dir}"]
    ours = [sys.executable, os.path.join(HERE, "one_step.py")]
    rows, failed = [], False
    for seed, name in enumerate(args.cases.split(",")):
        model, mode, step_flags = CASES[name]
        checkpoint = os.path.join(args.workdir, model)
        if model == "r50_sk0" and args.reference:
            checkpoint = args.reference
        elif not os.path.exists(checkpoint):
            run(authors + [f"--make_checkpoint={checkpoint}",
                           f"--image_size={SIZES[model]}"] + MODELS[model])
        classes = int(MODELS[model][-1].split("=")[1])
        inputs = views(os.path.join(args.workdir, f"{name}_views.npz"), mode, SIZES[model],
                       classes, seed)
        flags = [f"--checkpoint={checkpoint}", f"--views={inputs}",
                 f"--train_mode={mode}"] + COMMON + step_flags
        out = {}
        for precision in ("float32", "float64"):
            extra = ["--float64"] if precision == "float64" else []
            for side, command in (("ours", ours), ("theirs", authors)):
                path = os.path.join(args.workdir, f"{name}_{side}_{precision}.npz")
                architecture = MODELS[model] if side == "theirs" else []
                run(command + flags + extra + architecture[:-1] + [f"--out={path}"])
                out[side, precision] = path
        noise = os.path.join(args.workdir, f"{name}_theirs_float32_no_onednn.npz")
        run(authors + flags + MODELS[model][:-1] + [f"--out={noise}"],
            env=dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0"))
        f32 = differences(out["ours", "float32"], out["theirs", "float32"], checkpoint)
        f64 = differences(out["ours", "float64"], out["theirs", "float64"], checkpoint)
        floor = differences(noise, out["theirs", "float32"], checkpoint)
        failed |= not all(value <= args.float64_tolerance for value in f64)  # NaN fails
        rows.append((name, f32, f64, floor))
        print(f"{name}: float32 {f32[0]:.1e} / {f32[1]:.1e} / {f32[2]:.1e}; float64 "
              f"{f64[0]:.1e} / {f64[1]:.1e} / {f64[2]:.1e}; theirs vs theirs "
              f"{floor[0]:.1e} / {floor[1]:.1e} / {floor[2]:.1e}", flush=True)
    print("\n| case | float32: update max / norm, loss | float64: update max / norm, loss "
          "| theirs vs theirs (float32, oneDNN off): update max / norm, loss |")
    print("|---|---|---|---|")
    for name, f32, f64, floor in rows:
        cells = [" / ".join(f"{x:.1e}" for x in values[:2]) + f", {values[2]:.1e}"
                 for values in (f32, f64, floor)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
