"""simclr_tf: SimCLR v1/v2 (Chen et al. 2020) in Keras 3 / TensorFlow 2.

The library never reads command-line flags: `run.py` turns them into a frozen
`simclr_tf.config.Config` and passes plain values down.
"""

__version__ = "0.1.0"
