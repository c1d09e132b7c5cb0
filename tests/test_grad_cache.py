"""Gradient caching (simclr_tf.method.grad_cache, StepOptions(grad_cache_chunk=...)).

Loss and gradients must equal the full-batch computation wherever the forward of a
chunk does not depend on the other chunks: a model without BN for any chunking; the
BN model with one chunk (= the plain step, moving statistics included); and the BN
model with several chunks against the same per-chunk-BN forward run under one tape
(what gradient caching computes by design: BN statistics per chunk).
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.method import grad_cache, losses, optimizers, train
from simclr_tf.run import distribute
from helpers.standin_model import make_model, random_batch

IMAGE_SIZE = 8
BATCH = 8
CHUNK = 2  # images per chunk in the several-chunk tests


def _dense_model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(8)])
    model(tf.zeros([1, IMAGE_SIZE, IMAGE_SIZE, 3]))
    return model


@pytest.mark.parametrize("num_chunks", [1, 2, 4])
def test_no_batch_dependence_equals_full_batch(num_chunks):
    model = _dense_model()
    v1, v2, _ = random_batch(BATCH, IMAGE_SIZE, seed=1)
    variables = model.trainable_variables
    decay = lambda: 1e-3 * tf.add_n([tf.reduce_sum(w ** 2) for w in variables])  # noqa: E731

    def loss_of(z1, z2):
        return losses.nt_xent(z1, z2, temperature=0.3).loss + decay()

    with tf.GradientTape() as tape:
        z = model(tf.concat([v1, v2], 0))
        full_loss = loss_of(*tf.split(z, 2))
    full_grads = tape.gradient(full_loss, variables)

    c = BATCH // num_chunks
    v1c, v2c = v1.reshape(num_chunks, c, *v1.shape[1:]), v2.reshape(num_chunks, c, *v2.shape[1:])

    def forward(i):
        return {"z": model(tf.concat([tf.gather(v1c, i), tf.gather(v2c, i)], 0))}

    def objective(stacked):
        z1 = tf.reshape(stacked["z"][:, :c], [BATCH, -1])
        z2 = tf.reshape(stacked["z"][:, c:], [BATCH, -1])
        loss = loss_of(z1, z2)
        return loss, loss

    for run in (lambda f: f(), lambda f: tf.function(f)()):
        loss, grads = run(lambda: grad_cache.cached_gradients(
            forward, num_chunks, objective, variables, output_names=["z"]))
        np.testing.assert_allclose(loss, full_loss, rtol=1e-6)
        for g, f in zip(grads, full_grads):
            np.testing.assert_allclose(g, f, rtol=1e-5, atol=1e-7)


def _step_optimizer():
    """The one-tape references' optimizer: SGD with classic momentum. The optimizer is
    incidental there (they check gradients through one step); --optimizer=momentum is
    Nesterov, whose first step is (1 + m) times larger, float error included."""
    return keras.optimizers.SGD(0.5, momentum=0.9)


def _trainer(chunk, optimizer_name="momentum"):
    model = make_model(IMAGE_SIZE)  # fixed initializer seeds: identical copies
    optimizer = (_step_optimizer() if optimizer_name == "classic" else
                 optimizers.build_optimizer(optimizer_name, 0.5, weight_decay=1e-3,
                                            model=model))
    optimizer_name = "momentum" if optimizer_name == "classic" else optimizer_name
    trainer = train.Trainer(tf.distribute.get_strategy(), model, optimizer,
                            train.StepOptions(temperature=0.5, grad_cache_chunk=chunk),
                            weight_decay_loss=optimizers.weight_decay_loss(
                                model, optimizer_name, 1e-3))
    return trainer, model


def _iterator(steps=2):
    batches = [random_batch(BATCH, IMAGE_SIZE, seed=10 + s) for s in range(steps)]
    v1, v2, labels = (np.concatenate(c) for c in zip(*batches))
    return iter(tf.data.Dataset.from_tensor_slices(((v1, v2), labels)).batch(
        BATCH, drop_remainder=True))


@pytest.mark.large  # 5 s each
@pytest.mark.parametrize("optimizer_name", ["momentum", "lars"])
def test_one_chunk_equals_the_plain_step_bn_included(optimizer_name):
    cached, model_a = _trainer(BATCH, optimizer_name)
    plain, model_b = _trainer(0, optimizer_name)
    logs_a = cached.train_steps(_iterator(), 2)
    logs_b = plain.train_steps(_iterator(), 2)
    for name in ("loss", "contrast_loss", "supervised_loss", "contrast_acc", "grad_norm"):
        np.testing.assert_allclose(logs_a[name], logs_b[name], rtol=1e-5, err_msg=name)
    # Every weight, BN moving statistics included (updated once per chunk, not twice).
    for a, b in zip(model_a.weights, model_b.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=a.path)


def _one_tape_reference(chunk_views, labels, model_a, logs, weight_rtol=1e-5):
    """Checks a cached step against its reference: every chunk's forward recorded under
    one tape (all activations stored), BN per chunk, the loss over the whole batch, one
    SGD step with classic momentum (`_step_optimizer`). `chunk_views(k) -> (first,
    second)` gives chunk k's views."""
    model_b = make_model(IMAGE_SIZE)  # fixed initializer seeds: model_a's start
    optimizer = _step_optimizer()
    with tf.GradientTape() as tape:
        z1, z2, logits1, logits2 = [], [], [], []
        for k in range(len(labels) // CHUNK):
            out = model_b(tf.concat(chunk_views(k), 0), training=True)
            a, b = tf.split(out["proj_head_output"], 2)
            la, lb = tf.split(out["logits_sup"], 2)
            z1.append(a), z2.append(b), logits1.append(la), logits2.append(lb)
        loss = losses.nt_xent(tf.concat(z1, 0), tf.concat(z2, 0), temperature=0.5).loss
        loss += losses.supervised_loss(np.concatenate([labels, labels]),
                                       tf.concat(logits1 + logits2, 0))
        loss += optimizers.weight_decay_loss(model_b, "momentum", 1e-3)()
    grads = tape.gradient(loss, model_b.trainable_variables)
    optimizer.apply_gradients(zip(grads, model_b.trainable_variables))

    np.testing.assert_allclose(logs["loss"], loss.numpy(), rtol=1e-5)
    for a, b in zip(model_a.weights, model_b.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=weight_rtol, atol=weight_rtol / 10,
                                   err_msg=a.path)


@pytest.mark.large  # 4 s
def test_chunks_equal_the_per_chunk_bn_forward_under_one_tape():
    cached, model_a = _trainer(CHUNK, "classic")
    logs = cached.train_steps(_iterator(1), 1)
    v1, v2, labels = random_batch(BATCH, IMAGE_SIZE, seed=10)
    rows = lambda k: slice(k * CHUNK, (k + 1) * CHUNK)  # noqa: E731
    # float32 sums in another order: oneDNN's kernels on CPUs with AVX512_VNNI differ
    # from the one-tape reference by up to 1.3e-6 on a bias of 0.0187 (7e-5 relative;
    # AVX2-only CPUs stayed within 1e-5). A wrong chunking is off by over 1e-4.
    _one_tape_reference(lambda k: (v1[rows(k)], v2[rows(k)]), labels, model_a, logs,
                        weight_rtol=3e-5)


@pytest.mark.large  # 7 s
def test_per_chunk_bn_differs_from_full_batch_bn():
    # The documented behaviour: with BN, several chunks are not the full-batch step.
    cached, _ = _trainer(2)
    plain, _ = _trainer(0)
    loss_cached = cached.train_steps(_iterator(1), 1)["contrast_loss"]
    loss_plain = plain.train_steps(_iterator(1), 1)["contrast_loss"]
    assert abs(loss_cached - loss_plain) > 1e-4


def test_bad_chunk_sizes():
    with pytest.raises(ValueError, match="must divide"):
        _trainer(3)[0].train_steps(_iterator(1), 1)
    model = make_model(IMAGE_SIZE)
    with pytest.raises(ValueError, match="grad_cache_chunk=-1"):
        train.Trainer(tf.distribute.get_strategy(), model, keras.optimizers.SGD(0.1),
                      train.StepOptions(grad_cache_chunk=-1))
    with pytest.raises(ValueError, match="pretraining only"):
        train.Trainer(tf.distribute.get_strategy(), model, keras.optimizers.SGD(0.1),
                      train.StepOptions(train_mode="finetune", grad_cache_chunk=2))


@pytest.mark.large  # 13 s
def test_two_replicas_one_chunk_each_equal_one_replica():
    # Synchronised BN over 2 replicas x 1 chunk = the global batch's statistics, and the
    # BN state restore works on mirrored variables in a replica context.
    from helpers.standin_model import distributed_pretrain_iterator
    strategy = distribute.create_strategy("mirrored", num_devices=2)
    with strategy.scope():
        model = make_model(IMAGE_SIZE)
        optimizer = optimizers.build_optimizer("lars", 0.5, weight_decay=1e-3, model=model)
    trainer = train.Trainer(strategy, model, optimizer,
                            train.StepOptions(temperature=0.5, grad_cache_chunk=BATCH // 2),
                            weight_decay_loss=optimizers.weight_decay_loss(model, "lars", 1e-3))
    steps = [random_batch(BATCH, IMAGE_SIZE, seed=10 + s) for s in range(2)]
    logs = trainer.train_steps(distributed_pretrain_iterator(strategy, steps), 2)
    single, model_1 = _trainer(0, "lars")
    logs_1 = single.train_steps(_iterator(2), 2)
    np.testing.assert_allclose(logs["loss"], logs_1["loss"], rtol=1e-5)
    # The global gradient's norm, not a mean of the replicas' local ones (as the
    # plain step's: test_train_step::test_grad_norm_is_the_global_gradients_norm).
    np.testing.assert_allclose(logs["grad_norm"], logs_1["grad_norm"], rtol=1e-5)
    for a, b in zip(model.weights, model_1.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=5e-5, err_msg=a.path)


@pytest.mark.large  # 24 s
def test_device_views_are_drawn_per_chunk_and_alike_in_both_passes():
    # --augment_on=device with gradient caching: each chunk's views are drawn from its
    # source images inside each pass (never the whole batch's views at once). If the
    # two passes drew different views, the cached embedding gradients would belong to
    # other images and the step would differ from this reference.
    from simclr_tf import augment
    from simclr_tf.augment import device as device_augment
    view_fn = device_augment.make_view_fn(IMAGE_SIZE)

    def blur_fn(views, seed):
        # The kernel is set by the size (size // 10): 8 px would give an identity
        # 1-tap blur, which could not tell the passes apart; 32 gives 3 taps.
        return augment.batch_random_blur(views, 32, 32, seed=seed, blur_probability=1.0)

    rng = np.random.default_rng(5)
    size = device_augment.source_size(IMAGE_SIZE)
    sources = dict(image=rng.integers(0, 256, (BATCH, size, size, 3)).astype(np.uint8),
                   size=np.full([BATCH, 2], size, np.int32),
                   seed=rng.integers(0, 2**31 - 1, (BATCH, 2)).astype(np.int64))
    labels = rng.integers(0, 5, BATCH).astype(np.int32)

    model_a = make_model(IMAGE_SIZE)
    optimizer_a = _step_optimizer()
    cached = train.Trainer(tf.distribute.get_strategy(), model_a, optimizer_a,
                           train.StepOptions(temperature=0.5, view_fn=view_fn, blur_fn=blur_fn,
                                             grad_cache_chunk=CHUNK),
                           weight_decay_loss=optimizers.weight_decay_loss(model_a, "momentum", 1e-3))
    dataset = tf.data.Dataset.from_tensor_slices((sources, labels)).batch(
        BATCH, drop_remainder=True)
    logs = cached.train_steps(iter(dataset), 1)

    @tf.function
    def compiled_views(chunk_sources, k):
        first, second = view_fn(chunk_sources)
        # Step 0, replica 0, chunk k: the seed the Trainer derives.
        return blur_fn([first, second], seed=augment.view_seed(0, 0, 0, k))

    def chunk_views(k):
        return compiled_views({key: value[k * CHUNK:(k + 1) * CHUNK]
                               for key, value in sources.items()}, tf.constant(k))

    # Views drawn in a compiled function, as in the step (drawn eagerly, some seeds'
    # blurs differ from the compiled ones by up to 2e-2 relative in the weights);
    # views or blurs that differed between the passes change the loss by ~1e-3.
    _one_tape_reference(chunk_views, labels, model_a, logs, weight_rtol=2e-4)
