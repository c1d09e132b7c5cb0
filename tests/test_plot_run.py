"""scripts/plot_run.py: the pictures of a run, from its records (issue 46, 6)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import plot_run  # noqa: E402  pylint: disable=wrong-import-position

pytest.importorskip("matplotlib", reason="needs matplotlib (pip install -e '.[plot]')")
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_three_pictures_of_a_run(tiny_run, tmp_path, capsys):
    """From the tiny run's metrics.jsonl, flags.json and newest checkpoint: its curves
    (loss, accuracy, rate, the kNN monitor), views drawn by its recipe, a PCA map of
    h on its eval split; the run directory itself is left as it was."""
    before = sorted(os.listdir(tiny_run.directory))
    out = tmp_path / "plots"
    done = plot_run.main([tiny_run.directory, "--out", str(out), "--views", "3",
                          "--max_points", "100"])
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
])
def test_bad_arguments_are_refused_before_anything_is_written(tiny_run, tmp_path, capsys,
                                                              argv, message):
    (tmp_path / "file").write_text("x")
    argv = [a.format(tmp=tmp_path, run=tiny_run.directory) for a in argv]
    with pytest.raises(SystemExit) as info:
        plot_run.main(argv)
    assert info.value.code == 2
    import re  # pylint: disable=import-outside-toplevel
    assert re.search(message, capsys.readouterr().err)
    assert not os.path.exists(tmp_path / "plots")
    assert not os.path.exists(os.path.join(tiny_run.directory, "plots"))
