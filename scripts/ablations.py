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
  python scripts/ablations.py --study=temperature --head_scale --workdir=/tmp/simclr_ablations
                                               # the scale z's norm sets, per run
  python scripts/ablations.py --study=head --settings=nonlinear --smoke --seeds=0 \\
      --workdir=/tmp/smoke                       # the whole path in a minute; no page
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
from simclr_tf.run.machine import cpu_kind  # noqa: E402  (TF-free)
import script_io  # noqa: E402  (whole files; children that stop with the script)

DOC = os.path.join(ROOT, "docs", "ablations.md")
RESULTS = os.path.join(ROOT, "docs", "ablations_results.jsonl")
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


# What each study's figure and table are called, in words.
TITLES = {
    "head": "Projection head (the paper's Figure 8)",
    "h_vs_z": "h against z (the paper's Figure 8)",
    "temperature": "Temperature and normalisation (the paper's Table 5)",
    "batch": "Batch size and training length (the paper's Figure 9)",
    "augment": "Augmentations (the paper's Figure 5)",
    "color": "Colour strength (the paper's Table 1)",
    "blur": "Blur (the paper's Table 1)",
    "loss": "Loss (the paper's Table 2)",
    "head_depth": "A deeper head for fine-tuning (SimCLR v2's Figure 3)",
}
METRIC_WORDS = {"knn": "kNN top-1 on h", "probe": "linear probe on h",
                "contrast_acc": "contrastive accuracy in training",
                "finetune_top1": "fine-tuned top-1, 1% of the labels"}
SHORT_WORDS = {"knn": "kNN", "probe": "probe", "contrast_acc": "contrastive accuracy",
               "finetune_top1": "fine-tuned top-1"}
LAYER_WORDS = {"h": "h (the head's input)", "layer_1": "the head's first layer",
               "z": "z (the head's output)"}


@dataclasses.dataclass(frozen=True)
class Claim:
    """A direction the paper found: `better` beats `worse` (each a setting, or a
    (setting, layer) pair) on each of `metrics`."""
    text: str
    better: object
    worse: object
    metrics: tuple = ("knn", "probe")


# The paper's directions, each checked against the records by `VERDICT_RULE`.
CLAIMS = {
    "head": [Claim("a nonlinear head beats a linear one", "nonlinear", "linear"),
             Claim("a linear head beats no head", "linear", "none")],
    "h_vs_z": [Claim("h beats z, nonlinear head", ("nonlinear", "h"), ("nonlinear", "z"),
                     ("probe",)),
               Claim("h beats z, linear head", ("linear", "h"), ("linear", "z"), ("probe",))],
    "head_depth": [
        Claim("3 layers, fine-tuned from layer 1, beat 2 layers from h",
              "3 layers, fine-tuned from layer 1", "2 layers, fine-tuned from h",
              ("finetune_top1",)),
        Claim("fine-tuning from layer 1 beats from h (3 layers)",
              "3 layers, fine-tuned from layer 1", "3 layers, fine-tuned from h",
              ("finetune_top1",))],
    "temperature": [
        Claim("tau 0.1 beats tau 1 (L2-normalised)", "tau 0.1, l2", "tau 1, l2"),
        Claim("tau 0.1 beats tau 0.05 (L2-normalised)", "tau 0.1, l2", "tau 0.05, l2"),
        Claim("L2 normalisation beats none (tau 0.1 against 10)", "tau 0.1, l2",
              "tau 10, no norm"),
        Claim("without normalisation the proxy task is easier (contrastive accuracy)",
              "tau 10, no norm", "tau 0.1, l2", ("contrast_acc",))],
    "batch": [Claim("batch 1024 beats 256 after 5 epochs", "batch 1024, 5 epochs",
                    "batch 256, 5 epochs"),
              Claim("batch 1024 beats 64 after 5 epochs", "batch 1024, 5 epochs",
                    "batch 64, 5 epochs"),
              Claim("20 epochs beat 5 (batch 256)", "batch 256, 20 epochs",
                    "batch 256, 5 epochs")],
    "augment": [Claim(f"{variant}: crop + colour beats {alone}", f"{variant}: crop+colour",
                      f"{variant}: {alone}")
                for variant in ("grey", "tinted") for alone in ("crop", "colour", "none")],
    "color": [Claim(f"{variant}: colour strength 1 beats 1/8", f"{variant}: 1",
                    f"{variant}: 1/8") for variant in ("grey", "tinted")] + [
        Claim(f"{variant}: colour distortion lowers a supervised encoder",
              f"{variant}: supervised, crop+flip", f"{variant}: supervised, "
              "crop+flip+colour 1") for variant in ("grey", "tinted")],
    "blur": [Claim(f"{variant}: blur helps (strength 1, 20 px)",
                   f"{variant}: 1 + blur, 20 px", f"{variant}: 1, 20 px")
             for variant in ("grey", "tinted")],
    "loss": [Claim("NT-Xent beats NT-Logistic", "NT-Xent", "NT-Logistic"),
             Claim("NT-Xent beats the margin triplet", "NT-Xent", "margin triplet")],
}
VERDICT_RULE = (
    "**reproduced**: the paper's direction on every metric of the claim, each by more "
    "than the spread (the two standard deviations over seeds added); **in direction**: "
    "the paper's direction on every metric, not all beyond the spread; **not "
    "reproduced**: otherwise (a metric the other way, or tied); **undecided**: a "
    "setting with one seed (no spread to be beyond); **not measured**: a setting "
    "without records, or a non-finite value")


