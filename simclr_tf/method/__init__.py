"""The paper's method: what a training step computes.

- `losses`: NT-Xent over the negatives gathered from every replica (eq. 1) and the
  supervised head's loss (the alternatives with the objectives that use them).
- `lars`: LARS and which variables it excludes from weight decay and trust-ratio
  scaling; `optimizers`: the factory of --optimizer, the weight decay in the loss
  and a variable's own rate (--head_learning_rate); `schedules`: linear warmup then
  cosine decay.
- `objectives/`: pretraining, fine-tuning and distillation (with its losses, SimCLR v2
  eq. 2-3), each one objective; Table 2's loss alternatives (`pair_losses`).
- `train`: the training step and the `Trainer` that compiles it; `finite`: the
  non-finite guards; `grad_cache`: the step in chunks; `keras_fit`: the same step
  under `Model.fit`.

TensorFlow only: no flags, no files, no run directory.
"""
