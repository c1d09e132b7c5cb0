"""The card of an export folder: `README.md` beside the files, for a caller who reads
no code of ours: the inputs (name, shape, dtype, range), the preprocessing, the
outputs, the checkpoint step, what a wrong input size does, where parity with the
SavedModel is measured, and the run's recipe and results (only those of this step).

`export_card(fmt, ...)` writes the text of every format (`export.FORMATS`);
`simclr_tf.weights.export` writes it into the export's temporary folder with the
files (`write_card`), so a card is never missing from, or older than, its export.
"""
import dataclasses
import os

import tensorflow as tf

from simclr_tf import augment
from simclr_tf.config import Config
from simclr_tf.config.tables import encoders, train_modes
from simclr_tf.rundir import records
from simclr_tf.weights import portable
from simclr_tf.weights.serving import SERVING_DEFAULT, SERVING_IMAGES
from simclr_tf.weights.serving_input import (IMAGE_BYTES_INPUT, IMAGE_VALUE_TOLERANCE,
                                             IMAGES_INPUT)

CARD_FILE = "README.md"
# What each output is (the ONNX, LiteRT and SavedModel outputs share the names).
OUTPUTS = {
    portable.EMBEDDING: "h, the encoder's pooled features (what downstream tasks use)",
    portable.PROJECTION: "z, the projection head's output (what the contrastive loss saw)",
    portable.LOGITS_OUTPUT: "the supervised head's logits",
    portable.PROBABILITIES: "softmax of the logits",
}
WHAT = {
    "saved_model": "The TensorFlow SavedModel",
    "onnx": f"The ONNX file (`{portable.ONNX_FILE}`)",
    "litert": f"The LiteRT (TensorFlow Lite) file (`{portable.LITERT_FILE}`)",
    "keras_hub": "The keras-hub preset (the encoder alone, `SimCLRBackbone`)",
}


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a card says of the run that trained the weights: its recorded flags at the
    export's step (flags.json, or for an older step `records.flags_of_step`) and
    training result (result.json), each {} when there is none; `unknown_changes`, the
    flags that flags_history.json changed at a step it does not name (their value at
    this step is not known)."""
    flags: dict = dataclasses.field(default_factory=dict)
    result: dict = dataclasses.field(default_factory=dict)
    unknown_changes: tuple = ()


def output_widths(model, image_size):
    """{output name: its width} of `model`'s exported outputs (symbolic: nothing
    runs), in `OUTPUTS`' order."""
    outputs = portable.inference_model(model, image_size).output
    return {name: int(outputs[name].shape[-1]) for name in OUTPUTS if name in outputs}


def recipe_flags(flags):
    """The flags of a run's record that made its model, in a card's order: first the
    ones every card shows (only the flags its --encoder reads: no --resnet_depth for
    the tiny encoder; the one that set its step plan, --train_steps when > 0, else
    --train_epochs; for a contrastive train mode its temperature and augmentations;
    the weights it started from, --checkpoint), then every other flag that changes the
    optimisation or the data (all but `records.FREE_FLAGS`) set to other than its
    default (--label_fraction, --warmup_epochs, --head_learning_rate,
    --fine_tune_after_block, --mixed_precision, ...). Unset ones left out."""
    spec = encoders.encoder_spec(str(flags.get("encoder", "")))
    row = train_modes.TRAIN_MODES.get(flags.get("train_mode"))
    contrastive = row is not None and row.views == 2
    keys = ("dataset", "train_split", "train_mode", "checkpoint", "teacher", "encoder",
            *(dict.fromkeys((*spec.flags, *spec.exclusive_flags)) if spec else ()),
            "train_batch_size", "train_steps" if flags.get("train_steps") else
            "train_epochs", "learning_rate", "learning_rate_scaling", "optimizer",
            "weight_decay", *(("temperature", "augmentations", "color_jitter_strength",
                               "use_blur") if contrastive else ()),
            "proj_head_mode", "num_proj_layers", "seed")
    shown = {key: flags[key] for key in keys if flags.get(key) not in (None, "")}
    defaults = Config().to_dict()
    other_encoders = {flag for other in (*encoders.ENCODERS.values(), encoders.HUB)
                      for flag in (*other.flags, *other.exclusive_flags)}
    for field in Config.flag_fields():
        name = field.name
        if (name not in shown and name in flags and name not in records.FREE_FLAGS
                and name not in other_encoders
                and name not in records.EXTENSION_FLAGS
                and flags[name] not in (None, "") and flags[name] != defaults[name]):
            shown[name] = flags[name]
    return shown


