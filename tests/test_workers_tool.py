"""scripts/workers.py's own parts, in process: how it counts a worker's reads from an
strace log, what it reads from run.py's log, and that every flag reaches the runs
(the runs themselves: docs/scaling.md, measured)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "scripts"))
import workers  # noqa: E402  (scripts/)


def test_reads_and_scans_are_told_apart(tmp_path):
    folder = tmp_path / "images"
    (folder / "a").mkdir(parents=True)
    trace = tmp_path / "trace"
    trace.write_text("\n".join([
        f'7 openat(AT_FDCWD, "{folder}/a/1.jpg", O_RDONLY|O_CLOEXEC) = 3',  # scan
        f'8 openat(AT_FDCWD, "{folder}/a/1.jpg", O_RDONLY) = 4',  # TF's read
        f'9 openat(AT_FDCWD, "{folder}/a/2.jpg", O_RDONLY <unfinished ...>',
        f'9 openat(AT_FDCWD, "{folder}/a", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY) = 3',
        f'9 openat(AT_FDCWD, "{folder}/a/3.jpg", O_RDONLY) = -1 ENOENT (No such file)',
        f'9 openat(AT_FDCWD, "{tmp_path}/images2/a/1.jpg", O_RDONLY) = 5',  # another folder
    ]))
    assert workers.count_opens(str(trace), str(folder)) == (2, 1)


def test_log_facts():
    text = ("Training 31 steps (3.10 epochs of 600 examples; 0 done), checkpoint every\n"
            "step 10/31 | loss 1 | 0.5 s/step (input wait 0%)\n"
            "step 31/31 | loss 1 | 0.25 s/step (input wait 0%)\n")
    assert workers._log_facts(text) == dict(steps=31, epochs=3.1, examples=600,  # pylint: disable=protected-access
                                            seconds_per_step=0.25)
    assert workers._log_facts("nothing") is None  # pylint: disable=protected-access


def test_every_flag_reaches_the_runs(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(workers, "run_workers", lambda count, folder, work, repo, batch,
                        epochs, extra, strace=True, children=None: seen.append(
                            (count, folder, work, repo, batch, epochs, extra, strace)) or [
                                dict(workers=count, worker=0, peak_rss_mb=1.0)])
    folder = tmp_path / "images"
    folder.mkdir()
    workers.main([f"--folder={folder}", "--workers=2,4", "--train_batch_size=8",
                  "--train_epochs=5", "--run_flag=--image_size=32", f"--work={tmp_path}",
                  "--no_strace", f"--json={tmp_path / 'rows.json'}"])
    assert [s[0] for s in seen] == [2, 4]
    for _, got_folder, work, repo, batch, epochs, extra, strace in seen:
        assert (got_folder, work, repo, batch, epochs, extra, strace) == (
            str(folder), str(tmp_path), workers.REPO, 8, 5, ["--image_size=32"], False)
    assert (tmp_path / "rows.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["--workers=2,x"], "whole numbers"),
    (["--workers=3", "--train_batch_size=8"], "does not divide"),
    (["--folder=/no/such/folder"], "is not a folder"),
    (["--run_flag=image_size=32"], "a run.py flag"),
    (["--repo=/tmp"], "has no run.py"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        workers.parse_args(argv + ["--no_strace"])
    assert message in capsys.readouterr().err


def test_one_process_is_compared_for_every_run_of_several_workers(monkeypatch, tmp_path,
                                                                  capsys):
    """--one_process: blur off in every run (its seeds are per replica), one process
    trained on each W > 1 run's global batches and compared (a recorder here; the real
    comparison: docs/scaling.md, 2 and 4 workers)."""
    runs, compared = [], []
    monkeypatch.setattr(workers, "run_workers", lambda count, folder, work, repo, batch,
                        epochs, extra, strace=True, children=None: runs.append(extra) or [
                            dict(workers=count, worker=i, peak_rss_mb=1.0,
                                 model_dir=f"run{count}") for i in range(count)])
    monkeypatch.setattr(workers, "compare_one_process", lambda model_dir, count, work,
                        children=None: (
        compared.append((model_dir, count)) or dict(
            workers=count, compared_steps=3, max_loss_difference=0.0,
            max_weight_difference=0.0, largest_weight=1.0)))
    folder = tmp_path / "images"
    folder.mkdir()
    workers.main([f"--folder={folder}", "--workers=1,2,4", "--train_batch_size=8",
                  f"--work={tmp_path}", "--no_strace", "--one_process"])
    assert runs == [["--use_blur=false"]] * 3
    assert compared == [("run2", 2), ("run4", 4)]
    other = tmp_path / "other"
    other.mkdir()
    (other / "run.py").write_text("")
    with pytest.raises(SystemExit):
        workers.parse_args(["--one_process", f"--repo={other}", "--no_strace"])
    assert "give no --repo" in capsys.readouterr().err


def test_recorded_losses_are_the_runs_total_losses(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "train/total_loss": 2.5}\n{"step": 2, "knn/top_1_accuracy": 0.1}\n'
        '{"step": 3, "train/total_loss": 1.5}\n')
    assert workers._recorded_losses(str(tmp_path)) == {1: 2.5, 3: 1.5}  # pylint: disable=protected-access


def test_a_stop_stops_every_worker_and_what_it_runs(tmp_path):
    """SIGTERM to workers.py reaches each worker's run.py through the memory wrapper
    (`script_io.Children`, by process group) and workers.py exits 128 + 15 with no
    table. A stand-in run.py records its pid and waits."""
    import signal  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel
    repo, folder, pids = tmp_path / "repo", tmp_path / "images", tmp_path / "pids"
    repo.mkdir(), folder.mkdir(), pids.mkdir()
    (repo / "run.py").write_text(
        "import os, time\n"
        f"open(os.path.join({str(pids)!r}, str(os.getpid())), 'w').close()\n"
        "time.sleep(60)\n")
    script = os.path.join(os.path.dirname(workers.__file__), "workers.py")
    parent = subprocess.Popen([sys.executable, script, f"--repo={repo}", "--workers=2",
                               f"--folder={folder}", "--train_batch_size=8", "--no_strace",
                               f"--work={tmp_path / 'work'}"], stderr=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, text=True)
    deadline = time.time() + 30
    while len(os.listdir(pids)) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(os.listdir(pids)) == 2
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=30)
    assert parent.returncode == 128 + signal.SIGTERM and "no table" in err, err
    for pid in map(int, os.listdir(pids)):
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"run.py {pid} ran on after workers.py stopped")
