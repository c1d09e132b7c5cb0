"""dev/compare_runs.py's `compare`, the verdict every restructuring is held to: two
outputs are identical only when every tensor is equal bit for bit and every result
entry is equal once each output's own folder is read as `<out>`. Each fault it exists
to catch is planted in a copy of one output: a tensor one ulp off, a tensor in one
output only, a result that moved, at any depth. No TensorFlow: the outputs are written
here as `run` writes them."""
import json
import os
import sys

import numpy as np

DEV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dev")
sys.path.insert(0, DEV)

import compare_runs  # noqa: E402  (dev/)


def _output(folder, tensors, results):
    os.makedirs(folder)
    np.savez(os.path.join(folder, "tensors.npz"), **tensors)
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump(results, f)
    return str(folder)


def _pair(tmp_path, change=None):
    """Two outputs of the same runs in two folders; `change(tensors, results)` plants
    a fault in the second."""
    tensors = {"pretrain/w": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
               "pretrain/step": np.array(4, np.int64)}

    def results(out):
        # The paths a run records name its own output folder, at any depth.
        return {"pretrain": {"top_1": 0.25, "checkpoint": f"{out}/pretrain/ckpt-4"},
                "distill": {"eval_trained_by": [
                    {"run": f"{out}/finetune", "weights": f"{out}/finetune",
                     "role": f"the weights {out}/finetune started from"}]}}
    a = _output(tmp_path / "a", tensors, results(tmp_path / "a"))
    tensors_b = {k: v.copy() for k, v in tensors.items()}
    results_b = results(tmp_path / "b")
    if change is not None:
        change(tensors_b, results_b)
    return a, _output(tmp_path / "b", tensors_b, results_b)


def test_the_same_runs_in_two_folders_are_identical(tmp_path, capsys):
    assert compare_runs.compare(*_pair(tmp_path)) == 0
    assert "2 tensors: 0 differ, 0 in one output only; 0 result entries differ" in (
        capsys.readouterr().out)


def test_a_tensor_one_ulp_off_fails(tmp_path, capsys):
    def change(tensors, _):
        w = tensors["pretrain/w"]
        w[1, 2] = np.nextafter(w[1, 2], np.float32(2))
    assert compare_runs.compare(*_pair(tmp_path, change)) == 1
    assert "pretrain/w" in capsys.readouterr().out


def test_a_tensor_in_one_output_only_fails(tmp_path, capsys):
    def change(tensors, _):
        tensors["pretrain/extra_slot"] = np.zeros(2, np.float32)
    assert compare_runs.compare(*_pair(tmp_path, change)) == 1
    assert "1 in one output only" in capsys.readouterr().out


def test_a_moved_result_fails_at_any_depth(tmp_path, capsys):
    def top(_, results):
        results["pretrain"]["top_1"] = 0.2500001
    assert compare_runs.compare(*_pair(tmp_path, top)) == 1
    assert "pretrain/top_1" in capsys.readouterr().out

    def nested(_, results):  # another run's weights, named inside a list
        results["distill"]["eval_trained_by"][0]["weights"] = "/elsewhere/finetune"
    assert compare_runs.compare(*_pair(tmp_path / "nested", nested)) == 1
    assert "distill/eval_trained_by" in capsys.readouterr().out


def test_a_run_needs_an_empty_folder(tmp_path):
    """A folder holding checkpoints would be resumed from, and nothing trained."""
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "ckpt-4.index").write_text("")
    try:
        compare_runs.run(str(tmp_path / "old"))
    except SystemExit as stop:
        assert "is not empty" in str(stop)
    else:
        raise AssertionError("run() trained into a folder holding checkpoints")
