"""LARS against a numpy closed form; structural exclusions; weight-decay rules."""
import copy

import keras
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.method import lars, optimizers, schedules
from helpers.standin_model import make_model


def numpy_lars(weights, grads_per_step, lrs, *, excluded, momentum=0.9, eeta=0.001,
               weight_decay=0.0, nesterov=False):
    """The LARS update of the authors' lars_optimizer.py (docs/fidelity.md), one
    variable at a time, in float64."""
    weights = [np.float64(w).copy() for w in weights]
    velocity = [np.zeros_like(w) for w in weights]
    for grads, lr in zip(grads_per_step, lrs):
        for i, (w, g) in enumerate(zip(weights, grads)):
            g = np.float64(g)
            trust = 1.0
            if not excluded[i]:
                g = g + weight_decay * w
                w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
                if w_norm > 0 and g_norm > 0:
                    trust = eeta * w_norm / g_norm
            velocity[i] = momentum * velocity[i] + lr * trust * g
            update = momentum * velocity[i] + lr * trust * g if nesterov else velocity[i]
            weights[i] = w - update
    return weights


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(3, 4), (4,), (2, 2), (5,)]
    weights = [rng.normal(size=s).astype(np.float32) for s in shapes]
    weights[2][:] = 0.0  # ||w|| = 0: trust falls back to 1
    grads = [[rng.normal(size=s).astype(np.float32) for s in shapes] for _ in range(4)]
    for step in grads:
        step[3][:] = 0.0  # ||g|| = 0 (before decay) on the last variable
    return weights, grads


def _run_eager(optimizer, weights, grads):
    variables = [keras.Variable(w) for w in weights]
    optimizer.exclude_from_weight_decay(var_list=[variables[1]])
    for step in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step], variables))
    return [v.numpy() for v in variables]


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("num_steps", [1, 4])
def test_lars_equals_closed_form(nesterov, num_steps):
    weights, grads = _problem()
    grads = grads[:num_steps]
    got = _run_eager(lars.LARS(0.5, weight_decay=1e-2, nesterov=nesterov),
                     weights, grads)
    expected = numpy_lars(weights, grads, [0.5] * num_steps,
                          excluded=[False, True, False, False], weight_decay=1e-2,
                          nesterov=nesterov)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_lars_follows_a_schedule_step_by_step():
    weights, grads = _problem(seed=1)
    schedule = schedules.WarmUpAndCosine(1.0, batch_size=256, warmup_steps=2, total_steps=4)
    got = _run_eager(lars.LARS(schedule, momentum=0.8, eeta=0.01, weight_decay=1e-3),
                     weights, grads)
    lrs = [float(schedule(s)) for s in range(4)]  # 0, 0.5, 1, 0.5
    expected = numpy_lars(weights, grads, lrs, excluded=[False, True, False, False],
                          momentum=0.8, eeta=0.01, weight_decay=1e-3)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_excluded_variable_is_plain_momentum_sgd():
    weights, grads = _problem(seed=2)
    got = _run_eager(lars.LARS(0.1, weight_decay=0.5), weights, grads)
    # Variable 1 is excluded: no decay, no trust ratio, i.e. heavy-ball SGD.
    w, v = np.float64(weights[1]), 0.0
    for step in grads:
        v = 0.9 * v + 0.1 * np.float64(step[1])
        w = w - v
    np.testing.assert_allclose(got[1], w, rtol=1e-6)
    # A non-excluded variable with the same setting moves differently.
    included = numpy_lars(weights, grads, [0.1] * 4, excluded=[False] * 4, weight_decay=0.5)
    assert np.abs(included[1] - w).max() > 1e-2


def test_exclusions_by_structure():
    model = make_model()
    excluded = {id(v) for v in lars.lars_excluded_variables(model)}
    expected_excluded = (
        [w for bn in (model.bn1, model.bn2, model.proj_bn) for w in bn.weights]
        + [model.conv1.bias] + list(model.supervised_head.weights))
    assert excluded == {id(v) for v in expected_excluded}
    # Kernels that are neither BN, bias nor head: decayed and trust-scaled.
    for kernel in (model.conv1.kernel, model.conv2.kernel, model.proj.kernel):
        assert id(kernel) not in excluded
    no_head = make_model(with_head=False)
    assert len(lars.lars_excluded_variables(no_head)) == len(expected_excluded) - 2


