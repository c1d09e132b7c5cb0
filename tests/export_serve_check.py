"""Serves an exported SimCLR SavedModel in a fresh process, as a client would.

Run by tests/test_export.py: `python tests/export_serve_check.py SPEC.json`, where the
spec names the export, an .npz of inputs (`images32`, `images_any`), the encoded
image files, and where to write results. Nothing from simclr_tf is imported: only
TensorFlow and Keras, which is all a serving client has.

Writes `out_npz` (every output, keyed `<interface>/<output>`, and the gradients) and
`out_json` (signature names, variable counts, for each bad input the error's class
and message, what rejecting a 12000 x 12000 PNG cost: seconds and growth of the
peak resident memory, and the dtype and shape of each output for an empty batch).
"""
import json
import resource
import struct
import sys
import time

import keras
import numpy as np
import tensorflow as tf


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - recorded for the test to judge
        return {"type": type(e).__name__, "message": str(e)}
    return {"type": None, "message": ""}


def _bmp(width, height):
    """A 24-bit BMP of `width` x `height` black pixels (either may be 0)."""
    data = bytes((width * 3 + 3) // 4 * 4 * height)
    return (b"BM" + struct.pack("<IHHI", 54 + len(data), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(data), 2835,
                          2835, 0, 0) + data)


def _bad_inputs(loaded, serving_default, serving_images, png):
    cases = {
        "bytes_zero_width": lambda: serving_default(
            image_bytes=tf.constant([png, png, _bmp(0, 5)])),
        "images_zero_height": lambda: serving_images(images=tf.zeros([2, 0, 32, 3])),
        "hub_empty_trainable": lambda: loaded(tf.zeros([0, 32, 32, 3]), trainable=True),
        "bytes_text": lambda: serving_default(
            image_bytes=tf.constant([png, b"this is not an image"])),
        "bytes_empty": lambda: serving_default(image_bytes=tf.constant([b""])),
        "bytes_truncated_png": lambda: serving_default(
            image_bytes=tf.constant([png[:len(png) // 2]])),
        "bytes_scalar": lambda: serving_default(image_bytes=tf.constant(png)),
        "bytes_rank2": lambda: serving_default(image_bytes=tf.constant([[png]])),
        "bytes_float_dtype": lambda: serving_default(image_bytes=tf.zeros([1])),
        "images_uint8_values": lambda: serving_images(
            images=tf.fill([1, 32, 32, 3], 255.0)),
        "images_nan": lambda: serving_images(
            images=tf.fill([1, 32, 32, 3], float("nan"))),
        "images_rank3": lambda: serving_images(images=tf.zeros([32, 32, 3])),
        "images_one_channel": lambda: serving_images(images=tf.zeros([1, 32, 32, 1])),
        "images_uint8_dtype": lambda: serving_images(
            images=tf.zeros([1, 32, 32, 3], tf.uint8)),
        "images_string_dtype": lambda: serving_images(images=tf.constant([b"x"])),
    }
    return {name: _error(fn) for name, fn in cases.items()}


def _costed_error(fn):
    """(`_error(fn)`, {'seconds', 'peak_growth_mb'}: growth of the peak resident
    memory)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    error = _error(fn)
    seconds = time.perf_counter() - start
    growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
    return error, dict(seconds=seconds, peak_growth_mb=growth)


def main(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    inputs = np.load(spec["inputs"])
    images32 = tf.constant(inputs["images32"])
    encoded = []
    for path in spec["image_files"]:
        with open(path, "rb") as f:
            encoded.append(f.read())

    with open(spec["large_png"], "rb") as f:
        large_png = f.read()

    loaded = tf.saved_model.load(spec["export_dir"])
    arrays, meta = {}, {}
    meta["signatures"] = sorted(loaded.signatures)
    meta["num_variables"] = len(loaded.variables)
    meta["num_trainable_variables"] = len(loaded.trainable_variables)
    meta["trainable_variables_list_is_trainable_variables"] = [
        a is b for a, b in zip(loaded.trainable_variables_list, loaded.trainable_variables)
    ] if len(loaded.trainable_variables_list) == len(loaded.trainable_variables) else []
    meta["image_size"] = int(loaded.image_size.numpy())
    meta["max_pixels"] = int(loaded.max_pixels.numpy())

    # The authors' colab interface.
    for name, value in loaded(images32, trainable=False).items():
        arrays[f"hub/{name}"] = value.numpy()
    arrays["hub_no_kwarg/default"] = loaded(images32)["default"].numpy()

    with tf.GradientTape() as tape:
        tape.watch(images32)
        outputs = loaded(images32, trainable=False)
        loss = sum(tf.reduce_sum(tf.square(outputs[k]))
                   for k in ("final_avg_pool", "proj_head_output", "logits_sup"))
    variables = list(loaded.trainable_variables)
    grads = tape.gradient(loss, [images32] + variables)
    meta["num_none_gradients"] = sum(g is None for g in grads)
    arrays["grad/images"] = grads[0].numpy()
    for i, g in enumerate(grads[1:]):
        if g is not None:
            arrays[f"grad/var{i}"] = tf.convert_to_tensor(g).numpy()

    serving_default = loaded.signatures["serving_default"]
    serving_images = loaded.signatures["serving_images"]
    for name, value in serving_images(images=tf.constant(inputs["images_any"])).items():
        arrays[f"images/{name}"] = value.numpy()
    for name, value in serving_default(image_bytes=tf.constant(encoded)).items():
        arrays[f"bytes/{name}"] = value.numpy()

    layer = keras.layers.TFSMLayer(spec["export_dir"], call_endpoint="serving_default")
    arrays["tfsm/embedding"] = np.asarray(layer(tf.constant(encoded))["embedding"])

    # First of the bad inputs, while the peak memory has seen only normal images: a
    # PNG of 140 kB that decodes to 144 megapixels, rejected unread.
    too_large, meta["too_large_cost"] = _costed_error(
        lambda: serving_default(image_bytes=tf.constant([encoded[0], large_png])))
    meta["errors"] = dict(bytes_too_large=too_large,
                          **_bad_inputs(loaded, serving_default, serving_images,
                                        encoded[0]))

    # Empty batches: empty outputs of the shapes any batch has (an empty batch of
    # images may have no height or width either).
    empty = dict(bytes=lambda: serving_default(image_bytes=tf.zeros([0], tf.string)),
                 images=lambda: serving_images(images=tf.zeros([0, 40, 48, 3])),
                 images_no_size=lambda: serving_images(images=tf.zeros([0, 0, 0, 3])),
                 hub=lambda: loaded(tf.zeros([0, 32, 32, 3]), trainable=False))
    meta["empty"] = {}
    for interface, serve in empty.items():
        try:
            meta["empty"][interface] = {name: [value.dtype.name, value.shape.as_list()]
                                        for name, value in serve().items()}
        except Exception as e:  # noqa: BLE001 - recorded for the test to judge
            meta["empty"][interface] = {"error": f"{type(e).__name__}: {e}"}

    # Last: training-mode batch norm updates the loaded moving statistics.
    for name, value in loaded(images32, trainable=True).items():
        arrays[f"hub_train/{name}"] = value.numpy()

    np.savez(spec["out_npz"], **arrays)
    with open(spec["out_json"], "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
