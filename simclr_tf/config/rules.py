"""The rules on single values shared by the flags and the library, each defined once.

`Config.validate` calls them for the flags (and names the flag); the library calls
the same functions on its arguments (`nt_xent`, `ProjectionHead`, `LARS`, ...), so a
rule and its message live here only. Pure Python, no TensorFlow: `run.py` checks its
flags before importing TensorFlow. Each raises `ValueError("... Received: x=...")`.
"""
import difflib
import math
import numbers
import struct

# The built-in train modes (`simclr_tf.config.tables.train_modes.TRAIN_MODES` is the table, with
# any registered since; the code asks its rows).
TRAIN_MODES = ("pretrain", "finetune", "distill")
OPTIMIZERS = ("lars", "momentum", "adam", "adamw")
# --encoder: the prefix of a keras-hub backbone (the other names are the keys of
# simclr_tf.config.tables.encoders.ENCODERS, checked in simclr_tf.run.preflight).
HUB_ENCODER_PREFIX = "hub:"
PROJ_HEAD_MODES = ("none", "linear", "nonlinear")
# -1 trains everything; 0 freezes the stem; k in 1..3 also block groups 1..k; 4 the
# whole encoder.
FINE_TUNE_AFTER_BLOCK_CHOICES = (-1, 0, 1, 2, 3, 4)


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_temperature(temperature):
    """The NT-Xent temperature: > 0, its inverse a finite float32
    (`check_softmax_temperature`)."""
    check_softmax_temperature("temperature", temperature, "e.g. 0.1 (ImageNet) or 0.5 "
                              "(CIFAR-10)")


def check_softmax_temperature(name, temperature, examples, *, largest_inverse=None,
                              why=None):
    """A temperature tau that divides logits (they are multiplied by 1 / tau, in
    float32): a finite number > 0 whose inverse is at most `largest_inverse`
    (default: the largest float32). Below that the inverse is inf in float32 and the
    first step's loss NaN (e.g. --distill_temperature=1e-40: 1 / tau = 1e40).
    `examples`: the usual values; `why`: what overflows (default: the inverse)."""
    if not (_is_number(temperature) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"{name} must be > 0, {examples}. Received: {name}={temperature!r}")
    largest = FLOAT32_MAX if largest_inverse is None else largest_inverse
    inverse = 1.0 / temperature
    try:  # struct rounds to float32 as TensorFlow does and raises where that overflows
        finite = math.isfinite(struct.unpack("f", struct.pack("f", inverse))[0])
    except OverflowError:
        finite = False
    if not finite or inverse > largest:
        why = why or f"logits are multiplied by 1 / {name}, which overflows float32 below it"
        raise ValueError(f"{name} must be at least {1.0 / largest:.4g}: {why}; "
                         f"{examples}. Received: {name}={temperature!r}")


