"""--export_format: ONNX, LiteRT and keras-hub exports beside the SavedModel.

The parity test runs each file in its own runtime (onnxruntime, the LiteRT
interpreter, keras-hub in a new process) on images the model never saw and compares
it with the SavedModel; the rest are the flag, the retention rules and the errors,
without converting a model.
"""
import dataclasses
import errno
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import run
from simclr_tf.config import Config, ConfigError
from simclr_tf.config.tables import modes
from simclr_tf.run import experiment, preflight
from simclr_tf.run.modes import export as export_mode
from simclr_tf.rundir import records
from simclr_tf.weights import cards, export, portable
from helpers import cli_flags, run_fixtures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "scripts"))
import export_parity  # noqa: E402  pylint: disable=wrong-import-position

ALL = "saved_model,onnx,litert,keras_hub"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTRA = "the export extra (pip install -e '.[export]')"
SERVING_DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "docs", "serving.md")


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
    report = export_parity.compare(cfg.model_dir, count=5, seed=7)
    assert {fmt: entry["path"] for fmt, entry in report.items()} == {
        fmt: result[fmt] for fmt in ("onnx", "litert", "keras_hub")}
    assert {entry["saved_model"] for entry in report.values()} == {result["saved_model"]}
    assert {(fmt, name) for fmt, entry in report.items() for name, *_ in entry["rows"]} \
        == {(fmt, name) for fmt in ("onnx", "litert")
            for name in ("embedding", "logits", "probabilities", "projection")} | {
        ("keras_hub", "embedding")}
    for fmt, entry in report.items():
        for name, _, difference, problem in entry["rows"]:
            assert problem is None and difference < (1e-6 if fmt == "keras_hub" else 1e-4), (
                fmt, name, difference)
    assert all(passed for passed, _ in export_parity.verdicts(report, 1e-4).values())
    ops = report["litert"]["ops"]
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
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    expected = export_parity.saved_model_outputs(tf.saved_model.load(result["saved_model"]),
                                                 images)

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
    assert export_parity.differences(np.load(tmp_path / "h.npy"), expected["embedding"]
                                     )[1] < 1e-6
    _planted_faults_fail_the_parity_check(cfg.model_dir, tmp_path, capsys)
    card = open(os.path.join(result["keras_hub"], "README.md")).read()
    assert "library_name: keras-hub" in card and "| `--dataset` | `digits` |" in card
    metadata = json.load(open(os.path.join(result["keras_hub"], "metadata.json")))
    assert metadata["parameter_count"] > 0 and metadata["keras_hub_version"]


def _planted_faults_fail_the_parity_check(run_dir, tmp_path, capsys):
    """export_parity.py on copies of a good run, each with one fault planted: it FAILs
    (rc 1) on each, naming it (faults 6 and 9 of 2026-12-05's catalogue)."""
    import shutil  # pylint: disable=import-outside-toplevel
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    def planted(name, change):
        copy = tmp_path / name
        shutil.copytree(run_dir, copy)
        change(copy)
        return str(copy)

    def onnx_weights(scale):
        def change(copy):
            path = str(copy / "onnx" / "4" / "model.onnx")
            model = onnx.load(path)
            for weight in model.graph.initializer:
                value = numpy_helper.to_array(weight)
                if value.dtype == np.float32 and value.size > 100:
                    weight.CopyFrom(numpy_helper.from_array(value * scale, weight.name))
            onnx.save(model, path)
        return change

    def no_projection(copy):
        path = str(copy / "onnx" / "4" / "model.onnx")
        model = onnx.load(path)
        kept = [o for o in model.graph.output if o.name != "projection"]
        del model.graph.output[:]
        model.graph.output.extend(kept)
        onnx.save(model, path)

    def torn(copy):  # the first 10% of the file, as a copy cut short leaves it
        path = copy / "onnx" / "4" / "model.onnx"
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 10])

    def other_size(copy):  # an export of the same model at 24 px (2026-12-06's fault 11)
        path = str(copy / "onnx" / "4" / "model.onnx")
        model = onnx.load(path)
        for dim in model.graph.input[0].type.tensor_type.shape.dim[1:3]:
            dim.dim_value = 24
        onnx.save(model, path)

    cases = {
        # Were tracebacks, and litert got no verdict.
        "torn": (torn, "onnx (step 4): FAIL (cannot be loaded or run by its runtime: "),
        "other_size": (other_size, "onnx (step 4): FAIL (input size 24x24, the run's "),
        "nan": (onnx_weights(np.float32("nan")), "onnx (step 4): FAIL (embedding: "
                "non-finite values"),
        "scaled": (onnx_weights(np.float32(1.01)), "onnx (step 4): FAIL (embedding: "),
        "lacking": (no_projection, "onnx (step 4): FAIL (projection: onnx lacks it)"),
        "other_step": (lambda copy: os.rename(copy / "onnx" / "4", copy / "onnx" / "6"),
                       "onnx (step 6): FAIL (no SavedModel of step 6 to compare with "
                       "(saved_model/ holds steps [4])"),
    }
    capsys.readouterr()
    for name, (change, message) in cases.items():
        copy = planted(name, change)
        if name == "nan":  # as a user runs it: its own process, no TensorFlow chatter
            done = subprocess.run([sys.executable, export_parity.__file__, copy,
                                   "--images=3"], capture_output=True, text=True,
                                  check=False, timeout=300)
            code, out, err = done.returncode, done.stdout, done.stderr
            assert "ERROR" not in err and "W0000" not in err and "INFO" not in err, err
        else:
            code = export_parity.main([copy, "--images=3"])
            out = capsys.readouterr().out
        assert code == 1 and message in out, (name, out)
        assert "litert (step 4): PASS" in out  # the faults are the ONNX file's