def test_exclusions_resolved_in_build_and_under_mirrored_strategy():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    rng = np.random.default_rng(3)
    with strategy.scope():
        model = make_model()
        optimizer = optimizers.build_optimizer("lars", 0.3, weight_decay=1e-2, model=model)
        optimizer.build(model.trainable_variables)
    variables = model.trainable_variables
    excluded = {id(v) for v in lars.lars_excluded_variables(model)}
    flags = [optimizer.is_excluded(v) for v in variables]
    assert flags == [id(v) in excluded for v in variables]
    # The optimizer holds no reference to model variables as its own state.
    model_ids = {id(v) for v in model.weights}
    assert not any(id(v) in model_ids for v in optimizer.variables)

    initial = [v.numpy() for v in variables]
    grads = [[rng.normal(size=v.shape).astype(np.float32) for v in variables]
             for _ in range(3)]

    @tf.function
    def apply(step_grads):
        def replica_fn():
            # Each of the 2 replicas holds half the gradient; the optimizer sums them.
            halves = [g / 2.0 for g in step_grads]
            optimizer.apply_gradients(zip(halves, variables))
        strategy.run(replica_fn)

    for step in grads:
        apply([tf.constant(g) for g in step])
    expected = numpy_lars(initial, grads, [0.3] * 3, excluded=flags, weight_decay=1e-2)
    for v, e in zip(variables, expected):
        np.testing.assert_allclose(v.numpy(), e, rtol=1e-5, atol=1e-6)


def test_lars_config_round_trip():
    schedule = schedules.WarmUpAndCosine(0.3, batch_size=4096, warmup_steps=10,
                                         total_steps=100)
    optimizer = lars.LARS(schedule, momentum=0.8, eeta=0.002, weight_decay=1e-6,
                                nesterov=True, name="my_lars")
    config = optimizer.get_config()
    assert config["weight_decay"] == 1e-6 and config["eeta"] == 0.002
    assert config["momentum"] == 0.8 and config["nesterov"] is True
    # Keras' from_config deserializes the schedule in place: hand it a copy.
    clone = lars.LARS.from_config(copy.deepcopy(config))
    assert clone.get_config() == config
    assert float(clone.learning_rate) == float(optimizer.learning_rate)  # schedule at step 0
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, lars.LARS)
    assert restored.get_config() == config


def test_lars_bad_arguments():
    with pytest.raises(ValueError, match="momentum=1.5"):
        lars.LARS(0.1, momentum=1.5)
    with pytest.raises(ValueError, match="eeta=0"):
        lars.LARS(0.1, eeta=0)
    with pytest.raises(ValueError, match="weight_decay=-1"):
        lars.LARS(0.1, weight_decay=-1)
    with pytest.raises(ValueError, match="var_names"):
        lars.LARS(0.1).exclude_from_weight_decay(var_names=["bias"])


def test_weight_decay_loss_rules():
    model = make_model()
    sq = lambda v: 0.5 * float(np.sum(np.float64(v.numpy()) ** 2))  # noqa: E731
    # LARS decays everything else itself: only the supervised head kernel is in the loss.
    under_lars = optimizers.weight_decay_loss(model, "lars", 1e-3)().numpy()
    np.testing.assert_allclose(under_lars, 1e-3 * sq(model.supervised_head.kernel), rtol=1e-6)
    # Momentum / Adam: every trainable non-BN weight, biases included.
    non_bn = [model.conv1.kernel, model.conv1.bias, model.conv2.kernel, model.proj.kernel,
              model.supervised_head.kernel, model.supervised_head.bias]
    expected = 1e-3 * sum(sq(v) for v in non_bn)
    for name in ("momentum", "adam"):
        got = optimizers.weight_decay_loss(model, name, 1e-3)().numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert optimizers.weight_decay_loss(make_model(with_head=False), "lars", 1e-3)().numpy() == 0
    assert optimizers.weight_decay_loss(model, "momentum", 0.0)().numpy() == 0
    with pytest.raises(ValueError, match="optimizer_name='sgd'"):
        optimizers.weight_decay_loss(model, "sgd", 1e-3)