def preprocessing(image_size, crop=None):
    """The eval preprocessing in words (`augment.preprocess_for_eval`)."""
    crop = augment.eval_center_crop_enabled(image_size) if crop is None else crop
    resize = (f"a bicubic resize to {image_size} x {image_size} px (half-pixel centres, "
              "no antialiasing), clipped to [0, 1]")
    if not crop:
        return resize
    return (f"a centre crop (the square of {augment.EVAL_CROP_PROPORTION:.1%} of the "
            f"shorter side), then {resize}")


def export_card(fmt, *, step, image_size, widths, crop=None, max_pixels=0,
                run=RunRecord()):
    """README.md of an export of format `fmt` (markdown).

    Args:
        fmt: 'saved_model', 'onnx', 'litert' or 'keras_hub'.
        step: the checkpoint's step (the weights').
        image_size: S, the side of the model's square input.
        widths: `output_widths(model, image_size)`.
        crop: the SavedModel's centre crop (None: the eval rule, above 32 px).
        max_pixels: the SavedModel's `serving_default` limit (0: none).
        run: the run's record (`RunRecord`).
    """
    size, flags = image_size, run.flags
    cropped = augment.eval_center_crop_enabled(size) if crop is None else bool(crop)
    prepared = preprocessing(size, crop)
    images = (f"| `{IMAGES_INPUT}` | [N, {size}, {size}, 3], any N | float32 | RGB in "
              "[0, 1], preprocessed as below |")
    outputs = widths if fmt != "keras_hub" else {
        portable.EMBEDDING: widths[portable.EMBEDDING]}
    output_rows = "\n".join(f"| `{name}` | [N, {width}] | float32 | {OUTPUTS[name]} |"
                            for name, width in outputs.items())
    if fmt == "saved_model":
        limit = f", at most {max_pixels:,} pixels each" if max_pixels else ""
        inputs = "\n".join((
            "Two signatures, both returning the outputs below:", "",
            "| signature | input | shape | dtype | values |", "|---|---|---|---|---|",
            f"| `{SERVING_DEFAULT}` | `{IMAGE_BYTES_INPUT}` | [N] | string | encoded "
            f"JPEG, PNG, GIF or BMP images{limit} |",
            f"| `{SERVING_IMAGES}` | `{IMAGES_INPUT}` | [N, H, W, 3], any H, W | float32 "
            f"| RGB in [0, 1] (values up to {IMAGE_VALUE_TOLERANCE} outside are clipped, "
            "larger ones refused) |"))
        inputs += f"""

Also the authors' hub interface: `tf.saved_model.load(path)(images, trainable=False)`
on preprocessed float32 images returns their feature dict (`final_avg_pool`,
`proj_head_output`, ...)."""
        preprocess = (f"In the graph: `{SERVING_DEFAULT}` decodes each image to RGB, "
                      f"and both signatures then apply {prepared}. Any size is "
                      "accepted.")
        parity = ("This is the reference: `scripts/export_parity.py` compares the ONNX, "
                  "LiteRT and keras-hub exports of this step with it.")
    else:
        inputs = f"| input | shape | dtype | values |\n|---|---|---|---|\n{images}"
        preprocess = (
            f"The caller's: the file holds the model alone. Decode to RGB, scale to "
            f"[0, 1], then apply {prepared}, as the SavedModel's signatures do "
            f"(`augment.preprocess_for_eval` with crop={cropped}). Without "
            f"TensorFlow: docs/serving.md, "
            f"\"Preprocessing without TensorFlow\" (NumPy and Pillow), which matches "
            f"`{SERVING_DEFAULT}` on PNG files; PIL's own resize does not (it "
            f"antialiases when it shrinks, and rounds uint8 images).")
        preprocess += " " + WRONG_SIZE[fmt].format(size=size)
        parity = ("Not measured when this folder was written: `python "
                  "scripts/export_parity.py <run directory>` runs this export in its "
                  "own runtime against the SavedModel of the same step on the same "
                  "preprocessed images and prints PASS or FAIL; docs/serving.md gives "
                  "the figures measured on the quick start's model.")
    header = ("---\nlibrary_name: keras-hub\ntags: [simclr, self-supervised, "
              "image-feature-extraction, simclr_tf]\n---\n" if fmt == "keras_hub" else "")
    dataset = f"{flags['dataset']}, " if flags.get("dataset") else ""
    return f"""{header}# SimCLR model ({dataset}step {step}): {fmt}

{WHAT[fmt]} of a model trained by simclr_tf (SimCLR v1/v2 in Keras 3),
from the checkpoint of step {step}.{HOW_TO_LOAD[fmt]}

## Inputs

{inputs}

## Preprocessing

{preprocess}

## Outputs

| output | shape | dtype | what |
|---|---|---|---|
{output_rows}

## Parity

{parity}

## Recipe

{_recipe_table(flags)}{_unknown_changes(run.unknown_changes, step)}

## Results recorded by the run

{_results(run.result, step)}

Every flag of the run: `flags.json` in its run directory.
"""


