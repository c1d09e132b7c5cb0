"""scripts/ablations.py (issue 47): the studies' points, their records and the page."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ablations  # noqa: E402  pylint: disable=wrong-import-position


CPU = ablations.bench.BUDGETS["cpu"]


def _row(study, setting, seed, probe, knn=0.5, contrast_acc=0.3, layers=("h",),
         budget=CPU):
    """A whole record of (setting, seed) as the runner writes it under `budget`."""
    metrics = {layer: dict(knn=knn, probe=probe - 0.01 * i, probe_c=1.0, rankme=10.0)
               for i, layer in enumerate(layers)}
    point = next(p for p in ablations.STUDIES[study] if p.setting == setting)
    return dict(ablations.point_key(point, seed, budget), metrics=metrics,
                contrast_acc=contrast_acc, contrast_loss=5.0, wall_seconds=100.0,
                machine="test CPU")


def test_a_point_overrides_the_budgets_flags_and_keys_on_all_of_them():
    budget = ablations.bench.BUDGETS["cpu"]
    point = ablations.STUDIES["temperature"][4]  # Table 5's tau 10 without normalisation
    assert point.setting == "tau 10, no norm"
    flags = ablations.run_py_flags(budget, point, 1, "/run", None)
    assert flags["temperature"] == 10.0 and flags["hidden_norm"] is False
    assert flags["train_split"] == "train[:10000]" and flags["seed"] == 1
    assert "--nohidden_norm" in ablations.command(flags)
    assert "--nolineareval_while_pretraining" in ablations.command(flags)
    batch = ablations.STUDIES["batch"][-1]  # batch 1024, 20 epochs: one checkpoint
    flags = ablations.run_py_flags(budget, batch, 0, "/run", None)
    assert (flags["train_batch_size"], flags["checkpoint_epochs"]) == (1024, 20)
    keys = {json.dumps(ablations.point_key(p, s, budget), sort_keys=True)
            for study in ("head", "temperature", "batch", "augment", "color", "blur", "loss")
            for p in ablations.STUDIES[study] for s in (0, 1)}
    assert len(keys) == 2 * (3 + 6 + 6 + 10 + 12 + 4 + 3)  # every point and seed apart
    triplet = ablations.run_py_flags(budget, ablations.STUDIES["loss"][2], 0, "/r", None)
    assert "--triplet_margin=0.5" in ablations.command(triplet)
    assert "--train_mode=margin_triplet" in ablations.command(triplet)
    supervised = ablations.run_py_flags(budget, ablations.STUDIES["color"][-1], 0, "/r", None)
    assert supervised["train_mode"] == "finetune" and supervised["dataset"] == (
        "fashion_mnist_tinted") and "lineareval_while_pretraining" not in supervised
    assert supervised["augmentations"] == "crop,flip,color"
    # h_vs_z reads the head study's runs: the same keys, trained once.
    assert [ablations.point_key(p, 0, budget) for p in ablations.STUDIES["h_vs_z"]] == [
        ablations.point_key(p, 0, budget) for p in ablations.STUDIES["head"]]
    smoke = ablations.point_key(point, 1, ablations.SMOKE)
    assert smoke != ablations.point_key(point, 1, budget)


def test_blur_points_train_where_the_papers_kernel_is_wider_than_a_pixel():
    """Table 1's "1 + blur" at 16 px would train what "1" does (a one-pixel kernel):
    the blur study's points train at 20 px, where the kernel is 3 pixels, with and
    without blur, the rest of the budget unchanged."""
    from simclr_tf.augment import blur  # pylint: disable=import-outside-toplevel
    budget = ablations.bench.BUDGETS["cpu"]
    assert blur.blur_kernel_size(budget.image_size) == 1
    points = ablations.STUDIES["blur"]
    assert [p.setting for p in points] == [
        "grey: 1, 20 px", "grey: 1 + blur, 20 px", "tinted: 1, 20 px",
        "tinted: 1 + blur, 20 px"]
    flags = [ablations.run_py_flags(budget, p, 0, "/run", None) for p in points]
    assert [(f["image_size"], f["use_blur"], f["color_jitter_strength"]) for f in flags] \
        == [(20, False, 1.0), (20, True, 1.0)] * 2
    assert blur.blur_kernel_size(flags[1]["image_size"]) == 3
    assert "--use_blur" in ablations.command(flags[1])
    assert {f["train_epochs"] for f in flags} == {budget.epochs}


def test_the_head_scale_is_the_mean_squared_norm_of_z_in_training():
    """--head_scale's number (the sum of gamma^2 of the head's last BN) is what z's
    norm is in training: the batch's mean |z|^2, computed here from z itself."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
    from simclr_tf.models.outputs import Z  # pylint: disable=import-outside-toplevel
    model = SimCLRModel(encoder="tiny", encoder_options=dict(width_multiplier=0.125),
                        num_proj_layers=2, proj_out_dim=16)
    model.build((None, 16, 16, 3))
    rng = np.random.default_rng(0)
    head_layer = model.projection_head.head_layers[-1]
    # A trained head's pre-BN variances dwarf BN's epsilon; a fresh tiny one's do
    # not (about 1e-4 here): its kernel scaled up, so var / (var + eps) ~ 1.
    head_layer.dense.kernel.assign(head_layer.dense.kernel * 100.0)
    last = head_layer.bn.bn
    last.gamma.assign(rng.uniform(0.5, 3.0, size=16).astype("float32"))
    z = model(rng.uniform(size=(64, 16, 16, 3)).astype("float32"), training=True)[Z]
    mean_sq = float(np.mean(np.sum(np.square(np.asarray(z, np.float64)), axis=1)))
    scale = ablations.head_scale(model)
    assert scale == pytest.approx(float(np.sum(last.gamma.numpy().astype(np.float64) ** 2)))
    assert mean_sq == pytest.approx(scale, rel=1e-3)


