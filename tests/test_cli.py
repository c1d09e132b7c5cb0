"""The command line a user meets: --help by topic, the `simclr-tf` command (issue 15)."""
import os
import shutil
import subprocess
import sys

from simclr_tf.config import Config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
import run  # noqa: E402  pylint: disable=wrong-import-position


def test_every_flag_is_in_exactly_one_help_group():
    grouped = [name for _, names in run.HELP_GROUPS for name in names]
    assert sorted(grouped) == sorted(f.name for f in Config.flag_fields())
    assert len(grouped) == len(set(grouped))


def test_help_lists_the_flags_by_topic_without_internals():
    result = subprocess.run([sys.executable, os.path.join(REPO, "run.py"), "--help"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("SimCLR v1/v2: pretrain image encoders")
    assert "Config" not in out.split("Run:")[0]  # the intro speaks to users
    positions = [out.index(f"\n{title}:\n") for title, _ in run.HELP_GROUPS]
    assert positions == sorted(positions)
    for field in Config.flag_fields():
        assert f"  --{field.name}=" in out, field.name
    hidden_norm = out.split("--hidden_norm=true")[1].split("\n  --")[0]
    assert "Temperature" not in hidden_norm and "L2-normalise" in hidden_norm


def test_the_installed_command_takes_the_same_flags():
    command = shutil.which("simclr-tf")
    assert command, "pip install -e . installs the simclr-tf command (setup.py)"
    result = subprocess.run([command, "--help"], capture_output=True, text=True,
                            timeout=60, cwd="/")
    assert result.returncode == 0 and "\nData:\n" in result.stdout, result.stderr
    bad = subprocess.run([command, "--temperature=0", "--model_dir=/tmp/x"],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert bad.returncode == 2 and "simclr-tf: error: --temperature" in bad.stderr


def test_tensorflow_start_up_lines_follow_tf_cpp_min_log_level():
    """TensorFlow's C++ code logs before absl's log is initialised whatever
    TF_CPP_MIN_LOG_LEVEL says (oneDNN's notice on CPUs with AVX512_VNNI): run.py
    imports TensorFlow with those lines filtered by that level."""
    script = (
        "import os, sys, types; sys.path.insert(0, sys.argv[1]); from simclr_tf.run import quiet\n"
        "with quiet.tensorflow_start_up_filtered():\n"
        "    sys.modules['tensorflow'] = types.SimpleNamespace(config=types.SimpleNamespace("
        "list_physical_devices=list))  # a stand-in, imported\n"
        "    os.write(2, b'WARNING: All log messages before absl::InitializeLog() is "
        "called are written to STDERR\\n'\n"
        "             b'I0000 00:00:1796120375.784154   23873 port.cc:153] oneDNN on\\n'\n"
        "             b'W0000 00:00:1796120375.784154   23873 cpu_feature.cc:9] slow\\n'\n"
        "             b'a line of our own\\n')\n")
    seen = {}
    for level in ("0", "1", "2", "x"):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=level)
        seen[level] = subprocess.run([sys.executable, "-c", script, REPO], env=env,
                                     capture_output=True, text=True, check=True,
                                     timeout=60).stderr.splitlines()
    assert len(seen["0"]) == 4  # everything, as TensorFlow writes it
    assert seen["x"] == seen["0"]  # not a level: nothing filtered, no traceback
    assert seen["1"] == ["W0000 00:00:1796120375.784154   23873 cpu_feature.cc:9] slow",
                         "a line of our own"]
    assert seen["2"] == ["a line of our own"]


def test_a_host_without_a_cuda_driver_gets_no_cuinit_error(tmp_path):
    """The `tensorflow` wheel on a CPU host: its import says that no CUDA driver was
    found (INFO), then listing the devices logs cuInit's failure as an ERROR. Filtered
    with the start-up lines (the devices are listed inside the filter); the same ERROR
    on a host whose driver was found is kept. A stand-in tensorflow writes TensorFlow's
    lines."""
    def stand_in(notice):
        return (
            "import os, types\n"
            f"os.write(2, {notice!r})\n"
            "def list_physical_devices():\n"
            "    os.write(2, b'E0000 00:00:1796199537.702167   25694 cuda_platform.cc:52] "
            "failed call to cuInit: INTERNAL: CUDA error\\n')\n"
            "    return []\n"
            "config = types.SimpleNamespace(list_physical_devices=list_physical_devices)\n")
    script = ("import sys; sys.path[:0] = sys.argv[1:3]\n"
              "from simclr_tf.run import quiet; quiet.import_tensorflow()\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    no_driver = (b"I0000 00:00:1796199533.1   25694 cudart_stub.cc:31] Could not find cuda "
                 b"drivers on your machine, GPU will not be used.\n")
    stderr = {}
    for name, notice in (("cpu", no_driver), ("gpu", b"")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tensorflow.py").write_text(stand_in(notice))
        stderr[name] = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / name), REPO], env=env,
            capture_output=True, text=True, timeout=60, check=True).stderr
    assert stderr["cpu"] == ""
    assert "failed call to cuInit" in stderr["gpu"]


