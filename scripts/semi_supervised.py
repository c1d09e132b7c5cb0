"""SimCLR v2's three stages on 'digits' with 10% of the labels, against baselines.

Runs `python run.py ...` once per stage and seed (each its own --model_dir under
--workdir/seed_<seed>, each with --mode=train_then_eval and --seed=<seed>) and reports
the test top-1 of every stage, read from the stage's result.json
(`eval/label_top_1_accuracy`), as its mean ± sample standard deviation over --seeds
(default 0,1,2) and each seed's value, its wall time and, for the distilled students,
how often the student's class is the teacher's on test (`distill/teacher_agreement`):

  pretrain  flags/quickstart.flags (--final_linear_probe dropped): SimCLR
            pretraining of ResNet-18 x0.25 (CIFAR stem, 16 px) on the 1,437
            training images, no labels. Not a row of the comparison: stage (b)'s
            and (c)'s starting point.
  (a)       the same architecture trained from scratch on the labelled 10% only
            (144 images; --train_mode=finetune --label_fraction=0.1, no
            --checkpoint).
  (b)       the teacher: the pretrained encoder fine-tuned on the labelled 10%
            (flags/quickstart_finetune.flags, --checkpoint and --model_dir set).
  (c)       self-distillation: the same architecture, initialised from the
            pretrained encoder, trained on all 1,437 training images without
            labels to match (b)'s softmax at temperature 0.1 (--train_mode=distill
            --teacher=<b> --checkpoint=<pretrain> --distill_alpha=1).
  (d)       a smaller student, width 0.125 (same depth, stem, image size),
            distilled from (b) from random weights at temperature 1.0.
  (e)       that width-0.125 model trained from scratch on the labelled 10% only.

The paper's claims, checked and printed whichever way they come out (nothing is
tuned until they hold): self-distillation does not lose to its teacher, (c) >= (b);
a distilled small model beats the same model trained on the labels alone, (d) > (e).
Also printed: pretraining helps, (b) > (a). A claim x > y (or x >= y) gets a verdict
only where the spreads over seeds separate: |mean(x) - mean(y)| > std(x) + std(y),
with the sample standard deviations (n - 1) of the per-seed top-1. Then it "holds"
if mean(x) > mean(y) and "does not hold" if mean(x) < mean(y); otherwise it is
"undecided at N seeds (spreads overlap)", and with one seed (no spread) always
undecided. A stage that failed in any seed leaves its claims unknown. --fast prints
no verdict at all: its numbers are at chance level.

The settings, chosen once, not tuned on the test split:
- (b) is the quick start's fine-tuning recipe as it stands (LARS, lr 0.005
  sqrt-scaled, no weight decay, no warmup, 30 epochs of the 144 labelled images at
  batch 64 = 68 steps, head on the first projection layer, zero-initialised).
- (a), (c), (d) and (e) share one step budget: batch 64 for --student_epochs
  (default 30) epochs of all 1,437 training images = 674 steps; the baselines (a)
  and (e) get the same 674 steps as the students (c) and (d) (about 300 epochs of
  their 144 images), so no student wins by training longer. All four use LARS,
  weight decay 1e-4, linear warmup over the first 10% of the steps, then cosine.
- (a), (d) and (e), from random weights: the pretraining's rate, lr 2.0 linearly
  scaled (0.5 at batch 64); the quick start's fine-tuning rate (0.04 at batch 64)
  barely moves random weights. Picked once, not tuned.
- (c), from the pretrained encoder: lr 0.08 linearly scaled (0.02 at batch 64),
  chosen on a held-out part of the training split, never on test: the student
  distilled on train[:80%] (no labels) from the same teacher, top-1 on train[80%:]
  after the same 674 steps (2026-12-01): lr 2.0 collapses to one class (0.101,
  agreement 0.087; at T = 0.1 the logits' gradient is 10x that at T = 1), 0.4
  gives 0.857, 0.08 gives 0.864 (teacher 0.861 on that slice; it saw the labels of
  about 29 of its 287 images). Command: this script's (c) command with
  --train_split='train[:80%]' --eval_split='train[80%:]' --warmup_epochs=3.757
  and --learning_rate set.
- Every model has the teacher's head: a zero-initialised linear classifier on the
  first projection-head layer (--ft_proj_selector=1), the whole network trained.
- Distillation temperatures are the paper's: 0.1 for self-distillation (c), 1.0
  big-to-small (d); alpha 1 (no labels), crop+flip views of every training image.
- Every stage of a seed runs with that --seed: the same 10% subset in all of a
  seed's stages, another subset (and other weights, order, views) in each seed.

--workdir (default /tmp/simclr_semi) holds one folder per seed, seed_<seed>, and in
it one run directory per stage, its log (<stage>.log) and the script's record of it
(<stage>.json: the command, exit status, wall time). A non-empty --workdir is
refused unless --resume, so a rerun never mixes old runs in silently. With --resume
a stage is reused only when its record names the same command, says it finished
(exit 0), and its result.json holds `eval/label_top_1_accuracy` at the step it
recorded; any other stage is run again, into its directory (run.py then resumes an
interrupted run, and refuses changed flags). A reused stage reports the wall time it
took when it ran.

Measured 2026-12-02 (seeds 0, 1, 2 on 2 AMD EPYC cores (AVX-512) beside other jobs,
10-14 min per seed): test top-1, mean ± std, (a) 0.897 ± 0.024, (b) 0.890 ± 0.043,
(c) 0.891 ± 0.028 (agreement 0.933 ± 0.012), (d) 0.872 ± 0.026 (agreement 0.886 ±
0.034), (e) 0.886 ± 0.017: none of the three claims is decided at 3 seeds (the
spreads overlap). The online head of the pretraining itself: 0.886 ± 0.006. Each
seed's numbers: docs/distillation.md.

Examples:
  python scripts/semi_supervised.py            # seeds 0,1,2: 30-40 min on 2 CPU cores
  python scripts/semi_supervised.py --fast --seeds=0 --workdir=/tmp/semi_fast \\
      --json=/tmp/semi_fast.json               # end to end, 1-2 min; numbers meaningless
  python scripts/semi_supervised.py --resume   # reuse the finished stages of /tmp/simclr_semi
  python scripts/semi_supervised.py --resume --seeds=0,1,2,3,4  # two seeds more

Exit status 0 when every stage of every seed ran (whatever the verdicts), 1 when a
stage failed (its command and the end of its log are printed; the stages that do not
need it and the other seeds still run), 2 for a refused --workdir. SIGTERM or SIGINT
(Ctrl-C) reaches the running stage's run.py, which saves a checkpoint and exits; the
script waits for it and exits 128 + the signal (143, 130; SIGHUP, a closed terminal,
reaches it as SIGTERM, 129): the same command with
--resume continues (finished stages are reused, the stopped one resumes).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A plain script: runs from a checkout without `pip install -e .` too (it imports
# nothing of the package itself; run.py does).
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))
import script_io  # noqa: E402  (whole files; children that stop with the script)

PRETRAIN_FLAGS = os.path.join(REPO, "flags", "quickstart.flags")
FINETUNE_FLAGS = os.path.join(REPO, "flags", "quickstart_finetune.flags")
# The quick start's model and data, read from its flagfile for the runs that have no
# --checkpoint or --teacher to inherit them from.
MODEL_AND_DATA = ("dataset", "train_split", "eval_split", "image_size", "stem",
                  "resnet_depth", "width_multiplier", "num_proj_layers")
SMALL_WIDTH = 0.125
LABEL_FRACTION = 0.1
BATCH_SIZE = 64
# The students' and the from-scratch runs' optimiser: the pretraining's (LARS, 2.0
# linearly scaled, weight decay 1e-4) and a warmup of WARMUP_SHARE of the steps.
OPTIMISER = dict(optimizer="lars", learning_rate=2.0, learning_rate_scaling="linear",
                 weight_decay=1e-4)
WARMUP_SHARE = 0.1
# The teacher's head on every model: a zero-initialised classifier on the first
# projection-head layer; nothing frozen.
HEAD = dict(ft_proj_selector=1, zero_init_logits_layer="true", fine_tune_after_block=-1)
SELF_TEMPERATURE, SMALL_TEMPERATURE = 0.1, 1.0  # the paper's
# (c)'s rate, chosen on train[80%:] (module docstring): 2.0 collapses at T = 0.1.
SELF_DISTILL_LEARNING_RATE = 0.08

STAGES = ("pretrain", "b", "a", "c", "d", "e")  # in the order they run
# What each stage needs of the earlier ones: their weights, or (a, e) the sizes of
# the training set and its labelled subset that the logs of pretrain and b report.
NEEDS = dict(pretrain=(), b=("pretrain",), a=("pretrain", "b"), c=("pretrain", "b"),
             d=("pretrain", "b"), e=("pretrain", "b"))
COMPARED = ("a", "b", "c", "d", "e")
DESCRIPTIONS = {
    "pretrain": "SimCLR pretraining, ResNet-18 x0.25, no labels",
    "a": "x0.25 from scratch, labelled 10% only",
    "b": "x0.25 pretrained + fine-tuned on 10% (teacher)",
    "c": f"x0.25 self-distilled from (b), init pretrained, T={SELF_TEMPERATURE:g}",
    "d": f"x{SMALL_WIDTH:g} distilled from (b), from scratch, T={SMALL_TEMPERATURE:g}",
    "e": f"x{SMALL_WIDTH:g} from scratch, labelled 10% only",
}
DIRECTORIES = dict(pretrain="pretrain", a="a_scratch", b="b_teacher",
                   c="c_self_distilled", d="d_small_distilled", e="e_small_scratch")
_TRAINING_LINE = re.compile(r"Training (\d+) steps \(([\d.]+) epochs of (\d+) examples")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="/tmp/simclr_semi",
                        help="One run directory per stage; must be empty or absent "
                        "unless --resume.")
    parser.add_argument("--resume", action="store_true",
                        help="Reuse the stages of --workdir that finished with the same "
                        "command; run the others.")
    parser.add_argument("--json", default=None,
                        help="Report path (default: <workdir>/semi_supervised.json).")
    parser.add_argument("--seeds", type=seed_list, default=None,
                        help="Comma-separated seeds (default 0,1,2; with --fast 0): every "
                        "stage runs "
                        "once per seed, with --seed=<seed> (weights, data order, "
                        "augmentation, the labelled subset), in <workdir>/seed_<seed>.")
    parser.add_argument("--student_epochs", type=float, default=30.0,
                        help="Step budget of (a), (c), (d), (e): this many epochs of all "
                        "training images at batch 64.")
    parser.add_argument("--fast", action="store_true",
                        help="The tiny encoder, a few steps per stage and no export at "
                        "the end of a stage (--export_format=none: the stages read each "
                        "other's checkpoints), seed 0 unless --seeds says otherwise: "
                        "checks the script end to end in about a minute a seed on 2 "
                        "cores (start-up and tracing dominate); the accuracies mean "
                        "nothing.")
    parser.add_argument("--stage_timeout", type=float, default=1800.0,
                        help="Seconds before a stage is killed (counted as failed).")
    args = parser.parse_args(argv)
    if args.fast and "student_epochs" in script_io.given_options(parser, argv):
        parser.error("--student_epochs would do nothing with --fast (its students train "
                     "12 steps); leave one of them out")
    if args.seeds is None:  # --fast checks the path: one seed is enough
        args.seeds = (0,) if args.fast else (0, 1, 2)
    return args


def seed_list(text):
    """'0,1,2' -> (0, 1, 2): distinct integers, in the order given."""
    try:
        seeds = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 0,1,2. Received: {text!r}")
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"a seed is repeated. Received: {text!r}")
    return seeds


def read_flagfile(path):
    """{flag: value} of a flagfile's `--name=value` lines (comments skipped)."""
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("--"):
                name, _, value = line[2:].partition("=")
                values[name] = value
    return values


