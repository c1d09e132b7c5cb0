"""The fused BatchNormalization against numpy and against Keras' own layer."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.models import layers

EPS = 1e-5


def numpy_bn(x, gamma, beta, mean=None, var=None):
    """Reference: batch statistics (biased variance) unless mean/var are given."""
    axes = tuple(range(x.ndim - 1))
    if mean is None:
        mean, var = x.mean(axes), x.var(axes)
    return (x - mean) / np.sqrt(var + EPS) * gamma + beta, mean, var


def numpy_bn_grads(x, gamma, dy):
    """Closed-form gradients of sum(y * dy) w.r.t. x, gamma and beta (training)."""
    axes = tuple(range(x.ndim - 1))
    n = np.prod([x.shape[a] for a in axes])
    mean, var = x.mean(axes), x.var(axes)
    xhat = (x - mean) / np.sqrt(var + EPS)
    dgamma, dbeta = (dy * xhat).sum(axes), dy.sum(axes)
    dx = gamma / np.sqrt(var + EPS) * (dy - dbeta / n - xhat * dgamma / n)
    return dx, dgamma, dbeta


def assert_batch_statistics(layer, x, y, gamma, beta, moving_mean, moving_var):
    """`y` normalised by the batch's statistics, and the moving averages updated with
    the biased batch variance (as Keras' layer does) from `moving_mean`/`moving_var`."""
    want, mean, var = numpy_bn(x.astype(np.float64), gamma, beta)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.9 * moving_mean + 0.1 * mean,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.9 * moving_var + 0.1 * var,
                               rtol=1e-6, atol=1e-6)


def make_layer(shape, cls=layers.BatchNormalization, **kwargs):
    layer = cls(axis=-1, momentum=0.9, epsilon=EPS, **kwargs)
    layer.build(shape)
    rng = np.random.default_rng(1)
    if layer.scale:
        layer.gamma.assign(rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32))
    if layer.center:
        layer.beta.assign(rng.normal(size=shape[-1]).astype(np.float32))
    layer.moving_mean.assign(rng.normal(size=shape[-1]).astype(np.float32))
    layer.moving_variance.assign(rng.uniform(0.5, 2.0, shape[-1]).astype(np.float32))
    return layer


def params(layer, channels):
    gamma = layer.gamma.numpy() if layer.scale else np.ones(channels, np.float32)
    beta = layer.beta.numpy() if layer.center else np.zeros(channels, np.float32)
    return gamma.astype(np.float64), beta.astype(np.float64)


@pytest.mark.parametrize("shape", [(6, 5, 4, 3), (7, 9)])
@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False)])
def test_training_output_statistics_and_gradients_equal_numpy(shape, center, scale):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=shape) * 3 + 2).astype(np.float32)
    dy = rng.normal(size=shape).astype(np.float32)
    layer = make_layer(shape, center=center, scale=scale)
    gamma, beta = params(layer, shape[-1])
    moving_mean, moving_var = layer.moving_mean.numpy(), layer.moving_variance.numpy()

    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = layer(xt, training=True)
        objective = tf.reduce_sum(y * dy)
    grads = tape.gradient(objective, [xt] + layer.trainable_variables)

    assert_batch_statistics(layer, x, y, gamma, beta, moving_mean, moving_var)
    dx, dgamma, dbeta = numpy_bn_grads(x.astype(np.float64), gamma, dy.astype(np.float64))
    np.testing.assert_allclose(grads[0].numpy(), dx, rtol=1e-4, atol=1e-5)
    expected = ([dgamma] if scale else []) + ([dbeta] if center else [])
    assert len(grads) == 1 + len(expected)
    for got, ref in zip(grads[1:], expected):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(6, 5, 4, 3), (7, 9)])