def test_weight_decay_loss_skips_frozen_weights():
    model = make_model()
    model.conv1.trainable = False
    names = {id(v) for v in optimizers.weight_decay_loss_variables(model, "momentum")}
    assert id(model.conv1.kernel) not in names and id(model.conv2.kernel) in names


def test_build_optimizer():
    model = make_model()
    built = optimizers.build_optimizer("lars", 0.1, momentum=0.9, weight_decay=1e-4,
                                       model=model)
    assert isinstance(built, lars.LARS) and built.lars_weight_decay == 1e-4
    sgd = optimizers.build_optimizer("momentum", 0.1, momentum=0.8, weight_decay=1e-4)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.momentum == 0.8
    assert sgd.nesterov  # the authors' SGD(momentum, nesterov=True)
    assert sgd.weight_decay is None  # decay goes through the loss
    adam = optimizers.build_optimizer("adam", 0.1)
    assert isinstance(adam, keras.optimizers.Adam) and adam.weight_decay is None
    with pytest.raises(ValueError, match="model=None"):
        optimizers.build_optimizer("lars", 0.1)
    with pytest.raises(ValueError, match="name='rmsprop'"):
        optimizers.build_optimizer("rmsprop", 0.1)


def test_momentum_optimizer_is_nesterov_in_closed_form():
    """--optimizer=momentum: the authors' Keras SGD(momentum, nesterov=True):
    v <- m v - lr g;  w <- w + m v - lr g  (numpy, 4 steps on 0.5 ||w - t||^2)."""
    target = np.array([1.0, -2.0, 0.5], np.float32)
    w0 = np.array([0.3, 0.7, -1.1], np.float32)
    lr, m = 0.1, 0.8
    w, v = w0.astype(np.float64), np.zeros(3)
    for _ in range(4):
        g = w - target
        v = m * v - lr * g
        w = w + m * v - lr * g
    variable = keras.Variable(w0)
    sgd = optimizers.build_optimizer("momentum", lr, momentum=m)
    for _ in range(4):
        sgd.apply_gradients([(tf.convert_to_tensor(variable) - target, variable)])
    np.testing.assert_allclose(variable.numpy(), w, rtol=1e-6)


def _heavy_ball(w, grads, lr, momentum=0.9):
    w, v = np.float64(w), 0.0
    for g in grads:
        v = momentum * v + lr * np.float64(g)
        w = w - v
    return w


def test_rate_multiplier_in_closed_form_and_others_unchanged():
    """LARS with rates: the multiplied variable (excluded from trust scaling) is
    heavy-ball SGD at factor x lr; every other variable ends bit-exact as plain LARS."""
    weights, grads = _problem(seed=4)
    plain = _run_eager(lars.LARS(0.3, weight_decay=1e-2), weights, grads)
    variables = [keras.Variable(w) for w in weights]
    optimizer = optimizers.LARSWithRates(0.3, weight_decay=1e-2,
                                         excluded_variables=[variables[1]])
    optimizer.set_rate_multiplier([variables[1]], 0.05)
    for step in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step], variables))
    np.testing.assert_allclose(variables[1].numpy(),
                               _heavy_ball(weights[1], [s[1] for s in grads], 0.3 * 0.05),
                               rtol=1e-6)
    for i in (0, 2, 3):
        np.testing.assert_array_equal(variables[i].numpy(), plain[i])
    assert optimizer.rate_multiplier(variables[1]) == 0.05
    assert optimizer.rate_multiplier(variables[0]) == 1.0
    with pytest.raises(ValueError, match="before build"):
        optimizer.set_rate_multiplier([variables[0]], 2.0)
    with pytest.raises(ValueError, match="factor=0.0"):
        optimizers.LARSWithRates(0.1).set_rate_multiplier([variables[0]], 0.0)


