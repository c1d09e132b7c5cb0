#!/usr/bin/env python
"""Does it learn, and as well as lightly? Fashion-MNIST at equal budget, >= 3 seeds.

Not a test: a measurement that writes its table into docs/benchmarks.md (between the
`benchmark:begin` / `benchmark:end` markers, keeping the prose around them) and every
number per seed into --json. Only a run of every row over >= 3 seeds rewrites the page
and its plot; a run of some rows or fewer seeds leaves them as they are, says so, and
writes its numbers to --json alone. Rows, each trained and evaluated once per seed:

  random      a randomly initialised encoder (seeded like the others): the floor.
  supervised  the same encoder trained on all labels of the training subset
              (run.py --train_mode=finetune without --checkpoint: crop and flip,
              the same optimiser, schedule, batch and epochs).
  simclr_tf   our SimCLR pretraining (run.py --train_mode=pretrain).
  lightly     lightly 1.6's SimCLR in PyTorch (dev/lightly_simclr.py, in its own
              virtual environment: --lightly_python), the same encoder written in
              PyTorch, the same images, batch, steps, schedule, temperature, weight
              decay and augmentation strengths.

Columns: weighted kNN top-1 (k 200, votes exp(cos / 0.07), the bank = the training
subset) and the linear probe's top-1 (L-BFGS logistic regression, C chosen on a
held-out fifth of the bank), both on the frozen h of the test split; RankMe (the
effective rank of the bank's h); the training wall time (the whole command) and
seconds per step (the training loop after its first step). Both columns use one
implementation (simclr_tf.evaluation.knn / probe) on features extracted from the
same preprocessed images (ours: evaluation.features.eval_dataset), so only the
encoders differ. Seeds are interleaved (seed 0's rows, then seed 1's, ...), so the
speed ratio compares runs made minutes apart on the same machine.

Budgets (--budget):
  cpu  <= 15 min a run on 2 cores: the first 10,000 training images at 16 px (crops
       of the 28 px images resized to 16; the evaluation resizes the whole image),
       ResNet-18 x0.25 with the CIFAR stem (h 128-d), batch 256, 10 epochs (391
       steps), 1 warmup epoch, LARS at 2.0 (linear scaling), weight decay 1e-4,
       temperature 0.2, colour jitter 0.5, no blur, a 2-layer projection head
       (flags/quickstart.flags' recipe at Fashion-MNIST's size).
  gpu  documented for a GPU, not measured here: all 60,000 images, ResNet-18 x1,
       batch 512, 200 epochs, 10 warmup epochs, LARS at 1.0 x 512 / 256, temperature
       0.5 (the authors' CIFAR-10 command's settings otherwise).

The peer's environment (once; torch comes from the package index, ~5.5 GB):
  python -m venv .venv-lightly && .venv-lightly/bin/pip install torch torchvision lightly==1.6.0

Examples:
  python scripts/benchmark_accuracy.py                  # all rows, seeds 0,1,2, ~2 h
  python scripts/benchmark_accuracy.py --resume         # reuse the finished cells
  python scripts/benchmark_accuracy.py --speed_rounds=2 --resume
      # the two pretrainings alone, back to back, 2 epochs each, twice: s/step ratio
  python scripts/benchmark_accuracy.py --rows=random,simclr_tf --seeds=0 --fast
      # end to end in ~2 min (the test's path); numbers meaningless, doc untouched

A cell (row, seed) is recorded in --workdir as <row>_seed<S>.json once finished;
--resume reuses a cell whose record names the same settings, any other is run again.
A non-empty --workdir is refused without --resume. Exit status 0 when every cell
ran; 1 when one failed (its command and the end of its log are printed). SIGTERM or
SIGINT (Ctrl-C) reaches the running training (run.py saves a checkpoint and exits;
SIGHUP, a closed terminal, reaches it as SIGTERM and the script exits 129);
the script waits for it and exits 128 + the signal (143, 130): the same command with
--resume continues (finished cells are reused, the stopped one resumes).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # a plain script: runs from a checkout too

from simclr_tf.evaluation.rankme import rankme  # noqa: E402  (pure numpy)
from simclr_tf.run.machine import cpu_kind  # noqa: E402  (TF-free)

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import script_io  # noqa: E402  (whole files; children that stop with the script)

ROWS = ("random", "supervised", "simclr_tf", "lightly")
TRAINED_ROWS = ("supervised", "simclr_tf", "lightly")
OUR_TRAINED_ROWS = ("supervised", "simclr_tf")  # run.py's; --mixed_precision applies
KNN_K, KNN_TEMPERATURE = 200, 0.07
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
# The table's picture, beside the page (docs/images/benchmark.png; `--replot`).
PLOT = os.path.join(ROOT, "docs", "images", "benchmark.png")
BEGIN, END = "<!-- benchmark:begin -->", "<!-- benchmark:end -->"
DEFAULT_LIGHTLY_PYTHON = os.path.join(ROOT, ".venv-lightly", "bin", "python")


@dataclasses.dataclass(frozen=True)
class Budget:
    train_split: str
    image_size: int
    width_multiplier: float
    batch_size: int
    epochs: float
    warmup_epochs: float
    learning_rate: float          # base rate, linearly scaled by batch / 256
    temperature: float
    weight_decay: float = 1e-4
    color_jitter_strength: float = 0.5
    num_proj_layers: int = 2
    resnet_depth: int = 18
    test_split: str = "test"

    @property
    def peak_learning_rate(self):
        return self.learning_rate * self.batch_size / 256


BUDGETS = {
    "cpu": Budget(train_split="train[:10000]", image_size=16, width_multiplier=0.25,
                  batch_size=256, epochs=10, warmup_epochs=1, learning_rate=2.0,
                  temperature=0.2),
    "gpu": Budget(train_split="train", image_size=28, width_multiplier=1.0,
                  batch_size=512, epochs=200, warmup_epochs=10, learning_rate=1.0,
                  temperature=0.5),
    # --fast: the whole path in minutes; its numbers mean nothing.
    "fast": Budget(train_split="train[:512]", image_size=28, width_multiplier=0.125,
                   batch_size=128, epochs=1, warmup_epochs=0, learning_rate=2.0,
                   temperature=0.2, test_split="test[:256]"),
}


# ---------------------------------------------------------------- pure helpers


def mean_std(values):
    """(mean, sample standard deviation; 0 for one value)."""
    values = [float(v) for v in values]
    return (statistics.fmean(values),
            statistics.stdev(values) if len(values) > 1 else 0.0)


def format_spread(values, scale=100.0, digits=1):
    mean, std = mean_std(values)
    return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"


def goals(results):
    """The issue's goals, each as (text, met: bool or None when a row is missing).

    results: {row: {metric: [values per seed]}}.
    """
    def mean(row, metric):
        values = results.get(row, {}).get(metric)
        return mean_std(values)[0] if values else None

    checks = []
    for metric, name in (("knn", "kNN"), ("probe", "linear probe")):
        ours, peer, floor = (mean("simclr_tf", metric), mean("lightly", metric),
                             mean("random", metric))
        checks.append((f"{name}: simclr_tf >= lightly - 0.5 point",
                       None if ours is None or peer is None else ours >= peer - 0.005))
        checks.append((f"{name}: simclr_tf >= random init + 10 points",
                       None if ours is None or floor is None else ours >= floor + 0.10))
    ours, peer = mean("simclr_tf", "seconds_per_step"), mean("lightly", "seconds_per_step")
    checks.append(("s/step: simclr_tf <= lightly (same machine, interleaved)",
                   None if ours is None or peer is None else ours <= peer))
    return checks


def replace_section(text, section):
    """`text` with what stands between BEGIN and END replaced by `section` (appended,
    with the markers, when they are absent)."""
    block = f"{BEGIN}\n{section.rstrip()}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + block + rest.split(END, 1)[1]
    return text.rstrip() + "\n\n" + block + "\n"


# ---------------------------------------------------------------- running cells


class CellFailed(RuntimeError):
    pass


def thread_env(threads):
    """The environment of a training command: `threads` compute threads for
    TensorFlow's intra-op pool (and for torch, by its --threads)."""
    env = dict(os.environ)
    if threads:
        env["TF_NUM_INTRAOP_THREADS"] = str(threads)
    return env


