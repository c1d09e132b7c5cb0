"""Step times side by side: `python scripts/benchmark.py versus` (the authors' code
against ours, or one lever against the current step).

Each arm is a configuration of the train step; every arm runs in a fresh process of
its own (an environment variable read at start-up is a lever too), one after the
other, for --rounds rounds, the order reversed every other round so that a drift of
the machine falls on both sides. An arm's time is the median of its windows (after
the warm-up); its ratio is the reference arm's time over its own *in the same round*
(> 1: faster than the reference), and the table gives each round's ratio and their
mean. Our arms also measure their process's matmul peak (float32 and bfloat16) and
report the MFU; the authors' arm gets the MFU its step time gives on our FLOPs count
and our arms' peak in the same round.

An arm is NAME:SPEC. SPEC is `authors` (dev/authors_baseline.py in the authors'
environment) or whitespace-separated tokens, each a flag of `benchmark.py train`
(`--mixed_precision=bfloat16`) or an environment variable (`TF_NUM_INTEROP_THREADS=1`;
`-NAME` removes one). A result of no finite time, or an arm that fails, is an error
naming the arm, the command and the end of its output: never a ratio. A stop
(SIGTERM, SIGINT, SIGHUP as SIGTERM) reaches the running arm's process and ends the comparison
(`script_io.Children`).
"""
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
AUTHORS_SCRIPT = os.path.join(ROOT, "dev", "authors_baseline.py")
DEFAULT_ARMS = ("authors:authors", "ours:", "ours_bf16:--mixed_precision=bfloat16")
# Model flags of ours that the authors' baseline takes under the same name.
AUTHORS_FLAGS = ("resnet_depth", "width_multiplier", "sk_ratio", "se_ratio", "image_size",
                 "train_batch_size", "use_blur", "num_proj_layers", "proj_out_dim",
                 "proj_head_mode", "global_bn", "temperature", "optimizer",
                 "lineareval_while_pretraining")
_ENV = re.compile(r"^-?[A-Z][A-Z0-9_]*(=.*)?$")


class ArmFailed(RuntimeError):
    pass


def parse_arms(specs, authors_dir=None, authors_python=None):
    """[dict(name, authors, flags, env, unset)] from NAME:SPEC strings; ValueError
    naming the bad one."""
    arms, names = [], set()
    for spec in specs:
        if ":" not in spec:
            raise ValueError(f"--arm={spec!r}: write NAME:SPEC, e.g. 'bf16:"
                             "--mixed_precision=bfloat16' (SPEC may be empty: 'ours:')")
        name, body = spec.split(":", 1)
        if not re.match(r"^[\w.+-]+$", name) or name in names:
            raise ValueError(f"--arm={spec!r}: the name {name!r} is "
                             f"{'taken' if name in names else 'not a word'}; give each "
                             "arm its own name of letters, digits, _ . + -")
        names.add(name)
        arm = dict(name=name, authors=False, flags=[], env={}, unset=[])
        tokens = shlex.split(body)
        if tokens == ["authors"]:
            if not authors_dir or not os.path.exists(os.path.join(authors_dir,
                                                                  "objective.py")):
                raise ValueError(
                    f"--arm={spec!r}: --authors_dir={authors_dir!r} is not the tf2/ "
                    "folder of a google-research/simclr checkout (no objective.py "
                    "there); see dev/authors_baseline.py")
            if not authors_python or not os.access(authors_python, os.X_OK):
                raise ValueError(
                    f"--arm={spec!r}: --authors_python={authors_python!r} is not an "
                    "executable; make the authors' environment: python -m venv "
                    "--system-site-packages /tmp/authors-venv && /tmp/authors-venv/bin/"
                    "pip install tf_keras==2.21.0")
            arm.update(authors=True, python=authors_python, authors_dir=authors_dir)
        else:
            for token in tokens:
                if token.startswith("--"):
                    arm["flags"].append(token)
                elif _ENV.match(token) and token.startswith("-"):
                    arm["unset"].append(token[1:])
                elif _ENV.match(token) and "=" in token:
                    key, value = token.split("=", 1)
                    arm["env"][key] = value
                else:
                    raise ValueError(
                        f"--arm={spec!r}: {token!r} is neither a flag (--name=value) "
                        "nor an environment variable (NAME=value, -NAME to remove)")
        arms.append(arm)
    if not arms:
        raise ValueError("give at least one --arm")
    return arms


# `benchmark.py train`'s switches (store_true): given bare, never with a value.
SWITCHES = ("skip_update",)


def _flag(name, value):
    if name in SWITCHES:
        return f"--{name}"
    if isinstance(value, bool):
        return f"--{name}={'true' if value else 'false'}"
    return f"--{name}={value}"


def arm_command(arm, overrides, timing, json_path):
    """The command line of one run of `arm` on the model `overrides`."""
    if arm["authors"]:
        command = [arm["python"], AUTHORS_SCRIPT, f"--authors_dir={arm['authors_dir']}",
                   f"--warmup={timing['warmup']}", f"--windows={timing['windows']}",
                   f"--steps={timing['steps']}", f"--json={json_path}"]
        for name, value in overrides.items():
            if name in AUTHORS_FLAGS:
                command.append(_flag(name, value))
            elif name == "data":
                raise ArmFailed(f"the authors' baseline times a synthetic batch: "
                                f"--data={value} cannot reach it; leave it out of a "
                                "comparison with their code")
            elif name != "mixed_precision" or value not in (None, "none"):
                raise ArmFailed(f"the authors' baseline has no --{name}: leave it out "
                                "of the model flags of a comparison with their code")
        return command
    command = [sys.executable, os.path.join(HERE, "benchmark.py"), "train",
               f"--warmup={timing['warmup']}", f"--windows={timing['windows']}",
               f"--steps={timing['steps']}", f"--matmul_size={timing['matmul_size']}",
               f"--matmul_seconds={timing['matmul_seconds']}", f"--json={json_path}"]
    command += [_flag(name, value) for name, value in overrides.items()]
    return command + arm["flags"]  # the arm's flags win (argparse: last one)


