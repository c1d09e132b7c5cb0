#!/usr/bin/env python
"""The paper's findings at small scale: Fashion-MNIST ablations, 3 seeds a point.

Each study trains SimCLR (run.py, --train_mode=pretrain) at the accuracy benchmark's
`cpu` budget (scripts/benchmark_accuracy.py: the first 10,000 training images at 16 px,
ResNet-18 x0.25 with the CIFAR stem, batch 256, 10 epochs, LARS 2.0, temperature 0.2,
colour strength 0.5, no blur, a 2-layer head) with one setting changed, and evaluates
the frozen representations on the test split: weighted kNN (k 200, T 0.07, the bank =
the training images) and the paper's linear probe (L-BFGS logistic regression), on h
and on every layer of the projection head (layer 1 ... z), RankMe of each, and the
step's own contrastive accuracy (the mean of its last three logged intervals).

Studies (--study; `all` runs each):
  head         the projection head (Figure 8): none / linear / nonlinear (2 layers)
  head_depth   SimCLR v2's deeper head (v2's Figure 3): pretrain with a 2- or 3-layer
               head, then fine-tune on 1% of the labels (the v2 recipe of
               flags/quickstart_finetune.flags) from h or from the head's first layer
               (--ft_proj_selector=0|1); the metric is the fine-tuned top-1 on the test
               split. Points of one head share their pretraining run
  h_vs_z       the same runs, read as h against z (and the hidden layer): a view of
               `head`'s points (they are trained once)
  temperature  tau 0.05 / 0.1 / 0.5 / 1 with L2-normalised z, 10 / 100 without (Table 5)
  batch        batch 64 / 256 / 1024 after 5 and 20 epochs (Figure 9)
  augment      the views' transformations (Figure 5): none, crop, colour, crop+colour,
               crop+flip+colour (--augmentations), on grey and on tinted Fashion-MNIST
  color        colour strength 1/8 ... 1 (Table 1; its "1 + blur" is `blur`), on both variants,
               beside a supervised encoder (--train_mode=finetune from random weights,
               all labels) trained with and without colour distortion
  blur         strength 1 with and without blur, at 20 px (below it the paper's kernel,
               10% of the side, is one pixel: the identity), on both variants
  loss         NT-Xent against NT-Logistic and margin triplet (Table 2;
               --train_mode=nt_logistic | margin_triplet), at the budget's temperature
               and a margin of 0.5, untuned

Results: --results (JSON lines, one per point: study, setting, seed, the flags, every
metric; default docs/ablations_results.jsonl, in the repository: a run directory is
scratch, but the records are what the page is written from, so they are committed and
outlive the machine). Resumable: a point already in the file (same study, setting, seed, budget) is
skipped, and a point whose training was interrupted resumes its run directory under
--workdir. --jobs trains points side by side (evaluations take turns). It prints
where it is. --doc writes each study's tables between its markers in docs/ablations.md
(`ablations:<study>:begin` / `:end`, prose around them kept) and its plot as
docs/images/ablations_<study>.png; --report_only rewrites them from --results alone.

Examples:
  python scripts/ablations.py --study=head --jobs=2
  python scripts/ablations.py --study=all --jobs=2          # every study, ~10 h on 2 cores
  python scripts/ablations.py --study=head --report_only    # tables and plots again
  python scripts/ablations.py --study=temperature --head_scale --workdir=/work/ablations
                                               # the scale z's norm sets, per run
  python scripts/ablations.py --study=head --settings=nonlinear --smoke --seeds=0 \\
      --workdir=/tmp/smoke --doc=                # the whole path in a minute
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent import futures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import benchmark_accuracy as bench  # noqa: E402  (budgets, features, kNN and probe)

DOC = os.path.join(ROOT, "docs", "ablations.md")
RESULTS = os.path.join(ROOT, "docs", "ablations_results.jsonl")
IMAGES = os.path.join(ROOT, "docs", "images")
# The smoke budget: the whole path in minutes; its numbers mean nothing.
SMOKE = dataclasses.replace(bench.BUDGETS["fast"], train_split="train[:256]",
                            image_size=16, epochs=1, test_split="test[:256]")


@dataclasses.dataclass(frozen=True)
class Point:
    """One setting of a study: run.py flags over the budget's, and the label shown;
    with `finetune`, a second stage: run.py fine-tunes the pretraining on few labels
    (FINETUNE, these flags over it) and the point's metric is that run's top-1."""
    study: str
    setting: str
    flags: tuple = ()
    finetune: tuple = ()

    @property
    def slug(self):
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in
                       f"{self.study}_{self.setting}")


def _points(study, settings):
    return [Point(study, label, tuple(sorted(flags.items()))) for label, flags in settings]


# SimCLR v2's fine-tuning (flags/quickstart_finetune.flags: from a pretraining run, a
# fresh zero-initialised classifier, LARS at 0.005 sqrt-scaled, no weight decay, no
# warmup, the whole network trained) on 1% of the budget's training images (100, a
# seeded class-balanced subset), 60 epochs as v2 fine-tunes on 1%, evaluated on the
# test split.
FINETUNE = dict(train_mode="finetune", label_fraction=0.01, zero_init_logits_layer=True,
                fine_tune_after_block=-1, optimizer="lars", learning_rate=0.005,
                learning_rate_scaling="sqrt", weight_decay=0.0, warmup_epochs=0,
                train_epochs=60, train_batch_size=64, mode="train_then_eval",
                eval_batch_size=512, progress="lines", export_format="none")


HEAD = [("none", dict(proj_head_mode="none")),
        ("linear", dict(proj_head_mode="linear", num_proj_layers=1)),
        ("nonlinear", dict(proj_head_mode="nonlinear", num_proj_layers=2))]
STUDIES = {
    "head": _points("head", HEAD),
    "h_vs_z": _points("head", HEAD),  # the head study's runs, read as h against z
    # Table 5's rows: L2-normalised z at tau 0.05 ... 1, unnormalised z at tau 10 and
    # 100 (without normalisation the logits are |z|^2 / tau, |z|^2 ~ 128 after the
    # head's last batch norm: the paper's small temperatures overflow at once).
    "temperature": _points("temperature", [
        (f"tau {tau:g}, {'l2' if norm else 'no norm'}", dict(temperature=tau, hidden_norm=norm))
        for norm, taus in ((True, (0.05, 0.1, 0.5, 1.0)), (False, (10.0, 100.0)))
        for tau in taus]),
    "batch": _points("batch", [
        (f"batch {batch}, {epochs} epochs", dict(train_batch_size=batch, train_epochs=epochs))
        for epochs in (5, 20) for batch in (64, 256, 1024)]),
}
# The augmentation and colour studies run on both variants of Fashion-MNIST: grey (as
# it is: no colour shortcut) and tinted (one random colour per image: two crops of an
# image share a colour histogram, the shortcut colour distortion removes).
VARIANTS = (("grey", "fashion_mnist"), ("tinted", "fashion_mnist_tinted"))
STUDIES["augment"] = _points("augment", [
    (f"{variant}: {label}", dict(dataset=dataset, augmentations=augmentations))
    for variant, dataset in VARIANTS
    for label, augmentations in (("none", "none"), ("crop", "crop"), ("colour", "color"),
                                 ("crop+colour", "crop,color"),
                                 ("crop+flip+colour", "crop,flip,color"))])
STUDIES["color"] = _points("color", [
    (f"{variant}: {label}", dict(dataset=dataset, color_jitter_strength=strength,
                                 use_blur=blur))
    for variant, dataset in VARIANTS
    # Table 1's "1 + blur" is the blur study's (at 16 px blur is the identity).
    for label, strength, blur in (("1/8", 0.125, False), ("1/4", 0.25, False),
                                  ("1/2", 0.5, False), ("1", 1.0, False))] + [
    (f"{variant}: supervised, {label}", dict(
        dataset=dataset, train_mode="finetune", augmentations=augmentations,
        color_jitter_strength=1.0))
    for variant, dataset in VARIANTS
    for label, augmentations in (("crop+flip", "crop,flip"),
                                 ("crop+flip+colour 1", "crop,flip,color"))])
# Blur (Table 1's "1 + blur") needs a kernel wider than a pixel: the paper's side of 10%
# of the image, forced odd (augment.blur.blur_kernel_size), is the identity below 20 px
# and 3 pixels from 20 to 39 px. So these points train and are evaluated at 20 px, the
# smallest size where blur does anything, strength 1 with and without it.
BLUR_IMAGE_SIZE = 20
STUDIES["blur"] = _points("blur", [
    (f"{variant}: 1{label}, {BLUR_IMAGE_SIZE} px", dict(
        dataset=dataset, color_jitter_strength=1.0, use_blur=blur,
        image_size=BLUR_IMAGE_SIZE))
    for variant, dataset in VARIANTS
    for label, blur in (("", False), (" + blur", True))])
STUDIES["head_depth"] = [
    Point("head_depth", f"{layers} layers, fine-tuned from {start}",
          (("num_proj_layers", layers),), (("ft_proj_selector", selector),))
    for layers in (2, 3) for start, selector in (("h", 0), ("layer 1", 1))]
STUDIES["loss"] = _points("loss", [
    ("NT-Xent", dict(train_mode="pretrain")),
    ("NT-Logistic", dict(train_mode="nt_logistic")),
    ("margin triplet", dict(train_mode="margin_triplet", triplet_margin=0.5))])
# `--study=all` runs them in this order: the cheapest and most telling first.
STUDIES = {name: STUDIES[name] for name in (
    "head", "h_vs_z", "loss", "temperature", "augment", "color", "blur", "batch",
    "head_depth")}
# What each study's page and picture show: the representations and metrics compared.
VIEWS = {
    "head": ("h", ("knn", "probe")),
    "h_vs_z": ("layers", ("probe",)),
    "temperature": ("h", ("knn", "probe", "contrast_acc")),
    "batch": ("h", ("knn", "probe")),
    "augment": ("h", ("knn", "probe")),
    "color": ("h", ("knn", "probe")),
    "blur": ("h", ("knn", "probe")),
    "loss": ("h", ("knn", "probe", "contrast_acc")),
    "head_depth": ("h", ("finetune_top1", "probe")),
}
# The metrics of the run rather than of the frozen h (a row's own fields).
RUN_METRICS = ("contrast_acc", "contrast_loss", "finetune_top1", "wall_seconds")


def run_py_flags(budget, point, seed, model_dir, data_dir):
    """run.py's flags for `point`: the benchmark's pretraining over `budget`, then the
    point's own (a setting overrides the budget's value)."""
    flags = dict(
        dataset="fashion_mnist", train_split=budget.train_split, eval_split="",
        mode="train", train_mode="pretrain", seed=seed, model_dir=model_dir,
        image_size=budget.image_size, stem="cifar", resnet_depth=budget.resnet_depth,
        width_multiplier=budget.width_multiplier, train_batch_size=budget.batch_size,
        train_epochs=budget.epochs, warmup_epochs=budget.warmup_epochs,
        learning_rate=budget.learning_rate, learning_rate_scaling="linear",
        weight_decay=budget.weight_decay, temperature=budget.temperature,
        color_jitter_strength=budget.color_jitter_strength, use_blur=False,
        num_proj_layers=budget.num_proj_layers, optimizer="lars",
        lineareval_while_pretraining=False, progress="lines")
    flags.update(dict(point.flags))
    if flags["train_mode"] == "finetune":  # the supervised column: labels, one view
        del flags["lineareval_while_pretraining"]
    flags["checkpoint_epochs"] = flags["train_epochs"]  # one checkpoint, at the end
    if data_dir:
        flags["data_dir"] = data_dir
    return flags


def finetune_flags(budget, point, seed, model_dir, pretrained, data_dir):
    """run.py's flags for `point`'s second stage: FINETUNE from the run in
    `pretrained` (whose flags.json gives the model and the data), the point's own over
    it; the test split evaluated."""
    flags = dict(FINETUNE, checkpoint=pretrained, model_dir=model_dir, seed=seed,
                 eval_split=budget.test_split)
    flags.update(dict(point.finetune))
    flags["checkpoint_epochs"] = flags["train_epochs"]
    if data_dir:
        flags["data_dir"] = data_dir
    return flags


def command(flags):
    args = []
    for name, value in flags.items():
        if isinstance(value, bool):
            args.append(f"--{name}" if value else f"--no{name}")
        else:
            args.append(f"--{name}={value}")
    return [sys.executable, os.path.join(ROOT, "run.py"), *args]


def point_key(point, seed, budget):
    """What makes a point's result reusable: its study, setting, seed and the whole
    flag set (the budget included), hashed."""
    flags = run_py_flags(budget, point, seed, "", None)
    if point.finetune:
        flags["then"] = finetune_flags(budget, point, seed, "", "", None)
    digest = hashlib.sha256(json.dumps(flags, sort_keys=True).encode()).hexdigest()[:16]
    return dict(study=point.study, setting=point.setting, seed=seed, flags_hash=digest)


def read_results(path):
    """The recorded points (a torn last line, from a kill mid-write, is dropped)."""
    if not path or not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _recorded(rows, key):
    return next((r for r in rows if all(r.get(k) == v for k, v in key.items())), None)


def layer_features(model, images, batch=512):
    """{'h': ..., 'layer_1': ..., 'z': ...} of `images` in inference mode: h and every
    layer of the projection head (`ProjectionHead.hiddens`; 'none' has h = z)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from simclr_tf.models.outputs import H  # pylint: disable=import-outside-toplevel
    parts = {}
    for start in range(0, len(images), batch):
        chunk = tf.constant(images[start:start + batch])
        h = model.encoder(chunk, training=False)[H]
        hiddens = model.projection_head.hiddens(h, training=False)
        names = ["h"] + [f"layer_{j}" for j in range(1, len(hiddens) - 1)] + (
            ["z"] if len(hiddens) > 1 else [])
        for name, value in zip(names, hiddens):
            parts.setdefault(name, []).append(np.asarray(value, np.float32))
    return {name: np.concatenate(values) for name, values in parts.items()}