def test_inference_and_frozen_layers_use_the_moving_statistics(shape):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    layer = make_layer(shape)
    gamma, beta = params(layer, shape[-1])
    mean, var = layer.moving_mean.numpy(), layer.moving_variance.numpy()
    want, _, _ = numpy_bn(x.astype(np.float64), gamma, beta, mean, var)
    np.testing.assert_allclose(layer(x, training=False).numpy(), want, rtol=1e-5, atol=1e-5)
    layer.trainable = False
    np.testing.assert_allclose(layer(x, training=True).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(layer.moving_mean.numpy(), mean)


@pytest.mark.parametrize("keras_ops", [False, True], ids=["fused", "keras_batch_norm"])
def test_a_frozen_layer_with_batch_statistics_normalises_and_updates_as_the_authors(keras_ops):
    """`frozen_batch_statistics` (--frozen_batch_norm=batch, the authors' frozen
    blocks): not trainable, yet batch statistics in training and moving averages
    updated; gamma and beta get no gradient. The fused kernel and Keras' ops agree."""
    shape = (6, 5, 4, 3)
    rng = np.random.default_rng(0)
    x = (rng.normal(size=shape) * 3 + 2).astype(np.float32)
    layer = make_layer(shape)
    gamma, beta = params(layer, shape[-1])
    moving_mean, moving_var = layer.moving_mean.numpy(), layer.moving_variance.numpy()
    layer.trainable = False
    layer.frozen_batch_statistics = True
    assert layer.trainable_variables == []
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        if keras_ops:
            with layers.keras_batch_norm():
                y = layer(xt, training=True)
        else:
            y = layer(xt, training=True)
    assert_batch_statistics(layer, x, y, gamma, beta, moving_mean, moving_var)
    assert tape.gradient(y, xt) is not None  # the input's gradient still flows
    # Inference still reads the moving statistics.
    want, _, _ = numpy_bn(x.astype(np.float64), gamma, beta, layer.moving_mean.numpy(),
                          layer.moving_variance.numpy())
    np.testing.assert_allclose(layer(x, training=False).numpy(), want, rtol=1e-5, atol=1e-5)


def test_epsilon_is_exactly_the_references():
    # tf.nn.fused_batch_norm would silently raise 1e-5 to 1.001e-5; with a tiny
    # variance the difference shows.
    x = np.array([[0.0], [1e-3]], np.float32)
    layer = layers.BatchNormalization(epsilon=EPS, center=False, scale=False)
    y = layer(x, training=True).numpy()
    np.testing.assert_allclose(y[:, 0], [-5e-4 / np.sqrt(2.5e-7 + 1e-5),
                                         5e-4 / np.sqrt(2.5e-7 + 1e-5)], rtol=1e-6)


@pytest.mark.parametrize("policy", [pytest.param("mixed_bfloat16", marks=pytest.mark.bfloat16),
                                    "mixed_float16"])
def test_mixed_precision_matches_keras_layer(policy):
    shape = (8, 6, 6, 16)
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    ours = make_layer(shape, dtype=policy)
    theirs = make_layer(shape, cls=keras.layers.BatchNormalization, dtype=policy)
    x_low = tf.cast(x, ours.compute_dtype)
    y_ours, y_theirs = ours(x_low, training=True), theirs(x_low, training=True)
    assert y_ours.dtype == y_theirs.dtype == ours.compute_dtype
    tolerance = 2e-2 if policy == "mixed_bfloat16" else 2e-3
    np.testing.assert_allclose(tf.cast(y_ours, tf.float32).numpy(),
                               tf.cast(y_theirs, tf.float32).numpy(),
                               rtol=tolerance, atol=tolerance)
    assert ours.moving_variance.dtype == tf.float32
    np.testing.assert_allclose(ours.moving_variance.numpy(), theirs.moving_variance.numpy(),
                               rtol=1e-3)


@pytest.mark.parametrize("training", [True, False])
def test_synchronised_layer_over_two_replicas(training):
    # Training: the kernel would see only the local half of the batch, so the layer
    # must normalise with the global batch's statistics (Keras' synchronised path).
    # Inference: the moving statistics, on every replica (the fused kernel).
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    shape = (8, 3, 3, 4)
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    x[4:] += 5.0  # the replicas' halves have different means
    with strategy.scope():
        layer = make_layer((4,) + shape[1:], synchronized=True)
    gamma, beta = params(layer, shape[-1])
    moving = (None, None) if training else (layer.moving_mean.numpy(),
                                            layer.moving_variance.numpy())
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(8)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    result = strategy.run(tf.function(lambda v: layer(v, training=training)), (batch,))
    got = np.concatenate([t.numpy() for t in strategy.experimental_local_results(result)])
    want, _, _ = numpy_bn(x.astype(np.float64), gamma, beta, *moving)
    tolerance = 1e-4 if training else 1e-5
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_models_use_the_fused_layer():
    from simclr_tf.models.resnet import ResNet
    model = ResNet(depth=18, width_multiplier=0.125, stem="cifar")
    model.build((None, 8, 8, 3))
    norms = [layer for layer in model._flatten_layers()
             if isinstance(layer, keras.layers.BatchNormalization)]
    assert norms and all(isinstance(layer, layers.BatchNormalization) for layer in norms)