def check_weight_decay(weight_decay):
    """A weight-decay coefficient: a finite number >= 0."""
    if not (_is_number(weight_decay) and math.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError("weight_decay must be >= 0, e.g. 1e-6 (ImageNet) or 1e-4 "
                         f"(CIFAR-10). Received: weight_decay={weight_decay!r}")


def check_num_proj_layers(mode, num_proj_layers):
    """A nonlinear projection head has at least one layer."""
    if mode == "nonlinear" and int(num_proj_layers) < 1:
        raise ValueError("num_proj_layers must be >= 1 for a nonlinear head, e.g. 2 "
                         f"(SimCLRv1) or 3 (v2). Received: num_proj_layers={num_proj_layers!r}")


def log_intervals(log_every_steps, total_steps, checkpoint_steps):
    """`(scalars, lines)`: steps between TensorBoard scalars (and metrics.jsonl
    lines), and between progress lines.

    --log_every_steps=N gives both N; 0 both the checkpoint interval (the authors'
    cadence); unset (None), scalars every 1/50 of the run (at most 100 steps: a
    281-step run gets 57 points, not 3) and lines about every fifth of it (at most
    100 steps), a multiple of the scalars' interval.
    """
    if log_every_steps is not None:
        every = int(log_every_steps) or int(checkpoint_steps)
        return every, every
    scalars = max(1, min(100, int(total_steps) // 50))
    target = max(1, min(100, int(total_steps) // 5))
    return scalars, max(scalars, target // scalars * scalars)


def num_head_layers(mode, num_proj_layers):
    """Dense layers of a projection head of this mode."""
    return {"none": 0, "linear": 1, "nonlinear": int(num_proj_layers)}[mode]


def check_ft_proj_selector(mode, num_proj_layers, ft_proj_selector):
    """`ft_proj_selector` indexes one of the head's outputs: 0 = h ... -1 = z."""
    num_outputs = num_head_layers(mode, num_proj_layers) + 1
    if not -num_outputs <= int(ft_proj_selector) < num_outputs:
        raise ValueError(
            f"ft_proj_selector must be in [{-num_outputs}, {num_outputs - 1}] for a "
            f"'{mode}' head with {num_outputs - 1} layer(s) (0 = h, -1 = the last "
            f"layer). Received: ft_proj_selector={ft_proj_selector!r}")


def check_fine_tune_after_block(fine_tune_after_block):
    """One of `FINE_TUNE_AFTER_BLOCK_CHOICES`."""
    if fine_tune_after_block not in FINE_TUNE_AFTER_BLOCK_CHOICES:
        raise ValueError(
            "fine_tune_after_block must be -1 (train everything), 0 (freeze the stem), "
            "1-3 (also freeze block groups up to it) or 4 (only the head). Received: "
            f"fine_tune_after_block={fine_tune_after_block!r}")


# --cpu_replicas' bound: TensorFlow makes N logical devices in a time that grows about
# as N squared (measured: 128 in 0.6 s, 512 in 4.4 s, 1000 in ~15 s, so 1,000,000 in
# days, with no line); 512 rehearses the replicas of a TPU v3-512 pod slice.
MAX_CPU_REPLICAS = 512


def check_cpu_replicas(replicas):
    """CPU replicas (--cpu_replicas): an int from 0 (off) to MAX_CPU_REPLICAS."""
    if not isinstance(replicas, int) or isinstance(replicas, bool) or \
            not 0 <= replicas <= MAX_CPU_REPLICAS:
        raise ValueError(
            f"cpu_replicas must be from 0 (off) to {MAX_CPU_REPLICAS} (e.g. 8, a TPU "
            f"v3-8's replicas): TensorFlow takes a time growing as the square of the "
            f"count to make them (512: 4 s; 1,000: 15 s). Received: cpu_replicas={replicas!r}")


def check_grad_cache_chunk(chunk, batch_size=None):
    """Images per gradient-caching chunk: an int >= 0 (0 = off) that divides
    `batch_size`, the per-replica batch, when it is given."""
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 0:
        raise ValueError("grad_cache_chunk must be an int >= 0 (0 = off, e.g. 256). "
                         f"Received: grad_cache_chunk={chunk!r}")
    if chunk and batch_size is not None and batch_size % chunk:
        raise ValueError(f"grad_cache_chunk must divide the per-replica batch of "
                         f"{batch_size} images: use a divisor of {batch_size}. "
                         f"Received: grad_cache_chunk={chunk!r}")


def check_momentum(momentum):
    """A momentum coefficient in [0, 1)."""
    if not (_is_number(momentum) and 0.0 <= momentum < 1.0):
        raise ValueError(f"momentum must be in [0, 1), e.g. 0.9. Received: momentum={momentum!r}")


def check_width_multiplier(width_multiplier):
    """The ResNet width multiplier: a finite number > 0."""
    if not (_is_number(width_multiplier) and math.isfinite(width_multiplier)
            and width_multiplier > 0):
        raise ValueError("width_multiplier must be > 0, e.g. 1, 2, 4 or 0.25 for a small "
                         f"model. Received: width_multiplier={width_multiplier!r}")


def check_ratio(name, ratio):
    """A selective-kernel or squeeze-excitation ratio in [0, 1] (0 = off).

    The ratio is the bottleneck's share of the channels (SimCLRv2: sk_ratio 0.0625;
    SENet's reduction ratio r = 16 is se_ratio 1/16). 1 is a bottleneck without
    reduction, still well defined; above 1 the "squeeze" would widen the block, which
    no paper does and which usually means the reduction ratio r was passed instead.
    """
    if not (_is_number(ratio) and math.isfinite(ratio) and 0 <= ratio <= 1):
        raise ValueError(f"{name} must be in [0, 1]: a fraction of the channels (0 = off, "
                         f"e.g. 0.0625; a reduction ratio r is 1/r). Received: {name}={ratio!r}")


FLOAT32_MAX = 3.4028234663852886e38


def check_float32(name, value):
    """A float setting: finite, and finite once TensorFlow holds it as a float32.

    Values beyond float32's range (e.g. 1e45) become inf in every op they reach.
    """
    try:
        # struct rounds to float32 as TensorFlow does and raises where that overflows.
        finite = math.isfinite(value) and math.isfinite(
            struct.unpack("f", struct.pack("f", value))[0])
    except (OverflowError, TypeError):
        finite = False
    if not finite:
        raise ValueError(f"{name} must be a finite number within float32's range "
                         f"(|x| <= {FLOAT32_MAX:.4g}). Received: {name}={value!r}")


LEARNING_RATE_SCALINGS = ("linear", "sqrt")
# How the batch norm of the blocks --fine_tune_after_block freezes runs in training.
FROZEN_BATCH_NORMS = ("moving", "batch")


def scaled_learning_rate(base_learning_rate, batch_size, scaling):
    """Peak learning rate: base * batch / 256 ('linear') or base * sqrt(batch) ('sqrt').

    Args:
        base_learning_rate: the `--learning_rate` flag.
        batch_size: global training batch size, > 0.
        scaling: 'linear' or 'sqrt'.
    """
    if not batch_size > 0:
        raise ValueError(f"batch_size must be > 0. Received: batch_size={batch_size!r}")
    if scaling == "linear":
        return base_learning_rate * batch_size / 256.0
    if scaling == "sqrt":
        return base_learning_rate * math.sqrt(batch_size)
    raise ValueError(f"scaling must be one of {LEARNING_RATE_SCALINGS}. "
                     f"Received: scaling={scaling!r}")


def checked_peak_learning_rate(base_learning_rate, batch_size, scaling):
    """`scaled_learning_rate`, refused (ValueError naming the values) where it is not
    a finite float32: TensorFlow holds the rate in float32, and an infinite rate turns
    every weight NaN at the first update."""
    peak = scaled_learning_rate(base_learning_rate, batch_size, scaling)
    try:
        check_float32("learning_rate", peak)
    except ValueError:
        raise ValueError(
            f"base_learning_rate={base_learning_rate!r} scaled by scaling={scaling!r} "
            f"for batch_size={batch_size!r} is {peak!r}, beyond float32's range "
            f"(|x| <= {FLOAT32_MAX:.4g}): use a smaller base rate, e.g. 0.3 (linear) or "
            "0.075 (sqrt).") from None
    return peak


def check_contrastive_batch_size(batch_size):
    """NT-Xent needs a global batch of >= 2 images: each image's negatives are the
    other images' views; with one image there are none and the loss is exactly 0."""
    if not (isinstance(batch_size, numbers.Integral) and batch_size >= 2):
        raise ValueError("train_batch_size must be >= 2 for pretraining (NT-Xent "
                         "contrasts each image with the rest of the global batch; one "
                         "image has no negatives and a loss of exactly 0), e.g. 512. "
                         f"Received: train_batch_size={batch_size!r}")


# Below this global batch a pretraining run is told what it gives up (`small_batch_note`).
SMALL_CONTRASTIVE_BATCH = 16


def small_batch_note(batch_size):
    """The warning of a contrastive run whose global batch is small: each view has
    2 * batch_size - 2 negatives, and batch norm sees 2 * batch_size images; None from
    SMALL_CONTRASTIVE_BATCH up."""
    if batch_size >= SMALL_CONTRASTIVE_BATCH:
        return None
    return (f"--train_batch_size={batch_size}: each view is contrasted with "
            f"{2 * batch_size - 2} negatives and batch norm sees {2 * batch_size} images. "
            "SimCLR learns from many negatives (the paper: 256 to 8192 images a batch; "
            "at 64 on small data it still learns): expect little from this run, or give "
            "a larger batch (--grad_cache_chunk keeps its memory down).")


# --stem=auto: the authors' rule, the CIFAR stem for images of at most this side.
AUTO_STEM_MAX_IMAGE_SIZE = 32
# The spatial stride from the input to block group 4's output, by stem: the ImageNet
# stem (7x7/2 conv, 3x3/2 max-pool) then groups 2-4 halve (4 * 8); the CIFAR stem
# (3x3/1 conv, no pool) leaves 8. A smaller image still runs (fixed padding keeps
# every map >= 1x1; measured down to 1 px), but its last stride-2 stages get a 1x1
# map that is mostly padding: the final feature map covers less than one cell.
STEM_STRIDES = {"imagenet": 32, "cifar": 8}


def resolve_stem(stem, image_size):
    """The stem used: 'auto' is cifar up to AUTO_STEM_MAX_IMAGE_SIZE, else imagenet."""
    if stem != "auto":
        return stem
    return "cifar" if image_size <= AUTO_STEM_MAX_IMAGE_SIZE else "imagenet"


def check_image_size(image_size, stem):
    """`image_size` >= the total stride of `stem` (resolved; see `STEM_STRIDES`)."""
    minimum = STEM_STRIDES[stem]
    if not (isinstance(image_size, numbers.Integral) and image_size >= minimum):
        auto = "<=" if stem == "cifar" else ">"
        other = (" or the CIFAR stem (--stem=cifar, >= 8)" if stem == "imagenet" else "")
        raise ValueError(
            f"image_size must be >= {minimum} with the {stem} stem (--stem={stem}, or "
            f"auto at {auto} {AUTO_STEM_MAX_IMAGE_SIZE} px), which downsamples by "
            f"{minimum}: a smaller image leaves less than one cell of final feature "
            f"map. Use a larger image_size{other}. Received: image_size={image_size!r}")


def check_proj_out_dim(proj_out_dim):
    """The projection's output width: an int >= 1."""
    if not (_is_number(proj_out_dim) and proj_out_dim >= 1):
        raise ValueError(f"proj_out_dim must be >= 1, e.g. 128. "
                         f"Received: proj_out_dim={proj_out_dim!r}")


def check_label_fraction(label_fraction):
    """The fraction of labelled examples to fine-tune on, in (0, 1]."""
    if not (_is_number(label_fraction) and 0.0 < label_fraction <= 1.0):
        raise ValueError("label_fraction must be in (0, 1], e.g. 0.01 or 0.1. "
                         f"Received: label_fraction={label_fraction!r}")


def check_distill_temperature(temperature):
    """The distillation temperature tau of both softmaxes: > 0, its inverse a finite
    float32 (`check_softmax_temperature`)."""
    check_softmax_temperature("distill_temperature", temperature,
                              "e.g. 1.0 (the authors' colab) or 0.1")


def check_distill_alpha(alpha):
    """The distillation loss' weight alpha in [0, 1]; 1 - alpha weighs the labels."""
    if not (_is_number(alpha) and 0.0 <= alpha <= 1.0):
        raise ValueError("distill_alpha must be in [0, 1]: 1.0 distils with no labels "
                         "(the paper's default), e.g. 0.5 mixes in the labelled subset. "
                         f"Received: distill_alpha={alpha!r}")


def check_knn_k(k):
    """Neighbours of the weighted kNN: an int >= 1."""
    if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive int, e.g. 200. Received: k={k!r}")


def check_knn_temperature(temperature, k=1):
    """The kNN vote temperature: > 0, and small enough an inverse that the votes
    stay finite: a vote is exp(cosine / temperature) <= exp(1 / temperature), and a
    class sums up to `k` of them, all in float32. Above that a vote or a sum is inf
    (and inf times a zero one-hot entry NaN), so classes tie or score NaN and the
    accuracy is silently wrong. With k = 200: temperature >= 0.012."""
    largest = math.log(FLOAT32_MAX) - math.log(max(int(k), 1))
    check_softmax_temperature(
        "temperature", temperature, "e.g. 0.07", largest_inverse=largest,
        why=f"a vote is exp(cosine similarity / temperature) and a class sums up to "
        f"k={k} of them, which overflows float32 below it")


# Colour jitter strength s scales brightness/contrast/saturation by 0.8 s and hue by
# 0.2 s. Contrast and saturation factors U[1 - 0.8 s, 1 + 0.8 s] must stay >= 0, and
# hue deltas must stay within tf.image.adjust_hue's [-0.5, 0.5]: hence s <= 1.25.
MAX_COLOR_JITTER_STRENGTH = 1.25
COLOR_JITTER_IMPLS = ("simclrv1", "simclrv2")


def check_color_jitter_strength(strength):
    """In [0, MAX_COLOR_JITTER_STRENGTH] (1.0 for ImageNet, 0.5 for CIFAR-10)."""
    if not (_is_number(strength) and 0.0 <= strength <= MAX_COLOR_JITTER_STRENGTH):
        raise ValueError(
            f"color_jitter_strength must be in [0, {MAX_COLOR_JITTER_STRENGTH}], e.g. 1.0 "
            f"(ImageNet) or 0.5 (CIFAR-10). Received: color_jitter_strength={strength!r}")


def check_color_jitter_impl(impl):
    """One of `COLOR_JITTER_IMPLS`."""
    if impl not in COLOR_JITTER_IMPLS:
        raise ValueError(f"impl must be one of {COLOR_JITTER_IMPLS}. Received: impl={impl!r}")


# The most pixels (width x height, as the header declares them) of one decoded image.
# Two limits, one per decoder, both holding one decoded image to about 0.4-0.5 GB of
# host memory against decompression bombs (a few header bytes can declare billions):
# - SERVING_MAX_PIXELS, the default of the exported `serving_default` (a flag,
#   --serving_max_pixels, fixed in each export): it decodes to float32 RGB (12 bytes a
#   pixel), so 40 MP is ~0.5 GB. 40 MP holds a 7300 x 5470 photo (most cameras write
#   24-45 MP); larger images fail before decoding (phones' 48-200 MP modes: resize on
#   the client, the model sees image_size pixels anyway). 0 = no limit.
# - FOLDER_IMAGE_MAX_PIXELS, image folders' files (no flag): they decode to uint8 RGB
#   (3 bytes a pixel), so 2**27 px (134 MP, over three times the serving limit) is
#   384 MiB: a dataset may hold scans and panoramas larger than any photo a client
#   sends. To the folder scan a larger file is 'too_large' (skipped, or the error).
SERVING_MAX_PIXELS = 40_000_000
FOLDER_IMAGE_MAX_PIXELS = 2 ** 27


def check_serving_max_pixels(max_pixels, name="serving_max_pixels"):
    """Pixels per served image: an int >= 0 (0 = no limit)."""
    if not isinstance(max_pixels, numbers.Integral) or isinstance(max_pixels, bool) \
            or max_pixels < 0:
        raise ValueError(f"{name} must be an int >= 0 (0 = no limit), e.g. "
                         f"{SERVING_MAX_PIXELS}. Received: {name}={max_pixels!r}")


# --export_format: what `--mode=export` (and a training run's end) writes, each under
# model_dir/<format>/<step>/ (`simclr_tf.weights.export.FORMATS`): the serving
# SavedModel; ONNX and LiteRT files of the model on preprocessed images; a keras-hub
# preset of the encoder. 'none': a training run ends without an export (a sweep's
# runs; `--mode=export` writes one from the checkpoint later).
EXPORT_FORMATS = ("saved_model", "onnx", "litert", "keras_hub")


def export_formats(value):
    """The formats of a comma-separated --export_format, in the order of
    `EXPORT_FORMATS` (each once), () for 'none'; ValueError naming an unknown one
    or an empty list.

    Example:
        >>> export_formats("onnx, saved_model")
        ('saved_model', 'onnx')
        >>> export_formats("none")
        ()
    """
    if str(value).strip() == "none":
        return ()
    return _subset("export_format", value, EXPORT_FORMATS, "saved_model,onnx,litert",
                   empty_allowed=False, also="'none' or ")


def _subset(flag, value, choices, example, *, empty_allowed, also=""):
    """The names of a comma-separated `value`, each once, in the order of `choices`;
    ValueError naming `flag`, the choices and the unknown names (and an empty list
    unless `empty_allowed`). `also`: the other values the flag takes, for the message."""
    names = [name.strip() for name in str(value).split(",") if name.strip()]
    unknown = [name for name in names if name not in choices]
    if unknown or not (names or empty_allowed):
        meant = {name: _meant(name, choices) for name in unknown}
        hints = [f"{name!r} unknown" + (f": did you mean {meant[name]}?" if meant[name]
                                         else "") for name in unknown]
        raise ValueError(
            f"{flag} must be {also}a comma-separated subset of {', '.join(choices)} "
            f"(e.g. {example}). Received: {flag}={value!r}"
            + (f" ({'; '.join(hints)})" if unknown else ""))
    return tuple(name for name in choices if name in names)


def _meant(name, choices):
    """The choice an unknown `name` most likely means: the one its alias names, or the
    closest choice or alias (a typo of 'tflite' means litert); None."""
    key = name.lower().replace("-", "_")
    if _ALIASES.get(key) in choices:
        return _ALIASES[key]
    names = list(choices) + [alias for alias, to in _ALIASES.items() if to in choices]
    close = difflib.get_close_matches(key, names, n=1)
    return _ALIASES.get(close[0], close[0]) if close else None


# Other names users give the formats and transformations (TFLite is LiteRT's old name).
_ALIASES = {"tflite": "litert", "tf_lite": "litert", "savedmodel": "saved_model",
            "colour": "color"}


# --augmentations: the transformations of a training view (the switches of
# `augment.preprocess_for_train`; blur is --use_blur's). '' = the train mode's own:
# pretraining all three, fine-tuning and distillation crop and flip; 'none' = the whole
# image resized. The paper's augmentation study takes them apart.
AUGMENTATIONS = ("crop", "flip", "color")


def augmentations(value, views=2):
    """The transformations of a comma-separated --augmentations, in the order of
    `AUGMENTATIONS`; '' -> the train mode's own (`views` 2: all, else crop and flip),
    'none' -> (). ValueError naming an unknown one.

    Example:
        >>> augmentations("color,crop")
        ('crop', 'color')
        >>> augmentations("", views=1)
        ('crop', 'flip')
    """
    text = str(value or "").strip()
    if not text:
        return AUGMENTATIONS if views == 2 else ("crop", "flip")
    if text == "none":
        return ()
    return _subset("augmentations", value, AUGMENTATIONS,
                   "crop,color; blur is --use_blur", empty_allowed=True, also="'none' or ")