def run_logged(command, log_path, children, env=None):
    """Runs `command`, one of `children` (script_io.Children: it stops with the
    script), output to `log_path`; returns wall seconds. Raises CellFailed, or
    script_io.Stopped when the script was stopped (the child too)."""
    started = time.perf_counter()
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(command) + "\n")
        log.flush()
        status = children.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                              env=env)
    if status:
        with open(log_path) as log:
            tail = "".join(log.readlines()[-15:])
        raise CellFailed(f"exit {status}: {shlex.join(command)}\n{tail}")
    return time.perf_counter() - started


def run_py_command(budget, row, seed, model_dir, data_dir, mixed_precision="none"):
    train_mode = "finetune" if row == "supervised" else "pretrain"
    command = [
        sys.executable, "run.py", "--dataset=fashion_mnist",
        f"--train_split={budget.train_split}", "--eval_split=", "--mode=train",
        f"--train_mode={train_mode}", f"--seed={seed}", f"--model_dir={model_dir}",
        f"--image_size={budget.image_size}", "--stem=cifar",
        f"--resnet_depth={budget.resnet_depth}",
        f"--width_multiplier={budget.width_multiplier}",
        f"--train_batch_size={budget.batch_size}", f"--train_epochs={budget.epochs}",
        f"--warmup_epochs={budget.warmup_epochs}",
        f"--learning_rate={budget.learning_rate}", "--learning_rate_scaling=linear",
        f"--weight_decay={budget.weight_decay}", f"--temperature={budget.temperature}",
        f"--color_jitter_strength={budget.color_jitter_strength}", "--use_blur=false",
        f"--num_proj_layers={budget.num_proj_layers}", "--optimizer=lars",
        # One checkpoint, at the end; no monitor: the step is the method's alone.
        f"--checkpoint_epochs={budget.epochs}", "--progress=lines",
    ]
    if train_mode == "pretrain":
        command.append("--nolineareval_while_pretraining")
    if data_dir:
        command.append(f"--data_dir={data_dir}")
    if mixed_precision != "none":
        command.append(f"--mixed_precision={mixed_precision}")
    return command


