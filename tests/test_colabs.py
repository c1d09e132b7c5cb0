"""The colabs run top to bottom (nbclient) on the offline dataset with a tiny model."""
import os

import nbformat
import pytest
from nbclient import NotebookClient

from helpers import official_fixtures
from simclr_tf.run import quiet

COLABS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "colabs")


NAMES = ["load_and_inference.ipynb", "finetuning.ipynb", "pretrain_with_fit.ipynb"]
# The colab that imports one of the authors' released models (SIMCLR_RELEASED_MODEL).
LOADS_A_RELEASED_MODEL = "load_and_inference.ipynb"
# The run.py colabs train ResNet-18 x0.125 for a reader; executed here, they train the
# tiny encoder instead: their subject is the command line, the run directory and the
# exports, and a ResNet-18 run costs 10-15 s more per process (docs/testing.md).
RESNET_FLAGS, TINY_FLAGS = 'stem="cifar", resnet_depth=18,', 'encoder="tiny",'
RUN_PY_COLABS = ("load_and_inference.ipynb", "finetuning.ipynb")


@pytest.mark.parametrize("name", NAMES)
def test_colabs_are_saved_with_outputs_and_use_the_public_interface(name):
    """What a reader sees before running anything: outputs saved; an install cell; the
    command line rather than internals; no path outside the repository."""
    notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert sum(1 for cell in code if cell.get("outputs")) >= 3
    assert not [o for cell in code for o in cell.get("outputs", [])
                if o.get("output_type") == "error"]
    source = "\n".join(cell.source for cell in code)
    assert "pip\", \"install\"" in code[0].source
    if name == "pretrain_with_fit.ipynb":  # the Keras way: the library, not run.py
        assert "simclr_tf.SimCLR(" in source and ".fit(" in source
    else:
        assert "run.py" in source
    assert "experiment.run" not in source and "Config" not in source
    assert "shared/" not in source
    # TensorFlow is imported the entry points' way, so its start-up notices (oneDNN, no
    # CUDA driver, cuInit) are not saved as what a reader sees first.
    assert "tf = quiet.import_tensorflow()" in source
    assert "import tensorflow" not in source
    printed = [line for cell in code for o in cell.get("outputs", [])
               for line in "".join(o.get("text", "")).splitlines()]
    assert not [line for line in printed if line.startswith(quiet.PRE_INIT_NOTICE)
                or quiet.PRE_INIT_LINE.match(line) or "pip as the 'root' user" in line]


def _released_model(request, directory):
    """The authors' released R50 (the released_r50 fixture) where
    $SIMCLR_TF_RELEASED_R50 names it, else a small R50 with random weights written in
    their layout by the test: the colab's released-model section runs either way."""
    if os.environ.get("SIMCLR_TF_RELEASED_R50"):  # conftest.RELEASED_R50_ENV
        return request.getfixturevalue("released_r50")
    return official_fixtures.write_small_official(directory / "released")[0]


@pytest.mark.parametrize("name", [  # a kernel each
    pytest.param(name, marks=pytest.mark.large if name == "pretrain_with_fit.ipynb"
                 else pytest.mark.extra_large) for name in NAMES])
def test_colab_executes(name, monkeypatch, request, tmp_path):
    if name == LOADS_A_RELEASED_MODEL:
        monkeypatch.setenv("SIMCLR_RELEASED_MODEL", _released_model(request, tmp_path))
    notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
    if name in RUN_PY_COLABS:
        cells = [cell for cell in notebook.cells if RESNET_FLAGS in cell.source]
        assert cells, f"{name} no longer names {RESNET_FLAGS}: update RESNET_FLAGS"
        for cell in cells:
            cell.source = cell.source.replace(RESNET_FLAGS, TINY_FLAGS)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": COLABS}})
    client.execute()
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    assert not errors
    assert any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
    if name == LOADS_A_RELEASED_MODEL:  # its released-model section ran, not skipped
        printed = "".join(output.get("text", "") for cell in notebook.cells
                          if cell.cell_type == "code" for output in cell.get("outputs", []))
        assert "released model h:" in printed
