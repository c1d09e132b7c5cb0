"""scripts/plot_run.py: the pictures of a run, from its records (issue 46, 6)."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import plot_run  # noqa: E402  pylint: disable=wrong-import-position

pytest.importorskip("matplotlib", reason="needs matplotlib (pip install -e '.[plot]')")
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_three_pictures_of_a_run(tiny_run, tmp_path, capsys, monkeypatch):
    """From the tiny run's metrics.jsonl, flags.json and newest checkpoint: its curves
    (loss, accuracy, rate, the kNN monitor), views drawn by its recipe, a PCA map of
    h on its eval split; the run directory itself is left as it was."""
    before = sorted(os.listdir(tiny_run.directory))
    out = tmp_path / "plots"
    drawn = _drawn(monkeypatch)
    done = plot_run.main([tiny_run.directory, "--out", str(out), "--views", "3",
                          "--max_points", "100"])
    assert drawn["views.png"]["title"] == (
        "digits, pretrain's two views: crop + flip + colour 0.5 (simclrv2)")
    names = {os.path.basename(path) for path in done["written"]}
    assert names == {"training_curves.png", "views.png", "embeddings.png"}, done
    assert done["skipped"] == []
    for path in done["written"]:
        with open(path, "rb") as f:
            assert f.read(8) == PNG
        assert 5_000 < os.path.getsize(path) < 300_000, path
    assert sorted(os.listdir(out)) == sorted(names)  # no scratch file left
    assert sorted(os.listdir(tiny_run.directory)) == before
    printed = capsys.readouterr().out
    assert f"wrote {out}/views.png (" in printed
    # The panels read what the run recorded: the kNN monitor's two evaluations.
    series = plot_run.read_metrics(tiny_run.directory)
    assert series["knn/top_1_accuracy"][0] == [2, 4]
    assert series["train/contrast_loss"][0] == [1, 2, 3, 4]


@pytest.mark.parametrize("argv, message", [
    (["{tmp}"], r"is not a run directory \(no flags.json"),
    (["{tmp}/missing"], "is not a directory"),
    (["{run}", "--out", "{tmp}/file"], "--out: .* is a file"),
    (["{run}", "--only", "curves,histogram"], "--only: expected a subset of curves, "
                                              "views, embeddings"),
    (["{run}", "--views", "0"], "--views: expected 1..32, got 0"),
    # An option of a picture not drawn (it was dropped).
    (["{run}", "--only", "curves", "--views", "4"],
     "--views does nothing with --only=curves: only views read it"),
    (["{run}", "--only", "curves,views", "--method=tsne"],
     "--method does nothing with --only=curves,views: only embeddings read it"),
    (["{run}", "--only", "curves", "--seed=3"],
     "--seed does nothing with --only=curves: only views and embeddings read it"),
    # Fault 28 of 2026-12-05: a traceback (rc 1).
    (["{run}", "--only", "embeddings", "--split", "validation"],
     r"^plot_run.py: error: --split: Invalid split 'validation' for dataset 'digits'.*"
     r"Known splits and sizes: \{'train': \d+, 'test': \d+\}"),
])
def test_bad_arguments_are_refused_before_anything_is_written(tiny_run, tmp_path, capsys,
                                                              argv, message):
    (tmp_path / "file").write_text("x")
    argv = [a.format(tmp=tmp_path, run=tiny_run.directory) for a in argv]
    with pytest.raises(SystemExit) as info:
        plot_run.main(argv)
    assert info.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not os.path.exists(tmp_path / "plots")
    assert not os.path.exists(os.path.join(tiny_run.directory, "plots"))


# ------------------------------------------------------------------ views.png


def _drawn(monkeypatch):
    """What plot_run hands to `_save`, per picture: the arrays of each row's panels
    (the image, then its views) and the figure's title."""
    drawn, original = {}, plot_run._save  # pylint: disable=protected-access

    def save(plt, fig, out, name, dpi):
        axes = [ax for ax in fig.axes if ax.images or ax.lines]
        title = fig._suptitle  # pylint: disable=protected-access
        drawn[name] = dict(
            title=title and title.get_text(),
            images=[np.asarray(ax.images[0].get_array()) for ax in axes if ax.images],
            lines={line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                   for ax in axes for line in ax.lines},
            titles=[ax.get_title() for ax in fig.axes])
        return original(plt, fig, out, name, dpi)

    monkeypatch.setattr(plot_run, "_save", save)
    return drawn


