"""Transfer table: one frozen encoder, several labelled datasets, kNN and linear probe.

For each dataset, h is computed once per split (cached under --cache_dir), then the
weighted kNN (k=--knn_k, votes exp(cos / --knn_temperature)) and the paper's linear
probe (L2-regularised multinomial logistic regression, L-BFGS, regularisation chosen
on a held-out part of the training split) report test top-1. Rows go to a Markdown
table (--out) and a CSV beside it.

ENCODER is one of our run directories or checkpoint prefixes (architecture from the
run's flags.json), one of our SavedModel exports (run/saved_model/<step>), or an
authors' released SavedModel.

Every argument and dataset is checked before the encoder is opened: an error is one
line (exit 2) naming what to pass, and leaves nothing behind. --out's folder is
created when the table is written; the features are cached beside it.

Examples:
  python scripts/transfer_table.py /tmp/simclr_quickstart --datasets digits \
      --out /tmp/transfer.md
  python scripts/transfer_table.py /models/r50_1x_sk0/saved_model \
      --datasets cifar10,folder:/data/flowers --splits cifar10=train:test \
      --data_dir ~/tensorflow_datasets --image_size 224 --out table.md
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # a plain script: this checkout's simclr_tf, installed or not


def fail(message):
    """A bad argument: one line naming it and what to pass, exit 2."""
    print(f"transfer_table.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def _parse_splits(text):
    """'cifar10=train:test,folder:/x=train[:80%]:train[80%:]' -> {name: (train, test)}."""
    splits = {}
    for item in filter(None, (text or "").split(",")):
        name, _, pair = item.rpartition("=")
        train, test = _split_outside_brackets(pair)
        if not name or not train or not test:
            fail(f"--splits: expected DATASET=TRAIN:TEST, got {item!r}")
        splits[name] = (train, test)
    return splits


def _split_outside_brackets(pair):
    """'train[:80%]:train[80%:]' -> ('train[:80%]', 'train[80%:]')."""
    depth = 0
    for i, char in enumerate(pair):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == ":" and depth == 0:
            return pair[:i], pair[i + 1:]
    return pair, ""


def check_arguments(args):
    """(datasets, {dataset: (train, test)}, the probe's C grid or None) of the
    arguments, each checked before TensorFlow is imported (`fail`)."""
    datasets = [name for name in args.datasets.split(",") if name]
    if not datasets:
        fail(f"--datasets names no dataset. Received: --datasets={args.datasets!r}")
    overrides = _parse_splits(args.splits)
    unmatched = sorted(set(overrides) - set(datasets))
    if unmatched:
        fail(f"--splits names {', '.join(map(repr, unmatched))}, which --datasets "
             f"does not ({', '.join(map(repr, datasets))}): each --splits entry is "
             "DATASET=TRAIN:TEST with DATASET written as in --datasets.")
    for flag, value, least in (("--knn_k", args.knn_k, 1),
                               ("--batch_size", args.batch_size, 1)):
        if value < least:
            fail(f"{flag} must be at least {least}. Received: {flag}={value}")
    if not args.knn_temperature > 0:
        fail("--knn_temperature must be > 0 (e.g. 0.07). Received: "
             f"--knn_temperature={args.knn_temperature}")
    c_grid = None
    if args.probe_c:
        try:
            c_grid = tuple(float(c) for c in args.probe_c.split(","))
        except ValueError:
            c_grid = ()
        if not c_grid or not all(c > 0 and c != float("inf") for c in c_grid):
            fail("--probe_c takes comma-separated inverse L2 strengths, each > 0 "
                 f"(e.g. 0.1,1,10). Received: --probe_c={args.probe_c!r}")
    check_out(args.out)
    return datasets, overrides, c_grid


def check_out(out):
    """--out names a file whose folder exists or can be created (it is, when the table
    is written: nothing is made before the work succeeds)."""
    folder = os.path.dirname(os.path.abspath(out))
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if os.path.isdir(out):
        fail(f"--out: {out} is a folder; name the table's file, e.g. "
             f"--out={os.path.join(out, 'transfer.md')}")
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK):
        fail(f"--out: cannot write in {folder} ({existing} is not a folder you can write "
             f"in): name a file in a folder you can write. Received: --out={out}")


def check_disjoint_splits(source, name, train, test):
    """An error (exit 2) when `test` shares examples with `train`: the kNN bank and the
    probe would be measured on examples they hold."""
    from simclr_tf.evaluation import overlap  # pylint: disable=import-outside-toplevel
    shared, total, unit = overlap.shared_examples(source, train, test)
    if shared:
        fail(f"--splits {name}: its test split {test!r} shares {shared} of its "
             f"{total} {unit} with its training split {train!r}, which the kNN "
             "bank and the probe are fitted on: pass two splits that share no "
             f"example, e.g. --splits {name}=train:test.")


def open_dataset(name, data_dir):
    """The dataset `name` of --datasets, its data there (`fail` otherwise: an unknown
    name, a folder that does not exist, a TFDS dataset not prepared in --data_dir)."""
    from simclr_tf.data import registry, tfds_source  # pylint: disable=import-outside-toplevel
    try:
        source = registry.get_dataset(name, data_dir=data_dir)
        source.check_prepared()
    except tfds_source.DatasetNotPreparedError as error:  # the fix this script has
        fail(f"--datasets {name}: " + tfds_source.not_prepared_message(
            error.name, error.data_dir, error.builder_data_dir, download_flag=None))
    except (ValueError, FileNotFoundError) as error:
        fail(f"--datasets {name}: {error}")
    return source


def default_splits(source):
    """(train, test) for a dataset: its 'train' and 'test' (else 'validation'); a
    folder with one split is divided 80/20 by position."""
    names = source.splits
    if "train" in names:
        for test in ("test", "validation", "val"):
            if test in names:
                return "train", test
        return "train[:80%]", "train[80%:]"
    fail(f"--datasets {source.name}: no 'train' split among {', '.join(names)}; pass "
         f"--splits {source.name}=TRAIN:TEST.")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("encoder", help="run dir, checkpoint prefix, SavedModel export "
                        "or released model")
    parser.add_argument("--datasets", required=True,
                        help="comma-separated: digits, fashion_mnist, folder:/path, TFDS "
                        "names")
    parser.add_argument("--out", required=True, help="Markdown table; CSV beside it")
    parser.add_argument("--splits", default="", help="DATASET=TRAIN:TEST,... overrides")
    parser.add_argument("--data_dir", default=None,
                        help="TFDS data directory (also where fashion_mnist's IDX files "
                        "may be)")
    parser.add_argument("--image_size", type=int, default=None,
                        help="input size (default: the encoder's)")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--knn_k", type=int, default=200)
    parser.add_argument("--knn_temperature", type=float, default=0.07)
    parser.add_argument("--cache_dir", default=None,
                        help="feature cache (default: <out>.features/)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe_c", default=None,
                        help="comma-separated inverse L2 strengths the probe chooses "
                        "from (default: simclr_tf.evaluation.probe.DEFAULT_C_GRID)")
    args = parser.parse_args(argv)
    datasets, overrides, c_grid = check_arguments(args)

    # Imported after parsing so that --help never waits for TensorFlow, and quietly.
    from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
    quiet.import_tensorflow()
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    from simclr_tf.evaluation import probe, transfer  # pylint: disable=import-outside-toplevel

    # Every dataset and its splits are checked before the encoder is opened and any
    # feature computed.
    planned = []
    for name in datasets:
        source = open_dataset(name, args.data_dir)
        train, test = overrides.get(name) or default_splits(source)
        check_disjoint_splits(source, name, train, test)
        planned.append((name, source, train, test))
    try:
        model, image_size, description = checkpoints.open_encoder(args.encoder)
    except (FileNotFoundError, ValueError) as error:  # no such path, not an encoder
        fail(f"ENCODER {args.encoder}: {error}")
    image_size = args.image_size or image_size
    encoder_id = transfer.encoder_identity(
        checkpoints.resolve(args.encoder).prefix) + f"@{image_size}px"
    cache_dir = args.cache_dir or os.path.splitext(args.out)[0] + ".features"
    c_grid = c_grid or probe.DEFAULT_C_GRID
    rows = []
    for name, source, train, test in planned:
        row = transfer.evaluate_protocols(
            model, source, image_size=image_size, train_split=train, test_split=test,
            batch_size=args.batch_size, knn_k=args.knn_k,
            knn_temperature=args.knn_temperature, cache_dir=cache_dir,
            encoder_id=encoder_id, seed=args.seed, c_grid=c_grid,
            allow_overlap=True)  # checked above, for every dataset, before any feature
        # The protocol in the line, as --mode=linear_probe says it: both choose C the
        # same way, from their grids (--probe_c here).
        print(f"{name}: kNN (k={args.knn_k}) {row['knn_top_1']:.4f}, linear probe "
              f"(L-BFGS, C={row['linear_probe_c']:g} of {','.join(f'{c:g}' for c in c_grid)} "
              f"chosen on a held-out part of {train}) {row['linear_probe_top_1']:.4f} on "
              f"{test} ({row['num_train']} train / {row['num_test']} test, "
              f"{row['seconds']:.1f} s)", flush=True)
        rows.append(row)
    md_path, csv_path = transfer.write_table(
        rows, args.out, title=f"Transfer: {description} at {image_size} px (kNN k="
        f"{args.knn_k}, T={args.knn_temperature:g}; L-BFGS linear probe)")
    print(f"Wrote {md_path} and {csv_path}")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
