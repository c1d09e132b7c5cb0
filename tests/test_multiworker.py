"""MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1 against one process,
and run.py workers whose peer never starts (a peer that dies mid-run:
tests/test_reliability.py's multi-worker restart).

Each worker runs tests/multiworker_worker.py with its own TF_CONFIG; both must end
with the same weights (sync BN statistics included) as one process that trains on
the global batch. The run.py tests check the bounded wait for peers and SIGTERM during
it (simclr_tf.run.cluster; docs/design.md).
"""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import multiworker_worker
from helpers.process_fixtures import free_ports, wait_all
from helpers.run_fixtures import TINY

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


# ------------------------------------------------------------------ run.py workers


def _start_run_worker(tmp_path, workers, index, *flags):
    """run.py as worker `index` of `workers` (tiny digits run); (process, log path)."""
    command = [sys.executable, os.path.join(REPO_ROOT, "run.py"), "--strategy=multiworker",
               f"--model_dir={tmp_path / 'run'}", "--mode=train", "--checkpoint_steps=2",
               "--train_split=train[:128]", "--progress=lines", "--log_every_steps=1",
               *[f"--{k}={v}" for k, v in TINY.items() if k != "train_split"], *flags]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                     "task": {"type": "worker", "index": index}}))
    log_path = tmp_path / f"worker{index}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=REPO_ROOT)
    return process, log_path


def _wait_for_line(process, log_path, text, timeout):
    deadline = time.monotonic() + timeout
    while text not in log_path.read_text():
        assert process.poll() is None and time.monotonic() < deadline, \
            log_path.read_text()[-3000:]
        time.sleep(0.05)


@pytest.mark.large  # 10-12 s (6-9 s of it TensorFlow's import)
def test_a_peer_that_never_starts_is_named_after_peer_wait_secs(tmp_path):
    """Worker 0 of two, worker 1 never started: once TensorFlow's rendezvous waited
    forever with an empty log and took SIGTERM."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    start = time.monotonic()
    process, log_path = _start_run_worker(tmp_path, workers, 0, "--train_steps=2",
                                          "--peer_wait_secs=3")
    assert process.wait(timeout=120) == 1, log_path.read_text()[-3000:]
    assert time.monotonic() - start < 60
    log = log_path.read_text()
    assert f"Waiting for worker 1 at {workers[1]} of the multi-worker cluster (TF_CONFIG) " \
        "to answer (0 s of 3 s, --peer_wait_secs)." in log, log
    assert f"run.py: error: worker 0 at {workers[0]} (this process) waited 3 s for the " \
        f"other workers of TF_CONFIG, and 1 of 1 never answered (worker 1 at " \
        f"{workers[1]}: connection refused" in log, log
    assert "Traceback" not in log and not (tmp_path / "run").exists()


@pytest.mark.large  # 7-8 s
def test_sigterm_while_waiting_for_peers_exits_143_at_once(tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    process, log_path = _start_run_worker(tmp_path, workers, 1, "--train_steps=2")
    _wait_for_line(process, log_path, "Waiting for worker 0", timeout=120)
    process.send_signal(signal.SIGTERM)
    start = time.monotonic()
    assert process.wait(timeout=60) == 143, log_path.read_text()[-3000:]
    assert time.monotonic() - start < 10  # measured 1 s (interpreter shut-down)
    log = log_path.read_text()
    assert "run.py: interrupted (SIGTERM) while waiting for the multi-worker peers, " \
        "before anything was trained: run the same command again to start." in log, log
    assert "Traceback" not in log


# A peer SIGKILLed mid-run, named by the survivor (run.py's error, not TensorFlow's
# UnavailableError traceback): the killed phase of
# test_reliability::test_multiworker_run_killed_and_restarted_matches_an_uninterrupted_one,
# which restarts the run afterwards.
