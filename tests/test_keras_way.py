"""SimCLRModel used as any Keras model: compile/fit/evaluate on labels, summary()
(issue 15 item 6)."""
import keras
import numpy as np
import pytest

from simclr_tf.models import SimCLRModel


def _model():
    keras.utils.set_random_seed(3)
    model = SimCLRModel(encoder_options=dict(depth=18, width_multiplier=0.125, stem="cifar"),
                        num_classes=10, num_proj_layers=2, proj_out_dim=16,
                        supervised_head_stop_gradient=False)
    model.build((None, 16, 16, 3))
    return model


def _cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_softmax[np.arange(len(labels)), labels].mean()


@pytest.mark.large  # 9 s
# compile/fit on the supervised logits alone: the projection head is not in that loss,
# so Keras says it has no gradients, as expected here.
@pytest.mark.filterwarnings("ignore:Gradients do not exist:UserWarning")
def test_compile_fit_evaluate_apply_to_the_supervised_logits():
    rng = np.random.RandomState(0)
    x = rng.rand(32, 16, 16, 3).astype("float32")
    y = rng.randint(0, 10, 32)
    model = _model()
    expected = _cross_entropy(model(x, training=True)["logits_sup"].numpy(), y)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=loss, metrics=["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    np.testing.assert_allclose(history.history["loss"][0], expected, rtol=1e-5)
    # Fine-tuning reaches the encoder (supervised_head_stop_gradient=False).
    kernel = model.encoder.weights[0].numpy()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, metrics=["accuracy"])
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert np.abs(model.encoder.weights[0].numpy() - kernel).max() > 0
    result = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)
    logits = model(x, training=False)["logits_sup"].numpy()
    np.testing.assert_allclose(result["loss"], _cross_entropy(logits, y), rtol=1e-4)
    assert result["accuracy"] == np.mean(logits.argmax(axis=1) == y)


def test_summary_shows_every_parts_output_shapes(capsys):
    _model().summary()
    # The table wraps long cells over lines: join them back.
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "?" not in text, text
    assert "(None, 10)" in text and "final_avg_pool: (None, 64)" in text, text
    assert "proj_head_output: (None, 16)" in text
