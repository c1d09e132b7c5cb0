"""Serving edge cases through the tiny run's real export (saved_model/4, loaded as a
client loads it): an empty batch returns empty outputs of the right shapes, and a
zero-sized image is an InvalidArgument naming the input and the image's index.
(tests/test_export.py serves the same cases in a fresh process, in the large tier.)"""
import struct

import numpy as np
import pytest
import tensorflow as tf


def _bmp(width, height):
    """A 24-bit BMP of `width` x `height` black pixels (either may be 0)."""
    data = bytes((width * 3 + 3) // 4 * 4 * height)
    return (b"BM" + struct.pack("<IHHI", 54 + len(data), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(data), 2835,
                          2835, 0, 0) + data)


@pytest.fixture(scope="module")
def served(tiny_run):
    return tf.saved_model.load(tiny_run.result["saved_model"])


def test_an_empty_batch_returns_empty_outputs_of_the_right_shapes(served):
    """Every output of both signatures is [0, dim] with the dim a batch of one
    image gets; an empty batch of float images may have no height or width."""
    one = served.signatures["serving_images"](images=tf.fill([1, 20, 24, 3], 0.5))
    empties = dict(
        bytes=served.signatures["serving_default"](image_bytes=tf.zeros([0], tf.string)),
        images=served.signatures["serving_images"](images=tf.zeros([0, 20, 24, 3])),
        no_size=served.signatures["serving_images"](images=tf.zeros([0, 0, 0, 3])))
    for name, outputs in empties.items():
        assert set(outputs) == set(one) == {"embedding", "projection", "logits",
                                            "probabilities"}, name
        for output, value in outputs.items():
            assert value.dtype == tf.float32, (name, output)
            assert value.shape.as_list() == [0, *one[output].shape[1:]], (name, output)
    # The hub interface too, feature maps included.
    hub, full = served(tf.zeros([0, 16, 16, 3])), served(tf.zeros([2, 16, 16, 3]))
    assert {k: v.shape.as_list() for k, v in hub.items()} == {
        k: [0, *v.shape[1:]] for k, v in full.items()}


def test_a_zero_sized_image_names_the_input_and_its_index(served):
    png = tf.io.encode_png(np.zeros([4, 4, 3], np.uint8)).numpy()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"image_bytes: could not decode image\] \[2\].*zero-sized "
                             r"BMP image: 0 x 5 pixels"):
        served.signatures["serving_default"](image_bytes=tf.constant([png, png,
                                                                      _bmp(0, 5)]))
    # The images of a batch share one size: the first is zero-sized.
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"images: image 0 is zero-sized.*got shape\] \[2 6 0 3\]"):
        served.signatures["serving_images"](images=tf.zeros([2, 6, 0, 3]))
    # Unlike the refusals above, a good batch still serves.
    assert served.signatures["serving_default"](image_bytes=tf.constant([png]))[
        "embedding"].shape[0] == 1