def _cell_values(table, side, metric):
    setting, layer = side if isinstance(side, tuple) else (side, "h")
    layer = "step" if metric in RUN_METRICS else layer
    return table.get(setting, {}).get((layer, metric))


def claim_verdict(table, claim):
    """(verdict, [(metric, difference of means, spread)]) of `claim` over a study's
    `summary`, by VERDICT_RULE; differences and spreads as fractions."""
    found = []
    for metric in claim.metrics:
        better, worse = (_cell_values(table, side, metric) for side in (claim.better,
                                                                       claim.worse))
        if not better or not worse or not all(
                np.isfinite(v) for v in list(better) + list(worse)):
            return "not measured", found
        (mean_b, sd_b), (mean_w, sd_w) = bench.mean_std(better), bench.mean_std(worse)
        # One seed has no spread (mean_std's is 0): no difference is beyond it.
        spread = sd_b + sd_w if min(len(better), len(worse)) >= 2 else float("nan")
        found.append((metric, mean_b - mean_w, spread))
    if not all(np.isfinite(spread) for _, _, spread in found):
        seeds = min(min(len(_cell_values(table, side, metric))
                        for side in (claim.better, claim.worse)) for metric in claim.metrics)
        return f"undecided ({seeds} seed: no spread)", found
    if all(difference > spread for _, difference, spread in found):
        return "reproduced", found
    if all(difference > 0 for _, difference, _ in found):
        return "in direction", found
    return "not reproduced", found


def claims_table(rows, study, budget):
    """The study's claims, each with its measured differences and its verdict."""
    table = summary(rows, study, budget)
    lines = ["| the paper's direction | difference (points; spread) | verdict |",
             "|---|---|---|"]
    for claim in CLAIMS[study]:
        verdict, found = claim_verdict(table, claim)
        measured = "; ".join(f"{SHORT_WORDS[m]} {100 * d:+.1f} "
                             + (f"({100 * s:.1f})" if np.isfinite(s) else "(no spread)")
                             for m, d, s in found) or "-"
        lines.append(f"| {claim.text} | {measured} | {verdict} |")
    return "\n".join(lines)



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


def point_budget(budget, point):
    """The budget `point` trains and is evaluated at: a point may set its own image
    size (the blur study)."""
    return dataclasses.replace(budget, image_size=dict(point.flags).get(
        "image_size", budget.image_size))


