"""NT-Xent and the supervised loss against independent references.

The numpy reference is written the textbook way (one 2N x 2N similarity matrix, the
diagonal removed, each of the 2N views picks its partner), not with the reference's
four blocks, so agreeing with it checks the block bookkeeping too.
"""
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.method import losses
from simclr_tf.method.objectives import pair_losses


def _normalise(x):
    # tf.math.l2_normalize: x / sqrt(max(sum(x^2), 1e-12)).
    return x / np.sqrt(np.maximum(np.sum(x * x, axis=1, keepdims=True), 1e-12))


def _logsumexp(x, axis):
    top = np.max(x, axis=axis, keepdims=True)
    return (top + np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True))).squeeze(axis)


def numpy_nt_xent(z1, z2, temperature, hidden_norm=True):
    """Sum over the 2N views of -log softmax(partner) / N, in float64."""
    z1, z2 = np.float64(z1), np.float64(z2)
    n = len(z1)
    z = np.concatenate([z1, z2])
    if hidden_norm:
        z = _normalise(z)
    sim = z @ z.T / temperature
    np.fill_diagonal(sim, -np.inf)
    partner = (np.arange(2 * n) + n) % (2 * n)
    per_view = _logsumexp(sim, axis=1) - sim[np.arange(2 * n), partner]
    return per_view.sum() / n


def numpy_contrast_metrics(z1, z2, temperature, hidden_norm=True):
    z1, z2 = np.float64(z1), np.float64(z2)
    if hidden_norm:
        z1, z2 = _normalise(z1), _normalise(z2)
    logits = z1 @ z2.T / temperature
    acc = np.mean(np.argmax(logits, axis=1) == np.arange(len(z1)))
    p = np.exp(logits - _logsumexp(logits, axis=1)[:, None])
    entropy = np.mean(-np.sum(p * np.log(p), axis=1))
    return acc, entropy


def tf64_nt_xent(z1, z2, temperature, hidden_norm=True):
    """A float64 TensorFlow version (for autodiff gradients), textbook formulation."""
    n = tf.shape(z1)[0]
    z = tf.concat([z1, z2], 0)
    if hidden_norm:
        z = z / tf.sqrt(tf.maximum(tf.reduce_sum(z * z, 1, keepdims=True), 1e-12))
    sim = tf.matmul(z, z, transpose_b=True) / temperature
    sim = tf.where(tf.eye(2 * n, dtype=tf.bool), tf.constant(-np.inf, sim.dtype), sim)
    partner = (tf.range(2 * n) + n) % (2 * n)
    log_p = tf.nn.log_softmax(sim, axis=1)
    return -tf.reduce_sum(tf.gather(log_p, partner, batch_dims=1)) / tf.cast(n, z.dtype)