def flag_list(values):
    return [f"--{name}={value}" for name, value in values.items()]


def warmup_epochs(steps, num_examples):
    """--warmup_epochs giving `steps` warmup steps over `num_examples` at batch 64
    (half a step over, so that schedules.compute_steps' floor lands on `steps`)."""
    return round((steps + 0.5) * BATCH_SIZE / num_examples, 6)


# ------------------------------------------------------------------ the stages


def commands(args, seed, workdir, counts):
    """{stage: run.py arguments} of one seed's stages whose inputs are known: the
    supervised and distilled runs need the training-set sizes that the pretraining
    and the teacher's logs report (`counts`: num_train, num_labelled)."""
    run_py = [sys.executable, os.path.join(REPO, "run.py")]
    # --fast checks the script, not the method: the tiny encoder (two conv stages; the
    # stages after the pretraining inherit it), a few steps per stage, and no export at
    # the end of a stage (nothing reads one: the later stages read the checkpoints of
    # the run directories they are given, the report their result.json).
    common = [f"--seed={seed}", "--progress=lines", "--mode=train_then_eval"] + (
        ["--export_format=none"] if args.fast else [])
    model_dir = {stage: os.path.join(workdir, name) for stage, name in DIRECTORIES.items()}
    pretrain_fast = ["--encoder=tiny", "--train_epochs=1", "--warmup_epochs=0.2",
                     "--checkpoint_epochs=1"]
    finetune_fast = ["--train_epochs=2", "--checkpoint_epochs=1"]
    found = dict(
        pretrain=run_py + [f"--flagfile={PRETRAIN_FLAGS}",
                           f"--model_dir={model_dir['pretrain']}",
                           "--final_linear_probe=false"] + common
        + (pretrain_fast if args.fast else []),
        b=run_py + [f"--flagfile={FINETUNE_FLAGS}", f"--checkpoint={model_dir['pretrain']}",
                    f"--model_dir={model_dir['b']}"] + common
        + (finetune_fast if args.fast else []))
    if "num_train" not in counts or "num_labelled" not in counts:
        return found, model_dir
    steps = student_steps(args, counts["num_train"])
    quickstart = read_flagfile(PRETRAIN_FLAGS)
    model_data = {name: quickstart[name] for name in MODEL_AND_DATA}
    if args.fast:
        model_data["encoder"] = "tiny"
    small_model_data = dict(model_data, width_multiplier=SMALL_WIDTH)

    def recipe(num_examples, **optimiser):
        warmup = int(WARMUP_SHARE * steps)
        return flag_list(dict(OPTIMISER, **optimiser, **HEAD, train_batch_size=BATCH_SIZE,
                              train_steps=steps, checkpoint_steps=(steps + 1) // 2,
                              warmup_epochs=warmup_epochs(warmup, num_examples),
                              eval_batch_size=quickstart["eval_batch_size"]))

    scratch = ["--train_mode=finetune", f"--label_fraction={LABEL_FRACTION}"]
    distill = ["--train_mode=distill", f"--teacher={model_dir['b']}", "--distill_alpha=1.0"]
    found.update(
        a=run_py + scratch + flag_list(model_data) + recipe(counts["num_labelled"])
        + [f"--model_dir={model_dir['a']}"] + common,
        c=run_py + distill + [f"--checkpoint={model_dir['pretrain']}",
                              f"--distill_temperature={SELF_TEMPERATURE}"]
        + recipe(counts["num_train"], learning_rate=SELF_DISTILL_LEARNING_RATE)
        + [f"--model_dir={model_dir['c']}"] + common,
        d=run_py + distill + [f"--width_multiplier={SMALL_WIDTH}",
                              f"--distill_temperature={SMALL_TEMPERATURE}"]
        + recipe(counts["num_train"]) + [f"--model_dir={model_dir['d']}"] + common,
        e=run_py + scratch + flag_list(small_model_data) + recipe(counts["num_labelled"])
        + [f"--model_dir={model_dir['e']}"] + common)
    return found, model_dir