def seconds_per_step_from_metrics(model_dir):
    """Training loop time per step after the first step, from metrics.jsonl."""
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    rows = [r for r in records.read_metrics(os.path.join(model_dir, "metrics.jsonl"))
            if "time" in r]
    first, last = rows[0], rows[-1]
    if last["step"] <= first["step"]:
        return float("nan")
    return (last["time"] - first["time"]) / (last["step"] - first["step"])


def fastest_window(times_by_step, min_steps=50):
    """Seconds per step of the fastest stretch of at least `min_steps` steps between
    logged steps (NaN when none is that long): the speed under the least load of a run
    that shared the machine. 50 is the peer's logging interval, so both systems are
    timed over stretches of the same length.

    times_by_step: [(step, unix time)] in step order (the callers leave the first step
    out: it traces or starts workers)."""
    rates = []
    for i, (step, time_) in enumerate(times_by_step):
        later = [(s, t) for s, t in times_by_step[i + 1:] if s - step >= min_steps]
        if later:
            rates.append((later[0][1] - time_) / (later[0][0] - step))
    return min(rates) if rates else float("nan")


def logged_times(cell_dir, row):
    """[(step, unix time)] of a finished trained cell: metrics.jsonl (ours) or the
    peer's loss log (every 50 steps; absent from runs before it was recorded)."""
    if row == "lightly":
        timing = json.loads(str(np.load(os.path.join(cell_dir, "features.npz"))["timing"]))
        return [(entry[0], entry[2]) for entry in timing["losses"] if len(entry) > 2]
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    rows = records.read_metrics(os.path.join(cell_dir, "run", "metrics.jsonl"))
    return [(r["step"], r["time"]) for r in rows if "time" in r and r["step"] > 1]


class Features:
    """Extracts h with our evaluation pipeline (features.eval_dataset): the same
    preprocessed pixels for every row, ours and the peer's."""

    def __init__(self, budget, data_dir, dataset="fashion_mnist"):
        from simclr_tf.data import registry  # pylint: disable=import-outside-toplevel
        self.budget, self.dataset = budget, dataset
        self.source = registry.get_dataset(dataset, data_dir=data_dir)
        self._cache = {}

    def labels_and_images(self, split):
        if split not in self._cache:
            from simclr_tf.evaluation import features  # pylint: disable=import-outside-toplevel
            images, labels = [], []
            for batch in features.eval_dataset(self.source, split,
                                               image_size=self.budget.image_size,
                                               batch_size=512).as_numpy_iterator():
                keep = batch["id"] >= 0
                images.append(batch["image"][keep])
                labels.append(batch["label"][keep])
            self._cache[split] = (np.concatenate(labels), np.concatenate(images))
        return self._cache[split]

    def train_images_uint8(self):
        """The pretraining images as stored (uint8), in the split's canonical order."""
        return np.stack([image for image, _ in
                         self.source.load(self.budget.train_split).as_numpy_iterator()])

    def of_model(self, model):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        from simclr_tf.models.outputs import H  # pylint: disable=import-outside-toplevel
        outputs = {}
        for name, split in (("bank", self.budget.train_split),
                            ("test", self.budget.test_split)):
            _, images = self.labels_and_images(split)
            h = [model(tf.constant(images[i:i + 512]), training=False)[H].numpy()
                 for i in range(0, len(images), 512)]
            outputs[name] = np.concatenate(h).astype(np.float32)
        return outputs["bank"], outputs["test"]


