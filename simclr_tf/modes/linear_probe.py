"""--mode=linear_probe (kNN and the L-BFGS probe on frozen h) and the final linear
probe of a training run (--final_linear_probe)."""
import os

import keras
import tensorflow as tf

from simclr_tf import checkpoints, preflight
from simclr_tf.config import ConfigError
from simclr_tf.evaluation import features, probe, transfer
from simclr_tf.modes import parts

def linear_probe_mode(config, strategy, context):
    """--mode=linear_probe: kNN and the paper's L-BFGS linear probe on frozen h, train
    split -> eval split, features cached in model_dir/features/."""
    model, prefix = parts.load_trained_encoder(config, strategy, context)
    cache_dir = os.path.join(config.model_dir, "features") if config.model_dir else None
    row = transfer.evaluate_protocols(
        model, context["source"], strategy=strategy, image_size=config.image_size,
        train_split=config.train_split, test_split=config.eval_split,
        batch_size=config.eval_batch_size, knn_k=config.knn_k,
        knn_temperature=config.knn_temperature, cache_dir=cache_dir,
        encoder_id=transfer.encoder_identity(prefix), seed=config.seed)
    print(f"Linear probe (L-BFGS logistic regression on frozen h, C={row['linear_probe_c']:g} "
          f"chosen on a held-out part of {config.train_split}): top-1 "
          f"{row['linear_probe_top_1']:.4f} on {config.eval_split}; weighted kNN "
          f"(k={config.knn_k}) {row['knn_top_1']:.4f}; {row['num_train']} / "
          f"{row['num_test']} examples, features {'cached' if row['cached'] else 'computed'}"
          f" ({prefix}).", flush=True)
    return {"linear_probe/top_1_accuracy": row["linear_probe_top_1"],
            "linear_probe/c": row["linear_probe_c"],
            "linear_probe/validation_accuracy": row["linear_probe_validation_accuracy"],
            "knn/top_1_accuracy": row["knn_top_1"], "linear_probe/checkpoint": prefix,
            "linear_probe/num_train": row["num_train"],
            "linear_probe/num_test": row["num_test"]}


def final_linear_probe(config, context):
    """Probe accuracy of the trained encoder and of a randomly initialised one."""
    source = context["source"]
    strategy = tf.distribute.get_strategy()
    trained = parts.build_model(config, strategy, context["num_classes"])
    if checkpoints.latest(config.model_dir) is None:
        raise ConfigError("final_linear_probe", f"needs a trained checkpoint in "
                          f"{config.model_dir!r}; train first.")
    with preflight.flag_errors("model_dir"):
        checkpoints.load_into(trained, config.model_dir, whole_model=True)
    keras.utils.set_random_seed(config.seed + 1)
    random_init = parts.build_model(config, strategy, context["num_classes"])
    results = {}
    for name, model in (("pretrained", trained), ("random_init", random_init)):
        extractor = features.FeatureExtractor(strategy, model, (features.H,))
        train, test = (features.extract(strategy, model, source, split,
                                        image_size=config.image_size,
                                        batch_size=config.eval_batch_size,
                                        extractor=extractor)
                       for split in (config.train_split, config.eval_split))
        result = probe.linear_probe(train[features.H], train["labels"],
                                    test[features.H], test["labels"], seed=config.seed)
        results[f"linear_probe/{name}"] = result["top_1_accuracy"]
    print(f"Linear probe (L-BFGS logistic regression on frozen h, {config.eval_split}): "
          f"pretrained encoder {results['linear_probe/pretrained']:.4f} vs randomly "
          f"initialised encoder {results['linear_probe/random_init']:.4f}", flush=True)
    return results