def student_steps(args, num_train):
    """Steps of (a), (c), (d), (e): --student_epochs of the training split at batch
    64, counted as run.py counts epochs (schedules.compute_steps); --fast: 12."""
    if args.fast:
        return 12
    return int(num_train * args.student_epochs // BATCH_SIZE + 1)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def finished_record(record_path, command, model_dir):
    """The script's record of a finished stage with this command, or None."""
    record = read_json(record_path)
    if not record or record.get("command") != command or record.get("returncode") != 0:
        return None
    result = read_json(os.path.join(model_dir, "result.json"))
    if (not result or "eval/label_top_1_accuracy" not in result
            or result.get("global_step") != record.get("global_step")):
        return None
    return record


def run_stage(stage, command, model_dir, workdir, args, children):
    """Runs (or with --resume reuses) one stage, its run.py one of `children`
    (script_io.Children); returns its record. Raises script_io.Stopped, leaving no
    record, when the script is stopped meanwhile (run.py saved a checkpoint)."""
    record_path = os.path.join(workdir, f"{stage}.json")
    log_path = os.path.join(workdir, f"{stage}.log")
    if args.resume:
        record = finished_record(record_path, command, model_dir)
        if record is not None:
            print(f"[{stage}] reused: {model_dir} (finished in {record['wall_seconds']} s)",
                  flush=True)
            return dict(record, reused=True)
    print(f"[{stage}] {DESCRIPTIONS[stage]} ...\n  " + " ".join(command), flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    began = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(command)}\n"
                  .encode())
        log.flush()
        try:
            returncode = children.run(command, stdout=log, stderr=subprocess.STDOUT,
                                      cwd=REPO, env=env, timeout=args.stage_timeout)
        except subprocess.TimeoutExpired:
            returncode = "timeout"
    wall = round(time.monotonic() - began, 1)
    result = read_json(os.path.join(model_dir, "result.json")) or {}
    record = dict(stage=stage, description=DESCRIPTIONS[stage], command=command,
                  model_dir=model_dir, log=log_path, returncode=returncode,
                  wall_seconds=wall, global_step=result.get("global_step"), reused=False)
    script_io.write_text(record_path, json.dumps(record, indent=2))
    print(f"[{stage}] exit {returncode} after {wall} s", flush=True)
    return record