def pretraining_dir(workdir, point, seed):
    """The run directory of `point`'s pretraining (seed `seed`) under `workdir`.
    Points with a second stage share their pretraining when their pretraining flags
    agree (the head_depth study's two fine-tunes of one head)."""
    name = point.slug if not point.finetune else f"{point.study}_pretrain_" + (
        hashlib.sha256(json.dumps(point.flags).encode()).hexdigest()[:8])
    return os.path.join(workdir, f"{name}_seed{seed}", "run")


def head_scale(model):
    """The sum of gamma^2 of the projection head's last batch norm: in training, its
    output z has, over the batch, mean |z|^2 = that sum (zero mean, no beta; unit
    variance times gamma^2 per dimension, up to BN's epsilon). Without L2
    normalisation NT-Xent's logits are z_i . z_k / tau, so sum / tau is the logit of
    two equal views on average: the scale that a temperature sets, here set by the
    network's own gamma."""
    gamma = np.asarray(model.projection_head.head_layers[-1].bn.bn.gamma.numpy(), np.float64)
    return float(np.sum(gamma ** 2))


def print_head_scales(args):
    """--head_scale: each point's run under --workdir, read (no training); 1 when
    there is none."""
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    found = 0
    print("| setting | seed | sum of gamma^2 (mean |z|^2 in training) | / tau (unnormalised "
          "z: the logit of two equal views) |\n|---|---|---|---|")
    for study in args.studies:
        for point in STUDIES[study]:
            for seed in args.seeds:
                run_dir = pretraining_dir(args.workdir, point, seed)
                if not os.path.exists(os.path.join(run_dir, "flags.json")):
                    continue
                with open(os.path.join(run_dir, "flags.json")) as f:
                    flags = json.load(f)
                model, _, _ = checkpoints.open_encoder(run_dir)
                if not model.projection_head.head_layers:  # proj_head_mode=none
                    continue
                scale = head_scale(model)
                # L2-normalised z: the logits do not see its norm.
                over_tau = ("-" if flags["hidden_norm"]
                            else f"{scale / flags['temperature']:.2f}")
                print(f"| {point.setting} | {seed} | {scale:.1f} | {over_tau} |", flush=True)
                found += 1
    if not found:
        print(f"ablations.py: error: no finished run of --study={args.study} with a "
              f"projection head under --workdir={args.workdir} (a point's run is "
              "<workdir>/<study>_<setting>_seed<seed>/run): pass the --workdir the "
              "points were trained in", file=sys.stderr)
        return 1
    return 0


