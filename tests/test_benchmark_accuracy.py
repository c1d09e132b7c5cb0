"""scripts/benchmark_accuracy.py: the accuracy benchmark against lightly.

The default tier checks its arithmetic (spreads, goals, the doc's section) and its
refusals; the extra-large tier runs its --fast path end to end on a small
Fashion-MNIST the test writes (our rows only: the peer needs torch, which is never
a dependency of the package or of its tests)."""
import json
import os
import signal
import sys

import numpy as np
import pytest

from helpers.fashion_mnist_files import write_fashion_mnist
from helpers.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmark_accuracy")


def test_a_spread_is_the_mean_and_the_sample_standard_deviation(bench):
    mean, std = bench.mean_std([0.80, 0.82, 0.84])
    assert mean == pytest.approx(0.82)
    assert std == pytest.approx(np.std([0.80, 0.82, 0.84], ddof=1))
    assert bench.mean_std([0.5]) == (0.5, 0.0)
    assert bench.format_spread([0.80, 0.82, 0.84]) == "82.0 ± 2.0"
    assert bench.format_spread([1.25, 1.75], scale=1, digits=3) == "1.500 ± 0.354"


def _results(**rows):
    return {row: dict(knn=list(v[0]), probe=list(v[1]),
                      **({"seconds_per_step": list(v[2])} if len(v) > 2 else {}))
            for row, v in rows.items()}


def test_goals_compare_means_against_the_peer_and_the_random_floor(bench):
    results = _results(
        random=([0.69, 0.69, 0.69], [0.76, 0.76, 0.76]),
        simclr_tf=([0.81, 0.80, 0.79], [0.84, 0.85, 0.86], [0.5, 0.5, 0.5]),
        lightly=([0.804, 0.804, 0.804], [0.90, 0.90, 0.90], [0.6, 0.6, 0.6]))
    verdicts = dict(bench.goals(results))
    # kNN: 0.800 >= 0.804 - 0.005; probe: 0.85 < 0.90 - 0.005.
    assert verdicts["kNN: simclr_tf >= lightly - 0.5 point"] is True
    assert verdicts["linear probe: simclr_tf >= lightly - 0.5 point"] is False
    # kNN 0.80 >= 0.69 + 0.10; probe 0.85 < 0.76 + 0.10.
    assert verdicts["kNN: simclr_tf >= random init + 10 points"] is True
    assert verdicts["linear probe: simclr_tf >= random init + 10 points"] is False
    assert verdicts["s/step: simclr_tf <= lightly (same machine, interleaved)"] is True
    without_peer = dict(bench.goals(_results(simclr_tf=([0.8], [0.8]))))
    assert without_peer["kNN: simclr_tf >= lightly - 0.5 point"] is None
    assert without_peer["kNN: simclr_tf >= random init + 10 points"] is None
    lines = bench.goal_lines(results, fast=False)
    assert "- linear probe: simclr_tf >= lightly - 0.5 point: **not met**" in lines
    # The fast budget's numbers are no evidence: no goal is met or missed there.
    assert all(line.endswith(": no verdict at the fast budget")
               for line in bench.goal_lines(results, fast=True))


def test_the_doc_section_is_replaced_and_the_prose_around_it_kept(bench):
    text = f"# Title\n\nprose before\n\n{bench.BEGIN}\nold table\n{bench.END}\n\nprose after\n"
    new = bench.replace_section(text, "new table\n")
    assert new == (f"# Title\n\nprose before\n\n{bench.BEGIN}\nnew table\n{bench.END}\n\n"
                   "prose after\n")
    appended = bench.replace_section("# Title\n", "table")
    assert appended == f"# Title\n\n{bench.BEGIN}\ntable\n{bench.END}\n"


def test_the_doc_holds_the_section_the_script_writes(bench):
    with open(bench.DOC) as f:
        text = f.read()
    assert text.count(bench.BEGIN) == 1 and text.count(bench.END) == 1
    section = text.split(bench.BEGIN)[1].split(bench.END)[0]
    for row in bench.ROWS:
        assert f"| {row} |" in section


