"""The modes of `--mode`, one module each; `simclr_tf.experiment` dispatches them."""
