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
import threading
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
                timeout=1800, *, children):
    """One run of `count` workers, each a child of `children` (a `script_io.Children`);
    a dict per worker."""
    ports = script_io.free_ports(count)
    cluster = [f"127.0.0.1:{port}" for port in ports]
    # A new folder each run: nothing in --work is ever removed or trained on again.
    model_dir = tempfile.mkdtemp(prefix=f"run_w{count}_", dir=work)
    command = [sys.executable, os.path.join(repo, "run.py"), "--strategy=multiworker",
               f"--dataset=folder:{folder}", f"--model_dir={model_dir}",
               f"--train_batch_size={batch}", f"--train_epochs={epochs}", *RUN_FLAGS,
               *extra]
    codes, logs, threads = [None] * count, [], []

    def run(index, command):
        try:
            codes[index] = children.run(command, timeout=timeout, env=envs[index],
                                        stdout=logs[index], stderr=subprocess.STDOUT,
                                        cwd=repo)
        except (script_io.Stopped, subprocess.TimeoutExpired) as error:
            codes[index] = error

    envs = []
    for index in range(count):
        envs.append(dict(os.environ, PYTHONPATH=repo, CUDA_VISIBLE_DEVICES="",
                         TF_CONFIG=json.dumps({"cluster": {"worker": cluster},
                                               "task": {"type": "worker", "index": index}})))
        prefix = [sys.executable, os.path.abspath(__file__), "--_peak_memory",
                  os.path.join(work, f"w{count}_{index}.rss"), "--"]
        if strace:
            prefix = ["strace", "-f", "-qq", "-e", "trace=openat", "-o",
                      os.path.join(work, f"w{count}_{index}.trace")] + prefix
        logs.append(open(os.path.join(work, f"w{count}_{index}.log"), "w"))
        # Each worker in a thread of this process: `Children` stops them all (with what
        # they started: strace's tracee, run.py) when this script is stopped.
        threads.append(threading.Thread(target=run, args=(index, prefix + command)))
    start = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for log in logs:
            log.close()
    children.check()
    rows = []
    for index, code in enumerate(codes):
        text = open(os.path.join(work, f"w{count}_{index}.log"), errors="replace").read()
        if code:
            raise SystemExit(f"workers.py: worker {index} of {count} exited "
                             f"{code}:\n{text[-3000:]}")
        facts = _log_facts(text) or {}
        row = dict(workers=count, worker=index, wall_seconds=time.monotonic() - start,
                   model_dir=model_dir, **facts)
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
    parser.add_argument("--one_process", action="store_true",
                        help="also train one process on the same global batches (the W "
                             "pipelines' batches concatenated) and compare its losses "
                             "and final weights with each run of W > 1 workers; adds "
                             "--use_blur=false to the runs (blur draws its seeds per "
                             "replica, so one replica would blur other views)")
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
    if args.one_process and os.path.realpath(args.repo) != os.path.realpath(REPO):
        parser.error("--one_process trains with this checkout's code: give no --repo")
    if args.images < 1 or args.train_epochs < 1:
        parser.error("--images and --train_epochs must be >= 1")
    for flag in args.run_flag:
        if not flag.startswith("--"):
            parser.error(f"--run_flag={flag!r}: a run.py flag, e.g. --image_size=32")
    return args


def one_process(model_dir, workers, out):
    """One process (one replica) on the global batches W workers trained on: the W
    input pipelines' batches of `model_dir`'s run, concatenated in worker order (the
    replica order of the global batch), through the model, schedule and step run.py
    builds from the run's flags (`parts.build_model`, `parts.build_trainer`), seeded
    as run.py seeds. Saves each step's loss, and the largest difference of the
    model's weights from the run's last checkpoint (restored into a second model)."""
    sys.path.insert(0, REPO)
    import numpy as np  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
    tf = quiet.import_tensorflow()
    import keras  # pylint: disable=import-outside-toplevel
    from simclr_tf.data import pipeline  # pylint: disable=import-outside-toplevel
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import preflight  # pylint: disable=import-outside-toplevel
    from simclr_tf.run.modes import parts, train  # pylint: disable=import-outside-toplevel
    from simclr_tf.weights import checkpoints  # pylint: disable=import-outside-toplevel
    config = records.read_config(records.record_path(model_dir, "flags", "train"))
    keras.utils.set_random_seed(config.seed)  # as run.py (run/experiment.py)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    strategy = tf.distribute.get_strategy()
    source = preflight.load_source(config)
    plan = train.step_plan(config, source.num_examples(config.train_split))
    model = parts.build_model(config, strategy, source.num_classes)
    trainer = parts.build_trainer(config, strategy, model, plan=plan)
    input_fn = pipeline.build_input_fn(
        source, config.train_split, global_batch_size=config.train_batch_size,
        start_step=0, **train.input_options(config))
    shares = tuple(input_fn(tf.distribute.InputContext(workers, index, workers))
                   for index in range(workers))
    batches = tf.data.Dataset.zip(shares).map(
        lambda *parts_: tf.nest.map_structure(lambda *x: tf.concat(x, 0), *parts_))
    iterator = iter(strategy.experimental_distribute_dataset(batches))
    losses = [float(trainer.train_steps(iterator, 1)["loss"])
              for _ in range(plan.total_steps)]
    recorded = parts.build_model(config, strategy, source.num_classes)
    checkpoints.load_latest(recorded, model_dir)
    difference = max(float(np.max(np.abs(a.numpy() - b.numpy())))
                     for a, b in zip(model.weights, recorded.weights))
    moved = max(float(np.max(np.abs(a.numpy()))) for a in model.weights)
    np.savez(out, losses=np.asarray(losses), max_weight_difference=difference,
             largest_weight=moved)


