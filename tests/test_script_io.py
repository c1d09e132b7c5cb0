"""scripts/script_io.py: files written whole or not at all, and run.py children that
stop with the script that started them (faults 16-18 of 2026-12-05's catalogue)."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import script_io  # noqa: E402  pylint: disable=wrong-import-position


def test_a_failed_write_keeps_the_old_file_and_leaves_no_scratch(tmp_path):
    path = tmp_path / "plot.png"
    path.write_bytes(b"the good plot")

    def half_then_full(scratch):
        with open(scratch, "wb") as f:
            f.write(b"half a pl")
        raise OSError(28, "No space left on device")
    with pytest.raises(script_io.WriteFailed, match=r"plot.png could not be written "
                       r"\(No space left on device\); the file there is as it was"):
        script_io.write_whole(str(path), half_then_full)
    assert path.read_bytes() == b"the good plot" and os.listdir(tmp_path) == ["plot.png"]
    script_io.write_text(str(tmp_path / "new" / "page.md"), "whole")
    assert (tmp_path / "new" / "page.md").read_text() == "whole"
    assert os.listdir(tmp_path / "new") == ["page.md"]


PARENT = textwrap.dedent("""
    import subprocess, sys
    sys.path.insert(0, {scripts!r})
    import script_io
    CHILD = ("import signal, sys, time\\n"
             "def save(signum, frame):\\n"
             "    time.sleep(0.3)  # a checkpoint being written\\n"
             "    open({saved!r}, 'w').write(str(signum)); sys.exit(0)\\n"
             "signal.signal(signal.SIGTERM, save); signal.signal(signal.SIGINT, save)\\n"
             "open({started!r}, 'w').write('x'); time.sleep(60)\\n")
    try:
        with script_io.Children() as children:
            children.run([sys.executable, "-c", CHILD])
    except script_io.Stopped as stop:
        print("stopped", stop.signum, flush=True)
        sys.exit(128 + stop.signum)
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_reaches_the_child_which_saves_before_the_parent_exits(
        tmp_path, signum):
    """Fault 18: SIGTERM to ablations.py orphaned its run.py, which kept the lock. The
    signal is forwarded; the parent waits for the child to save, then exits 128 + n.
    SIGHUP (a closed terminal; 2026-12-06's fault 9: the child, in its own session,
    trained on to the end) reaches the child as SIGTERM."""
    started, saved = tmp_path / "started", tmp_path / "saved"
    # A script started from a terminal: SIGHUP at its default, also when the suite
    # itself runs under nohup (which the script would respect: the test below).
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(
        scripts=os.path.join(ROOT, "scripts"), started=str(started), saved=str(saved))],
        stdout=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    deadline = time.time() + 30
    while not started.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert started.exists()
    parent.send_signal(signum)
    out, _ = parent.communicate(timeout=30)
    assert parent.returncode == 128 + signum and f"stopped {int(signum)}" in out
    # The child saved before the parent left; SIGHUP came to it as SIGTERM.
    sent = signal.SIGTERM if signum == signal.SIGHUP else signum
    assert saved.read_text() == str(int(sent))


def test_a_child_past_its_timeout_is_killed_as_subprocess_run_does(tmp_path):
    children = script_io.Children()
    started = time.time()
    with pytest.raises(subprocess.TimeoutExpired):
        children.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert time.time() - started < 10
    assert children.run([sys.executable, "-c", "raise SystemExit(3)"], timeout=30) == 3


def test_nothing_starts_once_stopped():
    children = script_io.Children()
    children.stopped_by = signal.SIGTERM
    with pytest.raises(script_io.Stopped, match="SIGTERM"):
        children.run([sys.executable, "-c", "raise SystemExit('must not run')"])
    with pytest.raises(script_io.Stopped):  # work in the script's own process
        children.check()


def test_a_hangup_under_nohup_changes_nothing(tmp_path):
    """A script started with `nohup` (SIGHUP ignored) keeps ignoring it: its child runs
    on and it exits as the child does."""
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {os.path.join(ROOT, "scripts")!r})
        import script_io
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with script_io.Children() as children:
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            print(children.run([sys.executable, "-c", "import os, signal, time; "
                                "os.kill(os.getppid(), signal.SIGHUP); time.sleep(0.3)"]))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "0", result.stderr


REMOVALS = ("rmtree(", "os.rmdir(", "os.removedirs(", "os.remove(", "os.unlink(",
            ".unlink(")


def _removals(source):
    """The lines of `source` that remove a file or a folder."""
    return [line.strip() for line in source.splitlines()
            if any(call in line for call in REMOVALS) and not line.strip().startswith("#")]


def test_no_script_removes_a_folder_or_file_it_was_given():
    """2026-12-06's fault 7: `benchmark.py profile --logdir=<a run>` deleted the run's
    checkpoints (shutil.rmtree on the user's path). No script removes anything but
    script_io's own scratch file (a temporary sibling it made); temporary folders are
    tempfile's, removed by it. The control: a planted rmtree is found."""
    scripts = os.path.join(ROOT, "scripts")
    found = {}
    for name in sorted(os.listdir(scripts)):
        if name.endswith(".py"):
            with open(os.path.join(scripts, name)) as f:
                lines = _removals(f.read())
            if lines:
                found[name] = lines
    assert found == {"script_io.py": ["os.remove(scratch)"]}, found
    assert _removals("    shutil.rmtree(logdir, ignore_errors=True)\n") == [
        "shutil.rmtree(logdir, ignore_errors=True)"]


def test_a_stop_reaches_what_the_child_started(tmp_path):
    """A child that wraps the command it runs (workers.py: strace, then a memory
    wrapper, then run.py) is stopped with everything it started: the signal goes to
    its process group. Signalled alone, the wrapper would leave its command running."""
    pid_file = tmp_path / "grandchild"
    wrapper = ("import subprocess, sys\n"
               "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
               f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
               "p.wait()\n")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "scripts")!r})
        import script_io
        try:
            with script_io.Children() as children:
                children.run([sys.executable, "-c", {wrapper!r}])
        except script_io.Stopped as stop:
            sys.exit(128 + stop.signum)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(grandchild, signal.SIGKILL)
        raise AssertionError("the wrapped command ran on after the stop")
