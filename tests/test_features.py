"""The eval pipeline (ids, padded last batch) and embeddings: deterministic, aligned
with their ids and file names, equal under 1 and 2 replicas; --mode=embed writes .npz /
Parquet and a projector view."""
import os

import keras
import numpy as np
import pytest
import pyarrow.parquet as pq
import tensorflow as tf

from simclr_tf.run import experiment
from simclr_tf.weights import checkpoints
from simclr_tf.run.modes import parts
from simclr_tf.evaluation import features
from simclr_tf.config import Config
from simclr_tf import augment
from simclr_tf.data import registry

TINY = dict(image_size=16, stem="cifar", resnet_depth=18, width_multiplier=0.125,
            num_proj_layers=2, proj_out_dim=16, eval_batch_size=4)


def _preprocess(images):
    return tf.stack([augment.preprocess_for_eval(image, 16, 16, crop=False)
                     for image in images])


def _model(cfg, strategy=None):
    keras.utils.set_random_seed(5)
    return parts.build_model(cfg, strategy or tf.distribute.get_strategy(), None)


@pytest.mark.large  # 7 s
def test_embeddings_deterministic_aligned_and_replica_independent():
    cfg = Config.from_dict(dict(TINY, dataset="digits"))
    source = registry.get_dataset("digits")
    ids = np.arange(0, 360, 7)  # a subset: ids are positions in the whole split
    model = _model(cfg)
    one = features.extract(tf.distribute.get_strategy(), model, source, "test",
                        image_size=16, batch_size=16, example_ids=ids,
                        outputs=(features.H, features.Z))
    again = features.extract(tf.distribute.get_strategy(), model, source, "test",
                          image_size=16, batch_size=5, example_ids=ids[::-1],
                          outputs=(features.H, features.Z))
    for key in ("ids", "labels"):
        np.testing.assert_array_equal(one[key], again[key], err_msg=key)
    for key in (features.H, features.Z):
        # Another batch size runs other kernel blockings: on AVX2-only CPUs the float32
        # features differ by up to 1.5e-8 (AVX-512 CPUs: none); a misaligned row
        # would differ by ~1e-1.
        np.testing.assert_allclose(one[key], again[key], rtol=1e-6, atol=1e-7,
                                   err_msg=key)
    same = features.extract(tf.distribute.get_strategy(), model, source, "test",
                            image_size=16, batch_size=16, example_ids=ids,
                            outputs=(features.H, features.Z))
    for key in one:  # deterministic: the same call gives the same bits
        np.testing.assert_array_equal(one[key], same[key], err_msg=key)
    np.testing.assert_array_equal(one["ids"], ids)
    np.testing.assert_array_equal(one["labels"], source.load_labels("test")[ids])
    # Row i is the model applied to image ids[i], computed directly.
    images = np.stack([image.numpy() for image, _ in source.load("test")])[ids]
    direct = model(_preprocess(images), training=False)
    np.testing.assert_allclose(one[features.H], direct[features.H], atol=1e-5)
    np.testing.assert_allclose(one[features.Z], direct[features.Z], atol=1e-5)
    # Two replicas, odd batch (uneven shares, a partial last batch): the same rows.
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    two = features.extract(mirrored, _model(cfg, mirrored), source, "test", image_size=16,
                        batch_size=9, example_ids=ids)
    np.testing.assert_array_equal(two["ids"], ids)
    np.testing.assert_allclose(two[features.H], one[features.H], atol=1e-6)


def test_eval_dataset_order_ids_and_padded_last_batch():
    source = registry.get_dataset("digits")
    batches = list(features.eval_dataset(source, "test", image_size=32, batch_size=100))
    # Every batch full: the last one holds 60 examples and 40 padding rows.
    assert [b["image"].shape[0] for b in batches] == [100, 100, 100, 100]
    ids = np.concatenate([b["id"].numpy() for b in batches])
    labels = np.concatenate([b["label"].numpy() for b in batches])
    np.testing.assert_array_equal(ids, np.r_[np.arange(360), np.full(40, -1)])
    np.testing.assert_array_equal(labels[:360], source.load_labels("test"))
    assert (labels[360:] == -1).all() and not batches[-1]["image"][60:].numpy().any()
    # At 32 px evaluation does not crop: the image is the source image, resized.
    first = next(iter(source.load("test").take(1)))[0].numpy() / 255.0
    np.testing.assert_allclose(batches[0]["image"][0].numpy(), first, atol=1e-5)


def _folder(tmp_path):
    """Two classes, three 12x12 PNGs each, every image a distinct flat colour."""
    root = tmp_path / "images"
    paths = []
    for c, name in enumerate(("cats", "dogs")):
        (root / name).mkdir(parents=True)
        for i in range(3):
            colour = np.array([40 * (3 * c + i), 255 - 40 * i, 30 * c], np.uint8)
            path = str(root / name / f"img{i}.png")
            tf.io.write_file(path, tf.io.encode_png(np.broadcast_to(colour, [12, 12, 3])))
            paths.append(path)
    return str(root), paths


