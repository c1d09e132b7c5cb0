"""MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1 against one process,
and run.py workers whose peer never starts or dies mid-run.

Each worker runs tests/multiworker_worker.py with its own TF_CONFIG; both must end
with the same weights (sync BN statistics included) as one process that trains on
the global batch. The run.py tests check the bounded wait for peers, SIGTERM during
it and the error naming a lost peer (simclr_tf.run.cluster; docs/design.md).
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


@pytest.mark.extra_large  # 96 s (load 2.9): start-up, 3 steps, then 10-19 s to stop
def test_a_peer_killed_mid_run_is_named_by_the_survivor(tmp_path):
    """SIGKILL of worker 1 during training: worker 0 (the chief, which hosts
    TensorFlow's coordination service) stops with run.py's error naming worker 1 once
    its heartbeats stop, not TensorFlow's UnavailableError traceback; the
    checkpoints written are kept."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = [_start_run_worker(tmp_path, workers, index, "--train_steps=400")
                 for index in range(2)]
    try:
        chief, chief_log = processes[0]
        _wait_for_line(chief, chief_log, "step 3/400", timeout=240)
        processes[1][0].kill()
        killed = time.monotonic()
        assert chief.wait(timeout=120) == 1, chief_log.read_text()[-3000:]
        stopped_after = time.monotonic() - killed
        print(f"worker 0 stopped {stopped_after:.1f} s after worker 1's SIGKILL")
    finally:
        for process, _ in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    log = chief_log.read_text()
    assert f"run.py: error: worker 1 at {workers[1]} stopped or can no longer be " \
        f"reached, so worker 0 at {workers[0]} (this process) cannot go on" in log, \
        log[-3000:]
    assert "The checkpoints already written are kept: restart every worker with the " \
        "same command" in log
    assert "Traceback" not in log and "UnavailableError" not in log, log[-3000:]
    assert stopped_after < 90, stopped_after  # TensorFlow's heartbeat: 10-19 s here
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) is not None