def evaluate(bank_h, test_h, bank_y, test_y, seed):
    from simclr_tf.evaluation import knn, probe  # pylint: disable=import-outside-toplevel
    knn_top1 = knn.knn_accuracy(bank_h, bank_y, test_h, test_y, k=KNN_K,
                                temperature=KNN_TEMPERATURE)
    probe_result = probe.linear_probe(bank_h, bank_y, test_h, test_y, seed=seed)
    return dict(knn=float(knn_top1), probe=probe_result["top_1_accuracy"],
                probe_c=probe_result["c"], rankme=rankme(bank_h))


def lightly_data(args, budget, feats):
    """The peer's input file (made once per workdir): the pretraining images as stored
    and our evaluation pixels of the bank and the test split."""
    path = os.path.join(args.workdir, "lightly_data.npz")
    if not os.path.exists(path):
        _, bank_images = feats.labels_and_images(budget.train_split)
        _, test_images = feats.labels_and_images(budget.test_split)
        script_io.write_whole(path, lambda scratch: np.savez(
            scratch, train_images=feats.train_images_uint8(), bank_images=bank_images,
            test_images=test_images))
    return path


def lightly_command(args, budget, seed, out, data_path):
    return [args.lightly_python, os.path.join(ROOT, "dev", "lightly_simclr.py"),
            f"--data={data_path}", f"--out={out}", f"--seed={seed}",
            f"--epochs={budget.epochs}", f"--batch_size={budget.batch_size}",
            f"--learning_rate={budget.peak_learning_rate}",
            f"--warmup_epochs={budget.warmup_epochs}", f"--weight_decay={budget.weight_decay}",
            f"--temperature={budget.temperature}",
            f"--color_jitter_strength={budget.color_jitter_strength}",
            f"--width={budget.width_multiplier}", f"--num_proj_layers={budget.num_proj_layers}",
            f"--threads={args.threads}"]