def point_key(point, seed, budget):
    """What makes a recorded row the result of (point, seed) today: its study,
    setting and seed; the hash of the whole flag set run.py trains with (the budget's
    included); the dataset its kNN bank, probe and RankMe were measured on (the one it
    trained on); and the budget it was evaluated at (its splits and image size)."""
    flags = run_py_flags(budget, point, seed, "", None)
    if point.finetune:
        flags["then"] = finetune_flags(budget, point, seed, "", "", None)
    digest = hashlib.sha256(json.dumps(flags, sort_keys=True).encode()).hexdigest()[:16]
    return dict(study=point.study, setting=point.setting, seed=seed, flags_hash=digest,
                eval_dataset=flags["dataset"],
                budget=dataclasses.asdict(point_budget(budget, point)))


class ResultsError(ValueError):
    """A results file that cannot be read as it is: the line named is not a whole
    record (nothing is rewritten: mend or remove the line)."""


# The fields every row has (what the tables, the page and the key read), and their types.
ROW_FIELDS = dict(study=str, setting=str, seed=int, flags_hash=str, eval_dataset=str,
                  budget=dict, metrics=dict, machine=str)


def _row_problem(row):
    """Why `row` (a parsed line) is not a whole record, or None."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not a record"
    missing = [name for name in ROW_FIELDS if name not in row]
    if missing:
        return f"no {', '.join(missing)}"
    wrong = [f"{name} is {type(row[name]).__name__}, not {kind.__name__}"
             for name, kind in ROW_FIELDS.items() if not isinstance(row[name], kind)]
    if wrong:
        return "; ".join(wrong)
    for layer, metrics in row["metrics"].items():
        if not isinstance(metrics, dict) or not all(
                isinstance(metrics.get(m), (int, float)) for m in ("knn", "probe", "rankme")):
            return f"metrics[{layer!r}] lacks a number for knn, probe or rankme"
    return None


def read_results(path):
    """The recorded points of `path` ([] without the file). A torn last line (a write
    cut short: no newline, not JSON) is dropped; any other line that is not a whole
    record is a ResultsError naming the file and the line."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().split("\n")
    # A file written whole ends with a newline, which leaves '' last; anything else
    # last was cut short, or lacks only its newline (then it is read as any line).
    last = lines.pop()
    rows = []
    for number, line in enumerate(lines + [last], 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) + 1:  # torn
                continue
            raise ResultsError(f"{path}, line {number}: not JSON ({error}); mend or "
                               "remove that line (nothing was rewritten)") from None
        problem = _row_problem(row)
        if problem:
            raise ResultsError(f"{path}, line {number}: not a whole record ({problem}); "
                               "mend or remove that line (nothing was rewritten)")
        rows.append(row)
    return rows


def append_row(path, row):
    """Appends `row` to the results file as one whole line, after a torn last line (cut
    from the file, and printed) or a whole last line that lacks its newline (given
    one). A write that fails leaves the file as it was and is a RuntimeError carrying
    the row's JSON, to paste back."""
    line = json.dumps(row, sort_keys=True) + "\n"
    size = os.path.getsize(path) if os.path.exists(path) else 0
    try:
        with open(path, "rb+" if size else "wb") as f:
            if size:
                text = f.read()
                if not text.endswith(b"\n"):
                    start = text.rfind(b"\n") + 1
                    try:
                        json.loads(text[start:])
                        f.write(b"\n")  # a whole last line without its newline
                    except ValueError:
                        say(f"{path}: dropped a torn last line: {text[start:]!r}")
                        f.seek(start)
                        f.truncate()
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        try:
            os.truncate(path, size)
        except OSError:
            pass
        raise RuntimeError(f"{path}: the row could not be written ({error.strerror or error}"
                           "); the file is as it was before. The row, to paste back as one "
                           f"line:\n{line}") from None


def stale_reason(row, budget):
    """Why `row` is not the current record of its (point, seed) under `budget`, or
    None: a table uses only current rows."""
    point = next((p for p in STUDIES.get(row["study"], ()) if p.setting == row["setting"]),
                 None)
    if point is None:
        return "a setting the study no longer has"
    key = point_key(point, row["seed"], budget)
    if row["flags_hash"] != key["flags_hash"]:
        return "trained with other flags (another budget, or an older setting)"
    if row["eval_dataset"] != key["eval_dataset"]:
        return (f"scored on {row['eval_dataset']}, not on the {key['eval_dataset']} it "
                "trained on")
    if row["budget"] != key["budget"]:
        return "evaluated at another budget"
    return None


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