def _flags_only_run(directory, **overrides):
    """A run directory holding only flags.json (all views.png reads): the tiny run's
    flags on the digits' first three training images, with `overrides`."""
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    from helpers import run_fixtures  # pylint: disable=import-outside-toplevel
    cfg = run_fixtures.config(**dict(dict(model_dir=str(directory), mode="train",
                                          train_split="train[:3]", train_steps=2),
                                     **overrides))
    os.makedirs(directory)
    records.write_json(records.record_path(str(directory), records.FLAGS, "train"),
                       cfg.to_dict())
    return cfg


def _pipelines_own(train_mode, seed, **options):
    """The views the training pipeline makes of the digits' first three training
    images for `seed` (the three ids alone, unshuffled): [3, views, 16, 16, 3]."""
    from simclr_tf.data import pipeline, registry  # pylint: disable=import-outside-toplevel
    dataset = pipeline.build_input_fn(
        registry.get_dataset("digits"), "train[:3]", global_batch_size=3,
        train_mode=train_mode, image_size=16, color_jitter_strength=0.5, seed=seed,
        label_subset_ids=[0, 1, 2], shuffle_buffer_size=1, **options)(None)
    images, _ = next(iter(dataset))
    return np.stack([v.numpy() for v in images], 1) if isinstance(images, tuple) else (
        images.numpy()[:, None])


# Fault 11 of 2026-12-05: views.png drew crop + colour (+ blur) whatever the run's
# train mode and --augmentations, titled "colour strength ...".
@pytest.mark.parametrize("overrides, title, options", [
    (dict(augmentations="none"), "pretrain's two views: resize only",
     dict(augmentations="none")),
    (dict(train_mode="finetune"), "finetune's view: crop + flip", {}),
    (dict(train_mode="distill", teacher="/teacher"), "distill's view: crop + flip", {}),
    # Colour too is tiny_run's recipe (test_the_three_pictures_of_a_run); its
    # views are not compared: tracing the colour jitter takes seconds.
    (dict(augmentations="crop", use_blur=True), "pretrain's two views: crop, blur",
     dict(augmentations="crop")),
], ids=["none", "finetune", "distill", "blur"])
def test_views_are_the_ones_the_runs_pipeline_makes(tmp_path, monkeypatch, overrides,
                                                    title, options):
    """The views drawn are the training pipeline's own for the plot's seed (then, for
    a pretraining step with --use_blur, its blur at step 0), and the title names the
    recipe: no colour for --augmentations=none (resize only: both views the image)
    or for a fine-tune's and a distillation's single crop-and-flip view."""
    from simclr_tf import augment  # pylint: disable=import-outside-toplevel
    cfg = _flags_only_run(tmp_path / "run", **overrides)
    drawn = _drawn(monkeypatch)
    plot_run.main([cfg.model_dir, "--only", "views", "--views", "3", "--seed", "5"])
    views = drawn["views.png"]
    assert views["title"] == f"digits, {title}"
    expected = _pipelines_own(cfg.train_mode, 5, **options)
    if cfg.use_blur:
        expected = np.stack([v.numpy() for v in augment.batch_random_blur(
            [expected[:, 0], expected[:, 1]], 16, 16, seed=augment.view_seed(5, 0, 0))], 1)
    per_row = 1 + expected.shape[1]
    assert len(views["images"]) == 3 * per_row
    for row in range(3):
        for view in range(expected.shape[1]):
            np.testing.assert_array_equal(views["images"][row * per_row + 1 + view],
                                          expected[row, view])
    if overrides.get("augmentations") == "none":  # the image resized, twice
        raw = next(iter(__import__("simclr_tf.data.registry", fromlist=["x"]).get_dataset(
            "digits").load("train[:1]")))[0]
        resized = augment.preprocess_for_eval(raw, 16, 16, crop=False).numpy()
        np.testing.assert_allclose(views["images"][1], resized, atol=1e-6)
        np.testing.assert_array_equal(views["images"][1], views["images"][2])


# ------------------------------------------------------------------ training_curves.png

