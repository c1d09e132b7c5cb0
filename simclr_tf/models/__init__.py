"""The SimCLR model family: ResNet v1 encoders (+SK, SE), ViT encoders, heads, variants."""
from simclr_tf.models.heads import ProjectionHead, SupervisedHead
from simclr_tf.models.resnet import FEATURE_NAMES, ResNet
from simclr_tf.models.simclr import SimCLRModel, freeze_for_finetuning
from simclr_tf.models.vit import ViT
from simclr_tf.config.variants import RELEASED, parse_variant, variant_name

__all__ = [
    "FEATURE_NAMES", "ProjectionHead", "RELEASED", "ResNet", "SimCLRModel",
    "SupervisedHead", "ViT", "freeze_for_finetuning", "parse_variant", "variant_name",
]
