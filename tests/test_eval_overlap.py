"""An evaluation on examples that trained the weights, filled the kNN bank or fitted
the probe is refused before anything is built (`preflight.check_eval_overlap` over
`evaluation.overlap.shared_examples`),
naming both flags and the shared examples, unless --allow_eval_overlap; the result
then records it. Splits are compared by position of the same base split; image
folders by file (any path, link, hard link, or a byte-identical copy). What trained
the weights is every run up their chain (a fine-tune's pretraining; a teacher's is a
warning) whose dataset holds the same examples (a folder by its real path, the tinted
Fashion-MNIST as the grey one)."""
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.run import experiment, preflight
from simclr_tf.run.modes import evaluations
from simclr_tf.config.tables import modes
from simclr_tf.config import ConfigError
from simclr_tf.data import registry
from simclr_tf.evaluation import overlap
from simclr_tf.rundir import records

from helpers import official_fixtures
from helpers.fashion_mnist_files import write_fashion_mnist
from helpers.run_fixtures import config, write_run


def _check(**overrides):
    cfg = config(**overrides)
    return preflight.check(cfg, tf.distribute.get_strategy(), preflight.load_source(cfg))


@pytest.fixture(scope="module")
def digits():
    return preflight.load_source(config(model_dir="/unused"))


def test_shared_examples_by_position(digits):
    shared = lambda a, b: overlap.shared_examples(digits, a, b)[:2]  # noqa: E731
    assert shared("test", "test") == (360, 360)
    assert shared("train", "test") == (0, 360)
    assert shared("train+test", "test[:100]") == (100, 100)
    first = digits.split_ranges("train[:60%]")[0][2]   # TFDS's own rounding
    second = digits.split_ranges("train[50%:]")[0][1]
    assert shared("train[:60%]", "train[50%:]") == (first - second,
                                                    digits.num_examples("train[50%:]"))
    assert first - second > 100
    assert shared("train[:10]+train[:10]", "train[5:20]") == (5, 15)  # counted once
    with pytest.raises(ValueError):
        shared("train", "no_such_split")


@pytest.mark.parametrize("overrides,flag,other,count", [
    # Pretraining on the kNN monitor's queries.
    (dict(train_split="test", knn_eval_split="test"), "knn_eval_split", "train_split", 360),
    # A kNN bank that holds the queries.
    (dict(knn_bank_split="test[:50]", knn_eval_split="test"), "knn_eval_split",
     "knn_bank_split", 50),
    # train_then_eval, and a fine-tune's final linear probe, on overlapping slices.
    (dict(mode="train_then_eval", train_split="train[:60%]", eval_split="train[50%:]"),
     "eval_split", "train_split", None),
    (dict(train_mode="finetune", final_linear_probe=True, train_split="train+test",
          eval_split="test"), "eval_split", "train_split", 360),
])
def test_a_training_run_that_evaluates_on_its_training_examples_is_refused(
        tmp_path, overrides, flag, other, count):
    with pytest.raises(ConfigError) as raised:
        _check(model_dir=str(tmp_path / "run"), train_steps=1, **overrides)
    message = str(raised.value)
    assert raised.value.flag == flag and f"--{other}=" in message, message
    assert "--allow_eval_overlap" in message
    if count is not None:
        assert f"shares {count} of its" in message
    assert not os.path.exists(tmp_path / "run")  # nothing written
    context = _check(model_dir=str(tmp_path / "run"), train_steps=1,
                     allow_eval_overlap=True, **overrides)
    (found,) = context.eval_overlap.allowed
    assert (found["eval_flag"], found["train_flag"]) == (flag, other)
    assert found["examples"] > 0 and found["of"] >= found["examples"]


def test_disjoint_or_unevaluated_splits_pass(tmp_path):
    run = dict(model_dir=str(tmp_path / "run"), train_steps=1)
    assert _check(**run).eval_overlap is None  # pretraining that evaluates nothing
    assert _check(**run, eval_split="train").eval_overlap is None  # not evaluated
    assert _check(**run, knn_eval_split="test").eval_overlap.allowed == []
    assert _check(**run, mode="train_then_eval", train_split="train[:80%]",
                  eval_split="train[80%:]").eval_overlap.allowed == []


