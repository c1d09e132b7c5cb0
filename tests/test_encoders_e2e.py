"""A ViT and a keras-hub backbone through run's modes (issue "any encoder"): pretrain
(the online head on stop_gradient(h)), fine-tune with frozen stages from its checkpoint,
export (served), linear probe and kNN.

What is the encoder's own in each mode is run here: built from the encoder table and
flags.json, its variables through the checkpoint (every block's, the frozen stages
untouched), its trace in the train step and in the SavedModel's signatures, its h read
back by `parts.load_trained_encoder` and `features.extract`. The modes' machinery
around it is the tiny run's (test_tiny_run.py and the run-layer tests): the training
runs here end without an export (`--export_format=none`: `--mode=export` writes the
served one from the checkpoint), no separate eval mode (the export runs the whole
model in inference mode) and no embed mode (it reads h through the same
`load_trained_encoder` and `features.extract` as the probe)."""
import importlib.util
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf.run import experiment
from simclr_tf.weights import checkpoints
from simclr_tf.run.modes import parts
from simclr_tf.models import hub, vit
from simclr_tf.config.tables import encoders as encoder_table
from helpers.run_fixtures import config

# A ViT small enough for a test, under a name of the table like vit_s16's (4 blocks:
# one per block group).
TINY_VIT = dict(patch_size=16, hidden_dim=32, depth=4, num_heads=2, mlp_dim=64)
VIT = dict(encoder="vit_tiny", image_size=32, train_batch_size=16, eval_batch_size=128,
           optimizer="adamw", learning_rate=1e-3, weight_decay=0.05, knn_k=5)


def _encoder_weights(cfg):
    """The encoder's variables in the latest checkpoint of cfg.model_dir, by path."""
    model = parts.build_model(cfg, tf.distribute.get_strategy(), 10)
    checkpoints.restore_model(model, tf.train.latest_checkpoint(cfg.model_dir))
    return {v.path: v.numpy() for v in model.encoder.weights}


@pytest.fixture
def vit_tiny(monkeypatch):
    monkeypatch.setitem(encoder_table.ENCODERS, "vit_tiny", encoder_table.EncoderSpec(
        flags={}, builder=lambda options, dtype: vit.ViT(
            **TINY_VIT, pool=options.get("vit_pool", "token"), dtype=dtype, name="vit")))


# keras-hub's ResNet wants 64 filters in its first stack (and its stem to match).
TINY_HUB_RESNET = dict(input_conv_filters=[64], input_conv_kernel_sizes=[3],
                       stackwise_num_filters=[64, 16], stackwise_num_blocks=[1, 1],
                       stackwise_num_strides=[1, 2], block_type="basic_block")
CASES = {
    # fine_tune_after_block=2: stage 0 (patch embedding, class token, position
    # embedding) and block groups 1-2 (blocks 1-2) frozen; block 4 and the final
    # norm train.
    "vit": dict(flags=dict(encoder="vit_tiny"), block=2, width=TINY_VIT["hidden_dim"],
                frozen=("/patch_embedding/", "/block1/", "/block2/"),
                trained=("/block4/", "/final_norm/")),
    # A keras-hub backbone is one stage: 4 freezes all of it.
    "hub": dict(flags=dict(encoder="hub:ResNetBackbone",
                           encoder_config=json.dumps(TINY_HUB_RESNET)),
                block=4, width=16, frozen=("",), trained=()),
}


@pytest.mark.large  # about 45 s (vit), 25 s (hub)
@pytest.mark.parametrize("case", sorted(CASES))
def test_pretrain_finetune_export_probe(case, tmp_path, vit_tiny):
    if case == "hub":
        if importlib.util.find_spec("keras_hub") is None:
            pytest.skip(f"keras-hub is not installed (an optional extra): "
                        f"{hub.INSTALL_COMMAND}")
        hub.import_keras_hub()  # installed but broken: fails, naming what is missing
    case = CASES[case]
    flags = dict(VIT, **case["flags"])
    run = str(tmp_path / "pretrain")
    result = experiment.run(config(**flags, train_steps=2, model_dir=run, mode="train",
                                   export_format="none"))
    assert 0.0 <= result["train/supervised_acc"] <= 1.0
    assert np.isfinite(result["train/contrast_loss"])
    assert json.load(open(os.path.join(run, "flags.json")))["encoder"] == flags["encoder"]

    tuned = config(**dict(flags, learning_rate=0.1), train_mode="finetune",
                   fine_tune_after_block=case["block"], train_steps=2, checkpoint=run,
                   model_dir=str(tmp_path / "finetune"), mode="train", warmup_epochs=0,
                   export_format="none")
    experiment.run(tuned)
    before = _encoder_weights(config(**flags, model_dir=run))
    after = _encoder_weights(tuned)
    frozen = [p for p in after if any(part in p for part in case["frozen"])]
    trained = [p for p in after if any(part in p for part in case["trained"])]
    assert len(frozen) > 3 and len(trained) >= 3 * len(case["trained"]), sorted(after)[:5]
    for name in frozen:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    if trained:
        assert any(np.abs(after[n] - before[n]).max() > 0 for n in trained)

    exported = experiment.run(config(**flags, model_dir=run, mode="export"))
    served = tf.saved_model.load(exported["saved_model"]).signatures["serving_default"]
    png = tf.io.encode_png(tf.zeros([40, 30, 3], tf.uint8))
    assert served(image_bytes=tf.stack([png, png]))["embedding"].shape == (2, case["width"])

    probe = experiment.run(config(**flags, model_dir=run, mode="linear_probe"))
    assert 0.0 <= probe["linear_probe/top_1_accuracy"] <= 1.0
    assert 0.0 <= probe["knn/top_1_accuracy"] <= 1.0
