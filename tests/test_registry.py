"""Tests for simclr_tf.data.registry: dataset names."""
import pytest

from simclr_tf.data import digits, registry


def test_register_dataset(monkeypatch):
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    registry.register_dataset("digits_again", lambda data_dir: digits.DigitsSource())
    assert "digits_again" in registry.registered_datasets()
    assert registry.get_dataset("digits_again").num_examples("test") == 360
    with pytest.raises(ValueError, match="name"):
        registry.register_dataset("folder:x", lambda data_dir: None)