def training_line(log_path):
    """(steps, epochs, examples) of the last 'Training N steps (E epochs of M
    examples' line of a stage's log, or None."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            matches = _TRAINING_LINE.findall(f.read())
    except OSError:
        return None
    if not matches:
        return None
    steps, epochs, examples = matches[-1]
    return int(steps), float(epochs), int(examples)


def stage_row(record):
    """The reported numbers of a finished stage, from its result.json."""
    result = read_json(os.path.join(record["model_dir"], "result.json")) or {}
    line = training_line(record["log"])
    return dict(
        description=record["description"], model_dir=record["model_dir"],
        command=record["command"], top_1=result.get("eval/label_top_1_accuracy"),
        top_5=result.get("eval/label_top_5_accuracy"),
        teacher_agreement=result.get("distill/teacher_agreement"),
        teacher_top_1=result.get("distill/teacher_top_1_accuracy"),
        steps=result.get("global_step"),
        train_examples=line[2] if line else None,
        initialized_from=result.get("train/initialized_from"),
        wall_seconds=record["wall_seconds"], reused=record.get("reused", False))


# ------------------------------------------------------------------ report


CLAIMS = (  # (name, x, y): the claim that x's top-1 is above y's (or not below it)
    ("(c) >= (b): self-distillation does not lose to its teacher", "c", "b"),
    ("(d) > (e): a distilled small model beats it trained on the labels alone", "d", "e"),
    ("(b) > (a): pretraining helps fine-tuning on 10% of the labels", "b", "a"),
)
NO_VERDICT_FAST = "--fast: numbers at chance level, no verdict"


def mean_std(values):
    """(mean, sample standard deviation (n - 1); None for one value) of a list."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    return mean, (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5


