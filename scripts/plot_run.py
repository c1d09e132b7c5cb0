"""Pictures of a run, from what its directory already records.

Writes PNGs into --out (default RUN_DIR/plots/):
- `training_curves.png`: the contrastive loss, the contrastive accuracy, the learning
  rate and, where recorded, the monitors (kNN top-1, the online head's accuracy, the
  distillation monitor) against the step, from metrics.jsonl;
- `views.png`: pairs of augmented views of training images, drawn by the run's own
  recipe (flags.json: image size, colour strength, its implementation, blur), each
  pair beside its source image;
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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PICTURES = ("curves", "views", "embeddings")
# metrics.jsonl's names -> the panels of training_curves.png (title, names).
PANELS = (
    ("contrastive loss", ("train/contrast_loss",)),
    ("contrastive accuracy", ("train/contrast_acc",)),
    ("learning rate", ("train/learning_rate",)),
    ("monitors (top-1)", ("knn/top_1_accuracy", "train/supervised_acc",
                          "distill/top_1_accuracy")),
)


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
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
    except ImportError:
        sys.exit("plot_run.py: error: needs matplotlib, an optional extra: "
                 "pip install -e '.[plot]'")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
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


def plot_curves(plt, run_dir, out, dpi):
    series = read_metrics(run_dir)
    if not series:
        return None, "no metrics.jsonl lines (the run has not logged a step yet)"
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.2))
    for ax, (title, names) in zip(axes, PANELS):
        shown = [name for name in names if name in series]
        for name in shown:
            steps, values = series[name]
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3,
                    label=name if len(names) > 1 else None)
        ax.set_title(title if shown else f"{title}: not recorded", fontsize=10)
        ax.set_xlabel("step")
        if len(names) > 1 and shown:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(os.path.basename(os.path.abspath(run_dir)), fontsize=10)
    fig.tight_layout()
    return _save(plt, fig, out, "training_curves.png", dpi), None


def plot_views(plt, config, source, count, seed, out, dpi):
    """`count` training images of the recorded train split and two views of each,
    drawn by the run's recipe (`augment.preprocess_for_train`, then the blur its
    flags ask for)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from simclr_tf import augment  # pylint: disable=import-outside-toplevel
    from simclr_tf.augment import blur  # pylint: disable=import-outside-toplevel
    from simclr_tf.evaluation import features  # pylint: disable=import-outside-toplevel
    split, size = config.train_split, config.image_size
    total = source.num_examples(split)
    ids = np.sort(np.random.default_rng(seed).choice(total, min(count, total),
                                                     replace=False)).astype(np.int64)
    images = features.sample_images(source, split, ids, image_size=size)
    fig, axes = plt.subplots(len(images), 3, figsize=(4.2, 1.45 * len(images)),
                             squeeze=False)
    for row, image in enumerate(images):
        views = []
        for view in range(2):
            view_seed = tf.constant([seed, row * 2 + view], tf.int64)
            drawn = augment.preprocess_for_train(
                tf.constant(image), size, size,
                color_jitter_strength=config.color_jitter_strength,
                seed=view_seed)
            if config.use_blur:
                drawn = blur.random_blur(drawn, size, size, p=0.5, seed=view_seed)
            views.append(drawn.numpy())
        for col, (picture, title) in enumerate(zip([image] + views,
                                                   ("image", "view 1", "view 2"))):
            ax = axes[row][col]
            ax.imshow(np.clip(picture, 0, 1), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(title, fontsize=9)
    fig.suptitle(f"{config.dataset}: colour strength {config.color_jitter_strength}"
                 f"{', blur' if config.use_blur else ''}", fontsize=9)
    fig.tight_layout()
    return _save(plt, fig, out, "views.png", dpi), None


def plot_embeddings(plt, run_dir, source, split, max_points, method, seed, out,
                    dpi):
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
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
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    scratch = os.path.join(out, f".{name}.tmp.png")
    fig.savefig(scratch, dpi=dpi)
    plt.close(fig)
    os.replace(scratch, path)
    return path


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    plt = _pyplot()
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    try:
        config = records.read_config(os.path.join(args.run_dir, "flags.json"))
    except (ValueError, OSError) as error:
        sys.exit(f"plot_run.py: error: {args.run_dir}/flags.json cannot be read: {error}")
    written, skipped = [], []

    def keep(name, outcome):
        path, reason = outcome
        (written.append(path) if path else skipped.append(f"{name}: {reason}"))

    if "curves" in args.only:
        keep("curves", plot_curves(plt, args.run_dir, args.out, args.dpi))
    if "views" in args.only or "embeddings" in args.only:
        from simclr_tf.data import registry  # pylint: disable=import-outside-toplevel
        try:
            source = registry.get_dataset(config.dataset, data_dir=config.data_dir,
                                          download=False)
            source.check_prepared()
        except (ValueError, FileNotFoundError) as error:
            sys.exit(f"plot_run.py: error: the run's dataset {config.dataset!r} cannot "
                     f"be read here: {error}")
        if "views" in args.only:
            keep("views", plot_views(plt, config, source, args.views, args.seed,
                                     args.out, args.dpi))
        if "embeddings" in args.only:
            split = args.split or config.eval_split or config.train_split
            keep("embeddings", plot_embeddings(plt, args.run_dir, source, split,
                                               args.max_points, args.method, args.seed,
                                               args.out, args.dpi))
    for path in written:
        print(f"wrote {path} ({os.path.getsize(path) // 1024} KB)")
    for line in skipped:
        print(f"skipped {line}")
    return dict(written=written, skipped=skipped)


if __name__ == "__main__":
    main()