def speed_only(args, budget, feats, children):
    """Our pretraining and the peer's, back to back, --speed_rounds times, each for
    --speed_epochs (same step, same threads); s/step after the first step."""
    budget = dataclasses.replace(budget, epochs=args.speed_epochs,
                                 warmup_epochs=min(budget.warmup_epochs, args.speed_epochs))
    data_path = lightly_data(args, budget, feats)
    rows = []
    for round_ in range(args.speed_rounds):
        directory = os.path.join(args.workdir, "speed", f"round{round_}")
        os.makedirs(directory, exist_ok=True)
        run_dir = os.path.join(directory, "simclr_tf")
        run_logged(run_py_command(budget, "simclr_tf", 0, run_dir, args.data_dir,
                                  args.mixed_precision),
                   os.path.join(directory, "simclr_tf.log"), children,
                   env=thread_env(args.threads))
        ours = seconds_per_step_from_metrics(run_dir)
        out = os.path.join(directory, "lightly.npz")
        run_logged(lightly_command(args, budget, 0, out, data_path),
                   os.path.join(directory, "lightly.log"), children)
        peer = json.loads(str(np.load(out)["timing"]))["seconds_per_step"]
        rows.append((ours, peer, os.getloadavg()[0]))
        print(f"round {round_}: simclr_tf {ours:.3f} s/step, lightly {peer:.3f} s/step, "
              f"ratio lightly / simclr_tf {peer / ours:.2f}", flush=True)
    ratios = sorted(peer / ours for ours, peer, _ in rows)
    print(f"Back to back, {args.speed_rounds} rounds of {budget.epochs} epochs, "
          f"{args.threads} thread(s) each, on {cpu_kind()}: lightly / simclr_tf s/step "
          f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")


def run_cell(row, seed, args, budget, feats, cell_dir, children):
    """Trains (unless 'random'; the training one of `children`) and evaluates one
    cell; returns its record."""
    import keras  # pylint: disable=import-outside-toplevel
    os.makedirs(cell_dir, exist_ok=True)
    bank_y, _ = feats.labels_and_images(budget.train_split)
    test_y, _ = feats.labels_and_images(budget.test_split)
    record = dict(row=row, seed=seed, load_average_before=os.getloadavg())
    if row == "lightly":
        out = os.path.join(cell_dir, "features.npz")
        command = lightly_command(args, budget, seed, out, lightly_data(args, budget, feats))
        record["wall_seconds"] = run_logged(command, os.path.join(cell_dir, "log.txt"),
                                            children)
        saved = np.load(out)
        timing = json.loads(str(saved["timing"]))
        record.update(seconds_per_step=timing["seconds_per_step"], steps=timing["steps"])
        bank_h, test_h = saved["bank_h"], saved["test_h"]
    elif row == "random":
        from simclr_tf import config as config_lib  # pylint: disable=import-outside-toplevel
        from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
        config = config_lib.Config(
            dataset="fashion_mnist", image_size=budget.image_size, stem="cifar",
            resnet_depth=budget.resnet_depth, width_multiplier=budget.width_multiplier,
            num_proj_layers=budget.num_proj_layers)
        keras.utils.set_random_seed(seed)
        model = SimCLRModel(**config.model_kwargs(None))
        model.build((None, budget.image_size, budget.image_size, 3))
        bank_h, test_h = feats.of_model(model)
    else:
        from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
        model_dir = os.path.join(cell_dir, "run")
        command = run_py_command(budget, row, seed, model_dir, args.data_dir,
                                 args.mixed_precision)
        if args.fast:  # no export: the cell opens the run's checkpoint (open_encoder)
            command.append("--export_format=none")
        record["wall_seconds"] = run_logged(command, os.path.join(cell_dir, "log.txt"),
                                            children, env=thread_env(args.threads))
        record["seconds_per_step"] = seconds_per_step_from_metrics(model_dir)
        model, _, _ = checkpoints.open_encoder(model_dir)
        bank_h, test_h = feats.of_model(model)
    # Kept, so that the evaluation can be redone without training again.
    script_io.write_whole(os.path.join(cell_dir, "h.npz"), lambda scratch: np.savez(
        scratch, bank_h=bank_h, test_h=test_h))
    started = time.perf_counter()
    record.update(evaluate(bank_h, test_h, bank_y, test_y, seed))
    record["evaluation_seconds"] = time.perf_counter() - started
    record["load_average_after"] = os.getloadavg()
    return record


# ---------------------------------------------------------------- report


def summarise(cells):
    """{row: {metric: [per-seed values]}} over the finished cells."""
    results = {}
    for cell in cells:
        row = results.setdefault(cell["row"], {})
        for metric in ("knn", "probe", "rankme", "wall_seconds", "seconds_per_step",
                       "fastest_seconds_per_step"):
            if metric in cell and np.isfinite(cell[metric]):
                row.setdefault(metric, []).append(cell[metric])
    return results


def table(results):
    lines = ["| row | kNN top-1 (%) | linear probe top-1 (%) | RankMe | train wall time "
             "(s) | s/step | s/step, fastest stretch |", "|---|---|---|---|---|---|---|"]
    for row in ROWS:
        if row not in results:
            continue
        r = results[row]
        wall = (format_spread(r["wall_seconds"], scale=1, digits=0)
                if "wall_seconds" in r else "-")
        step, fastest = (format_spread(r[m], scale=1, digits=3) if r.get(m) else "-"
                         for m in ("seconds_per_step", "fastest_seconds_per_step"))
        lines.append(f"| {row} | {format_spread(r['knn'])} | {format_spread(r['probe'])} "
                     f"| {format_spread(r['rankme'], scale=1, digits=1)} | {wall} | {step} "
                     f"| {fastest} |")
    return "\n".join(lines)


def per_seed_table(cells, seeds):
    """kNN / probe top-1 of every cell: what the spreads are made of."""
    by_cell = {(c["row"], c["seed"]): c for c in cells}
    lines = ["| row | " + " | ".join(f"seed {s}: kNN / probe" for s in seeds) + " |",
             "|---|" + "---|" * len(seeds)]
    for row in ROWS:
        if any((row, s) in by_cell for s in seeds):
            values = [f"{by_cell[row, s]['knn'] * 100:.1f} / {by_cell[row, s]['probe'] * 100:.1f}"
                      if (row, s) in by_cell else "-" for s in seeds]
            lines.append(f"| {row} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def results_from_page(text):
    """{row: {'knn': [...], 'probe': [...]}} (fractions) from the page's per-seed table
    between the markers: the page is the record when the --json is gone."""
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    results = {}
    for line in section.split("Each seed", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] not in ROWS:
            continue
        pairs = [c.split("/") for c in cells[1:] if "/" in c]
        results[cells[0]] = dict(knn=[float(k) / 100 for k, _ in pairs],
                                 probe=[float(p) / 100 for _, p in pairs])
    if not results:
        raise ValueError("no per-seed table between the page's benchmark markers")
    return results


def bar_chart(path, title, groups, series, *, ylabel, value_labels=False):
    """Grouped bars, mean ± sample std over seeds, to PNG `path`, written whole:
    `series` is [(label, [per-seed fractions, or None, for each group])], drawn in
    percent from 0 to 100. Returns `path`, or None when matplotlib is not installed."""
    plt = script_io.pyplot()
    if plt is None:
        print("No plot: matplotlib is not installed (pip install -e '.[plot]').")
        return None
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(groups) + 2), 3.4))
    width = 0.8 / len(series)
    for i, (label, cells) in enumerate(series):
        means = [100 * mean_std(c)[0] if c else np.nan for c in cells]
        sds = [100 * mean_std(c)[1] if c else 0 for c in cells]
        bars = ax.bar([j - 0.4 + width * (i + 0.5) for j in range(len(groups))], means,
                      width, yerr=sds, capsize=3 if value_labels else 2, label=label)
        if value_labels:
            ax.bar_label(bars, fmt="%.1f", fontsize=8, padding=2)
    tilted = len(groups) > 4 or max(len(group) for group in groups) > 16
    ax.set_xticks(range(len(groups)), groups, rotation=20 if tilted else 0,
                  ha="right" if tilted else "center",
                  fontsize=None if value_labels and not tilted else 8)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 100)
    ax.legend(loc="upper left", fontsize=8 if value_labels else 7)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return script_io.save_figure(plt, fig, path, dpi=100)


