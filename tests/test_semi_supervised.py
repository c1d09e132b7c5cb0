"""scripts/semi_supervised.py runs SimCLR v2's three stages end to end per seed
(--fast: a few steps each, so the accuracies mean nothing), reports the five compared
stages as mean ± std over seeds, gives a verdict on a claim only where the spreads
separate (never with --fast), and guards its --workdir."""
import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import cli_flags
from helpers.scripts import load_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "semi_supervised.py")
RUN_PY = os.path.join(REPO, "run.py")
COMPARED = ("a", "b", "c", "d", "e")


@pytest.fixture(scope="module")
def semi():
    return load_script("semi_supervised")


def _run(*args, timeout=1200):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout, check=False)


def test_a_verdict_only_where_the_spreads_separate(semi):
    # x 0.90 ± 0.01, y 0.85 ± 0.01: 0.05 apart > 0.02 of spreads.
    assert semi.verdict([0.89, 0.90, 0.91], [0.84, 0.85, 0.86]) == "holds"
    assert semi.verdict([0.84, 0.85, 0.86], [0.89, 0.90, 0.91]) == "does not hold"
    # 0.015 apart, spreads 0.01 + 0.01: overlap, whichever mean is higher.
    assert semi.verdict([0.89, 0.90, 0.91], [0.875, 0.885, 0.895]) \
        == "undecided at 3 seeds (spreads overlap)"
    assert semi.verdict([0.875, 0.885, 0.895], [0.89, 0.90, 0.91]) \
        == "undecided at 3 seeds (spreads overlap)"
    # Exactly the sum of the spreads apart: not separated.
    assert semi.verdict([0.5, 0.75, 1.0], [0.0, 0.25, 0.5]).startswith("undecided at 3")
    # A paired gain in every seed does not decide it either when the spreads overlap.
    assert semi.verdict([0.81, 0.86, 0.91], [0.80, 0.85, 0.90]).startswith("undecided")
    # Equal values in every seed: no spread, but a difference.
    assert semi.verdict([0.9, 0.9], [0.8, 0.8]) == "holds"
    assert semi.verdict([0.9, 0.9], [0.9, 0.9]).startswith("undecided")
    # One seed has no spread: never a verdict.
    assert semi.verdict([0.99], [0.10]) == "undecided at 1 seed (no spread)"
    # --fast: at chance level, no verdict however far apart.
    assert semi.verdict([0.99, 0.99, 0.99], [0.1, 0.1, 0.1], fast=True) \
        == "--fast: numbers at chance level, no verdict"
    assert semi.verdict([], [0.1, 0.2]) == "unknown (a stage failed)"


def test_mean_and_sample_std(semi):
    mean, std = semi.mean_std([0.8, 0.9, 1.0])
    assert mean == pytest.approx(0.9) and std == pytest.approx(0.1)  # n - 1
    assert semi.mean_std([0.7]) == (0.7, None)


def _row(top_1, agreement=None):
    return dict(description="x", steps=10, train_examples=144, top_1=top_1,
                teacher_agreement=agreement, teacher_top_1=None, wall_seconds=5.0)


