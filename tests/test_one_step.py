"""scripts/one_step.py: one whole training step from a model in the authors' released
format, against the authors' own step (docs/fidelity.md, "Whole-step parity").

The proof on a real model: the released-format R50 (../shared/reference), pretraining
and fine-tuning with the head alone trained, in float64 on both sides (no
summation-order noise), every variable's update against a fingerprint of the authors'
step recorded by dev/record_one_step_reference.py. The rest (bad input, the frozen
blocks' batch norm, the output's names) on a small ResNet-18 in the authors' layout
(the tool's subject there is its checks and its output, not the depth: an R50's
build and trace cost 2-3 times an R18's)."""
import errno
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from helpers import official_fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import one_step  # noqa: E402  pylint: disable=wrong-import-position
import script_io  # noqa: E402  pylint: disable=wrong-import-position

REFERENCE_VALUES = os.path.join(ROOT, "tests", "data", "one_step_r50_authors.npz")
# case: (train_mode, flags), as dev/record_one_step_reference.py ran the authors' step.
REFERENCE_CASES = {
    "pretrain": ("pretrain", ["--train_batch_size=4", "--warmup_epochs=0",
                              "--train_steps=10", "--weight_decay=1e-4"]),
    "finetune_head_sel1": ("finetune", [
        "--train_batch_size=4", "--warmup_epochs=0", "--train_steps=10",
        "--weight_decay=1e-4", "--learning_rate=0.1", "--fine_tune_after_block=4",
        "--ft_proj_selector=1"]),
}


def reference_views(train_mode, n=4, size=64, classes=1000, seed=2026):
    """The recorded cases' input: seeded uniform views (PCG64: the same everywhere)."""
    rng = np.random.default_rng(seed)
    channels = 6 if train_mode == "pretrain" else 3
    return dict(images=rng.uniform(size=(n, size, size, channels)).astype(np.float32),
                labels=rng.integers(0, classes, n).astype(np.int64))


def run_tool(*args):
    """`scripts/one_step.py args` in this process: (exit status, stderr is captured by
    the caller's capsys)."""
    return one_step.main(["one_step.py", *args])


@pytest.mark.large
@pytest.mark.parametrize("case", sorted(REFERENCE_CASES))
def test_one_step_on_the_released_r50_equals_the_authors_step(case, released_r50, tmp_path):
    mode, flags = REFERENCE_CASES[case]
    views = tmp_path / "views.npz"
    np.savez(views, **reference_views(mode))
    out = tmp_path / "out.npz"
    assert run_tool(f"--checkpoint={released_r50}", f"--views={views}", f"--out={out}",
                    f"--train_mode={mode}", "--float64", *flags) == 0
    after = dict(np.load(out))
    with np.load(REFERENCE_VALUES) as data:  # dev/record_one_step_reference.py
        recorded = dict(zip(data["keys"].tolist(), data["values"].tolist()))
    theirs = {key[len(case) + 1:]: value for key, value in recorded.items()
              if key.startswith(case + "/")}
    ours = one_step.fingerprint(after, one_step.initial_values(released_r50, after))
    assert set(ours) == set(theirs)
    for name in one_step.LOSSES:  # the losses of the step, float64 on both sides
        assert ours[name] == pytest.approx(theirs[name], rel=1e-6, abs=1e-12), name
    moved = 0
    for key, value in theirs.items():
        if key.endswith("/norm"):
            moved += value > 0
            size = value
            variable = key[:-len("/norm")]
            for part in ("norm", "projection"):
                assert abs(ours[f"{variable}/{part}"] - theirs[f"{variable}/{part}"]) <= \
                    1e-5 * size + 1e-12, (variable, part)
    # Something moved: pretraining trains every variable (and BN statistics); the
    # head-only fine-tune its heads, and every BN's statistics (the authors' frozen
    # blocks still update theirs).
    assert moved > 100