@pytest.mark.parametrize("tolerance", ["nan", "inf", "-1", "x"])
def test_parity_refuses_a_tolerance_that_passes_anything(tolerance, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        export_parity.main([str(tmp_path), f"--tolerance={tolerance}"])
    assert info.value.code == 2 and "--tolerance" in capsys.readouterr().err


def test_parity_verdicts_fail_on_nan_missing_and_over_tolerance():
    """The verdict alone, on planted rows: NaN is never a pass (NaN > tolerance is
    False: the old check passed it)."""
    nan = float("nan")
    rows = lambda *r: dict(step=4, rows=list(r), problem=None, ops=None)  # noqa: E731
    report = dict(
        good=rows(("embedding", 1e-7, 1e-7, None)),
        over=rows(("embedding", 1e-3, 2e-4, None)),
        nan=rows(("embedding", nan, nan, None)),
        lacking=rows(("embedding", 1e-7, 1e-7, None), ("projection", None, None, "x lacks it")),
        empty=rows())
    verdicts = export_parity.verdicts(report, 1e-4)
    assert verdicts["good"] == (True, "")
    assert verdicts["over"] == (False, "embedding: 2.00e-04 > 0.0001")
    assert verdicts["nan"] == (False, "embedding: nan > 0.0001")
    assert verdicts["lacking"] == (False, "projection: x lacks it")
    assert verdicts["empty"] == (False, "no output compared")
    assert export_parity.differences(np.array([1.0, nan]), np.array([1.0, 2.0]))[1] != 0
    assert math.isnan(export_parity.differences(np.ones(2), np.array([1.0, np.inf]))[0])


@pytest.mark.large  # ~10 s: a 40 px bfloat16 tiny model in four formats, three runtimes
def test_a_bfloat16_model_at_40_px_exports_float32_files_that_pass(tmp_path):
    """Faults 8 and 10: above 32 px the files take preprocessed images (the check
    feeds every side the same ones: it passed correct exports only up to 32 px); a
    --mixed_precision=bfloat16 model exports float32 graphs that onnxruntime loads and
    that agree with the SavedModel (also float32)."""
    pytest.importorskip("onnxruntime", reason=f"needs {EXTRA}")
    pytest.importorskip("keras_hub", reason="needs keras-hub (pip install -e '.[hub]')")
    from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
    model = SimCLRModel(encoder="tiny", encoder_options=dict(width_multiplier=0.125),
                        num_proj_layers=2, proj_out_dim=16, num_classes=10,
                        dtype="mixed_bfloat16")
    model.build((None, 40, 40, 3))
    for fmt in ALL.split(","):
        export.export_for_step(model, str(tmp_path), 3, fmt=fmt, image_size=40)
    report = export_parity.compare(str(tmp_path), count=4)
    verdicts = export_parity.verdicts(report, 1e-4)
    assert verdicts == {fmt: (True, "") for fmt in ("onnx", "litert", "keras_hub")}, report
    import onnx  # pylint: disable=import-outside-toplevel
    graph = onnx.load(str(tmp_path / "onnx" / "3" / "model.onnx")).graph
    types = {weight.data_type for weight in graph.initializer}
    assert onnx.TensorProto.FLOAT in types and onnx.TensorProto.BFLOAT16 not in types
    # The model itself still trains in bfloat16: the export made a float32 copy.
    assert model.dtype_policy.compute_dtype == "bfloat16"


def test_the_flag_takes_a_subset_in_any_order_and_names_an_unknown_format():
    cfg = run_fixtures.config(model_dir="/tmp/run", export_format="litert, saved_model")
    assert cfg.export_format == "litert, saved_model"
    from simclr_tf.config import rules  # pylint: disable=import-outside-toplevel
    assert rules.export_formats(cfg.export_format) == ("saved_model", "litert")
    for bad in ("onnx,pdf", ""):
        with pytest.raises(ConfigError, match="export_format.*saved_model, onnx, litert, "
                                              "keras_hub"):
            run_fixtures.config(model_dir="/tmp/run", export_format=bad)
    # A typo of an alias means what the alias means (2026-12-06: 'tfile' got no hint).
    for bad, meant in (("tflite", "litert"), ("keras-hub", "keras_hub"), ("onx", "onnx"),
                       ("tfile", "litert"), ("savemodel", "saved_model")):
        with pytest.raises(ConfigError, match=f"'{bad}' unknown: did you mean {meant}\\?"):
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


def test_every_missing_extra_is_named_in_one_error(monkeypatch):
    """Newcomer 2026-12-06: the README's export line without the extras named keras-hub
    only (21 s), then, once keras_hub was dropped, tf2onnx: one round trip per extra.
    One error names both."""
    def missing(fmt):
        raise ImportError(f"{fmt} needs tf2onnx, an optional extra")
    monkeypatch.setattr(portable, "require", missing)

    def no_hub(flag, subject):
        raise ConfigError(flag, f"{subject} needs keras-hub, an optional extra")
    monkeypatch.setattr(preflight, "_require_keras_hub", no_hub)
    with pytest.raises(ConfigError) as info:
        preflight._check_export_formats(  # pylint: disable=protected-access
            run_fixtures.config(model_dir="/tmp/run", mode="export",
                                export_format="saved_model,onnx,litert,keras_hub"),
            modes.get("export"))
    assert str(info.value) == ("--export_format: keras_hub needs keras-hub, an optional "
                               "extra; onnx needs tf2onnx, an optional extra")


def test_an_export_failing_after_training_keeps_the_runs_record(tiny_run, tmp_path,
                                                                fake_writers):
    """Fault 10: a converter's own error class (the TFLite converter's ConverterError)
    after training was a traceback, and the run had no result.json. It is the one
    ExportError line naming the format, after result.json is written."""
    class ConverterError(Exception):
        """Not an OSError, ValueError or OpError: what the TFLite converter raises."""
    fake_writers.update(fail="litert", error=ConverterError)
    cfg = tiny_run.copy_to(tmp_path / "run", train_steps=5, export_format=ALL,
                           knn_eval_split="")
    with pytest.raises(experiment.ExportError, match="Exporting the litert of step 5 .*"
                       "failed: litert cannot hold this model"):
        experiment.run(cfg)
    result = json.load(open(os.path.join(cfg.model_dir, "result.json")))
    assert result["global_step"] == 5 and "litert of step 5" in result["export_failed"]
    assert export.exported_steps(cfg.model_dir, "onnx") == [5]
    assert export.exported_steps(cfg.model_dir, "litert") == []


@pytest.fixture
def fake_writers(monkeypatch):
    """Each format written as one small file; `fail` names a format that fails."""
    state = dict(fail=None, error=ValueError)

    def fake(fmt, marker):
        def write(model, directory, image_size, *args):
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, marker), "w") as f:
                f.write(fmt)
            if state["fail"] == fmt:
                raise state["error"](f"{fmt} cannot hold this model (simulated)")
        return write

    monkeypatch.setattr(export, "create_serving_module", lambda *a, **k: (None, None))
    monkeypatch.setattr(export, "_save", lambda module, path, signatures: fake(
        "saved_model", "saved_model.pb")(None, path, 0))
    monkeypatch.setattr(portable, "write_onnx", fake("onnx", "model.onnx"))
    monkeypatch.setattr(portable, "write_litert", fake("litert", "model.tflite"))
    from simclr_tf.weights import hub_preset  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(hub_preset, "write_preset", fake("keras_hub", "model.weights.h5"))
    from simclr_tf.weights import cards  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(cards, "output_widths", lambda model, size: dict(embedding=16))
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