WRONG_SIZE = {
    "onnx": ("Another size is refused: the file's input is [N, {size}, {size}, 3] and "
             "ONNX Runtime fails with INVALID_ARGUMENT naming the dimension."),
    "litert": (
        "**Check the size yourself**: the file declares [N, {size}, {size}, 3] "
        "(`shape_signature`), but the interpreter's signature runner resizes its input "
        "to whatever it is given and runs, and the global average pooling then gives "
        "outputs of the right shape that are not the model's. "
        "`Interpreter.resize_tensor_input(index, [n, {size}, {size}, 3], strict=True)` "
        "refuses another size, and `set_tensor` refuses a tensor of another shape."),
    "keras_hub": ("Another size is refused: the backbone's input is (None, {size}, "
                  "{size}, 3) and Keras raises ValueError."),
}
HOW_TO_LOAD = {
    "saved_model": "\n\n```python\nloaded = tf.saved_model.load(\"path/to/this/folder\")\n"
                   f"outputs = loaded.signatures[\"{SERVING_DEFAULT}\"]("
                   f"{IMAGE_BYTES_INPUT}=tf.constant([png_bytes]))\n```",
    "onnx": "\n\n```python\nsession = onnxruntime.InferenceSession(\"model.onnx\")\n"
            "outputs = dict(zip([output.name for output in session.get_outputs()],\n"
            f"                   session.run(None, {{\"{IMAGES_INPUT}\": images}})))\n```",
    "litert": "\n\n```python\nrunner = ai_edge_litert.interpreter.Interpreter("
              "\"model.tflite\").get_signature_runner()\n"
              f"outputs = runner({IMAGES_INPUT}=images)  # check images.shape first\n```",
    "keras_hub": "\n\n```python\nimport keras_hub, simclr_tf  # simclr_tf registers the "
                 "backbone's class\nbackbone = keras_hub.models.Backbone.from_preset("
                 "\"path/to/this/folder\")\nh = backbone(images)\n```",
}


def _recipe_table(flags):
    rows = recipe_flags(flags)
    if not rows:
        return "Not recorded (no flags.json)."
    return "| flag | value |\n|---|---|\n" + "\n".join(
        f"| `--{key}` | `{value}` |" for key, value in rows.items())


def _unknown_changes(flags, step):
    if not flags:
        return ""
    named = ", ".join(f"`--{flag}`" for flag in flags)
    return (f"\n\nflags_history.json records changes of {named} at steps it does not "
            f"name: at step {step} they may have had their earlier values (the history "
            "lists them).")


def _results(result, step):
    """The numbers of result.json when it records this step, else why there are none."""
    recorded = result.get("global_step")
    if recorded != step:
        why = ("no result.json" if not result else
               f"result.json records step {recorded}")
        return f"No results recorded for this step ({why})."
    numbers = {key: value for key, value in result.items()
               if isinstance(value, (int, float)) and not isinstance(value, bool)}
    return "| metric | value |\n|---|---|\n" + "\n".join(
        f"| `{key}` | {value:.4g} |" for key, value in sorted(numbers.items()))


def write_card(directory, card):
    """`card` as directory/README.md (inside an export's temporary folder, which is
    renamed into place whole)."""
    with tf.io.gfile.GFile(os.path.join(directory, CARD_FILE), "w") as f:
        f.write(card)