def contrast_metrics(model_dir):
    """The step's contrastive accuracy and loss: means of the last three logged
    intervals of metrics.jsonl."""
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    lines = [line for line in records.read_metrics(os.path.join(model_dir, "metrics.jsonl"))
             if "train/contrast_acc" in line][-3:]
    if not lines:  # a supervised point has no contrastive task
        return dict(contrast_acc=None, contrast_loss=None)
    return dict(contrast_acc=float(np.mean([l["train/contrast_acc"] for l in lines])),
                contrast_loss=float(np.mean([l["train/contrast_loss"] for l in lines])))


class Runner:
    """Trains and evaluates points; appends each finished one to --results."""

    def __init__(self, args, budget):
        self.args, self.budget = args, budget
        self.rows = read_results(args.results)
        self.lock = threading.Lock()  # one evaluation (and one write) at a time
        self.dir_locks = {}  # run directory -> the lock of the job training it
        self.feats = {}  # image size -> bench.Features

    def _features(self, budget):
        if budget.image_size not in self.feats:
            self.feats[budget.image_size] = bench.Features(budget, self.args.data_dir)
        return self.feats[budget.image_size]

    def run(self, point, seed):
        key = point_key(point, seed, self.budget)
        with self.lock:
            if _recorded(self.rows, key):
                return "recorded"
        label = f"{point.study} / {point.setting} / seed {seed}"
        run_dir = pretraining_dir(self.args.workdir, point, seed)
        # No export at the end (~5 s a point): points are read from their checkpoints.
        # Not in the key: it changes no number.
        flags = dict(run_py_flags(self.budget, point, seed, run_dir, self.args.data_dir),
                     export_format="none")
        with self.lock:
            shared = self.dir_locks.setdefault(run_dir, threading.Lock())
        with shared:
            wall = self._train(run_dir, flags, label, reuse=bool(point.finetune))
        extra = {}
        if point.finetune:
            tuned = os.path.join(self.args.workdir, f"{point.slug}_seed{seed}", "finetune")
            ft_wall = self._train(tuned, finetune_flags(
                self.budget, point, seed, tuned, run_dir, self.args.data_dir),
                f"{label}: fine-tuning")
            with open(os.path.join(tuned, "result.json")) as f:
                result = json.load(f)
            extra = dict(finetune_top1=result["eval/label_top_1_accuracy"],
                         finetune_seconds=ft_wall, finetune_flags=dict(point.finetune))
        # A point may train at another image size (the blur study): it is evaluated,
        # and recorded, at its own.
        budget = dataclasses.replace(self.budget, image_size=flags["image_size"])
        with self.lock:
            row = dict(key, setting_flags=dict(point.flags), budget=dataclasses.asdict(
                budget), wall_seconds=wall, machine=bench.machine(), **extra,
                **contrast_metrics(run_dir), metrics=self._evaluate(run_dir, seed, budget))
            with open(self.args.results, "a") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")
            self.rows.append(row)
        probe_h = row["metrics"]["h"]["probe"]
        contrast = row["contrast_acc"]
        say(f"{label}: h probe {probe_h:.4f} kNN {row['metrics']['h']['knn']:.4f}"
            + (f", contrast acc {contrast:.3f}" if contrast is not None else "")
            + (f", fine-tuned top-1 {extra['finetune_top1']:.4f}" if extra else "")
            + f" ({wall:.0f} s)")
        return "done"

    def _train(self, run_dir, flags, label, reuse=False):
        """run.py with `flags` (its output in log.txt beside run_dir); its wall time.
        With `reuse`, a run this script finished before is not started again: its
        recorded wall time is returned."""
        os.makedirs(os.path.dirname(run_dir), exist_ok=True)
        timing = os.path.join(os.path.dirname(run_dir), f"{os.path.basename(run_dir)}.json")
        if reuse and os.path.exists(timing):
            with open(timing) as f:
                return json.load(f)["wall_seconds"]
        log = os.path.join(os.path.dirname(run_dir), "log.txt")
        say(f"{label}: training ({log})")
        started = time.time()
        with open(log, "a") as f:
            done = subprocess.run(command(flags), cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                  env=bench.thread_env(self.args.threads), check=False)
        if done.returncode != 0:
            tail = open(log).read()[-1500:]
            raise RuntimeError(f"{label}: run.py exited {done.returncode}; the end of "
                               f"{log}:\n{tail}")
        wall = time.time() - started
        with open(timing, "w") as f:
            json.dump(dict(wall_seconds=wall), f)
        return wall

    def _evaluate(self, run_dir, seed, budget):
        from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
        feats = self._features(budget)
        bank_y, bank_images = feats.labels_and_images(budget.train_split)
        test_y, test_images = feats.labels_and_images(budget.test_split)
        model, _, _ = checkpoints.open_encoder(run_dir)
        bank, test = layer_features(model, bank_images), layer_features(model, test_images)
        return {name: bench.evaluate(bank[name], test[name], bank_y, test_y, seed)
                for name in bank}


