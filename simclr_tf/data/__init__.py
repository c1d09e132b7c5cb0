"""The input side of SimCLR: dataset sources and input pipelines (the augmentations
they apply are `simclr_tf.augment`).

- `registry`: `get_dataset(name, data_dir=...)` for TFDS (`tfds_source`),
  'folder:/path' (`folders`), the offline 'digits' (`digits`) and 'fashion_mnist'
  (`fashion_mnist`), all `sources.DatasetSource`s; `subsets`: label subsets for
  semi-supervised fine-tuning.
- `pipeline`: `build_input_fn` / `build_distributed_dataset`, per-replica batches.
"""
from simclr_tf.data import (
    digits, fashion_mnist, folders, pipeline, registry, sources, subsets, tfds_source)
from simclr_tf.data.pipeline import build_distributed_dataset, build_input_fn
from simclr_tf.data.registry import get_dataset, register_dataset
from simclr_tf.data.sources import DatasetSource, stratified_subset_ids
from simclr_tf.data.subsets import (LabelSubset, make_label_subset, read_subset_ids,
                                    write_subset_ids)

__all__ = [
    "DatasetSource", "LabelSubset", "build_distributed_dataset", "build_input_fn",
    "digits", "fashion_mnist", "folders", "get_dataset", "make_label_subset", "pipeline",
    "read_subset_ids", "register_dataset", "registry", "sources", "stratified_subset_ids",
    "subsets", "tfds_source", "write_subset_ids",
]
