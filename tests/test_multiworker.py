"""MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1 against one process.

Each worker runs tests/multiworker_worker.py with its own TF_CONFIG; both must end
with the same weights (sync BN statistics included) as one process that trains on
the global batch.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import multiworker_worker
from helpers.process_fixtures import free_ports, wait_all

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
TIMEOUT_S = 90


def _load(path):
    with np.load(path) as data:
        count = sum(1 for k in data.files if k.startswith("final_"))
        return ([data[f"initial_{i}"] for i in range(count)],
                [data[f"final_{i}"] for i in range(count)], data["losses"])


@pytest.mark.large  # 16 s
def test_two_workers_match_one_process(tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, TESTS_DIR, env.get("PYTHONPATH", "")])
    env["CUDA_VISIBLE_DEVICES"] = ""
    processes = []
    for index in range(2):
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        log = open(tmp_path / f"worker{index}.log", "w")
        processes.append((subprocess.Popen(
            [sys.executable, os.path.join(TESTS_DIR, "multiworker_worker.py"),
             str(tmp_path / f"worker{index}.npz")],
            env=dict(env), stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT), log))

    # The single-process reference runs meanwhile (the workers mostly wait on imports).
    initial, final, losses = multiworker_worker.pretrain(tf.distribute.get_strategy())

    for index, code in enumerate(wait_all(processes, TIMEOUT_S)):
        assert code == 0, (tmp_path / f"worker{index}.log").read_text()[-3000:]

    results = [_load(tmp_path / f"worker{index}.npz") for index in range(2)]
    assert max(np.abs(f - i).max() for f, i in zip(final, initial)) > 1e-2
    for worker_initial, worker_final, worker_losses in results:
        for a, b in zip(worker_initial, initial):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(worker_losses, losses, rtol=1e-5)
        for a, b in zip(worker_final, final):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
    # The workers agree with each other exactly (they apply the same all-reduced update).
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, atol=1e-7)