def test_head_scale_without_runs_says_where_it_looked(tmp_path, capsys):
    workdir = tmp_path / "nothing"
    assert ablations.main(["--study=temperature", "--head_scale", f"--workdir={workdir}",
                           "--doc="]) == 1
    assert f"no finished run of --study=temperature with a projection head under " \
        f"--workdir={workdir}" in capsys.readouterr().err
    assert not workdir.exists()  # a read: nothing made


def test_a_torn_last_line_is_dropped_and_the_page_keeps_its_prose(tmp_path):
    results = tmp_path / "results.jsonl"
    rows = [_row("head", s, seed, p, layers=layers)
            for seed in (0, 1, 2)
            for s, p, layers in (("none", 0.70, ("h",)), ("linear", 0.72, ("h", "z")),
                                 ("nonlinear", 0.75, ("h", "layer_1", "z")))]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"study": "he')
    read = ablations.read_results(str(results))
    assert read == rows
    table = ablations.study_table(read, "head", CPU)
    assert "| nonlinear | 50.0 ± 0.0 | 75.0 ± 0.0 | 10.0 ± 0.0 | 3 |" in table
    layers = ablations.study_table(read, "h_vs_z", CPU)
    assert "| linear | 72.0 ± 0.0 | - | 71.0 ± 0.0 | 3 |" in layers
    assert "| nonlinear | 75.0 ± 0.0 | 74.0 ± 0.0 | 73.0 ± 0.0 | 3 |" in layers
    doc = tmp_path / "ablations.md"
    doc.write_text("# Ablations\n\nprose\n\n<!-- ablations:head:begin -->\nold\n"
                   "<!-- ablations:head:end -->\n\nverdict kept\n\n<!-- ablations:loss:begin"
                   " -->\nmeasured elsewhere\n<!-- ablations:loss:end -->\n")
    ablations.write_doc(read, ["head", "temperature", "loss"], str(doc),
                        str(tmp_path / "images"), CPU)
    text = doc.read_text()
    assert text.startswith("# Ablations\n\nprose\n") and "verdict kept" in text
    assert "old" not in text and table in text and "measured on test CPU" in text
    assert "No point of this study is recorded yet." in text  # temperature: appended
    assert "\nmeasured elsewhere\n" in text  # loss: no record here, its table kept
    pytest.importorskip("matplotlib", reason="needs matplotlib (pip install -e '.[plot]')")
    assert (tmp_path / "images" / "ablations_head.png").stat().st_size > 5_000


