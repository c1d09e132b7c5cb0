"""The input side of SimCLR: dataset sources and input pipelines (the augmentations
they apply are `simclr_tf.augment`).

- `registry`: `get_dataset(name, data_dir=...)` for TFDS (`tfds_source`),
  'folder:/path' (`folders`), the offline 'digits' (`digits`) and 'fashion_mnist'
  (`fashion_mnist`), all `sources.DatasetSource`s; `subsets`: label subsets for
  semi-supervised fine-tuning.
- `pipeline`: `build_input_fn` / `build_distributed_dataset`, per-replica batches.

Lazy: a module is imported when it is used (TFDS only by a TFDS dataset, the folder
scanner only by a folder).
"""
import importlib

# name -> the module that defines it
_EXPORTS = {
    "build_distributed_dataset": "pipeline", "build_input_fn": "pipeline",
    "get_dataset": "registry", "register_dataset": "registry",
    "DatasetSource": "sources", "stratified_subset_ids": "sources",
    "LabelSubset": "subsets", "make_label_subset": "subsets",
    "read_subset_ids": "subsets", "write_subset_ids": "subsets",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value  # found once: later lookups do not come here
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