def verdict(x_values, y_values, fast=False):
    """Whether the claim "x > y" (or "x >= y") holds, from the top-1 of x and of y
    over seeds.

    Decided only when the spreads separate: |mean(x) - mean(y)| > std(x) + std(y),
    the sample standard deviations over seeds. Then the claim holds if mean(x) >
    mean(y) and does not hold if mean(x) < mean(y) (for ">=" too: separated spreads
    say that the two differ). Otherwise, and with fewer than two values on a side,
    it is undecided. --fast runs are at chance level: never a verdict."""
    if fast:
        return NO_VERDICT_FAST
    if not x_values or not y_values:
        return "unknown (a stage failed)"
    seeds = min(len(x_values), len(y_values))
    if seeds < 2:
        return f"undecided at {seeds} seed (no spread)"
    (x_mean, x_std), (y_mean, y_std) = mean_std(x_values), mean_std(y_values)
    if abs(x_mean - y_mean) <= x_std + y_std:
        return f"undecided at {seeds} seeds (spreads overlap)"
    return "holds" if x_mean > y_mean else "does not hold"


def summarise(per_seed, seeds):
    """{stage: mean, std and per-seed values of its top-1, agreement, wall time}
    over the seeds in which the stage finished."""
    summary = {}
    for stage in STAGES:
        finished = [(seed, per_seed[seed][stage]) for seed in seeds
                    if stage in per_seed.get(seed, {})]
        if not finished:
            continue
        first = finished[0][1]
        entry = dict(description=first["description"], steps=first["steps"],
                     train_examples=first["train_examples"], seeds=len(finished))
        for key in ("top_1", "teacher_agreement", "teacher_top_1", "wall_seconds"):
            values = {seed: row[key] for seed, row in finished if row[key] is not None}
            if values:
                mean, std = mean_std(list(values.values()))
                entry[key] = dict(mean=mean, std=std,
                                  per_seed={str(seed): v for seed, v in values.items()})
        summary[stage] = entry
    return summary


