"""A ViT encoder through every mode of run: pretrain, fine-tune with frozen stages
from its checkpoint, export, embed, linear probe (issue "any encoder")."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from simclr_tf import checkpoints, experiment, rules
from simclr_tf.models import encoders, vit
from helpers.run_fixtures import config

# A ViT small enough for a test, under a name of the table like vit_s16's (4 blocks:
# one per block group).
TINY_VIT = dict(patch_size=16, hidden_dim=32, depth=4, num_heads=2, mlp_dim=64)
VIT = dict(encoder="vit_tiny", image_size=32, train_batch_size=16, eval_batch_size=128,
           optimizer="adamw", learning_rate=1e-3, weight_decay=0.05, knn_k=5)


def _encoder_weights(cfg):
    """The encoder's variables in the latest checkpoint of cfg.model_dir, by path."""
    model = experiment.build_model(cfg, tf.distribute.get_strategy(), 10)
    checkpoints.restore_model(model, tf.train.latest_checkpoint(cfg.model_dir))
    return {v.path: v.numpy() for v in model.encoder.weights}


@pytest.fixture
def vit_tiny(monkeypatch):
    monkeypatch.setattr(rules, "ENCODERS", rules.ENCODERS + ("vit_tiny",))
    monkeypatch.setitem(encoders.ENCODERS, "vit_tiny", lambda options, dtype: vit.ViT(
        **TINY_VIT, pool=options.get("vit_pool", "token"), dtype=dtype, name="vit"))


def test_vit_pretrain_finetune_export_embed_probe(tmp_path, vit_tiny):
    run = str(tmp_path / "pretrain")
    result = experiment.run(config(**VIT, train_steps=2, model_dir=run,
                                   mode="train_then_eval"))
    assert 0.0 <= result["eval/label_top_1_accuracy"] <= 1.0
    assert np.isfinite(result["train/contrast_loss"])
    assert json.load(open(os.path.join(run, "flags.json")))["encoder"] == "vit_tiny"

    tuned = config(**dict(VIT, learning_rate=0.1), train_mode="finetune",
                   fine_tune_after_block=2, train_steps=2, checkpoint=run,
                   model_dir=str(tmp_path / "finetune"), mode="train", warmup_epochs=0)
    experiment.run(tuned)
    before = _encoder_weights(config(**VIT, model_dir=run))
    after = _encoder_weights(tuned)
    # Stage 0 (patch embedding, class token, position embedding) and block groups 1-2
    # (blocks 1-2) are frozen; block group 4 (block 4, final norm) trains.
    frozen = [p for p in after if "/patch_embedding/" in p or "/block1/" in p
              or "/block2/" in p]
    trained = [p for p in after if "/block4/" in p or "/final_norm/" in p]
    assert len(frozen) > 3 and len(trained) > 3, sorted(after)[:5]
    for name in frozen:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert any(np.abs(after[n] - before[n]).max() > 0 for n in trained)

    exported = experiment.run(config(**VIT, model_dir=run, mode="export"))
    assert os.path.exists(os.path.join(exported["saved_model"], "saved_model.pb"))
    served = tf.saved_model.load(exported["saved_model"])
    outputs = served.signatures["serving_default"] if hasattr(served, "signatures") else None
    assert outputs is not None

    embedded = experiment.run(config(**VIT, model_dir=run, mode="embed",
                                     embed_projector_size=0))
    h = np.load(embedded["embed/output"])["h"]
    assert h.shape == (embedded["embed/num_examples"], TINY_VIT["hidden_dim"])

    probe = experiment.run(config(**VIT, model_dir=run, mode="linear_probe"))
    assert 0.0 <= probe["linear_probe/top_1_accuracy"] <= 1.0
    assert 0.0 <= probe["knn/top_1_accuracy"] <= 1.0
