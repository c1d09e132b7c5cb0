"""The colabs run top to bottom (nbclient) on the offline dataset with a tiny model."""
import os
import tempfile

import nbformat
import pytest
from nbclient import NotebookClient

import run
from helpers import cli_flags, official_fixtures
from simclr_tf.run import quiet

COLABS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "colabs")


NAMES = ["load_and_inference.ipynb", "finetuning.ipynb", "pretrain_with_fit.ipynb"]
# The colab that imports one of the authors' released models (SIMCLR_RELEASED_MODEL).
LOADS_A_RELEASED_MODEL = "load_and_inference.ipynb"
# Executed here, the colabs train the tiny encoder instead of the ResNet-18 a reader
# trains: their subject is the command line, the run directory, the exports and the
# Keras way's fit(), and a ResNet-18 costs 10-15 s more per process (docs/testing.md).
# Each (what the colab says, what the test runs instead) must be found in a cell.
REPLACEMENTS = {
    "finetuning.ipynb": [
        ('stem="cifar", resnet_depth=18,', 'encoder="tiny",'),
        # Its fine-tuned run's export is never read (the pretrained run's is).
        ('model_dir=finetune_dir, mode="train_then_eval")',
         'model_dir=finetune_dir, mode="train_then_eval", export_format="none")')],
    "pretrain_with_fit.ipynb": [
        ('encoder_options=dict(depth=18, width_multiplier=0.25, stem="cifar")',
         'encoder="tiny", encoder_options=dict(width_multiplier=0.25)')],
}
# A run.py colab pretrains for a reader unless given a run of theirs (the variable):
# here it is given the session's tiny run (helpers.run_fixtures.TinyRun: the same
# dataset, image size, augmentation flags and encoder as the commands run here, 4
# steps), and the reader's pretraining command, as the colab says it, is checked in
# process instead (`_skipped_commands`). finetuning.ipynb fine-tunes from the run
# (run.py) and serves its export; load_and_inference.ipynb serves the export.
READER_RUNS = {"finetuning.ipynb": "SIMCLR_PRETRAINED",
               "load_and_inference.ipynb": "SIMCLR_SAVED_MODEL"}


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


def _skipped_commands(notebook, variable, tmp_path, monkeypatch):
    """The run.py commands the colab runs when `variable` is unset, as the Configs
    run.py would build (`run.config_from_flags`: a bad flag or value raises): its
    cells up to the first that calls `simclr_run` are executed here, without
    `variable`, and that helper records its flags instead of starting run.py."""
    calls = []

    def simclr_run(**flags):  # the colab's helper's command line, not run
        calls.append(["--progress=lines"] + [f"--{k}={v}" for k, v in flags.items()])
        return {"saved_model": str(tmp_path / "not_trained")}

    namespace = {}
    with monkeypatch.context() as patch:
        patch.delenv(variable, raising=False)
        patch.setattr(tempfile, "tempdir", str(tmp_path))  # the colab's mkdtemp()s
        for cell in notebook.cells:
            if cell.cell_type == "code" and not calls:
                exec(compile(cell.source, "colab cell", "exec"), namespace)  # pylint: disable=exec-used
                namespace["simclr_run"] = simclr_run
    assert calls, f"no cell runs simclr_run without {variable}"
    return [run.config_from_flags(cli_flags.flag_values(argv)) for argv in calls]


@pytest.mark.parametrize("name", [  # a kernel each
    pytest.param(name, marks=pytest.mark.large if name == "pretrain_with_fit.ipynb"
                 else pytest.mark.extra_large) for name in NAMES])
def test_colab_executes(name, monkeypatch, request, tmp_path):
    notebook = nbformat.read(os.path.join(COLABS, name), as_version=4)
    if name in READER_RUNS:
        (pretraining,) = _skipped_commands(notebook, READER_RUNS[name], tmp_path,
                                           monkeypatch)
        assert (pretraining.mode, pretraining.train_mode) == ("train", "pretrain")
        tiny_run = request.getfixturevalue("tiny_run")
        given = (tiny_run.copy_to(tmp_path / "pretrained").model_dir
                 if READER_RUNS[name] == "SIMCLR_PRETRAINED"
                 else tiny_run.result["saved_model"])
        monkeypatch.setenv(READER_RUNS[name], given)
    if name == LOADS_A_RELEASED_MODEL:
        monkeypatch.setenv("SIMCLR_RELEASED_MODEL", _released_model(request, tmp_path))
    for said, instead in REPLACEMENTS.get(name, []):
        cells = [cell for cell in notebook.cells if said in cell.source]
        assert cells, f"{name} no longer says {said}: update REPLACEMENTS"
        for cell in cells:
            cell.source = cell.source.replace(said, instead)
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
