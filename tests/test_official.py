"""Import of the authors' released models: parity with the authors' outputs on the
released R50 (with $SIMCLR_TF_RELEASED_R50), the authors' variable lists (tests/data),
round trips through the authors' layout, strictness, and the conversion script."""
import inspect
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import official_fixtures as fx
from helpers import official_layout
from helpers.scripts import load_script
from simclr_tf.weights import checkpoints, official
from simclr_tf.weights.official import infer as official_infer
from simclr_tf.models import ResNet, SimCLRModel, layers as model_layers

PARITY_OUTPUTS = ("initial_conv", "initial_max_pool", "block_group1", "block_group2",
                  "block_group3", "block_group4", "final_avg_pool", "proj_head_input",
                  "proj_head_output", "logits_sup")


def max_relative_error(got, expected):
    """Largest deviation relative to the largest magnitude (activations reach 1e3)."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def assert_same_outputs(a, b, images):
    out_a, out_b = a(images, training=False), b(images, training=False)
    assert set(out_a) == set(out_b)
    for key in out_a:
        np.testing.assert_allclose(out_b[key], out_a[key], rtol=1e-6, atol=1e-6,
                                   err_msg=key)


def images(size=64, n=2, seed=0):
    return np.random.default_rng(seed).uniform(size=(n, size, size, 3)).astype("float32")


@pytest.fixture(scope="module")
def reference_model(released_r50):
    # The authors made it with their default, --ft_proj_selector=0 (config.txt); the
    # variables alone cannot tell (see test_an_ambiguous_head_needs_an_explicit_selector).
    return official.load_official(released_r50, ft_proj_selector=0)


def test_reference_is_recognised_and_its_architecture_inferred(released_r50):
    """The file the authors' code wrote (not our writer's imitation of it)."""
    assert official.is_official_savedmodel(released_r50)
    assert official.is_official_savedmodel(os.path.join(released_r50, "variables"))
    info = official.inspect_official(released_r50)
    assert info.num_variables == 281
    assert info.config == dict(encoder="resnet", encoder_options=dict(
                                   depth=50, width_multiplier=1, sk_ratio=0.0,
                                   se_ratio=0.0, stem="imagenet"), proj_head_mode="nonlinear",
                               num_proj_layers=3, proj_out_dim=128, ft_proj_selector=0,
                               num_classes=1000)
    # h and the hidden layers are all 2048-d, and there is no saved_model.pb.
    assert not info.ft_proj_selector_inferred and info.ft_proj_selector_source is None


@pytest.mark.large
def test_outputs_equal_the_authors_on_the_shipped_model(reference_model, released_r50):
    expected = np.load(os.path.join(released_r50, "expected_outputs.npz"))
    assert len(reference_model.weights) == 281  # BN moving statistics included
    outputs = reference_model(expected["images"], training=False)
    errors = {k: max_relative_error(outputs[k], expected[k]) for k in PARITY_OUTPUTS}
    assert max(errors.values()) < 1e-4, errors


@pytest.fixture
def fast_init(monkeypatch):
    """Zero conv init: names and shapes do not depend on values, and the truncated
    normal draw of 35M parameters would dominate the test."""
    monkeypatch.setattr(model_layers, "conv_initializer", lambda: "zeros")


@pytest.mark.parametrize("tsv, sk_ratio", [
    (fx.R50_SK0_VARIABLES, 0.0),
    pytest.param(fx.R50_SK1_VARIABLES, 0.0625, marks=pytest.mark.large),
], ids=["sk0", "sk1"])
def test_authors_variable_lists_map_onto_our_model(tsv, sk_ratio, fast_init):
    """Architecture inference from names and shapes alone, and our model written in
    the authors' layout gets exactly their names and shapes (selective kernels too)."""
    shapes = fx.read_tsv(tsv)
    config, _ = official.infer_official_config(shapes)
    options = config["encoder_options"]
    assert (options["depth"], options["width_multiplier"], options["sk_ratio"]) == \
        (50, 1, sk_ratio)
    model = SimCLRModel(**config)
    model.build((None, None, None, 3))
    names, ours = official_layout._official_names(model)
    assert {names[k]: tuple(v.shape) for k, v in ours.items()} == shapes