def test_absl_parse_errors_are_flag_errors_in_the_one_format():
    """A value of the wrong type, an unknown flag, a missing flagfile, a stray
    argument: `run.py: error: ...` and exit 2, as every flag error (absl's own is
    'FATAL Flags parsing error' and exit 1). Before TensorFlow is imported."""
    cases = {"--train_steps=abc": "run.py: error: --train_steps=abc: invalid literal",
             "--tempreature=0.5": "run.py: error: unknown command line flag 'tempreature'",
             "--flagfile=/nonexistent.flags": "run.py: error: unable to open flagfile",
             "stray": "run.py: error: unexpected arguments 'stray'",
             "--train_batch_size=0 --flagfile=flags/quickstart.flags":
                 "run.py: error: --train_batch_size=0 comes before "
                 "--flagfile=flags/quickstart.flags, which sets --train_batch_size=256"}
    for argument, expected in cases.items():
        result = subprocess.run([sys.executable, os.path.join(REPO, "run.py"),
                                 *argument.split()],
                                capture_output=True, text=True, timeout=60, cwd=REPO)
        assert result.returncode == 2, (argument, result.stderr)
        assert result.stderr.startswith(expected), (argument, result.stderr)
        assert "FATAL" not in result.stderr and "Traceback" not in result.stderr


