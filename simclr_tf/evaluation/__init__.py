"""Evaluation of an encoder: one job per module; the trainer and `experiment` only
call them.

- `features`: the one eval input pipeline (`eval_dataset`: centre crop and resize,
  example ids, the last batch padded) and feature extraction under any strategy
  (`FeatureExtractor`, `extract`), example names and sampled ids, feature caches.
- `supervised`: top-1 / top-5 / loss of the supervised head over a split, under any
  strategy, without an optimizer.
- `knn`: weighted k-nearest-neighbour accuracy on frozen h, and the `KnnMonitor` of
  pretraining.
- `probe`: the paper's L-BFGS linear probe on frozen features.
- `transfer`: kNN and linear probe of one encoder on labelled datasets, as a table.
- `writers`: embeddings to .npz / Parquet, the TensorBoard projector (sprites).
"""