def _embeddings(n, d, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    z1 = rng.normal(size=(n, d)) * scale
    z2 = z1 + rng.normal(size=(n, d)) * 0.5 * scale  # positives are similar
    return z1.astype(np.float32), z2.astype(np.float32)


@pytest.mark.parametrize("n", [1, 3, 8, 32])
@pytest.mark.parametrize("temperature", [0.05, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("hidden_norm", [True, False])
def test_loss_equals_numpy(n, temperature, hidden_norm):
    # Without normalisation keep the logits moderate so float32 compares at 1e-5.
    z1, z2 = _embeddings(n, 16, seed=n, scale=1.0 if hidden_norm else 0.3)
    out = losses.nt_xent(tf.constant(z1), tf.constant(z2), temperature=temperature,
                         hidden_norm=hidden_norm)
    expected = numpy_nt_xent(z1, z2, temperature, hidden_norm)
    np.testing.assert_allclose(out.loss.numpy(), expected, rtol=2e-5, atol=2e-5)
    assert out.loss.dtype == tf.float32
    np.testing.assert_array_equal(out.labels.numpy(), np.arange(n))
    acc, entropy = numpy_contrast_metrics(z1, z2, temperature, hidden_norm)
    np.testing.assert_allclose(losses.contrast_acc(out).numpy(), acc, atol=1e-7)
    np.testing.assert_allclose(losses.contrast_entropy(out).numpy(), entropy,
                               rtol=1e-4, atol=1e-5)


def test_loss_is_sum_of_both_directions_known_value():
    # Orthonormal, perfectly aligned pairs, n = 2, temperature 1: every view has
    # positive similarity 1 and negatives 0 (two of them), so each direction costs
    # -log(e / (e + 2)) and the loss is twice that.
    z = np.eye(4, dtype=np.float32)[:2]
    out = losses.nt_xent(tf.constant(z), tf.constant(z), temperature=1.0)
    np.testing.assert_allclose(out.loss.numpy(), 2 * -np.log(np.e / (np.e + 2)), rtol=1e-6)


@pytest.mark.parametrize("n,temperature,hidden_norm", [
    (2, 0.1, True), (5, 0.5, True), (6, 0.2, False), (8, 0.01, True)])
def test_gradients_equal_float64_reference(n, temperature, hidden_norm):
    z1, z2 = _embeddings(n, 8, seed=10 + n, scale=1.0 if hidden_norm else 0.3)
    a, b = tf.Variable(z1), tf.Variable(z2)
    with tf.GradientTape() as tape:
        loss = losses.nt_xent(a, b, temperature=temperature, hidden_norm=hidden_norm).loss
    grads = tape.gradient(loss, [a, b])
    a64, b64 = tf.Variable(np.float64(z1)), tf.Variable(np.float64(z2))
    with tf.GradientTape() as tape:
        loss64 = tf64_nt_xent(a64, b64, temperature, hidden_norm)
    expected = tape.gradient(loss64, [a64, b64])
    scale = max(np.abs(expected[0].numpy()).max(), 1.0)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-5 * scale, rtol=1e-4)


def test_gradients_equal_numpy_finite_differences():
    z1, z2 = _embeddings(3, 4, seed=7)
    a, b = tf.Variable(z1), tf.Variable(z2)
    with tf.GradientTape() as tape:
        loss = losses.nt_xent(a, b, temperature=0.3).loss
    grad_a, grad_b = (g.numpy() for g in tape.gradient(loss, [a, b]))
    eps = 1e-6
    for which, grad in ((0, grad_a), (1, grad_b)):
        numeric = np.zeros_like(grad, dtype=np.float64)
        for index in np.ndindex(grad.shape):
            pair = [np.float64(z1), np.float64(z2)]
            plus, minus = pair[which].copy(), pair[which].copy()
            plus[index] += eps
            minus[index] -= eps
            args_plus = (plus, pair[1]) if which == 0 else (pair[0], plus)
            args_minus = (minus, pair[1]) if which == 0 else (pair[0], minus)
            numeric[index] = (numpy_nt_xent(*args_plus, 0.3)
                              - numpy_nt_xent(*args_minus, 0.3)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, atol=5e-5, rtol=1e-3)


def test_stable_at_temperature_0_01():
    z1, z2 = _embeddings(16, 32, seed=3, scale=10.0)
    a, b = tf.Variable(z1), tf.Variable(z2)
    with tf.GradientTape() as tape:
        out = losses.nt_xent(a, b, temperature=0.01)
    grads = tape.gradient(out.loss, [a, b])
    assert np.isfinite(out.loss.numpy())
    np.testing.assert_allclose(out.loss.numpy(), numpy_nt_xent(z1, z2, 0.01), rtol=1e-5)
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)
    assert np.isfinite(losses.contrast_entropy(out).numpy())
    # Unnormalised large projections: logits in the thousands must still not overflow.
    out = losses.nt_xent(tf.constant(z1), tf.constant(z2), temperature=0.01,
                         hidden_norm=False)
    np.testing.assert_allclose(out.loss.numpy(),
                               numpy_nt_xent(z1, z2, 0.01, hidden_norm=False), rtol=1e-5)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_low_precision_inputs_computed_in_float32(dtype):
    # Unrelated views, so the loss at temperature 0.01 is large and informative.
    z1, _ = _embeddings(8, 16, seed=5)
    z2, _ = _embeddings(8, 16, seed=6)
    a = tf.Variable(tf.cast(z1, dtype))
    b = tf.Variable(tf.cast(z2, dtype))
    with tf.GradientTape() as tape:
        out = losses.nt_xent(a, b, temperature=0.01)
    grads = tape.gradient(out.loss, [a, b])
    assert out.loss.dtype == tf.float32 and out.logits_ab.dtype == tf.float32
    # Same value as float64 on the rounded inputs: nothing is lost after the cast.
    rounded = [tf.cast(v, tf.float64).numpy() for v in (a, b)]
    np.testing.assert_allclose(out.loss.numpy(), numpy_nt_xent(*rounded, 0.01), rtol=1e-5)
    assert grads[0].dtype == dtype
    assert all(np.all(np.isfinite(tf.cast(g, tf.float32).numpy())) for g in grads)


def test_own_view_is_masked_even_when_it_is_the_closest():
    # z2 orthogonal to z1: the most similar candidate of each anchor is itself
    # (similarity 1), which must not count; each anchor has no positive signal.
    z1 = np.eye(4, dtype=np.float32)[:2]
    z2 = np.eye(4, dtype=np.float32)[2:]
    out = losses.nt_xent(tf.constant(z1), tf.constant(z2), temperature=0.1)
    np.testing.assert_allclose(out.loss.numpy(), numpy_nt_xent(z1, z2, 0.1), rtol=1e-6)
    # 3 candidates, all at similarity 0: -log(1/3) per direction.
    np.testing.assert_allclose(out.loss.numpy(), 2 * np.log(3), rtol=1e-6)


def test_bad_arguments():
    z = tf.zeros([4, 3])
    with pytest.raises(ValueError, match="temperature=0"):
        losses.nt_xent(z, z, temperature=0)
    with pytest.raises(ValueError, match="z1.shape"):
        losses.nt_xent(z, tf.zeros([4, 5]), temperature=0.1)
    with pytest.raises(ValueError, match="k=0"):
        losses.top_k_correct(tf.zeros([2], tf.int32), tf.zeros([2, 3]), 0)


def test_supervised_loss_masks_unlabelled():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4)).astype(np.float32)
    labels = np.array([2, -1, 0, 3, -1, 1], np.int32)
    got = losses.supervised_loss(tf.constant(labels), tf.constant(logits)).numpy()
    log_p = logits - _logsumexp(np.float64(logits), axis=1)[:, None]
    keep = labels >= 0
    expected = -np.mean(log_p[keep, labels[keep]])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # NaN logits of an unlabelled example must not leak into the loss.
    logits[1] = np.nan
    np.testing.assert_allclose(
        losses.supervised_loss(tf.constant(labels), tf.constant(logits)).numpy(),
        expected, rtol=1e-6)
    none = losses.supervised_loss(tf.fill([3], -1), tf.constant(logits[:3]))
    assert none.numpy() == 0.0


