"""--export_format: ONNX, LiteRT and keras-hub exports beside the SavedModel.

The parity test runs each file in its own runtime (onnxruntime, the LiteRT
interpreter, keras-hub in a new process) on images the model never saw and compares
it with the SavedModel; the rest are the flag, the retention rules and the errors,
without converting a model.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import run
from simclr_tf.config import ConfigError
from simclr_tf.config.tables import modes
from simclr_tf.run import experiment, preflight
from simclr_tf.run.modes import export as export_mode
from simclr_tf.weights import export, portable
from helpers import cli_flags, run_fixtures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "scripts"))
import export_parity  # noqa: E402  pylint: disable=wrong-import-position

ALL = "saved_model,onnx,litert,keras_hub"
EXTRA = "the export extra (pip install -e '.[export]')"


@pytest.mark.large  # 16 s: four exports of the tiny run, three runtimes, one process
def test_each_format_in_its_own_runtime_equals_the_saved_model(tiny_run, tmp_path, capsys):
    ort = pytest.importorskip("onnxruntime", reason=f"needs {EXTRA}")
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason=f"needs {EXTRA}")
    pytest.importorskip("keras_hub", reason="needs keras-hub (pip install -e '.[hub]')")
    cfg = tiny_run.copy_to(tmp_path / "run", mode="export", export_format=ALL)
    result = experiment.run(cfg)
    result = {fmt: result[fmt] for fmt in ALL.split(",")}
    printed = capsys.readouterr().out
    for fmt, path in result.items():
        assert path == os.path.join(cfg.model_dir, fmt, "4")
        assert f"ckpt-4 to {path}" in printed
    recorded = json.load(open(os.path.join(cfg.model_dir, "result.export.json")))
    assert {fmt: recorded[fmt] for fmt in result} == result

    # Each file in its own runtime against the SavedModel (the script users run).
    rows, ops, found = export_parity.compare(cfg.model_dir, count=5, seed=7)
    assert found == result
    assert {(fmt, name) for fmt, name, _ in rows} == {
        (fmt, name) for fmt in ("onnx", "litert")
        for name in ("embedding", "logits", "probabilities", "projection")} | {
        ("keras_hub", "embedding")}
    for fmt, name, difference in rows:
        assert difference < (1e-6 if fmt == "keras_hub" else 1e-4), (fmt, name, difference)
    # Builtin ops only (without the default delegate the interpreter lists the model's
    # own ops; a TensorFlow op would be one named Flex...).
    assert "CONV_2D" in ops and not [op for op in ops if op.lower().startswith("flex")]
    size = cfg.image_size
    images = np.random.default_rng(7).random((5, size, size, 3), dtype=np.float32)
    runner = litert.Interpreter(os.path.join(result["litert"], "model.tflite")
                                ).get_signature_runner()
    # One image alone gives its row of the batch (the batch is dynamic).
    np.testing.assert_allclose(runner(images=images[:1])["embedding"],
                               runner(images=images)["embedding"][:1], atol=1e-6)
    # Bad input (docs/serving.md): ONNX Runtime refuses another size or channel count.
    session = ort.InferenceSession(os.path.join(result["onnx"], "model.onnx"))
    for bad in (images[:, :8], images[..., :1]):
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*images"):
            session.run(None, {"images": bad})
    expected = export_parity.outputs("saved_model", result["saved_model"], images)

    # keras-hub, in a new process: `import simclr_tf` registers the backbone's class.
    np.save(tmp_path / "images.npy", images)
    script = textwrap.dedent(f"""
        import numpy as np, simclr_tf, keras_hub
        backbone = keras_hub.models.Backbone.from_preset({result['keras_hub']!r})
        np.save({str(tmp_path / 'h.npy')!r}, backbone(np.load({str(tmp_path / 'images.npy')!r})))
        print(type(backbone).__name__)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "SimCLRBackbone"
    assert export_parity.relative(np.load(tmp_path / "h.npy"), expected["embedding"]) < 1e-6
    card = open(os.path.join(result["keras_hub"], "README.md")).read()
    assert "library_name: keras-hub" in card and "| `--dataset` | `digits` |" in card
    metadata = json.load(open(os.path.join(result["keras_hub"], "metadata.json")))
    assert metadata["parameter_count"] > 0 and metadata["keras_hub_version"]


def test_the_flag_takes_a_subset_in_any_order_and_names_an_unknown_format():
    cfg = run_fixtures.config(model_dir="/tmp/run", export_format="litert, saved_model")
    assert cfg.export_format == "litert, saved_model"
    from simclr_tf.config import rules  # pylint: disable=import-outside-toplevel
    assert rules.export_formats(cfg.export_format) == ("saved_model", "litert")
    for bad in ("onnx,pdf", ""):
        with pytest.raises(ConfigError, match="export_format.*saved_model, onnx, litert, "
                                              "keras_hub"):
            run_fixtures.config(model_dir="/tmp/run", export_format=bad)


def test_a_missing_extra_is_refused_before_training(monkeypatch, tmp_path):
    def missing(fmt):
        raise ImportError(f"{fmt} needs tf2onnx, an optional extra (No module named "
                          f"'tf2onnx'); install the export extra with "
                          f"`{portable.EXPORT_EXTRA}`")
    monkeypatch.setattr(portable, "require", missing)
    cfg = run_fixtures.config(model_dir=str(tmp_path / "run"), export_format="onnx",
                              train_steps=1)
    with pytest.raises(ConfigError, match=r"--export_format: onnx needs tf2onnx.*"
                                          r"pip install -e '\.\[export\]'"):
        experiment.run(cfg)
    assert not os.path.exists(tmp_path / "run")


