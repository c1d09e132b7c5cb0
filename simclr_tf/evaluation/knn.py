"""Weighted k-nearest-neighbour classification on frozen features (the kNN monitor).

The protocol common in the self-supervised literature (Wu et al. 2018, InstDisc; used
by MoCo, DINO, lightly, solo-learn): features are L2-normalised, each query takes the
`k` bank examples of highest cosine similarity s, each neighbour votes for its label
with weight exp(s / temperature), and the class with the largest summed vote wins
(ties go to the smallest class id). Top-1 accuracy is the share of queries whose
winner is their label.

`knn_predict` / `knn_accuracy` are pure functions of arrays (numpy in, numpy out, TF
ops inside, queries in chunks so memory stays [chunk, bank]). `KnnEval` runs the
protocol during pretraining (the kNN monitor): bank and query features are computed under the training
strategy with every replica's features gathered (`simclr_tf.evaluation.features`), so the
result does not depend on the number of replicas. With the accuracy it reports RankMe
of the bank's h (`simclr_tf.evaluation.rankme`), which needs no labels: a collapse
shows as a value near 1.

Example:
>>> knn_accuracy(bank_h, bank_labels, query_h, query_labels, k=200, temperature=0.07)
0.93
"""
import time

import numpy as np
import tensorflow as tf

from simclr_tf.config import rules
from simclr_tf.evaluation import base, features, overlap, rankme
from simclr_tf.models.outputs import H

DEFAULT_K = 200
DEFAULT_TEMPERATURE = 0.07


def _check(bank_features, bank_labels, query_features, k, temperature):
    bank_features = np.asarray(bank_features, np.float32)
    query_features = np.asarray(query_features, np.float32)
    bank_labels = np.asarray(bank_labels, np.int64).reshape(-1)
    if bank_features.ndim != 2 or query_features.ndim != 2:
        raise ValueError("Features must be 2-D [examples, dims]. Received shapes: bank "
                         f"{bank_features.shape}, queries {query_features.shape}")
    if bank_features.shape[1] != query_features.shape[1]:
        raise ValueError("Bank and query features must have the same width. Received: "
                         f"{bank_features.shape[1]} vs {query_features.shape[1]}")
    if len(bank_features) != len(bank_labels) or len(bank_labels) == 0:
        raise ValueError("The bank needs one label per feature row and at least one row. "
                         f"Received: {len(bank_features)} rows, {len(bank_labels)} labels")
    if bank_labels.min() < 0:
        raise ValueError("Bank labels must be class ids >= 0 (an unlabelled split cannot "
                         "be a kNN bank).")
    rules.check_knn_k(k)
    rules.check_knn_temperature(temperature)
    return bank_features, bank_labels, query_features


def knn_scores(bank_features, bank_labels, query_features, *, k=DEFAULT_K,
               temperature=DEFAULT_TEMPERATURE, num_classes=None, chunk_size=1024):
    """Summed neighbour votes per class: float32 [queries, num_classes].

    Args:
        bank_features: [N, D] features of the labelled bank (need not be normalised).
        bank_labels: [N] int class ids >= 0.
        query_features: [Q, D] features to classify.
        k: neighbours per query (at most N are used).
        temperature: votes are exp(cosine similarity / temperature).
        num_classes: number of classes (default: max label + 1).
        chunk_size: queries per similarity matrix (bounds memory to chunk x N).
    """
    bank, labels, queries = _check(bank_features, bank_labels, query_features, k,
                                   temperature)
    num_classes = int(num_classes or labels.max() + 1)
    k = min(int(k), len(bank))
    bank = tf.math.l2_normalize(tf.constant(bank), axis=1)
    label_table = tf.constant(labels)
    scores = []
    for start in range(0, len(queries), chunk_size):
        chunk = tf.math.l2_normalize(tf.constant(queries[start:start + chunk_size]), axis=1)
        similarity = tf.matmul(chunk, bank, transpose_b=True)        # [q, N] cosines
        top_sim, top_index = tf.math.top_k(similarity, k=k)           # [q, k]
        weights = tf.exp(top_sim / temperature)                       # [q, k]
        votes = tf.one_hot(tf.gather(label_table, top_index), num_classes)  # [q, k, C]
        scores.append(tf.einsum("qk,qkc->qc", weights, votes).numpy())
    if not scores:
        return np.zeros([0, num_classes], np.float32)
    return np.concatenate(scores)


def knn_predict(bank_features, bank_labels, query_features, **kwargs):
    """Predicted class per query, int64 [Q] (arguments as `knn_scores`)."""
    return np.argmax(knn_scores(bank_features, bank_labels, query_features, **kwargs),
                     axis=1).astype(np.int64)


def knn_accuracy(bank_features, bank_labels, query_features, query_labels, **kwargs):
    """Weighted kNN top-1 accuracy over the labelled queries (label >= 0).

    Arguments as `knn_scores`, plus `query_labels` [Q].
    """
    query_labels = np.asarray(query_labels, np.int64).reshape(-1)
    if len(query_labels) != len(query_features):
        raise ValueError("One label per query is needed. Received: "
                         f"{len(query_features)} queries, {len(query_labels)} labels")
    labelled = query_labels >= 0
    if not labelled.any():
        raise ValueError("No labelled query (every label is -1).")
    predicted = knn_predict(bank_features, bank_labels,
                            np.asarray(query_features)[labelled], **kwargs)
    return float(np.mean(predicted == query_labels[labelled]))


