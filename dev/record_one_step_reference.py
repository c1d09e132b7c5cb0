#!/usr/bin/env python
"""Records the authors' whole training step on the released-format R50 for
tests/test_one_step.py (tests/data/one_step_r50_authors.npz). Not run by CI.

    python dev/record_one_step_reference.py --authors_python=/tmp/authors-venv/bin/python \\
        --authors_dir=simclr/tf2 --reference=../shared/reference/official_r50_1x_sk0

For each case of `tests/test_one_step.py`'s `REFERENCE_CASES`, it runs
`dev/authors_one_step.py --float64` (their model, loss and LARS, in float64) on the
test's seeded views and keeps a fingerprint of the step (`one_step.fingerprint`): per
variable, the update's norm and its projection on a fixed random direction, and the
losses. The full outputs (the R50's 26M values) would not fit in the repository.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))  # one_step.py, the comparison
sys.path.insert(0, os.path.join(ROOT, "tests"))
import one_step  # noqa: E402
import test_one_step  # noqa: E402  (the cases and their views)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors_python", required=True)
    parser.add_argument("--authors_dir", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--out", default=test_one_step.REFERENCE_VALUES)
    args = parser.parse_args()
    recorded = {}
    with tempfile.TemporaryDirectory() as work:
        for case, (mode, flags) in test_one_step.REFERENCE_CASES.items():
            views = os.path.join(work, f"{case}_views.npz")
            np.savez(views, **test_one_step.reference_views(mode))
            out = os.path.join(work, f"{case}.npz")
            command = [args.authors_python, os.path.join(HERE, "authors_one_step.py"),
                       f"--authors_dir={args.authors_dir}", f"--checkpoint={args.reference}",
                       f"--views={views}", f"--out={out}", f"--train_mode={mode}",
                       "--float64"] + flags
            subprocess.run(command, check=True, capture_output=True)
            after = dict(np.load(out))
            before = one_step.initial_values(args.reference, after)
            for key, value in one_step.fingerprint(after, before).items():
                recorded[f"{case}/{key}"] = value
            print(f"{case}: " + ", ".join(f"{k} {float(after[k]):.8g}"
                                          for k in one_step.LOSSES))
    keys = sorted(recorded)  # two arrays: an entry per value would cost 0.4 KB each
    np.savez_compressed(args.out, keys=np.array(keys),
                        values=np.array([recorded[key] for key in keys], np.float64))
    print(f"wrote {args.out}: {len(recorded)} values")


if __name__ == "__main__":
    main()
