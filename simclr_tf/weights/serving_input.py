"""The inputs of the serving signatures: their names, checks and decoding.

Graph code only (it runs inside the exported functions): `decode_batch` checks every
encoded image from its header (format, then width x height against `max_pixels`)
before decoding it and names the first bad one; `check_images` asserts the float
images' shape and range. `simclr_tf.weights.serving` builds the signatures from these;
`simclr_tf.weights.export` documents the errors a client sees.
"""
import tensorflow as tf

from simclr_tf.data import image_formats

IMAGE_BYTES_INPUT = "image_bytes"
IMAGES_INPUT = "images"

# Values this far outside [0, 1] are accepted (then clipped) by `serving_images`:
# images resized bicubically by the client overshoot a little. Anything beyond is a
# client bug, most often uint8 pixels sent without dividing by 255.
IMAGE_VALUE_TOLERANCE = 0.05

_IMAGES_CONTRACT = "images: expected float32 [N, H, W, 3] RGB values in [0, 1]"

# No quotes: the error message shows them escaped.
_NOT_AN_IMAGE = ("not JPEG, PNG, GIF or BMP data (send the raw bytes of the encoded "
                 "file; over REST base64 in a b64 object)")


def asserted(tensor, condition, message):
    """`tensor`, available only after asserting `condition` (fails with `message`).

    The explicit dependency makes the assertion fail first: otherwise a later op on
    the bad input may fail before it, with a message that explains nothing.
    """
    assertion = tf.debugging.Assert(condition, message, summarize=8)
    with tf.control_dependencies([assertion]):
        return tf.identity(tensor)


def decode_batch(image_bytes, preprocess, shape, max_pixels):
    """Decodes and preprocesses a batch of encoded images; names the first bad one.

    Each image is checked from its header (format, then width x height against
    `max_pixels`) before it is decoded. A graph cannot catch an op's error, but
    tf.data can drop the element that raised it: the images go through a dataset
    whose failures are dropped, and a missing index is then explained, from that
    image's header alone, by one InvalidArgument error naming it.

    Args:
        image_bytes: string [N], encoded images.
        preprocess: float32 RGB image in [0, 1] [h, w, 3] -> float32 `shape`.
        shape: static shape of a preprocessed image.
        max_pixels: most pixels of one image; 0: no limit.

    Returns:
        float32 [N, *shape].
    """
    count = tf.shape(image_bytes, out_type=tf.int64)[0]

    def decode(index, encoded):
        kind = _image_format(encoded)
        encoded = asserted(encoded, kind >= 0, ["unknown format"])
        if max_pixels:
            height, width = tf.unstack(_header_size(encoded, kind))
            encoded = asserted(encoded, height * width <= max_pixels, ["too large"])
        image = tf.io.decode_image(encoded, channels=3, dtype=tf.float32,
                                   expand_animations=False)
        return index, preprocess(image)

    end = (tf.constant(-1, tf.int64), tf.zeros(shape, tf.float32))
    decoded = tf.data.Dataset.from_tensor_slices((tf.range(count), image_bytes)).map(
        decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # The end marker makes the batch non-empty even when every image failed.
    indices, images = decoded.ignore_errors().concatenate(
        tf.data.Dataset.from_tensors(end)).batch(count + 1).get_single_element()
    indices, images = indices[:-1], images[:-1]
    complete = tf.equal(tf.size(indices, out_type=tf.int64), count)

    def explain():
        # In order, the indices kept; the first that differs from its position is
        # the first image dropped.
        gaps = tf.where(tf.not_equal(indices, tf.range(tf.size(indices,
                                                               out_type=tf.int64))))
        first = tf.concat([gaps[:, 0], tf.size(indices, out_type=tf.int64)[None]], 0)[0]
        encoded = tf.gather(image_bytes, first)
        # The raw op: tf.debugging.Assert would guard it with a cond of its own,
        # whose Merge inside this branch makes Grappler warn on every request
        # ("Skipping loop optimization for Merge node with control input").
        assertion = tf.raw_ops.Assert(condition=complete, summarize=8, data=[
            tf.constant(f"{IMAGE_BYTES_INPUT}: could not decode image"), first,
            tf.constant("of"), tf.strings.length(encoded), tf.constant("bytes:"),
            _problem(encoded, max_pixels)])
        with tf.control_dependencies([assertion]):
            return tf.identity(complete)

    checked = tf.cond(complete, lambda: complete, explain)
    with tf.control_dependencies([checked]):
        images = tf.identity(images)
    images.set_shape([None, *shape])
    return images


def _image_format(encoded):
    """Index in `image_formats.TF_FORMATS` (the formats tf.io.decode_image reads) of
    the format `encoded` starts like, or -1: its `kind` in the graph."""
    kind = tf.constant(-1)
    for index, row in reversed(list(enumerate(image_formats.TF_FORMATS))):
        matches = tf.reduce_any([tf.strings.substr(encoded, 0, len(magic)) == magic
                                 for magic in row.magics])
        kind = tf.where(matches, index, kind)
    return kind


def _header_size(encoded, kind):
    """int64 [height, width] as the header of `encoded` (of format `kind`) declares.

    Reads no more than the header: PNG's IHDR, GIF's logical screen, BMP's info
    header (as tf.io.decode_bmp reads it; a negative height is top-down) and,
    through libjpeg, JPEG's frame header. Fails where the header cannot be read.
    """
    head = tf.strings.substr(tf.strings.join([tf.strings.substr(encoded, 0, 32),
                                              b"\0" * 32]), 0, 32)
    head = tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)

    def number(start, length, big_endian):
        places = range(length) if big_endian else reversed(range(length))
        value = tf.constant(0, tf.int64)
        for place in places:
            value = value * 256 + head[start + place]
        return value

    def signed32(value):
        return tf.where(value >= 2 ** 31, value - 2 ** 32, value)

    def jpeg():
        return tf.cast(tf.image.extract_jpeg_shape(encoded)[:2], tf.int64)

    def png():
        has_ihdr = tf.equal(tf.strings.substr(encoded, 12, 4), b"IHDR")
        with tf.control_dependencies([tf.debugging.Assert(has_ihdr, ["no IHDR"])]):
            return tf.stack([number(20, 4, True), number(16, 4, True)])

    def gif():
        return tf.stack([number(8, 2, False), number(6, 2, False)])

    def bmp():
        return tf.abs(tf.stack([signed32(number(22, 4, False)),
                                signed32(number(18, 4, False))]))

    readers = dict(jpeg=jpeg, png=png, gif=gif, bmp=bmp)
    return tf.switch_case(kind, [readers[row.name] for row in image_formats.TF_FORMATS])