def pretraining_dir(workdir, point, seed, budget):
    """The run directory of `point`'s pretraining (seed `seed`) under `workdir`, named
    by the hash of the whole flag set it trains with (the budget's included): a run of
    another budget or setting is never taken for it. Points with a second stage share
    their pretraining when their pretraining flags agree (the head_depth study's two
    fine-tunes of one head)."""
    flags = run_py_flags(budget, point, seed, "", None)
    digest = hashlib.sha256(json.dumps(flags, sort_keys=True).encode()).hexdigest()[:8]
    name = point.slug if not point.finetune else f"{point.study}_pretrain"
    return os.path.join(workdir, f"{name}_{digest}_seed{seed}", "run")


def finetune_dir(workdir, point, seed, budget):
    """The run directory of `point`'s second stage, named by the point's whole key."""
    digest = point_key(point, seed, budget)["flags_hash"][:8]
    return os.path.join(workdir, f"{point.slug}_{digest}_seed{seed}", "finetune")


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
    """--head_scale: each point's run under --workdir, read (no training); a point
    still training (no checkpoint yet) is listed as such. 1 when no run has a
    checkpoint."""
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    budget = SMOKE if args.smoke else bench.BUDGETS["cpu"]
    found, pending = 0, []
    print("| setting | seed | sum of gamma^2 (mean |z|^2 in training) | / tau (unnormalised "
          "z: the logit of two equal views) |\n|---|---|---|---|")
    for study in args.studies:
        for point in STUDIES[study]:
            for seed in args.seeds:
                run_dir = pretraining_dir(args.workdir, point, seed, budget)
                if not os.path.exists(os.path.join(run_dir, "flags.json")):
                    continue
                if not trained_step(run_dir):
                    pending.append(f"{point.setting} / seed {seed}")
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
    if pending:
        print(f"No checkpoint yet (still training?): {'; '.join(pending)}")
    if not found:
        print(f"ablations.py: error: no finished run of --study={args.study} with a "
              f"projection head under --workdir={args.workdir} (a point's run is "
              "<workdir>/<study>_<setting>_<hash>_seed<seed>/run): pass the --workdir "
              "the points were trained in", file=sys.stderr)
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


def trained_step(run_dir):
    """The step of the newest checkpoint in `run_dir` (0 without one), from the
    checkpoint files' names: run.py trained iff it grows."""
    steps = [int(name[5:-6]) for name in (os.listdir(run_dir) if os.path.isdir(run_dir)
                                          else ())
             if name.startswith("ckpt-") and name.endswith(".index") and name[5:-6].isdigit()]
    return max(steps, default=0)


