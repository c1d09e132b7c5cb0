"""The names of the model's outputs, defined once.

`SimCLRModel(images)` returns a dict; these keys are the reference's names, which the
authors' hub modules and colabs also use, so exports and released models agree.
"""
H = "final_avg_pool"  # h, the representation: float32 [B, C]
Z = "proj_head_output"  # z, the projection the contrastive loss sees: float32 [B, d]
LOGITS = "logits_sup"  # the supervised head's logits: float32 [B, num_classes]
