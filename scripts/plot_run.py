"""Pictures of a run, from what its directory already records.

Writes PNGs into --out (default RUN_DIR/plots/):
- `training_curves.png`: against the step, from metrics.jsonl: the losses and the
  training accuracies its train mode records (pretraining: the contrastive ones and
  the online head's; fine-tuning: the supervised ones; distillation: the
  distillation loss and the agreement with the teacher, besides the supervised ones
  of its labelled images), the learning rate, and the monitors recorded (kNN top-1,
  distillation's student and teacher top-1);
- `views.png`: training images and their views as the run's train mode and flags
  make them (flags.json: its train mode, image size, --augmentations, colour
  strength, blur, --augment_on), drawn by the training pipeline itself
  (`simclr_tf.run.modes.parts.draw_views`) and titled with the recipe in words, each
  image's views beside it;
- `embeddings.png`: a 2-D map (PCA, or t-SNE with --method=tsne; scikit-learn) of h
  on the run's evaluation split (up to --max_points, a stratified sample), coloured by
  class, from the newest checkpoint.

Nothing in RUN_DIR is read for writing or changed; only --out is written (its three
files replaced). matplotlib is an optional extra: `pip install -e '.[plot]'`.

Examples:
  python scripts/plot_run.py /tmp/simclr_quickstart
  python scripts/plot_run.py /tmp/run --out docs/images --only curves,views --views 6
"""
import argparse
import os
import sys

import script_io  # scripts/: whole files (TensorFlow-free)

PICTURES = ("curves", "views", "embeddings")
# The monitors' names in metrics.jsonl end so (knn/top_1_accuracy,
# distill/student_top_1_accuracy, distill/teacher_top_1_accuracy).
MONITOR_SUFFIX = "top_1_accuracy"


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="plot_run.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split(
            "\n\n", 1)[1])
    parser.add_argument("run_dir", help="a run directory (its --model_dir)")
    parser.add_argument("--out", help="where the PNGs go (default RUN_DIR/plots)")
    parser.add_argument("--only", default=",".join(PICTURES),
                        help=f"comma-separated subset of {', '.join(PICTURES)}")
    parser.add_argument("--views", type=int, default=8, help="view pairs to draw (1-32)")
    parser.add_argument("--split", help="split of the embedding map (default: the "
                        "run's --eval_split, else its --train_split)")
    parser.add_argument("--max_points", type=int, default=2000,
                        help="most examples in the embedding map (>= 10)")
    parser.add_argument("--method", choices=("pca", "tsne"), default="pca")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the images and views drawn and of the sample")
    parser.add_argument("--dpi", type=int, default=100, help="resolution (50-300)")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    bad = [name for name in only if name not in PICTURES]
    if bad or not only:
        parser.error(f"--only: expected a subset of {', '.join(PICTURES)}, got {args.only!r}")
    args.only = only
    # An option of a picture not drawn is refused, not dropped.
    readers = dict(views=("views",), split=("embeddings",), max_points=("embeddings",),
                   method=("embeddings",), seed=("views", "embeddings"))
    for name in sorted(script_io.given_options(parser, argv) & set(readers)):
        if not set(readers[name]) & set(only):
            parser.error(f"--{name} does nothing with --only={','.join(only)}: only "
                         f"{' and '.join(readers[name])} read it")
    for name, low, high in (("views", 1, 32), ("max_points", 10, None), ("dpi", 50, 300)):
        value = getattr(args, name)
        if value < low or (high is not None and value > high):
            parser.error(f"--{name}: expected {low}..{high or 'any'}, got {value}")
    flags_file = os.path.join(args.run_dir, "flags.json")
    if not os.path.isdir(args.run_dir):
        parser.error(f"{args.run_dir!r} is not a directory: pass a run's --model_dir")
    if not os.path.exists(flags_file):
        parser.error(f"{args.run_dir!r} is not a run directory (no flags.json, which "
                     "every training run writes): pass a run's --model_dir")
    args.out = args.out or os.path.join(args.run_dir, "plots")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out: {args.out!r} is a file, not a directory")
    return args


