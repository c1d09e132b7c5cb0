"""Preemption soak: SIGKILL a tiny pretraining run at random moments, restart it until
it finishes, and compare it with a run that was never interrupted.

Each attempt runs `python run.py` (offline 'digits', 16 px, ResNet-18 x0.125, or the
tiny encoder with --encoder=tiny) on one model_dir and is killed with SIGKILL either
  - while a checkpoint is being written (the script watches model_dir for the files
    of a save in progress: `ckpt-N_temp/` shards, or `ckpt-N.*` files of a step the
    `checkpoint` state file does not yet record, and kills at the 1st-3rd such write), or
  - at a random time (start-up, tracing, training, saving or exporting alike).
Some attempts are stopped with SIGTERM instead (as a scheduler preempts): the run
must save, stop and exit with 143 (or die by the signal when it arrives before
training started). Between attempts the script also damages the run as users and
disks do: it deletes the `checkpoint` state file or appends garbage to it (the next
start must rebuild it from the checkpoint files and lose nothing), and once, while a
run trains (paused meanwhile), it starts a second run.py on the same model_dir (it
must be refused with exit 2, naming the run that holds the lock). Once each, counted
like the damages (--fault_cases): a Ctrl-C while it trains (SIGINT: it saves and exits
130), a rerun with a changed optimisation flag on its checkpoints (refused with exit 2,
no file changed), its lock taken over while it trains (as --break_lock elsewhere:
it must write nothing more and exit 1), a second writer whose clock reads 700 s ahead
(`--mode=export` while it trains: the lock's heartbeat looks stale to that clock, but
its holder is alive; refused with exit 2, the lock still the trainer's), and a
vanishing input, on a run of its own over an image folder: every image replaced by
a FIFO (reads that never return, as on a hung mount), then SIGTERM (it saves, exits
143 within 30 s, releases the lock); the images restored, the same command resumes;
then the folder removed (rm -rf: exit 1 naming the folder and the split, within 60 s,
no hang).
After every attempt the checkpoint a restart would resume from must read back (every
tensor, checksums included), and an intact state file must name a complete
checkpoint. Once enough kills have happened the
run is left to finish. Then the final weights (model and optimizer slots) are
compared with an uninterrupted run's: with --deterministic (the default; passes
--deterministic to run.py) they must be bit-for-bit equal. Every checkpoint left in
model_dir must load into the model, and no partial files may remain.

Example (about 6 minutes on 2 CPU cores):
  python dev/soak_preemption.py --kills=20 --workdir=/tmp/soak \\
      --json=/tmp/soak/report.json

Exit status 0 when every check passes, 1 otherwise. The report is printed and
written as JSON.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The tiny configuration (tests/test_experiment.py's TINY, on a 256-image slice).
TINY_FLAGS = dict(
    dataset="digits", train_split="train[:256]", eval_split="test", image_size=16,
    stem="cifar", resnet_depth=18, width_multiplier=0.125, num_proj_layers=2,
    proj_out_dim=16, train_batch_size=32, use_blur=True, color_jitter_strength=0.5,
    temperature=0.5, learning_rate=0.5, weight_decay=1e-4, warmup_epochs=0.1,
    keep_checkpoint_max=3, mode="train")
# --encoder=tiny: the same run with simclr_tf/models/tiny.py's encoder (two conv-BN-ReLU
# stages), which builds and traces several times faster: the suite's soak uses it.
ENCODERS = ("resnet", "tiny")


def model_flags(args):
    """TINY_FLAGS with the encoder of --encoder, without the ResNet's flags that it
    does not read (its row of the encoder table says which it reads)."""
    if args.encoder == "resnet":
        return dict(TINY_FLAGS)
    from simclr_tf.config.tables import encoders  # pylint: disable=import-outside-toplevel
    unread = (set(encoders.encoder_spec("resnet").flags)
              - set(encoders.encoder_spec(args.encoder).flags))
    return dict({k: v for k, v in TINY_FLAGS.items() if k not in unread},
                encoder=args.encoder)

# The save counter counts the saves a process made, not training progress.
_IGNORED_TENSORS = ("save_counter/.ATTRIBUTES/VARIABLE_VALUE",)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs to deliver.")
    parser.add_argument("--train_steps", type=int, default=60)
    parser.add_argument("--checkpoint_steps", type=int, default=2)
    parser.add_argument("--checkpoint_kill_share", type=float, default=0.5,
                        help="Share of kills aimed at checkpoint writes.")
    parser.add_argument("--sigterm_share", type=float, default=0.2,
                        help="Share of attempts stopped with SIGTERM, not SIGKILL.")
    parser.add_argument("--state_damage_share", type=float, default=0.3,
                        help="Share of kills after which the state file is deleted or "
                        "damaged.")
    parser.add_argument("--second_writer", action=argparse.BooleanOptionalAction,
                        default=True, help="Once, start a second run on the model_dir "
                        "of a running one; it must be refused.")
    parser.add_argument("--fault_cases", action=argparse.BooleanOptionalAction,
                        default=True, help="Once each, counted like the kills: a Ctrl-C "
                        "while training (SIGINT: save, exit 130), a rerun with a changed "
                        "optimisation flag (refused, exit 2, nothing changed), the "
                        "lock taken over while training (the run stops writing, exit 1), "
                        "a second writer whose clock is 700 s ahead (refused, exit 2) "
                        "and a vanishing image folder (blocked reads then SIGTERM: exit "
                        "143; removed: exit 1 naming it).")
    parser.add_argument("--max_random_delay", type=float, default=25.0,
                        help="Random kills happen 0..this many seconds after a start.")
    parser.add_argument("--deterministic", action=argparse.BooleanOptionalAction,
                        default=True, help="Pass --deterministic to run.py and require "
                        "bit-exact equality (else report the largest difference).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the kill schedule.")
    parser.add_argument("--workdir", default="/tmp/simclr_soak")
    parser.add_argument("--json", default=None, help="Report path (default: "
                        "<workdir>/report.json).")
    parser.add_argument("--attempt_timeout", type=float, default=300.0)
    parser.add_argument("--encoder", choices=ENCODERS, default="resnet",
                        help="The run's encoder: a ResNet-18 at width 1/8 (default) or "
                        "the tiny encoder (several times faster to start).")
    parser.add_argument("--flag", action="append", default=[],
                        help="Extra run.py flag, e.g. --flag=--use_blur=false.")
    return parser.parse_args(argv)


# ------------------------------------------------------------------ running run.py


def run_command(args, model_dir, **overrides):
    flags = dict(model_flags(args), train_steps=args.train_steps,
                 checkpoint_steps=args.checkpoint_steps, model_dir=model_dir)
    flags.update(overrides)
    command = [sys.executable, os.path.join(REPO, "run.py")]
    command += [f"--{name}={value}" for name, value in flags.items()]
    if args.deterministic:
        command.append("--deterministic")
    return command + args.flag


# Runs the script named next (then its arguments) with time.time() `sys.argv[1]`
# seconds ahead: a clock that jumped (NTP, a resumed VM), as this process sees it.
_CLOCK_AHEAD = ("import runpy, sys, time; ahead = float(sys.argv.pop(1)); "
                "real = time.time; time.time = lambda: real() + ahead; "
                "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
CLOCK_JUMP_SECS = 700


def start(command, log_path, env=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **(env or {}))
    log = open(log_path, "ab")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                               env=env, start_new_session=True)
    return process, log


_CKPT = re.compile(r"ckpt-(\d+)(_temp.*|\.index|\.data-.*)$")


def recorded_step(model_dir):
    """The step of the checkpoint the state file names (-1 when none)."""
    try:
        with open(os.path.join(model_dir, "checkpoint"), encoding="utf-8",
                  errors="replace") as f:  # this script damages it on purpose
            text = f.read()
    except OSError:
        return -1
    match = re.search(r'^model_checkpoint_path: "(?:.*/)?ckpt-(\d+)"', text, re.M)
    return int(match.group(1)) if match else -1


def checkpoint_files(model_dir):
    """Names of the checkpoint files and folders in model_dir."""
    try:
        return {name for name in os.listdir(model_dir) if _CKPT.match(name)}
    except OSError:
        return set()


def writes_in_progress(model_dir):
    """Names of checkpoint files that are not (yet) part of a recorded checkpoint."""
    try:
        names = os.listdir(model_dir)
    except OSError:
        return []
    latest = recorded_step(model_dir)
    found = []
    for name in names:
        match = _CKPT.match(name)
        if match and (match.group(2).startswith("_temp") or int(match.group(1)) > latest):
            found.append(name)
    return found


def kill(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def stop(process, signum):
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def seconds_to_exit(process, timeout=60):
    """Seconds until `process` exits, from now; killed after `timeout` (its
    returncode then says so)."""
    start = time.monotonic()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(process)
    return round(time.monotonic() - start, 1)


def wait_for_line(log_path, text, process, timeout, offset=0):
    """Waits until `text` is in the log after `offset` (True), the process ends or
    time runs out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and process.poll() is None:
        with open(log_path, "rb") as f:
            f.seek(offset)
            if text.encode() in f.read():
                return True
        time.sleep(0.2)
    return False


