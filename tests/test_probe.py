"""The L-BFGS linear probe: a hand-worked accuracy and its choice of C."""
import numpy as np

from simclr_tf.evaluation import probe


def test_linear_probe_hand_worked_accuracy():
    rng = np.random.RandomState(0)
    centres = np.array([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0], [0.0, 0.0, 4.0]])
    train_y = np.repeat(np.arange(3), 20)
    train_x = centres[train_y] + 0.3 * rng.randn(60, 3)
    # Test points at the centres: the probe predicts 0, 1, 2, 0; the last label is
    # deliberately wrong, so the top-1 is exactly 3/4.
    test_x, test_y = centres[[0, 1, 2, 0]], np.array([0, 1, 2, 1])
    result = probe.linear_probe(train_x, train_y, test_x, test_y, c_grid=(0.1, 1.0))
    assert result["top_1_accuracy"] == 0.75
    assert result["validation_accuracy"] == 1.0
    assert result["c"] == 0.1  # ties go to the stronger regularisatio
