"""One worker of the MultiWorkerMirroredStrategy test (tests/test_multiworker.py).

Run as `python tests/multiworker_worker.py OUT.npz` with TF_CONFIG describing a
cluster on 127.0.0.1. It pretrains the stand-in model for a few LARS steps on its
share of fixed global batches and saves the final weights and losses. The test
calls `pretrain` with the default strategy in its own process for the reference.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

GLOBAL_BATCH = 8
IMAGE_SIZE = 8
NUM_STEPS = 3


def pretrain(strategy):
    """Runs NUM_STEPS LARS pretraining steps; returns (initial, final weights, losses)."""
    from simclr_tf.method import lars, optimizers, schedules, train
    from helpers.standin_model import distributed_pretrain_iterator, make_model, random_batch

    with strategy.scope():
        model = make_model(IMAGE_SIZE)
        schedule = schedules.WarmUpAndCosine(2.0, batch_size=GLOBAL_BATCH, warmup_steps=1,
                                             total_steps=NUM_STEPS + 1)
        # A large trust coefficient: every step moves the weights visibly.
        optimizer = lars.LARS(schedule, eeta=0.1, weight_decay=1e-3,
                                    excluded_variables=lars.lars_excluded_variables(model))
    initial = [w.numpy() for w in model.weights]
    trainer = train.Trainer(strategy, model, optimizer, train.StepOptions(temperature=0.2),
                            weight_decay_loss=optimizers.weight_decay_loss(model, "lars", 1e-3))
    steps = [random_batch(GLOBAL_BATCH, IMAGE_SIZE, seed=60 + s) for s in range(NUM_STEPS)]
    iterator = distributed_pretrain_iterator(strategy, steps)
    losses = [float(trainer.train_steps(iterator)["loss"]) for _ in steps]
    return initial, [w.numpy() for w in model.weights], losses


def main(out_path):
    # The strategy must exist before any other op runs in this process.
    from simclr_tf.run import distribute
    strategy = distribute.create_strategy("multiworker")
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    initial, final, losses = pretrain(strategy)
    np.savez(out_path, losses=np.array(losses),
             **{f"initial_{i}": w for i, w in enumerate(initial)},
             **{f"final_{i}": w for i, w in enumerate(final)})


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1])
