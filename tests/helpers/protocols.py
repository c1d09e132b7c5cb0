"""What every accuracy of a result must say about how it was measured."""
from simclr_tf.rundir import records

# Accuracies whose names do not say so.
NAMED_ACCURACIES = ("linear_probe/pretrained", "linear_probe/random_init")
FIELDS = ("evaluator", "method", "split", "examples", "checkpoint", "preprocessing")


def accuracy_names(result):
    """The accuracies a result holds (not their protocols)."""
    return sorted(name for name in result if not name.startswith(records.PROTOCOL_PREFIX)
                  and ("accuracy" in name or name.endswith("_acc")
                       or name in NAMED_ACCURACIES))


def check_protocols(result):
    """Every accuracy has a protocol with the common fields; returns
    {accuracy name: protocol}."""
    names = accuracy_names(result)
    assert names, sorted(result)
    protocols = {}
    for name in names:
        protocol = records.protocol_of(result, name)
        assert protocol is not None, f"{name} has no protocol"
        missing = [field for field in FIELDS if field not in protocol]
        assert not missing, (name, missing)
        assert set(protocol["checkpoint"]) >= {"path", "step"}, name
        assert protocol["preprocessing"]["image_size"] > 0, name
        protocols[name] = protocol
    return protocols