def test_summary_and_claims_over_seeds(semi):
    per_seed = {
        0: dict(a=_row(0.90), b=_row(0.80), c=_row(0.81, 0.9), d=_row(0.70, 0.8),
                e=_row(0.72)),
        1: dict(a=_row(0.92), b=_row(0.82), c=_row(0.83, 0.9), d=_row(0.72, 0.8),
                e=_row(0.70)),
        2: dict(a=_row(0.91), b=_row(0.81), c=_row(0.82, 0.9), d=_row(0.71, 0.8)),
    }  # (e) failed in seed 2
    summary = semi.summarise(per_seed, (0, 1, 2))
    assert summary["a"]["top_1"]["mean"] == pytest.approx(0.91)
    assert summary["a"]["top_1"]["std"] == pytest.approx(0.01)
    assert summary["a"]["top_1"]["per_seed"] == {"0": 0.90, "1": 0.92, "2": 0.91}
    assert summary["c"]["teacher_agreement"]["mean"] == pytest.approx(0.9)
    assert summary["e"]["seeds"] == 2
    verdicts = {name[:10]: entry["verdict"]
                for name, entry in semi.claims(summary, (0, 1, 2)).items()}
    assert verdicts == {"(c) >= (b)": "undecided at 3 seeds (spreads overlap)",
                        "(d) > (e):": "unknown (a stage failed)",
                        "(b) > (a):": "does not hold"}
    assert all(entry["verdict"] == semi.NO_VERDICT_FAST
               for entry in semi.claims(summary, (0, 1, 2), fast=True).values())
    table = semi.markdown_table(summary, (0, 1, 2), skipped={2: ["e"]})
    assert "| seeds 0, 1, 2 |" in table
    assert "| (a) |" in table and "0.910 ± 0.010" in table
    assert "0.9000, 0.9200, 0.9100" in table
    assert "0.7200, 0.7000, -; skipped in seed 2" in table


def test_seeds_are_a_comma_separated_list(semi):
    assert semi.parse_args([]).seeds == (0, 1, 2)
    assert semi.parse_args(["--seeds=4"]).seeds == (4,)
    # --fast checks the path: one seed unless asked (3 took 5 min on a Xeon: VI, item 7).
    assert semi.parse_args(["--fast"]).seeds == (0,)
    assert semi.parse_args(["--fast", "--seeds=1,2"]).seeds == (1, 2)
    for bad in ("0,x", "1,1"):
        with pytest.raises(argparse.ArgumentTypeError):
            semi.seed_list(bad)


def test_a_student_budget_that_fast_would_drop_is_refused(semi, capsys):
    """`--fast --student_epochs=5` trained the students 12 steps, as --fast does."""
    with pytest.raises(SystemExit) as info:
        semi.parse_args(["--fast", "--student_epochs=5"])
    assert info.value.code == 2
    assert "--student_epochs would do nothing with --fast" in capsys.readouterr().err
    assert semi.parse_args(["--student_epochs=5"]).student_epochs == 5


def _stages_in_process(semi, monkeypatch, processes):
    """The script's one launch of a stage (`run_stage`'s `children.run`) runs the
    command the script built in this process instead: run.py's main on its own
    FlagValues (`cli_flags.run_main`), what it prints (stdout and stderr, in order)
    written into the stage's log, as the process's would be, and its exit status
    returned. The stages in `processes` still start run.py. Returns the [(stage,
    command)] launched, in order."""
    launched, stage_of = [], {name: stage for stage, name in semi.DIRECTORIES.items()}
    start_process = semi.script_io.Children.run

    def run(children, command, *, stdout, stderr, cwd, env, timeout):
        model_dir = next(arg.split("=", 1)[1] for arg in command
                         if arg.startswith("--model_dir="))
        stage = stage_of[os.path.basename(model_dir)]
        launched.append((stage, command))
        if stage in processes:
            return start_process(children, command, stdout=stdout, stderr=stderr,
                                 cwd=cwd, env=env, timeout=timeout)
        assert command[:2] == [sys.executable, RUN_PY], command
        assert stderr == subprocess.STDOUT and cwd == REPO
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            status = cli_flags.run_main(monkeypatch, command[2:])
        stdout.write(printed.getvalue().encode())
        return status

    monkeypatch.setattr(semi.script_io.Children, "run", run)
    return launched


