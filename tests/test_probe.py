"""The L-BFGS linear probe: a hand-worked accuracy and its choice of C."""
import numpy as np

from simclr_tf.evaluation import probe


def test_linear_probe_hand_worked_accuracy():
    rng = np.random.RandomState(0)
    centres = np.array([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]])
    train_y = np.repeat(np.arange(3), 20)
    train_x = centres[train_y] + 0.3 * rng.randn(60, 3)
    # Test points at the centres: the probe predicts 0, 1, 2, 0; the last label is
    # deliberately wrong, so the top-1 is exactly 3/4.
    test_x, test_y = centres[[0, 1, 2, 0]], np.array([0, 1, 2, 1])
    result = probe.linear_probe(train_x, train_y, test_x, test_y, c_grid=(0.1, 1.0))
    assert result["top_1_accuracy"] == 0.75
    assert result["validation_accuracy"] == 1.0
    assert result["c"] == 0.1  # ties go to the stronger regularisatio


def _overlapping_classes(seed=0, n=600, dims=12, classes=4):
    rng = np.random.RandomState(seed)
    y = np.arange(n) % classes
    x = rng.randn(classes, dims)[y] * 0.8 + rng.randn(n, dims)
    return x, y


def test_the_warm_started_path_finds_what_cold_fits_find():
    """Each C of the grid fitted from the previous solution (and the refit from the
    chosen one's) reaches the optimum a cold scikit-learn fit reaches: the same C, the
    same validation accuracies, the same test predictions."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    x, y = _overlapping_classes()
    test_x, test_y = _overlapping_classes(seed=1, n=300)
    grid = (0.001, 0.01, 0.1, 1.0, 10.0)
    result = probe.linear_probe(x, y, test_x, test_y, c_grid=grid, seed=0)

    scaler = StandardScaler().fit(x)
    sx, stest = scaler.transform(x), scaler.transform(test_x)
    fit_x, val_x, fit_y, val_y = train_test_split(sx, y, test_size=0.2, random_state=0,
                                                  stratify=y)
    with threadpool_limits(limits=1):
        cold = {c: LogisticRegression(C=c, max_iter=5000, tol=1e-10).fit(fit_x, fit_y)
                .score(val_x, val_y) for c in grid}
        best = max(grid, key=lambda c: (cold[c], -c))
        reference = LogisticRegression(C=best, max_iter=5000, tol=1e-10).fit(sx, y)
    assert result["c"] == best
    assert result["validation_accuracy"] == cold[best]
    assert result["top_1_accuracy"] == reference.score(stest, test_y)


def test_the_probe_fits_on_one_blas_thread(monkeypatch):
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_info

    seen = []
    fit = LogisticRegression.fit

    def recording_fit(self, *args, **kwargs):
        seen.append({pool["num_threads"] for pool in threadpool_info()
                     if pool["internal_api"] in ("openblas", "mkl", "blis")})
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(LogisticRegression, "fit", recording_fit)
    x, y = _overlapping_classes(n=200)
    probe.linear_probe(x, y, x[:50], y[:50], c_grid=(0.1, 1.0))
    assert len(seen) == 3  # two strengths and the refit
    assert all(threads <= {probe.BLAS_THREADS} for threads in seen)
