"""scripts/semi_supervised.py runs SimCLR v2's three stages end to end (--fast: a few
steps each, so the accuracies mean nothing), reports the five compared stages, and
guards its --workdir."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "semi_supervised.py")
COMPARED = ("a", "b", "c", "d", "e")


def _run(*args, timeout=1200):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout, check=False)


@pytest.mark.extra_large  # six run.py processes: 215 s on 2 cores beside another job
def test_fast_run_reports_the_five_stages_and_resumes_without_rerunning(tmp_path):
    workdir, report = tmp_path / "work", tmp_path / "report.json"
    done = _run("--fast", f"--workdir={workdir}", f"--json={report}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    saved = json.loads(report.read_text())
    assert saved["failed_stages"] == [] and saved["skipped_stages"] == []
    stages = saved["stages"]
    assert set(COMPARED) <= set(stages)
    for stage in COMPARED:
        assert 0.0 <= stages[stage]["top_1"] <= 1.0, stage
        assert stages[stage]["wall_seconds"] > 0 and not stages[stage]["reused"]
        result = json.loads((workdir / os.path.basename(stages[stage]["model_dir"])
                             / "result.json").read_text())
        assert stages[stage]["top_1"] == result["eval/label_top_1_accuracy"]
    for stage in ("c", "d"):  # the distilled students measure their agreement
        assert 0.0 <= stages[stage]["teacher_agreement"] <= 1.0, stage
    # The same steps everywhere but the teacher's; the students see every image.
    assert stages["a"]["steps"] == stages["c"]["steps"] == stages["d"]["steps"] \
        == stages["e"]["steps"]
    assert stages["c"]["train_examples"] == stages["d"]["train_examples"] \
        == stages["pretrain"]["train_examples"] > stages["a"]["train_examples"] \
        == stages["b"]["train_examples"] == stages["e"]["train_examples"]
    assert "| (c) |" in done.stdout and "(c) >= (b)" in done.stdout
    assert set(saved["claims"].values()) <= {True, False}
    # A rerun with --resume reuses every finished stage (no run.py starts).
    again = _run("--fast", f"--workdir={workdir}", f"--json={report}", "--resume",
                 timeout=120)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    resumed = json.loads(report.read_text())["stages"]
    assert all(resumed[stage]["reused"] for stage in resumed)
    assert {s: resumed[s]["top_1"] for s in COMPARED} == {s: stages[s]["top_1"]
                                                         for s in COMPARED}


def test_a_non_empty_workdir_is_refused_without_resume(tmp_path):
    (tmp_path / "old.log").write_text("an earlier run")
    done = _run(f"--workdir={tmp_path}", timeout=60)
    assert done.returncode == 2
    assert "is not empty" in done.stderr and "--resume" in done.stderr
    assert os.listdir(tmp_path) == ["old.log"]
