"""Runs a run's ONNX, LiteRT and keras-hub exports in their own runtimes and compares
them with its SavedModel.

For the newest export of each format in RUN_DIR (`--mode=export
--export_format=saved_model,onnx,litert,keras_hub`), on --images random RGB images of
the run's image size (seeded; images no dataset holds): the SavedModel's
`serving_images` outputs against onnxruntime's, the LiteRT interpreter's (also checked
to hold builtin ops only, no Flex op) and keras-hub's `Backbone.from_preset` h. Prints
the largest difference of each output relative to the SavedModel's largest magnitude;
exits 1 when one is over --tolerance (default 1e-4), 2 on bad arguments.

Needs the export extra (`pip install -e '.[export,hub]'`).

Example:
  python run.py --mode=export --model_dir=/tmp/simclr_quickstart \\
      --export_format=saved_model,onnx,litert,keras_hub
  python scripts/export_parity.py /tmp/simclr_quickstart
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def relative(ours, reference):
    """max |ours - reference| / max |reference|."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    return float(np.abs(ours - reference).max() / max(np.abs(reference).max(), 1e-30))


def litert_ops(path):
    """The op names of a LiteRT file (no delegate: the model's own ops)."""
    from ai_edge_litert import interpreter  # pylint: disable=import-outside-toplevel
    plain = interpreter.Interpreter(path, experimental_op_resolver_type=(
        interpreter.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    return sorted({op["op_name"] for op in plain._get_ops_details()})  # pylint: disable=protected-access


def served(loaded, images):
    """{output: numpy} of a loaded SavedModel's `serving_images` on `images`."""
    signature = loaded.signatures["serving_images"]
    return {name: value.numpy() for name, value in signature(images=images).items()}


def outputs(fmt, path, images):
    """{output: numpy} of the export at `path` on `images`, in its own runtime."""
    # pylint: disable=import-outside-toplevel
    if fmt == "saved_model":
        import tensorflow as tf
        return served(tf.saved_model.load(path), images)
    if fmt == "onnx":
        import onnxruntime
        session = onnxruntime.InferenceSession(os.path.join(path, "model.onnx"))
        return dict(zip([o.name for o in session.get_outputs()],
                        session.run(None, {"images": images})))
    if fmt == "litert":
        from ai_edge_litert import interpreter
        runner = interpreter.Interpreter(os.path.join(path, "model.tflite")).get_signature_runner()
        return dict(runner(images=images))
    import keras_hub
    import simclr_tf  # noqa: F401  (registers the preset's class)
    return {"embedding": keras_hub.models.Backbone.from_preset(path)(images).numpy()}


def compare(run_dir, *, count=16, seed=0):
    """[(format, output, relative difference)] of each export against the SavedModel,
    and the LiteRT file's ops."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from simclr_tf.weights import export  # pylint: disable=import-outside-toplevel
    found = {fmt: export.latest_export(run_dir, fmt) for fmt in export.FORMATS}
    if not found["saved_model"]:
        raise FileNotFoundError(f"{run_dir} has no SavedModel export to compare with: "
                                "run.py --mode=export --model_dir=... first")
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    loaded = tf.saved_model.load(found["saved_model"])
    size = int(loaded.image_size.numpy())
    images = np.random.default_rng(seed).random((count, size, size, 3), dtype=np.float32)
    expected = served(loaded, images)
    rows, ops = [], None
    for fmt in ("onnx", "litert", "keras_hub"):
        if not found[fmt]:
            continue
        got = outputs(fmt, found[fmt], images)
        rows += [(fmt, name, relative(got[name], expected[name])) for name in sorted(got)]
        if fmt == "litert":
            ops = litert_ops(os.path.join(found[fmt], "model.tflite"))
    return rows, ops, found


def main(argv=None):
    parser = argparse.ArgumentParser(prog="export_parity.py", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--images", type=int, default=16, help="images compared (>= 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isdir(args.run_dir):
        parser.error(f"{args.run_dir!r} is not a directory: pass a run's --model_dir")
    if args.images < 1:
        parser.error(f"--images: expected >= 1, got {args.images}")
    try:
        rows, ops, found = compare(args.run_dir, count=args.images, seed=args.seed)
    except FileNotFoundError as error:
        parser.error(str(error))
    if not rows:
        parser.error(f"{args.run_dir} has no onnx, litert or keras_hub export: run.py "
                     "--mode=export --export_format=saved_model,onnx,litert,keras_hub")
    print(f"against {found['saved_model']} on {args.images} random images:")
    for fmt, name, difference in rows:
        print(f"  {fmt:10s} {name:14s} {difference:.2e}")
    flex = [op for op in ops or () if op.lower().startswith("flex")]
    if ops is not None:
        print(f"  litert ops: {', '.join(ops)}" + (f" (Flex: {flex})" if flex else ""))
    worst = max(difference for _, _, difference in rows)
    return 1 if worst > args.tolerance or flex else 0


if __name__ == "__main__":
    sys.exit(main())