def test_the_distillation_monitor_and_reader_modes_compare_their_splits():
    distill = config(train_mode="distill", teacher="/t", model_dir="/m", train_steps=1)
    assert preflight.evaluated_pairs(distill, modes.get("train"))[0][:4] == (
        "train_split", "train", "eval_split", "test")
    probe = config(mode="linear_probe", checkpoint="/c", train_split="test[:10]")
    assert preflight.evaluated_pairs(probe, modes.get("linear_probe"))[0][:4] == (
        "train_split", "test[:10]", "eval_split", "test")
    assert preflight.evaluated_pairs(config(mode="embed", checkpoint="/c"),
                                     modes.get("embed")) == []


def test_a_probe_or_an_eval_of_the_tiny_run_on_its_training_examples_is_refused(tiny_run):
    """The probe's own training split against its test split; the run that trained
    the weights (its flags.json: --train_split=train) against --eval_split."""
    with pytest.raises(ConfigError, match=r"--eval_split: 'test' shares 360 of its 360 "
                       r"examples \(all of them\) with --train_split='test'"):
        _check(mode="linear_probe", model_dir=tiny_run.directory, train_split="test")
    with pytest.raises(ConfigError) as raised:
        _check(mode="linear_probe", model_dir=tiny_run.directory, train_split="test[:100]",
               eval_split="train[:50]")
    assert "shares 50 of its 50 examples (all of them) with --train_split='train' (what " \
        f"trained the weights: its flags.json in {tiny_run.directory})" in str(raised.value)
    with pytest.raises(ConfigError, match="--eval_split: 'train.:64.' shares 64"):
        _check(mode="eval", model_dir=tiny_run.directory, eval_split="train[:64]")
    # The tiny run's own record: its kNN monitor's queries are disjoint from train.
    result = json.load(open(os.path.join(tiny_run.directory, "result.json")))
    assert (result["eval_overlaps_train"], result["eval_overlap"]) == (False, [])


def test_every_evaluator_of_an_eval_is_checked_against_what_trained_the_weights(tiny_run):
    """--mode=eval --evaluators=knn: the kNN queries against the run's own training
    split (its flags.json), not only against the bank; --evaluators=linear_probe:
    the probe's splits, in preflight (issue 44, items 1 and 6)."""
    with pytest.raises(ConfigError) as raised:
        _check(mode="eval", model_dir=tiny_run.directory, evaluators="knn",
               train_split="test[:100]", knn_eval_split="train[:50]")
    assert str(raised.value).startswith("--knn_eval_split")
    assert "shares 50 of its 50 examples (all of them) with --train_split='train' (what " \
        f"trained the weights: its flags.json in {tiny_run.directory})" in str(raised.value)
    with pytest.raises(ConfigError, match=r"--eval_split: 'test' shares 360 of its 360 "
                       r"examples \(all of them\) with --train_split='test' \(the probe's"):
        _check(mode="eval", model_dir=tiny_run.directory, evaluators="linear_probe",
               train_split="test")
    allowed = _check(mode="eval", model_dir=tiny_run.directory, evaluators="linear_probe",
                     train_split="test", allow_eval_overlap=True)
    assert [(each["train_split"], each["eval_split"]) for each in
            allowed.eval_overlap.allowed] == [
        ("test", "test")]


def test_an_allowed_overlap_is_in_the_result(tiny_run, tmp_path):
    cfg = tiny_run.copy_to(tmp_path / "run", mode="eval", eval_split="train[:64]",
                           allow_eval_overlap=True)
    result = experiment.run(cfg)
    assert result["eval/num_examples"] == 64
    recorded = json.load(open(os.path.join(cfg.model_dir, "result.eval.json")))
    assert recorded["eval_overlaps_train"] is True
    assert recorded["eval_overlap"] == [dict(
        train_flag="train_split", train_split="train", eval_flag="eval_split",
        eval_split="train[:64]", examples=64, of=64, trained="the training data")]
    assert json.load(open(os.path.join(cfg.model_dir, "flags.eval.json")))[
        "allow_eval_overlap"] is True
    # The chain compared: the run itself (a pretraining from random weights).
    assert recorded["eval_overlaps_teacher"] == []
    assert recorded["eval_trained_by"] == [dict(
        weights=os.path.join(cfg.model_dir, "ckpt-4"), role="the weights", teacher=False,
        run=cfg.model_dir, dataset="digits", train_split="train", compared=True)]


