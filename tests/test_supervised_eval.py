"""Supervised eval without an optimizer or Trainer: top-1 / top-5 / loss over a split
equal a numpy computation on the logits of the model called directly, on 1 and 2
replicas, with a partial last batch and uneven replica shares."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from simclr_tf import augment
from simclr_tf.data import registry
from simclr_tf.evaluation import features, supervised
from simclr_tf.models import SimCLRModel

SPLIT = "test[:50]"  # batches of 8 leave a last batch of 2; of 7, uneven replica shares


def _model(strategy, num_classes=10, encoder="resnet"):
    keras.utils.set_random_seed(4)
    options = dict(depth=18, width_multiplier=0.125, stem="cifar") if encoder == "resnet" \
        else {}
    with strategy.scope():
        model = SimCLRModel(encoder=encoder, encoder_options=options,
                            num_proj_layers=2, proj_out_dim=16, num_classes=num_classes)
        model.build((None, 16, 16, 3))
    if num_classes:
        # A random head: logits far from ties, so the top k are well defined.
        for i, variable in enumerate(model.supervised_head.weights):
            variable.assign(3.0 * np.random.RandomState(i).normal(
                size=variable.shape).astype(np.float32))
    return model


def _numpy_metrics(model, source, split, count=None):
    images = np.stack([augment.preprocess_for_eval(image, 16, 16, crop=False).numpy()
                       for image, _ in source.load(split)])[:count]
    labels = source.load_labels(split)[:count]
    logits = model(images, training=False)["logits_sup"].numpy().astype(np.float64)
    top = np.argsort(-logits, axis=1)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return dict(top_1_accuracy=np.mean(top[:, 0] == labels),
                top_5_accuracy=np.mean([y in row[:5] for y, row in zip(labels, top)]),
                loss=-np.mean(log_probs[np.arange(len(labels)), labels]),
                num_examples=len(labels))


def _check(result, expected):
    assert result["num_examples"] == expected["num_examples"]
    assert result["top_1_accuracy"] == expected["top_1_accuracy"]
    assert result["top_5_accuracy"] == expected["top_5_accuracy"]
    assert result["loss"] == pytest.approx(expected["loss"], rel=1e-5)


@pytest.mark.large  # 4 and 7 s
@pytest.mark.parametrize("replicas", [1, 2])
def test_top_k_and_loss_equal_numpy_on_direct_logits(replicas):
    strategy = (tf.distribute.get_strategy() if replicas == 1
                else tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    source = registry.get_dataset("digits")
    model = _model(strategy)
    expected = _numpy_metrics(model, source, SPLIT)
    assert 0.0 < expected["top_1_accuracy"] < expected["top_5_accuracy"] < 1.0
    for batch_size in (8, 7):
        _check(supervised.evaluate(strategy, model, source, SPLIT, image_size=16,
                                   batch_size=batch_size), expected)
    # steps: the first batches only; one evaluator serves several datasets.
    evaluator = supervised.SupervisedEvaluator(strategy, model)
    dataset = features.eval_dataset(source, SPLIT, image_size=16, batch_size=8)
    _check(evaluator(dataset, steps=2), _numpy_metrics(model, source, SPLIT, count=16))
    _check(evaluator(dataset), expected)


def test_arguments_are_checked():
    """Bad arguments, on the tiny encoder (the errors are the subject, not the model;
    59 s with three ResNet-18s in the full suite at 12b42f2)."""
    strategy = tf.distribute.get_strategy()
    model = _model(strategy, encoder="tiny")
    with pytest.raises(ValueError, match="Received: strategy="):
        supervised.SupervisedEvaluator(None, model)
    with pytest.raises(ValueError, match="Received: model="):
        supervised.SupervisedEvaluator(strategy, "model")
    source = registry.get_dataset("digits")
    dataset = features.eval_dataset(source, "test[:4]", image_size=16, batch_size=4)
    with pytest.raises(ValueError, match="Received: steps=-1"):
        supervised.SupervisedEvaluator(strategy, model)(dataset, steps=-1)
    with pytest.raises(ValueError, match="no supervised head"):
        supervised.SupervisedEvaluator(strategy, _model(strategy, num_classes=None,
                                                         encoder="tiny"))(dataset)