def run_to_end(command, log_path, args, env=None, timeout=None):
    """Runs `command` to its end (killed after `timeout`, default --attempt_timeout);
    returns (exit status, its log, the log's last line)."""
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    process, log = start(command, log_path, env)
    try:
        process.wait(timeout=timeout or args.attempt_timeout)
    except subprocess.TimeoutExpired:
        kill(process)
    finally:
        log.close()
    output = read_log(log_path, offset)
    last = output.strip().splitlines()[-1][:300] if output.strip() else ""
    return process.returncode, output, last


def read_log(log_path, offset=0):
    with open(log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def second_writer(command, log_path, args):
    """Runs the same command again while the first one trains; returns its record."""
    returncode, output, last = run_to_end(command, log_path, args)
    refused = returncode == 2 and "is in use by --mode=train run" in output
    return dict(returncode=returncode, refused=refused, message=last)


def clock_jump_writer(args, model_dir, log_path):
    """`--mode=export` on the model_dir of a live (paused) training run, its clock
    CLOCK_JUMP_SECS ahead: to it the trainer's heartbeat is older than the lock's
    staleness limit, yet the holder is alive and the same process (its start time is
    in the lock): it must be refused (exit 2, naming the trainer) and leave the lock
    as it was."""
    lock_path = os.path.join(model_dir, ".simclr_lock")
    before = read_lock(lock_path)
    command = [sys.executable, "-c", _CLOCK_AHEAD, str(CLOCK_JUMP_SECS),
               os.path.join(REPO, "run.py"), "--mode=export", f"--model_dir={model_dir}"]
    returncode, output, last = run_to_end(command, log_path, args)
    kept = before is not None and read_lock(lock_path) == before
    refused = returncode == 2 and "is in use by --mode=train run" in output
    return dict(returncode=returncode, refused=refused, lock_kept=kept,
                passed=refused and kept, message=last)


def read_lock(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def wait_for_step(model_dir, step, process, timeout):
    """Waits until the state file records a checkpoint at `step` or later."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and process.poll() is None:
        if recorded_step(model_dir) >= step:
            return True
        time.sleep(0.2)
    return False


def wait_until_stalled(model_dir, process, quiet_secs, timeout):
    """Waits until the state file's step has not changed for `quiet_secs`; returns
    the seconds waited."""
    began = last_change = time.monotonic()
    step = recorded_step(model_dir)
    while time.monotonic() - began < timeout and process.poll() is None:
        now = recorded_step(model_dir)
        if now != step:
            step, last_change = now, time.monotonic()
        elif time.monotonic() - last_change >= quiet_secs:
            break
        time.sleep(0.2)
    return round(time.monotonic() - began, 1)


def image_folder(root, count=64, size=16):
    """`count` random PNGs of `size` px in two class folders (a copy of each under
    `root`.orig, modification times kept, to restore them)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from PIL import Image  # pylint: disable=import-outside-toplevel
    rng = np.random.RandomState(0)
    for i in range(count):
        directory = os.path.join(root, f"c{i % 2}")
        os.makedirs(directory, exist_ok=True)
        Image.fromarray((rng.rand(size, size, 3) * 255).astype(np.uint8)).save(
            os.path.join(directory, f"{i}.png"))
    shutil.copytree(root, root + ".orig", copy_function=shutil.copy2)


def vanishing_input(args, workdir):
    """A run of its own over an image folder (64 images, a checkpoint every 2 steps):
    1. while it trains, every image becomes a FIFO (a read that never returns: a hung
       mount), then SIGTERM: it must save the step reached, exit 143 within 30 s and
       release its lock;
    2. the images restored (same bytes and times), the same command resumes;
    3. once it trained on, the folder is removed (rm -rf): exit 1 within 60 s, the
       error naming the folder and the split (before: empty epochs, forever)."""
    root = os.path.join(workdir, "vanishing")
    images = os.path.join(root, "images")
    model_dir = os.path.join(root, "run")
    log_path = os.path.join(workdir, "vanishing_input.log")
    image_folder(images)
    command = run_command(args, model_dir, dataset=f"folder:{images}", train_split="train",
                          eval_split="train", train_steps=100_000, checkpoint_steps=2)
    env = dict(HOME=root)  # the folder scan's cache
    record = {}
    process, log = start(command, log_path, env)
    try:
        if not wait_for_step(model_dir, 2, process, args.attempt_timeout):
            return dict(record, passed=False, message="never saved ckpt-2")
        for directory, _, names in os.walk(images):
            for name in names:
                os.remove(os.path.join(directory, name))
                os.mkfifo(os.path.join(directory, name))
        # The batches read before are used up, then no step ends: no new checkpoint.
        record["blocked_after_s"] = wait_until_stalled(model_dir, process, 5.0,
                                                       args.attempt_timeout)
        stop(process, signal.SIGTERM)
        record.update(blocked_exit_s=seconds_to_exit(process),
                      blocked_returncode=process.returncode)
    finally:
        if process.poll() is None:
            kill(process)
        log.close()
    output = read_log(log_path)
    saved = recorded_step(model_dir)
    blocked_ok = (process.returncode == 143 and record["blocked_exit_s"] < 30
                  and "training input was blocked" in output
                  and f"saved a checkpoint at step {saved} " in output
                  and not os.path.exists(os.path.join(model_dir, ".simclr_lock")))
    record.update(blocked_step=saved, blocked_passed=blocked_ok)
    shutil.rmtree(images)
    shutil.copytree(images + ".orig", images, copy_function=shutil.copy2)
    offset = os.path.getsize(log_path)
    process, log = start(command, log_path, env)
    try:
        resumed = wait_for_step(model_dir, saved + 3, process, args.attempt_timeout)
        shutil.rmtree(images)
        record.update(removed_exit_s=seconds_to_exit(process),
                      removed_returncode=process.returncode)
    finally:
        if process.poll() is None:
            kill(process)
        log.close()
    output = read_log(log_path, offset)
    last = output.strip().splitlines()[-1][:400] if output.strip() else ""
    removed_ok = (resumed and f"Resumed from {os.path.join(model_dir, f'ckpt-{saved}')}"
                  in output and process.returncode == 1
                  and record["removed_exit_s"] < 60
                  and last.startswith("run.py: error: The training input failed")
                  and f"Image folder {images!r}, split 'train': an epoch yielded no "
                  "image" in last)
    record.update(resumed=resumed, removed_passed=removed_ok, message=last,
                  passed=blocked_ok and removed_ok)
    return record


def changed_flag_rerun(command, model_dir, log_path, args):
    """Reruns the command with --temperature changed on a model_dir with checkpoints:
    it must be refused (exit 2, naming the flag) and change no file."""
    before = (checkpoint_files(model_dir), recorded_step(model_dir))
    returncode, output, last = run_to_end(command + ["--temperature=0.33"], log_path,
                                          args)
    unchanged = before == (checkpoint_files(model_dir), recorded_step(model_dir))
    refused = returncode == 2 and "--temperature" in output
    return dict(returncode=returncode, refused=refused, unchanged=unchanged,
                passed=refused and unchanged, message=last)


def _dead_pid():
    """The pid of a process of this host that has ended (a lock naming it is stale)."""
    probe = subprocess.Popen(["true"])
    probe.wait()
    return probe.pid


def take_over_lock(model_dir):
    """Writes model_dir's lock as another run's (as `--break_lock` elsewhere does),
    naming an ended process so that the next attempt takes it over as stale."""
    path = os.path.join(model_dir, ".simclr_lock")
    record = dict(pid=_dead_pid(), host=socket.gethostname(), mode="train",
                  started=time.time(), heartbeat=time.time(), token="soak-takeover")
    with open(path + ".soak", "w") as f:
        json.dump(record, f)
    os.replace(path + ".soak", path)


def attempt_with_kill(command, model_dir, log_path, mode, rng, args, second=None,
                      clock_writer=None):
    """Starts run.py and kills it as `mode` says; returns a record of what happened.

    second: a log path to start a second writer on the same model_dir once this one
    trains (it must be refused), or None.
    clock_writer: a log path to start `clock_jump_writer` once this one trains, or
    None.
    """
    offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    process, log = start(command, log_path)
    started = time.monotonic()
    record = dict(mode=mode, step_before=recorded_step(model_dir))
    leftovers = set(writes_in_progress(model_dir))  # from the previous kill
    try:
        if second is not None:
            if wait_for_line(log_path, "Training ", process, args.attempt_timeout,
                             offset):
                # Paused (alive, holding the lock) while the second one starts, so
                # it cannot finish first and hand the lock over.
                stop(process, signal.SIGSTOP)
                try:
                    record["second_writer"] = second_writer(command, second, args)
                finally:
                    stop(process, signal.SIGCONT)
            else:
                record["second_writer"] = dict(refused=False, message="the first run "
                                               "never started training")
        if clock_writer is not None and wait_for_line(
                log_path, "Training ", process, args.attempt_timeout, offset):
            stop(process, signal.SIGSTOP)  # alive, the lock held, heartbeat or not
            try:
                record["clock_jump"] = clock_jump_writer(args, model_dir, clock_writer)
            finally:
                stop(process, signal.SIGCONT)
        if mode in ("sigint", "lost_lock"):
            # While it trains: after the first progress line, plus a moment.
            if wait_for_line(log_path, "Training ", process, args.attempt_timeout,
                             offset):
                time.sleep(rng.uniform(0.5, 3.0))
            if mode == "sigint":
                stop(process, signal.SIGINT)
            elif process.poll() is None:
                take_over_lock(model_dir)
                record["files_at_takeover"] = sorted(checkpoint_files(model_dir))
            try:
                process.wait(timeout=args.attempt_timeout)
            except subprocess.TimeoutExpired:
                kill(process)
            if mode == "lost_lock":
                with open(log_path, "rb") as f:
                    f.seek(offset)
                    output = f.read().decode(errors="replace")
                new = set(checkpoint_files(model_dir)) - set(
                    record.get("files_at_takeover", []))
                record["stopped_writing"] = (process.returncode == 1
                                             and "was taken over" in output and not new)
                record["new_files_after_takeover"] = sorted(new)
        elif mode == "sigterm":
            delay = rng.uniform(0.5, args.max_random_delay)
            record["delay_s"] = round(delay, 2)
            try:
                process.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                stop(process, signal.SIGTERM)
                try:
                    process.wait(timeout=args.attempt_timeout)
                except subprocess.TimeoutExpired:
                    kill(process)
        elif mode == "checkpoint_write":
            target = rng.randint(1, 3)  # the n-th write seen in this attempt
            record["target_write"] = target
            # Every file there at the start is old, whatever the state file says: a
            # run that sets a damaged state file aside makes complete checkpoints
            # look unrecorded for a moment, and they are no write of this attempt.
            seen, previous = 0, checkpoint_files(model_dir)
            while process.poll() is None:
                if time.monotonic() - started > args.attempt_timeout:
                    break
                partial = set(writes_in_progress(model_dir))
                if partial - previous:
                    seen += 1
                    if seen >= target:
                        kill(process)
                        record["partial_files_at_kill"] = sorted(partial)
                        break
                previous |= partial
                time.sleep(0.0005)
        else:
            delay = rng.uniform(0.5, args.max_random_delay)
            record["delay_s"] = round(delay, 2)
            try:
                process.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                partial = set(writes_in_progress(model_dir))
                kill(process)
                # Files of a write this attempt started (not the last kill's leftovers).
                record["partial_files_at_kill"] = sorted(partial - leftovers)
    finally:
        if process.poll() is None:
            kill(process)
        log.close()
    if "clock_jump" in record:  # and the trainer never saw its lock taken over
        record["clock_jump"]["passed"] &= "was taken over" not in read_log(log_path, offset)
    record["killed"] = process.returncode in (-signal.SIGKILL, -signal.SIGTERM, 143)
    record["returncode"] = process.returncode
    record["elapsed_s"] = round(time.monotonic() - started, 2)
    record["step_after"] = recorded_step(model_dir)
    return record


def run_to_completion(command, log_path, timeout):
    process, log = start(command, log_path)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(process)
    finally:
        log.close()
    return process.returncode


# ------------------------------------------------------------------ checks


def read_all_tensors(prefix):
    """Every tensor of a checkpoint (reading them checks the data files' checksums)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name not in _IGNORED_TENSORS and not name.startswith("_CHECKPOINTABLE")}


def state_file_is_sound(model_dir, expect_checkpoint):
    """(ok, detail): what a restart would resume from (the newest checkpoint, state
    file or not) reads back in full, and an intact state file names a checkpoint that
    reads back. A deleted or damaged state file (this script's doing) is allowed: the
    next start rebuilds it."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, REPO)
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    latest = checkpoints.latest(model_dir) if os.path.isdir(model_dir) else None
    if latest is None:
        return not expect_checkpoint, "no checkpoint"
    _, problem = checkpoints.read_state(model_dir)
    named = tf.train.latest_checkpoint(model_dir) if problem is None else latest
    if named is None:
        return False, "state file names a checkpoint whose files are missing"
    try:
        read_all_tensors(latest)
        read_all_tensors(named)
    except Exception as error:  # pylint: disable=broad-except
        return False, f"{latest}: {error}"
    return True, os.path.basename(named) + (f" (state file {problem})" if problem else "")


def damage_state_file(model_dir, rng, how=None):
    """Deletes the state file or appends garbage to it (`how`: 'delete', 'garbage',
    or None for either); returns what was done."""
    path = os.path.join(model_dir, "checkpoint")
    if not os.path.exists(path):
        return None
    if how == "delete" or (how is None and rng.random() < 0.5):
        os.remove(path)
        return "deleted"
    with open(path, "ab") as f:
        f.write(bytes(rng.randrange(256) for _ in range(40)))
    return "garbage appended"


def compare(reference_prefix, soaked_prefix):
    a, b = read_all_tensors(reference_prefix), read_all_tensors(soaked_prefix)
    import numpy as np  # pylint: disable=import-outside-toplevel
    differing, max_diff = [], 0.0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            differing.append(name)
            continue
        x, y = np.asarray(a[name]), np.asarray(b[name])
        if x.shape != y.shape or not np.array_equal(x, y):
            differing.append(name)
            if x.shape == y.shape and x.dtype.kind == "f":
                max_diff = max(max_diff, float(np.max(np.abs(x - y))))
    return dict(num_tensors=len(a), num_differing=len(differing),
                differing=differing[:10], max_abs_diff=max_diff)


def check_remaining_checkpoints(model_dir, args):
    """Every recorded checkpoint loads into the model; lists unrecorded leftovers."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, REPO)
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    from simclr_tf.run.modes import parts  # pylint: disable=import-outside-toplevel
    from simclr_tf.config import Config  # pylint: disable=import-outside-toplevel
    config = Config.from_dict(dict(model_flags(args), train_steps=args.train_steps,
                                   model_dir=model_dir)).validate()
    state = tf.train.get_checkpoint_state(model_dir)
    results = {}
    for prefix in state.all_model_checkpoint_paths:
        prefix = prefix if os.path.isabs(prefix) else os.path.join(model_dir, prefix)
        try:
            read_all_tensors(prefix)
            model = parts.build_model(config, tf.distribute.get_strategy(), 10)
            checkpoints.restore_model(model, prefix)
            results[os.path.basename(prefix)] = "ok"
        except Exception as error:  # pylint: disable=broad-except
            results[os.path.basename(prefix)] = f"FAILED: {error}"
    return results, writes_in_progress(model_dir)


# ------------------------------------------------------------------ main


def main(argv=None):
    args = parse_args(argv)
    rng = random.Random(args.seed)
    workdir = os.path.abspath(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    reference_dir = os.path.join(workdir, "uninterrupted")
    soak_dir = os.path.join(workdir, "preempted")
    began = time.monotonic()

    print(f"Uninterrupted run ({args.train_steps} steps) ...", flush=True)
    reference_rc = run_to_completion(run_command(args, reference_dir),
                                     os.path.join(workdir, "uninterrupted.log"),
                                     args.attempt_timeout)
    reference_seconds = time.monotonic() - began

    kills, attempts, unsound, bad_exits, damages, seconds = [], 0, [], [], [], []
    saved_once = False
    command = run_command(args, soak_dir)
    soak_log = os.path.join(workdir, "preempted.log")
    # Until enough kills AND both damages of the state file (garbage, then deletion)
    # have happened: a kill that leaves no state file cannot be followed by a damage,
    # so the coverage is counted, not hoped for. Bounded: a few attempts beyond.
    max_attempts = 3 * args.kills + 9
    # The fault cases, once each when asked (counted, like the damages).
    cases = {}
    wanted = ("sigint", "lost_lock", "changed_flags", "clock_jump",
              "vanishing_input") if args.fault_cases else ()
    while (len(kills) < args.kills or len(damages) < 2
           or any(name not in cases for name in wanted)) and attempts < max_attempts:
        attempts += 1
        draw = rng.random()
        mode = ("sigterm" if draw < args.sigterm_share else "checkpoint_write"
                if draw < args.sigterm_share + (1 - args.sigterm_share)
                * args.checkpoint_kill_share else "random_time")
        if attempts >= 2 and "sigint" in wanted and "sigint" not in cases:
            mode = "sigint"
        elif saved_once and "lost_lock" in wanted and "lost_lock" not in cases:
            mode = "lost_lock"
        second = clock = None
        if args.second_writer and not seconds:
            second = os.path.join(workdir, "second_writer.log")
        elif (saved_once and "clock_jump" in wanted and "clock_jump" not in cases
              and mode not in ("sigint", "lost_lock")):
            clock = os.path.join(workdir, "clock_jump.log")  # flags.json is there
        record = attempt_with_kill(command, soak_dir, soak_log, mode, rng, args, second,
                                   clock)
        if "second_writer" in record:
            seconds.append(record["second_writer"])
        if "clock_jump" in record:
            cases["clock_jump"] = record["clock_jump"]
        if mode == "sigterm" and record["returncode"] not in (143, -signal.SIGTERM, 0):
            bad_exits.append(record)
        if mode == "sigint" and record["returncode"] != 0:  # 0: it finished first
            cases["sigint"] = dict(returncode=record["returncode"],
                                   passed=record["returncode"] == 130,
                                   step_after=record["step_after"])
        if mode == "lost_lock" and record.get("files_at_takeover") is not None:
            cases["lost_lock"] = dict(returncode=record["returncode"],
                                      passed=record["stopped_writing"],
                                      new_files=record["new_files_after_takeover"])
        saved_once = saved_once or record["step_after"] >= 0
        sound, detail = state_file_is_sound(soak_dir, saved_once)
        record["state_file"] = detail
        if not sound:
            unsound.append(record)
        if record["killed"]:
            kills.append(record)
            # The first two kills that leave a state file damage it (garbage, then
            # deletion), so that every soak covers both; later ones by chance.
            if len(damages) < 2 or rng.random() < args.state_damage_share:
                record["state_damage"] = damage_state_file(
                    soak_dir, rng, ("garbage", "delete")[len(damages)]
                    if len(damages) < 2 else None)
                if record["state_damage"]:
                    damages.append(record["state_damage"])
        print(f"  attempt {attempts}: {mode:16s} killed={record['killed']} "
              f"(exit {record['returncode']}) after {record['elapsed_s']:6.2f}s, recorded "
              f"step {record['step_before']} -> {record['step_after']}, partial files at "
              f"kill: {len(record.get('partial_files_at_kill') or [])}, state: {detail}"
              + (f"; state file then {record['state_damage']}"
                 if record.get("state_damage") else "")
              + (f"; second writer refused: {record['second_writer']['refused']}"
                 if "second_writer" in record else "")
              + (f"; clock-jump writer refused: {record['clock_jump']['refused']}, lock "
                 f"kept: {record['clock_jump']['lock_kept']}"
                 if "clock_jump" in record else ""), flush=True)
        if "vanishing_input" in wanted and "vanishing_input" not in cases:
            case_began = time.monotonic()
            cases["vanishing_input"] = case = vanishing_input(args, workdir)
            case["seconds"] = round(time.monotonic() - case_began, 1)
            print(f"  vanishing input ({case['seconds']} s): blocked reads + SIGTERM: exit "
                  f"{case.get('blocked_returncode')} after {case.get('blocked_exit_s')} s; "
                  f"folder removed: exit {case.get('removed_returncode')} after "
                  f"{case.get('removed_exit_s')} s; passed={case['passed']}", flush=True)
        if ("changed_flags" in wanted and "changed_flags" not in cases
                and record["step_after"] >= 0 and record["step_after"] < args.train_steps):
            cases["changed_flags"] = changed_flag_rerun(
                command, soak_dir, os.path.join(workdir, "changed_flags.log"), args)
            print(f"  changed-flag rerun: exit {cases['changed_flags']['returncode']}, "
                  f"refused={cases['changed_flags']['refused']}, "
                  f"unchanged={cases['changed_flags']['unchanged']}", flush=True)
        if not record["killed"] and record["returncode"] == 0 \
                and record["step_after"] >= args.train_steps:
            # Finished before the kill: start a fresh soak so kills keep hitting work.
            print("  (the run finished before its kill; starting over)", flush=True)
            shutil.rmtree(soak_dir, ignore_errors=True)
            saved_once = False
    print("Final, uninterrupted attempt ...", flush=True)
    final_rc = run_to_completion(command, soak_log, args.attempt_timeout)
    attempts += 1

    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    reference_prefix = tf.train.latest_checkpoint(reference_dir)
    soaked_prefix = tf.train.latest_checkpoint(soak_dir)
    comparison = compare(reference_prefix, soaked_prefix) if (
        reference_prefix and soaked_prefix) else dict(num_differing=-1)
    loaded, leftovers = check_remaining_checkpoints(soak_dir, args)

    mid_write = sum(1 for k in kills if k.get("partial_files_at_kill"))
    equal = comparison.get("num_differing") == 0
    checks = dict(
        reference_finished=reference_rc == 0,
        soak_finished=final_rc == 0,
        final_steps_match=(soaked_prefix or "").endswith(f"ckpt-{args.train_steps}")
        and (reference_prefix or "").endswith(f"ckpt-{args.train_steps}"),
        state_file_always_sound=not unsound,
        state_file_damaged_and_deleted=len(damages) >= 2,
        sigterm_exits_nonzero=not bad_exits,
        second_writer_refused=all(r["refused"] for r in seconds)
        and (bool(seconds) or not args.second_writer),
        remaining_checkpoints_load=bool(loaded) and all(v == "ok" for v in loaded.values()),
        no_partial_files_left=not leftovers,
        enough_kills=len(kills) >= args.kills,
        weights_equal=equal if args.deterministic else comparison.get("max_abs_diff", 1) < 1e-3,
        **{f"{name}_case": name in cases and cases[name]["passed"] for name in wanted},
    )
    report = dict(
        kills=len(kills), kills_during_checkpoint_writes=mid_write, attempts=attempts,
        restarts=attempts - 1, train_steps=args.train_steps,
        checkpoint_steps=args.checkpoint_steps, deterministic=args.deterministic,
        weights=comparison, remaining_checkpoints=loaded, leftover_partial_files=leftovers,
        unsound_state_files=unsound, sigterm_bad_exits=bad_exits,
        state_file_damages=damages, second_writers=seconds, fault_cases=cases,
        checks=checks, passed=all(checks.values()),
        reference_seconds=round(reference_seconds, 1),
        total_seconds=round(time.monotonic() - began, 1), kill_records=kills)
    path = args.json or os.path.join(workdir, "report.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=str)
    sigterms = sum(1 for k in kills if k["mode"] == "sigterm")
    print(f"\nPreemption soak: {len(kills) - sigterms} SIGKILLs ({mid_write} during "
          f"checkpoint writes), {sigterms} SIGTERMs, {len(damages)} state files deleted "
          f"or damaged, {len(seconds)} second writer(s), {attempts - 1} restarts, "
          f"{report['total_seconds']} s.")
    print(f"Final weights vs uninterrupted run: {comparison.get('num_tensors', 0)} tensors, "
          f"{comparison.get('num_differing')} differ, max |diff| "
          f"{comparison.get('max_abs_diff', float('nan')):g}"
          f"{' (bit-exact required)' if args.deterministic else ''}.")
    print(f"Remaining checkpoints: {', '.join(f'{k} {v}' for k, v in loaded.items())}; "
          f"partial files left: {len(leftovers)}.")
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    print(f"{'PASSED' if report['passed'] else 'FAILED'}; report: {path}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
