"""Runs a run's ONNX, LiteRT and keras-hub exports in their own runtimes and compares
each with the SavedModel of the same checkpoint step.

For the newest export of each format in RUN_DIR (`run.py --mode=export
--export_format=saved_model,onnx,litert,keras_hub`) and the SavedModel of *its* step
(`saved_model/<step>`; a format whose step has none FAILs, naming the steps there), on
--images random images of the run's image size (seeded), already preprocessed, fed
alike to every side: the SavedModel's model on preprocessed images (the hub interface
`loaded(images)`, whose `final_avg_pool`, `proj_head_output` and `logits_sup` are what
`serving_images` returns as `embedding`, `projection` and `logits`), onnxruntime's
outputs, the LiteRT interpreter's (also checked to hold builtin ops only, no Flex op)
and keras-hub's `Backbone.from_preset` h. (The files take preprocessed images;
`serving_images` preprocesses in its graph, centre-cropping above 32 px: fed raw
images it would see other pixels.)

For each output it prints the largest absolute difference and that over the
SavedModel's largest magnitude (relative), against --tolerance (on the relative
difference, default 1e-4; a finite number >= 0); then one line per format, PASS or
FAIL. FAIL: a relative difference over the tolerance, any non-finite value on either
side, an output one side lacks, another step's SavedModel missing, a Flex op, a file
its runtime cannot load or run (torn, damaged) or whose input has another size than
the run's; the other formats are still checked. Exit status 0 when every format
passes, 1 when one fails, 2 on bad arguments.

Needs the export extra (`pip install -e '.[export,hub]'`).

Example:
  python run.py --mode=export --model_dir=/tmp/simclr_quickstart \\
      --export_format=saved_model,onnx,litert,keras_hub
  python scripts/export_parity.py /tmp/simclr_quickstart
"""
import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # a plain script: runs from a checkout too

# What each format's file returns, and the SavedModel's hub-interface name of each.
SAVED_MODEL_NAMES = {"embedding": "final_avg_pool", "projection": "proj_head_output",
                     "logits": "logits_sup"}
FORMATS = ("onnx", "litert", "keras_hub")