def _problem(encoded, max_pixels):
    """Why `encoded` failed, from its header alone (a string scalar)."""
    kind = _image_format(encoded)

    def header_size(data):
        return _header_size(asserted(data, kind >= 0, ["unknown format"]), kind)

    # The header is read inside a dataset, which turns a header too broken to read
    # into the [-1, -1] that follows it.
    size = tf.data.Dataset.from_tensors(encoded).map(header_size).ignore_errors(
        ).concatenate(tf.data.Dataset.from_tensors(tf.constant([-1, -1], tf.int64))
                      ).take(1)
    height, width = tf.unstack(size.get_single_element())
    labels = [row.label for row in image_formats.TF_FORMATS]
    name = tf.gather(labels, tf.maximum(kind, 0))
    cases = [(kind < 0, lambda: tf.constant(_NOT_AN_IMAGE)),
             (height < 0, lambda: tf.strings.join(["unreadable ", name, " header"])),
             (height * width == 0, lambda: tf.strings.join([
                 "zero-sized ", name, " image: ", tf.strings.as_string(width), " x ",
                 tf.strings.as_string(height), " pixels (width x height); every image "
                 "needs at least one pixel"]))]
    if max_pixels:
        cases.append((height * width > max_pixels, lambda: tf.strings.format(
            "{} x {} = {} pixels (width x height), over the limit of "
            f"{max_pixels} set at export (max_pixels); send a smaller image",
            (width, height, width * height))))
    return tf.case(cases, default=lambda: tf.strings.join(["corrupt or truncated ", name,
                                                           " data"]))


def check_images(images):
    """Asserts float32 [N, H, W, 3] in [0, 1] (within the tolerance), images of at
    least one pixel (an empty batch may have any height and width), then clips."""
    # Pad the shape so that the channel test never indexes past a too-short shape.
    shape = tf.shape(images)
    padded = tf.concat([shape, tf.zeros([4], tf.int32)], axis=0)
    contract = tf.logical_and(tf.equal(tf.size(shape), 4), tf.equal(padded[3], 3))
    images = asserted(images, contract, [_IMAGES_CONTRACT + "; got shape", shape])
    # The images of a batch share their size: when one has no pixel, the first has
    # none. (An empty batch may have any size.)
    has_pixels = tf.logical_and(padded[1] > 0, padded[2] > 0)
    images = asserted(images, tf.reduce_any([tf.logical_not(contract),
                                             tf.equal(padded[0], 0), has_pixels]), [
        f"{IMAGES_INPUT}: image 0 is zero-sized (the images of a batch share one size), "
        "height x width", padded[1], "x", padded[2], "; every image needs at least one "
        "pixel; got shape", shape])
    tolerance = IMAGE_VALUE_TOLERANCE
    in_range = tf.reduce_all(tf.logical_and(images >= -tolerance,
                                            images <= 1.0 + tolerance))
    images = asserted(images, in_range, [
        _IMAGES_CONTRACT + " (uint8 pixels must be divided by 255; NaN/Inf are "
        "rejected); got min", tf.reduce_min(images), "max", tf.reduce_max(images)])
    images.set_shape([None, None, None, 3])
    return tf.clip_by_value(images, 0.0, 1.0)
