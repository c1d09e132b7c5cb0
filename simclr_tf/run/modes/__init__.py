"""The modes of `--mode`: each mode's code is one module of this package (train,
evaluate, export, linear_probe, embed; `parts` holds what they share).

The table of the modes, which the flags, validation and preflight read without
importing this package, is `simclr_tf.config.tables.modes`.
"""
