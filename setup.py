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
        # The one TensorFlow wheel for CPU and GPU hosts (the [gpu] extra adds CUDA's
        # libraries). Not tensorflow-cpu: keras-hub's tensorflow-text requires
        # `tensorflow`, so [hub] would install a second TensorFlow over it; the two
        # builds train bit-identically here (docs/install.md, measured).
        "tensorflow==2.21.0",
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
        # --encoder=hub:<spec> (simclr_tf.models.hub), with all of keras-hub's own
        # requirements (tensorflow-text, sentencepiece, kagglehub, tokenizers, ...),
        # so that `pip check` passes.
        "hub": ["keras-hub==0.32.0"],
        # --export_format=onnx (Keras' Model.export converts with tf2onnx) and running
        # the ONNX and LiteRT files (onnxruntime; ai-edge-litert, LiteRT's interpreter);
        # the LiteRT converter is TensorFlow's own. `pip check` passes beside
        # tensorflow 2.21 (docs/serving.md).
        "export": ["onnx==1.23.2", "tf2onnx==1.17.0", "onnxruntime==1.32.0",
                   "ai-edge-litert==2.3.0"],
        # scripts/plot_run.py's pictures.
        "plot": ["matplotlib>=3.8"],
        # CUDA hosts: TensorFlow's CUDA libraries (docs/install.md).
        "gpu": ["tensorflow[and-cuda]==2.21.0"],
    },
)