@pytest.mark.parametrize("argv, message", [
    (["--study=colour"], "--study: expected one of head, h_vs_z, loss, temperature"),
    (["--study=head", "--seeds=a"], "--seeds: expected comma-separated integers"),
    (["--study=head", "--jobs=0"], "--jobs: expected >= 1"),
    # --smoke's numbers never reach the repository's docs/, however spelled.
    (["--study=head", "--smoke", "--results=docs/ablations_results.jsonl"],
     "--results: docs/ablations_results.jsonl is in the repository's docs/"),
    (["--study=head", "--smoke", "--results=docs/../docs/x.jsonl"], "--results: "),
    (["--study=head", "--smoke", "--doc=docs/ablations.md"],
     "--doc: docs/ablations.md is in the repository's docs/"),
    (["--study=head", "--smoke", "--doc={tmp}/p.md", "--images=docs/images"],
     "--images: docs/images is in the repository's docs/"),
    (["--study=head", "--results={tmp}"], "is a directory; name a file"),
    (["--study=head", "--settings=nonlinear;deep"], "--settings: 'deep' not in --study=head"),
    (["--study=batch", "--settings=batch 64,5 epochs"], "'batch 64,5 epochs' not in"),
    # An option the mode does not read (it was dropped: the page of every seed came
    # out of `--report_only --seeds=0`).
    (["--study=head", "--report_only", "--seeds=0"],
     "--seeds does nothing with --report_only (the page's tables hold every seed"),
    (["--study=head", "--report_only", "--jobs=2"], "--jobs does nothing with --report_only"),
    (["--study=head", "--head_scale", "--doc={tmp}/p.md"],
     "--doc does nothing with --head_scale (it writes no page)"),
    (["--study=head", "--head_scale", "--report_only"],
     "--report_only does nothing with --head_scale"),
])
def test_bad_arguments_are_refused(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # relative paths as a user at the repository's root types them
    with pytest.raises(SystemExit) as info:
        ablations.parse_args([a.format(tmp=tmp_path) for a in argv])
    assert info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.extra_large  # ~30 s alone: a small pretraining through run.py, evaluated
def test_smoke_trains_evaluates_records_and_resumes(tmp_path, capsys):
    # A blur point: it trains at an image size of its own (20 px, not the budget's 16)
    # and is evaluated, and recorded, at it.
    argv = ["--study=blur", "--settings=grey: 1 + blur, 20 px", "--smoke", "--seeds=0",
            f"--workdir={tmp_path}", "--doc="]
    assert ablations.main(argv) == 0
    rows = ablations.read_results(str(tmp_path / "results.jsonl"))
    assert [(r["study"], r["setting"], r["seed"]) for r in rows] == [
        ("blur", "grey: 1 + blur, 20 px", 0)]
    assert rows[0]["budget"]["image_size"] == 20 and rows[0]["setting_flags"]["use_blur"]
    assert rows[0]["eval_dataset"] == "fashion_mnist" and rows[0]["wall_seconds"] > 0
    run_dir = ablations.pretraining_dir(str(tmp_path), ablations.STUDIES["blur"][1], 0,
                                        ablations.SMOKE)
    assert os.path.basename(os.path.dirname(run_dir)).startswith("blur_grey__1___blur")
    flags = json.loads(open(os.path.join(run_dir, "flags.json")).read())
    assert flags["image_size"] == 20 and flags["use_blur"] is True, flags
    assert sorted(rows[0]["metrics"]) == ["h", "layer_1", "z"]  # h and each head layer
    for row in rows:
        assert 0 < row["contrast_acc"] <= 1 and row["contrast_loss"] > 0
        for metrics in row["metrics"].values():
            assert 0 <= metrics["knn"] <= 1 and 0 <= metrics["probe"] <= 1
    capsys.readouterr()
    assert ablations.main(argv) == 0  # every point recorded: nothing trains again
    assert "1 points (1 recorded)" in capsys.readouterr().out
    assert len(ablations.read_results(str(tmp_path / "results.jsonl"))) == 1


def test_head_depth_points_fine_tune_their_pretraining_as_v2_does():
    """SimCLR v2's deeper-head finding: two heads, each fine-tuned from h and from its
    first layer on 1% of the labels; the two points of a head share one pretraining
    (the same pretraining flags), and each stage's command is one run.py accepts."""
    import run  # pylint: disable=import-outside-toplevel
    from helpers import cli_flags  # pylint: disable=import-outside-toplevel
    budget = ablations.bench.BUDGETS["cpu"]
    points = ablations.STUDIES["head_depth"]
    assert [p.setting for p in points] == [
        "2 layers, fine-tuned from h", "2 layers, fine-tuned from layer 1",
        "3 layers, fine-tuned from h", "3 layers, fine-tuned from layer 1"]
    pretraining = [ablations.run_py_flags(budget, p, 0, "/pre", None) for p in points]
    assert pretraining[0] == pretraining[1] != pretraining[2] == pretraining[3]
    assert [f["num_proj_layers"] for f in pretraining] == [2, 2, 3, 3]
    keys = {json.dumps(ablations.point_key(p, s, budget), sort_keys=True)
            for p in points for s in (0, 1)}
    assert len(keys) == 8
    tuned = ablations.finetune_flags(budget, points[3], 2, "/ft", "/pre", None)
    assert tuned["ft_proj_selector"] == 1 and tuned["label_fraction"] == 0.01
    assert (tuned["checkpoint"], tuned["model_dir"], tuned["seed"]) == ("/pre", "/ft", 2)
    assert tuned["eval_split"] == budget.test_split and tuned["train_mode"] == "finetune"
    for flags in (pretraining[3], tuned):
        cfg = run.config_from_flags(cli_flags.flag_values(ablations.command(flags)[2:]))
        assert cfg.seed == flags["seed"]
    assert cfg.ft_proj_selector == 1 and cfg.mode == "train_then_eval"


def test_the_head_depth_table_shows_the_fine_tuned_top_1(tmp_path):
    rows = [dict(_row("head_depth", setting, seed, probe=0.8), finetune_top1=top1)
            for setting, top1 in (("2 layers, fine-tuned from h", 0.6),
                                  ("3 layers, fine-tuned from layer 1", 0.7))
            for seed in range(3)]
    table = ablations.study_table(rows, "head_depth", CPU)
    assert table.splitlines()[0].startswith(
        "| setting | fine-tuned top-1, 1% of the labels (%) | linear probe on h (%) |")
    assert "| 3 layers, fine-tuned from layer 1 | 70.0 ± 0.0 | 80.0 ± 0.0 |" in table


# ---------------------------------------------------------------- planted faults
# Each test below plants a fault the ablations' records and tables exist to catch.


class _FakeFeatures:
    """bench.Features' interface; records which dataset each instance opened."""
    opened = []

    def __init__(self, budget, data_dir, dataset="fashion_mnist"):
        self.budget, self.dataset = budget, dataset
        _FakeFeatures.opened.append((dataset, budget.image_size))


def _runner(tmp_path, monkeypatch, budget=CPU):
    """A Runner whose training is a no-op and whose evaluation records what it was
    given; its rows go to tmp_path/results.jsonl."""
    import argparse  # pylint: disable=import-outside-toplevel
    args = argparse.Namespace(results=str(tmp_path / "results.jsonl"),
                              workdir=str(tmp_path / "work"), data_dir=None, threads=1)
    runner = ablations.Runner(args, budget, children=None)
    seen = []
    monkeypatch.setattr(runner, "_train", lambda run_dir, flags, label: 12.5)
    monkeypatch.setattr(ablations, "contrast_metrics",
                        lambda run_dir: dict(contrast_acc=0.5, contrast_loss=4.0))

    def evaluate(run_dir, seed, dataset, point_budget):
        features = runner._features(dataset, point_budget)  # pylint: disable=protected-access
        seen.append((features.dataset, point_budget.image_size))
        return {"h": dict(knn=0.5, probe=0.6, probe_c=1.0, rankme=3.0)}
    monkeypatch.setattr(runner, "_evaluate", evaluate)
    monkeypatch.setattr(ablations.bench, "Features", _FakeFeatures)
    return runner, seen


def test_a_tinted_point_is_scored_on_the_tinted_images(tmp_path, monkeypatch):
    """Fault 1 of the catalogue: tinted points were scored on grey images. The features
    a point is scored on are its own dataset's, at its own image size, and its row
    says which."""
    runner, seen = _runner(tmp_path, monkeypatch)
    _FakeFeatures.opened.clear()
    tinted = next(p for p in ablations.STUDIES["blur"] if p.setting == "tinted: 1, 20 px")
    grey = next(p for p in ablations.STUDIES["augment"] if p.setting == "grey: crop")
    for point, seed in ((tinted, 0), (grey, 0), (tinted, 1)):
        runner.run(point, seed)
    assert seen == [("fashion_mnist_tinted", 20), ("fashion_mnist", 16),
                    ("fashion_mnist_tinted", 20)]
    assert _FakeFeatures.opened == [("fashion_mnist_tinted", 20), ("fashion_mnist", 16)]
    rows = ablations.read_results(runner.args.results)
    assert [r["eval_dataset"] for r in rows] == [
        "fashion_mnist_tinted", "fashion_mnist", "fashion_mnist_tinted"]
    assert rows[0]["budget"]["image_size"] == 20 and rows[0]["wall_seconds"] == 12.5
    # A tinted row scored on grey (as the committed rows before 2026-12-05 were) is not
    # the point's record: it is run again, and the table leaves it out, saying why.
    planted = dict(rows[2], eval_dataset="fashion_mnist")
    assert ablations.stale_reason(planted, CPU) == (
        "scored on fashion_mnist, not on the fashion_mnist_tinted it trained on")
    assert not ablations._recorded(  # pylint: disable=protected-access
        [planted], ablations.point_key(tinted, 1, CPU))
    used, left_out = ablations.table_rows(rows[:2] + [planted], "blur", CPU)
    assert len(used) == 1 and left_out == {
        "scored on fashion_mnist, not on the fashion_mnist_tinted it trained on": 1}
    assert "| tinted: 1, 20 px | 50.0 ± 0.0 | 60.0 ± 0.0 | 3.0 ± 0.0 | 1 |" in \
        ablations.study_table(rows[:2] + [planted], "blur", CPU)


def test_a_table_uses_only_rows_of_the_current_key(tmp_path):
    """Faults 3-4: a smoke row beside a real one of the same seed, a row of an older
    setting, one recorded twice: the table uses each (point, seed)'s current row once,
    and says how many it left out and why; the page says it too."""
    real = [_row("head", "none", seed, 0.70) for seed in (0, 1, 2)]
    smoke = _row("head", "none", 0, 0.10, budget=ablations.SMOKE)
    older = dict(_row("head", "none", 1, 0.20), flags_hash="0123456789abcdef")
    gone = dict(_row("head", "none", 2, 0.30), setting="deep")
    again = _row("head", "none", 2, 0.76)
    rows = real + [smoke, older, gone, again]
    table = ablations.study_table(rows, "head", CPU)
    assert "| none | 50.0 ± 0.0 | 72.0 ± 3.5 | 10.0 ± 0.0 | 3 |" in table  # 70, 70, 76
    used, left_out = ablations.table_rows(rows, "head", CPU)
    assert len(used) == 3 and left_out == {
        "trained with other flags (another budget, or an older setting)": 2,
        "a setting the study no longer has": 1,
        "an earlier record of a point recorded again": 1}
    doc = tmp_path / "page.md"
    ablations.write_doc(rows, ["head"], str(doc), str(tmp_path / "img"), CPU)
    assert "4 rows of the results left out: 1 a setting the study no longer has; 1 an " \
        "earlier record of a point recorded again; 2 trained with other flags" in doc.read_text()
    # The smoke budget's own table uses only its own row.
    assert "| none | 50.0 ± 0.0 | 10.0 ± 0.0 |" in ablations.study_table(
        rows, "head", ablations.SMOKE)


@pytest.mark.parametrize("line, problem", [
    ('{"study": "he', "not JSON"),                 # a stray edit in the middle
    ("null", "a JSON NoneType, not a record"),
    ("{}", "no study, setting, seed"),
    ('{"study": "augment", "setting": "tinted: crop", "seed": 9}', "no flags_hash"),
])
def test_a_damaged_middle_line_is_an_error_naming_it(tmp_path, line, problem, capsys):
    """Faults 5 and 24: only a torn last line is dropped; any other line that is not a
    whole record stops the script before it writes anything, naming file and line."""
    rows = [_row("head", "none", seed, 0.7) for seed in (0, 1)]
    results = tmp_path / "r.jsonl"
    text = json.dumps(rows[0]) + "\n" + line + "\n" + json.dumps(rows[1]) + "\n"
    results.write_text(text)
    with pytest.raises(ablations.ResultsError, match=f"r.jsonl, line 2: .*{problem}"):
        ablations.read_results(str(results))
    doc = tmp_path / "page.md"
    assert ablations.main(["--study=head", "--report_only", f"--results={results}",
                           f"--doc={doc}"]) == 2
    assert "line 2" in capsys.readouterr().err
    assert not doc.exists() and results.read_text() == text  # nothing written


def test_rows_are_appended_whole(tmp_path, monkeypatch):
    """Fault 16: a row after a torn last line no longer glues to it; a failed write
    leaves the file as it was and hands back the row to paste."""
    rows = [_row("head", "none", seed, 0.7) for seed in (0, 1, 2)]
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1])[:40])  # torn
    ablations.append_row(str(results), rows[2])
    assert ablations.read_results(str(results)) == [rows[0], rows[2]]
    results.write_text(json.dumps(rows[0]))  # whole, without its newline
    ablations.append_row(str(results), rows[1])
    assert ablations.read_results(str(results)) == rows[:2]
    before = results.read_bytes()
    real_open = open

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self):
            return self.f.read()

        def write(self, data):
            self.f.write(data[:10])  # part of the row reaches the disk
            self.f.flush()
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("builtins.open", lambda path, mode="r", *a, **k: FullDisk(
        real_open(path, mode, *a, **k)) if str(path) == str(results) else real_open(
            path, mode, *a, **k))
    with pytest.raises(RuntimeError, match="No space left on device") as error:
        ablations.append_row(str(results), rows[2])
    monkeypatch.undo()
    assert results.read_bytes() == before
    assert json.loads(str(error.value).splitlines()[-1]) == rows[2]  # pasteable