@pytest.fixture
def fake_writers(monkeypatch):
    """Each format written as one small file; `fail` names a format that fails."""
    state = dict(fail=None)

    def fake(fmt, marker):
        def write(model, directory, image_size, *args):
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, marker), "w") as f:
                f.write(fmt)
            if state["fail"] == fmt:
                raise ValueError(f"{fmt} cannot hold this model (simulated)")
        return write

    monkeypatch.setattr(export, "create_serving_module", lambda *a, **k: (None, None))
    monkeypatch.setattr(export, "_save", lambda module, path, signatures: fake(
        "saved_model", "saved_model.pb")(None, path, 0))
    monkeypatch.setattr(portable, "write_onnx", fake("onnx", "model.onnx"))
    monkeypatch.setattr(portable, "write_litert", fake("litert", "model.tflite"))
    from simclr_tf.weights import hub_preset  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(hub_preset, "write_preset", fake("keras_hub", "model.weights.h5"))
    monkeypatch.setattr(export_mode, "_model_card", lambda *a: "card")
    return state


@pytest.mark.parametrize("fmt", ["onnx", "litert", "keras_hub"])
def test_each_format_keeps_its_newest_exports_and_the_only_copies(tmp_path, fake_writers,
                                                                  fmt):
    for step in (10, 30, 20):
        export.export_for_step(None, str(tmp_path), step, fmt=fmt, image_size=16,
                               keep_hub_module_max=2, only_copies=[10])
    assert export.exported_steps(str(tmp_path), fmt) == [10, 20, 30]
    assert export.latest_export(str(tmp_path), fmt) == os.path.join(str(tmp_path), fmt, "30")
    export.export_for_step(None, str(tmp_path), 40, fmt=fmt, image_size=16,
                           keep_hub_module_max=2)
    assert export.exported_steps(str(tmp_path), fmt) == [30, 40]
    assert export.exported_steps(str(tmp_path)) == []  # the SavedModels are their own


def test_a_failing_format_names_what_was_written_and_keeps_it(tmp_path, fake_writers):
    cfg = run_fixtures.write_run(tmp_path / "run", mode="export", export_format=ALL)
    for fmt in ("onnx", "keras_hub"):
        export.export_for_step(None, cfg.model_dir, 1, fmt=fmt, image_size=16)
    fake_writers["fail"] = "litert"
    with pytest.raises(export_mode.ExportError) as info:
        export_mode.export_model(None, cfg, 1)
    message = str(info.value)
    assert "Exporting the litert of step 1" in message and "(simulated)" in message
    assert f"The saved_model export is written: {cfg.model_dir}/saved_model/1." in message
    assert "--export_format without litert exports the other formats" in message
    assert export.exported_steps(cfg.model_dir, "litert") == []
    assert not [name for name in os.listdir(os.path.join(cfg.model_dir, "litert"))
                if name.startswith(".")]  # no scratch folder left
    # From run.py's flags (the rest read from the run's record): the earlier export of
    # the failing format stays.
    fake_writers["fail"] = "onnx"
    config = run.config_from_flags(cli_flags.flag_values(
        [f"--model_dir={cfg.model_dir}", "--mode=export", "--export_format=onnx"]))
    with pytest.raises(experiment.ExportError, match="Exporting the onnx of step 1"):
        experiment.run(config)
    assert export.exported_steps(cfg.model_dir, "onnx") == [1]


def test_preflight_refuses_a_keras_hub_export_without_keras_hub(monkeypatch):
    def missing(flag, subject):
        raise ConfigError(flag, f"{subject} needs keras-hub, an optional extra")
    monkeypatch.setattr(preflight, "_require_keras_hub", missing)
    with pytest.raises(ConfigError, match="--export_format: keras_hub needs keras-hub"):
        preflight._check_export_formats(  # pylint: disable=protected-access
            run_fixtures.config(model_dir="/tmp/run", export_format="saved_model,keras_hub"),
            modes.get("train"))


def test_none_ends_training_without_an_export_and_export_mode_needs_a_format(
        tmp_path, fake_writers):
    """--export_format=none (a sweep's runs): the end of training writes nothing;
    --mode=export with it is refused before the model is built."""
    from simclr_tf.config import rules  # pylint: disable=import-outside-toplevel
    assert rules.export_formats(" none ") == ()
    cfg = run_fixtures.write_run(tmp_path / "run", export_format="none")
    assert export_mode.export_model(None, cfg, 1) == {}
    assert sorted(os.listdir(cfg.model_dir)) == ["checkpoint", "ckpt-1.data-00000-of-00001",
                                                 "ckpt-1.index", "flags.json"]
    config = run.config_from_flags(cli_flags.flag_values(
        [f"--model_dir={cfg.model_dir}", "--mode=export", "--export_format=none"]))
    with pytest.raises(ConfigError, match="--export_format: --mode=export writes the "
                                          "exports of --export_format, and 'none' names "
                                          "no format; name the ones to write, e.g. "
                                          "--export_format=saved_model"):
        experiment.run(config)
    assert export.exported_steps(cfg.model_dir) == []
    with pytest.raises(ConfigError, match="must be 'none' or a comma-separated subset.*"
                                          "'none' unknown"):
        run_fixtures.config(model_dir="/tmp/run", export_format="none,onnx")
