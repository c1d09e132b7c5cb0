"""A toy dataset, added as docs/design.md says a dataset is added: one module holding
its source and its registration. 'stripes': 16x16 RGB images of horizontal (label 0)
or vertical (label 1) stripes with noise, 96 'train' and 32 'test', the same on
every machine."""
import numpy as np

from simclr_tf.data import registry
from simclr_tf.data.sources import ArraySource

NAME = "stripes"


def _images(count, seed):
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % 2
    phase = rng.integers(0, 4, size=count)
    grid = np.arange(16)
    images = np.empty((count, 16, 16, 3), np.uint8)
    for i, (label, shift) in enumerate(zip(labels, phase)):
        stripes = ((grid + shift) // 2 % 2) * 200 + 20
        plane = np.tile(stripes[:, None], (1, 16)) if label == 0 else np.tile(stripes, (16, 1))
        noisy = plane[..., None] + rng.integers(0, 30, size=(16, 16, 3))
        images[i] = np.clip(noisy, 0, 255)
    return images, labels.astype(np.int64)


class StripesSource(ArraySource):
    def __init__(self):
        rows = {}
        for split, count, seed in (("train", 96, 0), ("test", 32, 1)):
            images, labels = _images(count, seed)
            rows[split] = {"image": images, "label": labels}
        super().__init__(NAME, 2, rows)

    def _decode(self, columns):
        return columns["image"]


def register():
    registry.register_dataset(NAME, lambda data_dir: StripesSource())
