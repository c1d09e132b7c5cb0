"""The colabs run top to bottom (nbclient) on the offline dataset with a tiny model."""
import os

import nbformat
import pytest
from nbclient import NotebookClient

COLABS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "colabs")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["load_and_inference.ipynb", "finetuning.ipynb"])
def test_colab_executes(name):
    notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": COLABS}})
    client.execute()
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    assert not errors
    assert any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
