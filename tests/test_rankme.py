"""RankMe (Garrido et al. 2023): the pure function against numpy's SVD and on
matrices whose effective rank is known, and the kNN monitor of the session's tiny run
writing it to result.json, metrics.jsonl and TensorBoard."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.rundir import records
from simclr_tf.weights import checkpoints
from simclr_tf.evaluation import features
from simclr_tf.evaluation.rankme import rankme, singular_values
from simclr_tf.run.modes import parts

from helpers import run_fixtures


def _reference(z, epsilon=1e-7):
    """The paper's eq. 1-2 through numpy's SVD."""
    sigma = np.linalg.svd(np.asarray(z, np.float64), compute_uv=False)
    p = sigma / sigma.sum() + epsilon
    return np.exp(-np.sum(p * np.log(p)))


@pytest.mark.parametrize("shape", [(300, 20), (20, 300), (64, 64), (1, 5), (5, 1)])
def test_rankme_equals_the_svd_reference(shape):
    z = np.random.default_rng(0).normal(size=shape).astype(np.float32) * 3.0 + 0.5
    np.testing.assert_allclose(singular_values(z), np.linalg.svd(
        z.astype(np.float64), compute_uv=False), rtol=1e-6, atol=1e-9)
    assert rankme(z) == pytest.approx(_reference(z), rel=1e-9)


def test_a_collapsed_encoder_has_rankme_one_and_a_healthy_one_close_to_its_width():
    rng = np.random.default_rng(1)
    constant = np.tile(rng.normal(size=(1, 64)), (500, 1))  # every h the same
    assert rankme(constant) == pytest.approx(1.0, abs=1e-3)
    rank_one = rng.normal(size=(500, 1)) * rng.normal(size=(1, 64))  # one direction
    assert rankme(rank_one) == pytest.approx(1.0, abs=1e-3)
    healthy = rng.normal(size=(20000, 32))  # isotropic, N >> D
    assert 31.5 < rankme(healthy) <= 32.0
    for r in (2, 5, 10):  # r directions of equal spread in 64 dimensions
        basis = np.linalg.qr(rng.normal(size=(64, r)))[0]
        subspace = rng.normal(size=(20000, r)) @ basis.T
        assert rankme(subspace) == pytest.approx(r, rel=0.02), r
    # Not centred (the paper's definition): a large common offset is one direction.
    assert rankme(healthy + 100.0) < 2.0
    assert rankme(np.zeros((10, 4))) == 0.0


def test_rankme_refuses_what_is_not_a_finite_matrix():
    for bad in (np.zeros(5), np.zeros((0, 3)), np.array([[1.0, np.nan]])):
        with pytest.raises(ValueError, match="features must"):
            rankme(bad)


def _tensorboard_points(directory, tag):
    points = []
    for event_file in tf.io.gfile.glob(os.path.join(directory, "events.out.*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            for value in event.summary.value:
                if value.tag == tag:
                    points.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(points)


def test_the_knn_monitor_of_the_tiny_run_writes_rankme(tiny_run):
    """The tiny run's kNN monitor (test split against a bank of the 1437 train
    examples, at its checkpoints 2 and 4): RankMe of the bank's h, as computed here
    from ckpt-4's model, is in result.json, in metrics.jsonl and in TensorBoard at
    both steps."""
    directory = tiny_run.directory
    result = json.load(open(os.path.join(directory, "result.json")))
    model = parts.build_model(tiny_run.config, tf.distribute.get_strategy(), 10)
    checkpoints.restore_model(model, os.path.join(directory, "ckpt-4"))
    from simclr_tf.run import preflight  # pylint: disable=import-outside-toplevel
    bank = features.extract(tf.distribute.get_strategy(), model,
                            preflight.load_source(tiny_run.config), "train",
                            image_size=16, batch_size=256)
    assert bank[features.H].shape == (1437, run_fixtures.H_DIM)
    expected = rankme(bank[features.H])
    assert 1.0 < expected < run_fixtures.H_DIM
    assert result["knn/rankme"] == pytest.approx(expected, rel=1e-4)
    lines = [line for line in records.read_metrics(
        os.path.join(directory, records.METRICS_FILE)) if "knn/rankme" in line]
    assert [line["step"] for line in lines] == [2, 4]
    assert lines[-1]["knn/rankme"] == pytest.approx(expected, rel=1e-4)
    assert lines[-1]["knn/top_1_accuracy"] == result["knn/top_1_accuracy"]
    points = _tensorboard_points(directory, "knn/rankme")
    assert [step for step, _ in points] == [2, 4]
    assert points[-1][1] == pytest.approx(expected, rel=1e-4)
