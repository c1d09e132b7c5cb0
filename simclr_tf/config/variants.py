"""Model variants by name: 'r50_2x_sk1' -> depth, width multiplier, sk_ratio.

The names follow the authors' released checkpoints (`r152_3x_sk1` and so on); a
fractional width such as `r18_0.25x_sk0` is accepted for small experiments.
"""
import re

from simclr_tf.config import rules

# SimCLRv2 uses selective kernels with this ratio whenever a name says `sk1`.
SK_RATIO = 0.0625

# ResNet v1 depth -> (block kind, blocks per group): the one table of depths.
BLOCKS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
    200: ("bottleneck", (3, 24, 36, 3)),
}
SUPPORTED_DEPTHS = tuple(BLOCKS)


def check_depth(depth):
    """Raises ValueError unless `depth` is a ResNet depth of `BLOCKS`."""
    if depth not in BLOCKS:
        raise ValueError(f"depth must be one of {SUPPORTED_DEPTHS}. Received: depth={depth!r}")

# The encoders the authors released (SimCLRv1: r50 1x/2x/4x; SimCLRv2: the rest).
RELEASED = (
    "r50_1x_sk0", "r50_2x_sk0", "r50_4x_sk0",
    "r50_1x_sk1", "r50_2x_sk1",
    "r101_1x_sk0", "r101_1x_sk1", "r101_2x_sk0", "r101_2x_sk1",
    "r152_1x_sk0", "r152_1x_sk1", "r152_2x_sk0", "r152_2x_sk1", "r152_3x_sk1",
)

_NAME = re.compile(r"^r(\d+)_(\d+(?:\.\d+)?)x_sk([01])$")


def parse_variant(name):
    """Returns `dict(depth=..., width_multiplier=..., sk_ratio=...)` for a name.

    Args:
        name: a variant name such as 'r50_1x_sk0', 'r152_3x_sk1' or 'r18_0.25x_sk0'.

    Raises:
        ValueError: if the name is malformed or names an unsupported depth.
    """
    match = _NAME.match(str(name).strip().lower())
    if not match:
        raise ValueError(
            "A model variant looks like 'r50_1x_sk0' (depth, width multiplier, "
            f"selective kernels 0/1). Received: name={name!r}")
    depth = int(match.group(1))
    try:
        check_depth(depth)
    except ValueError as error:
        raise ValueError(f"Unsupported ResNet depth in variant {name!r}: {error}") from None
    width = float(match.group(2))
    try:
        rules.check_width_multiplier(width)
    except ValueError as error:
        raise ValueError(f"Bad width in variant {name!r}: {error}") from None
    return dict(
        depth=depth,
        width_multiplier=int(width) if width.is_integer() else width,
        sk_ratio=SK_RATIO if match.group(3) == "1" else 0.0,
    )


def variant_name(depth, width_multiplier, sk_ratio):
    """The inverse of `parse_variant` (sk1 for any positive sk_ratio)."""
    width = float(width_multiplier)
    width_text = str(int(width)) if width.is_integer() else str(width)
    return f"r{depth}_{width_text}x_sk{1 if sk_ratio > 0 else 0}"