def test_a_relaunch_that_trains_nothing_keeps_the_recorded_time(tmp_path):
    """Fault 15: a finished run launched again (its row was lost) keeps the time of
    the launches that trained it; a resumed run's time is the sum of its segments."""
    import argparse  # pylint: disable=import-outside-toplevel
    run_dir = tmp_path / "point_seed0" / "run"

    class Children:
        """run.py stand-in: each launch trains `steps` more (a checkpoint's index)."""
        steps = [3, 5, None]

        def run(self, command, **kwargs):  # pylint: disable=unused-argument
            step = self.steps.pop(0)
            run_dir.mkdir(parents=True, exist_ok=True)
            if step:
                (run_dir / f"ckpt-{step}.index").write_text("")
            return 0

    args = argparse.Namespace(results=str(tmp_path / "r.jsonl"), workdir=str(tmp_path),
                              data_dir=None, threads=1)
    runner = ablations.Runner(args, CPU, Children())
    first = runner._train(str(run_dir), {}, "p")  # pylint: disable=protected-access
    total = runner._train(str(run_dir), {}, "p")  # resumed: 3 -> 5
    assert 0 < first < total
    assert runner._train(str(run_dir), {}, "p") == total  # nothing trained
    assert json.loads((tmp_path / "point_seed0" / "run.json").read_text()) == {
        "wall_seconds": total}