def _recorded_losses(model_dir):
    """{step: loss} of the run's metrics log (the steps it logged)."""
    losses = {}
    path = os.path.join(model_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if "train/total_loss" in row and "step" in row:
                    losses[int(row["step"])] = float(row["train/total_loss"])
    return losses


def compare_one_process(model_dir, workers, work, *, children):
    """{max_loss_difference, max_weight_difference, largest_weight, steps}: the run
    of `workers` workers in `model_dir` against one process on its global batches
    (`one_process`, in a child: it imports TensorFlow)."""
    out = os.path.join(work, f"one_process_w{workers}.npz")
    code = children.run([sys.executable, os.path.abspath(__file__), "--_one_process",
                         model_dir, str(workers), out],
                        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    if code:
        raise SystemExit(f"workers.py: the one-process run of {workers} workers' batches "
                         f"exited {code}")
    import numpy as np  # pylint: disable=import-outside-toplevel
    with np.load(out) as result:
        losses = result["losses"]
        recorded = _recorded_losses(model_dir)
        if not recorded:
            raise SystemExit(f"workers.py: {model_dir} has no losses in metrics.jsonl")
        differences = [abs(losses[step - 1] - loss) for step, loss in recorded.items()
                       if step <= len(losses)]
        return dict(workers=workers, steps=len(losses), compared_steps=len(differences),
                    max_loss_difference=max(differences),
                    max_weight_difference=float(result["max_weight_difference"]),
                    largest_weight=float(result["largest_weight"]))


def _peak_memory_main(argv):
    """`--_peak_memory FILE -- command...`: runs the command, writes its peak RSS
    (KiB, the largest of it and its children) to FILE, exits with its code."""
    out, command = argv[0], argv[2:]
    code = subprocess.call(command)
    script_io.write_text(out, str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
    return code


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_peak_memory"]:
        raise SystemExit(_peak_memory_main(argv[1:]))
    if argv[:1] == ["--_one_process"]:
        return one_process(argv[1], int(argv[2]), argv[3])
    args = parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="simclr_workers_")
    os.makedirs(work, exist_ok=True)
    folder = args.folder or make_folder(os.path.join(work, "images"), args.images)
    rows, comparisons = [], []
    extra = args.run_flag + (["--use_blur=false"] if args.one_process else [])
    try:
        with script_io.Children() as children:
            for count in args.workers:
                rows += run_workers(count, folder, work, os.path.abspath(args.repo),
                                    args.train_batch_size, args.train_epochs, extra,
                                    strace=not args.no_strace, children=children)
                if args.one_process and count > 1:
                    comparisons.append(compare_one_process(
                        rows[-count]["model_dir"], count, work, children=children))
                    print(json.dumps(comparisons[-1]), flush=True)
                for row in rows[-count:]:
                    print(json.dumps(row), flush=True)
    except script_io.Stopped as stop:  # every worker was stopped and waited for
        print(f"workers.py: {stop}: the running workers were stopped; no table",
              file=sys.stderr)
        raise SystemExit(128 + stop.signum) from None
    print("\nworkers | worker | epochs | image reads | reads/epoch/image | scan opens | "
          "s/step | peak RSS MB")
    for row in rows:
        print(f"{row['workers']} | {row['worker']} | {row.get('epochs', '?')} | "
              f"{row.get('image_reads', '-')} | "
              f"{row.get('reads_per_epoch_per_image', float('nan')):.3f} | "
              f"{row.get('scan_opens', '-')} | {row.get('seconds_per_step', '?')} | "
              f"{row['peak_rss_mb']:.0f}")
    for c in comparisons:
        print(f"{c['workers']} workers against one process on the same global batches: "
              f"loss within {c['max_loss_difference']:.3g} over {c['compared_steps']} "
              f"steps, final weights within {c['max_weight_difference']:.3g} (largest "
              f"weight {c['largest_weight']:.3g})")
    print(f"\n(runs, logs and traces in {work})")
    if args.json:
        script_io.write_text(args.json, json.dumps(
            dict(rows=rows, one_process=comparisons) if args.one_process else rows,
            indent=2))
    return rows


if __name__ == "__main__":
    main()