# One seed of six stages (the mean and spread over seeds are
# test_summary_and_claims_over_seeds'), none of which exports (--fast). The script's
# main runs in this process; its pretraining starts run.py (the real launch, 16-22 s),
# the five stages after it run run.py's main here (2-7 s each, the first paying the
# imports: _stages_in_process), the --resume rerun is the script's own process. 38-56 s
# alone, beside a niced training run (load 2-4), on a 2-core EPYC with AVX-512: 83-96 s
# with the script and its six stages as processes (14-18 s each).
@pytest.mark.extra_large
def test_fast_run_reports_the_five_stages_and_resumes_without_rerunning(semi, tmp_path,
                                                                         monkeypatch,
                                                                         capsys):
    workdir, report = tmp_path / "work", tmp_path / "report.json"
    launched = _stages_in_process(semi, monkeypatch, processes=("pretrain",))
    status = semi.main(["--fast", "--seeds=1", f"--workdir={workdir}", f"--json={report}"])
    printed = capsys.readouterr()
    assert status == 0, printed.out[-4000:] + printed.err[-4000:]
    saved = json.loads(report.read_text())
    assert saved["seeds"] == [1]
    assert saved["failed_stages"] == {} and saved["skipped_stages"] == {}
    stages = saved["stages"]
    assert set(COMPARED) <= set(stages)
    # Each stage launched once, in order, with the command its record names.
    assert [stage for stage, _ in launched] == list(semi.STAGES)
    for stage, command in launched:
        row = saved["per_seed"]["1"][stage]
        assert row["command"] == command, stage
        assert f"--model_dir={row['model_dir']}" in command, stage
    for stage in COMPARED:
        top_1 = stages[stage]["top_1"]
        assert set(top_1["per_seed"]) == {"1"} and top_1["mean"] == top_1["per_seed"]["1"]
        for seed, value in top_1["per_seed"].items():
            row = saved["per_seed"][seed][stage]
            assert 0.0 <= value == row["top_1"] <= 1.0, stage
            assert row["wall_seconds"] > 0 and not row["reused"]
            assert os.path.dirname(row["model_dir"]) == str(workdir / f"seed_{seed}")
            result = json.loads(open(os.path.join(row["model_dir"], "result.json")).read())
            assert value == result["eval/label_top_1_accuracy"]
            assert f"--seed={seed}" in row["command"]
            # --fast exports nothing: the stages read each other's checkpoints.
            assert not os.path.exists(os.path.join(row["model_dir"], "saved_model"))
    for stage in ("c", "d"):  # the distilled students measure their agreement
        assert 0.0 <= stages[stage]["teacher_agreement"]["mean"] <= 1.0, stage
    # (b) and (c) start from the pretraining's last checkpoint, the others from random
    # weights; (c) and (d) are taught by (b)'s last checkpoint.
    rows = saved["per_seed"]["1"]

    def last_checkpoint(stage):
        return os.path.join(rows[stage]["model_dir"], f"ckpt-{rows[stage]['steps']}")

    assert {stage: row["initialized_from"] for stage, row in rows.items()} == dict(
        pretrain="random", a="random", b=last_checkpoint("pretrain"),
        c=last_checkpoint("pretrain"), d="random", e="random")
    for stage in ("c", "d"):
        result = json.loads(open(os.path.join(rows[stage]["model_dir"],
                                              "result.json")).read())
        teacher = result["protocol/distill/teacher_top_1_accuracy"]["checkpoint"]["path"]
        assert os.path.normpath(os.path.join(rows[stage]["model_dir"], teacher)) \
            == last_checkpoint("b"), stage
    # The same steps everywhere but the teacher's; the students see every image.
    assert stages["a"]["steps"] == stages["c"]["steps"] == stages["d"]["steps"] \
        == stages["e"]["steps"]
    assert stages["c"]["train_examples"] == stages["d"]["train_examples"] \
        == stages["pretrain"]["train_examples"] > stages["a"]["train_examples"] \
        == stages["b"]["train_examples"] == stages["e"]["train_examples"]
    assert "| (c) |" in printed.out and "(c) >= (b)" in printed.out
    # Chance-level numbers: no verdict, whatever they are.
    assert {entry["verdict"] for entry in saved["claims"].values()} \
        == {"--fast: numbers at chance level, no verdict"}
    assert "holds" not in printed.out
    # A rerun with --resume, the script's own process, reuses every finished stage:
    # no run.py starts (each start writes a line to the stage's log first).
    seed_dir = workdir / "seed_1"
    written = {name: (seed_dir / name).read_bytes() for name in os.listdir(seed_dir)
               if name.endswith((".log", ".json"))}
    assert len(written) == 2 * len(semi.STAGES)  # a log and a record per stage
    again = _run("--fast", "--seeds=1", f"--workdir={workdir}", f"--json={report}",
                 "--resume", timeout=120)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert {name: (seed_dir / name).read_bytes() for name in written} == written
    resumed = json.loads(report.read_text())
    assert all(row["reused"] for rows in resumed["per_seed"].values()
               for row in rows.values())
    assert {s: resumed["stages"][s]["top_1"] for s in COMPARED} \
        == {s: stages[s]["top_1"] for s in COMPARED}