def _assert_round_trips(path, model, directory):
    """`model` (loaded from `path`) written in the authors' layout again gives the
    same names and values as `path`; a second write to the same folder is refused."""
    prefix = official_layout.export_official_layout(model, directory)
    exported, original = fx.read_values(directory), fx.read_values(path)
    assert set(exported) == set(original)
    for name, value in original.items():
        np.testing.assert_array_equal(exported[name], value, err_msg=name)
    assert prefix == str(directory / "variables" / "variables")
    with pytest.raises(ValueError, match="already holds"):
        official_layout.export_official_layout(model, directory)


@pytest.mark.large
def test_reference_round_trips_through_the_authors_layout(reference_model, released_r50,
                                                          tmp_path):
    """The same on the file the authors' code wrote."""
    _assert_round_trips(released_r50, reference_model, tmp_path / "export")


ROUND_TRIPS = {
    "sk_se": dict(encoder_options=dict(depth=50, width_multiplier=0.25, sk_ratio=0.0625,
                                       se_ratio=0.25), num_classes=10),
    "se_linear_head": dict(encoder_options=dict(depth=18, width_multiplier=0.25,
                                                se_ratio=0.25),
                           proj_head_mode="linear", proj_out_dim=32, ft_proj_selector=-1,
                           num_classes=5),
    "wide_no_heads": dict(encoder_options=dict(depth=18, width_multiplier=2),
                          proj_head_mode="none"),
    "v1_head_cifar_stem": dict(encoder_options=dict(depth=18, width_multiplier=0.5,
                                                    stem="cifar"),
                               num_proj_layers=2, proj_out_dim=64, num_classes=3),
}


def test_squeeze_ratios_are_recovered_from_widths():
    """SK squeeze widths are max(int(filters * ratio), 32): at 1x every group clamps
    to 32 and SimCLRv2's 0.0625 is kept; wider models reveal the ratio."""
    filters = [64, 128, 256, 512]
    assert official_infer._ratio_from_widths([32] * 4, filters, 32, 0.0625) == 0.0625
    assert official_infer._ratio_from_widths([32, 32, 64, 128], filters, 32, 0.0625) == 0.25
    assert official_infer._ratio_from_widths([16, 32, 64, 128], filters, 1, None) == 0.25
    assert official_infer._ratio_from_widths([32, 32, 64, 100], filters, 32, 0.0625) is None


# Measured 18-25 s (88 s beside another test) and 8-11 s; about 5 s each alone since
# each layer is built once (075168f): the large tier.
_SLOW_ROUND_TRIPS = {"sk_se", "wide_no_heads"}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.large) if name in _SLOW_ROUND_TRIPS else name
    for name in sorted(ROUND_TRIPS)])
def test_round_trip_our_model_to_the_authors_layout_and_back(name, tmp_path):
    kwargs = ROUND_TRIPS[name]
    model = SimCLRModel(**kwargs)
    model.build((None, None, None, 3))
    fx.randomise(model)
    official_layout.export_official_layout(model, tmp_path)
    assert official.is_official_savedmodel(tmp_path)
    info = official.inspect_official(tmp_path)
    expected_config = dict(SimCLRModel(**kwargs).get_config())
    # ResNet's defaults for the options the model was not given.
    defaults = {name: parameter.default for name, parameter in
                inspect.signature(ResNet).parameters.items()}
    expected_config["encoder_options"] = {
        option: kwargs["encoder_options"].get(option, defaults[option])
        for option in info.config["encoder_options"]}
    for key, value in info.config.items():
        if key == "num_proj_layers" and kwargs.get("proj_head_mode") in ("none", "linear"):
            continue  # meaningless for these heads
        assert value == expected_config[key], key
    assert info.num_variables == len(model.weights)
    imported = official.load_official(tmp_path, ft_proj_selector=kwargs.get("ft_proj_selector", 0))
    assert_same_outputs(model, imported, images(32 if "cifar" in name else 64))


@pytest.fixture(scope="module")
def small_official(tmp_path_factory):
    """A small model in the authors' layout and the model it came from."""
    return fx.write_small_official(tmp_path_factory.mktemp("small_official"), seed=1,
                                   encoder_options=dict(depth=18, width_multiplier=0.125,
                                                        se_ratio=0.25),
                                   num_classes=4)


# A 3-layer head whose hidden layers have the width of h (64): the variables cannot
# tell which head output feeds the supervised head, as on the released R50s.
AMBIGUOUS_HEAD = dict(encoder_options=dict(depth=18, width_multiplier=0.125),
                      num_proj_layers=3, proj_out_dim=16, num_classes=10)


# 5-6 s each before 075168f, 1.9-2.2 s alone since: the case in the default
# tier, the others large.
@pytest.mark.parametrize("selector", [
    pytest.param(0, marks=pytest.mark.large), 1, pytest.param(2, marks=pytest.mark.large)])