def test_top_1_of_tied_logits_is_the_argmax_not_every_tie():
    """A zero-initialised head (all logits 0): top-1 is argmax == label (class 0 wins
    the tie), as the authors' accuracy; in_top_k counted all 4 correct (it showed
    supervised_acc 1 at a fine-tune's first step)."""
    labels = tf.constant([0, 1, 2, -1])
    assert losses.top_k_correct(labels, tf.zeros([4, 10]), 1).numpy() == 1.0
    assert losses.top_k_correct(labels, tf.zeros([4, 10]), 5).numpy() == 3.0


def test_top_k_correct():
    logits = tf.constant([[0.1, 0.9, 0.0], [0.8, 0.1, 0.3], [0.2, 0.3, 0.5],
                          [0.9, 0.0, 0.1]])
    labels = tf.constant([1, 2, 0, -1])
    assert losses.top_k_correct(labels, logits, 1).numpy() == 1.0  # only row 0
    assert losses.top_k_correct(labels, logits, 2).numpy() == 2.0  # rows 0 and 1
    # k above the number of classes is clipped: every labelled example is a hit.
    assert losses.top_k_correct(labels, logits, 5).numpy() == 3.0


def _pair_reference(z1, z2, per_anchor, hidden_norm=True):
    """numpy: each anchor of each direction, its positive and its 2n - 2 negatives."""
    if hidden_norm:
        z1 = z1 / np.linalg.norm(z1, axis=1, keepdims=True)
        z2 = z2 / np.linalg.norm(z2, axis=1, keepdims=True)
    n = len(z1)
    total = 0.0
    for anchors, others in ((z1, z2), (z2, z1)):
        for i in range(n):
            positive = anchors[i] @ others[i]
            negatives = [anchors[i] @ others[j] for j in range(n) if j != i] + [
                anchors[i] @ anchors[j] for j in range(n) if j != i]
            total += per_anchor(positive, np.array(negatives))
    return total / n


@pytest.mark.parametrize("hidden_norm", [True, False])
def test_the_papers_table_2_losses_equal_numpy(hidden_norm):
    """NT-Logistic and margin triplet (the loss study's alternatives to NT-Xent)."""
    rng = np.random.default_rng(5)
    z1, z2 = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    log_sigmoid = lambda x: -np.logaddexp(0.0, -x)  # noqa: E731
    t, m = 0.3, 0.4
    logistic = pair_losses.nt_logistic(tf.constant(z1, tf.float32), tf.constant(z2, tf.float32),
                                  temperature=t, hidden_norm=hidden_norm)
    expected = _pair_reference(z1, z2, lambda p, neg: -log_sigmoid(p / t) - np.mean(
        log_sigmoid(-neg / t)), hidden_norm)
    np.testing.assert_allclose(logistic.loss.numpy(), expected, rtol=2e-5)
    triplet = pair_losses.margin_triplet(tf.constant(z1, tf.float32), tf.constant(z2, tf.float32),
                                    margin=m, hidden_norm=hidden_norm)
    expected = _pair_reference(z1, z2, lambda p, neg: np.mean(np.maximum(neg - p + m, 0)),
                               hidden_norm)
    np.testing.assert_allclose(triplet.loss.numpy(), expected, rtol=2e-5)
    # Their contrast accuracy reads the same similarities as NT-Xent's.
    xent = losses.nt_xent(tf.constant(z1, tf.float32), tf.constant(z2, tf.float32),
                          temperature=t, hidden_norm=hidden_norm)
    np.testing.assert_allclose(logistic.logits_ab, xent.logits_ab, rtol=1e-6)
    assert float(losses.contrast_acc(triplet)) == float(losses.contrast_acc(xent))
    for margin in (0, float("inf"), float("nan")):  # inf made the loss NaN
        with pytest.raises(ValueError, match="margin must be a finite number > 0"):
            pair_losses.margin_triplet(tf.constant(z1, tf.float32), tf.constant(z2, tf.float32),
                                  margin=margin)