def plot_results(results, path, title):
    """Bars of kNN and linear-probe top-1 per row, mean ± sample std over the seeds."""
    rows = [row for row in ROWS if row in results]
    drawn = bar_chart(path, title, rows, [
        (label, [results[row][metric] for row in rows])
        for metric, label in (("knn", "kNN"), ("probe", "linear probe"))],
        ylabel="top-1 (%), mean ± sd over seeds", value_labels=True)
    if drawn:
        print(f"Wrote {path}")
    return drawn


def goal_lines(results, fast):
    """One line per goal with its verdict; none at the fast budget, which checks the
    path (its accuracies are no evidence either way). A verdict from one seed says
    so: its means have no spread."""
    seeds = min((len(values) for row in results.values() for values in row.values()),
                default=0)
    one = " (from 1 seed: no spread)" if seeds == 1 else ""
    return [f"- {text}: " + ("no verdict at the fast budget" if fast else "not measured"
                             if met is None else ("met" if met else "**not met**") + one)
            for text, met in goals(results)]


def report(results, cells, args, budget):
    seeds = sorted({c["seed"] for c in cells})
    lines = [table(results), "", "Each seed (top-1, %):", "",
             per_seed_table(cells, seeds), ""]
    ours, peer = results.get("simclr_tf", {}), results.get("lightly", {})
    if ours.get("seconds_per_step") and peer.get("seconds_per_step"):
        ratios = [p / o for o, p in zip(ours["seconds_per_step"], peer["seconds_per_step"])]
        lines.append(f"Step-time ratio lightly / simclr_tf, per seed (interleaved runs): "
                     f"{', '.join(f'{r:.2f}' for r in ratios)}.")
        lines.append("")
    lines += ["Goals (means over the seeds):", ""] + goal_lines(results, args.fast)
    loads = [c["load_average_before"][0] for c in cells] + \
            [c["load_average_after"][0] for c in cells]
    lines += [
        "",
        f"Mean ± sample std over seeds {', '.join(map(str, seeds))}; per-seed values in "
        f"`{os.path.basename(args.json)}` (the script's --json). Measured "
        f"{datetime.date.today().isoformat()} on {cpu_kind()}; 1-minute load average "
        f"{min(loads):.1f}-{max(loads):.1f} during the runs (other jobs shared the "
        "cores: times are upper bounds, the ratio is what compares).",
        "",
        f"Budget `{'fast' if args.fast else args.budget}`: {budget}; "
        f"{args.threads} compute thread(s) per training run.",
        "",
        "Command: `python scripts/benchmark_accuracy.py " + " ".join(
            shareable_argv(args.argv)) + "`",
    ]
    return "\n".join(lines)


def shareable_argv(argv):
    """The command's arguments as the doc shows them: the interpreter of lightly's
    environment, a path of one machine, as a placeholder."""
    shown, hide_next = [], False
    for arg in argv:
        if hide_next:
            arg, hide_next = "<lightly's python>", False
        elif arg == "--lightly_python":
            hide_next = True
        elif arg.startswith("--lightly_python="):
            arg = "--lightly_python=<lightly's python>"
        shown.append(arg)
    return shown


