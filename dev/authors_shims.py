"""What the authors' TF2 code needs to run on TF 2.21 with tf_keras, applied only in
the process of a script that runs it (authors_baseline.py, authors_one_step.py)."""
import tensorflow.compat.v2 as tf


def shim_dense_placeholder():
    """Dense(units=-1) as a placeholder that build() replaces: their `LinearLayer`
    creates its Dense with -1 before `build()` sets the width, which tf_keras >= 2.13
    rejects."""
    dense = tf.keras.layers.Dense

    class Dense(dense):
        def __init__(self, units, *args, **kwargs):
            super().__init__(1 if units == -1 else units, *args, **kwargs)

    tf.keras.layers.Dense = Dense