def test_a_full_disk_is_said_once_with_the_space_left(tmp_path, fake_writers):
    """The scratch file a full disk stopped (a hidden folder's, removed since) and a
    second advice crowded out the rest of the line; now: the space left, once."""
    cfg = run_fixtures.write_run(tmp_path / "run", mode="export", export_format="keras_hub")
    fake_writers.update(fail="keras_hub",
                        error=lambda message: OSError(errno.ENOSPC, "No space left"))
    with pytest.raises(export_mode.ExportError) as info:
        export_mode.export_model(None, cfg, 1)
    assert str(info.value).startswith(
        f"Exporting the keras_hub of step 1 to {cfg.model_dir}/keras_hub failed: no space "
        "left on the device ("), str(info.value)
    assert str(info.value).endswith("free space (or fix the path) and run the same flags "
                                    "with --mode=export --export_format=keras_hub.")


def test_the_presets_weights_file_is_made_in_memory_and_written_whole(tmp_path,
                                                                     monkeypatch):
    """What keeps HDF5 away from a failed write (the next test's fault): h5py opens no
    file on disk while the preset's weights are written; the file Python writes loads
    back the same weights; a failed write leaves no file and is an OSError."""
    pytest.importorskip("keras_hub", reason="needs keras-hub (pip install -e '.[hub]')")
    import h5py  # pylint: disable=import-outside-toplevel
    from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
    from simclr_tf.rundir import files  # pylint: disable=import-outside-toplevel
    from simclr_tf.weights import hub_preset  # pylint: disable=import-outside-toplevel
    model = SimCLRModel(encoder="tiny", encoder_options=dict(width_multiplier=0.125),
                        proj_out_dim=8, num_proj_layers=1)
    model.build((None, 16, 16, 3))
    backbone = hub_preset.backbone_of(model, 16)
    opened, h5_file = [], h5py.File

    def recorded(name, *args, **kwargs):
        opened.append(name)
        return h5_file(name, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", recorded)
    path = str(tmp_path / "model.weights.h5")
    backbone.save_weights(path)
    assert opened and not [name for name in opened if isinstance(name, (str, os.PathLike))]
    monkeypatch.setattr(h5py, "File", h5_file)
    again = hub_preset.backbone_of(model, 16)
    for variable in again.weights:
        variable.assign(np.zeros(variable.shape, variable.dtype))
    again.load_weights(path)
    for ours, theirs in zip(again.weights, backbone.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.tf.io.gfile, "GFile", full)
    with pytest.raises(OSError, match="no space left on the device"):
        backbone.save_weights(str(tmp_path / "second.weights.h5"))
    assert sorted(os.listdir(tmp_path)) == ["model.weights.h5"]


@pytest.mark.large  # 10-15 s: run.py's process (the test above guards the mechanism)
def test_a_keras_hub_export_the_disk_cannot_hold_ends_with_its_error(tmp_path):
    """Round VI, 20: on a full disk the keras-hub export printed its error, then h5py's
    'Exception ignored' tracebacks, and the process died in a segmentation fault (exit
    139): HDF5 writing model.weights.h5 failed inside its library. The file is made in
    memory and written by Python (`SimCLRBackbone.save_weights`). A file-size limit
    (`ulimit -f`; Python ignores SIGXFSZ, so the write fails with EFBIG) stands in for
    the full disk: the same failure in HDF5 (exit 139 before), with no mount needed.
    The process's exit status is the subject: run.py in its own process."""
    pytest.importorskip("keras_hub", reason="needs keras-hub (pip install -e '.[hub]')")
    cfg = run_fixtures.write_run(tmp_path / "run")  # its model.weights.h5: 35 kB
    result = subprocess.run(
        ["bash", "-c", 'ulimit -f 16 && exec "$0" run.py --mode=export --model_dir="$1" '
         "--export_format=keras_hub", sys.executable, cfg.model_dir],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, (result.returncode, result.stderr[-3000:])
    for sign in ("Segmentation fault", "Exception ignored", "Traceback"):
        assert sign not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"run.py: error: Exporting the keras_hub of step 1 to {cfg.model_dir}/keras_hub "
        "failed: "), result.stderr[-3000:]
    assert os.listdir(os.path.join(cfg.model_dir, "keras_hub")) == []  # nothing partial


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


# ------------------------------------------------------------------ the export cards


def _card(model_dir, fmt, step):
    with open(os.path.join(model_dir, export.FORMATS[fmt].dirname, str(step),
                           cards.CARD_FILE)) as f:
        return f.read()


def test_every_export_folder_has_a_card_with_its_steps_results_only(tmp_path,
                                                                   fake_writers):
    """Fault 12 of 2026-12-05: the keras-hub card of an export of ckpt-2 carried
    result.json's step-4 numbers and flags the tiny encoder does not read
    (--resnet_depth) beside a step plan it did not use (--train_epochs); the other
    formats had no card. Each folder now has one, written with its files."""
    cfg = run_fixtures.write_run(tmp_path / "run", train_steps=4, export_format=ALL)
    result = {"global_step": 4, "train/contrast_loss": 8.82}
    with open(os.path.join(cfg.model_dir, "result.json"), "w") as f:
        json.dump(result, f)
    export_mode.export_model(None, cfg, 2)
    for fmt in ALL.split(","):
        card = _card(cfg.model_dir, fmt, 2)
        assert card.startswith("---\nlibrary_name: keras-hub") == (fmt == "keras_hub")
        assert f"# SimCLR model (digits, step 2): {fmt}" in card
        assert "No results recorded for this step (result.json records step 4)." in card
        assert "8.82" not in card
        assert "| `--encoder` | `tiny` |" in card and "| `--width_multiplier` |" in card
        assert "| `--train_steps` | `4` |" in card
        assert "--resnet_depth" not in card and "--train_epochs" not in card
        assert "| `embedding` | [N, 16] | float32 |" in card
    assert "| `images` | [N, 16, 16, 3], any N | float32 | RGB in [0, 1]" in _card(
        cfg.model_dir, "onnx", 2)
    saved = _card(cfg.model_dir, "saved_model", 2)
    assert "| `serving_default` | `image_bytes` | [N] | string |" in saved
    assert "| `serving_images` | `images` | [N, H, W, 3], any H, W | float32 |" in saved
    assert "**Check the size yourself**" in _card(cfg.model_dir, "litert", 2)
    assert "Another size is refused" in _card(cfg.model_dir, "onnx", 2)
    export_mode.export_model(None, cfg, 4)  # the step result.json records
    assert "| `train/contrast_loss` | 8.82 |" in _card(cfg.model_dir, "keras_hub", 4)


def test_the_recipe_names_the_flags_its_encoder_and_step_plan_used():
    flags = dict(dataset="imagenet2012", train_mode="pretrain", encoder="resnet",
                 resnet_depth=50, width_multiplier=2, sk_ratio=0.0625, se_ratio=0.0,
                 stem="imagenet", train_steps=0, train_epochs=100, temperature=0.1,
                 use_blur=True, vit_pool="token")
    assert list(cards.recipe_flags(flags)) == [
        "dataset", "train_mode", "encoder", "resnet_depth", "width_multiplier",
        "sk_ratio", "se_ratio", "stem", "train_epochs", "temperature", "use_blur"]
    fine_tune = dict(flags, encoder="vit_s16", train_mode="finetune", train_steps=500)
    assert list(cards.recipe_flags(fine_tune)) == [
        "dataset", "train_mode", "encoder", "vit_pool", "train_steps"]


def test_the_recipe_names_the_data_and_the_start_a_fine_tune_was_made_of():
    """2026-12-06, 12: a fine-tune's card left out --label_fraction=0.1 and the run it
    was fine-tuned from (--checkpoint), and the quick start's dropped --warmup_epochs
    and --head_learning_rate, a bfloat16 run's --mixed_precision. Every flag that
    changes the optimisation or the data is on it when not at its default; where the
    run is, how it is evaluated and exported (`records.FREE_FLAGS`) are not."""
    fine_tune = dict(Config().to_dict(), dataset="digits", train_mode="finetune",
                     checkpoint="/runs/simclr_quickstart", label_fraction=0.1,
                     fine_tune_after_block=2, ft_proj_selector=1, encoder="tiny",
                     train_steps=30, model_dir="/runs/ft", eval_split="test",
                     export_format="onnx", mixed_precision="bfloat16")
    recipe = cards.recipe_flags(fine_tune)
    for flag in ("checkpoint", "label_fraction", "fine_tune_after_block",
                 "ft_proj_selector", "mixed_precision"):
        assert flag in recipe, (flag, recipe)
    assert list(recipe)[:4] == ["dataset", "train_split", "train_mode", "checkpoint"]
    for flag in ("model_dir", "eval_split", "export_format", "train_epochs"):
        assert flag not in recipe, (flag, recipe)
    quick_start = dict(Config().to_dict(), warmup_epochs=5.0, head_learning_rate=0.1)
    assert {"warmup_epochs", "head_learning_rate"} <= set(cards.recipe_flags(quick_start))


def _second_checkpoint(model_dir, step):
    """model_dir's ckpt-1 again as ckpt-`step`, its newest checkpoint (a run extended)."""
    for name in os.listdir(model_dir):
        if name.startswith("ckpt-1."):
            shutil.copy(os.path.join(model_dir, name),
                        os.path.join(model_dir, name.replace("ckpt-1.", f"ckpt-{step}.")))
    tf.compat.v1.train.update_checkpoint_state(model_dir, os.path.join(model_dir, f"ckpt-{step}"),
                                     [os.path.join(model_dir, "ckpt-1")])


def test_an_older_steps_card_gives_the_flags_of_that_step(tmp_path, fake_writers):
    """2026-12-06, 13: a 2-step run extended to 4 steps; an export of ckpt-2 (the newest
    damaged) said `--train_steps 4`, flags.json's, which wrote ckpt-4 only. The card
    of an older step undoes the changes flags_history.json records from that step on
    (each entry now says the step its run started from); an entry without that step
    (written before) leaves the value unknown, and the card says so."""
    cfg = run_fixtures.write_run(tmp_path / "run", train_steps=1, export_format="onnx",
                                 keep_hub_module_max=3)
    _second_checkpoint(cfg.model_dir, 3)
    extended = dataclasses.replace(cfg, train_steps=3)
    record = records.start_run_record(extended, continues=True, from_step=1)
    record.write()
    history = json.loads((tmp_path / "run" / records.HISTORY_FILE).read_text())
    assert history[-1]["from_step"] == 1
    assert history[-1]["changed"] == {"train_steps": {"recorded": 1, "given": 3}}
    export_mode.export_model(None, extended, 1)
    export_mode.export_model(None, extended, 3)
    assert "| `--train_steps` | `1` |" in _card(cfg.model_dir, "onnx", 1)
    assert "| `--train_steps` | `3` |" in _card(cfg.model_dir, "onnx", 3)
    assert "may have had their earlier values" not in _card(cfg.model_dir, "onnx", 1)
    # The fault's own case: the newest checkpoint damaged (the export fell back to the
    # older one, which `checkpoints.latest` then returns).
    data = os.path.join(cfg.model_dir, "ckpt-3.data-00000-of-00001")
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    shutil.rmtree(os.path.join(cfg.model_dir, "onnx", "1"))
    export_mode.export_model(None, extended, 1)
    assert "| `--train_steps` | `1` |" in _card(cfg.model_dir, "onnx", 1)
    del history[-1]["from_step"]  # a history written before it recorded the step
    (tmp_path / "run" / records.HISTORY_FILE).write_text(json.dumps(history))
    shutil.rmtree(os.path.join(cfg.model_dir, "onnx", "1"))
    export_mode.export_model(None, extended, 1)
    assert ("flags_history.json records changes of `--train_steps` at steps it does not "
            "name: at step 1 they may have had their earlier values") in _card(
                cfg.model_dir, "onnx", 1)


def test_a_card_that_cannot_be_written_leaves_the_previous_export(tmp_path, fake_writers,
                                                                  monkeypatch):
    """The card is part of the atomic export: if it fails, no folder is renamed into
    place and an earlier export of the same step stays whole."""
    export.export_for_step(None, str(tmp_path), 3, fmt="onnx", image_size=16)
    before = _card(str(tmp_path), "onnx", 3)

    def full_disk(directory, card):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cards, "write_card", full_disk)
    with pytest.raises(OSError, match="No space left"):
        export.export_for_step(None, str(tmp_path), 3, fmt="onnx", image_size=16)
    assert sorted(os.listdir(tmp_path / "onnx")) == ["3"]
    assert sorted(os.listdir(tmp_path / "onnx" / "3")) == ["README.md", "model.onnx"]
    assert _card(str(tmp_path), "onnx", 3) == before