def claims(summary, seeds, fast=False):
    """{claim: its verdict and the means and spreads it rests on}. A claim whose
    stages did not finish in every seed is unknown."""
    found = {}
    for name, x, y in CLAIMS:
        values = []
        for stage in (x, y):
            top_1 = summary.get(stage, {}).get("top_1")
            complete = top_1 is not None and len(top_1["per_seed"]) == len(seeds)
            values.append(list(top_1["per_seed"].values()) if complete else [])
        entry = dict(verdict=verdict(*values, fast=fast))
        for stage, stage_values in zip((x, y), values):
            if stage_values:
                entry[stage] = dict(zip(("mean", "std"), mean_std(stage_values)))
        found[name] = entry
    return found


def plus_minus(mean, std, fmt="{:.3f}"):
    return fmt.format(mean) + ("" if std is None else " ± " + fmt.format(std))


def markdown_table(summary, seeds, failures=None, skipped=None):
    """One row per stage: test top-1 mean ± std over seeds, then each seed's (a
    dash where the stage did not finish)."""
    lines = [f"| stage | model | train images | steps | test top-1, mean ± std "
             f"| seeds {', '.join(map(str, seeds))} | teacher agreement | wall s (mean) |",
             "|---|---|---|---|---|---|---|---|"]
    for stage in STAGES:
        label = stage if stage == "pretrain" else f"({stage})"
        notes = [f"FAILED in seed {seed} (exit {records[stage]['returncode']})"
                 for seed, records in (failures or {}).items() if stage in records]
        notes += [f"skipped in seed {seed}" for seed, stages in (skipped or {}).items()
                  if stage in stages]
        entry = summary.get(stage)
        if entry is None or "top_1" not in entry:
            if notes:
                lines.append(f"| {label} | {DESCRIPTIONS[stage]} | | | {'; '.join(notes)} "
                             "| | | |")
            continue
        top_1, agreement = entry["top_1"], entry.get("teacher_agreement")
        per_seed = ", ".join(f"{top_1['per_seed'][str(seed)]:.4f}"
                             if str(seed) in top_1["per_seed"] else "-" for seed in seeds)
        lines.append(
            f"| {label} | {entry['description']} | {entry['train_examples'] or ''} "
            f"| {entry['steps'] or ''} | {plus_minus(top_1['mean'], top_1['std'])} "
            f"| {per_seed}{'; ' + '; '.join(notes) if notes else ''} "
            f"| {plus_minus(agreement['mean'], agreement['std']) if agreement else ''} "
            f"| {entry['wall_seconds']['mean']:.0f} |")
    return "\n".join(lines)


def prepare_workdir(workdir, resume):
    if os.path.isdir(workdir) and os.listdir(workdir) and not resume:
        print(f"{workdir} is not empty: it holds an earlier run of this script (or "
              "something else). Pass --resume to reuse its finished stages, or a new or "
              "empty --workdir.", file=sys.stderr)
        sys.exit(2)
    os.makedirs(workdir, exist_ok=True)


def run_seed(args, seed, workdir, children):
    """Runs (or reuses) one seed's stages in order; returns ({stage: row} of the
    finished ones, {stage: record} of the failed ones, [skipped stages])."""
    os.makedirs(workdir, exist_ok=True)
    counts, rows, failed, skipped = {}, {}, {}, []
    for stage in STAGES:
        if any(need not in rows for need in NEEDS[stage]):
            skipped.append(stage)  # a stage it needs failed: nothing to run on
            continue
        found, model_dir = commands(args, seed, workdir, counts)
        record = run_stage(stage, found[stage], model_dir[stage], workdir, args,
                           children)
        row = stage_row(record)
        if record["returncode"] != 0 or row["top_1"] is None or (
                stage in ("pretrain", "b") and row["train_examples"] is None):
            failed[stage] = record  # later stages that do not need it still run
            continue
        rows[stage] = row
        # The sizes that the later stages' warmup needs: read from the logs.
        if stage == "pretrain":
            counts["num_train"] = row["train_examples"]
        if stage == "b":
            counts["num_labelled"] = row["train_examples"]
    return rows, failed, skipped