def test_rankme_of_the_benchmark_is_the_library_s(bench):
    from simclr_tf.evaluation import rankme  # pylint: disable=import-outside-toplevel
    features = np.random.default_rng(0).normal(size=(200, 16))
    assert bench.rankme is rankme.rankme
    assert bench.rankme(features) == pytest.approx(rankme.rankme(features))


def test_our_training_command_carries_the_budget(bench):
    budget = bench.BUDGETS["cpu"]
    pretrain = bench.run_py_command(budget, "simclr_tf", 2, "/tmp/m", None)
    supervised = bench.run_py_command(budget, "supervised", 2, "/tmp/m", "/data")
    for flag in ("--train_split=train[:10000]", "--image_size=16", "--train_batch_size=256",
                 "--train_epochs=10", "--learning_rate=2.0", "--temperature=0.2",
                 "--weight_decay=0.0001", "--seed=2", "--width_multiplier=0.25"):
        assert flag in pretrain and flag in supervised
    assert "--train_mode=pretrain" in pretrain and "--train_mode=finetune" in supervised
    # No online head beside the pretraining: the peer has none, the step is the method's.
    assert "--nolineareval_while_pretraining" in pretrain
    assert "--data_dir=/data" in supervised and not any("--data_dir" in a for a in pretrain)
    # The peer's peak rate is ours after linear scaling.
    assert budget.peak_learning_rate == pytest.approx(2.0)
    assert bench.BUDGETS["gpu"].peak_learning_rate == pytest.approx(2.0)


def test_seconds_per_step_skips_the_first_step(bench, tmp_path):
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for step, time in ((1, 100.0), (11, 130.0), (21, 150.0)):
            f.write(json.dumps({"step": step, "time": time}) + "\n")
    assert bench.seconds_per_step_from_metrics(str(tmp_path)) == pytest.approx(2.5)


