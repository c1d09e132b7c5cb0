"""The ViT encoder against closed forms, a numpy forward pass and the encoder interface.

Most tests use a tiny ViT (32 px images, 16 px patches: 5 tokens) so each takes
about a second; the presets are built only where their size is the point.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from helpers.model_fixtures import randomise
from simclr_tf.models import SimCLRModel, encoders, freeze_for_finetuning
from simclr_tf.models.vit import PRESETS, TransformerBlock, ViT, block_group_sizes

TINY = dict(patch_size=16, hidden_dim=32, depth=4, num_heads=2, mlp_dim=64)


def tiny_vit(**kwargs):
    return ViT(**{**TINY, **kwargs})


def images(shape=(2, 32, 32, 3), seed=0):
    return np.random.default_rng(seed).uniform(size=shape).astype("float32")


def closed_form_parameters(patch_size, hidden_dim, depth, mlp_dim, image_size, channels=3):
    """Parameters of a ViT without classifier head, counted by hand."""
    d = hidden_dim
    tokens = 1 + (image_size // patch_size) ** 2
    patch_projection = patch_size * patch_size * channels * d + d
    class_token, position_embedding = d, tokens * d
    layer_norm = 2 * d
    attention = 4 * (d * d + d)  # query, key, value, output: a d x d map and a bias each
    mlp = (d * mlp_dim + mlp_dim) + (mlp_dim * d + d)
    block = 2 * layer_norm + attention + mlp  # = 12 d^2 + 13 d when mlp_dim = 4 d
    if mlp_dim == 4 * d:
        assert block == 12 * d * d + 13 * d
    return patch_projection + class_token + position_embedding + depth * block + layer_norm


@pytest.mark.parametrize("name, expected", [  # 1.1 and 1.3 s since 075168f
    ("vit_s16", 21_665_664), ("vit_b16", 85_798_656)])
def test_preset_parameter_counts_equal_the_closed_form(name, expected):
    preset = PRESETS[name]
    assert closed_form_parameters(preset["patch_size"], preset["hidden_dim"], preset["depth"],
                                  preset["mlp_dim"], image_size=224) == expected
    encoder = encoders.build_encoder(name)
    encoder.build((None, 224, 224, 3))
    assert encoder.count_params() == expected
    assert sum(int(np.prod(v.shape)) for v in encoder.trainable_weights) == expected
    assert encoder.output_dim == preset["hidden_dim"]


def test_builders_read_their_own_options_and_name_the_others():
    encoder = encoders.build_encoder("vit_b16", batch_norm_decay=0.99, global_bn=False)
    assert (encoder.depth, encoder.hidden_dim, encoder.num_heads, encoder.pool) == (
        12, 768, 12, "token")
    assert encoders.build_encoder("vit_s16", vit_pool="mean").pool == "mean"
    with pytest.raises(ValueError, match=r"encoder_options of 'vit_b16' take vit_pool\. "
                       r"Received: depth=50, stem='cifar'"):
        encoders.build_encoder("vit_b16", depth=50, stem="cifar")


@pytest.mark.parametrize("pool", ["token", "mean"])
@pytest.mark.parametrize("size", [(32, 32), (32, 48)])
def test_named_features_have_the_token_shapes(pool, size):
    encoder = tiny_vit(pool=pool)
    features = encoder(images((2, *size, 3)), training=False)
    assert tuple(features) == encoder.feature_names == (
        "patch_embedding", "block_group1", "block_group2", "block_group3", "block_group4",
        "final_avg_pool")
    tokens = 1 + (size[0] // 16) * (size[1] // 16)
    for name in encoder.feature_names[:-1]:
        assert features[name].shape == (2, tokens, 32)
    assert features["final_avg_pool"].shape == (2, 32)
    assert features["final_avg_pool"].dtype == tf.float32
    assert encoder.output_dim == 32


def _layer_norm(x, layer):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-6) * layer.gamma.numpy() + layer.beta.numpy()


def _attention(x, layer, num_heads):
    """Multi-head self-attention from the layer's kernels ([D, heads, D/heads])."""
    def project(dense):
        return np.einsum("btd,dnh->btnh", x, dense.kernel.numpy()) + dense.bias.numpy()
    q, k, v = project(layer.query_dense), project(layer.key_dense), project(layer.value_dense)
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1])
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bnts,bsnh->btnh", weights, v)
    output = layer.output_dense
    return np.einsum("btnh,nhd->btd", context, output.kernel.numpy()) + output.bias.numpy()


