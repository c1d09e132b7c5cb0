"""What a fresh install needs and a used machine hides: the modules that TFDS's download
path imports. Nothing here downloads, builds a model or reads data.
"""
import importlib


# The modules that `DatasetBuilder.download_and_prepare` of a catalog image dataset
# (cifar10: download, extract, generate, shuffle, write) runs through, as traced on a
# fresh venv; several import their own dependencies lazily (`etils.epy.lazy_imports`),
# so importing the module alone proves nothing.
DOWNLOAD_PATH_MODULES = (
    "tensorflow_datasets.core.dataset_builder",
    "tensorflow_datasets.core.download.download_manager",
    "tensorflow_datasets.core.download.downloader",
    "tensorflow_datasets.core.download.extractor",
    "tensorflow_datasets.core.download.resource",
    "tensorflow_datasets.core.download.checksums",
    "tensorflow_datasets.core.split_builder",
    "tensorflow_datasets.core.writer",
    "tensorflow_datasets.core.shuffle",
    "tensorflow_datasets.core.hashing",
    "tensorflow_datasets.core.reader",
    "tensorflow_datasets.core.tf_compat",
)
# Lazy imports of those modules that such a download never resolves.
NOT_ON_THE_DOWNLOAD_PATH = {
    "apache_beam": "Beam datasets only",
    # Named in type annotations only; tensorflow-datasets 4.9.10 has no such module.
    "tensorflow_datasets.core.proto.dataset_info_pb2": "annotations only",
}


def _lazy_imports(module):
    """The names of the modules that `module` imports lazily (etils' LazyModule)."""
    return {value.module_name for value in vars(module).values()
            if type(value).__name__ == "LazyModule"}


def test_every_module_the_tfds_download_path_imports_is_installed():
    lazy = set()
    for name in DOWNLOAD_PATH_MODULES:
        lazy |= _lazy_imports(importlib.import_module(name))
    assert "importlib_resources" in lazy  # what a fresh venv lacked (setup.py)
    for name in sorted(lazy - set(NOT_ON_THE_DOWNLOAD_PATH)):
        importlib.import_module(name)  # ModuleNotFoundError: add it to install_requires


def test_a_catalog_builder_finds_its_code_without_downloading():
    # Where download_and_prepare first needs importlib_resources: the path of the
    # builder's checksums, beside its code. Computes a path; reads nothing.
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
    assert tfds.builder_cls("cifar10").code_path.name == "cifar.py"