def test_the_selector_is_read_from_the_savedmodels_graph(selector, tmp_path):
    """A SavedModel in the authors' export layout whose graph feeds the supervised
    head from projection output `selector`: inspect_official reads it from the
    graph, load_official needs no argument, and our heads on the graph's h give the
    graph's logits (another selector does not: the check discriminates)."""
    model = SimCLRModel(**AMBIGUOUS_HEAD)
    model.build((None, None, None, 3))
    fx.randomise(model, seed=selector)
    exported = official_layout.export_official_savedmodel(model, tmp_path, selector)
    info = official.inspect_official(tmp_path)
    assert (info.ft_proj_selector_source, info.config["ft_proj_selector"]) == \
        ("graph", selector)
    outputs = exported(images(), False)

    def logits(loaded):
        head = loaded.projection_head(outputs["final_avg_pool"], training=False)
        return loaded.supervised_head(head["supervised_head_input"])
    assert max_relative_error(logits(official.load_official(tmp_path)),
                              outputs["logits_sup"]) < 1e-5
    other = official.load_official(tmp_path, ft_proj_selector=(selector + 1) % 3)
    assert max_relative_error(logits(other), outputs["logits_sup"]) > 0.1


# 1.2 s alone since 075168f (3.6-4.5 s before, large then).
def test_an_ambiguous_head_needs_an_explicit_selector(tmp_path):
    """No saved_model.pb and equal widths: nothing tells the selector, so loading
    the supervised head needs it given; leaving the head out does not."""
    path, _ = fx.write_small_official(tmp_path, **AMBIGUOUS_HEAD)
    info = official.inspect_official(path)
    assert info.ft_proj_selector_source is None and not info.ft_proj_selector_inferred
    with pytest.raises(ValueError, match=r"must be given: 0 = h .* Pass ft_proj_selector"):
        official.load_official(path)
    assert official.load_official(path, ft_proj_selector=1).projection_head.ft_proj_selector == 1
    assert official.load_official(path, num_classes=None).supervised_head is None


@pytest.mark.large  # 12 s
def test_num_classes_override_keeps_a_fresh_head_and_loads_the_rest(small_official):
    path, original = small_official
    model = official.load_official(path, num_classes=10, ft_proj_selector=1)
    assert model.supervised_head.num_classes == 10
    x = images()
    for key in ("final_avg_pool", "proj_head_output"):
        np.testing.assert_array_equal(model(x, training=False)[key],
                                      original(x, training=False)[key])
    assert official.load_official(path, num_classes=None).supervised_head is None


@pytest.mark.large  # 10 s (two loads of the small model)
def test_float64_loading_computes_in_float64(small_official):
    """dtype='float64' (documented): every variable and output float64, the batch
    norms included (TF's fused kernel has none: they compute unfused), equal to the
    float32 model to float32 rounding, and resolving inputs float32 cannot hold."""
    path, _ = small_official
    model = official.load_official(path, dtype="float64", ft_proj_selector=0)
    # A float32 load of its own: training=True moves BN statistics, and the fixture's
    # model is shared by the module's tests.
    original = official.load_official(path, ft_proj_selector=0)
    assert {v.dtype for v in model.weights} == {"float64"}
    x = images(32).astype(np.float64)
    for training in (False, True):
        got = model(x, training=training)
        expected = original(x.astype(np.float32), training=training)
        for key in ("final_avg_pool", "proj_head_output", "logits_sup"):
            assert got[key].dtype == tf.float64, key
            # float32's rounding, amplified by batch statistics over 2 images.
            assert max_relative_error(got[key], expected[key]) < 1e-3, (key, training)
    # A change below float32's resolution moves a float64 model's activations (the
    # random weights shrink activations ~100x per block group: read the first ones).
    for key in ("initial_conv", "block_group1"):
        nudged = model(x + 1e-12, training=False)[key]
        assert np.abs(nudged - model(x, training=False)[key]).max() > 0, key


# In the default tier, beside the se_linear_head case above.
def test_a_checkpoint_in_the_authors_layout_round_trips(small_official, tmp_path):
    """load_official then the writer: every variable back under its name, exactly (a
    small model in the authors' layout, BN moving statistics included)."""
    path, _ = small_official
    _assert_round_trips(path, official.load_official(path, ft_proj_selector=0),
                        tmp_path / "export")


