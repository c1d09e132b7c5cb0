"""`benchmark.py collectives` (scripts/collectives.py): the collectives of one compiled
step, counted from its graph under 2 replicas, and its verdict that the gradients
are all-reduced once per step. A planted second all-reduce (the optimizer summing the
gradients again, as Keras does unless told they are summed) fails it."""
import os
import sys

import pytest
import tensorflow as tf

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "scripts")
sys.path.insert(0, SCRIPTS)

import collectives  # noqa: E402  (scripts/)
from simclr_tf.method import train  # noqa: E402


def _parts(result):
    return {(row["part"], row["direction"], row["kind"]): row for row in result["rows"]}


def test_pretraining_step_collectives():
    """Tiny encoder (2 conv-BN stages, a 2-layer projection head with BN), 2
    replicas, batch 8: each kind of collective where the method puts it."""
    result = collectives.our_step({}, 2, "pretrain")  # 4 s
    ok, sentence = collectives.verdict(result)
    assert ok, sentence
    parts = _parts(result)
    gradients = parts[("gradients", "update", "all-reduce")]
    assert gradients["ops"] == 1
    assert gradients["bytes_in"] == result["trainable_float32_bytes"]
    # Synchronized BN: 3 all-reduces per BN layer forward (4 layers), 2 backward.
    assert parts[("BN statistics", "forward", "all-reduce")]["ops"] == 12
    assert parts[("BN statistics", "backward", "all-reduce")]["ops"] == 8
    # z of both views gathered (each: its shape, then the data), 4 replicas' rows of
    # 128 float32 each... here 4 images per replica and 2 views: [4, 128] per gather.
    gather = parts[("z gather", "forward", "all-gather")]
    assert gather["ops"] == 4
    z_bytes = 4 * 128 * 4
    assert gather["bytes_in"] == 2 * z_bytes + 2 * 8  # two shapes of [1, 2] int32
    assert gather["bytes_out"] == 2 * gather["bytes_in"]
    # The gather's adjoint: the gathered gradient summed over replicas, per view.
    backward = parts[("z gather", "backward", "all-reduce")]
    assert backward["ops"] == 2 and backward["bytes_in"] == 2 * 2 * z_bytes
    # The labelled examples of every replica, counted once for the online head's loss
    # and its accuracy: one float32.
    count = parts[("labelled count", "forward", "all-reduce")]
    assert (count["ops"], count["bytes_in"]) == (1, 4)
    assert "other" not in {row["part"] for row in result["rows"]}


def test_a_second_gradient_all_reduce_fails(monkeypatch):
    """The fault the tool exists for: the optimizer sums the gradients again (the
    step before this change: Keras' own all-reduce inside apply_gradients)."""
    monkeypatch.setattr(train, "apply_summed_gradients",
                        lambda optimizer, pairs: optimizer.apply_gradients(pairs))
    result = collectives.our_step({}, 2, "finetune")
    ok, sentence = collectives.verdict(result)
    assert not ok and "more than once" in sentence, sentence
    assert _parts(result)[("gradients", "update", "all-reduce")]["ops"] == 2


@pytest.mark.large  # 9 s: the other train modes' steps (pretraining's is above)
@pytest.mark.parametrize("train_mode", ["finetune", "distill"])
def test_one_view_steps_sum_their_gradients_once(train_mode):
    result = collectives.our_step({}, 2, train_mode)
    ok, sentence = collectives.verdict(result)
    assert ok, sentence
    assert not [row for row in result["rows"] if row["part"] in ("z gather", "other")]
    count = _parts(result)[("labelled count", "forward", "all-reduce")]
    assert (count["ops"], count["bytes_in"]) == (1, 4)


def test_unknown_sizes_and_missing_sums_fail():
    base = dict(trainable_float32_bytes=100, collectives=[
        dict(name="g", part="gradients", bytes_in=100, direction="update")])
    assert collectives.verdict(base)[0]
    assert not collectives.verdict(dict(base, collectives=[]))[0]
    unknown = dict(base, collectives=base["collectives"] + [
        dict(name="x", part="metrics", bytes_in=None, direction="forward")])
    assert "not known" in collectives.verdict(unknown)[1]


def test_part_of_reads_the_scopes_and_the_inputs():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(1.0)
        with tf.name_scope("nt_xent"):
            z = tf.identity(x)
        y = tf.identity(tf.identity(z))  # a collective named by no scope reads y
        with tf.name_scope("gradient_tape"), tf.name_scope("batch_normalization"):
            w = tf.identity(x)
        v = tf.identity(w)
    assert collectives.part_of(y.op) == ("z gather", "forward")
    assert collectives.part_of(v.op) == ("BN statistics", "backward")
    assert collectives.part_of(x.op) == ("other", "forward")


@pytest.mark.parametrize("argv, message", [
    (["--replicas=1"], "2 or more"),
    (["--train_modes=pretrain,nope"], "not one of"),
    (["--authors_dir=/x"], "go together"),
    # The authors' step is a ResNet: ours must be one too to stand beside it.
    (["--authors_dir=/x", "--authors_python=/y"], "pass --encoder=resnet"),
    (["--authors_dir=/x", "--authors_python=/y", "--encoder=resnet"],
     "pass --train_modes=pretrain"),
    (["--authors_dir=/x", "--authors_python=/y", "--encoder=resnet",
      "--train_modes=pretrain", "--optimizer=momentum", "--mixed_precision=bfloat16"],
     "has no --optimizer=momentum, --mixed_precision=bfloat16"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        collectives.parse_args(argv)
    assert message in capsys.readouterr().err


def test_every_flag_reaches_the_traced_step(monkeypatch):
    """Each step flag the tool takes arrives in the step it traces (a planted drop
    fails: the recorder sees what `main` passes)."""
    seen = []
    monkeypatch.setattr(collectives, "split_cpu", lambda replicas: None)
    monkeypatch.setattr(collectives, "our_step", lambda overrides, replicas, mode, classes: (
        seen.append((overrides, replicas, mode, classes)) or dict(
            train_mode=mode, rows=[], trainable_variables=0, trainable_float32_bytes=1,
            collectives=[dict(name="g", part="gradients", bytes_in=1,
                              direction="update")])))
    values = dict(encoder="resnet", resnet_depth=50, width_multiplier=2.0, sk_ratio=0.0625,
                  se_ratio=0.25, image_size=64, train_batch_size=6, num_proj_layers=3,
                  proj_out_dim=64, proj_head_mode="linear", use_blur=True,
                  optimizer="momentum", stem="imagenet", augment_on="device",
                  grad_cache_chunk=3, lineareval_while_pretraining=False, global_bn=False,
                  mixed_precision="bfloat16")
    assert set(values) == set(collectives.STEP_FLAGS)
    argv = [f"--{k}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in values.items()]
    collectives.main(argv + ["--replicas=4", "--train_modes=pretrain,finetune",
                             "--num_classes=1000"])
    assert [s[2] for s in seen] == ["pretrain", "finetune"]
    for overrides, replicas, _, classes in seen:
        assert overrides == values and replicas == 4 and classes == 1000