def test_bad_arguments_are_refused_before_any_work(bench, tmp_path):
    with pytest.raises(SystemExit):
        bench.parse_args(["--rows=random,moco"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--rows=lightly", "--lightly_python=/nonexistent/python"])
    (tmp_path / "old").write_text("x")
    with pytest.raises(SystemExit):
        bench.parse_args(["--rows=random", f"--workdir={tmp_path}"])
    args = bench.parse_args(["--rows=random", f"--workdir={tmp_path}", "--resume",
                             "--seeds=3,4"])
    assert args.seeds == [3, 4] and args.rows == ["random"]


def test_a_stop_ends_the_benchmark_between_cells_and_its_training_with_it(
        bench, tmp_path, monkeypatch, capsys):
    """SIGTERM / SIGINT: a training cell's run.py is one of the script's children
    (scripts/script_io.Children: the signal forwarded, the child waited for; the
    mechanism's process test is test_script_io's); a stop that comes while a cell is
    evaluated in the script's process starts no further cell. The script exits 128 +
    the signal; the finished cell's record is kept for --resume."""
    log = tmp_path / "log.txt"
    children = bench.script_io.Children()
    assert bench.run_logged([sys.executable, "-c", "print('trained')"], str(log),
                            children) > 0
    assert "trained" in log.read_text().splitlines()
    children.stopped_by = signal.SIGTERM
    with pytest.raises(bench.script_io.Stopped):
        bench.run_logged([sys.executable, "-c", "print('trained again')"], str(log), children)
    assert "trained again" not in log.read_text().splitlines()  # only its command line

    started = []

    def cell(row, seed, args, budget, feats, cell_dir, children):
        started.append(row)
        children.stopped_by = signal.SIGINT  # Ctrl-C while this cell is evaluated
        return dict(row=row, seed=seed, knn=0.5, probe=0.5, rankme=2.0)

    monkeypatch.setattr(bench, "run_cell", cell)
    monkeypatch.setattr(bench, "Features", lambda *args: None)
    workdir = tmp_path / "work"
    assert bench.main(["--fast", "--rows=random,simclr_tf", "--seeds=0",
                       f"--workdir={workdir}", f"--doc={tmp_path / 'doc.md'}"]) == 130
    assert started == ["random"]
    assert "benchmark_accuracy.py: stopped by SIGINT: the running training was stopped" \
        in capsys.readouterr().err
    assert sorted(os.listdir(workdir)) == ["random_seed0.json"]
    assert json.loads((workdir / "random_seed0.json").read_text())["knn"] == 0.5


@pytest.mark.extra_large
def test_fast_path_end_to_end_and_resume(tmp_path, bench, capsys):
    """The script's main in process (its simclr_tf cell trains through run.py, in a
    process of its own, as always): both cells, the record, the doc left alone; a
    rerun reuses them; without --resume the workdir is refused."""
    data = tmp_path / "fashion"
    write_fashion_mnist(str(data), sizes={"train": 512, "test": 256})
    workdir, doc = tmp_path / "work", tmp_path / "benchmarks.md"
    doc.write_text("untouched\n")
    argv = ["--fast", "--rows=random,simclr_tf", "--seeds=0", f"--workdir={workdir}",
            f"--data_dir={data}", f"--doc={doc}"]
    assert bench.main(argv) == 0, capsys.readouterr().out[-3000:]
    with open(workdir / "benchmark.json") as f:
        saved = json.load(f)
    cells = {(c["row"], c["seed"]): c for c in saved["cells"]}
    assert set(cells) == {("random", 0), ("simclr_tf", 0)}
    for cell in cells.values():
        assert 0.0 <= cell["knn"] <= 1.0 and 0.0 <= cell["probe"] <= 1.0
        assert 1.0 <= cell["rankme"] <= 64.0  # h of ResNet-18 x0.125 is 64-d
    assert cells["simclr_tf", 0]["seconds_per_step"] > 0
    assert doc.read_text() == "untouched\n"  # --fast never writes the doc
    # A rerun reuses the finished cells; without --resume the workdir is refused.
    capsys.readouterr()
    assert bench.main(argv + ["--resume"]) == 0
    assert capsys.readouterr().out.count("reused") == 2
    with pytest.raises(SystemExit) as refused:
        bench.main(argv)
    assert refused.value.code == 2 and "--resume" in capsys.readouterr().err


def test_the_fastest_stretch_is_timed_over_at_least_the_peer_s_interval(bench):
    # Stretches of >= 50 steps: 2 -> 60 (58 steps in 29 s), 30 -> 100 (70 in 14 s).
    times = [(2, 0.0), (30, 20.0), (60, 29.0), (100, 34.0)]
    assert bench.fastest_window(times) == pytest.approx(14.0 / 70)
    # 60 -> 100 is only 40 steps: not a stretch; nothing long enough gives NaN.
    assert np.isnan(bench.fastest_window([(2, 0.0), (40, 5.0)]))


def test_the_doc_shows_no_path_of_one_machine(bench):
    """docs/benchmarks.md's command line: lightly's interpreter as a placeholder."""
    assert bench.shareable_argv(["--threads=1", "--lightly_python=/work/venv/bin/python",
                                 "--resume"]) == [
        "--threads=1", "--lightly_python=<lightly's python>", "--resume"]
    assert bench.shareable_argv(["--lightly_python", "/home/me/py", "--seeds=0"]) == [
        "--lightly_python", "<lightly's python>", "--seeds=0"]


def test_the_plot_of_the_page_is_drawn_from_its_per_seed_table(bench, tmp_path):
    """`--replot` reads the page's per-seed table (the record when the --json is gone):
    every row, three seeds, means within the rounding of the summary table's."""
    pytest.importorskip("matplotlib", reason="needs matplotlib (pip install -e '.[plot]')")
    with open(bench.DOC) as f:
        page = f.read()
    results = bench.results_from_page(page)
    assert sorted(results) == sorted(bench.ROWS)
    summary = page.split(bench.BEGIN, 1)[1].split("Each seed", 1)[0]
    for row, metrics in results.items():
        assert len(metrics["knn"]) == len(metrics["probe"]) == 3
        line = next(l for l in summary.splitlines() if l.startswith(f"| {row} |"))
        knn_mean = float(line.split("|")[2].split("±")[0])
        assert abs(100 * np.mean(metrics["knn"]) - knn_mean) <= 0.1, row
    out = tmp_path / "benchmark.png"
    assert bench.main(["--replot", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    with pytest.raises(ValueError, match="no per-seed table"):
        bench.results_from_page(f"{bench.BEGIN}\nEach seed\n{bench.END}")


def test_bfloat16_runs_are_their_own_cells_and_leave_the_page_alone(bench, tmp_path,
                                                                   monkeypatch):
    """--mixed_precision=bfloat16 (docs/performance.md, "bfloat16 on a CPU"): our
    trainings get it, lightly's cannot; a cell of it is never reused for float32 (its
    settings differ), and the page's float32 table is not rewritten."""
    budget = bench.BUDGETS["cpu"]
    assert "--mixed_precision=bfloat16" in bench.run_py_command(
        budget, "simclr_tf", 0, "/tmp/m", None, "bfloat16")
    assert not any("mixed_precision" in a for a in bench.run_py_command(
        budget, "simclr_tf", 0, "/tmp/m", None))
    doc = tmp_path / "page.md"
    args = bench.parse_args(["--rows=simclr_tf", "--seeds=0", "--mixed_precision=bfloat16",
                             f"--workdir={tmp_path / 'w'}", f"--doc={doc}",
                             f"--plot={tmp_path / 'p.png'}"])
    float32 = bench.parse_args(["--rows=simclr_tf", "--seeds=0",
                                f"--workdir={tmp_path / 'w2'}"])
    assert bench.settings_key(args, budget, "simclr_tf", 0) != bench.settings_key(
        float32, budget, "simclr_tf", 0)
    assert "mixed_precision" not in bench.settings_key(args, budget, "lightly", 0)
    cell = dict(row="simclr_tf", seed=0, knn=0.7, probe=0.8, rankme=20.0,
                seconds_per_step=0.2, wall_seconds=100.0, load_average_before=[1.0],
                load_average_after=[1.0])
    monkeypatch.setattr(bench, "logged_times", lambda cell_dir, row: {})  # no run here
    bench.report_cells([cell], [], args, budget)
    assert (tmp_path / "w" / "benchmark.json").exists()
    assert not doc.exists() and not (tmp_path / "p.png").exists()


def _cells(rows, seeds):
    return [dict(row=row, seed=seed, knn=0.7, probe=0.8, rankme=20.0,
                 seconds_per_step=0.2, wall_seconds=100.0, load_average_before=[1.0],
                 load_average_after=[1.0]) for seed in seeds for row in rows]


def test_a_run_of_some_rows_or_seeds_leaves_the_page_and_its_plot_alone(
        bench, tmp_path, monkeypatch, capsys):
    """`--rows=random --seeds=0` replaced the page's four rows over three seeds (their
    goals, per-seed table and plot) with its one row. Now only every row over >= 3
    seeds rewrites them; a part says so and writes --json alone."""
    doc, plot = tmp_path / "page.md", tmp_path / "p.png"
    page = f"# Benchmarks\n{bench.BEGIN}\nthe four rows over three seeds\n{bench.END}\n"
    monkeypatch.setattr(bench, "logged_times", lambda cell_dir, row: {})  # no run here
    monkeypatch.setattr(bench, "plot_results", lambda results, path, title: open(
        path, "w").write("drawn"))
    lightly = f"--lightly_python={sys.executable}"
    for rows, seeds in (("random", "0"), ("random", "0,1,2"),
                        (",".join(bench.ROWS), "0,1")):
        doc.write_text(page)
        args = bench.parse_args([f"--rows={rows}", f"--seeds={seeds}"]
                                + ([lightly] if "lightly" in rows else []) + [
                                 f"--workdir={tmp_path / rows / seeds}", f"--doc={doc}",
                                 f"--plot={plot}"])
        bench.report_cells(_cells(args.rows, args.seeds), [], args, bench.BUDGETS["cpu"])
        assert doc.read_text() == page and not plot.exists(), (rows, seeds)
        assert f"{doc} and {plot} were left as they are: this run measured " in (
            capsys.readouterr().out)
        assert os.path.exists(args.json)
    args = bench.parse_args(["--seeds=0,1,2", lightly, f"--workdir={tmp_path / 'all'}",
                             f"--doc={doc}", f"--plot={plot}"])
    bench.report_cells(_cells(bench.ROWS, [0, 1, 2]), [], args, bench.BUDGETS["cpu"])
    assert doc.read_text() != page and plot.read_text() == "drawn"


def test_a_goal_met_on_one_seed_says_so(bench):
    one = dict(simclr_tf=dict(knn=[0.75], probe=[0.8]), random=dict(knn=[0.5], probe=[0.6]))
    lines = bench.goal_lines(one, fast=False)
    assert "- kNN: simclr_tf >= random init + 10 points: met (from 1 seed: no spread)" in lines
    three = {row: {m: v * 3 for m, v in metrics.items()} for row, metrics in one.items()}
    assert "- kNN: simclr_tf >= random init + 10 points: met" in bench.goal_lines(three, False)


@pytest.mark.parametrize("argv, message", [
    (["--replot", "--rows=simclr_tf"], "--rows would do nothing here (--replot only draws"),
    (["--replot", "--seeds=0", "--fast"], "--fast, --seeds would do nothing here"),
    (["--speed_rounds=1", "--seeds=0"], "--seeds would do nothing here (--speed_rounds "),
    (["--speed_epochs=1", "--rows=random"], "--speed_epochs would do nothing here"),
    (["--rows=random", "--lightly_python=/usr/bin/python3"],
     "--lightly_python would do nothing here (no lightly row in --rows)"),
])
def test_an_option_the_command_would_not_read_is_refused(argv, message, bench, tmp_path,
                                                         capsys):
    """Each was dropped: `--replot --rows=simclr_tf` redrew every row, `--speed_rounds
    --seeds=0` timed seed 0 whatever was given."""
    with pytest.raises(SystemExit) as info:
        bench.parse_args(argv + ([] if "--replot" in argv else [f"--workdir={tmp_path}"]))
    assert info.value.code == 2 and message in capsys.readouterr().err


class _Launched(Exception):
    """Raised by the recorder in place of a training process: what it was given."""


def test_every_option_reaches_the_cells_training(bench, tmp_path, monkeypatch):
    """A recorder in place of the training process: --threads, --data_dir,
    --mixed_precision and --budget reach the command and its environment (a planted
    drop of any fails here)."""
    class Feats:  # bench.Features' labels, enough to reach the training
        def labels_and_images(self, split):
            return np.zeros(4, np.int64), None

    def launched(command, log_path, children, env=None):
        raise _Launched(command, env)
    monkeypatch.setattr(bench, "run_logged", launched)
    args = bench.parse_args(["--rows=simclr_tf", "--seeds=4", "--threads=3",
                             f"--data_dir={tmp_path / 'data'}", "--mixed_precision=bfloat16",
                             "--budget=gpu", f"--workdir={tmp_path / 'w'}"])
    budget = bench.BUDGETS[args.budget]
    with pytest.raises(_Launched) as info:
        bench.run_cell("simclr_tf", 4, args, budget, Feats(), str(tmp_path / "cell"), None)
    command, env = info.value.args
    assert {"--seed=4", f"--data_dir={tmp_path / 'data'}", "--mixed_precision=bfloat16",
            f"--train_epochs={budget.epochs}", f"--train_batch_size={budget.batch_size}"
            } <= set(command)
    assert env["TF_NUM_INTRAOP_THREADS"] == "3"