@pytest.fixture(scope="module")
def small_official(tmp_path_factory):
    """A small ResNet-18 (1/8 width, ImageNet stem, a 3-layer head, 10 classes) in the
    authors' layout."""
    return official_fixtures.write_small_official(
        tmp_path_factory.mktemp("small") / "r18",
        **dict(official_fixtures.SMALL_R50, encoder_options=dict(depth=18,
                                                                  width_multiplier=0.125)))[0]


def _views(path, mode, n=4, size=40, low=0.0, high=1.0, dtype=np.float32, labels=None,
           nan=0, inf=0):
    """Views of `mode` at `path`; `nan` NaN and `inf` Inf pixels among values in
    [low, high]."""
    rng = np.random.default_rng(0)
    channels = 6 if mode == "pretrain" else 3
    images = rng.uniform(low, high, size=(n, size, size, channels)).astype(dtype)
    images.reshape(-1)[:nan + inf] = [np.nan] * nan + [np.inf] * inf
    np.savez(path, images=images,
             labels=rng.integers(0, 10, n) if labels is None else np.asarray(labels))
    return str(path)


def _npy(path):
    """A plain array (numpy.save) at `path`."""
    with open(path, "wb") as f:
        np.save(f, np.zeros((4, 8, 8, 6), np.float32))
    return str(path)


def _truncated(path, keep=0.5):
    """The file at `path` cut to `keep` of its size, as a full disk leaves it."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(size * keep))
    return str(path)


def _one_line(capsys):
    """The one line the tool wrote to stderr (a refusal is one line)."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("make, expected", [
    (lambda p: _views(p, "finetune"), "[N, H, W, 6]: two views"),  # 3 channels to pretrain
    (lambda p: _views(p, "pretrain", dtype=np.float64), "must be float32"),
    (lambda p: _views(p, "pretrain", low=0.0, high=255.0), "in [0, 1]"),
    (lambda p: _views(p, "pretrain", labels=[1, 2, 3]), "labels must be integer class"),
    (lambda p: _views(p, "pretrain", labels=[0, 1, 2, 10]), "labels must be in [0, 10)"),
    (lambda p: str(p), "--views=%s: no such file"),
    (lambda p: _views(p, "pretrain", nan=1), "--views: images holds 1 NaN and 0 Inf values"),
    (lambda p: _views(p, "pretrain", nan=2, inf=3),
     "--views: images holds 2 NaN and 3 Inf values"),
    (lambda p: _views(p, "pretrain", size=0), "--views: images are empty"),
    (_npy, "--views=%s is not an .npz but a single array"),
    (lambda p: _truncated(_views(p, "pretrain")), "--views=%s is not a readable .npz"),
], ids=["channels", "dtype", "range", "labels_shape", "labels_range", "missing", "nan",
        "nan_inf", "zero_size", "npy", "truncated"])
def test_bad_views_are_refused_naming_the_problem(make, expected, small_official, tmp_path,
                                                  capsys):
    views = make(tmp_path / "views.npz")
    status = run_tool(f"--checkpoint={small_official}", f"--views={views}",
                      f"--out={tmp_path / 'out.npz'}")
    assert status == 2
    line = _one_line(capsys)
    assert line.startswith("one_step.py: --views") and expected.replace("%s", views) in line
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("flag, expected", [
    ("--train_batch_size=8", "--train_batch_size=8 but --views holds N=4"),
    ("--resnet_depth=50", "--resnet_depth=50 (the checkpoint: 18)"),
    ("--image_size=32", "--image_size=32: the authors' code builds the cifar stem then"),
    ("--use_blur", "applies no augmentation"),
    ("--fine_tune_after_block=2", "--fine_tune_after_block: is 2: freezing layers while "
     "pretraining is not supported"),  # run.py's rule (Config.validate)
    ("--ft_proj_selector=5", "--ft_proj_selector: must be in [-4, 3] for a 'nonlinear' "
     "head with 3 layer(s)"),
    ("--learning_rte=0.1", "Unknown command line flag 'learning_rte'"),
])
def test_flags_that_contradict_the_model_or_the_views_are_refused(flag, expected,
                                                                   small_official, tmp_path,
                                                                   capsys):
    views = _views(tmp_path / "views.npz", "pretrain")
    assert run_tool(f"--checkpoint={small_official}", f"--views={views}",
                    f"--out={tmp_path / 'out.npz'}", flag) == 2
    assert expected in capsys.readouterr().err


