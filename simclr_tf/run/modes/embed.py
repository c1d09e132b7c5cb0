"""--mode=embed: h (and z) of a split to .npz / .parquet, and a projector view."""
import os

import numpy as np
import tensorflow as tf

from simclr_tf.config import ConfigError
from simclr_tf.evaluation import base, features, writers
from simclr_tf.run.modes import parts

PROJECTOR_THUMBNAIL = 64  # sprite tiles at most this many pixels a side


def embed_mode(config, strategy, context):
    """--mode=embed: h (and z) of a split with ids and names to .npz / .parquet, and a
    TensorBoard projector view of a sample (model_dir/projector)."""
    source = context.source
    split = config.embed_split or config.eval_split
    path = config.embed_output
    if path is None:
        if not config.model_dir:
            raise ConfigError("embed_output", "is required when there is no --model_dir.")
        path = os.path.join(config.model_dir, "embeddings", f"{features.slug(split)}.npz")
    model, prefix = parts.load_trained_encoder(config, strategy, context)
    outputs = (features.H, features.Z) if config.embed_projection else (features.H,)
    if source.num_examples(split) >= base.ANNOUNCE_EXAMPLES:
        print(f"Embedding the {source.num_examples(split)} examples of {split} "
              f"({prefix}) ...", flush=True)
    embedded = features.extract(strategy, model, source, split,
                                image_size=config.image_size,
                                batch_size=config.eval_batch_size, outputs=outputs)
    names = features.example_names(source, split, embedded["ids"])
    writers.write_embeddings(path, embedded, names=names)
    print(f"Wrote {len(names)} embeddings of {source.name}:{split} "
          f"(h{' and z' if config.embed_projection else ''}, {prefix}) to {path}", flush=True)
    results = {"embed/output": path, "embed/num_examples": len(names)}
    if config.embed_projector_size and config.model_dir:
        sample = features.bounded_ids(source, split, config.embed_projector_size,
                                      seed=config.seed)
        rows = (np.arange(len(names)) if sample is None
                else np.searchsorted(embedded["ids"], sample))
        images = features.sample_images(source, split, embedded["ids"][rows],
                                        image_size=config.image_size)
        side = min(config.image_size, PROJECTOR_THUMBNAIL)
        images = tf.image.resize(images, [side, side]).numpy()
        log_dir = os.path.join(config.model_dir, "projector")
        writers.write_projector(log_dir, embedded[features.H][rows],
                                embedded["labels"][rows], names[rows], images)
        print(f"Projector view of {len(rows)} examples: tensorboard --logdir {log_dir}",
              flush=True)
        results["embed/projector"] = log_dir
    return results


# --mode -> what it runs, in order (a SIGTERM during training stops the rest). A new