def test_smoke_and_real_points_never_share_a_run_directory():
    """Fault 3: head_depth reused a smoke pretraining as a real point. Directories are
    named by the whole flag set; the two fine-tunes of one head still share one."""
    points = ablations.STUDIES["head_depth"]
    real = ablations.pretraining_dir("/w", points[0], 0, CPU)
    assert real != ablations.pretraining_dir("/w", points[0], 0, ablations.SMOKE)
    assert real == ablations.pretraining_dir("/w", points[1], 0, CPU)
    assert real != ablations.pretraining_dir("/w", points[2], 0, CPU)
    assert ablations.finetune_dir("/w", points[0], 0, CPU) != ablations.finetune_dir(
        "/w", points[0], 0, ablations.SMOKE)


def test_smoke_writes_no_page_by_itself():
    args = ablations.parse_args(["--study=head", "--smoke"])
    assert args.doc == "" and "docs" not in os.path.relpath(args.results, ROOT).split(
        os.sep)[:1]
    assert ablations.parse_args(["--study=head"]).doc == ablations.DOC
    assert ablations.parse_args(["--study=head"]).images == os.path.join(ROOT, "docs",
                                                                           "images")


def test_a_stopped_study_exits_with_the_signal_and_writes_no_page(tmp_path, monkeypatch):
    import signal  # pylint: disable=import-outside-toplevel
    import script_io  # pylint: disable=import-outside-toplevel

    def stopped(args, budget):
        raise script_io.Stopped(signal.SIGTERM)
    monkeypatch.setattr(ablations, "train_points", stopped)
    doc = tmp_path / "page.md"
    assert ablations.main(["--study=head", f"--results={tmp_path}/r.jsonl",
                           f"--workdir={tmp_path}/w", f"--doc={doc}"]) == 143
    assert not doc.exists()