# What each train mode's runs write to metrics.jsonl (seen in tiny runs: the
# supervised step's and distillation's training lines, the distillation monitor).
RECORDED = {
    "finetune": [dict(step=1, **{"train/supervised_loss": 2.4, "train/supervised_acc": 0.1,
                                 "train/learning_rate": 0.1, "train/total_loss": 2.5}),
                 dict(step=2, **{"train/supervised_loss": 2.1, "train/supervised_acc": 0.3,
                                 "train/learning_rate": 0.05, "train/total_loss": 2.2})],
    "distill": [dict(step=2, **{"train/distill_loss": 1.9, "train/teacher_agreement": 0.4,
                                "train/learning_rate": 0.1}),
                dict(step=2, **{"distill/student_top_1_accuracy": 0.35,
                                "distill/teacher_top_1_accuracy": 0.5,
                                "distill/teacher_agreement": 0.45}),
                dict(step=4, **{"train/distill_loss": 1.7, "train/teacher_agreement": 0.6,
                                "train/learning_rate": 0.0}),
                dict(step=4, **{"distill/student_top_1_accuracy": 0.45,
                                "distill/teacher_top_1_accuracy": 0.5,
                                "distill/teacher_agreement": 0.65})],
}
DRAWN = {
    "finetune": {"train/supervised_loss", "train/supervised_acc", "train/learning_rate"},
    "distill": {"train/distill_loss", "train/teacher_agreement", "train/learning_rate",
                "distill/student_top_1_accuracy", "distill/teacher_top_1_accuracy"},
}