def test_a_failed_stage_is_reported_with_its_log_and_the_stages_needing_it_skipped(
        semi, tmp_path, monkeypatch, capsys):
    """A stage whose run.py fails, here the pretraining (a real run.py process, refused
    at its flags before TensorFlow is imported): the stages that need it are skipped,
    the stage is reported FAILED with its command and the end of its log, and the
    script exits 1 with the report written."""
    flagfile = tmp_path / "quickstart_broken.flags"
    with open(semi.PRETRAIN_FLAGS, encoding="utf-8") as f:
        flagfile.write_text(f.read() + "--train_batch_size=0\n")
    monkeypatch.setattr(semi, "PRETRAIN_FLAGS", str(flagfile))
    workdir, report = tmp_path / "work", tmp_path / "report.json"
    status = semi.main(["--fast", "--seeds=3", f"--workdir={workdir}", f"--json={report}"])
    printed = capsys.readouterr()
    assert status == 1, printed.out[-3000:] + printed.err[-3000:]
    saved = json.loads(report.read_text())
    assert saved["failed_stages"] == {"3": ["pretrain"]}
    assert saved["skipped_stages"] == {"3": ["b", "a", "c", "d", "e"]}
    assert saved["stages"] == {} and saved["per_seed"] == {"3": {}}
    record = json.loads((workdir / "seed_3" / "pretrain.json").read_text())
    assert record["returncode"] == 2 and not record["reused"]
    assert record["command"][:3] == [sys.executable, RUN_PY, f"--flagfile={flagfile}"]
    error = "run.py: error: --train_batch_size: must be a finite number > 0"
    log = (workdir / "seed_3" / "pretrain.log").read_text()
    assert log.startswith("=== ") and error in log  # the process's stderr
    assert f"Seed 3, stage pretrain FAILED (exit 2): {' '.join(record['command'])}" \
        in printed.err
    assert error in printed.err.split("FAILED (exit 2)", 1)[1]  # the log's end
    assert "Seed 3, skipped (a stage they need failed): b, a, c, d, e" in printed.err
    assert "| pretrain |" in printed.out and "FAILED in seed 3 (exit 2)" in printed.out
    assert sorted(os.listdir(workdir / "seed_3")) == ["pretrain.json", "pretrain.log"]