# ------------------------------------------------------------------ without TensorFlow


def documented_recipe():
    """The NumPy + Pillow preprocessing of docs/serving.md, executed as it is written
    there: its `preprocess(file, size)` and `bicubic_matrix`."""
    with open(SERVING_DOC) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    code, = [block for block in blocks if "def preprocess(" in block]
    assert "tensorflow" not in code and "import tf" not in code
    namespace = {}
    exec(code, namespace)  # pylint: disable=exec-used
    return namespace


def _png(pixels):
    from PIL import Image  # pylint: disable=import-outside-toplevel
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def _test_images():
    """PNGs that shrink, enlarge, are not square, grey, or cropped above 32 px."""
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[:64, :48]
    smooth = np.stack([128 + 100 * np.sin(xx / 5), 128 + 100 * np.cos(yy / 7),
                       (2 * xx + yy) % 256], -1).astype(np.uint8)
    return {"smooth_64x48": _png(smooth),
            "noise_37": _png(rng.integers(0, 256, (37, 37, 3), dtype=np.uint8)),
            "grey_30x20": _png(rng.integers(0, 256, (30, 20), dtype=np.uint8)),
            "small_5x7": _png(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8))}


def test_the_documented_recipe_is_the_eval_preprocessing_without_tensorflow():
    """docs/serving.md's NumPy + Pillow recipe against `augment.preprocess_for_eval`
    on the same decoded PNGs, at 16 px and at 40 px (centre crop): to float32
    round-off. PIL's own bicubic resize, the obvious recipe, is far off (the check
    can tell)."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from simclr_tf import augment  # pylint: disable=import-outside-toplevel
    recipe = documented_recipe()
    for size in (16, 40):
        for name, data in _test_images().items():
            expected = augment.preprocess_for_eval(
                tf.io.decode_image(data, channels=3, dtype=tf.float32), size, size,
                crop=augment.eval_center_crop_enabled(size)).numpy()
            got = recipe["preprocess"](io.BytesIO(data), size)
            assert got.dtype == np.float32 and got.shape == (size, size, 3)
            np.testing.assert_allclose(got, expected, atol=1e-6, err_msg=(name, size))
    data = _test_images()["noise_37"]
    pil = np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize(
        (16, 16), Image.BICUBIC), np.float32) / 255
    assert np.abs(pil - recipe["preprocess"](io.BytesIO(data), 16)).max() > 0.1


def test_the_documented_recipe_decodes_16_bit_pngs_as_tensorflow_does():
    """2026-12-06, 10: on a 16-bit grey PNG the recipe's `convert("RGB")` clipped the
    values (the embedding 181% away, another class); TensorFlow scales them by
    1/65535, as the recipe now does. A 16-bit RGB PNG Pillow opens with 8 bits a
    channel: within 1/255, as docs/serving.md says. And the doc names the crop rule:
    `preprocess_for_eval`'s default crops at 16 px, which the export does not."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from simclr_tf import augment  # pylint: disable=import-outside-toplevel
    recipe = documented_recipe()
    rng = np.random.default_rng(1)
    grey = tf.io.encode_png(rng.integers(0, 65536, (40, 30, 1), dtype=np.uint16)).numpy()
    rgb = tf.io.encode_png(rng.integers(0, 65536, (40, 30, 3), dtype=np.uint16)).numpy()
    for data, tolerance in ((grey, 1e-6), (rgb, 1 / 255)):
        decoded = tf.io.decode_image(data, channels=3, dtype=tf.float32)
        for size in (16, 40):
            expected = augment.preprocess_for_eval(
                decoded, size, size, crop=augment.eval_center_crop_enabled(size)).numpy()
            got = recipe["preprocess"](io.BytesIO(data), size)
            np.testing.assert_allclose(got, expected, atol=tolerance)
    with open(SERVING_DOC) as f:
        text = " ".join(f.read().split())
    assert ("`augment.preprocess_for_eval(image, S, S, crop=augment."
            "eval_center_crop_enabled(S))`") in text
    assert "This NumPy + Pillow recipe is `augment.preprocess_for_eval`," not in text


