"""Evaluation of an encoder: one job per module; the modes and the loop only call them.

- `base`: the one interface: an `Evaluator` is built from the strategy and plain
  arguments, `run(model, step)` returns {record / TensorBoard name: value},
  `describe` gives its printed line.
- `registry`: evaluator names -> classes (`get_evaluator`, `register_evaluator`);
  `simclr_tf.run.modes.evaluations.evaluators_for` builds them from the Config.
- `features`: the one eval input pipeline (`eval_dataset`: centre crop and resize,
  example ids, the last batch padded) and feature extraction under any strategy
  (`FeatureExtractor`, `extract`), example names and sampled ids, feature caches.
- `supervised`: top-1 / top-5 / loss of the supervised head over a split, under any
  strategy, without an optimizer (`SupervisedEval`: --mode=eval's evaluator).
- `knn`: weighted k-nearest-neighbour accuracy on frozen h, and `KnnEval`, the kNN
  monitor of pretraining.
- `probe`: the paper's L-BFGS linear probe on frozen features.
- `transfer`: kNN and linear probe of one encoder on labelled datasets, as a table;
  `LinearProbeEval` (--mode=linear_probe) and `FinalProbeEval` (--final_linear_probe).
- `writers`: embeddings to .npz / Parquet, the TensorBoard projector (sprites).
"""
