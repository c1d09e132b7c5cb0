"""Frozen-encoder transfer evaluation: the weighted kNN and the paper's linear probe.

`evaluate_protocols` computes h once per split (cached on disk when a cache
directory is given), then runs both protocols on the same features:

- weighted kNN top-1 (`simclr_tf.evaluation.knn`: cosine similarity, k neighbours, votes
  exp(s / T)), the training split as the bank;
- the paper's transfer linear probe (`simclr_tf.evaluation.probe.linear_probe`): L2-regularised
  multinomial logistic regression fitted with L-BFGS, the regularisation chosen on a
  held-out part of the training split, then refitted on all of it.

`write_table` writes the rows of several datasets as Markdown and CSV
(`scripts/transfer_table.py` is the command line).

The evaluators (`simclr_tf.evaluation.base`) of the frozen encoder: `LinearProbeEval`
(--mode=linear_probe: both protocols, train split -> test split) and
`FinalProbeEval` (--final_linear_probe: the probe of the trained encoder against a
randomly initialised one).
"""
import csv
import hashlib
import io
import os
import time

import tensorflow as tf

from simclr_tf.evaluation import base, features, knn, overlap, probe
from simclr_tf.rundir import files

COLUMNS = ("dataset", "train_split", "test_split", "num_train", "num_test", "feature_dim",
           "knn_top_1", "linear_probe_top_1", "linear_probe_c", "seconds")