def print_failure(seed, record):
    print(f"\nSeed {seed}, stage {record['stage']} FAILED (exit {record['returncode']}): "
          + " ".join(record["command"]), file=sys.stderr)
    try:
        with open(record["log"], encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    # This attempt's lines only (the log keeps every attempt, each headed ===).
    tail = text[text.rfind("\n=== ") + 1:].splitlines()[-40:]
    print("\n".join(tail), file=sys.stderr)


def check_report_path(path):
    """Exits (2) before any stage runs when the report could not be written at
    `path`: its folder missing or not writable, or `path` a folder."""
    folder = os.path.dirname(os.path.abspath(path))
    problem = ("is a folder" if os.path.isdir(path) else
               f"its folder {folder} does not exist" if not os.path.isdir(folder) else
               f"its folder {folder} is not writable" if not os.access(folder, os.W_OK)
               else None)
    if problem:
        print(f"--json={path}: the report cannot be written there ({problem}). Create "
              "the folder, or pass another --json (default: <workdir>/semi_supervised.json); "
              "nothing has run.", file=sys.stderr)
        sys.exit(2)


def write_report(report, path, workdir):
    """Writes the report to `path`; should that fail after all (a full disk, the folder
    gone), to `workdir` instead, saying so: hours of stages are never lost to it."""
    for target in (path, os.path.join(workdir, "semi_supervised.json")):
        try:
            return script_io.write_text(target, json.dumps(report, indent=2))
        except script_io.WriteFailed as error:
            print(f"Could not write the report: {error}", file=sys.stderr)
    return None


def main(argv=None):
    args = parse_args(argv)
    workdir = os.path.abspath(args.workdir)
    if args.json:
        check_report_path(args.json)
    prepare_workdir(workdir, args.resume)
    began = time.monotonic()
    per_seed, failed, skipped = {}, {}, {}
    try:
        with script_io.Children() as children:
            for seed in args.seeds:
                print(f"=== seed {seed} ===", flush=True)
                rows, seed_failed, seed_skipped = run_seed(
                    args, seed, os.path.join(workdir, f"seed_{seed}"), children)
                per_seed[seed] = rows
                if seed_failed:
                    failed[seed] = seed_failed
                if seed_skipped:
                    skipped[seed] = seed_skipped
    except script_io.Stopped as stop:
        print(f"semi_supervised.py: {stop}: the running stage's run.py saved its checkpoint "
              "and exited; the same command with --resume continues (finished stages are "
              "reused, the stopped one resumes).", file=sys.stderr)
        return 128 + stop.signum
    total = round(time.monotonic() - began, 1)
    summary = summarise(per_seed, args.seeds)
    checked = claims(summary, args.seeds, fast=args.fast)
    report = dict(
        workdir=workdir, seeds=list(args.seeds), fast=args.fast,
        student_epochs=args.student_epochs, stages=summary, claims=checked,
        per_seed={str(seed): rows for seed, rows in per_seed.items()},
        failed_stages={str(seed): sorted(records) for seed, records in failed.items()},
        skipped_stages={str(seed): stages for seed, stages in skipped.items()},
        total_seconds=total,
        total_stage_seconds=round(sum(row["wall_seconds"] for rows in per_seed.values()
                                      for row in rows.values()), 1))
    print(f"\nTest top-1 over seeds {','.join(map(str, args.seeds))} (mean ± sample "
          "std)" + (", --fast: the tiny encoder in place of every ResNet-18 below"
                    if args.fast else "") + ":\n"
          + markdown_table(summary, args.seeds, failed, skipped))
    print()
    for name, entry in checked.items():
        print(f"  [{entry['verdict']}] {name}")
    for seed, records in failed.items():
        for record in records.values():
            print_failure(seed, record)
    for seed, stages in skipped.items():
        print(f"\nSeed {seed}, skipped (a stage they need failed): {', '.join(stages)}",
              file=sys.stderr)
    # Written after the table is printed: a failed write loses nothing.
    path = write_report(report, args.json or os.path.join(workdir, "semi_supervised.json"),
                        workdir)
    reused = sum(1 for rows in per_seed.values() for row in rows.values() if row["reused"])
    print(f"\nTotal {total} s ({reused} stage(s) reused); report: "
          f"{path or 'not written (above): the table above is the record'}")
    return 1 if failed or path is None else 0


if __name__ == "__main__":
    sys.exit(main())