def settings_key(args, budget, row, seed):
    key = dict(budget=dataclasses.asdict(budget), row=row, seed=seed,
               data_dir=args.data_dir, threads=args.threads)
    if args.mixed_precision != "none" and row in OUR_TRAINED_ROWS:
        key["mixed_precision"] = args.mixed_precision
    return key


def refuse_unread(parser, args, given):
    """An option that this command would not read is an error, not dropped: the
    measurement must be what its command line says."""
    if args.replot:
        unread = sorted(given - {"replot", "doc", "plot"})
        why = "--replot only draws --plot from --doc"
    elif args.speed_rounds:
        unread = sorted(given & {"rows", "seeds", "doc", "plot", "json"})
        why = "--speed_rounds only times the two pretrainings, writing no table"
    else:
        unread = sorted(given & {"speed_epochs"})
        why = "it sets the length of --speed_rounds' runs"
        if "lightly_python" in given and "lightly" not in args.rows.split(","):
            unread, why = ["lightly_python"], "no lightly row in --rows"
    if unread:
        parser.error(f"{', '.join('--' + name for name in unread)} would do nothing here "
                     f"({why}); leave {'them' if len(unread) > 1 else 'it'} out")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--budget", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--fast", action="store_true",
                        help="a tiny budget, and no export at the end of our "
                             "training runs (--export_format=none): the whole path in "
                             "minutes; the doc is not written")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--workdir", default="/tmp/simclr_benchmark")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--data_dir", default=None,
                        help="where the Fashion-MNIST IDX files are (default: the "
                             "Debian package's folder, as --dataset=fashion_mnist)")
    parser.add_argument("--lightly_python",
                        default=os.environ.get("SIMCLR_TF_LIGHTLY_PYTHON",
                                               DEFAULT_LIGHTLY_PYTHON))
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="compute threads of each training run (TensorFlow's "
                             "intra-op pool, torch.set_num_threads): one number for "
                             "both systems")
    parser.add_argument("--mixed_precision", choices=("none", "bfloat16"),
                        default="none",
                        help="our training runs' --mixed_precision (lightly's stay "
                             "float32); other than none, the doc is not written (its "
                             "table is float32's): docs/performance.md compares")
    parser.add_argument("--speed_rounds", type=int, default=0,
                        help="only time the two pretrainings back to back this many "
                             "rounds (no accuracy, the doc untouched)")
    parser.add_argument("--speed_epochs", type=float, default=2.0,
                        help="epochs of each --speed_rounds run")
    parser.add_argument("--json", default=None,
                        help="per-seed results (default: <workdir>/benchmark.json)")
    parser.add_argument("--doc", default=DOC)
    parser.add_argument("--plot", default=PLOT, help="the table's picture (PNG)")
    parser.add_argument("--replot", action="store_true",
                        help="only draw --plot from --doc's per-seed table, run nothing")
    args = parser.parse_args(argv)
    refuse_unread(parser, args, script_io.given_options(parser, argv))
    if args.replot:
        return args
    args.argv = list(argv)
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = sorted(set(args.rows) - set(ROWS))
    if unknown or not args.rows:
        parser.error(f"--rows: unknown {unknown or 'empty'}; choose from {', '.join(ROWS)}")
    if not args.seeds:
        parser.error("--seeds: give at least one seed")
    if "lightly" in args.rows and not os.access(args.lightly_python, os.X_OK):
        parser.error(
            f"--lightly_python: {args.lightly_python} is not an executable. Make the "
            "peer's environment: python -m venv .venv-lightly && .venv-lightly/bin/pip "
            "install torch torchvision lightly==1.6.0 (or drop 'lightly' from --rows)")
    if os.path.isdir(args.workdir) and os.listdir(args.workdir) and not args.resume:
        parser.error(f"--workdir: {args.workdir} is not empty; pass --resume to reuse "
                     "its finished cells, or another --workdir")
    args.json = args.json or os.path.join(args.workdir, "benchmark.json")
    return args


