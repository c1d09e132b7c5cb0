"""Linear probe on frozen features: the paper's L-BFGS logistic regression.

Features are extracted once (inference mode, `simclr_tf.evaluation.features.extract`)
and a multinomial L2-regularised logistic regression is fitted with scikit-learn's
L-BFGS; the regularisation strength is chosen on a held-out part of the training
features, then the probe is refitted on all of them.

Two things keep it fast without changing what it computes: the strengths are fitted
from the strongest regularisation to the weakest, each starting from the previous
solution (and the final refit from the chosen one's), and the fits run on one BLAS
thread. Measured (docs/performance.md, "The linear probe"): on a loaded 2-core machine
OpenBLAS's two threads made each L-BFGS iteration ~18x slower than one thread, and a
random encoder's features took 1,000 cold iterations at C = 10 where the warm start
needs fewer.
"""
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

# Inverse regularisation strengths tried (scikit-learn's C = 1 / lambda).
DEFAULT_C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
# The probe's products are small (examples x features x classes): one thread is as fast
# on an idle machine and far faster when another job holds a core.
BLAS_THREADS = 1


def _probe(c, max_iter, seed, start=None):
    """An L-BFGS logistic regression; `start` (coef, intercept) warm-starts it."""
    probe = LogisticRegression(C=c, solver="lbfgs", max_iter=max_iter, random_state=seed,
                               warm_start=start is not None)
    if start is not None:
        probe.coef_, probe.intercept_ = (np.array(a, copy=True) for a in start)
    return probe


def _solution(probe):
    return probe.coef_.copy(), probe.intercept_.copy()


def linear_probe(train_x, train_y, test_x, test_y, *, c_grid=DEFAULT_C_GRID,
                 validation_fraction=0.2, max_iter=1000, seed=0):
    """Fits the probe on train features and returns its test top-1 accuracy.

    Args:
        train_x, train_y: training features [N, D] and int labels [N].
        test_x, test_y: test features and labels.
        c_grid: inverse L2 strengths to choose from on the held-out part.
        validation_fraction: share of the training features held out to choose C.
        max_iter: L-BFGS iterations.
        seed: split and solver seed.

    Returns:
        dict(top_1_accuracy, c, validation_accuracy, and how they were measured:
        protocol=dict(c_grid, validation_fraction, validation_examples,
        max_iter, seed)).
    """
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError("Features and labels must have the same length. Received: "
                         f"{len(train_x)} / {len(train_y)} train, {len(test_x)} / "
                         f"{len(test_y)} test.")
    scaler = StandardScaler().fit(train_x)
    train_x, test_x = scaler.transform(train_x), scaler.transform(test_x)
    fit_x, val_x, fit_y, val_y = train_test_split(
        train_x, train_y, test_size=validation_fraction, random_state=seed,
        stratify=train_y)
    scores, solutions, start = {}, {}, None
    with threadpool_limits(limits=BLAS_THREADS):
        for c in sorted(c_grid):
            probe = _probe(c, max_iter, seed, start).fit(fit_x, fit_y)
            scores[c], solutions[c] = probe.score(val_x, val_y), _solution(probe)
            start = solutions[c]
        best_c = max(c_grid, key=lambda c: (scores[c], -c))  # ties: stronger regularisation
        probe = _probe(best_c, max_iter, seed, solutions[best_c]).fit(train_x, train_y)
    return dict(top_1_accuracy=float(probe.score(test_x, test_y)), c=best_c,
                validation_accuracy=float(scores[best_c]),
                protocol=dict(c_grid=[float(c) for c in c_grid],
                              validation_fraction=float(validation_fraction),
                              validation_examples=len(val_y), max_iter=int(max_iter),
                              seed=seed))