def say(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ---------------------------------------------------------------- the page


def summary(rows, study):
    """{setting: {(layer, metric): [per-seed values]}} of a study's recorded points, in
    the study's order of settings."""
    points = STUDIES[study]
    table = {}
    for point in points:
        for row in rows:
            if row["study"] == point.study and row["setting"] == point.setting:
                cell = table.setdefault(point.setting, {})
                for layer, metrics in row["metrics"].items():
                    for metric, value in metrics.items():
                        cell.setdefault((layer, metric), []).append(value)
                for metric in RUN_METRICS:
                    if row.get(metric) is not None:
                        cell.setdefault(("step", metric), []).append(row[metric])
                cell.setdefault(("seeds", "n"), []).append(row["seed"])
    return table


def study_table(rows, study):
    table = summary(rows, study)
    if not table:
        return "No point of this study is recorded yet."
    view, metrics = VIEWS[study]
    if view == "layers":
        layers = ["h", "layer_1", "z"]
        head = "| head | " + " | ".join(f"{m} on {layer} (%)" for layer in layers
                                         for m in metrics) + " | seeds |"
        lines = [head, "|---|" + "---|" * (len(layers) * len(metrics) + 1)]
        for setting, cell in table.items():
            values = [bench.format_spread(cell[(layer, m)]) if (layer, m) in cell else "-"
                      for layer in layers for m in metrics]
            lines.append(f"| {setting} | " + " | ".join(values)
                         + f" | {len(cell[('seeds', 'n')])} |")
        return "\n".join(lines)
    names = {"knn": "kNN on h (%)", "probe": "linear probe on h (%)",
             "contrast_acc": "contrastive accuracy (%)",
             "finetune_top1": "fine-tuned top-1, 1% of the labels (%)"}
    lines = ["| setting | " + " | ".join(names[m] for m in metrics)
             + " | RankMe of h | train s | seeds |",
             "|---|" + "---|" * (len(metrics) + 3)]
    for setting, cell in table.items():
        values = [bench.format_spread(cell[("step" if m in RUN_METRICS else "h", m)])
                  for m in metrics]
        lines.append(f"| {setting} | " + " | ".join(values)
                     + f" | {bench.format_spread(cell[('h', 'rankme')], 1, 1)} "
                     f"| {bench.format_spread(cell[('step', 'wall_seconds')], 1, 0)} "
                     f"| {len(cell[('seeds', 'n')])} |")
    return "\n".join(lines)


def plot(rows, study, path):
    table = summary(rows, study)
    if not table:
        return None
    view, metrics = VIEWS[study]
    series = ([(f"{m} on {layer}", layer, m) for layer in ("h", "layer_1", "z")
               for m in metrics] if view == "layers" else
              [(m, "step" if m in RUN_METRICS else "h", m) for m in metrics])
    cells = [(label, [cell.get((layer, metric)) for cell in table.values()])
             for label, layer, metric in series]
    # The axis starts 10 points below the lowest mean (at a multiple of 10): the
    # studies' differences are a few points, invisible on an axis from 0.
    means = [100 * bench.mean_std(c)[0] for _, column in cells for c in column if c]
    ymin = max(0, 10 * int((min(means) - 10) // 10)) if means else 0
    return bench.bar_chart(
        path, f"{study}: Fashion-MNIST, budget cpu"
        + (f" (the axis starts at {ymin}%)" if ymin else ""), list(table), cells,
        ylabel="%, mean ± sd over seeds", legend_loc="outside", dpi=90,
        value_labels=True, ymin=ymin)


def write_doc(rows, studies, doc, images):
    text = open(doc).read() if os.path.exists(doc) else "# Ablations\n"
    for study in studies:
        begin, end = f"<!-- ablations:{study}:begin -->", f"<!-- ablations:{study}:end -->"
        if begin in text and not summary(rows, study):
            # A table measured from records this file does not hold (another machine's,
            # an older results file) stays as it is: no record, no rewrite.
            say(f"{study}: no point recorded in these results; its section kept")
            continue
        machines = sorted({r["machine"] for r in rows if r["study"] == STUDIES[study][0].study})
        section = (study_table(rows, study) + "\n\nMean ± sample std over seeds; measured on "
                   + ("; ".join(machines) or "-") + " (train s: run.py's wall time, "
                   "with other jobs on the machine: an upper bound).")
        picture = plot(rows, study, os.path.join(images, f"ablations_{study}.png"))
        if picture:
            section += (f"\n\n![{study}: mean ± sd over seeds]"
                        f"(images/{os.path.basename(picture)})")
        if begin in text:
            head, rest = text.split(begin, 1)
            text = head + begin + "\n" + section + "\n" + end + rest.split(end, 1)[1]
        else:
            text = text.rstrip("\n") + f"\n\n## {study}\n\n{begin}\n{section}\n{end}\n"
    with open(doc, "w") as f:
        f.write(text)
    say(f"wrote {doc}")


# ---------------------------------------------------------------- command line


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="ablations.py", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--study", required=True,
                        help=f"one of {', '.join(STUDIES)}, or all")
    parser.add_argument("--settings", default="",
                        help="only these settings of the study (labels as the tables show "
                        "them, separated by ';': a label may hold a comma; default all)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--results", default=None,
                        help="JSON lines, one per point (default: docs/ablations_results."
                        "jsonl, committed; with --smoke, <workdir>/results.jsonl)")
    parser.add_argument("--workdir", default="/tmp/simclr_ablations")
    parser.add_argument("--jobs", type=int, default=1, help="points trained side by side")
    parser.add_argument("--threads", type=int, default=None,
                        help="compute threads per run (default: cores / jobs)")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="a few steps per point on 256 images: the path, not numbers")
    parser.add_argument("--doc", default=DOC, help="the page ('' = none)")
    parser.add_argument("--images", default=IMAGES)
    parser.add_argument("--head_scale", action="store_true",
                        help="print, for each point's run under --workdir, the sum of "
                        "gamma^2 of the head's last batch norm (mean |z|^2 in training) "
                        "and it over tau; train nothing")
    parser.add_argument("--report_only", action="store_true",
                        help="write the page from --results, train nothing")
    args = parser.parse_args(argv)
    if args.study != "all" and args.study not in STUDIES:
        parser.error(f"--study: expected one of {', '.join(STUDIES)} or all, "
                     f"got {args.study!r}")
    args.studies = list(STUDIES) if args.study == "all" else [args.study]
    args.settings = [name.strip() for name in args.settings.split(";") if name.strip()]
    known = {point.setting for study in args.studies for point in STUDIES[study]}
    unknown = [name for name in args.settings if name not in known]
    if unknown:
        parser.error(f"--settings: {', '.join(map(repr, unknown))} not in "
                     f"--study={args.study}: {'; '.join(sorted(known))} (labels are "
                     "separated by ';')")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    if not args.seeds:
        parser.error("--seeds: give at least one seed")
    if args.jobs < 1:
        parser.error(f"--jobs: expected >= 1, got {args.jobs}")
    args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    args.results = args.results or (os.path.join(args.workdir, "results.jsonl")
                                    if args.smoke else RESULTS)
    if args.smoke and os.path.abspath(args.results) == RESULTS:
        parser.error(f"--smoke records nothing in {RESULTS}: its numbers mean nothing; "
                     "pass another --results")
    if os.path.isdir(args.results):
        parser.error(f"--results: {args.results} is a directory; name a file")
    if args.smoke and args.doc == DOC:
        parser.error("--smoke writes no page: its numbers mean nothing; pass --doc=''")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.head_scale:  # reads runs: creates nothing
        return print_head_scales(args)
    budget = SMOKE if args.smoke else bench.BUDGETS["cpu"]
    os.makedirs(args.workdir, exist_ok=True)
    if os.path.dirname(args.results):
        os.makedirs(os.path.dirname(args.results), exist_ok=True)
    failed = []
    if not args.report_only:
        from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
        quiet.import_tensorflow()
        runner = Runner(args, budget)
        # A study's points (seed 0's settings, then seed 1's, ...) before the next
        # study's: each study's table is complete as early as it can be.
        todo, seen = [], set()
        for study in args.studies:
            for seed in args.seeds:
                for point in STUDIES[study]:
                    if args.settings and point.setting not in args.settings:
                        continue
                    if (point, seed) not in seen:
                        seen.add((point, seed))
                        todo.append((point, seed))
        recorded = sum(_recorded(runner.rows, point_key(p, s, budget)) is not None
                       for p, s in todo)
        say(f"{len(todo)} points ({recorded} recorded) in {args.results}; "
            f"{args.jobs} job(s), {args.threads} thread(s) each")
        with futures.ThreadPoolExecutor(args.jobs) as pool:
            running = {pool.submit(runner.run, p, s): (p, s) for p, s in todo}
            for finished, job in enumerate(futures.as_completed(running), 1):
                point, seed = running[job]
                try:
                    job.result()
                except RuntimeError as error:
                    failed.append((point, seed))
                    say(f"FAILED {error}")
                say(f"{finished}/{len(todo)} points finished")
    rows = read_results(args.results)
    for study in args.studies:
        print(f"\n{study}:\n{study_table(rows, study)}")
    if args.doc:
        write_doc(rows, args.studies, args.doc, args.images)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
