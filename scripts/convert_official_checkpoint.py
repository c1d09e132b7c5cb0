"""Converts one of the authors' released SimCLR TF2 SavedModels into our formats.

    python scripts/convert_official_checkpoint.py SRC DST [--ft_proj_selector N]

SRC: a released SavedModel directory (e.g. `simclrv2/pretrained/r50_1x_sk0/saved_model`),
its `variables/` folder or the checkpoint prefix. Only `variables/` is read.
DST: a file ending in `.keras` (a Keras model file, `keras.saving.load_model` reads
it), or a new directory that receives a `tf.train.Checkpoint(model=model)` with a
`checkpoint` index file, which `run.py --checkpoint=DST` and
`tf.train.latest_checkpoint(DST)` find, plus `official_import.json` with the
`SimCLRModel` arguments to rebuild the model.

The architecture is inferred from the variables; every variable is loaded (BN moving
statistics included) or the conversion fails naming what could not be mapped.
"""
import argparse
import json
import os
import sys

from simclr_tf.run import quiet

tf = quiet.import_tensorflow()

from simclr_tf.weights import official  # noqa: E402  pylint: disable=wrong-import-position


def convert(src, dst, ft_proj_selector=None):
    """Imports `src` and writes it to `dst`; returns the imported model.

    Args:
        src: released SavedModel directory, its `variables/` folder or prefix.
        dst: `.keras` file or a new checkpoint directory.
        ft_proj_selector: which projection layer feeds the supervised head. None
            reads it from the SavedModel's graph or the head's input width; where
            neither tells (a bare variables/ folder whose head layers all have the
            width of h) it must be given.

    Raises:
        FileNotFoundError: nothing to import at `src`.
        FileExistsError: `dst` already exists (and is not an empty directory).
        ValueError: a variable that cannot be mapped.
    """
    if os.path.exists(dst) and not (os.path.isdir(dst) and not os.listdir(dst)):
        raise FileExistsError(f"{dst!r} already exists; choose a new destination.")
    info = official.inspect_official(src)
    overrides = {} if ft_proj_selector is None else {"ft_proj_selector": ft_proj_selector}
    model = official.load_official(src, **overrides)
    if dst.endswith(".keras"):
        os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
        model.save(dst)
        return model
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), dst,
                                         max_to_keep=1)
    path = manager.save(checkpoint_number=0)
    record = dict(source=os.path.abspath(src), checkpoint=path,
                  num_variables=info.num_variables,
                  ft_proj_selector_inferred=info.ft_proj_selector_inferred,
                  ft_proj_selector_source=info.ft_proj_selector_source or "given",
                  config=model.get_config())
    with open(os.path.join(dst, "official_import.json"), "w") as f:
        json.dump(record, f, indent=2)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", help="released SavedModel directory (or its variables/)")
    parser.add_argument("dst", help="output .keras file or new checkpoint directory")
    parser.add_argument("--ft_proj_selector", type=int, default=None,
                        help="projection layer feeding the supervised head (default: "
                             "read from saved_model.pb's graph or the head's width; "
                             "required when neither tells)")
    args = parser.parse_args(argv)
    try:
        model = convert(args.src, args.dst, args.ft_proj_selector)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"Wrote {args.dst}: {model.get_config()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