def test_each_verdict_follows_the_stated_rule_on_planted_records():
    """The page's verdicts are computed (VERDICT_RULE): a difference within the spread
    is never 'reproduced', the other direction never 'in direction', a non-finite or
    missing record never a verdict at all."""
    claim = ablations.Claim("nonlinear beats linear", "nonlinear", "linear")

    def table(nonlinear, linear):
        rows = [_row("head", "nonlinear", seed, p, knn=k) for seed, (p, k) in
                enumerate(nonlinear)] + [_row("head", "linear", seed, p, knn=k)
                                         for seed, (p, k) in enumerate(linear)]
        return ablations.summary(rows, "head", CPU)
    clear = table([(0.80, 0.70), (0.81, 0.71), (0.82, 0.72)],
                  [(0.70, 0.60), (0.71, 0.61), (0.72, 0.62)])
    verdict, found = ablations.claim_verdict(clear, claim)
    assert verdict == "reproduced" and [m for m, *_ in found] == ["knn", "probe"]
    assert found[1][1] == pytest.approx(0.10) and found[1][2] == pytest.approx(0.02)
    within = table([(0.80, 0.70), (0.84, 0.71), (0.76, 0.72)],  # probe +1, sd 4 each
                   [(0.70, 0.60), (0.83, 0.61), (0.64, 0.62)])
    assert ablations.claim_verdict(within, claim)[0] == "in direction"
    against = table([(0.80, 0.55), (0.81, 0.56), (0.82, 0.57)],  # kNN the other way
                    [(0.70, 0.60), (0.71, 0.61), (0.72, 0.62)])
    assert ablations.claim_verdict(against, claim)[0] == "not reproduced"
    nan = table([(float("nan"), 0.7)] * 3, [(0.7, 0.6)] * 3)
    assert ablations.claim_verdict(nan, claim)[0] == "not measured"
    missing = table([(0.8, 0.7)] * 3, [])
    assert ablations.claim_verdict(missing, claim)[0] == "not measured"
    # One seed a side: no spread, never 'reproduced' (it was, for +0.1 points).
    one = table([(0.601, 0.602)], [(0.600, 0.600)])
    assert ablations.claim_verdict(one, claim)[0] == "undecided (1 seed: no spread)"
    rows = [_row("head", "nonlinear", 0, 0.602, knn=0.601),
            _row("head", "linear", 0, 0.600, knn=0.600)]
    page = ablations.claims_table(rows, "head", CPU)
    assert ("| a nonlinear head beats a linear one | kNN +0.1 (no spread); probe +0.2 "
            "(no spread) | undecided (1 seed: no spread) |") in page, page
    uneven = table([(0.80, 0.70), (0.81, 0.71), (0.82, 0.72)], [(0.70, 0.60)])
    assert ablations.claim_verdict(uneven, claim)[0].startswith("undecided (1 seed")
    for study, claims in ablations.CLAIMS.items():  # every claim names real settings
        settings = {p.setting for p in ablations.STUDIES[study]}
        for each in claims:
            for side in (each.better, each.worse):
                assert (side[0] if isinstance(side, tuple) else side) in settings, each
    page = ablations.claims_table([], "head", CPU)
    assert "| a nonlinear head beats a linear one | - | not measured |" in page