def test_every_entry_point_imports_tensorflow_through_one_quiet_helper(tmp_path):
    """Issue 33, 8: scripts/ printed TensorFlow's start-up notices that run.py
    filtered. `quiet.import_tensorflow` (run.py's filter, TF_CPP_MIN_LOG_LEVEL 1 unless
    set) is what our scripts call; shown here with a stand-in tensorflow that writes
    what TensorFlow's C++ code writes at import on some CPUs."""
    (tmp_path / "tensorflow.py").write_text(
        "import os\n"
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called "
        "are written to STDERR\\n'\n"
        "         b'I0000 00:00:1796120375.784154   23873 port.cc:153] oneDNN on\\n'\n"
        "         b'a line of its own\\n')\n"
        "import types\n"
        "config = types.SimpleNamespace(list_physical_devices=list)  # what quiet lists\n")
    script = ("import sys; sys.path[:0] = sys.argv[1:3]\n"
              "from simclr_tf.run import quiet; tf = quiet.import_tensorflow()\n"
              "assert tf.__file__.startswith(sys.argv[1])\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    quiet = subprocess.run([sys.executable, "-c", script, str(tmp_path), REPO], env=env,
                           capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr.splitlines() == ["a line of its own"]
    for name in ("scripts/transfer_table", "dev/compare_runs",
                 "scripts/convert_official_checkpoint", "scripts/benchmark", "scripts/plot_run"):
        with open(os.path.join(REPO, f"{name}.py")) as f:
            text = f.read()
        assert "quiet.import_tensorflow()" in text and "import tensorflow" not in text, name


def _refused_before_tensorflow(argv):
    """run.py with `argv` in a fresh process: its exit status must be 2, with
    TensorFlow never imported; returns the finished process (stderr: the message)."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['run.py'] + {argv!r}\n"
            "try:\n    runpy.run_path('run.py', run_name='__main__')\n"
            "except SystemExit as exit:\n    print('exit', exit.code)\n"
            "print('tensorflow imported:', 'tensorflow' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert "exit 2" in done.stdout and "tensorflow imported: False" in done.stdout, done
    return done


def test_a_missing_run_directory_is_named_before_tensorflow_is_imported(tmp_path):
    """A reader mode on a --model_dir that is not there (a typo): one line, exit 2, in
    well under a second, without importing TensorFlow (it took 8-15 s before); a
    sibling of a close name that holds checkpoints is suggested."""
    (tmp_path / "my_run").mkdir()
    (tmp_path / "my_run" / "ckpt-4.index").write_text("")
    done = _refused_before_tensorflow(["--mode=export", f"--model_dir={tmp_path}/my_rnu"])
    assert done.stderr.strip().splitlines() == [
        f"run.py: error: --model_dir: has no checkpoint to export in '{tmp_path}/my_rnu' "
        f"(no such directory); train first. Did you mean --model_dir={tmp_path}/my_run? "
        "It holds checkpoints."]


def test_a_missing_checkpoint_is_named_before_tensorflow_is_imported(tmp_path):
    """Newcomer 2026-12-06, M18: a typo in --checkpoint (the path the quick-start
    flagfiles make users type most) took 18 s, after TensorFlow, with no 'Did you
    mean' (--model_dir's came in 0.4 s). The same check, the same suggestion."""
    (tmp_path / "simclr_quickstart").mkdir()
    (tmp_path / "simclr_quickstart" / "ckpt-281.index").write_text("")
    done = _refused_before_tensorflow([
        "--flagfile=flags/quickstart_finetune.flags",
        f"--checkpoint={tmp_path}/simclr_quickstrat", f"--model_dir={tmp_path}/ft"])
    assert done.stderr.strip().splitlines() == [
        f"run.py: error: --checkpoint: '{tmp_path}/simclr_quickstrat' is neither a "
        "directory of checkpoints nor a checkpoint prefix (no such path); pass a run "
        "directory, a prefix such as '/run/ckpt-1000', or a SavedModel directory. Did "
        f"you mean --checkpoint={tmp_path}/simclr_quickstart? It holds checkpoints."]
    assert not (tmp_path / "ft").exists()


def test_flag_typos_get_the_flags_they_mean(tmp_path):
    """Newcomer 2026-12-06, M08: --batch_size (every other framework's) was offered
    batch_norm_decay, by spelling; the flags whose name holds it are offered. M21:
    `simclr-tf --flagfile=flags/quickstart.flags` outside the checkout said only that
    the file is missing; the checkout's path is named."""
    message = ("Unknown command line flag 'batch_size'. Did you mean: batch_norm_decay ?")
    assert run._flags_meant(message) == (  # pylint: disable=protected-access
        "Unknown command line flag 'batch_size'. Did you mean: train_batch_size, "
        "eval_batch_size?")
    spelt = "Unknown command line flag 'learnng_rate'. Did you mean: learning_rate ?"
    assert run._flags_meant(spelt) == spelt  # pylint: disable=protected-access
    result = subprocess.run([sys.executable, os.path.join(REPO, "run.py"),
                             "--flagfile=flags/quickstart.flags"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.rstrip().endswith(
        f"the checkout's is --flagfile={os.path.join(REPO, 'flags', 'quickstart.flags')})")
    # As the simclr-tf command: its errors name it (they said run.py).
    code = ("import sys; sys.argv = ['/venv/bin/simclr-tf', "
            "'--flagfile=flags/quickstart.flags']; import run; run.console_main()")
    command = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                             env=dict(os.environ, PYTHONPATH=REPO), capture_output=True,
                             text=True, timeout=60)
    assert command.returncode == 2, command.stderr
    assert command.stderr.startswith("simclr-tf: error: unable to open flagfile"), \
        command.stderr


def test_tf_datas_generator_notice_is_dropped_and_other_lines_kept(capfd):
    """Newcomer 2026-12-06: the TPU rehearsal (8 CPU replicas, Fashion-MNIST) printed
    TensorFlow's `W0000 ... dataset.cc:997] Input of GeneratorDatasetOp::Dataset will
    not be optimized ...` (nothing to act on). The training mode makes its iterator
    inside `quiet.dataset_notices_dropped`: that line goes, every other stays."""
    from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
    with quiet.dataset_notices_dropped():
        os.write(2, b"W0000 00:00:1796561944.815794    5357 dataset.cc:997] Input of "
                    b"GeneratorDatasetOp::Dataset will not be optimized because the "
                    b"dataset does not implement the AsGraphDefInternal() method needed "
                    b"to apply optimizations.\n")
        os.write(2, b"E0000 00:00:1796561944.9 5357 other.cc:1] a real error\n")
    err = capfd.readouterr().err
    assert "GeneratorDatasetOp" not in err and "a real error" in err, err
    with open(os.path.join(REPO, "simclr_tf", "run", "modes", "train.py")) as f:
        assert "with quiet.dataset_notices_dropped():\n        iterator = iter(dataset)" \
            in f.read()