def _pyplot():
    plt = script_io.pyplot()
    if plt is None:
        sys.exit("plot_run.py: error: needs matplotlib, an optional extra: "
                 "pip install -e '.[plot]'")
    return plt


def read_metrics(run_dir):
    """{name: ([steps], [values])} of metrics.jsonl (the training lines and the
    monitors' lines, merged by name)."""
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    path = os.path.join(run_dir, records.METRICS_FILE)
    series = {}
    if not os.path.exists(path):
        return series
    for line in records.read_metrics(path):
        for name, value in line.items():
            if name in ("step", "time") or not isinstance(value, (int, float)):
                continue
            steps, values = series.setdefault(name, ([], []))
            steps.append(line["step"])
            values.append(value)
    return series


def curve_panels(train_mode, series):
    """The panels of training_curves.png: (title, the names of `series` it draws).
    The losses and accuracies are those the train mode's step records
    (`train_modes` row's `metrics`, `train/<name>` in metrics.jsonl); the monitors are
    whatever evaluations the run recorded."""
    from simclr_tf.config.tables import train_modes  # pylint: disable=import-outside-toplevel
    recorded = [f"train/{name}" for name in train_modes.get(train_mode).metrics]
    return (
        ("losses", [name for name in recorded if name.endswith("_loss")]),
        ("training accuracies", [name for name in recorded
                                 if name.endswith(("_acc", "_agreement"))]),
        ("learning rate", ["train/learning_rate"]),
        ("monitors (top-1)", sorted(name for name in series
                                    if name.endswith(MONITOR_SUFFIX))),
    )


def plot_curves(plt, run_dir, train_mode, out, dpi):
    series = read_metrics(run_dir)
    # A panel of nothing recorded (a fine-tune's monitors) is left out.
    panels = [(title, [name for name in names if name in series])
              for title, names in curve_panels(train_mode, series)]
    panels = [(title, names) for title, names in panels if names]
    if not panels:
        return None, "no metrics.jsonl lines (the run has not logged a step yet)"
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2),
                             squeeze=False)
    for ax, (title, names) in zip(axes[0], panels):
        for name in names:
            steps, values = series[name]
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3,
                    label=name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        if title != "learning rate":
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{os.path.basename(os.path.abspath(run_dir))} (--train_mode="
                 f"{train_mode})", fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, out, "training_curves.png", dpi), None