def test_an_out_path_that_cannot_be_written_is_refused_before_the_step(small_official,
                                                                      tmp_path, capsys):
    views = _views(tmp_path / "views.npz", "pretrain")
    for out, expected in ((tmp_path, "is a folder"),
                          (tmp_path / "missing" / "out.npz", "does not exist")):
        assert run_tool(f"--checkpoint={small_official}", f"--views={views}",
                        f"--out={out}") == 2
        assert expected in capsys.readouterr().err


def test_a_folder_that_is_not_an_authors_savedmodel_is_refused(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint").write_text("not a model")
    views = _views(tmp_path / "views.npz", "pretrain")
    assert run_tool(f"--checkpoint={tmp_path / 'run'}", f"--views={views}",
                    f"--out={tmp_path / 'out.npz'}") == 2
    assert "not a model in the authors' released TF2 format" in capsys.readouterr().err


def _never(*args, **kwargs):
    raise AssertionError("reached the TensorFlow part: the refusal should come before it")


@pytest.mark.parametrize("flags, n, expected", [
    (["--head_learning_rate=0.1", "--learning_rate=0"], 4, "--learning_rate: must be a finite number > 0"),
    (["--temperature=0"], 4, "--temperature: must be > 0"),
    (["--learning_rate=nan", "--warmup_epochs=0"], 4,
     "--learning_rate: must be a finite number"),
    (["--train_steps=-3"], 4, "--train_steps: must be >= 0"),
    (["--num_examples=-5", "--warmup_epochs=0"], 4, "--num_examples: must be a finite number > 0"),
    (["--momentum=-3"], 4, "--momentum: must be in [0, 1)"),
    (["--train_mode=finetune", "--head_learning_rate=0.1"], 4,
     "--head_learning_rate: applies only to the online linear head of pretraining"),
    (["--train_epochs=0"], 4, "--train_epochs: and --train_steps are both 0"),
    ([], 1, "--train_batch_size: must be >= 2 for pretraining"),
], ids=["head_rate_at_rate_0", "temperature_0", "rate_nan", "steps_negative",
        "examples_negative", "momentum_negative", "head_rate_finetune", "no_length",
        "one_example"])
def test_hyper_parameters_are_refused_by_run_pys_rules_before_tensorflow(
        flags, n, expected, tmp_path, capsys, monkeypatch):
    """run.py's own rules (Config.validate), before the checkpoint is even read (the
    folder here holds no model): one line naming the flag, status 2. Before, each was
    a traceback after the build (--head_learning_rate at --learning_rate=0: a
    ZeroDivisionError)."""
    monkeypatch.setattr(one_step, "read_checkpoint", _never)
    mode = "finetune" if "--train_mode=finetune" in flags else "pretrain"
    views = _views(tmp_path / "views.npz", mode, n=n)
    assert run_tool(f"--checkpoint={tmp_path}", f"--views={views}",
                    f"--out={tmp_path / 'out.npz'}", *flags) == 2
    assert _one_line(capsys).startswith("one_step.py: " + expected)


def _damaged(source, destination, how):
    """A copy of the model at `source` whose variables.data is truncated to a tenth
    ('truncated') or has bytes overwritten in its middle ('overwritten')."""
    shutil.copytree(source, destination)
    data = os.path.join(destination, "variables", "variables.data-00000-of-00001")
    if how == "truncated":
        _truncated(data, keep=0.1)
    else:
        with open(data, "r+b") as f:
            f.seek(os.path.getsize(data) // 2)
            f.write(b"\xff" * 4096)
    return str(destination)


@pytest.mark.parametrize("how", ["missing", "truncated", "overwritten"])
def test_a_missing_or_damaged_checkpoint_is_named_as_such(how, small_official, tmp_path,
                                                          capsys, monkeypatch):
    """Not 'not the authors' format' (the newcomer's and the catalogue's finding): a
    missing path says so, a damaged file says it cannot be read, before the build;
    compare says the same of its --checkpoint."""
    monkeypatch.setattr(one_step, "build_model", _never)
    checkpoint = (str(tmp_path / "no_such_model") if how == "missing"
                  else _damaged(small_official, tmp_path / "model", how))
    expected = (f"--checkpoint={checkpoint}: no such file or folder" if how == "missing"
                else f"--checkpoint={checkpoint}: the checkpoint cannot be read (")
    views = _views(tmp_path / "views.npz", "pretrain")
    assert run_tool(f"--checkpoint={checkpoint}", f"--views={views}",
                    f"--out={tmp_path / 'out.npz'}") == 2
    assert _one_line(capsys).startswith("one_step.py: " + expected)
    output = tmp_path / "step.npz"
    np.savez(output, total_loss=np.float32(1.0))
    assert run_tool("compare", str(output), str(output), f"--checkpoint={checkpoint}") == 2
    assert _one_line(capsys).startswith("one_step.py: " + expected)


@pytest.fixture(scope="module")
def authors_step(small_official):
    """(before, after): the small model's variables, and an authors'-side out.npz of a
    step from it (every variable moved by a seeded update; the five scalars)."""
    before = official_fixtures.read_values(small_official)
    rng = np.random.default_rng(1)
    after = {name: (value + 1e-2 * rng.standard_normal(value.shape)).astype(np.float32)
             for name, value in before.items()}
    after.update(contrast_loss=np.float32(8.7), supervised_loss=np.float32(2.4),
                 weight_decay_loss=np.float32(3e-6), total_loss=np.float32(11.1),
                 learning_rate=np.float32(0.0047))
    return before, after


def _scaled(before, after, factor):
    """`after` with every update (after - before) times `factor`."""
    return {name: (before[name] + factor * (value - before[name])).astype(np.float32)
            if name in before else value for name, value in after.items()}


def _with(arrays, **changes):
    """`arrays` with `changes` (a value of None drops the name)."""
    changed = dict(arrays, **changes)
    return {name: value for name, value in changed.items() if value is not None}


def _variables(arrays, value):
    """`arrays` with every variable (not the scalars) filled with `value`."""
    return {name: np.full_like(array, value) if name not in one_step.SCALARS else array
            for name, array in arrays.items()}


KERNEL = "head_supervised/linear_layer/dense_3/kernel"
# case: (ours from (before, theirs), theirs from (before, theirs), extra flags,
#        status, texts of the verdict line)
COMPARE_CASES = {
    "equal": (lambda b, t: t, lambda b, t: t, [], 0, ["PASS"]),
    "within": (lambda b, t: _scaled(b, t, 1 + 1e-5), lambda b, t: t, [], 0, ["PASS"]),
    # |1.5 u - u| / |u| = 0.5 for every variable
    "update_over": (lambda b, t: _scaled(b, t, 1.5), lambda b, t: t, [], 1,
                    ["FAIL: ", "121 of 121 update differences over --update_tolerance: ",
                     "5.00e-01"]),
    "nan_every_variable": (lambda b, t: _variables(t, np.nan), lambda b, t: t, [], 1,
                           ["FAIL: ours: ", f"{KERNEL} holds 640 NaN and 0 Inf values",
                            "and 116 more", "121 of 121 update differences over"]),
    "nan_losses": (lambda b, t: _with(t, **{n: np.float32(np.nan) for n in one_step.SCALARS}),
                   lambda b, t: t, [], 1,
                   ["FAIL: ours: contrast_loss holds 1 NaN and 0 Inf values",
                    "over --loss_tolerance: contrast_loss nan"]),
    "missing_losses": (lambda b, t: _with(t, total_loss=None, contrast_loss=None),
                       lambda b, t: t, [], 1, ["FAIL: ours lacks contrast_loss, total_loss"]),
    "missing_variable": (lambda b, t: t, lambda b, t: _with(t, **{KERNEL: None}), [], 1,
                         [f"FAIL: the authors' lacks {KERNEL}"]),
    "authors_inf": (lambda b, t: t,
                    lambda b, t: _with(t, **{KERNEL: np.where(
                        np.arange(t[KERNEL].size).reshape(t[KERNEL].shape) == 0, np.inf,
                        t[KERNEL]).astype(np.float32)}), [], 1,
                    [f"the authors': {KERNEL} holds 0 NaN and 1 Inf values"]),
    "loss_over": (lambda b, t: _with(t, total_loss=np.float32(11.1 * 1.001)),
                  lambda b, t: t, [], 1, ["FAIL: over --loss_tolerance: total_loss 1.00e-03"]),
    "loss_within_a_wider_tolerance": (
        lambda b, t: _with(t, total_loss=np.float32(11.1 * 1.001)), lambda b, t: t,
        ["--loss_tolerance=0.01"], 0, ["PASS"]),
}


@pytest.mark.parametrize("case", list(COMPARE_CASES))
def test_compare_fails_on_every_planted_fault(case, authors_step, small_official, tmp_path,
                                             capsys):
    """compare's verdict, its last line: PASS only when both files hold the same names,
    all finite, within the tolerances, which it prints. Before, NaN everywhere and a
    missing loss passed (OK, status 0)."""
    make_ours, make_theirs, flags, status, texts = COMPARE_CASES[case]
    before, after = authors_step
    ours, theirs = tmp_path / "ours.npz", tmp_path / "theirs.npz"
    np.savez(ours, **make_ours(before, after))
    np.savez(theirs, **make_theirs(before, after))
    assert run_tool("compare", str(ours), str(theirs), f"--checkpoint={small_official}",
                    *flags) == status
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("tolerances: --update_tolerance=0.001 ")
    assert ("--loss_tolerance=0.01" if flags else "--loss_tolerance=1e-05") in lines[-2]
    for text in texts:
        assert text in lines[-1], (text, lines[-1])


@pytest.mark.parametrize("args, expected", [
    (["--update_tolerance=nan"], "--update_tolerance: must be a finite number"),
    (["--update_tolerance=inf"], "--update_tolerance: must be a finite number"),
    (["--loss_tolerance=-1"], "--loss_tolerance: must be >= 0"),
    (["--checkpoint="], "--checkpoint is required: the model both steps started from"),
    (["OURS=missing"], "OURS.npz=%s: no such file"),
    (["AUTHORS=no_scalars"], "AUTHORS.npz=%s holds none of a step's scalars"),
    (["AUTHORS=npy"], "AUTHORS.npz=%s is not an .npz but a single array"),
    (["OURS=truncated"], "OURS.npz=%s is not a readable .npz"),
    (["BOTH=renamed"], "does not hold the outputs' variables: renamed (absent)"),
], ids=["nan_tolerance", "inf_tolerance", "negative_tolerance", "no_checkpoint",
        "missing_file", "no_scalars", "npy", "truncated", "other_checkpoint"])
def test_compare_refuses_bad_input_in_one_line(args, expected, authors_step, small_official,
                                               tmp_path, capsys):
    """Status 2 and one line each; before, a NaN tolerance passed a real failure, and
    AUTHORS.npz without its scalars, no --checkpoint or a missing file were
    tracebacks."""
    _, after = authors_step
    files = {"OURS": tmp_path / "ours.npz", "AUTHORS": tmp_path / "theirs.npz"}
    np.savez(files["OURS"], **after)
    np.savez(files["AUTHORS"], **after)
    flags = [f"--checkpoint={small_official}"]
    for arg in args:
        side, _, fault = arg.partition("=")
        if side.startswith("--"):
            flags.append(arg)
            continue
        path = files["OURS" if side == "BOTH" else side]
        if fault == "missing":
            path.unlink()
        elif fault == "no_scalars":
            np.savez(path, **{k: v for k, v in after.items() if k not in one_step.SCALARS})
        elif fault == "npy":
            _npy(path)
        elif fault == "truncated":
            _truncated(str(path))
        else:  # a variable the checkpoint does not hold, in both outputs
            for each in files.values():
                np.savez(each, **after, renamed=np.zeros(3, np.float32))
        expected = expected.replace("%s", str(path))
    assert run_tool("compare", str(files["OURS"]), str(files["AUTHORS"]), *flags) == 2
    line = _one_line(capsys)
    assert line.startswith("one_step.py: ") and expected in line, line


def _frozen(before, after, names):
    """`after` with `names` left exactly as they were (a step that froze them)."""
    return dict(after, **{name: before[name] for name in names})


def test_compare_fails_where_one_step_moved_what_the_other_left_unchanged(
        authors_step, small_official, tmp_path, capsys):
    """The authors' step leaves 25 variables (the stem and block_group1, as a frozen
    fine-tune) unchanged; ours moves them by 5e-4, within --update_tolerance as an
    absolute difference: FAIL naming them (before: PASS, the ratio printed over an
    update of size 0). And the other way: ours leaves unchanged what theirs moved."""
    before, after = authors_step
    frozen = sorted(name for name in before
                    if "block_group1/" in name or "initial_conv" in name)[:25]
    assert len(frozen) == 25
    theirs = _frozen(before, after, frozen)
    ours = dict(theirs, **{name: (before[name] + np.float32(5e-4)).astype(np.float32)
                           for name in frozen})
    for mine, other, text in (
            (ours, theirs, "ours moved 25 variables the authors' step left unchanged: "),
            (theirs, ours, "ours left unchanged 25 variables the authors' step moved: ")):
        files = tmp_path / "ours.npz", tmp_path / "theirs.npz"
        np.savez(files[0], **mine)
        np.savez(files[1], **other)
        assert run_tool("compare", *map(str, files), f"--checkpoint={small_official}") == 1
        verdict = capsys.readouterr().out.strip().splitlines()[-1]
        assert verdict.startswith("FAIL: ") and text in verdict, verdict
        assert "update differences over" not in verdict  # said once, as moved
    np.savez(files[0], **theirs)  # both left them unchanged: PASS
    np.savez(files[1], **theirs)
    assert run_tool("compare", *map(str, files), f"--checkpoint={small_official}") == 0


def test_compare_refuses_a_checkpoint_the_steps_did_not_start_from(
        authors_step, small_official, tmp_path, capsys):
    """Ours 5% off the authors' on every update: FAIL from the start; from another
    model's weights of the same architecture (every "update" as large as the weights)
    the error drowns, and it passed (status 0). Now status 2, one line naming the
    output and the checkpoint; the same for one side started elsewhere."""
    before, after = authors_step
    other = official_fixtures.write_small_official(
        tmp_path / "other", seed=1, **dict(official_fixtures.SMALL_R50, encoder_options=dict(
            depth=18, width_multiplier=0.125)))[0]
    ours, theirs = tmp_path / "ours.npz", tmp_path / "theirs.npz"
    after = _scaled(before, after, 0.01)  # updates of about 1e-4, as the report's
    np.savez(ours, **_scaled(before, after, 1.05))
    np.savez(theirs, **after)
    assert run_tool("compare", str(ours), str(theirs), f"--checkpoint={small_official}") == 1
    capsys.readouterr()
    assert run_tool("compare", str(ours), str(theirs), f"--checkpoint={other}") == 2
    line = _one_line(capsys)
    assert line.startswith(f"one_step.py: OURS.npz={ours} is not one step from "
                           f"--checkpoint={other}: "), line
    assert "pass the model both steps started from" in line
    far = official_fixtures.read_values(other)  # the authors' side started elsewhere
    np.savez(theirs, **dict(after, **{name: far[name] + after[name] - before[name]
                                      for name in before}))
    assert run_tool("compare", str(ours), str(theirs), f"--checkpoint={small_official}") == 2
    assert _one_line(capsys).startswith(f"one_step.py: AUTHORS.npz={theirs} is not one "
                                        "step from ")


@pytest.mark.parametrize("args, expected", [
    (["compare", "a.npz", "b.npz", "--checkpoint=c", "--learning_rate=0.1"],
     "--learning_rate would do nothing here (compare reads two finished steps' outputs"),
    (["compare", "a.npz", "b.npz", "--checkpoint=c", "--views=v.npz", "--float64"],
     "--views, --float64 would do nothing here"),
    (["--checkpoint=c", "--views=v.npz", "--out=o.npz", "--update_tolerance=0.1"],
     "--update_tolerance would do nothing here (the tolerances apply to compare only)"),
], ids=["step_flag_to_compare", "two_to_compare", "tolerance_to_the_step"])
def test_a_flag_the_chosen_side_does_not_read_is_refused(args, expected, capsys):
    """Before, `compare --learning_rate=0.1` compared as if it had not been given, and
    the step took --update_tolerance without a word."""
    assert run_tool(*args) == 2
    line = _one_line(capsys)
    assert line.startswith("one_step.py: ") and expected in line, line


def test_errors_that_need_no_tensorflow_come_before_it_is_imported(tmp_path):
    """A missing path, a file that is no .npz, a bad flag or tolerance, an unknown
    subcommand: one line each, status 2, and TensorFlow (8-15 s to import here) never
    imported."""
    views, npy = _views(tmp_path / "views.npz", "pretrain"), _npy(tmp_path / "x.npy")
    out = f"--out={tmp_path / 'out.npz'}"
    commands = [
        [f"--checkpoint={tmp_path / 'no_such_model'}", f"--views={views}", out],
        [f"--checkpoint={tmp_path}", f"--views={tmp_path / 'no_such.npz'}", out],
        [f"--checkpoint={tmp_path}", f"--views={npy}", out],
        [f"--checkpoint={tmp_path}", f"--views={views}", out, "--temperature=0"],
        ["compare", views, views, f"--checkpoint={tmp_path}", "--update_tolerance=nan"],
        ["compare", str(tmp_path / "no_such.npz"), views, f"--checkpoint={tmp_path}"],
        ["frobnicate"],
    ]
    code = ("import json, sys; sys.path.insert(0, 'scripts'); import one_step; "
            "codes = [one_step.main(['one_step.py', *c]) for c in json.loads(sys.argv[1])]; "
            "print(json.dumps([codes, 'tensorflow' in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", code, json.dumps(commands)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    codes, imported = json.loads(result.stdout.splitlines()[-1])
    assert codes == [2] * len(commands) and not imported, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == len(commands) and all(line.startswith("one_step.py: ")
                                               for line in lines), lines


def _full_disk_savez(file, **arrays):  # pylint: disable=unused-argument
    """np.savez on a full disk: part of the zip, then ENOSPC."""
    file.write(b"PK\x03\x04" + bytes(1000))
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_leaves_out_as_it_was(tmp_path, monkeypatch):
    """out.npz is whole or absent: a full disk mid-write is a WriteFailed naming it,
    nothing partial at --out (before: a truncated zip), an older file kept."""
    out = tmp_path / "out.npz"
    monkeypatch.setattr(one_step.np, "savez", _full_disk_savez)
    for old in (None, b"an older out.npz"):
        if old:
            out.write_bytes(old)
        with pytest.raises(script_io.WriteFailed, match=f"{out} could not be written "
                           r"\(No space left on device\)"):
            one_step.write_out(str(out), {"total_loss": np.float32(1.0)})
        assert os.listdir(tmp_path) == ([] if old is None else ["out.npz"])
        assert old is None or out.read_bytes() == old


@pytest.mark.large
def test_a_full_disk_at_out_is_one_line_after_the_step(small_official, tmp_path, capsys,
                                                       monkeypatch):
    """The whole tool: the step runs, its write fails (ENOSPC injected at np.savez):
    status 2, one line naming --out, nothing at --out (before: a traceback and a
    truncated zip there)."""
    views = _views(tmp_path / "views.npz", "pretrain")
    out = tmp_path / "out.npz"
    monkeypatch.setattr(one_step.np, "savez", _full_disk_savez)
    assert run_tool(f"--checkpoint={small_official}", f"--views={views}", f"--out={out}",
                    "--warmup_epochs=0") == 2
    assert _one_line(capsys) == (f"one_step.py: {out} could not be written (No space left "
                                 "on device); nothing was written there")
    assert sorted(os.listdir(tmp_path)) == ["views.npz"]


@pytest.mark.large
def test_a_head_only_finetune_step_names_every_variable_and_follows_frozen_batch_norm(
        small_official, tmp_path):
    """out.npz holds every variable under the authors' names (float32) and the
    step's scalars; with the encoder frozen (--fine_tune_after_block=4) no encoder
    weight moves, and its BN statistics move as the authors' code moves them
    (--frozen_batch_norm=batch, the tool's default) or not at all ('moving', run.py's
    default)."""
    views = _views(tmp_path / "views.npz", "finetune")
    _, names = official_fixtures.official.read_official_names(small_official)
    before = one_step.initial_values(small_official, names)
    stats = [name for name in names if name.startswith("resnet/") and "moving_mean" in name]
    kernels = [name for name in names if name.startswith("resnet/") and name.endswith("kernel")]
    moved = {}
    for frozen in ("batch", "moving"):
        out = tmp_path / f"{frozen}.npz"
        assert run_tool(f"--checkpoint={small_official}", f"--views={views}", f"--out={out}",
                        "--train_mode=finetune", "--fine_tune_after_block=4",
                        "--warmup_epochs=0", "--train_steps=5",
                        f"--frozen_batch_norm={frozen}") == 0
        after = dict(np.load(out))
        assert set(after) == set(names) | set(one_step.SCALARS)
        assert all(after[name].dtype == np.float32 for name in names)
        assert after["contrast_loss"] == 0 and after["supervised_loss"] > 0
        assert after["total_loss"] == pytest.approx(
            after["supervised_loss"] + after["weight_decay_loss"], rel=1e-6)
        for name in kernels:
            np.testing.assert_array_equal(after[name], before[name])
        head = [n for n in names if n.startswith("head_supervised/") and n.endswith("kernel")]
        assert np.any(after[head[0]] != before[head[0]])
        moved[frozen] = [np.any(after[name] != before[name]) for name in stats]
    assert all(moved["batch"]) and not any(moved["moving"])


def _unread(source, names):
    """The flags among `names` that `source` never reads (FLAGS.name or FLAGS[name];
    CONFIG_FLAGS are read together, into run.py's Config)."""
    return [name for name in names if name not in one_step.CONFIG_FLAGS
            and name not in one_step.IGNORED
            and f"FLAGS.{name}" not in source and f'FLAGS["{name}"]' not in source]


def test_every_flag_of_the_tool_is_read_or_named_as_no_effect():
    """Each flag the tool defines reaches the step or the comparison, or is one of
    IGNORED (the authors' run.py flags that change nothing in one step, documented).
    The control: the source with one flag's reads removed is caught."""
    with open(one_step.__file__) as f:
        source = f.read()
    assert _unread(source, list(one_step.FLAGS)) == []
    planted = source.replace("FLAGS.ft_proj_selector", "0")
    assert _unread(planted, list(one_step.FLAGS)) == ["ft_proj_selector"]