class KnnEval(base.Evaluator):
    """Weighted kNN top-1 of h, under the strategy that holds the model: the kNN
    monitor of pretraining (`simclr_tf.evaluation.base` interface).

    The datasets are fixed at construction (deterministic stratified subsets of at most
    `max_bank` / `max_queries` examples), so every evaluation of a run sees the same
    examples and its cost is bounded and comparable.

    Args (besides `base.Evaluator`'s; `seed` draws the subsets):
        bank_split: labelled split whose features form the bank (eval-preprocessed).
        query_split: labelled split that is classified.
        k, temperature: the protocol (see module docstring).
        max_bank, max_queries: at most this many examples (0 = all).
        allow_overlap: accept a bank split that shares examples with the query split
            (`overlap.check_disjoint`: a ValueError otherwise, since a query would find
            itself).

    `run(model, step)` -> {'knn/top_1_accuracy', 'knn/rankme' (RankMe of the bank's
    h: ~1 when the encoder collapsed, up to the width of h), 'knn/seconds',
    'knn/global_step'}.
    """

    def __init__(self, strategy, *, bank_split, query_split, k=DEFAULT_K,
                 temperature=DEFAULT_TEMPERATURE, max_bank=10_000, max_queries=10_000,
                 allow_overlap=False, **common):
        super().__init__(strategy, **common)
        rules.check_knn_k(k)
        rules.check_knn_temperature(temperature)
        for name, value in (("max_bank", max_bank), ("max_queries", max_queries)):
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{name} must be an int >= 0. Received: {name}={value!r}")
        self.k, self.temperature = int(k), float(temperature)
        self.bank_split, self.query_split = bank_split, query_split
        overlap.check_disjoint(self.source, bank_split, query_split, what="the kNN bank",
                               allow=allow_overlap)
        self.bank_ids = features.bounded_ids(self.source, bank_split, max_bank,
                                             seed=self.seed)
        self.query_ids = features.bounded_ids(self.source, query_split, max_queries,
                                              seed=self.seed)
        # The extraction checks that exactly these many examples come out.
        self.bank_size = self._size(bank_split, self.bank_ids)
        self.num_queries = self._size(query_split, self.query_ids)
        self._extractor = None
        self.feature_dim = None  # the width of h, known after a run

    def _size(self, split, ids):
        return self.source.num_examples(split) if ids is None else len(ids)

    def _features(self, split, ids):
        dataset = features.eval_dataset(self.source, split, image_size=self.image_size,
                                        batch_size=self.batch_size, example_ids=ids)
        return self._extractor(dataset, batch_size=self.batch_size,
                               expected=self._size(split, ids))

    def run(self, model, step, *, checkpoint=None):
        if self._extractor is None or self._extractor.model is not model:
            # One extractor per model: its compiled step is traced once per run.
            self._extractor = features.FeatureExtractor(self.strategy, model)
        start = time.perf_counter()
        bank = self._features(self.bank_split, self.bank_ids)
        queries = self._features(self.query_split, self.query_ids)
        accuracy = knn_accuracy(bank[H], bank["labels"],
                                queries[H], queries["labels"], k=self.k,
                                temperature=self.temperature,
                                num_classes=self.source.num_classes or None)
        self.feature_dim = int(bank[H].shape[1])
        return {"knn/top_1_accuracy": accuracy, "knn/rankme": rankme.rankme(bank[H]),
                "knn/seconds": time.perf_counter() - start, "knn/global_step": step}

    def _sample(self, ids):
        return None if ids is None else (
            f"a fixed stratified sample (seed {self.seed}) of the split")

    def protocols(self, values, *, step, checkpoint=None):
        bank = dict(split=self.bank_split, examples=self.bank_size,
                    split_examples=self.source.num_examples(self.bank_split),
                    sample=self._sample(self.bank_ids))
        return {
            "knn/top_1_accuracy": self.protocol(
                "knn", self.query_split, self.num_queries, method=(
                    "weighted kNN on h: cosine similarity, the k most similar bank "
                    "examples vote exp(similarity / temperature) for their label"),
                features=H, sample=self._sample(self.query_ids), bank=bank, k=self.k,
                temperature=self.temperature),
            "knn/rankme": self.protocol(
                "knn", self.bank_split, self.bank_size, method=(
                    "RankMe (Garrido et al. 2023): exp of the entropy of h's singular "
                    "values normalised to sum 1, plus epsilon; h not centred"),
                features=H, sample=bank["sample"], epsilon=rankme.EPSILON,
                feature_dim=self.feature_dim)}

    def describe(self, values, *, step, checkpoint=None):
        return (f"kNN at step {step}: top-1 {values['knn/top_1_accuracy']:.4f} on "
                f"{self.query_split} ({self.num_queries} queries, bank of "
                f"{self.bank_size} from {self.bank_split}, k={self.k}, "
                f"T={self.temperature:g}); RankMe {values['knn/rankme']:.1f} of "
                f"{self.feature_dim} dims; in {values['knn/seconds']:.1f} s")
