"""Vision Transformer encoders (Dosovitskiy et al. 2021) for SimCLR.

Pre-norm blocks (x + MHSA(LN(x)), then x + MLP(LN(x)) with GELU), a learned class
token and learned position embeddings, a final LayerNorm. h is the final-normed class
token (`pool='token'`, as DINO and MoCo v3 pretrain) or the mean of the final-normed
patch tokens (`pool='mean'`); the class token exists either way, so both pools have the
same variables.

The position embedding is sized from the input shape when the encoder is built, so
any image whose sides are multiples of the patch size works; the encoder then only
takes that size (no interpolation to other resolutions).

For fine-tuning the blocks are cut into up to 4 block groups (see
`block_group_sizes`), so that `--fine_tune_after_block` means for a ViT what it means
for a ResNet: 0 freezes the embedding (patch projection, class token, position
embedding), k in 1..3 also block groups 1..k, 4 everything; the final LayerNorm
belongs to the last group.
"""
import numbers

import keras
from keras import ops

from simclr_tf.models.layers import (
    PACKAGE, CheckpointListsMixin, TracedOutputShapeMixin, build_by_tracing, output_float)
from simclr_tf.models.outputs import H

POOLS = ("token", "mean")
NUM_BLOCK_GROUPS = 4
LAYER_NORM_EPSILON = 1e-6
EMBEDDING_FEATURE = "patch_embedding"