@pytest.mark.large  # 13 s
def test_embed_mode_writes_parquet_npz_and_projector(tmp_path):
    root, paths = _folder(tmp_path)
    model_dir = str(tmp_path / "run")
    cfg = Config.from_dict(dict(TINY, dataset="folder:" + root, eval_split="train",
                                model_dir=model_dir, mode="embed", embed_projection=True,
                                embed_projector_size=4,
                                embed_output=str(tmp_path / "out.parquet"))).validate()
    model = _model(cfg)
    checkpoints.CheckpointState(model_dir, model).save(3)
    result = experiment.run(cfg)
    assert result["embed/num_examples"] == 6
    table = pq.read_table(result["embed/output"]).to_pydict()
    assert table["id"] == list(range(6)) and table["name"] == paths
    assert table["label"] == [0, 0, 0, 1, 1, 1]
    images = tf.stack([tf.io.decode_png(tf.io.read_file(p)) for p in paths])
    direct = model(_preprocess(images), training=False)
    np.testing.assert_allclose(np.array(table["h"]), direct[features.H], atol=1e-5)
    np.testing.assert_allclose(np.array(table["z"]), direct[features.Z], atol=1e-5)
    projector = os.path.join(model_dir, "projector")
    for name in ("projector_config.pbtxt", "metadata.tsv", "sprite.png"):
        assert os.path.exists(os.path.join(projector, name)), name
    sprite = tf.io.decode_png(tf.io.read_file(os.path.join(projector, "sprite.png")))
    assert sprite.shape == (32, 32, 3)  # 4 thumbnails of 16 px in a 2 x 2 grid
    metadata = open(os.path.join(projector, "metadata.tsv")).read().splitlines()
    assert len(metadata) == 5 and metadata[0] == "name\tlabel"
    config_text = open(os.path.join(projector, "projector_config.pbtxt")).read()
    assert "sprite.png" in config_text and "metadata.tsv" in config_text

    # The same run as .npz (h only) is identical; an unlabelled folder embeds too.
    npz = experiment.run(Config.from_dict(dict(
        TINY, dataset="folder:" + root, eval_split="train", model_dir=model_dir,
        mode="embed", embed_output=str(tmp_path / "out.npz"),
        embed_projector_size=0)).validate())
    with np.load(npz["embed/output"]) as stored:
        assert set(stored.files) == {"ids", "names", "labels", "h"}
        np.testing.assert_allclose(stored["h"], np.array(table["h"]), atol=1e-6)
        assert list(stored["names"]) == paths
    flat = tmp_path / "flat"
    flat.mkdir()
    for i in range(3):
        tf.io.write_file(str(flat / f"{i}.png"), tf.io.encode_png(tf.zeros([9, 9, 3],
                                                                        tf.uint8)))
    unlabelled = experiment.run(Config.from_dict(dict(
        TINY, dataset=f"folder:{flat}", eval_split="train", model_dir=model_dir,
        mode="embed", embed_projector_size=2)).validate())
    with np.load(unlabelled["embed/output"]) as stored:
        assert list(stored["labels"]) == [-1, -1, -1]
    assert unlabelled["embed/output"] == os.path.join(model_dir, "embeddings", "train.npz")


@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
def test_embeddings_are_written_whole_or_not_at_all(tmp_path, monkeypatch, suffix):
    """A full disk (or a kill) mid-write leaves the previous file readable, and no
    temporary file."""
    from simclr_tf.evaluation import writers  # pylint: disable=import-outside-toplevel
    rows = dict(ids=np.arange(3), labels=np.zeros(3, np.int64),
                **{features.H: np.ones([3, 4], np.float32)})
    path = str(tmp_path / f"out{suffix}")
    writers.write_embeddings(path, rows)
    before = open(path, "rb").read()

    def full_disk(*args, **kwargs):
        target = next(a for a in args if isinstance(a, str) or hasattr(a, "write"))
        handle = target if hasattr(target, "write") else open(target, "wb")
        handle.write(b"half a file")
        handle.flush()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    monkeypatch.setattr(pq, "write_table", full_disk)
    with pytest.raises(OSError, match="(?i)no space"):  # errors.DiskFullError
        writers.write_embeddings(path, dict(rows, ids=np.arange(3) + 10))
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == [f"out{suffix}"]
    # A path without the suffix is written where it says (np.savez adds none).
    monkeypatch.undo()
    if suffix == ".npz":
        other = str(tmp_path / "embeddings.bin")
        writers.write_embeddings(other, rows)
        with np.load(other) as stored:
            assert list(stored["ids"]) == [0, 1, 2]
