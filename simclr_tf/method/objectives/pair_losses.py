"""--train_mode=nt_logistic | margin_triplet: SimCLR's step with the paper's Table 2
alternatives to NT-Xent (`losses.nt_logistic`, `losses.margin_triplet`) in its place;
everything else (the views, the online head, blur, gradient caching) is pretraining's.
The paper: NT-Xent 63.9, NT-Logistic 51.6, margin triplet 50.9 (ImageNet, linear
evaluation; 57.9 and 57.5 with semi-hard negative mining, which these do not do)."""
from simclr_tf.method import losses
from simclr_tf.method.objectives.pretrain import Pretrain


class NTLogistic(Pretrain):
    """Pretraining with NT-Logistic at --temperature (with --hidden_norm)."""

    def contrastive(self, z1, z2):
        return losses.nt_logistic(z1, z2, temperature=self.options.temperature,
                                  hidden_norm=self.options.hidden_norm)


class MarginTriplet(Pretrain):
    """Pretraining with the margin triplet loss, margin --triplet_margin (with
    --hidden_norm: cosine similarities)."""

    def contrastive(self, z1, z2):
        return losses.margin_triplet(z1, z2, margin=self.option("triplet_margin"),
                                     hidden_norm=self.options.hidden_norm)
