"""Helpers shared by model tests."""
import numpy as np


def randomise(model, seed=0):
    """Random weights with positive moving variances, so equalities mean something."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        values = rng.normal(scale=0.1, size=v.shape)
        if "moving_variance" in v.path:
            values = np.abs(values) + 0.5
        v.assign(values.astype(v.dtype))
