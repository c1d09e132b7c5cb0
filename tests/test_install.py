"""What a fresh install needs and a used machine hides: the modules that TFDS's download
path imports, the error of a keras-hub that is installed but does not import, and an
environment whose requirements are all met, with one TensorFlow. Nothing here
downloads, builds a model or reads data.
"""
import builtins
import importlib
import pathlib
import re

import pytest

from helpers.run_fixtures import config
from simclr_tf.run import preflight
from simclr_tf.config import ConfigError
from simclr_tf.models import hub


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


ROOT = pathlib.Path(__file__).resolve().parents[1]


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


def _failing_import(monkeypatch, error):
    """`import keras_hub` raises `error` (whether or not keras-hub is installed)."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "keras_hub" or name.startswith("keras_hub."):
            raise error
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_preflight_names_the_module_keras_hub_lacks_and_the_install_line(monkeypatch, tmp_path):
    _failing_import(monkeypatch, ModuleNotFoundError("No module named 'regex'", name="regex"))
    cfg = config(encoder="hub:ResNetBackbone", model_dir=str(tmp_path))
    with pytest.raises(ConfigError) as info:
        preflight._check_encoder(cfg)  # pylint: disable=protected-access
    message = str(info.value)
    assert info.value.flag == "encoder"
    assert "keras-hub is installed but does not import: it needs the module 'regex'" in message
    assert f"`{hub.INSTALL_COMMAND}`" in message
    assert hub.INSTALL_COMMAND == "pip install keras-hub==0.32.0"


def test_the_hub_import_error_says_what_is_missing(monkeypatch):
    _failing_import(monkeypatch, ModuleNotFoundError("No module named 'keras_hub'",
                                                     name="keras_hub"))
    with pytest.raises(ImportError, match="keras-hub is not installed. Install it with "
                       + re.escape(f"`{hub.INSTALL_COMMAND}`")):
        hub.import_keras_hub()


INSTALL = "pip install -e '.[test,hub,export,plot]'"


def _readme_commands():
    """The README's shell lines that run the tests: command 2 and the full suite."""
    readme = (ROOT / "README.md").read_text()
    return [line.strip() for line in readme.splitlines()
            if line.startswith("pip install") and "python -m pytest" in line]


def test_ci_runs_the_readmes_full_suite_command_with_the_install_line():
    fast, full = _readme_commands()
    assert fast == f"{INSTALL} && python -m pytest -n 2"
    assert full == f"{INSTALL} && python -m pytest --run_large --run_extra_large -n 2"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert [line for line in ci if line.startswith(full + " ")] == [
        full + " --durations=25 -rs"]


def _pinned_requirements():
    """'name==version' pins of setup.py and of hub.INSTALL_COMMAND."""
    pins = re.findall(r'"([A-Za-z0-9_.\-]+)==([0-9][^"]*)"', (ROOT / "setup.py").read_text())
    pins += re.findall(r"([A-Za-z0-9_.\-]+)==([0-9][0-9.]*)", hub.INSTALL_COMMAND)
    return sorted(set(pins))


def test_the_hub_install_command_is_the_hub_extra():
    """The line a missing keras-hub error gives installs the pin of setup.py's `hub`
    extra, which the README's test commands install."""
    extra = re.search(r'"hub": \["([^"]+)"\]', (ROOT / "setup.py").read_text()).group(1)
    assert hub.INSTALL_COMMAND == f"pip install {extra}"


def _requirement_closure(name, extras=()):
    """The distributions `name` (with `extras`) needs, recursively, by normalised name,
    from the installed metadata; the ones not installed are left out."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen, todo = set(), [(name, tuple(extras))]
    while todo:
        current, wanted = todo.pop()
        key = canonicalize_name(current)
        if key in seen and not wanted:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(current) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            environments = [{"extra": extra} for extra in wanted] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(env)
                                                 for env in environments):
                todo.append((requirement.name, tuple(requirement.extras)))
    return seen


def test_the_installed_requirements_are_consistent():
    """Issue 33, 3: after the README's test command (`.[test,hub,export,plot]`), every requirement
    of ours and of our requirements is met (`pip check`, for the distributions our
    closure holds: a user's unrelated packages are not ours to judge), and there is one
    TensorFlow: no tensorflow-cpu beside the `tensorflow` setup.py requires (two
    wheels writing one `tensorflow/` directory)."""
    import subprocess
    import sys
    from importlib import metadata

    from packaging.utils import canonicalize_name

    ours = _requirement_closure("simclr_tf", ("test", "hub", "export", "plot"))
    assert {"tensorflow", "keras", "tensorflow-datasets"} <= ours
    report = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True,
                            text=True, check=False).stdout.splitlines()
    broken = [line for line in report
              if line.split() and canonicalize_name(line.split()[0]) in ours]
    assert not broken, broken
    tensorflows = [name for name in ("tensorflow", "tensorflow-cpu", "tensorflow-intel")
                   if _installed(name, metadata)]
    assert tensorflows == ["tensorflow"], tensorflows


def _installed(name, metadata):
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def test_the_stated_python_admits_every_pinned_package():
    """The README's and setup.py's minimum Python is one every pinned package installs
    on (keras-hub 0.32.0 needs 3.11: command 2 once stopped there on 3.10). Read from
    the installed packages' metadata, so the pins are the ones this suite runs with."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    stated = re.search(r'python_requires=">=(\d+\.\d+)"',
                       (ROOT / "setup.py").read_text()).group(1)
    readme = (ROOT / "README.md").read_text()
    assert f"Python {stated}+" in readme
    pins = _pinned_requirements()
    assert {"tensorflow", "keras", "keras-hub"} <= {name for name, _ in pins}
    for name, version in pins:
        try:
            installed = metadata.metadata(name)
        except metadata.PackageNotFoundError:
            continue  # keras-hub is optional; the others are installed with the package
        assert installed["Version"] == version, (name, installed["Version"], version)
        requires = installed.get("Requires-Python") or ""
        assert f"{stated}.0" in SpecifierSet(requires), (
            f"{name}=={version} requires Python {requires}: the stated minimum "
            f"{stated} does not admit it")