def test_a_full_disk_keeps_the_page_and_its_plot_as_they_were(tmp_path, monkeypatch,
                                                               capsys):
    """Fault 17: --report_only on a full disk replaced a good plot with a truncated
    one. Every file is written whole: a failed write is one line (exit 2), the old
    page and plot untouched, no scratch file left."""
    import script_io  # pylint: disable=import-outside-toplevel
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(_row("head", s, seed, 0.7)) + "\n"
                               for s in ("none", "linear") for seed in (0, 1)))
    doc, images = tmp_path / "page.md", tmp_path / "images"
    images.mkdir()
    doc.write_text("# old page\n")
    (images / "ablations_head.png").write_bytes(b"old plot")

    def full(source, target):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(script_io.os, "replace", full)
    assert ablations.main(["--study=head", "--report_only", f"--results={results}",
                           f"--doc={doc}", f"--images={images}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not be written (No space left on device)" in err[0]
    assert doc.read_text() == "# old page\n"
    assert (images / "ablations_head.png").read_bytes() == b"old plot"
    assert sorted(os.listdir(images)) == ["ablations_head.png"]
    assert sorted(os.listdir(tmp_path)) == ["images", "page.md", "r.jsonl"]


def test_head_scale_lists_a_point_still_training(tmp_path, capsys):
    """Fault 25: a point in progress (flags.json, no checkpoint yet) was a
    FileNotFoundError traceback; it is listed as such."""
    point = ablations.STUDIES["temperature"][0]
    run_dir = ablations.pretraining_dir(str(tmp_path), point, 0, CPU)
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "flags.json"), "w") as f:
        json.dump(dict(hidden_norm=True, temperature=0.05), f)
    assert ablations.main(["--study=temperature", "--head_scale", "--seeds=0",
                           f"--workdir={tmp_path}"]) == 1
    out = capsys.readouterr()
    assert "No checkpoint yet (still training?): tau 0.05, l2 / seed 0" in out.out
    assert "no finished run of --study=temperature" in out.err


