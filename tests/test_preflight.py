"""simclr_tf.run.preflight: every check before a model exists, with no side effects."""
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.run import experiment, preflight
from simclr_tf.run.modes import parts
from simclr_tf.config import Config, ConfigError

from simclr_tf.weights import checkpoints
from helpers.run_fixtures import RESNET, config, write_run


def _check(cfg, strategy=None):
    strategy = strategy or tf.distribute.get_strategy()
    return preflight.check(cfg, strategy, preflight.load_source(cfg))


def test_check_creates_and_writes_nothing(tmp_path):
    model_dir = tmp_path / "not" / "yet"
    context = _check(config(model_dir=str(model_dir), train_steps=1))
    assert context.num_train_examples == 1437 and context.num_classes == 10
    assert not (tmp_path / "not").exists()
    existing = tmp_path / "existing"
    existing.mkdir()
    _check(config(model_dir=str(existing), train_steps=1))
    assert os.listdir(existing) == []


def test_a_failing_check_leaves_no_record(tmp_path):
    model_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match="--model_dir"):
        experiment.run(config(model_dir=str(model_dir), mode="export"))
    assert not model_dir.exists()


def test_model_dir_under_a_file_is_refused(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match="--model_dir: .*is a file"):
        _check(config(model_dir=str(tmp_path / "a_file" / "run"), train_steps=1))


def test_grad_cache_chunk_must_divide_the_per_replica_batch(tmp_path):
    # 2 replicas x 16 images: a chunk of 32 divides the global batch of 32 but not the
    # 16 images of a replica (the check used to test the global batch and let it
    # through, to fail inside the train step).
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    cfg = config(model_dir=str(tmp_path), train_steps=1, grad_cache_chunk=32)
    with pytest.raises(ConfigError, match="--grad_cache_chunk: .*per-replica batch of 16 images"):
        _check(cfg, strategy)
    _check(config(model_dir=str(tmp_path), train_steps=1, grad_cache_chunk=8), strategy)
    _check(cfg)  # one replica holds all 32


def test_every_mode_of_the_table_is_a_flag_choice_and_its_functions_import():
    from simclr_tf.config.tables import modes  # pylint: disable=import-outside-toplevel
    assert set(modes.MODES) == set(Config.field_choices("mode"))
    # The built-in modes' functions are called by name in experiment (one truth: their
    # rows name none); a registered mode's row names its own.
    for mode in modes.MODES.values():
        assert mode.parts == (), mode.name
        functions = experiment.mode_functions(mode)
        assert functions and all(callable(part) for part in functions), mode.name


@pytest.mark.parametrize("overrides, flag", [
    (dict(train_split="train[:0]"), "train_split"),
    (dict(train_split="train[10:10]"), "train_split"),
    (dict(mode="train_then_eval", eval_split="test[:0%]"), "eval_split"),
    (dict(knn_eval_split="test[360:]"), "knn_eval_split"),
    (dict(knn_eval_split="test", knn_bank_split="train[:0]"), "knn_bank_split"),
    (dict(mode="linear_probe", train_split="train[:0]"), "train_split"),
    (dict(mode="embed", embed_split="train[:0]"), "embed_split"),
])
def test_a_split_without_examples_is_refused(overrides, flag, tmp_path):
    if overrides.get("mode") in ("linear_probe", "embed"):
        write_run(tmp_path)  # weights to read: a missing run is said first
    cfg = config(**dict(dict(model_dir=str(tmp_path), train_steps=1), **overrides))
    with pytest.raises(ConfigError, match="has no examples; choose a non-empty split") as info:
        _check(cfg)
    assert info.value.flag == flag


def _variables():
    return dict(
        w=tf.Variable(tf.random.normal([3, 3, 8, 16])), step=tf.Variable(7, dtype=tf.int64),
        mask=tf.Variable(tf.ones([77], tf.bool)), half=tf.Variable(tf.ones([3, 5], tf.float16)),
        empty=tf.Variable(tf.zeros([0, 4])),
        names=tf.Variable(np.array([b"abc", b"", b"x" * 300, b"ends\x00\x00"], dtype=object)),
        name=tf.Variable(b"scalar\x00"))


