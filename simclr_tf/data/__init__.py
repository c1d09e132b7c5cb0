"""The input side of SimCLR: augmentations, dataset sources, input pipelines.

- `augment`: the paper's augmentations as pure tf functions (`preprocess_for_train`,
  `preprocess_for_eval`, `batch_random_blur`, ...).
- `registry`: `get_dataset(name, data_dir=...)` for TFDS (`tfds_source`),
  'folder:/path' (`folders`), the offline 'digits' (`digits`) and 'fashion_mnist'
  (`fashion_mnist`), all `sources.DatasetSource`s; `subsets`: label subsets for
  semi-supervised fine-tuning.
- `pipeline`: `build_input_fn` / `build_distributed_dataset`, per-replica batches.
"""
from simclr_tf.data import (augment, digits, fashion_mnist, folders, pipeline, registry,
                            sources, subsets, tfds_source)
from simclr_tf.data.augment import (batch_random_blur, preprocess_for_eval,
                                    preprocess_for_train)
from simclr_tf.data.pipeline import build_distributed_dataset, build_input_fn
from simclr_tf.data.registry import get_dataset, register_dataset
from simclr_tf.data.sources import DatasetSource, stratified_subset_ids
from simclr_tf.data.subsets import (LabelSubset, make_label_subset, read_subset_ids,
                                    write_subset_ids)

__all__ = [
    "DatasetSource", "LabelSubset", "augment", "batch_random_blur",
    "build_distributed_dataset", "build_input_fn", "digits", "fashion_mnist", "folders",
    "get_dataset", "make_label_subset", "pipeline", "preprocess_for_eval",
    "preprocess_for_train", "read_subset_ids", "register_dataset", "registry", "sources",
    "stratified_subset_ids", "subsets", "tfds_source", "write_subset_ids",
]