def encoder_identity(prefix):
    """What the weights of the checkpoint at `prefix` are: its name and a SHA-256 of
    its index file, which lists every tensor with the CRC32C of its bytes, so the
    identity changes with the weights (not with a copy to another directory, nor
    with a rewrite of the same weights). Without an index file: the path."""
    index = prefix + ".index"
    if not tf.io.gfile.exists(index):
        return str(prefix)
    with tf.io.gfile.GFile(index, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return f"{os.path.basename(prefix)}@sha256:{digest}"


def split_features(strategy, model, source, split, *, image_size, batch_size=256,
                   cache_dir=None, encoder_id=None, extractor=None):
    """h, labels and ids of `split`; from `cache_dir/<dataset>/<split>.npz` if valid.

    Returns:
        (features dict, whether they came from the cache).
    """
    path = features.cache_path(cache_dir, source.name, split) if cache_dir else None
    key = dict(encoder=encoder_id, dataset=source.name, split=split,
               data=source.data_identity(split), image_size=image_size,
               outputs=[features.H])
    return features.cached_features(
        path, key, lambda: features.extract(strategy, model, source, split,
                                            image_size=image_size, batch_size=batch_size,
                                            extractor=extractor))


def evaluate_protocols(model, source, *, strategy=None, image_size, train_split="train",
                       test_split="test", batch_size=256, knn_k=knn.DEFAULT_K,
                       knn_temperature=knn.DEFAULT_TEMPERATURE, cache_dir=None,
                       encoder_id=None, seed=0, c_grid=probe.DEFAULT_C_GRID,
                       allow_overlap=False):
    """kNN and linear-probe top-1 of a frozen encoder on one labelled dataset.

    Args:
        model: `model(images, training=False) -> dict` with 'final_avg_pool' (h).
        source: a labelled `DatasetSource`.
        strategy: the strategy holding the model (default strategy when None).
        image_size: input size of the model (eval preprocessing resizes to it).
        train_split, test_split: the labelled splits.
        batch_size: feature-extraction batch.
        knn_k, knn_temperature: the kNN protocol.
        cache_dir: where features are cached (None: no cache).
        encoder_id: what identifies the encoder in the cache key (e.g.
            `encoder_identity(prefix)`); required for the cache to be trusted.
        seed: seed of the probe's held-out split.
        c_grid: inverse L2 strengths the probe chooses from.
        allow_overlap: accept a test split that shares examples with the training
            split (`overlap.check_disjoint`: a ValueError otherwise, before any
            feature is computed).

    Returns:
        A dict with the keys of `COLUMNS` (plus 'linear_probe_validation_accuracy',
        'linear_probe_protocol' (`probe.linear_probe`'s) and 'cached').
    """
    strategy = strategy or tf.distribute.get_strategy()
    if cache_dir and encoder_id is None:
        raise ValueError("A feature cache needs `encoder_id` (what produced the features).")
    overlap.check_disjoint(source, train_split, test_split, allow=allow_overlap,
                           what="the probe's training split and the kNN bank")
    start = time.perf_counter()
    extractor = features.FeatureExtractor(strategy, model, (features.H,))  # both splits
    train, train_cached = split_features(strategy, model, source, train_split,
                                         image_size=image_size, batch_size=batch_size,
                                         cache_dir=cache_dir, encoder_id=encoder_id,
                                         extractor=extractor)
    test, test_cached = split_features(strategy, model, source, test_split,
                                       image_size=image_size, batch_size=batch_size,
                                       cache_dir=cache_dir, encoder_id=encoder_id,
                                       extractor=extractor)
    train_x, train_y = train[features.H], train["labels"]
    test_x, test_y = test[features.H], test["labels"]
    knn_top_1 = knn.knn_accuracy(train_x, train_y, test_x, test_y, k=knn_k,
                                 temperature=knn_temperature,
                                 num_classes=source.num_classes or None)
    probe_result = probe.linear_probe(train_x, train_y, test_x, test_y, seed=seed,
                                      c_grid=c_grid)
    return dict(dataset=source.name, train_split=train_split, test_split=test_split,
                num_train=len(train_y), num_test=len(test_y),
                feature_dim=int(train_x.shape[1]), knn_top_1=knn_top_1,
                linear_probe_top_1=probe_result["top_1_accuracy"],
                linear_probe_c=probe_result["c"],
                linear_probe_validation_accuracy=probe_result["validation_accuracy"],
                linear_probe_protocol=probe_result["protocol"],
                seconds=time.perf_counter() - start, cached=train_cached and test_cached)


# How the probe and kNN rows are measured, for the records (`base.Evaluator.protocols`).
PROBE_METHOD = ("L2-regularised multinomial logistic regression (scikit-learn, L-BFGS) "
                "on frozen h, standardised with the training features' mean and "
                "deviation")
C_CHOICE = ("the C of c_grid with the best accuracy on a held-out stratified "
            "validation_fraction of the training features (ties: the smaller C), then "
            "refitted on all of them")
KNN_METHOD = ("weighted kNN on h: cosine similarity, the k most similar training "
              "examples vote exp(similarity / temperature) for their label")


def probe_protocol(evaluator, result, *, train_split, num_train):
    """The protocol fields of a probe's top-1 besides the common ones: its
    training split and the regularisation, chosen how (`probe.linear_probe`'s
    result: c, validation_accuracy, protocol)."""
    chosen = result["protocol"]
    return dict(
        method=PROBE_METHOD, features=features.H,
        train=dict(split=train_split, examples=int(num_train),
                   split_examples=int(evaluator.source.num_examples(train_split))),
        regularization=dict(c=float(result["c"]), chosen_by=C_CHOICE,
                            c_grid=chosen["c_grid"],
                            validation_fraction=chosen["validation_fraction"],
                            validation_examples=chosen["validation_examples"],
                            validation_accuracy=float(result["validation_accuracy"])),
        max_iter=chosen["max_iter"], seed=chosen["seed"])


class LinearProbeEval(base.Evaluator):
    """`evaluate_protocols` on the train split -> test split, under the record names
    of --mode=linear_probe ('linear_probe/top_1_accuracy', ..., 'knn/top_1_accuracy').

    Args (besides `base.Evaluator`'s; `seed` splits the probe's held-out part):
        train_split, test_split: the labelled splits.
        k, temperature: the kNN protocol.
        cache_dir: where features are cached (None: no cache); the cache is keyed by
            the weights of the checkpoint `run` is given (`encoder_identity`) and
            what the split's examples are (`DatasetSource.data_identity`), so weights
            in memory (checkpoint None) are never cached.
    """

    def __init__(self, strategy, *, train_split, test_split, k=knn.DEFAULT_K,
                 temperature=knn.DEFAULT_TEMPERATURE, cache_dir=None, allow_overlap=False,
                 **common):
        super().__init__(strategy, **common)
        self.train_split, self.test_split = train_split, test_split
        self.allow_overlap = allow_overlap
        self.k, self.temperature, self.cache_dir = k, temperature, cache_dir
        self._cached = False  # whether the last run's features came from the cache
        self._row = None  # the last run's `evaluate_protocols` row

    def announce(self):
        return (f"Linear probe: features of {self.train_split} and {self.test_split} "
                "(or their cache), then weighted kNN and L-BFGS logistic regression ...")

    def run(self, model, step, *, checkpoint=None):
        encoder_id = encoder_identity(checkpoint) if checkpoint else None
        row = evaluate_protocols(
            model, self.source, strategy=self.strategy, image_size=self.image_size,
            train_split=self.train_split, test_split=self.test_split,
            batch_size=self.batch_size, knn_k=self.k, knn_temperature=self.temperature,
            cache_dir=self.cache_dir if encoder_id else None, encoder_id=encoder_id,
            seed=self.seed, allow_overlap=self.allow_overlap)
        self._cached, self._row = row["cached"], row
        return {"linear_probe/top_1_accuracy": row["linear_probe_top_1"],
                "linear_probe/c": row["linear_probe_c"],
                "linear_probe/validation_accuracy": row["linear_probe_validation_accuracy"],
                "knn/top_1_accuracy": row["knn_top_1"], "linear_probe/checkpoint": checkpoint,
                "linear_probe/num_train": row["num_train"],
                "linear_probe/num_test": row["num_test"]}

    def protocols(self, values, *, step, checkpoint=None):
        row = self._row
        result = dict(c=row["linear_probe_c"], protocol=row["linear_probe_protocol"],
                      validation_accuracy=row["linear_probe_validation_accuracy"])
        probe_fields = probe_protocol(self, result, train_split=self.train_split,
                                      num_train=row["num_train"])
        held_out = probe_fields["regularization"]
        return {
            "linear_probe/top_1_accuracy": self.protocol(
                "linear_probe", self.test_split, row["num_test"], **probe_fields),
            "linear_probe/validation_accuracy": self.protocol(
                "linear_probe", self.train_split, held_out["validation_examples"],
                **dict(probe_fields, method=(
                    f"the probe of C={held_out['c']:g}, fitted on the rest of the "
                    "training features, on the held-out validation part (a stratified "
                    f"{held_out['validation_fraction']:g} of {self.train_split}, seed "
                    f"{probe_fields['seed']}): what chose C"))),
            "knn/top_1_accuracy": self.protocol(
                "linear_probe", self.test_split, row["num_test"], method=KNN_METHOD,
                features=features.H, bank=dict(
                    split=self.train_split, examples=row["num_train"],
                    split_examples=self.source.num_examples(self.train_split)),
                k=self.k, temperature=self.temperature)}

    def describe(self, values, *, step, checkpoint=None):
        return (f"Linear probe (L-BFGS logistic regression on frozen h, "
                f"C={values['linear_probe/c']:g} chosen on a held-out part of "
                f"{self.train_split}): top-1 {values['linear_probe/top_1_accuracy']:.4f} on "
                f"{self.test_split}; weighted kNN (k={self.k}) "
                f"{values['knn/top_1_accuracy']:.4f}; {values['linear_probe/num_train']} / "
                f"{values['linear_probe/num_test']} examples, features "
                f"{'cached' if self._cached else 'computed'} ({checkpoint}).")


class FinalProbeEval(base.Evaluator):
    """The paper's linear probe of the trained encoder and of a baseline encoder (a
    randomly initialised one): what pretraining bought, in one comparison.

    Args (besides `base.Evaluator`'s; `seed` splits the probe's held-out part):
        train_split, test_split: the labelled splits.
        baseline: the encoder compared with, built by the caller under the same
            strategy as the models `run` is given.

    `run(model, step)` -> {'linear_probe/pretrained', 'linear_probe/random_init'}.
    """

    def __init__(self, strategy, *, train_split, test_split, baseline, allow_overlap=False,
                 **common):
        super().__init__(strategy, **common)
        features.check_strategy_and_model(strategy, baseline)
        overlap.check_disjoint(self.source, train_split, test_split, allow=allow_overlap,
                               what="the probe's training split")
        self.train_split, self.test_split, self.baseline = train_split, test_split, baseline
        self._probes = {}  # the last run's probe result per encoder

    def announce(self):
        sizes = " and ".join(f"{self.source.num_examples(split)} {split}"
                             for split in (self.train_split, self.test_split))
        return (f"Final linear probe: features of the {sizes} examples from the trained "
                "and from a randomly initialised encoder, an L-BFGS probe on each ...")

    def run(self, model, step, *, checkpoint=None):
        results = {}
        for name, encoder in (("pretrained", model), ("random_init", self.baseline)):
            start = time.perf_counter()
            extractor = features.FeatureExtractor(self.strategy, encoder, (features.H,))
            train, test = (features.extract(self.strategy, encoder, self.source, split,
                                            image_size=self.image_size,
                                            batch_size=self.batch_size,
                                            extractor=extractor)
                           for split in (self.train_split, self.test_split))
            extracted = time.perf_counter()
            result = probe.linear_probe(train[features.H], train["labels"],
                                        test[features.H], test["labels"], seed=self.seed)
            results[f"linear_probe/{name}"] = result["top_1_accuracy"]
            self._probes[name] = dict(result, num_train=len(train["labels"]),
                                      num_test=len(test["labels"]))
            self.tell(f"  {name.replace('_', ' ')} encoder: top-1 "
                      f"{result['top_1_accuracy']:.4f} (features "
                      f"{extracted - start:.0f} s, probe {time.perf_counter() - extracted:.0f} s)")
        return results

    def protocols(self, values, *, step, checkpoint=None):
        found = {}
        for name, result in self._probes.items():
            fields = probe_protocol(self, result, train_split=self.train_split,
                                    num_train=result["num_train"])
            if name == "random_init":
                fields["checkpoint"] = dict(
                    path=None, step=0, weights="a randomly initialised encoder of the "
                    "same architecture (the run's --seed + 1): the baseline")
            found[f"linear_probe/{name}"] = self.protocol(
                "final_probe", self.test_split, result["num_test"], **fields)
        return found

    def describe(self, values, *, step, checkpoint=None):
        return (f"Linear probe (L-BFGS logistic regression on frozen h, {self.test_split}): "
                f"pretrained encoder {values['linear_probe/pretrained']:.4f} vs randomly "
                f"initialised encoder {values['linear_probe/random_init']:.4f}")


def _cell(value):
    return f"{value:.4f}" if isinstance(value, float) and value <= 1.0 else (
        f"{value:.1f}" if isinstance(value, float) else str(value))


def write_table(rows, path, *, title=None):
    """Writes `rows` (dicts with `COLUMNS`) to `path` (Markdown) and `path`.csv.

    Args:
        rows: one dict per dataset.
        path: the Markdown file; the CSV goes next to it with the suffix `.csv`.
        title: an optional heading line (e.g. the encoder).

    Returns:
        (markdown path, csv path).
    """
    if os.path.dirname(path):  # a folder that does not exist yet is made
        tf.io.gfile.makedirs(os.path.dirname(path))
    lines = [f"# {title}", ""] if title else []
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    lines += ["| " + " | ".join(_cell(row[c]) for c in COLUMNS) + " |" for row in rows]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    csv_path = os.path.splitext(path)[0] + ".csv"
    # Each whole or not at all (a full disk keeps the old table).
    files.atomic_write(path, "\n".join(lines) + "\n")
    files.atomic_write(csv_path, table.getvalue())
    return path, csv_path