def _tampered(small_official, tmp_path, edit):
    values = fx.read_values(small_official[0])
    edit(values)
    fx.write_named(str(tmp_path / "variables" / "variables"), values)
    return str(tmp_path)


def test_missing_variable_is_named(small_official, tmp_path):
    dropped = []

    def drop(values):
        dropped.append(sorted(n for n in values if n.startswith("resnet/block_group3/")
                              and n.endswith("/moving_variance"))[-1])
        del values[dropped[0]]
    path = _tampered(small_official, tmp_path, drop)
    with pytest.raises(ValueError, match="moving_variance"):
        official.load_official(path, ft_proj_selector=0)


def test_unknown_variable_is_named(small_official, tmp_path):
    extra = "resnet/block_group2/residual_block_2/dropblock/kernel"
    path = _tampered(small_official, tmp_path,
                     lambda values: values.update({extra: np.zeros(3, "float32")}))
    with pytest.raises(ValueError, match="dropblock"):
        official.inspect_official(path)


@pytest.mark.large  # 4 s
def test_wrong_architecture_or_shape_fails_loudly(small_official, tmp_path):
    path, model = small_official
    wrong = SimCLRModel(encoder_options=dict(depth=18, width_multiplier=0.25, se_ratio=0.25),
                        num_classes=4)
    wrong.build((None, None, None, 3))
    with pytest.raises(ValueError, match="shape mismatches"):
        official.load_official_weights(wrong, path)
    no_se = SimCLRModel(encoder_options=dict(depth=18, width_multiplier=0.125),
                        num_classes=4)
    no_se.build((None, None, None, 3))
    with pytest.raises(ValueError, match="left over"):
        official.load_official_weights(no_se, path)
    with pytest.raises(FileNotFoundError, match="variables.index"):
        official.load_official(tmp_path / "nothing_here")
    assert not official.is_official_savedmodel(tmp_path / "nothing_here")


def test_our_own_checkpoints_are_not_mistaken_for_official(small_official, tmp_path):
    _, model = small_official
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path),
                               max_to_keep=1).save()
    assert not official.is_official_savedmodel(tmp_path)


@pytest.fixture(scope="module")
def convert_script():
    """scripts/convert_official_checkpoint.py as a module: its `main` is called in
    process (a TensorFlow import and a model build less per call than a subprocess;
    the script's `sys.exit(main())` adds nothing to test)."""
    return load_script("convert_official_checkpoint")


@pytest.mark.large  # 15 s
def test_conversion_script_writes_keras_file_and_checkpoint_dir(small_official, tmp_path,
                                                                convert_script, capsys):
    src, model = small_official
    keras_file, ckpt_dir = str(tmp_path / "model.keras"), str(tmp_path / "ckpt")
    # No saved_model.pb and a head as wide as h: the selector must be given.
    assert convert_script.main([src, keras_file]) == 1
    assert "Pass ft_proj_selector" in capsys.readouterr().err
    assert not os.path.exists(keras_file)
    for dst in (keras_file, ckpt_dir):
        assert convert_script.main([src, dst, "--ft_proj_selector=0"]) == 0
        assert f"Wrote {dst}: " in capsys.readouterr().out
    x = images(seed=3)
    assert_same_outputs(model, keras.saving.load_model(keras_file), x)

    record = json.load(open(os.path.join(ckpt_dir, "official_import.json")))
    assert tf.train.latest_checkpoint(ckpt_dir) == record["checkpoint"]
    assert record["ft_proj_selector_source"] == "given"
    saved = tf.train.load_checkpoint(record["checkpoint"]).get_variable_to_shape_map()
    # Every variable, also those of layers kept in lists (block groups, head layers).
    assert sum("model/" in key for key in saved) == len(model.weights)
    restored = SimCLRModel.from_config(record["config"])
    restored.build((None, None, None, 3))
    tf.train.Checkpoint(model=restored).restore(
        tf.train.latest_checkpoint(ckpt_dir)).assert_existing_objects_matched()
    assert_same_outputs(model, restored, x)
    # What `run.py --checkpoint=DST` does for fine-tuning: encoder + projection head.
    finetune = SimCLRModel(**dict(record["config"], num_classes=9))
    finetune.build((None, None, None, 3))
    checkpoints.initialize_from(finetune, ckpt_dir)
    np.testing.assert_array_equal(finetune(x, training=False)["proj_head_output"],
                                  model(x, training=False)["proj_head_output"])

    assert convert_script.main([src, keras_file]) == 1
    assert "already exists" in capsys.readouterr().err