class Runner:
    """Trains and evaluates points; appends each finished one to --results."""

    def __init__(self, args, budget, children):
        self.args, self.budget, self.children = args, budget, children
        self.rows = read_results(args.results)
        self.lock = threading.Lock()  # one evaluation (and one write) at a time
        self.dir_locks = {}  # run directory -> the lock of the job training it
        self.feats = {}  # (dataset, image size) -> bench.Features

    def _features(self, dataset, budget):
        """The evaluation images of `dataset` at `budget`'s size: a point is measured
        on the images it trained on (the tinted variant's, not the grey ones)."""
        key = (dataset, budget.image_size)
        if key not in self.feats:
            self.feats[key] = bench.Features(budget, self.args.data_dir, dataset)
        return self.feats[key]

    def run(self, point, seed):
        key = point_key(point, seed, self.budget)
        with self.lock:
            if _recorded(self.rows, key):
                return "recorded"
        label = f"{point.study} / {point.setting} / seed {seed}"
        run_dir = pretraining_dir(self.args.workdir, point, seed, self.budget)
        # No export at the end (~5 s a point): points are read from their checkpoints.
        # Not in the key: it changes no number.
        flags = dict(run_py_flags(self.budget, point, seed, run_dir, self.args.data_dir),
                     export_format="none")
        with self.lock:
            shared = self.dir_locks.setdefault(run_dir, threading.Lock())
        with shared:
            wall = self._train(run_dir, flags, label)
        extra = {}
        if point.finetune:
            tuned = finetune_dir(self.args.workdir, point, seed, self.budget)
            ft_wall = self._train(tuned, finetune_flags(
                self.budget, point, seed, tuned, run_dir, self.args.data_dir),
                f"{label}: fine-tuning")
            with open(os.path.join(tuned, "result.json")) as f:
                result = json.load(f)
            extra = dict(finetune_top1=result["eval/label_top_1_accuracy"],
                         finetune_seconds=ft_wall, finetune_flags=dict(point.finetune))
        with self.lock:
            row = dict(key, setting_flags=dict(point.flags), wall_seconds=wall,
                       machine=cpu_kind(), **extra, **contrast_metrics(run_dir),
                       metrics=self._evaluate(run_dir, seed, key["eval_dataset"],
                                              point_budget(self.budget, point)))
            append_row(self.args.results, row)
            self.rows.append(row)
        probe_h = row["metrics"]["h"]["probe"]
        contrast = row["contrast_acc"]
        say(f"{label}: h probe {probe_h:.4f} kNN {row['metrics']['h']['knn']:.4f} on "
            f"{key['eval_dataset']}"
            + (f", contrast acc {contrast:.3f}" if contrast is not None else "")
            + (f", fine-tuned top-1 {extra['finetune_top1']:.4f}" if extra else "")
            + (f" (trained {wall:.0f} s)" if wall is not None else ""))
        return "done"

    def _train(self, run_dir, flags, label):
        """run.py with `flags` (its output in log.txt beside run_dir), which trains what
        is left of the run (nothing when it is finished); the run's training time: the
        sum of the wall times of the launches that trained (None when the launch that
        trained it was not timed here)."""
        os.makedirs(os.path.dirname(run_dir), exist_ok=True)
        timing = os.path.join(os.path.dirname(run_dir), f"{os.path.basename(run_dir)}.json")
        recorded = None
        if os.path.exists(timing):
            with open(timing) as f:
                recorded = json.load(f).get("wall_seconds")
        before = trained_step(run_dir)
        log = os.path.join(os.path.dirname(run_dir), "log.txt")
        say(f"{label}: training ({log})")
        started = time.time()
        with open(log, "a") as f:
            code = self.children.run(command(flags), cwd=ROOT, stdout=f,
                                     stderr=subprocess.STDOUT,
                                     env=bench.thread_env(self.args.threads))
        if code != 0:
            tail = open(log).read()[-1500:]
            raise RuntimeError(f"{label}: run.py exited {code}; the end of "
                               f"{log}:\n{tail}")
        if trained_step(run_dir) == before:  # finished before: this launch trained nothing
            return recorded
        wall = time.time() - started + (recorded or 0.0)
        script_io.write_text(timing, json.dumps(dict(wall_seconds=wall)))
        return wall

    def _evaluate(self, run_dir, seed, dataset, budget):
        from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
        feats = self._features(dataset, budget)
        bank_y, bank_images = feats.labels_and_images(budget.train_split)
        test_y, test_images = feats.labels_and_images(budget.test_split)
        model, _, _ = checkpoints.open_encoder(run_dir)
        bank, test = layer_features(model, bank_images), layer_features(model, test_images)
        return {name: bench.evaluate(bank[name], test[name], bank_y, test_y, seed)
                for name in bank}


