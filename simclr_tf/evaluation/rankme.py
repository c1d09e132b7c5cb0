"""RankMe: the effective rank of a feature matrix, a collapse monitor.

Garrido, Balestriero, Najman, LeCun, "RankMe: Assessing the downstream performance of
pretrained self-supervised representations by their rank" (ICML 2023, arXiv:2210.02885),
eq. 1-2: with sigma the singular values of the features Z [N, D] (not centred),

    p_k = sigma_k / ||sigma||_1 + eps,    RankMe(Z) = exp(-sum_k p_k log p_k),

eps = 1e-7 (the paper's, for float32 features). It is about 1 for a collapsed encoder
(every h the same direction), about D for features spread evenly over all D
dimensions, and about r for features in an r-dimensional subspace; it needs no labels,
and the paper finds it tracks downstream accuracy within a method. The kNN monitor
(`simclr_tf.evaluation.knn.KnnEval`) reports it over its bank's h as `knn/rankme`.

Pure numpy: `rankme(features)`.
"""
import numpy as np

EPSILON = 1e-7


def singular_values(features):
    """The singular values of `features` [N, D], descending, float64 [min(N, D)].

    From the eigenvalues of the smaller Gram matrix (Z^T Z or Z Z^T) in float64: a
    few times faster than an SVD of a 10,000 x 2,048 bank, and as exact where it
    matters here (a singular value below ~1e-8 of the largest reads as ~0, far
    under what eps lets count)."""
    z = np.asarray(features, np.float64)
    if z.ndim != 2 or 0 in z.shape:
        raise ValueError("features must be a non-empty 2-D array [examples, dims]. "
                         f"Received shape: {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("features must be finite (NaN or infinite values found).")
    gram = z.T @ z if z.shape[0] >= z.shape[1] else z @ z.T
    eigenvalues = np.linalg.eigvalsh(gram)[::-1]
    return np.sqrt(np.clip(eigenvalues, 0.0, None))


def rankme(features, *, epsilon=EPSILON):
    """RankMe of `features` [N, D] (module docstring): a float in [1, min(N, D)]
    up to eps, or 0.0 for an all-zero matrix (no direction at all).

    Args:
        features: the representations, e.g. h of the kNN bank, one row per example.
        epsilon: added to each normalised singular value (the paper's 1e-7).
    """
    sigma = singular_values(features)
    total = sigma.sum()
    if total == 0.0:
        return 0.0
    p = sigma / total + epsilon
    return float(np.exp(-np.sum(p * np.log(p))))
