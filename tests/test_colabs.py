"""The colabs run top to bottom (nbclient) on the offline dataset with a tiny model."""
import os

import nbformat
import pytest
from nbclient import NotebookClient

COLABS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "colabs")


NAMES = ["load_and_inference.ipynb", "finetuning.ipynb", "pretrain_with_fit.ipynb"]
RELEASED_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                              "shared", "reference", "official_r50_1x_sk0")


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


@pytest.mark.extra_large  # 36-73 s each, a kernel process
@pytest.mark.parametrize("name", NAMES)
def test_colab_executes(name, monkeypatch):
    if os.path.isdir(RELEASED_MODEL):  # the released-model section runs too
        monkeypatch.setenv("SIMCLR_RELEASED_MODEL", RELEASED_MODEL)
    notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": COLABS}})
    client.execute()
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    assert not errors
    assert any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
