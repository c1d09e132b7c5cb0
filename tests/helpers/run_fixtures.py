"""A tiny run on the offline 'digits' dataset, shared by the end-to-end tests."""
from simclr_tf.config import Config

TINY = dict(dataset="digits", train_split="train", eval_split="test", image_size=16,
            stem="cifar", resnet_depth=18, width_multiplier=0.125, num_proj_layers=2,
            proj_out_dim=16, train_batch_size=32, eval_batch_size=128, use_blur=False,
            color_jitter_strength=0.5, temperature=0.5, learning_rate=0.5,
            weight_decay=1e-4, warmup_epochs=0.1)


def config(**overrides):
    """The validated Config of the tiny run with `overrides` applied."""
    return Config.from_dict(dict(TINY, **overrides)).validate()