def plot_views(plt, config, source, count, seed, out, dpi):
    """`count` images of the recorded train split and their training views, drawn
    by the training pipeline with the run's options (`parts.draw_views`)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from simclr_tf.evaluation import features  # pylint: disable=import-outside-toplevel
    from simclr_tf.run.modes import parts  # pylint: disable=import-outside-toplevel
    split, size = config.train_split, config.image_size
    total = source.num_examples(split)
    ids = np.sort(np.random.default_rng(seed).choice(total, min(count, total),
                                                     replace=False)).astype(np.int64)
    images = features.sample_images(source, split, ids, image_size=size)
    views = parts.draw_views(config, source, split, ids, seed)
    titles = ["image"] + ([f"view {k + 1}" for k in range(views.shape[1])]
                          if views.shape[1] > 1 else ["view"])
    fig, axes = plt.subplots(len(images), len(titles),
                             figsize=(1.4 * len(titles), 1.45 * len(images)),
                             squeeze=False)
    for row, (image, drawn) in enumerate(zip(images, views)):
        for col, picture in enumerate([image, *drawn]):
            ax = axes[row][col]
            ax.imshow(np.clip(picture, 0, 1), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(titles[col], fontsize=9)
    fig.suptitle(f"{config.dataset}, {parts.describe_views(config)}", fontsize=8,
                 wrap=True)
    fig.tight_layout()
    return _save(plt, fig, out, "views.png", dpi), None


def plot_embeddings(plt, tf, run_dir, source, split, max_points, method, seed, out,
                    dpi):
    import numpy as np  # pylint: disable=import-outside-toplevel
    from simclr_tf.evaluation import features  # pylint: disable=import-outside-toplevel
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    if not source.has_labels(split):
        return None, f"split {split!r} has no labels to colour the map by"
    if checkpoints.latest(run_dir) is None:
        return None, "no checkpoint yet"
    strategy = tf.distribute.get_strategy()
    model, image_size, description = checkpoints.open_encoder(run_dir, strategy=strategy)
    ids = features.bounded_ids(source, split, max_points, seed=seed)
    found = features.extract(strategy, model, source, split, image_size=image_size,
                             example_ids=ids)
    h, labels = found[features.H], found["labels"]
    if method == "tsne":
        from sklearn.manifold import TSNE  # pylint: disable=import-outside-toplevel
        points = TSNE(n_components=2, init="pca", random_state=seed,
                      perplexity=min(30.0, (len(h) - 1) / 3)).fit_transform(h)
    else:
        from sklearn.decomposition import PCA  # pylint: disable=import-outside-toplevel
        points = PCA(n_components=2, random_state=seed).fit_transform(h)
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    classes = np.unique(labels)
    cmap = plt.get_cmap("tab10" if len(classes) <= 10 else "tab20")
    for index, label in enumerate(classes):
        chosen = labels == label
        ax.scatter(points[chosen, 0], points[chosen, 1], s=6, alpha=0.7,
                   color=cmap(index % cmap.N), label=_class_name(source, label))
    if len(classes) <= 20:
        ax.legend(fontsize=7, markerscale=2, loc="best", ncol=2 if len(classes) > 10 else 1)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"h of {len(h)} {split} examples ({method.upper()}), "
                 f"{description.split(' ', 1)[0]} {os.path.basename(description)}",
                 fontsize=9)
    fig.tight_layout()
    return _save(plt, fig, out, "embeddings.png", dpi), None


def _class_name(source, label):
    names = getattr(source, "class_names", None)
    try:
        return str(names[int(label)]) if names is not None else str(int(label))
    except (IndexError, TypeError):
        return str(int(label))


def _save(plt, fig, out, name, dpi):
    return script_io.save_figure(plt, fig, os.path.join(out, name), dpi)


def _refuse(message):
    """Bad input, or a picture the disk cannot hold: one line and rc 2, argparse's way."""
    print(f"plot_run.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plt = _pyplot()
    # After the checks that need no TensorFlow; its start-up lines filtered as run.py's.
    from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
    tf = quiet.import_tensorflow()
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    try:
        config = records.read_config(os.path.join(args.run_dir, "flags.json"))
    except (ValueError, OSError) as error:
        sys.exit(f"plot_run.py: error: {args.run_dir}/flags.json cannot be read: {error}")
    written, skipped = [], []

    def keep(name, outcome):
        path, reason = outcome
        (written.append(path) if path else skipped.append(f"{name}: {reason}"))

    source = split = None
    if "views" in args.only or "embeddings" in args.only:
        from simclr_tf.data import registry  # pylint: disable=import-outside-toplevel
        try:
            source = registry.get_dataset(config.dataset, data_dir=config.data_dir,
                                          download=False)
            source.check_prepared()
        except (ValueError, FileNotFoundError) as error:
            sys.exit(f"plot_run.py: error: the run's dataset {config.dataset!r} cannot "
                     f"be read here: {error}")
        split = args.split or config.eval_split or config.train_split
        if "embeddings" in args.only:
            try:
                source.split_ranges(split)
            except ValueError as error:
                _refuse(f"--split: {error}" + ("" if args.split else
                                              " (the run's own split): pass --split"))
    try:
        if "curves" in args.only:
            keep("curves", plot_curves(plt, args.run_dir, config.train_mode, args.out,
                                       args.dpi))
        if "views" in args.only:
            keep("views", plot_views(plt, config, source, args.views, args.seed,
                                     args.out, args.dpi))
        if "embeddings" in args.only:
            keep("embeddings", plot_embeddings(plt, tf, args.run_dir, source, split,
                                               args.max_points, args.method, args.seed,
                                               args.out, args.dpi))
    except script_io.WriteFailed as error:  # a full disk: the older picture is kept
        _refuse(str(error))
    for path in written:
        print(f"wrote {path} ({os.path.getsize(path) // 1024} KB)")
    for line in skipped:
        print(f"skipped {line}")
    return dict(written=written, skipped=skipped)


if __name__ == "__main__":
    main()