@pytest.mark.parametrize("train_mode", ["finetune", "distill"])
def test_curves_draw_the_losses_a_fine_tune_and_a_distillation_record(tmp_path,
                                                                      monkeypatch,
                                                                      train_mode):
    """Their losses, accuracies and monitors, from metrics.jsonl (the panels were the
    contrastive ones, empty for these runs, and the distillation monitor was looked
    up under a name nothing writes)."""
    cfg = _flags_only_run(tmp_path / "run", train_mode=train_mode,
                          teacher="/teacher" if train_mode == "distill" else None)
    with open(os.path.join(cfg.model_dir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in RECORDED[train_mode])
    drawn = _drawn(monkeypatch)
    plot_run.main([cfg.model_dir, "--only", "curves"])
    curves = drawn["training_curves.png"]
    assert set(curves["lines"]) == DRAWN[train_mode]
    for name, (steps, values) in curves["lines"].items():
        lines = [line for line in RECORDED[train_mode] if name in line]
        assert (steps, values) == ([l["step"] for l in lines], [l[name] for l in lines])
    # Only panels of what was recorded (a fine-tune's had two empty ones).
    assert curves["titles"] == ["losses", "training accuracies", "learning rate"] + (
        ["monitors (top-1)"] if train_mode == "distill" else [])


@pytest.mark.large  # 5-12 s: a 2-step fine-tune of the tiny run, a 2-step distillation
def test_the_pictures_of_a_real_fine_tune_and_distillation(tiny_run, tmp_path,
                                                           monkeypatch):
    """Runs trained here: every loss, training accuracy and monitor their
    metrics.jsonl holds is drawn with its values, and their views are their
    pipeline's (one crop-and-flip view)."""
    from simclr_tf.run import experiment  # pylint: disable=import-outside-toplevel
    from helpers import run_fixtures  # pylint: disable=import-outside-toplevel
    common = dict(mode="train", train_steps=2, checkpoint_steps=1, train_batch_size=16,
                  export_format="none", train_split="train[:64]", knn_eval_split="")
    teacher_dir, student_dir = str(tmp_path / "ft"), str(tmp_path / "distill")
    experiment.run(run_fixtures.config(model_dir=teacher_dir, train_mode="finetune",
                                       checkpoint=tiny_run.directory, **common))
    experiment.run(run_fixtures.config(model_dir=student_dir, train_mode="distill",
                                       teacher=teacher_dir, **common))
    drawn = _drawn(monkeypatch)
    for run_dir, train_mode in ((teacher_dir, "finetune"), (student_dir, "distill")):
        plot_run.main([run_dir, "--only", "curves,views", "--views", "2"])
        recorded = plot_run.read_metrics(run_dir)
        wanted = {name for name in recorded if name.endswith(
            ("_loss", "_acc", "_agreement", "top_1_accuracy", "learning_rate"))
            and name not in ("train/total_loss", "distill/teacher_agreement")}
        assert DRAWN[train_mode] <= wanted  # what the planted records above say
        lines = drawn["training_curves.png"]["lines"]
        assert set(lines) == wanted, train_mode
        for name in wanted:
            assert tuple(lines[name]) == tuple(recorded[name]), name
        views = drawn["views.png"]
        assert views["title"] == f"digits, {train_mode}'s view: crop + flip"
        assert len(views["images"]) == 4  # two rows: the image, its one view


# ------------------------------------------------------------------ the process


def _stand_in_tensorflow(tmp_path):
    """A tensorflow module that says it was imported and stops the process."""
    (tmp_path / "tf").mkdir()
    (tmp_path / "tf" / "tensorflow.py").write_text(
        "import sys\nsys.stderr.write('tensorflow imported\\n')\nsys.exit(9)\n")
    return str(tmp_path / "tf")


@pytest.mark.parametrize("argv, message", [
    (["{tmp}/missing"], "plot_run.py: error: '{tmp}/missing' is not a directory: pass "
                        "a run's --model_dir"),
    (["{tmp}", "--views", "99"], "plot_run.py: error: --views: expected 1..32, got 99"),
])
def test_errors_that_need_no_tensorflow_come_before_it(tmp_path, argv, message):
    """A missing run directory or a bad flag: the one line and rc 2, and TensorFlow
    (a stand-in that would say so) never imported."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [_stand_in_tensorflow(tmp_path), ROOT]))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_run.py"),
                           *[a.format(tmp=tmp_path) for a in argv]], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == message.format(tmp=tmp_path)  # after usage
    assert "Traceback" not in done.stderr
    assert "tensorflow imported" not in done.stderr


@pytest.mark.large  # 8-12 s: TensorFlow and matplotlib imported in a new process
def test_its_process_prints_no_tensorflow_start_up_lines(tiny_run, tmp_path):
    """The README's `python scripts/plot_run.py RUN`: its output is its own lines
    (it printed TensorFlow's C++ start-up lines, a cuInit ERROR among them)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_run.py"),
                           tiny_run.directory, "--only", "curves", "--out",
                           str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith(f"wrote {tmp_path}/training_curves.png")


def test_a_picture_the_disk_cannot_hold_is_one_line_and_keeps_the_old_one(
        tiny_run, tmp_path, capsys, monkeypatch):
    """A full disk while writing a picture (an injected OSError at the rename): one
    error line naming the file, exit 2; the picture drawn before stays whole, no
    scratch file is left."""
    import script_io  # pylint: disable=import-outside-toplevel
    out = tmp_path / "plots"
    out.mkdir()
    (out / "training_curves.png").write_bytes(b"the older picture")

    def full(source, target):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(script_io.os, "replace", full)
    with pytest.raises(SystemExit) as info:
        plot_run.main([tiny_run.directory, "--out", str(out), "--only", "curves"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"plot_run.py: error: {out}/training_curves.png could not be written "
                   "(No space left on device); the file there is as it was before"]
    assert (out / "training_curves.png").read_bytes() == b"the older picture"
    assert os.listdir(out) == ["training_curves.png"]


def test_every_option_reaches_the_picture_that_reads_it(tiny_run, tmp_path, monkeypatch):
    """Recorders in place of the three pictures: each option of the command line
    arrives where it is drawn (a planted drop of any fails here)."""
    calls = {}

    def recorder(name, *keys):
        def record(*args):
            calls[name] = dict(zip(keys, args))
            return None, "recorded"
        return record
    monkeypatch.setattr(plot_run, "plot_curves", recorder(
        "curves", "plt", "run_dir", "train_mode", "out", "dpi"))
    monkeypatch.setattr(plot_run, "plot_views", recorder(
        "views", "plt", "config", "source", "count", "seed", "out", "dpi"))
    monkeypatch.setattr(plot_run, "plot_embeddings", recorder(
        "embeddings", "plt", "tf", "run_dir", "source", "split", "max_points", "method",
        "seed", "out", "dpi"))
    out = str(tmp_path / "pictures")
    plot_run.main([tiny_run.directory, "--out", out, "--views=5", "--split=train[:40]",
                   "--max_points=50", "--method=tsne", "--seed=4", "--dpi=60"])
    assert {k: calls["curves"][k] for k in ("run_dir", "out", "dpi")} == dict(
        run_dir=tiny_run.directory, out=out, dpi=60)
    assert {k: calls["views"][k] for k in ("count", "seed", "out", "dpi")} == dict(
        count=5, seed=4, out=out, dpi=60)
    assert {k: calls["embeddings"][k] for k in ("split", "max_points", "method", "seed",
                                                 "out", "dpi")} == dict(
        split="train[:40]", max_points=50, method="tsne", seed=4, out=out, dpi=60)