# name -> architecture (no classifier head); rows of `simclr_tf.config.tables.encoders.ENCODERS`.
PRESETS = {
    "vit_s16": dict(patch_size=16, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "vit_b16": dict(patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
}


def block_group_sizes(depth):
    """How many blocks each block group holds: `depth` split into 4 groups as evenly
    as possible, the earlier groups taking the remainder (12 -> 3, 3, 3, 3;
    6 -> 2, 2, 1, 1); with fewer than 4 blocks, one group per block."""
    groups = min(NUM_BLOCK_GROUPS, depth)
    return [depth // groups + (1 if i < depth % groups else 0) for i in range(groups)]


def _check_sizes(**sizes):
    """Positive integers; `num_heads`, when given, divides `hidden_dim`."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer. Received: "
                             f"{name}={value!r}")
    if "num_heads" in sizes and sizes["hidden_dim"] % sizes["num_heads"]:
        raise ValueError(f"hidden_dim must be divisible by num_heads. Received: "
                         f"hidden_dim={sizes['hidden_dim']}, num_heads={sizes['num_heads']}")


def _layer_norm(dtype, name):
    return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, dtype=dtype,
                                           name=name)


@keras.saving.register_keras_serializable(package=PACKAGE)
class PatchEmbedding(keras.layers.Layer):
    """Images [B, H, W, C] -> tokens [B, 1 + (H/p)(W/p), hidden_dim]: a p x p / p conv
    (a linear map of each patch), a learned class token in front, plus a learned
    position embedding for each of the 1 + (H/p)(W/p) positions.

    Args:
        patch_size: side p of the square patches.
        hidden_dim: width of the tokens.
    """

    def __init__(self, patch_size, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        _check_sizes(patch_size=patch_size, hidden_dim=hidden_dim)
        self.patch_size = int(patch_size)
        self.hidden_dim = int(hidden_dim)
        # LeCun normal (fan-in = p * p * C): the patch projection seen as a Dense layer.
        self.projection = keras.layers.Conv2D(
            self.hidden_dim, self.patch_size, strides=self.patch_size, padding="valid",
            kernel_initializer="lecun_normal", dtype=self.dtype_policy, name="projection")
        self.class_token = None
        self.position_embedding = None
        self.grid = None

    def build(self, input_shape):
        height, width = input_shape[1], input_shape[2]
        if height is None or width is None:
            raise ValueError(
                "PatchEmbedding needs a static image size: the position embedding has "
                f"one row per patch. Received: input_shape={tuple(input_shape)}")
        if height % self.patch_size or width % self.patch_size:
            raise ValueError(
                f"The image size {height}x{width} is not divisible by the patch size "
                f"{self.patch_size}. Received: input_shape={tuple(input_shape)}, "
                f"patch_size={self.patch_size}")
        self.grid = (height // self.patch_size, width // self.patch_size)
        self.projection.build(input_shape)
        initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        self.class_token = self.add_weight(
            shape=(1, 1, self.hidden_dim), initializer=initializer, name="class_token")
        self.position_embedding = self.add_weight(
            shape=(1, 1 + self.grid[0] * self.grid[1], self.hidden_dim),
            initializer=initializer, name="position_embedding")

    def call(self, inputs):
        height, width = inputs.shape[1], inputs.shape[2]
        if height is not None and width is not None and (
                height // self.patch_size, width // self.patch_size) != self.grid:
            raise ValueError(
                f"This encoder was built for {self.grid[0] * self.patch_size}x"
                f"{self.grid[1] * self.patch_size} images (its position embedding has "
                f"{self.grid[0]}x{self.grid[1]} patches). Received: images of "
                f"{height}x{width}")
        patches = self.projection(inputs)  # [B, H/p, W/p, D]
        batch = ops.shape(patches)[0]
        patches = ops.reshape(patches, (batch, -1, self.hidden_dim))  # [B, N, D]
        class_token = ops.broadcast_to(ops.cast(self.class_token, patches.dtype),
                                       (batch, 1, self.hidden_dim))
        tokens = ops.concatenate([class_token, patches], axis=1)  # [B, 1 + N, D]
        return tokens + ops.cast(self.position_embedding, tokens.dtype)

    def compute_output_shape(self, input_shape):
        patches = None
        if input_shape[1] is not None and input_shape[2] is not None:
            patches = (input_shape[1] // self.patch_size) * (input_shape[2] // self.patch_size)
        return (input_shape[0], None if patches is None else 1 + patches, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(patch_size=self.patch_size, hidden_dim=self.hidden_dim)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class TransformerBlock(keras.layers.Layer):
    """Pre-norm encoder block on tokens [B, T, hidden_dim]: x + MHSA(LN(x)), then
    x + MLP(LN(x)) with an exact GELU.

    Args:
        hidden_dim: token width.
        num_heads: attention heads; must divide `hidden_dim`.
        mlp_dim: hidden width of the MLP.
    """

    def __init__(self, hidden_dim, num_heads, mlp_dim, **kwargs):
        super().__init__(**kwargs)
        _check_sizes(hidden_dim=hidden_dim, num_heads=num_heads, mlp_dim=mlp_dim)
        self.hidden_dim = int(hidden_dim)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.attention_norm = _layer_norm(self.dtype_policy, "attention_norm")
        # Keras initialises each attention kernel as Glorot uniform of the D x D map
        # it is (whatever the heads), as the Dense layers of the MLP are.
        self.attention = keras.layers.MultiHeadAttention(
            self.num_heads, self.hidden_dim // self.num_heads, dtype=self.dtype_policy,
            name="attention")
        self.mlp_norm = _layer_norm(self.dtype_policy, "mlp_norm")
        self.mlp_hidden = keras.layers.Dense(self.mlp_dim, dtype=self.dtype_policy,
                                             name="mlp_hidden")
        self.mlp_output = keras.layers.Dense(self.hidden_dim, dtype=self.dtype_policy,
                                             name="mlp_output")

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        self.attention_norm.build(input_shape)
        self.attention.build(input_shape, input_shape)
        self.mlp_norm.build(input_shape)
        self.mlp_hidden.build(input_shape)
        self.mlp_output.build(input_shape[:-1] + (self.mlp_dim,))

    def call(self, inputs):
        x = self.attention_norm(inputs)
        x = inputs + self.attention(x, x)
        y = self.mlp_hidden(self.mlp_norm(x))
        return x + self.mlp_output(ops.gelu(y, approximate=False))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_dim=self.hidden_dim, num_heads=self.num_heads,
                      mlp_dim=self.mlp_dim)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ViT(TracedOutputShapeMixin, CheckpointListsMixin, keras.layers.Layer):
    """Vision Transformer encoder of SimCLR; calling it returns a dict of named features.

    Keys: `patch_embedding` (the tokens entering the first block: class token and
    patches, position embedding added), `block_group1`..`block_groupG` (the tokens
    after each group of blocks, G = min(4, depth); see `block_group_sizes`) and
    `final_avg_pool` (h: float32 [B, hidden_dim]; the reference's key whatever the
    pool). Token features are [B, 1 + (H/p)(W/p), hidden_dim], class token first.

    Args:
        patch_size: side of the square patches; the image sides must be multiples of it.
        hidden_dim: token width.
        depth: number of transformer blocks.
        num_heads: attention heads per block; must divide `hidden_dim`.
        mlp_dim: hidden width of each block's MLP.
        pool: 'token' (h = the final-normed class token) or 'mean' (h = the mean of
            the final-normed patch tokens).

    Example:
    >>> encoder = ViT(**PRESETS["vit_s16"])
    >>> encoder.build((None, 224, 224, 3))
    >>> encoder.count_params()  # 21,665,664
    """

    def __init__(self, patch_size=16, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536,
                 pool="token", **kwargs):
        kwargs.setdefault("name", "vit")
        super().__init__(**kwargs)
        _check_sizes(patch_size=patch_size, hidden_dim=hidden_dim, depth=depth,
                     num_heads=num_heads, mlp_dim=mlp_dim)
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}. Received: pool={pool!r}")
        self.patch_size = int(patch_size)
        self.hidden_dim = int(hidden_dim)
        self.depth = int(depth)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.pool = pool
        self.embedding = PatchEmbedding(self.patch_size, self.hidden_dim, dtype=self.dtype_policy,
                                        name="patch_embedding")
        self.blocks = [TransformerBlock(self.hidden_dim, self.num_heads, self.mlp_dim,
                                        dtype=self.dtype_policy, name=f"block{i + 1}")
                       for i in range(self.depth)]
        self.final_norm = _layer_norm(self.dtype_policy, "final_norm")
        self._group_sizes = tuple(block_group_sizes(self.depth))

    @property
    def output_dim(self):
        """Width of h (`final_avg_pool`)."""
        return self.hidden_dim

    @property
    def feature_names(self):
        groups = tuple(f"block_group{g + 1}" for g in range(len(self._group_sizes)))
        return (EMBEDDING_FEATURE,) + groups + (H,)

    @property
    def block_groups(self):
        """The blocks, as lists by group (see `block_group_sizes`)."""
        groups, start = [], 0
        for size in self._group_sizes:
            groups.append(self.blocks[start:start + size])
            start += size
        return groups

    def stages(self):
        """What fine-tuning may freeze, in order: the embedding, then the block groups;
        the final LayerNorm goes with the last group."""
        groups = self.block_groups
        groups[-1] = groups[-1] + [self.final_norm]
        return [[self.embedding]] + groups

    def no_decay_variables(self):
        """The class token and the position embedding (ndim 3, but not weights of a map)."""
        return [self.embedding.class_token, self.embedding.position_embedding]

    def build(self, input_shape):
        build_by_tracing(self, input_shape)

    def call(self, inputs, training=None):
        del training  # no dropout, no batch statistics
        x = self.embedding(inputs)
        features = {EMBEDDING_FEATURE: x}
        for g, group in enumerate(self.block_groups):
            for block in group:
                x = block(x)
            features[f"block_group{g + 1}"] = x
        x = self.final_norm(x)
        pooled = x[:, 0] if self.pool == "token" else ops.mean(x[:, 1:], axis=1)
        # h in float32 whatever the compute dtype (float64 stays): heads and probes read it.
        features[H] = output_float(pooled)
        return features

    def get_config(self):
        config = super().get_config()
        config.update(patch_size=self.patch_size, hidden_dim=self.hidden_dim,
                      depth=self.depth, num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                      pool=self.pool)
        return config
