"""The paper's method: what a training step computes.

- `losses`: NT-Xent over the negatives gathered from every replica (eq. 1), the
  supervised head's loss, distillation's (SimCLR v2, eq. 2).
- `lars`: LARS and which variables it excludes from weight decay and trust-ratio
  scaling; `loss_decay`: the weight decay in the loss; `rate_multipliers`: a
  variable's own rate (--head_learning_rate); `optimizers`: the factory of
  --optimizer; `schedules`: linear warmup then cosine decay.
- `objectives/`: pretraining, fine-tuning and distillation, each one objective.
- `train`: the training step and the `Trainer` that compiles it; `finite`: the
  non-finite guards; `grad_cache`: the step in chunks; `keras_fit`: the same step
  under `Model.fit`.

TensorFlow only: no flags, no files, no run directory.
"""