@pytest.mark.parametrize("name", ["momentum", "adam"])
def test_head_rate_multiplier_scales_the_heads_step(name):
    """momentum (Nesterov SGD) and Adam: from the same state and gradients, the
    head's first step is factor x the step at the plain rate (both optimizers' first
    step is proportional to the rate); other variables move exactly as without it."""
    model = make_model()
    start = [w.numpy() for w in model.trainable_variables]
    rng = np.random.default_rng(7)
    grads = [rng.normal(size=w.shape).astype(np.float32) for w in start]

    def step(factor):
        for v, w in zip(model.trainable_variables, start):
            v.assign(w)
        optimizer = optimizers.build_optimizer(name, 0.2, model=model,
                                               head_rate_multiplier=factor)
        optimizer.apply_gradients(zip([tf.constant(g) for g in grads],
                                      model.trainable_variables))
        return optimizer, [v.numpy() - w for v, w in zip(model.trainable_variables, start)]

    plain_optimizer, plain = step(1.0)
    scaled_optimizer, scaled = step(0.25)
    assert type(plain_optimizer) in (keras.optimizers.SGD, keras.optimizers.Adam)
    assert isinstance(scaled_optimizer, optimizers.RateMultipliers)
    head = {id(v) for v in model.supervised_head.trainable_weights}
    for v, a, b in zip(model.trainable_variables, plain, scaled):
        if id(v) in head:
            np.testing.assert_allclose(b, 0.25 * a, rtol=1e-5, atol=1e-8)
        else:
            np.testing.assert_array_equal(b, a)
    with pytest.raises(ValueError, match="supervised head"):
        optimizers.build_optimizer(name, 0.2, model=make_model(with_head=False),
                                   head_rate_multiplier=0.5)


def _reference_exclusions(model):
    """The reference's LARS exclusions, by layer type: every weight of a batch-norm
    layer, every layer's bias, and the supervised head (the rule before it became
    structural; kept here as the reference)."""
    layers = list(model._flatten_layers(include_self=True, recursive=True))
    ids = {id(w) for layer in layers if isinstance(layer, keras.layers.BatchNormalization)
           for w in layer.weights}
    ids |= {id(layer.bias) for layer in layers
            if isinstance(getattr(layer, "bias", None), keras.Variable)}
    if model.supervised_head is not None:
        ids |= {id(w) for w in model.supervised_head.weights}
    return ids


# Both block types (basic: 18, 34; bottleneck: 50-200); the deeper ResNets repeat
# the same blocks in longer groups (101: 17 s in the full suite, each of 152 and 200
# up to 50 s to build), whose variables the rule reads block by block alike.
@pytest.mark.large  # 7 and 10 s
@pytest.mark.parametrize("depth", [18, 50])
def test_structural_exclusions_are_the_references_for_every_resnet(depth):
    """ndim <= 1 + the encoder's declared + the head == BN + biases + the head, for
    each block type (with selective kernels and squeeze-excitation, which add convs
    with biases), and for each projection head mode."""
    from simclr_tf.models import SimCLRModel
    resnet = dict(depth=depth, width_multiplier=0.25, stem="cifar")
    cases = [dict(encoder_options=dict(resnet, sk_ratio=0.0625, se_ratio=0.25),
                  num_classes=10)]
    if depth == 18:
        cases += [dict(num_classes=None), dict(proj_head_mode="linear", num_classes=10),
                  dict(proj_head_mode="none", num_classes=10)]
    for kwargs in cases:
        model = SimCLRModel(**dict(dict(encoder_options=resnet), **kwargs))
        model.build((None, 8, 8, 3))
        got = {id(v) for v in lars.lars_excluded_variables(model)}
        assert got == _reference_exclusions(model), (depth, kwargs)
        assert len(got) < len(model.weights)


def test_adamw_decays_decoupled_all_but_the_no_decay_variables():
    model = make_model()
    adamw = optimizers.build_optimizer("adamw", 0.1, weight_decay=0.5, model=model)
    assert optimizers.weight_decay_loss_variables(model, "adamw") == []
    variables = model.trainable_variables
    start = [v.numpy() for v in variables]
    adamw.apply_gradients(zip([tf.zeros_like(v) for v in variables], variables))
    # Zero gradients: Adam's step is 0, so each variable moves only by its decay,
    # w <- w - lr * wd * w, or not at all.
    no_decay = {id(v) for v in lars.lars_excluded_variables(model)} - {
        id(model.supervised_head.kernel)}
    for v, w in zip(variables, start):
        expected = w if id(v) in no_decay else w * (1 - 0.1 * 0.5)
        np.testing.assert_allclose(v.numpy(), expected, rtol=1e-6)
    assert {id(model.conv1.bias), id(model.supervised_head.bias)} <= no_decay