def numpy_vit(encoder, x):
    """The encoder's forward pass in numpy, from its variables: token features and
    the final-normed tokens."""
    embedding = encoder.embedding
    p, d = encoder.patch_size, encoder.hidden_dim
    b, height, width, c = x.shape
    patches = x.reshape(b, height // p, p, width // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, -1, p * p * c)
    kernel = embedding.projection.kernel.numpy().reshape(p * p * c, d)
    tokens = patches @ kernel + embedding.projection.bias.numpy()
    class_token = np.broadcast_to(embedding.class_token.numpy(), (b, 1, d))
    tokens = np.concatenate([class_token, tokens], 1) + embedding.position_embedding.numpy()
    features = {"patch_embedding": tokens}
    for g, group in enumerate(encoder.block_groups):
        for block in group:
            tokens = tokens + _attention(_layer_norm(tokens, block.attention_norm),
                                         block.attention, encoder.num_heads)
            hidden = _layer_norm(tokens, block.mlp_norm) @ block.mlp_hidden.kernel.numpy()
            hidden = hidden + block.mlp_hidden.bias.numpy()
            hidden = 0.5 * hidden * (1 + erf(hidden / np.sqrt(2)))
            tokens = tokens + hidden @ block.mlp_output.kernel.numpy() + \
                block.mlp_output.bias.numpy()
        features[f"block_group{g + 1}"] = tokens
    return features, _layer_norm(tokens, encoder.final_norm)


def test_pools_are_the_first_and_the_mean_patch_token_of_a_numpy_forward_pass():
    token_encoder, mean_encoder = tiny_vit(pool="token"), tiny_vit(pool="mean")
    x = images((3, 32, 48, 3), seed=1)
    token_encoder.build(x.shape)
    mean_encoder.build(x.shape)
    randomise(token_encoder)
    mean_encoder.set_weights(token_encoder.get_weights())  # the same variables
    features = token_encoder(x)
    expected, normed = numpy_vit(token_encoder, x.astype("float64"))
    for name, value in expected.items():
        np.testing.assert_allclose(features[name], value, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(features["final_avg_pool"], normed[:, 0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean_encoder(x)["final_avg_pool"], normed[:, 1:].mean(1),
                               rtol=1e-4, atol=1e-4)


def test_a_block_builds_alone_with_glorot_attention_kernels():
    block = TransformerBlock(hidden_dim=256, num_heads=8, mlp_dim=512)
    block.build((None, 5, 256))
    assert len(block.weights) == 16
    # Glorot uniform of a 256 x 256 map: variance 2 / (256 + 256), whatever the heads.
    for dense in (block.attention.query_dense, block.attention.key_dense,
                  block.attention.value_dense, block.attention.output_dense):
        np.testing.assert_allclose(dense.kernel.numpy().std(), np.sqrt(1 / 256), rtol=0.03)


def test_block_groups_split_the_depth_evenly():
    assert block_group_sizes(12) == [3, 3, 3, 3]
    assert block_group_sizes(6) == [2, 2, 1, 1]
    assert block_group_sizes(2) == [1, 1]
    encoder = tiny_vit(depth=6)
    stages = encoder.stages()
    assert stages[0] == [encoder.embedding]
    assert stages[1:] == [encoder.blocks[0:2], encoder.blocks[2:4], [encoder.blocks[4]],
                          [encoder.blocks[5], encoder.final_norm]]
    shallow = tiny_vit(depth=2)
    assert shallow.feature_names[1:-1] == ("block_group1", "block_group2")
    assert len(shallow.stages()) == 3
    with pytest.raises(ValueError, match="fine_tune_after_block=3"):
        encoders.frozen_layers(shallow, 3)
    assert len(encoders.frozen_layers(shallow, 4)) == 4  # embedding, 2 blocks, final norm


@pytest.mark.large  # 5 s
def test_freeze_for_finetuning_a_vit_s16_freezes_exactly_its_stages():
    model = SimCLRModel(encoder="vit_s16", num_classes=3)
    model.build((None, 32, 32, 3))
    encoder = model.encoder

    def paths(variables):
        return {v.path.removeprefix("simclr/vit/") for v in variables}

    embedding = {"patch_embedding/class_token", "patch_embedding/position_embedding",
                 "patch_embedding/projection/kernel", "patch_embedding/projection/bias"}
    block_variables = ("attention_norm/gamma", "attention_norm/beta",
                       *(f"attention/{part}/{kind}"
                         for part in ("query", "key", "value", "attention_output")
                         for kind in ("kernel", "bias")),
                       "mlp_norm/gamma", "mlp_norm/beta", "mlp_hidden/kernel",
                       "mlp_hidden/bias", "mlp_output/kernel", "mlp_output/bias")
    blocks = [{f"block{i}/{name}" for name in block_variables} for i in range(1, 13)]
    final_norm = {"final_norm/gamma", "final_norm/beta"}
    assert paths(encoder.weights) == embedding.union(*blocks, final_norm)
    for after_block, expected in [
            (-1, set()),
            (0, embedding),
            (2, embedding.union(*blocks[:6])),
            (4, embedding.union(*blocks, final_norm))]:
        for layer in encoder._flatten_layers(include_self=True):
            layer.trainable = True
        freeze_for_finetuning(model, after_block)
        assert paths(encoder.weights) - paths(encoder.trainable_weights) == expected, after_block


def test_frozen_stages_of_a_tiny_vit_stay_unchanged_by_a_training_step():
    model = SimCLRModel(encoder=tiny_vit(), num_classes=3, supervised_head_stop_gradient=False)
    model.build((None, 32, 32, 3))
    randomise(model)
    frozen = freeze_for_finetuning(model, 2)
    assert frozen == [model.encoder.embedding] + model.encoder.blocks[:2]
    before = {v.path: v.numpy() for v in model.weights}
    with tf.GradientTape() as tape:
        outputs = model(images(), training=True)
        loss = tf.reduce_sum(outputs["logits_sup"] ** 2) + tf.reduce_sum(
            outputs["proj_head_output"] ** 2)
    variables = model.trainable_weights
    keras.optimizers.SGD(0.1).apply(tape.gradient(loss, variables), variables)
    frozen_paths = {v.path for layer in frozen for v in layer.weights}
    # A key bias has a zero gradient up to rounding: it shifts all of a query's logits
    # alike, which softmax ignores.
    for v in model.encoder.weights + model.supervised_head.weights:
        changed = not np.array_equal(before[v.path], v.numpy())
        if v.path.endswith("attention/key/bias") and v.path not in frozen_paths:
            np.testing.assert_allclose(v.numpy(), before[v.path], atol=1e-6)
        else:
            assert changed == (v.path not in frozen_paths), v.path


def test_no_decay_variables_are_the_class_token_and_position_embedding():
    encoder = tiny_vit()
    encoder.build((None, 32, 32, 3))
    assert [v.path for v in encoder.no_decay_variables()] == [
        "vit/patch_embedding/class_token", "vit/patch_embedding/position_embedding"]
    assert [tuple(v.shape) for v in encoder.no_decay_variables()] == [(1, 1, 32), (1, 5, 32)]


@pytest.mark.large  # 4 s
def test_simclr_model_with_vit_s16_builds_and_round_trips_its_config():
    model = SimCLRModel(encoder="vit_s16", num_classes=10)
    outputs = model(images((2, 32, 32, 3)), training=False)
    assert outputs["final_avg_pool"].shape == (2, 384)
    assert outputs["logits_sup"].shape == (2, 10)
    config = model.get_config()
    assert config["encoder"] == "vit_s16"
    clone = SimCLRModel.from_config(config)
    assert clone.get_config() == config
    assert isinstance(clone.encoder, ViT)
    assert clone.encoder.get_config() == model.encoder.get_config()


@pytest.mark.large  # 4 s
def test_keras_file_and_checkpoint_of_a_simclr_model_with_a_tiny_vit(tmp_path):
    model = SimCLRModel(encoder=tiny_vit(pool="mean"), num_classes=3)
    model.build((None, 32, 32, 3))
    randomise(model)
    clone = SimCLRModel.from_config(model.get_config())
    assert clone.encoder.get_config() == model.encoder.get_config()
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    x = images()
    expected, got = model(x, training=False), loaded(x, training=False)
    assert set(got) == set(expected)
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])
    # tf.train.Checkpoint reaches every block (they are held in a list).
    prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    for v in loaded.weights:
        v.assign(np.zeros(v.shape, v.dtype))
    tf.train.Checkpoint(model=loaded).read(prefix).assert_consumed()
    np.testing.assert_array_equal(loaded(x)["final_avg_pool"], expected["final_avg_pool"])


@pytest.mark.parametrize("shape, sizes", [((None, 30, 30, 3), "30x30"),
                                          ((None, 32, 40, 3), "32x40")])
def test_image_size_not_divisible_by_the_patch_raises(shape, sizes):
    with pytest.raises(ValueError, match=f"image size {sizes} is not divisible by the "
                                         "patch size 16"):
        tiny_vit().build(shape)


def test_other_image_size_than_built_raises():
    encoder = tiny_vit()
    encoder.build((None, 32, 32, 3))
    with pytest.raises(ValueError, match="built for 32x32 images"):
        encoder(images((1, 48, 48, 3)))


@pytest.mark.parametrize("kwargs, match", [
    (dict(pool="max"), "pool"), (dict(num_heads=3), "divisible by num_heads"),
    (dict(depth=0), "depth"), (dict(patch_size=16.0), "patch_size"),
])
def test_vit_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_vit(**kwargs)


@pytest.mark.bfloat16
def test_mixed_precision_computes_in_bfloat16_and_keeps_h_float32():
    model = SimCLRModel(encoder=tiny_vit(dtype="mixed_bfloat16"), num_classes=3,
                        dtype="mixed_bfloat16")
    out = model(images(), training=True)
    assert out["block_group4"].dtype == tf.bfloat16
    for key in ("final_avg_pool", "proj_head_output", "logits_sup"):
        assert out[key].dtype == tf.float32
        assert np.all(np.isfinite(out[key]))
    assert {v.dtype for v in model.encoder.weights} == {"float32"}