def test_every_option_reaches_the_points_training_and_evaluation(tmp_path, monkeypatch):
    """Recorders in place of run.py's process and of the evaluation: --seeds,
    --settings, --data_dir, --threads and --workdir reach each point's command, its
    environment and its scoring (a planted drop of any fails here)."""
    import script_io  # pylint: disable=import-outside-toplevel
    launched, scored = [], []
    monkeypatch.setattr(script_io.Children, "run", lambda self, command, **kw: launched.append(
        (command, kw["env"])) or 0)
    monkeypatch.setattr(ablations.Runner, "_evaluate", lambda self, run_dir, seed, dataset,
                        budget: scored.append((run_dir, seed, dataset)) or {
                            "h": dict(knn=0.5, probe=0.6, probe_c=1.0, rankme=3.0)})
    monkeypatch.setattr(ablations, "contrast_metrics",
                        lambda run_dir: dict(contrast_acc=0.5, contrast_loss=4.0))
    data, work = tmp_path / "data", tmp_path / "work"
    assert ablations.main(["--study=head", "--settings=linear", "--seeds=4", "--threads=3",
                           f"--data_dir={data}", f"--workdir={work}",
                           f"--results={tmp_path / 'r.jsonl'}", "--doc="]) == 0
    ((command, env),) = launched
    assert "--seed=4" in command and f"--data_dir={data}" in command
    assert {"--num_proj_layers=1", "--proj_head_mode=linear"} <= set(command)  # the setting
    assert env["TF_NUM_INTRAOP_THREADS"] == "3"
    ((run_dir, seed, _),) = scored
    assert seed == 4 and run_dir.startswith(str(work))