def say(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ---------------------------------------------------------------- the page


def budget_name(budget):
    """The name the page and the plots give `budget` ('cpu', 'smoke', ...)."""
    return next((name for name, known in (*bench.BUDGETS.items(), ("smoke", SMOKE))
                 if dataclasses.replace(known, image_size=budget.image_size) == budget),
                "other")


def table_rows(rows, study, budget):
    """The rows a table of `study` uses: each the current record of its (point, seed)
    under `budget` (`stale_reason`), the last one when a point was recorded twice;
    and {why: how many} of the study's rows left out."""
    wanted = STUDIES[study][0].study
    kept, left_out = {}, {}
    for row in rows:
        if row["study"] != wanted:
            continue
        reason = stale_reason(row, budget)
        if reason is None:
            if (row["setting"], row["seed"]) in kept:
                reason = "an earlier record of a point recorded again"
            kept[(row["setting"], row["seed"])] = row
        if reason:
            left_out[reason] = left_out.get(reason, 0) + 1
    return list(kept.values()), left_out


def left_out_line(left_out):
    """'3 rows of the results left out: ...' (or '' when none were)."""
    if not left_out:
        return ""
    count = sum(left_out.values())
    return (f"{count} row{'s' if count > 1 else ''} of the results left out: "
            + "; ".join(f"{n} {why}" for why, n in sorted(left_out.items())) + ".")


def summary(rows, study, budget):
    """{setting: {(layer, metric): [per-seed values]}} of a study's current records
    (`table_rows`), in the study's order of settings."""
    used, _ = table_rows(rows, study, budget)
    table = {}
    for point in STUDIES[study]:
        for row in used:
            if row["setting"] == point.setting:
                cell = table.setdefault(point.setting, {})
                for layer, metrics in row["metrics"].items():
                    for metric, value in metrics.items():
                        cell.setdefault((layer, metric), []).append(value)
                for metric in RUN_METRICS:
                    if row.get(metric) is not None:
                        cell.setdefault(("step", metric), []).append(row[metric])
                cell.setdefault(("seeds", "n"), []).append(row["seed"])
    return table


def study_table(rows, study, budget):
    table = summary(rows, study, budget)
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
             + " | RankMe of h | seeds |",
             "|---|" + "---|" * (len(metrics) + 2)]
    for setting, cell in table.items():
        values = [bench.format_spread(cell[("step" if m in RUN_METRICS else "h", m)])
                  for m in metrics]
        lines.append(f"| {setting} | " + " | ".join(values)
                     + f" | {bench.format_spread(cell[('h', 'rankme')], 1, 1)} "
                     f"| {len(cell[('seeds', 'n')])} |")
    return "\n".join(lines)


def plot(rows, study, path, budget):
    """The study's figure: one panel per metric, each with its own axis (the
    differences a verdict cites are a few points: an axis from 0 hides them); the
    batch study as lines over the batch size, one per training length; the h-vs-z
    view as bars per head, one per representation. Written whole; None without
    records or without matplotlib."""
    table = summary(rows, study, budget)
    if not table:
        return None
    plt = script_io.pyplot()
    if plt is None:
        print("No plot: matplotlib is not installed (pip install -e '.[plot]').")
        return None
    view, metrics = VIEWS[study]
    settings = list(table)
    fig, axes = plt.subplots(1, len(metrics), squeeze=False, figsize=(
        1.0 + (4.2 if study == "batch" else max(3.2, 0.55 * len(settings) + 1.2))
        * len(metrics), 3.6))
    for ax, metric in zip(axes[0], metrics):
        if view == "layers":
            series = [(LAYER_WORDS[layer], [table[s].get((layer, metric)) for s in settings])
                      for layer in ("h", "layer_1", "z")]
            _bars(ax, settings, series)
            ax.legend(fontsize=7, loc="lower right")
            ax.set_title("linear probe (%)", fontsize=9)
        elif study == "batch":
            for epochs in (5, 20):
                batches = [b for b in (64, 256, 1024) if f"batch {b}, {epochs} epochs" in table]
                cells = [_cell_values(table, f"batch {b}, {epochs} epochs", metric)
                         for b in batches]
                means = [100 * bench.mean_std(c)[0] for c in cells]
                sds = [100 * bench.mean_std(c)[1] for c in cells]
                ax.errorbar(batches, means, yerr=sds, marker="o", capsize=3,
                            label=f"{epochs} epochs")
            ax.set_xscale("log", base=2)
            ax.set_xticks([64, 256, 1024], ["64", "256", "1024"])
            ax.set_xlabel("batch size")
            ax.legend(fontsize=8)
            ax.set_title(f"{METRIC_WORDS[metric]} (%)", fontsize=9)
        else:
            _bars(ax, settings, [(None, [_cell_values(table, s, metric) for s in settings])])
            ax.set_title(f"{METRIC_WORDS[metric]} (%)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{TITLES[study]}: Fashion-MNIST, {budget_name(budget)} budget; mean ± sd "
                 "over seeds (each axis its own range)", fontsize=9)
    fig.tight_layout()
    return script_io.save_figure(plt, fig, path, dpi=90)


