"""Tests for simclr_tf.data.folders: image folders (broken files: test_reliability.py)."""
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from simclr_tf.data import folders, image_formats, image_scan, registry, subsets
from simclr_tf.evaluation import features


def _all(dataset):
    return [(np.asarray(x), int(y)) for x, y in dataset.as_numpy_iterator()]


def _save(image, path, fmt, **kwargs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image.save(path, fmt, **kwargs)


def _colour(rgb, size=(12, 10)):
    return Image.new("RGB", size, rgb)


@pytest.fixture(scope="module")
def odd_folder(tmp_path_factory):
    """cat/ and dog/ with PNG RGBA, grey JPEG, BMP, animated GIF, 16-bit PNG, TIFF."""
    root = str(tmp_path_factory.mktemp("odd"))
    rgba = Image.new("RGBA", (12, 10), (200, 100, 50, 30))
    _save(rgba, f"{root}/cat/a_rgba.png", "PNG")
    _save(Image.new("L", (9, 7), 77), f"{root}/cat/b_gray.jpg", "JPEG", quality=100)
    _save(_colour((10, 20, 30)), f"{root}/cat/c.bmp", "BMP")
    frames = [_colour((255, 0, 0)).convert("P"), _colour((0, 0, 255)).convert("P")]
    _save(frames[0], f"{root}/dog/d_anim.gif", "GIF", save_all=True,
          append_images=frames[1:])
    sixteen = Image.fromarray(np.full((6, 8), 40000, np.uint16))
    _save(sixteen, f"{root}/dog/e_16bit.png", "PNG")
    _save(_colour((5, 250, 5)), f"{root}/dog/f.tiff", "TIFF")
    _save(Image.new("LA", (5, 5), (128, 9)), f"{root}/dog/g_gray_alpha.png", "PNG")
    with open(f"{root}/dog/notes.txt", "w") as f:
        f.write("not an image")
    return root


def test_folder_labelled_with_odd_formats(odd_folder):
    source = registry.get_dataset("folder:" + odd_folder)
    assert source.num_classes == 2 and source.class_names == ("cat", "dog")
    assert source.splits == ("train",) and source.num_examples("train") == 7
    assert source.has_labels("train")
    examples = _all(source.load("train"))
    assert [y for _, y in examples] == [0, 0, 0, 1, 1, 1, 1]
    for image, _ in examples:
        assert image.ndim == 3 and image.shape[-1] == 3 and image.dtype == np.uint8
    rgba, gray, bmp, gif, sixteen, tiff, gray_alpha = [x for x, _ in examples]
    np.testing.assert_array_equal(rgba[0, 0], [200, 100, 50])  # alpha dropped
    assert rgba.shape == (10, 12, 3)
    np.testing.assert_allclose(gray[0, 0], [77, 77, 77], atol=2)  # grey -> RGB
    np.testing.assert_array_equal(bmp[0, 0], [10, 20, 30])
    np.testing.assert_array_equal(gif[0, 0], [255, 0, 0])  # the first frame
    np.testing.assert_allclose(sixteen[0, 0], [40000 / 257] * 3, atol=1)  # 16 -> 8 bit
    np.testing.assert_array_equal(tiff[0, 0], [5, 250, 5])  # through Pillow
    np.testing.assert_array_equal(gray_alpha[0, 0], [128, 128, 128])


@pytest.mark.parametrize("pil_format, name", [
    ("JPEG", "jpeg"), ("PNG", "png"), ("BMP", "bmp"), ("GIF", "gif"), ("TIFF", "tiff"),
    ("WEBP", "webp"), ("PPM", "pnm")])
def test_the_format_table_tells_each_format_by_its_bytes(tmp_path, pil_format, name):
    path = tmp_path / f"image.{name}"
    Image.new("RGB", (6, 4), (10, 20, 30)).save(path, pil_format)
    assert image_scan.scan_image_file(str(path)) == (name, None)
    row = image_formats.format_of(path.read_bytes()[:32])
    assert row.name == name and row.tf_decodes == (name in ("jpeg", "png", "bmp", "gif"))
    assert image_formats.format_of(b"RIFF\0\0\0\0WAVE") is None  # RIFF, but no WebP


def test_folder_flat_is_unlabelled(tmp_path):
    for i in range(3):
        _save(_colour((i, i, i)), str(tmp_path / f"{i}.png"), "PNG")
    source = registry.get_dataset(f"folder:{tmp_path}")
    assert source.num_classes == 0 and not source.has_labels("train")
    assert [y for _, y in _all(source.load("train"))] == [-1, -1, -1]
    with pytest.raises(ValueError, match="no labels"):
        subsets.make_label_subset(source, "train", 0.5)


def test_folder_with_split_subfolders(tmp_path):
    for split, n in [("train", 4), ("validation", 2)]:
        for cls in ["b", "a"]:
            for i in range(n):
                _save(_colour((i, 0, 0)), str(tmp_path / split / cls / f"{i}.jpg"), "JPEG")
    source = registry.get_dataset(f"folder:{tmp_path}")
    assert dict(source.split_sizes) == {"train": 8, "validation": 4}
    assert source.class_names == ("a", "b")
    assert [y for _, y in _all(source.load("validation"))] == [0, 0, 1, 1]


def test_folder_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        registry.get_dataset(f"folder:{tmp_path}/missing")
    with pytest.raises(ValueError, match="No images"):
        registry.get_dataset(f"folder:{tmp_path}")
    _save(_colour((1, 2, 3)), str(tmp_path / "loose.png"), "PNG")
    _save(_colour((1, 2, 3)), str(tmp_path / "cls" / "x.png"), "PNG")
    with pytest.raises(ValueError, match="mixes"):
        registry.get_dataset(f"folder:{tmp_path}")


def test_folder_follows_directory_links_once(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    for cls in ("a", "b"):
        _save(_colour((1, 2, 3)), str(root / cls / "0.png"), "PNG")
    _save(_colour((4, 5, 6)), str(outside / "x.png"), "PNG")
    os.symlink(".", root / "loop")                 # a cycle at the top
    os.symlink(".", root / "a" / "loop")           # and inside a class
    os.symlink(root / "b", root / "a_alias_of_b")  # a second name for a class
    os.symlink(outside, root / "c")                # a class kept elsewhere: followed
    os.symlink(outside, root / "d")                # ... once
    os.symlink(root, outside / "back")             # leading back: not followed
    source = registry.get_dataset(f"folder:{root}")
    assert source.class_names == ("a", "b", "c")
    assert [y for _, y in _all(source.load("train"))] == [0, 1, 2]


def test_folder_reads_file_names_that_are_not_utf8(tmp_path):
    _save(_colour((10, 20, 30)), str(tmp_path / "cls" / "good.png"), "PNG")
    data = (tmp_path / "cls" / "good.png").read_bytes()
    odd = os.fsencode(tmp_path / "cls") + b"/bad\xff.png"  # not UTF-8
    descriptor = os.open(odd, os.O_WRONLY | os.O_CREAT)
    os.write(descriptor, data)
    os.close(descriptor)
    source = registry.get_dataset(f"folder:{tmp_path}", skip_corrupt_images=False)
    assert source.num_examples("train") == 2 and not source.skipped_files
    examples = _all(source.load("train"))
    assert len(examples) == 2
    for image, _ in examples:
        np.testing.assert_array_equal(image[0, 0], [10, 20, 30])
    assert list(features.example_names(source, "train", [0])) == [os.fsdecode(odd)]


def _noise_pngs(directory, count):
    rng = np.random.RandomState(0)
    for i in range(count):
        pixels = (rng.rand(16, 16, 3) * 255).astype(np.uint8)
        _save(Image.fromarray(pixels), str(directory / f"{i}.png"), "PNG")


def _damage_body(path):
    """Zeroes bytes inside the image data: the header and the end marker stay."""
    data = bytearray(path.read_bytes())
    start = data.index(b"IDAT") + 14
    data[start:start + 30] = bytes(30)
    path.write_bytes(bytes(data))


def test_corrupt_body_is_dropped_counted_and_named_when_skipping(tmp_path, caplog):
    _noise_pngs(tmp_path / "cls", 4)
    _damage_body(tmp_path / "cls" / "1.png")
    source = folders.ImageFolderSource(str(tmp_path), scan_cache_dir=None)
    # The header scan cannot see it; the input pipeline drops and names it.
    assert source.num_examples("train") == 4 and not source.skipped_files
    assert len(_all(source.load("train"))) == 3
    assert source.skipped_files == {str(tmp_path / "cls" / "1.png"): "corrupt"}
    assert source.skipped_summary() == "skipped 1 unreadable image: 1 corrupt (cls/1.png)"
    assert "dropped" in caplog.text and "cls/1.png" in caplog.text
    # Each epoch drops it again (with a shuffled order too); it is counted once.
    assert len(_all(source.load("train", shuffle_files=True))) == 3
    assert len(source.skipped_files) == 1
    # The full scan finds it before anything is read: exact split sizes.
    full = folders.ImageFolderSource(str(tmp_path), scan_cache_dir=None, full_scan=True)
    assert full.num_examples("train") == 3 and list(full.skipped_files.values()) == [
        "corrupt"]


def test_corrupt_body_fails_before_training_when_not_skipping(tmp_path):
    _noise_pngs(tmp_path / "cls", 4)
    _damage_body(tmp_path / "cls" / "2.png")
    cache = str(tmp_path / "cache")
    # A header scan cached first must not stand in for the full scan.
    folders.ImageFolderSource(str(tmp_path), scan_cache_dir=cache)
    with pytest.raises(folders.CorruptImageError) as info:
        registry.get_dataset(f"folder:{tmp_path}", skip_corrupt_images=False)
    with pytest.raises(folders.CorruptImageError) as cached:
        folders.ImageFolderSource(str(tmp_path), skip_corrupt_images=False,
                                  scan_cache_dir=cache)
    for error in (info.value, cached.value):
        assert (error.path, error.reason) == (str(tmp_path / "cls" / "2.png"), "corrupt")


def test_file_damaged_after_a_full_scan_fails_naming_it(tmp_path):
    _noise_pngs(tmp_path / "cls", 3)
    source = folders.ImageFolderSource(str(tmp_path), skip_corrupt_images=False,
                                       scan_cache_dir=None)
    _damage_body(tmp_path / "cls" / "2.png")  # the last: found by the end marker
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape(f"{str(tmp_path / 'cls' / '2.png')!r} is corrupt")):
        _all(source.load("train"))


def test_dropped_files_are_found_per_input_pipeline(tmp_path):
    _noise_pngs(tmp_path / "cls", 5)
    source = folders.ImageFolderSource(str(tmp_path), scan_cache_dir=None)
    for name in ("0.png", "3.png"):
        _damage_body(tmp_path / "cls" / name)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    assert len(_all(source.load("train", input_context=context))) == 1  # 1 and 3
    assert list(source.skipped_files) == [str(tmp_path / "cls" / "3.png")]


def test_an_epoch_that_reads_no_image_is_an_error_naming_the_folder_and_split(tmp_path):
    """A folder removed (or unmounted) after the scan: every file of the pass fails
    to read. Not an empty epoch (a training stream repeats its epochs, so empty ones
    spun forever: issue 34 item 4) but an error naming the folder and the split."""
    _noise_pngs(tmp_path / "data" / "cls", 3)
    source = folders.ImageFolderSource(str(tmp_path / "data"), scan_cache_dir=None)
    for path in (tmp_path / "data" / "cls").iterdir():
        path.write_bytes(b"")  # unreadable, the folder still there
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        _all(source.load("train[:2]"))
    message = str(info.value)
    assert (f"Image folder {str(tmp_path / 'data')!r}, split 'train[:2]': an epoch "
            "yielded no image, none of its 2 files could be read (the first, "
            "'cls/0.png', is empty)") in message
    # Some files that fail are dropped and named, as before: not an error.
    _noise_pngs(tmp_path / "data" / "cls", 1)
    assert len(_all(source.load("train"))) == 1


def test_a_training_stream_whose_folder_vanished_fails_instead_of_spinning(tmp_path):
    import shutil  # pylint: disable=import-outside-toplevel
    import threading  # pylint: disable=import-outside-toplevel
    from simclr_tf.data import pipeline  # pylint: disable=import-outside-toplevel
    _noise_pngs(tmp_path / "data" / "cls", 4)
    source = folders.ImageFolderSource(str(tmp_path / "data"), scan_cache_dir=None)
    stream = iter(pipeline.build_input_fn(source, "train", global_batch_size=2,
                                          train_mode="finetune", image_size=8)(None))
    next(stream)
    shutil.rmtree(tmp_path / "data")
    raised = []

    def read():
        try:
            for _ in range(100):
                next(stream)
        except Exception as error:  # pylint: disable=broad-except
            raised.append(f"{type(error).__name__}: {error}")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    assert raised, "the stream did not fail"
    # The folder gone, or its files (when the read came during the removal).
    assert raised[0].startswith("InvalidArgumentError")
    assert "split 'train': an epoch yielded no image, none of its 4 files" in raised[0]
