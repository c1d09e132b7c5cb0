#!/usr/bin/env python
"""run.py on W worker processes (MultiWorkerMirroredStrategy over 127.0.0.1), for each
W given: what each worker reads, how long a step takes, how much memory it peaks at
(docs/scaling.md). A cost per worker is counted, not assumed.

Every worker's file opens are counted from outside the process (strace, openat):
TensorFlow's reads of the folder's images (its input pipeline: one open per decode)
apart from Python's (the folder's one-time scan, cached on disk after the first run).
Decodes per epoch are the reads over the epochs the run trained; the last epoch's
shuffle buffer, filled before the run stops, adds up to one share more.

  python scripts/workers.py --workers=1,2,4                  # a made folder of 600 JPEGs
  python scripts/workers.py --workers=2 --folder=/data/imgs --train_epochs=2 \\
      --run_flag=--image_size=32

On a 2-core machine several workers share the cores: times are indicative only.
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import script_io  # scripts/: TF-free

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The run each worker makes, unless --run_flag overrides a flag: the tiny encoder.
RUN_FLAGS = ("--encoder=tiny", "--image_size=16", "--train_mode=pretrain", "--mode=train",
             "--export_format=none", "--deterministic", "--seed=0")


def make_folder(path, images, size=32, classes=3, seed=0):
    """`images` random JPEGs in `classes` class folders (a labelled image folder)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from PIL import Image  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(seed)
    for index in range(images):
        folder = os.path.join(path, f"class{index % classes}")
        os.makedirs(folder, exist_ok=True)
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"{index:06d}.jpg"))
    return path


def count_opens(trace_path, folder):
    """(TensorFlow's reads, Python's opens) of files under `folder` in an strace -f
    log of openat calls: TensorFlow opens without O_CLOEXEC, Python with it."""
    folder = os.path.realpath(folder).rstrip("/") + "/"
    reads = scans = 0
    pattern = re.compile(r'openat\(AT_FDCWD, "([^"]+)", ([A-Z_|]+)')
    with open(trace_path, errors="replace") as trace:
        for line in trace:
            match = pattern.search(line)
            if not match or not match.group(1).startswith(folder) or "ENOENT" in line:
                continue
            if "O_DIRECTORY" in match.group(2):
                continue
            if "O_CLOEXEC" in match.group(2):
                scans += 1
            else:
                reads += 1
    return reads, scans


def _log_facts(text):
    """(steps trained, epochs of the run, examples per epoch, last s/step) from a
    run.py log."""
    planned = re.search(r"Training (\d+) steps \(([\d.]+) epochs of (\d+) examples", text)
    rates = re.findall(r"\| ([\d.]+) s/step", text)
    if not planned:
        return None
    return dict(steps=int(planned.group(1)), epochs=float(planned.group(2)),
                examples=int(planned.group(3)),
                seconds_per_step=float(rates[-1]) if rates else None)


