"""Dataset names -> `DatasetSource`s: `get_dataset`, `register_dataset`.

```python
source = get_dataset("cifar10", data_dir="/data/tfds")   # any TFDS image dataset
source = get_dataset("folder:/data/my_images")           # a folder of images
source = get_dataset("digits")                           # offline, scikit-learn's digits
source = get_dataset("fashion_mnist")  # offline, `apt-get install dataset-fashion-mnist`
```

Names, in the order they are tried:
- `folder:/path`: a folder of images (`folders.ImageFolderSource`).
- a registered name (`registered_datasets()`): 'digits' (`digits.DigitsSource`),
  'fashion_mnist' (`fashion_mnist.fashion_mnist_source`: the IDX files in data_dir or
  Debian's package, else TFDS's prepared copy; the registered name wins over TFDS's
  of the same name) and whatever `register_dataset` added.
- anything else: a TFDS dataset read from `data_dir` (`tfds_source.TFDSSource`).

Two names hold the same examples when their `dataset_identity` is equal: a folder's
real path (`folder:X/`, `folder:X/../X` and `folder:X` are one dataset), a variant
registered with `examples_of` its base's ('fashion_mnist_tinted' is
'fashion_mnist'), any other name itself. Preflight compares what trained a run's
weights with what evaluates them by it.

Adding a dataset touches one file:
- a TFDS dataset: nothing once it is prepared in `data_dir`; to know its sizes before
  that, one entry in `tfds_source.KNOWN_TFDS_DATASETS`.
- any other dataset: one entry in `_FACTORIES` below, `name: factory(data_dir) ->
  DatasetSource` (or `register_dataset(name, factory)` from your own code, touching
  no file here). A new kind of source goes in a module of its own, like `digits.py`
  (an `ArraySource` when its examples fit in arrays).
"""
from __future__ import annotations

import difflib
import os
from typing import Callable

from simclr_tf.data import fashion_mnist
from simclr_tf.data.digits import DigitsSource
from simclr_tf.data.folders import ImageFolderSource
from simclr_tf.data.sources import FOLDER_PREFIX, DatasetSource
from simclr_tf.data.tfds_source import TFDSSource, UnknownDatasetError, tfds_names

_FACTORIES: dict[str, Callable[[str | None], DatasetSource]] = {
    "digits": lambda data_dir: DigitsSource(),
    fashion_mnist.NAME: fashion_mnist.fashion_mnist_source,
    fashion_mnist.TINTED_NAME: fashion_mnist.tinted_fashion_mnist_source,
}
# name -> the dataset whose examples it holds under another name: the same ids, each
# example a deterministic function of the base's (the tint of a grey image is drawn
# from its id: `fashion_mnist.tints`), so a split of one and the same split of the
# other are the same examples (`dataset_identity`).
_EXAMPLES_OF: dict[str, str] = {fashion_mnist.TINTED_NAME: fashion_mnist.NAME}


def register_dataset(name: str, factory: Callable[[str | None], DatasetSource], *,
                     examples_of: str | None = None) -> None:
    """Registers `factory(data_dir) -> DatasetSource` under `name`.

    Args:
      name: the name for `get_dataset`; must not start with 'folder:'.
      factory: called with `data_dir` on every `get_dataset(name)`.
      examples_of: the dataset whose examples `name` holds, with the same ids and
        splits (a variant drawn from each example, as 'fashion_mnist_tinted' is of
        'fashion_mnist'); None: examples of its own. See `dataset_identity`.
    """
    if not isinstance(name, str) or not name or name.startswith(FOLDER_PREFIX):
        raise ValueError(f"`name` must be a non-empty string not starting with "
                         f"{FOLDER_PREFIX!r}. Received: name={name!r}")
    if examples_of is not None and (not isinstance(examples_of, str) or not examples_of
                                    or examples_of == name):
        raise ValueError("`examples_of` must be another dataset's name. Received: "
                         f"examples_of={examples_of!r}")
    _FACTORIES[name] = factory
    _EXAMPLES_OF.pop(name, None)
    if examples_of is not None:
        _EXAMPLES_OF[name] = dataset_identity(examples_of)  # a variant's base's


def dataset_identity(name: str) -> str:
    """What the examples of the dataset called `name` are: two names with one
    identity hold the same examples, with the same ids.

    - 'folder:<path>': 'folder:' and the folder's real path (`~` expanded, links,
      '..' and a trailing '/' resolved), relative to the working directory as
      `get_dataset` reads it;
    - a variant registered with `examples_of` ('fashion_mnist_tinted'): the
      identity of the dataset it was made from ('fashion_mnist');
    - any other name (TFDS, 'digits'): the name.

    No data is read: a folder's path is resolved, nothing more.
    """
    if name.startswith(FOLDER_PREFIX):
        path = os.path.expanduser(name[len(FOLDER_PREFIX):])
        return FOLDER_PREFIX + os.path.realpath(path)
    return _EXAMPLES_OF.get(name, name)


def registered_datasets() -> tuple[str, ...]:
    """Names registered besides TFDS and folders ('digits', 'fashion_mnist', ...)."""
    return tuple(sorted(_FACTORIES))


def get_dataset(name: str, *, data_dir: str | None = None,
                skip_corrupt_images: bool = True, download: bool = False) -> DatasetSource:
    """The dataset called `name`: registered, 'folder:/path', or TFDS.

    Args:
      name: 'digits', 'fashion_mnist', 'folder:/path/to/images', or a TFDS name
        such as 'cifar10'.
      data_dir: TFDS data folder (also where 'fashion_mnist' looks for its files;
        ignored by the other kinds).
      skip_corrupt_images: folders only: skip undecodable files (see
        `ImageFolderSource`) instead of raising `CorruptImageError`.
      download: TFDS only: download and prepare a dataset missing from data_dir.

    Returns:
      A `DatasetSource`.

    Raises:
      ValueError: unknown name (`UnknownDatasetError`, with the nearest known name),
        missing folder, or a TFDS dataset neither prepared in `data_dir` nor in
        `KNOWN_TFDS_DATASETS`. A known TFDS dataset is returned even when its data is
        absent: `source.check_prepared()` says.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")
    if name.startswith(FOLDER_PREFIX):
        return ImageFolderSource(os.path.expanduser(name[len(FOLDER_PREFIX):]),
                                 skip_corrupt_images=skip_corrupt_images)
    if name in _FACTORIES:
        return _FACTORIES[name](data_dir)
    try:
        return TFDSSource(name, data_dir=data_dir, download=download)
    except UnknownDatasetError as error:
        base = name.split(":")[0].split("/")[0]
        # A known dataset with a wrong config or version needs no other name.
        guess = None if base in tfds_names() else closest_name(name)
        hint = f" Did you mean {guess!r}?" if guess else ""
        raise UnknownDatasetError(f"{error}{hint}") from None


def closest_name(name: str) -> str | None:
    """The known dataset name nearest to a misspelt one ('cifar-10' -> 'cifar10')."""
    names = list(registered_datasets()) + tfds_names()
    by_lower = {n.lower(): n for n in names}
    matches = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[matches[0]] if matches else None