def _missing(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return checkpoints.missing_data_bytes(reader, tf.io.gfile.glob(prefix + ".data-*"))


def test_the_data_size_the_index_implies_is_exact(tmp_path):
    """Numeric tensors are raw bytes, strings varint lengths + 4-byte checksum + bytes,
    no padding: the sum equals the data files' size, sharded or not."""
    prefix = tf.train.Checkpoint(**_variables()).write(str(tmp_path / "one" / "c"))
    assert _missing(prefix) == 0
    sharded = tf.train.Checkpoint(**_variables()).write(
        str(tmp_path / "sharded" / "c"), options=tf.train.CheckpointOptions(
            experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(
                max_shard_size=1000)))
    assert len(glob.glob(sharded + ".data-*")) > 2 and _missing(sharded) == 0


def test_the_data_size_the_index_implies_is_exact_on_the_released_model(released_r50):
    """The same on the checkpoint the authors' export wrote (not one of ours)."""
    assert _missing(os.path.join(released_r50, "variables", "variables")) == 0


@pytest.mark.parametrize("cut", ["one byte", "half"])
def test_a_truncated_checkpoint_is_refused(cut, tmp_path):
    prefix = tf.train.Checkpoint(**_variables()).write(str(tmp_path / "c"))
    preflight._check_checkpoint_readable(prefix)
    data = glob.glob(prefix + ".data-*")[0]
    size = os.path.getsize(data)
    os.truncate(data, size - 1 if cut == "one byte" else size // 2)
    with pytest.raises(ConfigError, match="--checkpoint: .*truncated") as info:
        preflight._check_checkpoint_readable(prefix)
    assert "pass an intact checkpoint" in str(info.value)


def test_a_tfds_dataset_not_in_data_dir_is_a_dataset_error(tmp_path):
    cfg = config(dataset="cifar10", data_dir=str(tmp_path), model_dir=str(tmp_path / "run"),
                 train_steps=1)
    with pytest.raises(ConfigError, match="--dataset: TFDS dataset 'cifar10' is not "
                       "prepared in --data_dir=.*tfds build cifar10"):
        preflight.load_source(cfg)


def _run_with_export(directory, **overrides):
    """A run of `config(**overrides)` with its flags.json, and an export-shaped copy of
    its variables (saved_model/1)."""
    write_run(directory, **overrides)
    prefix = tf.train.latest_checkpoint(str(directory))
    export_dir = directory / "saved_model" / "1"
    tf.io.gfile.makedirs(str(export_dir / "variables"))
    for name in tf.io.gfile.glob(prefix + ".*"):
        suffix = name[len(prefix):]
        tf.io.gfile.copy(name, str(export_dir / "variables" / ("variables" + suffix)))
    return directory


@pytest.fixture(scope="module")
def our_run(tmp_path_factory):
    """The tiny encoder's run (width 0.125, 2-layer head of 16)."""
    return _run_with_export(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def our_resnet_run(tmp_path_factory):
    """A ResNet-18's run (width 0.125, CIFAR stem, 2-layer head of 16): the
    architecture flags that a checkpoint binds are the ResNet's."""
    return _run_with_export(tmp_path_factory.mktemp("resnet_run"), **RESNET)


@pytest.mark.parametrize("where, overrides, needed", [
    ("", dict(resnet_depth=50, width_multiplier=2), "--resnet_depth=18 --width_multiplier=0.125"),
    ("ckpt-1", dict(num_proj_layers=3), "--num_proj_layers=2"),
    ("", dict(sk_ratio=0.0625, se_ratio=0.25), "--sk_ratio=0.0 --se_ratio=0.0"),
    ("", dict(stem="imagenet", image_size=32), "--stem=cifar"),
    ("", dict(proj_head_mode="linear", num_proj_layers=3),
     "--proj_head_mode=nonlinear --num_proj_layers=2"),
    ("saved_model/1", dict(proj_out_dim=128), "--proj_out_dim=16"),
])
def test_our_checkpoint_of_another_architecture_is_refused(where, overrides, needed,
                                                          our_resnet_run, tmp_path):
    cfg = config(train_mode="finetune", checkpoint=os.path.join(our_resnet_run, where),
                 train_steps=1, model_dir=str(tmp_path / "finetune"),
                 **dict(RESNET, **overrides))
    with pytest.raises(ConfigError) as info:
        _check(cfg)
    assert info.value.flag == "checkpoint"
    assert f"pass {needed} (the flags say otherwise)" in str(info.value), str(info.value)


@pytest.mark.parametrize("mode", ["train", "eval", "export", "linear_probe", "embed"])
def test_model_dir_of_another_architecture_is_refused(mode, our_run):
    cfg = config(mode=mode, model_dir=str(our_run), train_steps=2, width_multiplier=0.25)
    with pytest.raises(ConfigError, match="--model_dir: .*pass --width_multiplier=0.125"):
        _check(cfg)


def test_the_same_architecture_passes(our_run, tmp_path):
    _check(config(mode="eval", model_dir=str(our_run)))
    _check(config(train_mode="finetune", checkpoint=str(our_run), train_steps=1,
                  model_dir=str(tmp_path / "a"), eval_split="test"))
    # Without projection head nothing of the head is read: any recorded head fits.
    _check(config(train_mode="finetune", checkpoint=str(our_run), train_steps=1,
                  proj_head_mode="none", model_dir=str(tmp_path / "b")))
    # A flags.json without a checkpoint (a run that never saved) binds nothing.
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "flags.json").write_text((our_run / "flags.json").read_text())
    _check(config(model_dir=str(tmp_path / "c"), train_steps=1, resnet_depth=34))


@pytest.mark.large  # 9 s
def test_without_flags_json_loading_raises_a_config_error(our_resnet_run, tmp_path):
    """No record to compare before the build: loading names the flags to check."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in os.listdir(our_resnet_run):
        if name.startswith("ckpt-") or name == "checkpoint":
            tf.io.gfile.copy(str(our_resnet_run / name), str(bare / name))
    wrong = config(train_mode="finetune", checkpoint=str(bare), train_steps=1,
                   model_dir=str(tmp_path / "run"), **dict(RESNET, resnet_depth=34))
    _check(wrong)  # nothing to compare with
    strategy = tf.distribute.get_strategy()
    for overrides in (dict(resnet_depth=34), dict(width_multiplier=0.25)):
        model = parts.build_model(config(model_dir=str(tmp_path), **dict(RESNET, **overrides)),
                                       strategy, 10)
        for whole_model, flag in ((True, "model_dir"), (False, "checkpoint")):
            with pytest.raises(checkpoints.CheckpointMismatchError, match="does not fit"):
                checkpoints.load_into(model, str(bare), whole_model=whole_model)
            with pytest.raises(ConfigError) as info, preflight.flag_errors(flag):
                checkpoints.load_into(model, str(bare), whole_model=whole_model)
            message = str(info.value)
            assert info.value.flag == flag and "does not fit the model" in message
            assert "--resnet_depth --width_multiplier" in message, message
    right = parts.build_model(config(model_dir=str(tmp_path), **RESNET), strategy, 10)
    checkpoints.load_into(right, str(bare), whole_model=True)


@pytest.mark.large  # 6 s
def test_a_mode_that_only_reads_model_dir_leaves_its_record(our_run, tmp_path):
    """flags.json says which model wrote model_dir's checkpoints: an evaluation with
    other (compatible) flags writes none over it, and none where there was none."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in os.listdir(our_run):
        if name.startswith("ckpt-") or name in ("checkpoint", "flags.json"):
            tf.io.gfile.copy(str(our_run / name), str(run_dir / name))
    record = (run_dir / "flags.json").read_text()
    experiment.run(config(mode="eval", model_dir=str(run_dir), eval_split="test[:16]",
                          eval_batch_size=16, proj_head_mode="none"))
    assert (run_dir / "flags.json").read_text() == record
    (run_dir / "flags.json").unlink()
    experiment.run(config(mode="eval", model_dir=str(run_dir), eval_split="test[:16]",
                          eval_batch_size=16))
    assert not (run_dir / "flags.json").exists()


@pytest.mark.parametrize("overrides, flag, message", [
    (dict(encoder="vit_l32"), "encoder", "must be one of resnet, vit_s16, vit_b16"),
    (dict(encoder="vit_s16", image_size=40), "image_size",
     "40 is not a multiple of the patch size 16"),
])
def test_the_encoder_is_checked_before_any_weights(overrides, flag, message, tmp_path):
    with pytest.raises(ConfigError) as info:
        _check(config(model_dir=str(tmp_path / "run"), **overrides))
    assert info.value.flag == flag and message in str(info.value)
    assert not os.path.exists(tmp_path / "run")


def test_an_encoder_added_to_the_table_is_known_to_the_flags(tmp_path, monkeypatch):
    """One call: a registered builder and its spec make a valid --encoder."""
    from simclr_tf.models import vit
    from simclr_tf.config.tables import encoders as encoder_table
    monkeypatch.setattr(encoder_table, "ENCODERS", dict(encoder_table.ENCODERS))
    encoder_table.register_encoder("vit_t8", encoder_table.EncoderSpec(
        flags={}, patch_size=8, builder=lambda options, dtype: vit.ViT(
            patch_size=8, hidden_dim=16, depth=1, num_heads=1, mlp_dim=16, dtype=dtype)))
    _check(config(model_dir=str(tmp_path / "ok"), encoder="vit_t8", image_size=16))
    with pytest.raises(ConfigError, match="patch size 8"):
        _check(config(model_dir=str(tmp_path / "bad"), encoder="vit_t8", image_size=20))


@pytest.mark.parametrize("mode, alternatives", [
    ("export", "."), ("embed", ", or pass --checkpoint."),
    ("linear_probe", ", or pass --checkpoint."),
    ("eval", ", pass --checkpoint, or wait for one with --eval_wait_secs.")])
def test_a_mode_that_reads_weights_needs_some_before_anything_is_built(
        tmp_path, mode, alternatives):
    # The mode table says which modes read weights (`modes.Mode.needs_checkpoint`)
    # and what else they may read them from.
    with pytest.raises(ConfigError) as info:
        _check(config(model_dir=str(tmp_path), mode=mode, eval_wait_secs=0))
    assert str(info.value) == (f"--model_dir: has no checkpoint to {mode} in "
                               f"{str(tmp_path)!r}; train first{alternatives}")


def test_a_misspelt_model_dir_beside_a_run_names_the_run(tiny_run, tmp_path):
    """A --model_dir that does not exist next to a close name that holds checkpoints:
    the error asks whether that one was meant (issue 44, item 16)."""
    tiny_run.copy_to(tmp_path / "pretrain_run")
    typo = str(tmp_path / "pretrian_run")
    with pytest.raises(ConfigError) as info:
        _check(config(model_dir=typo, mode="eval", eval_wait_secs=0))
    assert str(info.value).endswith(
        f"(no such directory); train first, pass --checkpoint, or wait for one with "
        f"--eval_wait_secs. Did you mean --model_dir={tmp_path / 'pretrain_run'}? It holds "
        "checkpoints.")
    with pytest.raises(ConfigError) as info:  # nothing close: no guess
        _check(config(model_dir=str(tmp_path / "other"), mode="eval", eval_wait_secs=0))
    assert "Did you mean" not in str(info.value)


@pytest.mark.parametrize("argv, flag, named", [
    (["--mode=eval", "--model_dir={typo}"], "model_dir", "{typo}"),
    (["--mode=eval", "--model_dir={empty}"], "model_dir", "{empty}"),
    (["--mode=export", "--model_dir={empty}"], "model_dir", "{empty}"),
    (["--mode=embed", "--model_dir={typo}"], "model_dir", "{typo}"),
    (["--mode=linear_probe", "--model_dir={empty}"], "model_dir", "{empty}"),
    (["--mode=eval", "--checkpoint={typo}"], "checkpoint", "{typo}"),
    (["--train_mode=finetune", "--checkpoint={typo}", "--model_dir={new}"], "checkpoint",
     "{typo}"),
    (["--train_mode=finetune", "--checkpoint={empty}", "--model_dir={new}"], "checkpoint",
     "{empty}"),
])
def test_a_run_that_is_not_there_is_named_before_any_data_is_looked_at(
        argv, flag, named, tmp_path, monkeypatch):
    """Issue 33, 1: a reader mode or a fine-tune whose run is not there (a typo, an
    empty directory, nothing trained yet) names the path, not the defaults' dataset
    (imagenet2012, not prepared in this data_dir) that it never got to read."""
    import run  # pylint: disable=import-outside-toplevel
    from helpers import cli_flags  # pylint: disable=import-outside-toplevel
    from simclr_tf.data import registry  # pylint: disable=import-outside-toplevel
    (tmp_path / "empty").mkdir()
    paths = dict(typo=str(tmp_path / "simclr_quickstar"), empty=str(tmp_path / "empty"),
                 new=str(tmp_path / "new"))
    argv = [arg.format(**paths) for arg in argv] + [f"--data_dir={tmp_path / 'tfds'}"]
    cfg = run.config_from_flags(cli_flags.flag_values(argv))
    assert cfg.dataset == "imagenet2012"  # the defaults: no record was read

    def no_data(*args, **kwargs):
        raise AssertionError("the dataset was looked at before the run was found")

    monkeypatch.setattr(registry, "get_dataset", no_data)
    with pytest.raises(ConfigError) as info:
        experiment.run(cfg)
    assert info.value.flag == flag, str(info.value)
    assert repr(named.format(**paths)) in str(info.value)
    assert not os.path.exists(paths["new"]) and os.listdir(paths["empty"]) == []


def test_the_checks_leave_the_global_rng_alone(tmp_path):
    """Making a Keras layer draws seeds from Python's RNG: a check that made one would
    change the run's initialisation (it did: preflight made the encoder)."""
    import random  # pylint: disable=import-outside-toplevel
    for overrides in (dict(), dict(encoder="vit_s16", vit_pool="mean")):
        random.seed(0)
        _check(config(model_dir=str(tmp_path / "run"), train_steps=1, **overrides))
        after = random.random()
        random.seed(0)
        assert after == random.random(), overrides


def test_a_training_record_is_a_contract(tmp_path):
    """Checkpoints in model_dir: a flag of the optimisation or the data that differs
    from flags.json is refused, naming each with both values; the run's length,
    progress and evaluation flags may change; --allow_changed_flags overrides."""
    from simclr_tf.rundir import records  # pylint: disable=import-outside-toplevel
    write_run(tmp_path)
    before = open(tmp_path / "flags.json").read()
    strategy = tf.distribute.get_strategy()

    def check(**overrides):
        cfg = config(**dict(dict(model_dir=str(tmp_path), train_steps=1), **overrides))
        return preflight.check(cfg, strategy, preflight.load_source(cfg))

    with pytest.raises(ConfigError) as raised:
        check(train_mode="finetune", temperature=0.2)
    message = str(raised.value)
    assert message.startswith("--temperature: ") or message.startswith("--train_mode: ")
    assert "--train_mode: 'pretrain' recorded, 'finetune' given" in message
    assert "--temperature: 0.5 recorded, 0.2 given" in message
    assert "--allow_changed_flags" in message and "another --model_dir" in message
    assert open(tmp_path / "flags.json").read() == before  # nothing written
    check(train_steps=8, progress="none", log_every_steps=1, eval_split="train",
          knn_k=3, break_lock=True)
    check(train_mode="finetune", allow_changed_flags=True)
    assert set(records.FREE_FLAGS) <= set(Config.__dataclass_fields__)
    assert not set(records.EXTENSION_FLAGS) & set(records.FREE_FLAGS)


def test_pretraining_on_one_class_refuses_what_would_measure_nothing(tmp_path):
    """Issue 33, 9: a folder with one class subfolder trained a one-class online head
    (loss 0, accuracy 1) without a word. Each flag that measures by labels is named
    until the run is a plain pretraining, which passes."""
    root = tmp_path / "images"
    (root / "cats").mkdir(parents=True)
    for i in range(4):
        tf.io.write_file(str(root / "cats" / f"{i}.png"),
                         tf.io.encode_png(np.full((12, 12, 3), 40 * i, np.uint8)))
    base = dict(dataset=f"folder:{root}", train_split="train", eval_split="train",
                train_batch_size=2, train_steps=1, model_dir=str(tmp_path / "run"))
    plain = dict(lineareval_while_pretraining=False)
    for overrides, flag in ((dict(), "lineareval_while_pretraining"),
                            (dict(plain, knn_eval_split="train[:50%]",
                                  train_split="train[50%:]"), "knn_eval_split"),
                            (dict(plain, final_linear_probe=True), "final_linear_probe"),
                            (dict(plain, mode="train_then_eval"), "mode")):
        with pytest.raises(ConfigError) as info:
            _check(config(**dict(base, **overrides)))
        assert info.value.flag == flag and str(root) in str(info.value), str(info.value)
    _check(config(**dict(base, **plain)))
    _check(config(**dict(base, train_mode="finetune")))  # not pretraining: not refused here


def test_a_pretraining_batch_larger_than_its_split_is_refused(tmp_path):
    """Issue 33, 10: a batch of 64 from 8 images held each image 8 times, negatives
    of themselves. Pretraining is refused naming both flags and sizes; a fine-tune
    (no negatives) and a batch of the whole split pass."""
    cfg = config(model_dir=str(tmp_path / "run"), train_steps=1, train_batch_size=64,
                 train_split="train[:8]")
    with pytest.raises(ConfigError) as info:
        _check(cfg)
    message = str(info.value)
    assert info.value.flag == "train_batch_size" and "--train_split='train[:8]'" in message
    assert "64" in message and " 8 " in message
    _check(config(model_dir=str(tmp_path / "run"), train_steps=1, train_batch_size=64,
                  train_split="train[:8]", train_mode="finetune"))
    _check(config(model_dir=str(tmp_path / "run"), train_steps=1, train_batch_size=8,
                  train_split="train[:8]"))


@pytest.mark.parametrize("where", ["model_dir", "its_parent"])
def test_a_model_dir_under_a_dangling_link_is_named_with_its_target(tmp_path, where,
                                                                    monkeypatch):
    """Scratch storage not mounted: --model_dir (or a folder above it) is a symbolic
    link to nothing. A ConfigError names the link and its target before anything is
    built (not a FileNotFoundError on the lock file)."""
    target = tmp_path / "scratch_not_mounted"
    link = tmp_path / "scratch"
    os.symlink(target, link)
    model_dir = link if where == "model_dir" else link / "runs" / "run1"
    monkeypatch.setattr(parts, "build_model", lambda *a, **k: pytest.fail("built"))
    with pytest.raises(ConfigError) as info:
        experiment.run(config(model_dir=str(model_dir), train_steps=1, mode="train"))
    message = str(info.value)
    assert info.value.flag == "model_dir"
    assert f"{str(link)!r} is a symbolic link to {str(target)!r}, which does not exist" \
        in message and "mount it" in message
    assert not target.exists() and os.listdir(tmp_path) == ["scratch"]
    os.mkdir(target)  # mounted: the same flags pass preflight
    preflight._check_model_dir(str(model_dir))  # pylint: disable=protected-access


@pytest.mark.parametrize("dataset", ["fashion_mnist", "digits", "mnist"])
def test_a_data_dir_that_does_not_exist_is_refused(dataset, tmp_path):
    """--dataset=fashion_mnist --data_dir=<a typo> read the system copy without a word
    (and flags.json recorded the missing folder). A given --data_dir must exist,
    except where TFDS is to download into it."""
    missing = str(tmp_path / "no_such_folder")
    cfg = config(dataset=dataset, data_dir=missing, tfds_download=False,
                 model_dir=str(tmp_path / "run"))
    with pytest.raises(ConfigError) as info:
        preflight.load_source(cfg)
    assert info.value.flag == "data_dir"
    assert f"{missing!r} does not exist" in str(info.value)
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        preflight.load_source(config(dataset="digits", data_dir=str(tmp_path / "a_file"),
                                     model_dir=str(tmp_path / "run")))
    # TFDS downloads into a new data_dir: not refused for that (the dataset's own
    # checks decide what follows).
    preflight._check_data_dir(  # pylint: disable=protected-access
        config(dataset="mnist", data_dir=missing, tfds_download=True,
               model_dir=str(tmp_path / "run")))


@pytest.mark.parametrize("mode", ["eval", "export"])
def test_a_checkpoint_prefix_given_as_model_dir_says_what_to_pass(tiny_run, tmp_path, mode):
    """--model_dir=<run>/ckpt-4 (a checkpoint, not a run): the error says to pass it as
    --checkpoint (where the mode can read one) or its run as --model_dir."""
    from simclr_tf.config.tables import modes  # pylint: disable=import-outside-toplevel
    run_dir = tiny_run.copy_to(tmp_path / "run", mode=mode).model_dir
    prefix = os.path.join(run_dir, "ckpt-4")
    with pytest.raises(ConfigError) as info:
        preflight._check_something_to_load(  # pylint: disable=protected-access
            config(model_dir=prefix, mode=mode), modes.get(mode))
    message = str(info.value)
    assert f"{prefix!r} is a checkpoint, not a run directory" in message
    assert f"--model_dir={run_dir} for its run's latest checkpoint" in message
    assert (f"--checkpoint={prefix}" in message) == (mode == "eval")