def run_cells(args, budget, feats, children):
    """Runs (or with --resume reuses) every cell; returns (their records, the failed
    (row, seed)). Raises script_io.Stopped when the script is stopped."""
    cells, failed = [], []
    for seed in args.seeds:
        for row in [r for r in ROWS if r in args.rows]:
            children.check()  # a stop that came while the last cell was evaluated
            cell_dir = os.path.join(args.workdir, f"{row}_seed{seed}")
            record_path = cell_dir + ".json"
            key = settings_key(args, budget, row, seed)
            if args.resume and os.path.exists(record_path):
                with open(record_path) as f:
                    saved = json.load(f)
                if saved.get("settings") == key:
                    print(f"{row} seed {seed}: reused {record_path}", flush=True)
                    cells.append(saved)
                    continue
            print(f"{row} seed {seed}: running ...", flush=True)
            try:
                cell = run_cell(row, seed, args, budget, feats, cell_dir, children)
            except CellFailed as error:
                print(f"{row} seed {seed}: FAILED {error}", flush=True)
                failed.append((row, seed))
                continue
            cell["settings"] = key
            script_io.write_text(record_path, json.dumps(cell, indent=1))
            print(f"{row} seed {seed}: kNN {cell['knn']:.4f} probe {cell['probe']:.4f} "
                  f"RankMe {cell['rankme']:.1f}"
                  + (f", {cell['seconds_per_step']:.3f} s/step, {cell['wall_seconds']:.0f} s"
                     if "seconds_per_step" in cell else ""), flush=True)
            cells.append(cell)
    return cells, failed


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.replot:
        with open(args.doc) as f:
            results = results_from_page(f.read())
        plot_results(results, args.plot, "Fashion-MNIST, budget cpu (docs/benchmarks.md)")
        return 0
    budget = BUDGETS["fast" if args.fast else args.budget]
    from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
    quiet.import_tensorflow()  # run.py's way: TensorFlow's start-up lines filtered
    os.makedirs(args.workdir, exist_ok=True)
    feats = Features(budget, args.data_dir)
    try:
        with script_io.Children() as children:
            if args.speed_rounds:
                speed_only(args, budget, feats, children)
                return 0
            cells, failed = run_cells(args, budget, feats, children)
        report_cells(cells, failed, args, budget)
    except script_io.Stopped as stop:
        print(f"benchmark_accuracy.py: {stop}: the running training was stopped and has "
              "exited (run.py saves a checkpoint); the same command with --resume "
              "continues (finished cells are reused, the stopped one resumes).",
              file=sys.stderr)
        return 128 + stop.signum
    except script_io.WriteFailed as error:  # a full disk, a folder gone
        print(f"benchmark_accuracy.py: error: {error}", file=sys.stderr)
        return 1
    return 1 if failed else 0


# The page's table holds every row over at least this many seeds: its goals and
# ratios compare the rows' means, so it is never rewritten from a part of them.
PAGE_SEEDS = 3


def page_incomplete(args):
    """Why a run of `args.rows` over `args.seeds` cannot rewrite the page (the doc's
    whole table, its goals, per-seed table and plot), or None for a full run."""
    missing = [row for row in ROWS if row not in args.rows]
    seeds = len(set(args.seeds))
    if not missing and seeds >= PAGE_SEEDS:
        return None
    return (f"this run measured {len(ROWS) - len(missing)} of the page's {len(ROWS)} rows"
            f"{' (not ' + ', '.join(missing) + ')' if missing else ''} over {seeds} "
            f"seed(s); the page is rewritten only from every row over >= {PAGE_SEEDS} "
            f"seeds (its goals compare the rows); this run's numbers are in {args.json}")


def report_cells(cells, failed, args, budget):
    """Prints the table of `cells` and writes --json (and, for a full run without
    failures, the doc's section and its plot), each file whole."""
    for cell in cells:
        if cell["row"] in TRAINED_ROWS:
            cell_dir = os.path.join(args.workdir, f"{cell['row']}_seed{cell['seed']}")
            cell["fastest_seconds_per_step"] = fastest_window(
                logged_times(cell_dir, cell["row"]))
    results = summarise(cells)
    text = report(results, cells, args, budget)
    print(text)
    script_io.write_text(args.json, json.dumps(dict(
        cells=cells, results=results, machine=cpu_kind(), budget=dataclasses.asdict(budget)),
        indent=1))
    incomplete = page_incomplete(args)
    if not args.fast and not failed and args.mixed_precision == "none" and incomplete:
        print(f"{args.doc} and {args.plot} were left as they are: {incomplete}")
    elif not args.fast and not failed and args.mixed_precision == "none":
        old = open(args.doc).read() if os.path.exists(args.doc) else "# Benchmarks\n"
        script_io.write_text(args.doc, replace_section(old, text))
        print(f"Wrote the table into {args.doc}")
        plot_results(results, args.plot,
                     f"Fashion-MNIST, budget {args.budget} (docs/benchmarks.md)")


if __name__ == "__main__":
    sys.exit(main())