def run_workers(count, folder, work, repo, batch, epochs, extra, strace=True,
                timeout=1800):
    """One run of `count` workers; a dict per worker."""
    ports = script_io.free_ports(count)
    cluster = [f"127.0.0.1:{port}" for port in ports]
    # A new folder each run: nothing in --work is ever removed or trained on again.
    model_dir = tempfile.mkdtemp(prefix=f"run_w{count}_", dir=work)
    command = [sys.executable, os.path.join(repo, "run.py"), "--strategy=multiworker",
               f"--dataset=folder:{folder}", f"--model_dir={model_dir}",
               f"--train_batch_size={batch}", f"--train_epochs={epochs}", *RUN_FLAGS,
               *extra]
    processes = []
    for index in range(count):
        env = dict(os.environ, PYTHONPATH=repo, CUDA_VISIBLE_DEVICES="",
                   TF_CONFIG=json.dumps({"cluster": {"worker": cluster},
                                         "task": {"type": "worker", "index": index}}))
        prefix = [sys.executable, os.path.abspath(__file__), "--_peak_memory",
                  os.path.join(work, f"w{count}_{index}.rss"), "--"]
        if strace:
            prefix = ["strace", "-f", "-qq", "-e", "trace=openat", "-o",
                      os.path.join(work, f"w{count}_{index}.trace")] + prefix
        log = open(os.path.join(work, f"w{count}_{index}.log"), "w")
        processes.append((subprocess.Popen(prefix + command, env=env, stdout=log,
                                           stderr=subprocess.STDOUT, cwd=repo), log))
    start = time.monotonic()
    try:
        for process, _ in processes:
            process.wait(timeout=max(timeout - (time.monotonic() - start), 1))
    finally:
        for process, log in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    rows = []
    for index, (process, _) in enumerate(processes):
        text = open(os.path.join(work, f"w{count}_{index}.log"), errors="replace").read()
        if process.returncode:
            raise SystemExit(f"workers.py: worker {index} of {count} exited "
                             f"{process.returncode}:\n{text[-3000:]}")
        facts = _log_facts(text) or {}
        row = dict(workers=count, worker=index, wall_seconds=time.monotonic() - start,
                   **facts)
        with open(os.path.join(work, f"w{count}_{index}.rss")) as f:
            row["peak_rss_mb"] = int(f.read()) / 1024
        if strace:
            reads, scans = count_opens(os.path.join(work, f"w{count}_{index}.trace"),
                                       folder)
            row.update(image_reads=reads, scan_opens=scans)
            if facts:
                row["reads_per_epoch"] = reads / facts["epochs"]
                row["reads_per_epoch_per_image"] = reads / facts["epochs"] / facts["examples"]
        rows.append(row)
    return rows


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2,4",
                        help="comma-separated worker counts, each a run of its own")
    parser.add_argument("--folder", default=None,
                        help="an image folder (default: --images random JPEGs made in "
                             "--work)")
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--train_batch_size", type=int, default=60,
                        help="the global batch (every worker count must divide it)")
    parser.add_argument("--train_epochs", type=int, default=3)
    parser.add_argument("--run_flag", action="append", default=[],
                        help="another run.py flag for every worker (repeat)")
    parser.add_argument("--work", default=None,
                        help="where runs, logs and traces go (default: a new temporary "
                             "folder, kept)")
    parser.add_argument("--repo", default=REPO,
                        help="the checkout whose run.py the workers run (e.g. an older "
                             "one, to measure before a change)")
    parser.add_argument("--no_strace", action="store_true",
                        help="count no file opens (no strace on this machine)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    try:
        args.workers = [int(w) for w in args.workers.split(",") if w]
    except ValueError:
        parser.error(f"--workers={args.workers!r}: comma-separated whole numbers")
    if not args.workers or min(args.workers) < 1:
        parser.error("--workers: give one or more counts >= 1")
    bad = [w for w in args.workers if args.train_batch_size % w]
    if bad:
        parser.error(f"--train_batch_size={args.train_batch_size} does not divide over "
                     f"{bad} workers")
    if args.folder and not os.path.isdir(args.folder):
        parser.error(f"--folder={args.folder!r} is not a folder")
    if not os.path.exists(os.path.join(args.repo, "run.py")):
        parser.error(f"--repo={args.repo!r} has no run.py")
    if not args.no_strace and shutil.which("strace") is None:
        parser.error("strace is not installed (apt-get install strace): install it, or "
                     "pass --no_strace to measure without counting reads")
    if args.images < 1 or args.train_epochs < 1:
        parser.error("--images and --train_epochs must be >= 1")
    for flag in args.run_flag:
        if not flag.startswith("--"):
            parser.error(f"--run_flag={flag!r}: a run.py flag, e.g. --image_size=32")
    return args


def _peak_memory_main(argv):
    """`--_peak_memory FILE -- command...`: runs the command, writes its peak RSS
    (KiB, the largest of it and its children) to FILE, exits with its code."""
    out, command = argv[0], argv[2:]
    code = subprocess.call(command)
    with open(out, "w") as f:
        f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
    return code


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_peak_memory"]:
        raise SystemExit(_peak_memory_main(argv[1:]))
    args = parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="simclr_workers_")
    os.makedirs(work, exist_ok=True)
    folder = args.folder or make_folder(os.path.join(work, "images"), args.images)
    rows = []
    for count in args.workers:
        rows += run_workers(count, folder, work, os.path.abspath(args.repo),
                            args.train_batch_size, args.train_epochs, args.run_flag,
                            strace=not args.no_strace)
        for row in rows[-count:]:
            print(json.dumps(row), flush=True)
    print("\nworkers | worker | epochs | image reads | reads/epoch/image | scan opens | "
          "s/step | peak RSS MB")
    for row in rows:
        print(f"{row['workers']} | {row['worker']} | {row.get('epochs', '?')} | "
              f"{row.get('image_reads', '-')} | "
              f"{row.get('reads_per_epoch_per_image', float('nan')):.3f} | "
              f"{row.get('scan_opens', '-')} | {row.get('seconds_per_step', '?')} | "
              f"{row['peak_rss_mb']:.0f}")
    print(f"\n(runs, logs and traces in {work})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