def _bars(ax, settings, series):
    """Bars (mean ± sd, in percent) of each setting, one bar per series, with their
    values; the axis from just below the lowest bar to just above the highest."""
    width = 0.8 / len(series)
    lows, highs = [], []
    for i, (label, cells) in enumerate(series):
        stats = [bench.mean_std(c) if c else (np.nan, 0.0) for c in cells]
        means = [100 * m for m, _ in stats]
        sds = [100 * s for _, s in stats]
        bars = ax.bar([j - 0.4 + width * (i + 0.5) for j in range(len(settings))], means,
                      width, yerr=sds, capsize=2, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
        lows += [m - s for m, s in zip(means, sds) if np.isfinite(m)]
        highs += [m + s for m, s in zip(means, sds) if np.isfinite(m)]
    if lows:
        pad = max(1.0, 0.15 * (max(highs) - min(lows)))
        ax.set_ylim(max(0.0, min(lows) - pad), min(100.0, max(highs) + 2 * pad))
    ax.set_xticks(range(len(settings)), settings, rotation=30, ha="right", fontsize=7)


def write_doc(rows, studies, doc, images, budget):
    """Each study's table, its left-out rows and its plot between the study's markers
    of `doc` (the prose around them kept); the page and the plots written whole."""
    text = open(doc).read() if os.path.exists(doc) else "# Ablations\n"
    for study in studies:
        begin, end = f"<!-- ablations:{study}:begin -->", f"<!-- ablations:{study}:end -->"
        used, left_out = table_rows(rows, study, budget)
        if begin in text and not used:
            # A table measured from records this file does not hold (another machine's,
            # an older results file) stays as it is: no record, no rewrite.
            say(f"{study}: no current point in these results; its section kept")
            continue
        machines = sorted({r["machine"] for r in used})
        section = (study_table(rows, study, budget) + "\n\nMean ± sample std over seeds; "
                   "measured on " + ("; ".join(machines) or "-") + ".")
        if left_out:
            section += " " + left_out_line(left_out)
        section += ("\n\nThe paper's directions against these records (the rule at the "
                    "top of the page):\n\n" + claims_table(rows, study, budget))
        picture = plot(rows, study, os.path.join(images, f"ablations_{study}.png"), budget)
        if picture:
            section += (f"\n\n![{study}: mean ± sd over seeds]"
                        f"({os.path.relpath(picture, os.path.dirname(os.path.abspath(doc)))})")
        if begin in text:
            head, rest = text.split(begin, 1)
            text = head + begin + "\n" + section + "\n" + end + rest.split(end, 1)[1]
        else:
            text = text.rstrip("\n") + f"\n\n## {study}\n\n{begin}\n{section}\n{end}\n"
    script_io.write_text(doc, text)
    say(f"wrote {doc}")



# ---------------------------------------------------------------- command line


# What each mode that trains nothing does not read: {option: why}.
REPORT_UNREAD = dict(
    jobs="it trains nothing", threads="it trains nothing", data_dir="it trains nothing",
    head_scale="one mode at a time",
    settings="the page's tables hold every setting of --results",
    seeds="the page's tables hold every seed of --results")
HEAD_SCALE_UNREAD = dict(
    jobs="it trains nothing", threads="it trains nothing", data_dir="it trains nothing",
    settings="it reads every setting's run under --workdir",
    results="it reads the runs, not the records", doc="it writes no page",
    images="it writes no page", report_only="one mode at a time")


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
    parser.add_argument("--doc", default=None,
                        help="the page ('' = none; default docs/ablations.md, with "
                        "--smoke none)")
    parser.add_argument("--images", default=None,
                        help="where the plots go (default: images/ beside --doc)")
    parser.add_argument("--head_scale", action="store_true",
                        help="print, for each point's run under --workdir, the sum of "
                        "gamma^2 of the head's last batch norm (mean |z|^2 in training) "
                        "and it over tau; train nothing")
    parser.add_argument("--report_only", action="store_true",
                        help="write the page from --results, train nothing")
    args = parser.parse_args(argv)
    given = script_io.given_options(parser, argv)
    for mode, unread in (("head_scale", HEAD_SCALE_UNREAD), ("report_only", REPORT_UNREAD)):
        extra = [name for name in unread if name in given  # --doc='' asks for nothing
                 and not (name == "doc" and not args.doc)] if getattr(args, mode) else []
        if extra:  # an option dropped would measure or report other than it says
            parser.error(f"--{extra[0]} does nothing with --{mode} ({unread[extra[0]]}); "
                         "leave it out")
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
    if os.path.isdir(args.results):
        parser.error(f"--results: {args.results} is a directory; name a file")
    # --smoke's numbers mean nothing: nothing of it reaches the repository's records,
    # page or pictures, however the path is spelled; by itself it writes no page.
    args.doc = ("" if args.smoke else DOC) if args.doc is None else args.doc
    args.images = args.images or os.path.join(os.path.dirname(os.path.abspath(
        args.doc or DOC)), "images")
    if args.smoke:
        committed = os.path.realpath(os.path.join(ROOT, "docs"))
        for flag, path in (("--results", args.results), ("--doc", args.doc),
                           ("--images", args.images if args.doc else "")):
            real = os.path.realpath(path) if path else ""
            if real == committed or real.startswith(committed + os.sep):
                parser.error(f"{flag}: {path} is in the repository's docs/; --smoke's "
                             "numbers mean nothing there: name a path outside it (or "
                             "leave it out)")
    return args


def _todo(args):
    """The (point, seed) pairs to run: a study's points (seed 0's settings, then seed
    1's, ...) before the next study's, so each table is complete as early as it can be."""
    todo = []
    for study in args.studies:
        for seed in args.seeds:
            for point in STUDIES[study]:
                if (not args.settings or point.setting in args.settings) and (
                        (point, seed) not in todo):
                    todo.append((point, seed))
    return todo


def train_points(args, budget):
    """Runs the points not recorded yet; the failed ones. Raises script_io.Stopped on
    SIGTERM / SIGINT / SIGHUP, once the running points' run.py have saved and exited."""
    from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
    quiet.import_tensorflow()
    failed, stopped = [], None
    with script_io.Children() as children:
        runner = Runner(args, budget, children)
        todo = _todo(args)
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
                except script_io.Stopped as error:
                    stopped = error
                    continue
                except RuntimeError as error:
                    failed.append((point, seed))
                    say(f"FAILED {error}")
                say(f"{finished}/{len(todo)} points finished")
    if stopped:
        raise stopped
    return failed


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.head_scale:  # reads runs: creates nothing
        return print_head_scales(args)
    budget = SMOKE if args.smoke else bench.BUDGETS["cpu"]
    try:
        read_results(args.results)  # a damaged file stops the script before any work
        os.makedirs(args.workdir, exist_ok=True)
        if os.path.dirname(args.results):
            os.makedirs(os.path.dirname(args.results), exist_ok=True)
        failed = [] if args.report_only else train_points(args, budget)
        rows = read_results(args.results)
        for study in args.studies:
            _, left_out = table_rows(rows, study, budget)
            print(f"\n{study}:\n{study_table(rows, study, budget)}"
                  + (f"\n{left_out_line(left_out)}" if left_out else ""))
        if args.doc:
            write_doc(rows, args.studies, args.doc, args.images, budget)
    except script_io.Stopped as stop:
        say(f"{stop}: every running point's run.py was stopped and saved its checkpoint; "
            "the same command resumes them")
        return 128 + stop.signum
    except (ResultsError, script_io.WriteFailed) as error:
        print(f"ablations.py: error: {error}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