@pytest.mark.large  # 13-20 s: a tiny model at 16 and 40 px as SavedModel, ONNX, LiteRT
def test_the_documented_recipe_into_onnx_gives_serving_default(tmp_path):
    """The issue's check: a PNG decoded by Pillow and preprocessed by docs/serving.md's
    recipe, through the ONNX file in ONNX Runtime, against the SavedModel's
    serving_default fed the same bytes: every output within 1e-5 of its largest
    magnitude, at 16 px and at 40 px (the crop). And the wrong-size behaviour the
    cards state: ONNX refuses another size; LiteRT's signature runner runs it (the
    file cannot prevent it: the caller checks), its strict resize refuses it."""
    ort = pytest.importorskip("onnxruntime", reason=f"needs {EXTRA}")
    litert = pytest.importorskip("ai_edge_litert.interpreter", reason=f"needs {EXTRA}")
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from simclr_tf.models import SimCLRModel  # pylint: disable=import-outside-toplevel
    recipe = documented_recipe()
    for size in (16, 40):
        model = SimCLRModel(encoder="tiny", encoder_options=dict(width_multiplier=0.125),
                            num_proj_layers=2, proj_out_dim=16, num_classes=10)
        model.build((None, size, size, 3))
        model_dir = str(tmp_path / str(size))
        paths = {fmt: export.export_for_step(model, model_dir, 1, fmt=fmt, image_size=size)
                 for fmt in ("saved_model", "onnx", "litert")}
        served = tf.saved_model.load(paths["saved_model"]).signatures["serving_default"]
        session = ort.InferenceSession(os.path.join(paths["onnx"], "model.onnx"))
        names = [output.name for output in session.get_outputs()]
        for name, data in _test_images().items():
            expected = {key: value.numpy() for key, value in
                        served(image_bytes=tf.constant([data])).items()}
            images = recipe["preprocess"](io.BytesIO(data), size)[None]
            got = dict(zip(names, session.run(None, {"images": images})))
            assert set(got) == set(expected) == {"embedding", "projection", "logits",
                                                 "probabilities"}
            for key, value in expected.items():
                relative = np.abs(got[key] - value).max() / np.abs(value).max()
                assert relative < 1e-5, (size, name, key, relative)
        small = np.zeros((1, size // 2, size // 2, 3), np.float32)
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*images"):
            session.run(None, {"images": small})
        interpreter = litert.Interpreter(os.path.join(paths["litert"], "model.tflite"))
        detail, = interpreter.get_input_details()
        assert list(detail["shape_signature"]) == [-1, size, size, 3]
        outputs = interpreter.get_signature_runner()(images=small)  # runs, silently
        assert outputs["embedding"].shape == (1, 16)
        with pytest.raises(RuntimeError, match="only allows mutating unknown dimensions"):
            interpreter.resize_tensor_input(detail["index"], list(small.shape), strict=True)
        assert "**Check the size yourself**" in _card(model_dir, "litert", 1)


def test_parity_gives_every_option_to_what_it_measures(tmp_path, monkeypatch, capsys):
    """A recorder in place of the comparison: --images, --seed and --tolerance arrive
    (a planted drop of any fails here)."""
    (tmp_path / "onnx").mkdir()
    calls = {}
    monkeypatch.setattr(export_parity, "compare", lambda run_dir, **kw: calls.update(
        kw, run_dir=run_dir) or {"onnx": dict(step=4, saved_model="s", ops=None, problem=None,
                                              rows=[("embedding", 1.0, 2e-3, None)])})
    assert export_parity.main([str(tmp_path), "--images=3", "--seed=9",
                               "--tolerance=1e-2"]) == 0  # 2e-3 within 1e-2
    assert calls == dict(run_dir=str(tmp_path), count=3, seed=9)
    assert "onnx (step 4): PASS" in capsys.readouterr().out
    assert export_parity.main([str(tmp_path), "--tolerance=1e-3"]) == 1