def _png(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(path, tf.io.encode_png(np.full([8, 8, 3], value, np.uint8)))


def test_an_evaluated_split_of_one_class_is_named_with_its_class_counts(tmp_path):
    """A class-sorted image folder's 'train[90%:]' holds its last class only: a
    warning names the counts and says why (issue 44, item 5); a split with the
    classes says nothing."""
    for name, value in (("cat", 10), ("dog", 200)):
        for i in range(10):
            _png(str(tmp_path / "pets" / name / f"{i}.png"), value + i)
    folder = f"folder:{tmp_path / 'pets'}"
    cfg = config(dataset=folder, train_split="train[:90%]", knn_eval_split="train[90%:]",
                 eval_split="", model_dir=str(tmp_path / "run"))
    source = preflight.load_source(cfg)
    said = preflight.note_eval_classes(cfg, source, modes.get("train"))
    assert said == ["--knn_eval_split='train[90%:]' holds 1 of the dataset's 2 classes (dog: 2): "
                    "its accuracy measures those classes only. Image folders list their "
                    "files class by class, so a slice of one split ('train[90%:]') holds "
                    "the classes at its end: hold out a split folder of its own (train/ "
                    "and val/ subfolders) instead."]
    mixed = config(dataset=folder, train_split="train[5:15]", knn_eval_split="train[:5]",
                   eval_split="", model_dir=str(tmp_path / "run"))
    assert preflight.note_eval_classes(mixed, source, modes.get("train")) == [
        "--knn_eval_split='train[:5]' holds 1 of the dataset's 2 classes (cat: 5): its "
        "accuracy measures those classes only. Image folders list their files class by "
        "class, so a slice of one split ('train[90%:]') holds the classes at its end: "
        "hold out a split folder of its own (train/ and val/ subfolders) instead."]
    both = config(dataset=folder, train_split="train[5:15]",
                  knn_eval_split="train[:5]+train[15:]", eval_split="",
                  model_dir=str(tmp_path / "run"))
    assert preflight.note_eval_classes(both, source, modes.get("train")) == []


def test_image_folders_share_files_by_identity_or_bytes(tmp_path):
    """test/ holds a link to a training image, a hard link to one, a byte-identical
    copy of one and two images of its own: 3 of 5 are training images."""
    root = tmp_path / "images"
    for i in range(6):
        _png(str(root / "train" / "a" / f"{i}.png"), 10 * i)
    test = root / "test" / "a"
    _png(str(test / "own1.png"), 200)
    _png(str(test / "own2.png"), 201)
    os.symlink(root / "train" / "a" / "0.png", test / "link.png")
    os.link(root / "train" / "a" / "1.png", test / "hard.png")
    shutil.copy(root / "train" / "a" / "2.png", test / "copy.png")
    source = preflight.load_source(config(dataset=f"folder:{root}", model_dir="/unused"))
    assert overlap.shared_examples(source, "train", "test") == (3, 5, "image files")
    assert overlap.shared_examples(source, "train[:2]", "test")[:2] == (2, 5)
    assert overlap.shared_examples(source, "test", "test")[:2] == (5, 5)
    with pytest.raises(ConfigError, match="--eval_split: 'test' shares 3 of its 5 image "
                       "files with --train_split='train'"):
        # A fine-tune: pretraining on this one class is refused for its head first.
        _check(dataset=f"folder:{root}", mode="train_then_eval", train_mode="finetune",
               model_dir=str(tmp_path / "run"), train_steps=1)
    # Without copies looked for (over the reading budget), links count, copies not.
    original = overlap.COPY_CHECK_MAX_BYTES
    try:
        overlap.COPY_CHECK_MAX_BYTES = 0
        assert overlap.shared_examples(source, "train", "test")[:2] == (2, 5)
    finally:
        overlap.COPY_CHECK_MAX_BYTES = original


def test_the_evaluators_refuse_overlapping_splits_outside_a_run_too(digits):
    """Built in code (a notebook, scripts/transfer_table.py), not through run.py's
    preflight: a kNN bank, a probe's training split, holding test examples is a
    ValueError before any feature is computed, unless allow_overlap=True."""
    from simclr_tf.evaluation import knn, transfer  # pylint: disable=import-outside-toplevel
    strategy = tf.distribute.get_strategy()
    with pytest.raises(ValueError, match=r"'test\[:10\]' shares 10 of its 10 examples "
                       r"with 'test' \(the kNN bank\).*allow_overlap=True"):
        knn.KnnEval(strategy, source=digits, bank_split="test", query_split="test[:10]",
                    image_size=16)
    assert knn.KnnEval(strategy, source=digits, bank_split="test", image_size=16,
                       query_split="test[:10]", allow_overlap=True).bank_size == 360
    with pytest.raises(ValueError, match="shares 360 of its 360 examples with 'train.test' "
                       r"\(the probe's training split and the kNN bank\)"):
        transfer.evaluate_protocols(object(), digits, image_size=16,
                                    train_split="train+test", test_split="test")
    with pytest.raises(ValueError, match="the probe's training split"):
        transfer.FinalProbeEval(strategy, source=digits, image_size=16, train_split="test",
                                test_split="test", baseline=lambda images: images)
    assert overlap.check_disjoint(digits, "train", "test", what="x") == 0
    assert overlap.check_disjoint(digits, "test", "test", what="x", allow=True) == 360


# --- What trained the weights: datasets by identity, the chain of runs --------------------
# Items 13 and 14 of the fault catalogue of 2026-12-05: the weights' own run was
# compared only when its --dataset was spelt as the evaluation's, and a fine-tune's
# pretraining never. Each run directory is written by `write_run` (a checkpoint and
# flags.json, no training); preflight reads only their records.


def test_dataset_identity():
    identity = registry.dataset_identity
    assert identity("fashion_mnist_tinted") == identity("fashion_mnist") == "fashion_mnist"
    assert identity("cifar10") == "cifar10" and identity("digits") == "digits"
    here = os.path.realpath(".")
    assert identity("folder:.") == identity(f"folder:{here}/") == f"folder:{here}"
    assert identity("folder:x/../y") == f"folder:{here}/y" != identity("folder:x")
    registry.register_dataset("digits_inverted", lambda data_dir: None,
                              examples_of="digits")
    try:
        assert identity("digits_inverted") == "digits"
        registry.register_dataset("digits_inverted", lambda data_dir: None)
        assert identity("digits_inverted") == "digits_inverted"
    finally:
        registry._FACTORIES.pop("digits_inverted")  # pylint: disable=protected-access


# The flags --mode=eval reads from a fine-tune's flags.json (`inherit`).
FINE_TUNED = dict(train_mode="finetune", train_split="train[700:1000]")


@pytest.fixture
def fine_tune(tmp_path):
    """A pretraining run on train[:700] and a fine-tune of it on train[700:1000]."""
    pretrained, tuned = tmp_path / "pretrained", tmp_path / "finetuned"
    write_run(pretrained, train_split="train[:700]")
    write_run(tuned, checkpoint=str(pretrained), **FINE_TUNED)
    return pretrained, tuned


def test_a_resumed_fine_tune_keeps_the_weights_it_started_from(fine_tune):
    """A run that continues its checkpoints does not read --checkpoint: its flags.json
    keeps the one the first step started from (else a resumed fine-tune, given no
    --checkpoint, would drop its pretraining from the chain)."""
    pretrained, tuned = fine_tune
    for given in (None, "/another/run"):
        records.start_run_record(config(model_dir=str(tuned), **FINE_TUNED, train_steps=2,
                                        checkpoint=given), continues=True).write()
        flags = json.load(open(tuned / "flags.json"))
        assert (flags["checkpoint"], flags["train_steps"]) == (str(pretrained), 2)


def _eval(weights, tmp_path, **overrides):
    """preflight.check of --mode=eval of `weights` (into a new model_dir)."""
    return _check(mode="eval", checkpoint=str(weights), model_dir=str(tmp_path / "eval"),
                  **overrides)


@pytest.fixture
def image_folder(tmp_path):
    """A folder of 24 PNGs in two classes, and a run pretrained on its first half."""
    root = tmp_path / "data" / "images"
    for c in range(2):
        for i in range(12):
            _png(str(root / f"c{c}" / f"{i}.png"), 60 * c + i)
    run = tmp_path / "pretrained"
    write_run(run, dataset=f"folder:{root}", train_split="train[:50%]")
    return root, run


@pytest.mark.parametrize("spelling", ["{root}", "{root}/", "{data}/../data/images",
                                      "{data}/./images//"])
def test_a_folder_spelt_otherwise_is_the_weights_own_dataset(image_folder, tmp_path,
                                                             spelling):
    """Item 13: the kNN queries are images the weights pretrained on, whatever the
    spelling of the folder (a trailing '/', a '..'); before, only the exact spelling
    was refused."""
    root, run = image_folder
    dataset = "folder:" + spelling.format(root=root, data=root.parent)
    with pytest.raises(ConfigError) as raised:
        _eval(run, tmp_path, dataset=dataset, evaluators="knn", train_split="train[50%:]",
              knn_eval_split="train[:25%]")
    assert str(raised.value).startswith(
        "--knn_eval_split: 'train[:25%]' shares 6 of its 6 image files (all of them) with "
        f"--train_split='train[:50%]' (what trained the weights: its flags.json in {run})")
    # Disjoint from what trained the weights and from the bank: it runs, and the
    # record names the run it compared.
    context = _eval(run, tmp_path, dataset=dataset, evaluators="knn",
                    train_split="train[50%:75%]", knn_eval_split="train[75%:]")
    assert context.eval_overlap.allowed == []
    (link,) = context.eval_overlap.trained_by
    assert (link["run"], link["dataset"], link["train_split"], link["compared"]) == (
        str(run), f"folder:{root}", "train[:50%]", True)


def test_a_subfolder_of_the_training_folder_holds_its_training_files(tmp_path):
    """2026-12-06, 17: weights trained on folder:<root> (its train/ split), probed on
    folder:<root>/train with --train_split='train[:50%]' --eval_split='train[50%:]',
    scored the training files: the identity is the folder's real path, and the
    subfolder's differs. A folder inside the other is compared file by file."""
    root = tmp_path / "images"
    for split, count in (("train", 8), ("val", 4)):
        for c in range(2):
            for i in range(count):
                _png(str(root / split / f"c{c}" / f"{i}.png"), 60 * c + i + 20 * (split == "val"))
    run = tmp_path / "pretrained"
    write_run(run, dataset=f"folder:{root}", train_split="train")
    probe = dict(mode="linear_probe", checkpoint=str(run), model_dir=str(tmp_path / "p"),
                 evaluators="linear_probe")
    with pytest.raises(ConfigError) as raised:
        _check(**probe, dataset=f"folder:{root}/train", train_split="train[:50%]",
               eval_split="train[50%:]")
    assert str(raised.value).startswith(
        "--eval_split: 'train[50%:]' shares 8 of its 8 image files (all of them) with "
        f"--train_split='train' (what trained the weights: its flags.json in {run})"), \
        str(raised.value)
    # The other way round: trained on the subfolder, evaluated on the folder's train/.
    inner = tmp_path / "inner"
    write_run(inner, dataset=f"folder:{root}/train", train_split="train[:50%]")
    with pytest.raises(ConfigError, match="^--eval_split: 'train' shares 8 of its 16"):
        _check(**dict(probe, checkpoint=str(inner)), dataset=f"folder:{root}",
               train_split="val", eval_split="train")


def test_the_grey_images_of_a_tinted_run_are_its_training_images(tmp_path):
    """Item 13: 'fashion_mnist' holds the examples of 'fashion_mnist_tinted' (the same
    ids, tinted): a grey evaluation of the tinted run's training images is refused."""
    data = str(tmp_path / "fm")
    write_fashion_mnist(data, sizes={"train": 64, "test": 16})
    run = tmp_path / "tinted"
    write_run(run, dataset="fashion_mnist_tinted", data_dir=data, train_split="train[:32]")
    grey = dict(dataset="fashion_mnist", data_dir=data, evaluators="knn",
                train_split="train[32:]")
    with pytest.raises(ConfigError, match=r"^--knn_eval_split: 'train\[:16\]' shares 16 of "
                       r"its 16 examples \(all of them\) with --train_split='train\[:32\]' "
                       r"\(what trained the weights"):
        _eval(run, tmp_path, knn_eval_split="train[:16]", **grey)
    assert _eval(run, tmp_path, knn_eval_split="test", **grey).eval_overlap.allowed == []


def test_a_fine_tune_is_not_evaluated_on_its_pretraining_images(fine_tune, tmp_path):
    """Item 14: --mode=eval of a fine-tune compares the pretraining run its
    flags.json's --checkpoint names, and the refusal names that run."""
    pretrained, tuned = fine_tune
    with pytest.raises(ConfigError) as raised:
        _check(mode="eval", model_dir=str(tuned), **FINE_TUNED,
               eval_split="train[:300]")
    assert str(raised.value).startswith(
        "--eval_split: 'train[:300]' shares 300 of its 300 examples (all of them) with "
        f"--train_split='train[:700]' (what trained the weights {tuned} started from: "
        f"its flags.json in {pretrained})")
    # Allowed, the record says so, and names the run.
    allowed = _check(mode="eval", model_dir=str(tuned), **FINE_TUNED,
                     eval_split="train[650:750]", allow_eval_overlap=True)
    record = evaluations.overlap_record(allowed)
    assert record["eval_overlaps_train"] is True
    assert [(e["train_split"], e["examples"], e["of"], e["trained"])
            for e in record["eval_overlap"]] == [
        ("train[700:1000]", 50, 100, "the training data"),
        ("train[:700]", 50, 100,
         f"what trained the weights {tuned} started from: its flags.json in {pretrained}")]
    assert [(link["run"], link["train_split"], link["compared"])
            for link in record["eval_trained_by"]] == [
        (str(tuned), "train[700:1000]", True), (str(pretrained), "train[:700]", True)]
    # Disjoint from both: it runs, and records false.
    passed = _check(mode="eval", model_dir=str(tuned), **FINE_TUNED, eval_split="test")
    assert evaluations.overlap_record(passed)["eval_overlaps_train"] is False
    # A fine-tune that evaluates as it trains compares the run it starts from too.
    with pytest.raises(ConfigError, match=re.escape(
            "with --train_split='train[:700]' (what trained the weights this run starts "
            f"from: its flags.json in {pretrained})")):
        _check(mode="train_then_eval", checkpoint=str(pretrained), train_steps=1,
               model_dir=str(tmp_path / "again"), eval_split="train[:300]", **FINE_TUNED)


def test_the_chain_stops_where_no_record_is_and_says_why(fine_tune, tmp_path):
    """A pretraining run deleted, a released model, a prefix without flags.json: the
    evaluation runs, and the record says where the chain stopped."""
    pretrained, tuned = fine_tune
    shutil.rmtree(pretrained)
    passed = _check(mode="eval", model_dir=str(tuned), **FINE_TUNED,
                    eval_split="train[:300]")
    assert passed.eval_overlap.allowed == []
    assert passed.eval_overlap.trained_by[1] == dict(
        weights=str(pretrained), role=f"the weights {tuned} started from", teacher=False,
        stopped="not found (moved or deleted): what trained them is not known")
    released = tmp_path / "released"
    official_fixtures.write_named(str(released / "variables" / "variables"), {
        "resnet/block_group1/kernel": np.zeros([1], np.float32)})
    bare = tmp_path / "bare"
    write_run(bare, flags_json=False)
    for start, stopped in ((released, "a released model: what trained it is not recorded"),
                           (bare, f"no readable flags.json in {bare}: what trained them "
                                  "is not recorded")):
        tuned = tmp_path / f"from_{start.name}"
        write_run(tuned, checkpoint=str(start), **FINE_TUNED)
        link = _check(mode="eval", model_dir=str(tuned), **FINE_TUNED,
                      eval_split="train[:300]").eval_overlap.trained_by[1]
        assert link["stopped"] == stopped, link


def test_a_teachers_training_images_are_a_warning(tmp_path):
    """A distilled student evaluated on its teacher's fine-tuning images: the student
    never trained on them, so it runs, with a warning and the record (the student's
    own split and its --checkpoint's chain are refused as above)."""
    teacher, student = tmp_path / "teacher", tmp_path / "student"
    write_run(teacher, train_mode="finetune", train_split="train[:300]")
    write_run(student, train_mode="distill", teacher=str(teacher),
              train_split="train[300:600]")
    context = _check(mode="eval", model_dir=str(student), train_mode="distill",
                     teacher=str(teacher), train_split="train[300:600]",
                     eval_split="train[:100]")
    assert context.eval_overlap.allowed == []
    assert context.eval_overlap.teacher == [dict(
        train_flag="train_split", train_split="train[:300]", eval_flag="eval_split",
        eval_split="train[:100]", examples=100, of=100,
        trained=f"what trained the teacher {student} distilled from: its flags.json in "
                f"{teacher}")]
    record = evaluations.overlap_record(context)
    assert record["eval_overlaps_train"] is False and record["eval_overlaps_teacher"]
    assert [(link["run"], link["teacher"]) for link in record["eval_trained_by"]] == [
        (str(student), False), (str(teacher), True)]