def differences(ours, reference):
    """(max |ours - reference|, that / max |reference|): NaN when either side holds a
    non-finite value (never a pass)."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    if ours.shape != reference.shape:
        return math.inf, math.inf
    if not (np.isfinite(ours).all() and np.isfinite(reference).all()):
        return math.nan, math.nan
    absolute = float(np.abs(ours - reference).max()) if ours.size else 0.0
    return absolute, absolute / max(float(np.abs(reference).max()) if ours.size else 0.0,
                                    1e-30)


def litert_ops(path):
    """The op names of a LiteRT file (no delegate: the model's own ops)."""
    from ai_edge_litert import interpreter  # pylint: disable=import-outside-toplevel
    plain = interpreter.Interpreter(path, experimental_op_resolver_type=(
        interpreter.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    return sorted({op["op_name"] for op in plain._get_ops_details()})  # pylint: disable=protected-access


def saved_model_outputs(loaded, images):
    """{output: numpy} of a loaded SavedModel's model on preprocessed `images`, named
    as the serving signatures and the files name them."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    features = loaded(images, trainable=False)
    found = {name: features[key].numpy() for name, key in SAVED_MODEL_NAMES.items()
             if key in features}
    if "logits" in found:
        logits = found["logits"].astype(np.float64)
        exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
        found["probabilities"] = (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)
    return found


class Unusable(Exception):
    """An export that its runtime cannot load or run as the run's model: the reason."""


def _check_size(shape, images):
    """Unusable when the file's input `shape` [N, H, W, C] fixes another H or W than
    the run's (a file of another export, or another run)."""
    sizes = [dim for dim in list(shape)[1:3] if isinstance(dim, int) and dim > 0]
    if any(dim != images.shape[1] for dim in sizes):
        raise Unusable(f"input size {'x'.join(map(str, list(shape)[1:3]))}, the run's "
                       f"{images.shape[1]}x{images.shape[2]}: not this run's model")


def outputs(fmt, path, images):
    """{output: numpy} of the export at `path` on `images`, in its own runtime;
    Unusable naming why the file cannot give them (torn, another size, refused by
    its runtime)."""
    # pylint: disable=import-outside-toplevel
    try:
        if fmt == "onnx":
            import onnxruntime
            session = onnxruntime.InferenceSession(os.path.join(path, "model.onnx"))
            _check_size(session.get_inputs()[0].shape, images)
            return dict(zip([o.name for o in session.get_outputs()],
                            session.run(None, {"images": images})))
        if fmt == "litert":
            from ai_edge_litert import interpreter
            runner = interpreter.Interpreter(
                os.path.join(path, "model.tflite")).get_signature_runner()
            _check_size(runner.get_input_details()["images"]["shape"].tolist(), images)
            return dict(runner(images=images))
    except Unusable:
        raise
    except Exception as error:  # pylint: disable=broad-except  (any runtime's refusal)
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise Unusable(f"cannot be loaded or run by its runtime: {lines[-1][:200]}") \
            from error
    import keras_hub
    import simclr_tf  # noqa: F401  (registers the preset's class)
    return {"embedding": keras_hub.models.Backbone.from_preset(path)(images).numpy()}


def compare(run_dir, *, count=16, seed=0):
    """{format: dict(step, saved_model, rows=[(output, absolute, relative, problem)],
    problem, ops)}: each format's newest export against the SavedModel of its step."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from simclr_tf.run import quiet  # pylint: disable=import-outside-toplevel
    tf = quiet.import_tensorflow(level=2)  # a check's output: no TensorFlow warnings
    from simclr_tf.weights import export  # pylint: disable=import-outside-toplevel
    saved_steps = export.exported_steps(run_dir, "saved_model")
    report, loaded = {}, {}
    for fmt in FORMATS:
        steps = export.exported_steps(run_dir, fmt)
        if not steps:
            continue
        step = steps[-1]
        entry = report[fmt] = dict(step=step, path=os.path.join(
            run_dir, export.FORMATS[fmt].dirname, str(step)), rows=[], ops=None,
            problem=None, saved_model=None)
        if step not in saved_steps:
            entry["problem"] = (
                f"no SavedModel of step {step} to compare with (saved_model/ holds "
                f"steps {saved_steps or 'none'}); export both from one checkpoint: "
                f"python run.py --mode=export --model_dir={run_dir} --export_format="
                f"saved_model,{fmt}")
            continue
        entry["saved_model"] = os.path.join(run_dir, export.SAVED_MODEL_DIRNAME, str(step))
        if step not in loaded:
            model = tf.saved_model.load(entry["saved_model"])
            size = int(model.image_size.numpy())
            images = np.random.default_rng(seed).random((count, size, size, 3),
                                                        dtype=np.float32)
            loaded[step] = (images, saved_model_outputs(model, images))
        images, expected = loaded[step]
        try:
            with quiet.converters_quiet():  # LiteRT's delegate notice
                got = outputs(fmt, entry["path"], images)
        except Unusable as error:  # a FAIL of this format; the others are still checked
            entry["problem"] = str(error)
            continue
        wanted = ["embedding"] if fmt == "keras_hub" else sorted(expected)
        for name in sorted(set(wanted) | set(got)):
            if name not in got:
                entry["rows"].append((name, None, None, f"{fmt} lacks it"))
            elif name not in expected:
                entry["rows"].append((name, None, None, "the SavedModel lacks it"))
            else:
                absolute, relative = differences(got[name], expected[name])
                problem = ("non-finite values" if math.isnan(relative) else
                           "another shape" if math.isinf(relative) else None)
                entry["rows"].append((name, absolute, relative, problem))
        if fmt == "litert":
            entry["ops"] = litert_ops(os.path.join(entry["path"], "model.tflite"))
            flex = [op for op in entry["ops"] if op.lower().startswith("flex")]
            if flex:
                entry["problem"] = f"Flex ops (TensorFlow's own, not builtin): {flex}"
    return report


def verdicts(report, tolerance):
    """{format: (passed, why)}: PASS only when every output of the format is present on
    both sides, finite, and within `tolerance` relative to the SavedModel."""
    result = {}
    for fmt, entry in report.items():
        why = [entry["problem"]] if entry["problem"] else []
        why += [f"{name}: {problem}" for name, _, _, problem in entry["rows"] if problem]
        why += [f"{name}: {relative:.2e} > {tolerance:g}" for name, _, relative, problem
                in entry["rows"] if not problem and not relative <= tolerance]
        if not entry["rows"] and not why:
            why = ["no output compared"]
        result[fmt] = (not why, "; ".join(why))
    return result


def _tolerance(text):
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(prog="export_parity.py", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--images", type=int, default=16, help="images compared (>= 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=_tolerance, default=1e-4,
                        help="largest relative difference that passes (finite, >= 0)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isdir(args.run_dir):
        parser.error(f"{args.run_dir!r} is not a directory: pass a run's --model_dir")
    if args.images < 1:
        parser.error(f"--images: expected >= 1, got {args.images}")
    present = [fmt for fmt in FORMATS if os.path.isdir(os.path.join(args.run_dir, fmt))]
    if not present:
        parser.error(f"{args.run_dir} has no onnx, litert or keras_hub export: run.py "
                     "--mode=export --export_format=saved_model,onnx,litert,keras_hub")
    report = compare(args.run_dir, count=args.images, seed=args.seed)
    if not report:
        parser.error(f"{args.run_dir} has no complete onnx, litert or keras_hub export")
    print(f"{args.images} random images at the run's size, preprocessed, fed alike to "
          f"each side; tolerance {args.tolerance:g} on the relative difference (max "
          "|diff| / the SavedModel's max |value|)")
    print(f"  {'format':10s} {'step':>6s}  {'output':13s} {'max |diff|':>10s} "
          f"{'relative':>10s}")
    for fmt, entry in report.items():
        against = (f"against saved_model/{entry['step']}" if entry["saved_model"]
                   else "")
        print(f"  {fmt:10s} {entry['step']:6d}  {against}")
        for name, absolute, relative, problem in entry["rows"]:
            numbers = (f"{absolute:10.2e} {relative:10.2e}" if absolute is not None
                       else f"{'-':>10s} {'-':>10s}")
            print(f"  {'':10s} {'':6s}  {name:13s} {numbers}"
                  + (f"  ({problem})" if problem else ""))
        if entry["ops"] is not None:
            print(f"  {'':10s} {'':6s}  litert ops: {', '.join(entry['ops'])}")
    results = verdicts(report, args.tolerance)
    for fmt, (passed, why) in results.items():
        print(f"{fmt} (step {report[fmt]['step']}): " + ("PASS" if passed else
                                                          f"FAIL ({why})"))
    return 0 if all(passed for passed, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
