"""simclr_tf: SimCLR v1/v2 in Keras 3 / TensorFlow 2."""
import setuptools

setuptools.setup(
    name="simclr_tf",
    version="0.1.0",
    description="SimCLR v1/v2 (contrastive self-supervised learning) in Keras 3 / TF 2",
    packages=setuptools.find_packages(include=["simclr_tf", "simclr_tf.*"]),
    # run.py is the command line; installed as `simclr-tf` (same flags and flagfiles).
    py_modules=["run"],
    entry_points={"console_scripts": ["simclr-tf=run:console_main"]},
    python_requires=">=3.11",  # keras-hub 0.32.0 (command 2) needs 3.11
    install_requires=[
        # The CPU wheel; GPU hosts install `tensorflow[and-cuda]==2.21.0` instead
        # (docs/install.md).
        "tensorflow-cpu==2.21.0",
        "keras==3.15.1",
        "tensorflow-datasets==4.9.10",
        # tensorflow-datasets 4.9.10 imports it in every catalog dataset's
        # download_and_prepare (DatasetBuilder.code_path) without requiring it
        # (tests/test_install.py).
        "importlib_resources",
        "absl-py>=2.1",
        "tensorboard>=2.21,<2.22",
        "scikit-learn>=1.4",
        "numpy>=1.26",
        "pillow>=10",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            # The full suite runs on both cores (-n 2): docs/testing.md, measured there.
            "pytest-xdist>=3.6",
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel>=6.29",
        ],
    },
    # --encoder=hub:<spec> (simclr_tf.models.hub) needs keras-hub, installed after this
    # package with one line (hub.INSTALL_COMMAND, where the choice is explained):
    #     pip install --no-deps keras-hub==0.32.0 regex tokenizers
    # No extra can say that: pip resolves the requirements of any keras-hub an extra
    # names, even one already installed with --no-deps, and keras-hub's include
    # tensorflow-text, which pulls `tensorflow` beside `tensorflow-cpu`.
)