def _processes_naming(text):
    """The pids of the processes whose command line holds `text` (this machine's)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:  # ended meanwhile
            pass
    return found


@pytest.mark.large  # 21-27 s: the script and its pretraining's run.py to its first step
def test_a_stop_reaches_the_running_stage_which_saves_and_the_script_exits_143(tmp_path):
    """SIGTERM to the script is forwarded to the running stage's run.py (started in its
    own process group: scripts/script_io.Children), which saves a checkpoint and
    exits; the script waits for it and exits 143 with one line. The stage has no
    record, so --resume runs it again and run.py resumes from that checkpoint. No
    process of the run is left (a stop used to orphan the stage's run.py, which kept
    training)."""
    workdir = tmp_path / "work"
    script = subprocess.Popen([sys.executable, SCRIPT, "--fast", "--seeds=0",
                               f"--workdir={workdir}", f"--json={tmp_path / 'report.json'}"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    log = workdir / "seed_0" / "pretrain.log"
    deadline = time.time() + 300
    while "\nstep 1/" not in (log.read_text() if log.exists() else ""):
        assert script.poll() is None and time.time() < deadline, script.communicate()
        time.sleep(0.2)
    script.send_signal(signal.SIGTERM)
    out, err = script.communicate(timeout=300)
    assert script.returncode == 143, out[-2000:] + err[-2000:]
    assert err.strip().splitlines()[-1].startswith(
        "semi_supervised.py: stopped by SIGTERM: the running stage's run.py saved its "
        "checkpoint and exited; the same command with --resume continues"), err[-2000:]
    assert "SIGTERM received: saved a checkpoint at step" in log.read_text()
    assert [name for name in os.listdir(workdir / "seed_0" / "pretrain")
            if name.startswith("ckpt-") and name.endswith(".index")]
    assert sorted(os.listdir(workdir / "seed_0")) == ["pretrain", "pretrain.log"]
    assert _processes_naming(str(workdir)) == []


def test_a_non_empty_workdir_is_refused_without_resume(tmp_path):
    (tmp_path / "old.log").write_text("an earlier run")
    done = _run(f"--workdir={tmp_path}", timeout=60)
    assert done.returncode == 2
    assert "is not empty" in done.stderr and "--resume" in done.stderr
    assert os.listdir(tmp_path) == ["old.log"]


@pytest.mark.parametrize("where", ["missing_folder", "a_folder"])
def test_a_report_path_that_cannot_be_written_is_refused_before_any_stage(semi, tmp_path,
                                                                          capsys, where,
                                                                          monkeypatch):
    """--json in a folder that does not exist (or naming a folder): exit 2 before any
    stage runs, the workdir untouched."""
    json_path = tmp_path / "no_such" / "x.json" if where == "missing_folder" else tmp_path
    monkeypatch.setattr(semi, "run_stage", lambda *a, **k: pytest.fail("a stage ran"))
    with pytest.raises(SystemExit) as info:
        semi.main([f"--workdir={tmp_path / 'work'}", f"--json={json_path}", "--fast"])
    assert info.value.code == 2
    error = capsys.readouterr().err
    assert f"--json={json_path}: the report cannot be written there" in error
    assert "nothing has run" in error and not (tmp_path / "work").exists()


def test_a_report_that_fails_to_write_at_the_end_goes_to_the_workdir(semi, tmp_path,
                                                                     capsys):
    report = dict(stages={}, seeds=[0])
    workdir = tmp_path / "work"
    workdir.mkdir()
    taken = tmp_path / "x.json"  # a folder took its name during the stages
    taken.mkdir()
    assert semi.write_report(report, str(taken), str(workdir)) == str(
        workdir / "semi_supervised.json")
    assert json.loads((workdir / "semi_supervised.json").read_text()) == report
    assert f"Could not write the report: {taken} could not be written" \
        in capsys.readouterr().err
    assert os.listdir(taken) == [] and os.listdir(workdir) == ["semi_supervised.json"]


def test_every_option_reaches_the_stages(semi, tmp_path):
    """--seeds, --student_epochs and --stage_timeout reach every stage's command and
    its launch (a recorder in place of the process: a planted drop of any fails)."""
    args = semi.parse_args(["--seeds=7", "--student_epochs=5", "--stage_timeout=123",
                            f"--workdir={tmp_path}"])
    found, model_dir = semi.commands(args, 7, str(tmp_path), dict(num_train=1000,
                                                                   num_labelled=100))
    assert sorted(found) == ["a", "b", "c", "d", "e", "pretrain"]
    steps = int(1000 * 5 // semi.BATCH_SIZE + 1)
    for stage, command in found.items():
        assert "--seed=7" in command, stage
        if stage in ("a", "c", "d", "e"):
            assert f"--train_steps={steps}" in command, stage

    class Recorder:  # script_io.Children's run
        def run(self, command, **kw):
            self.kw = kw
            return 1
    children = Recorder()
    semi.run_stage("a", found["a"], model_dir["a"], str(tmp_path), args, children)
    assert children.kw["timeout"] == 123