def run_arm(arm, overrides, timing, children):
    """One fresh process of `arm`, one of `children` (`script_io.Children`: it stops
    with the script, which then raises `script_io.Stopped`): dict(step_seconds,
    window_seconds, mfu, ...)."""
    env = dict(os.environ)
    env.update(arm["env"])
    for name in arm["unset"]:
        env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="simclr_versus_") as tmp:
        json_path = os.path.join(tmp, "result.json")
        command = arm_command(arm, overrides, timing, json_path)
        with open(os.path.join(tmp, "log.txt"), "w+") as log:
            code = children.run(command, env=env, cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT)
            log.seek(0)
            tail = "\n".join(log.read().strip().splitlines()[-15:])
        shown = " ".join(shlex.quote(c) for c in command)
        if code != 0 or not os.path.exists(json_path):
            raise ArmFailed(f"arm {arm['name']}: exit status {code}, no "
                            f"result\ncommand: {shown}\n{tail}")
        with open(json_path) as f:
            result = json.load(f)
    if not arm["authors"]:
        row = result["train"][0]
        result = dict(step_seconds=row["step_seconds"],
                      window_seconds=row["window_seconds"], mfu=row["mfu"],
                      compute_dtype=row["compute_dtype"],
                      train_gflops_per_view=row["train_gflops_per_view"],
                      views_per_step=row["views_per_sec"] * row["step_seconds"],
                      matmul_peak=result["matmul_peak_gflops_per_sec"],
                      minor_page_faults_per_step=row.get("minor_page_faults_per_step"),
                      load_average_after=row["load_average_after"])
    step = result.get("step_seconds")
    if not isinstance(step, (int, float)) or not math.isfinite(step) or step <= 0:
        raise ArmFailed(f"arm {arm['name']}: step time {step!r} is not a positive "
                        f"finite number\ncommand: {shown}\n{tail}")
    return result


def ratios(rounds, reference):
    """Per arm: the reference's step time over the arm's, one per round."""
    out = {}
    for name in rounds[0]:
        out[name] = [r[reference]["step_seconds"] / r[name]["step_seconds"]
                     for r in rounds]
    return out


def fill_authors_mfu(rounds, arms):
    """The authors' arms' MFU from our FLOPs count and our float32 arms' peak in the
    same round (their step does the same FLOPs)."""
    ours = [a["name"] for a in arms if not a["authors"]]
    for results in rounds:
        donor = next((results[n] for n in ours
                      if results[n].get("compute_dtype") == "float32"), None)
        for arm in arms:
            if arm["authors"] and donor is not None:
                result = results[arm["name"]]
                achieved = (donor["train_gflops_per_view"] * donor["views_per_step"]
                            / result["step_seconds"])
                result["mfu"] = achieved / donor["matmul_peak"]["float32"]


def table(arms, rounds, cpu_kind):
    reference = arms[0]["name"]
    by_arm = ratios(rounds, reference)
    lines = [f"CPU: {cpu_kind}; ratio = the step time of {reference} / the arm's, per "
             "round (> 1: faster)", "",
             "| arm | s/step per round | ratio per round | mean ratio | MFU (own dtype) |",
             "|---|---|---|---|---|"]
    for arm in arms:
        name = arm["name"]
        steps = ", ".join(f"{r[name]['step_seconds']:.3f}" for r in rounds)
        each = ", ".join(f"{x:.3f}" for x in by_arm[name])
        mfus = [r[name].get("mfu") for r in rounds if r[name].get("mfu") is not None]
        mfu = f"{statistics.median(mfus):.2f}" if mfus else ""
        lines.append(f"| {name} | {steps} | {each} | "
                     f"{statistics.mean(by_arm[name]):.3f} | {mfu} |")
    return "\n".join(lines)


def run(arms, overrides, *, rounds, timing, children, out=print):
    """`rounds` rounds over `arms` (`run_arm`, each a child of `children`); prints
    each time and the table, returns them."""
    from simclr_tf.run import machine  # pylint: disable=import-outside-toplevel
    results = []
    for index in range(rounds):
        order = arms if index % 2 == 0 else list(reversed(arms))
        results.append({})
        for arm in order:
            result = run_arm(arm, overrides, timing, children)
            results[-1][arm["name"]] = result
            out(f"round {index + 1}, {arm['name']}: {result['step_seconds']:.3f} s/step "
                f"(windows {[round(s, 3) for s in result['window_seconds']]})",
                flush=True)
    fill_authors_mfu(results, arms)
    cpu_kind = machine.cpu_kind()
    text = table(arms, results, cpu_kind)
    out("\n" + text)
    return dict(arms=arms, rounds=results, ratios=ratios(results, arms[0]["name"]),
                table=text, cpu_kind=cpu_kind)
