"""The input side of SimCLR: augmentations, dataset sources, input pipelines.

- `augment`: the paper's augmentations as pure tf functions (`preprocess_for_train`,
  `preprocess_for_eval`, `batch_random_blur`, ...).
- `datasets`: `get_dataset(name, data_dir=...)` for TFDS, 'folder:/path' and the
  offline 'digits'; label subsets for semi-supervised fine-tuning.
- `pipeline`: `build_input_fn` / `build_distributed_dataset`, per-replica batches.
"""
from simclr_tf.data import augment, datasets, pipeline
from simclr_tf.data.augment import (batch_random_blur, preprocess_for_eval,
                                    preprocess_for_train)
from simclr_tf.data.datasets import (DatasetSource, LabelSubset, get_dataset,
                                     make_label_subset, read_subset_ids,
                                     register_dataset, stratified_subset_ids,
                                     write_subset_ids)
from simclr_tf.data.pipeline import build_distributed_dataset, build_input_fn

__all__ = [
    "DatasetSource", "LabelSubset", "augment", "batch_random_blur",
    "build_distributed_dataset", "build_input_fn", "datasets", "get_dataset",
    "make_label_subset", "pipeline", "preprocess_for_eval", "preprocess_for_train",
    "read_subset_ids", "register_dataset", "stratified_subset_ids", "write_subset_ids",
]
