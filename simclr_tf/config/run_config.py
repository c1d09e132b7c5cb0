"""The frozen, validated run configuration.

`Config` has one field per command-line flag: the authors' 48 flags with their names,
meanings and defaults (except `use_tpu`, False here), then ours. `run.py` defines its
absl flags from these fields (type, default, choices and help all live here), builds
one `Config`, validates it and passes it down; library modules take plain keyword
arguments (`Config.model_kwargs()` for the model), never the flags.
"""
import dataclasses
import functools
import json
from typing import Optional

from simclr_tf.config import architecture, bounds, fields, rules, validation, variants
from simclr_tf.config.tables import modes
from simclr_tf.config.tables import train_modes
# Re-exported: callers import these from here.
from simclr_tf.config.architecture import (  # noqa: F401
    VARIANT_FLAGS, architecture_mismatches, check_variant_flags)
from simclr_tf.config.errors import ConfigError  # noqa: F401
from simclr_tf.config.fields import AUTHORS_FLAGS  # noqa: F401
from simclr_tf.config.record_types import RecordError  # noqa: F401

# --tpu_name, --tpu_zone, --gcp_project and --master name the TPU of a TPU run; without
# one the run is on this machine (fault 2 of 2026-12-06: they trained on the CPU).
ON_A_TPU = bounds.applies(("use_tpu", "strategy"),
                          lambda use_tpu, strategy: use_tpu or strategy == "tpu",
                          "to a TPU run (--use_tpu or --strategy=tpu)", "add --use_tpu")

# A field is declared by its --help topic's function (`fields.HELP_GROUPS`, in
# order): a new flag is one field, its help group included.
_run = functools.partial(fields.field, fields.HELP_GROUPS[0])  # Run
_data = functools.partial(fields.field, fields.HELP_GROUPS[1])  # Data
_model = functools.partial(fields.field, fields.HELP_GROUPS[2])  # Model
_aug = functools.partial(fields.field, fields.HELP_GROUPS[3])  # Contrastive objective and augmentation
_optim = functools.partial(fields.field, fields.HELP_GROUPS[4])  # Optimisation and schedule
_ckpt = functools.partial(fields.field, fields.HELP_GROUPS[5])  # Checkpoints and export
_tune = functools.partial(fields.field, fields.HELP_GROUPS[6])  # Fine-tuning
_distill = functools.partial(fields.field, fields.HELP_GROUPS[7])  # Distillation
_eval = functools.partial(fields.field, fields.HELP_GROUPS[8])  # Evaluation
_hw = functools.partial(fields.field, fields.HELP_GROUPS[9])  # Hardware and distribution


@dataclasses.dataclass(frozen=True)
class Config(fields.FlagTable):
    """Every setting of a run. Field metadata carries each flag's help and choices."""

    # --- The authors' flags (same names, meanings and defaults) ---
    learning_rate: float = _optim(
        0.3, "Initial learning rate per batch size of 256.",
        checks=(bounds.positive("e.g. 0.3 (linear scaling) or 0.075 (sqrt)"),))
    learning_rate_scaling: str = _optim(
        "linear", "How to scale the learning rate as a function of batch size: "
        "lr * batch / 256 (linear) or lr * sqrt(batch) (sqrt).",
        rules.LEARNING_RATE_SCALINGS)
    warmup_epochs: float = _optim(10.0, "Number of epochs of linear warmup.",
                                  checks=(bounds.at_least(0),))
    weight_decay: float = _optim(1e-6, "Amount of weight decay to use.",
                                 checks=(bounds.rule(rules.check_weight_decay),))
    batch_norm_decay: float = _model(0.9, "Batch norm moving-average decay (momentum).",
                                     checks=(bounds.within(0, 1, "0.9"),))
    train_batch_size: int = _optim(512, "Global batch size for training (all replicas).",
                                   checks=(bounds.positive("e.g. 512 or 4096"),))
    train_split: str = _data("train", "Split for training (TFDS slicing allowed, "
                             "e.g. 'train[:10%]').")
    train_epochs: int = _optim(100, "Number of epochs to train for.",
                               checks=(bounds.at_least(0),))
    train_steps: int = _optim(0, "Number of steps to train for. If > 0, overrides "
                              "train_epochs.", overrides=("train_epochs",),
                              checks=(bounds.at_least(0),))
    eval_steps: int = _eval(0, "Number of steps to eval for. 0 = the whole split.",
                            checks=(bounds.at_least(0),))
    eval_batch_size: int = _eval(256, "Global batch size for evaluation.",
                                 checks=(bounds.positive("e.g. 256"),))
    checkpoint_epochs: int = _ckpt(1, "Number of epochs between checkpoints/summaries.",
                                   checks=(bounds.at_least(0),))
    checkpoint_steps: int = _ckpt(0, "Number of steps between checkpoints/summaries. "
                                  "If > 0, overrides checkpoint_epochs.",
                                  overrides=("checkpoint_epochs",),
                                  checks=(bounds.at_least(0),))
    eval_split: str = _data("validation", "Split for evaluation.")
    dataset: str = _data("imagenet2012", "Dataset: a TFDS name, 'folder:/path' for an "
                         "image folder, 'digits' (offline, ships with scikit-learn) or "
                         "'fashion_mnist' (offline: apt-get install dataset-fashion-mnist, "
                         "or --data_dir holding its four IDX files).")
    cache_dataset: bool = _data(False, "Whether to cache the entire dataset in memory.")
    # The live tables: a row registered after import is a choice too.
    mode: str = _run("train", modes.help_text(), lambda: tuple(modes.MODES))
    train_mode: str = _run("pretrain", train_modes.help_text(),
                           lambda: tuple(train_modes.TRAIN_MODES))
    objective_module: Optional[str] = _run(
        None, "A Python file that registers a train mode of its own "
        "(`simclr_tf.config.tables.train_modes.register`), loaded before the flags are read: its "
        "--train_mode and its options' flags then exist (docs/design.md, 'add an "
        "objective').")
    objective_options: str = _run(
        "", "The options of a registered objective's own flags, as JSON (run.py "
        "writes it from those flags; docs/design.md, 'add an objective').")
    lineareval_while_pretraining: bool = _aug(
        True, "Whether to finetune a linear head on stop_gradient(h) while pretraining.")
    checkpoint: Optional[str] = _run(
        None, "Weights to start from when model_dir has no checkpoint: a checkpoint "
        "prefix, a directory of checkpoints, or a SavedModel directory.")
    zero_init_logits_layer: bool = _tune(
        False, "If True, zero initialize the layer after the supervised head input.")
    fine_tune_after_block: int = _tune(
        -1, "The layers after which block that we will fine-tune. -1 means fine-tuning "
        "everything. 0 means fine-tuning after the stem block. 4 means fine-tuning just "
        "the linear head.",
        checks=(bounds.rule(rules.check_fine_tune_after_block),))
    frozen_batch_norm: str = _tune(
        "moving", "The batch norm of the layers --fine_tune_after_block freezes, in "
        "training: 'moving' normalises with the loaded moving statistics and keeps them "
        "(a frozen block is frozen); 'batch' is the authors' code: batch statistics, "
        "and the moving averages keep updating (their Keras 2 freezing does not reach "
        "the batch norm inside a block; docs/fidelity.md). Weights never train either way.",
        rules.FROZEN_BATCH_NORMS, applies=train_modes.FROZEN_BLOCKS)
    master: Optional[str] = _hw(None, "Address/name of the TensorFlow master to use.",
                                applies=ON_A_TPU)
    model_dir: Optional[str] = _run(None, "The run's directory: checkpoints, "
                                    "summaries, exports and its records.")
    break_lock: bool = _run(
        False, "Take over model_dir's lock even if another run seems to hold it. One "
        "run writes a model_dir at a time; a lock whose process ended on this host, or "
        "whose heartbeat stopped 10 minutes ago, is taken over without this flag. For "
        "shared filesystems, when you know that the other run is dead.")
    allow_changed_flags: bool = _run(
        False, "Continue training in a model_dir whose checkpoints were written with "
        "other settings of the optimisation or the data (--train_mode, "
        "--learning_rate, --train_batch_size, --dataset, ...; without this flag that "
        "is an error naming each). The changes are recorded in model_dir's "
        "flags_history.json; flags.json then holds the new settings.",
        applies=modes.TRAINING)
    reevaluate: bool = _run(
        False, "Measure again what a finished run recorded. Without it, a training "
        "command run again on a finished run (its newest checkpoint is the last step "
        "the flags plan, and result.json holds, at that step, what the command "
        "measures: --mode=train_then_eval's eval, --final_linear_probe's probes) "
        "prints the recorded results and exits without building the model.")
    data_dir: Optional[str] = _data(None, "Directory where dataset is stored.")
    tfds_download: bool = _data(
        True, "Download and prepare a TFDS dataset missing from --data_dir before "
        "anything is built (the authors' code does too). Turn off for shared or "
        "read-only data_dirs; multi-worker runs need the data prepared beforehand.")
    use_tpu: bool = _hw(False, "Whether to run on TPU (the authors' default is True; "
                        "ours is False so GPU and CPU users need no flag).")
    tpu_name: Optional[str] = _hw(
        None, "The Cloud TPU to use for training: its name, its grpc://address, or "
        "'local' (the TPU of a Cloud TPU VM, which --use_tpu alone finds; docs/tpu.md).",
        applies=ON_A_TPU)
    tpu_zone: Optional[str] = _hw(
        None, "GCE zone where the Cloud TPU is located (with a --tpu_name that is a name; "
        "unset: asked of the GCE metadata server).", applies=ON_A_TPU)
    gcp_project: Optional[str] = _hw(
        None, "Project name for the Cloud TPU (with a --tpu_name that is a name; unset: "
        "asked of the GCE metadata server).", applies=ON_A_TPU)
    optimizer: str = _optim(
        "lars", "Optimizer to use. adamw (ours, for ViT recipes): Adam with decoupled "
        "weight decay of all but norms, biases and the encoder's declared variables "
        "(a ViT's class token and position embedding).", rules.OPTIMIZERS)
    momentum: float = _optim(0.9, "Momentum parameter.",
                             checks=(bounds.rule(rules.check_momentum),))
    eval_name: Optional[str] = _eval(None, "Accepted so that the authors' command "
                                     "lines run; unused.")
    keep_checkpoint_max: int = _ckpt(5, "Maximum number of checkpoints to keep.",
                                     checks=(bounds.positive("e.g. 5"),))
    keep_hub_module_max: int = _ckpt(1, "Maximum number of exports to keep (of each format).",
                                     checks=(bounds.positive("e.g. 1"),))
    temperature: float = _aug(0.1, "Temperature parameter for contrastive loss.",
                              checks=(bounds.rule(rules.check_temperature),))
    hidden_norm: bool = _aug(True, "L2-normalise z before the dot products of the "
                             "contrastive loss (cosine similarity).")
    proj_head_mode: str = _model("nonlinear", "How the head projection is done.",
                                 rules.PROJ_HEAD_MODES)
    proj_out_dim: int = _model(128, "Number of head projection dimension.",
                               checks=(bounds.rule(rules.check_proj_out_dim),))
    num_proj_layers: int = _model(3, "Number of non-linear head layers.",
                                  checks=(bounds.rule(rules.check_num_proj_layers,
                                                      "proj_head_mode", "num_proj_layers"),))
    ft_proj_selector: int = _model(
        0, "Which layer of the projection head to use during fine-tuning. 0 means no "
        "projection head, and -1 means the final layer.",
        checks=(bounds.rule(rules.check_ft_proj_selector, "proj_head_mode",
                            "num_proj_layers", "ft_proj_selector"),))
    global_bn: bool = _model(True, "Whether to aggregate BN statistics across "
                             "distributed cores.")
    width_multiplier: float = _model(1, "Multiplier to change width of network.",
                                     checks=(bounds.rule(rules.check_width_multiplier),))
    resnet_depth: int = _model(50, "Depth of ResNet.",
                               checks=(bounds.rule(variants.check_depth),))
    sk_ratio: float = _model(0.0, "If it is bigger than 0, it will enable SK. "
                             "Recommendation: 0.0625.",
                             checks=(bounds.rule(functools.partial(rules.check_ratio,
                                                                   "sk_ratio")),))
    se_ratio: float = _model(0.0, "If it is bigger than 0, it will enable SE.",
                             checks=(bounds.rule(functools.partial(rules.check_ratio,
                                                                   "se_ratio")),))
    image_size: int = _data(224, "Input image size.",
                            checks=(bounds.positive("e.g. 224 (ImageNet) or 32 (CIFAR)"),
                                    bounds.rule(rules.check_image_size, "image_size",
                                                "resolved_stem")))
    color_jitter_strength: float = _aug(1.0, "The strength of color jittering.",
                                        checks=(bounds.rule(
                                            rules.check_color_jitter_strength),))
    use_blur: bool = _aug(True, "Whether or not to use Gaussian blur for augmentation "
                          "during pretraining.")

    # --- Ours ---
    encoder: str = _model(
        "resnet", "The encoder f: 'resnet' (ResNet v1: --resnet_depth, "
        "--width_multiplier, --sk_ratio, --se_ratio, --stem, or --variant), 'vit_s16' "
        "or 'vit_b16' (ViT-S/16, ViT-B/16; h per --vit_pool; image_size a multiple of "
        "16), 'hub:<name>' (a keras-hub image backbone; docs/encoders.md), or 'tiny' "
        "(two conv-BN-ReLU stages as wide as --width_multiplier says; smoke runs, tests).")
    encoder_config: Optional[str] = _model(
        None, "--encoder=hub:<BackboneClass>: the class's arguments as JSON, e.g. "
        "'{\"stackwise_num_filters\": [64, 128], ...}' (random init); not needed for "
        "hub:<preset directory>.")
    vit_pool: str = _model(
        "token", "ViT encoders: h is the class token ('token', as DINO and MoCo v3) or "
        "the mean of the patch tokens ('mean'), after the final LayerNorm.",
        ("token", "mean"))
    variant: Optional[str] = _model(
        None, "Model variant name such as r50_1x_sk0 or r152_3x_sk1; sets resnet_depth, "
        "width_multiplier and sk_ratio (which must then not contradict it).",
        sets=tuple(VARIANT_FLAGS))
    stem: str = _model(
        "auto", "Encoder stem: 'imagenet' (7x7/2 conv + max-pool), 'cifar' (3x3/1 conv, "
        "no pool) or 'auto' = cifar when image_size <= 32 (the authors' rule), logged.",
        ("auto", "imagenet", "cifar"))
    strategy: str = _hw(
        "auto", "Distribution: 'auto' (tpu with --use_tpu, else mirrored over all GPUs "
        "if more than one, else default), 'default', 'mirrored', 'multiworker' "
        "(TF_CONFIG), 'tpu'.", ("auto", "default", "mirrored", "multiworker", "tpu"))
    peer_wait_secs: int = _hw(
        600, "With --strategy=multiworker: how long each worker waits for the other tasks "
        "of TF_CONFIG to answer on their ports (progress every 30 s; a SIGTERM stops "
        "the wait) before TensorFlow connects them; then the run stops naming each "
        "missing task (exit 1). 0 = no wait of ours: TensorFlow's rendezvous, which "
        "waits without bound. A TPU run waits as long for its TPU to connect and "
        "start (0: without bound), then stops with one line (exit 2).",
        checks=(bounds.at_least(0),),
        applies=bounds.applies(("strategy", "use_tpu"),
                               lambda strategy, use_tpu: use_tpu or strategy in (
                                   "multiworker", "tpu"),
                               "to a run that waits for peers (--strategy=multiworker, "
                               "or a TPU: --use_tpu)", "pass --strategy=multiworker"))
    cpu_replicas: int = _hw(
        0, "With --strategy=mirrored and no GPU: split the host CPU into this many "
        "logical devices before TensorFlow starts, one replica each, to rehearse a "
        "multi-replica run on one machine (8: a TPU v3-8's replicas; docs/tpu.md). "
        "Same batch, loss and update as one device, slower. 0 = TensorFlow's one CPU "
        "device.",
        checks=(bounds.rule(rules.check_cpu_replicas),))
    mixed_precision: str = _hw(
        "none", "Compute dtype policy; losses and BN statistics stay float32.",
        ("none", "bfloat16", "float16"))
    jit_compile: bool = _hw(
        False, "Compile the train step with XLA. Off by default: on CPU it is slower "
        "and it fails under MirroredStrategy on CPU.", applies=modes.TRAINING)
    augmentations: str = _aug(
        "", "Comma-separated transformations of a training view: crop (random resized "
        "crop; else the whole image resized), flip, color (jitter and grayscale at "
        "--color_jitter_strength), or 'none'; blur is --use_blur. Empty = the train "
        "mode's own: pretraining all three, fine-tuning and distillation crop,flip.",
        checks=(bounds.rule(rules.augmentations),))
    augment_on: str = _aug(
        "host", "Where pretraining augmentations run: 'host' (tf.data, per image) or "
        "'device' (crop, flip, colour jitter, grayscale batched in the train step; "
        "the host only decodes and resizes). Blur always runs on the device.",
        ("host", "device"))
    head_learning_rate: Optional[float] = _optim(
        None, "Pretraining: the online linear head's own base learning rate, scaled "
        "by batch size, warmed up and decayed as --learning_rate (the head is outside "
        "LARS' trust scaling, so this is its actual rate). The head reads "
        "stop_gradient(h): the encoder trains exactly as without it. None = "
        "--learning_rate, as the authors' code (e.g. 0.1, the paper's linear-eval "
        "rate, keeps the quick start's online head from diverging; docs/fidelity.md).",
        checks=(bounds.positive("e.g. 0.1", unset="use --learning_rate"),),
        applies=train_modes.ONLINE_HEAD)
    grad_cache_chunk: int = _optim(
        0, "Gradient caching: 0 = off, else process each replica's batch in chunks of "
        "this many images (embeddings first without gradients, then each chunk again "
        "with them): memory of one chunk, loss over the whole batch, BN statistics "
        "per chunk, ~1.33x compute. Must divide the per-replica batch.",
        checks=(bounds.rule(rules.check_grad_cache_chunk),
                bounds.rule(train_modes.check_grad_cache_mode, "grad_cache_chunk",
                            "train_mode")), applies=modes.TRAINING)
    log_every_steps: Optional[int] = _run(
        None, "Steps between TensorBoard scalars (the authors' train/* names, as means "
        "over the interval), metrics.jsonl lines and progress lines; one is also "
        "written at the last step. 0 = at checkpoints only, as the authors' code. "
        "Unset: 1/50 of the run's steps, at most 100, so a short run has a curve; "
        "progress lines then about every fifth of the run, at most every 100 steps.",
        checks=(bounds.at_least(0),))
    progress: str = _run(
        "auto", "What training shows: 'bar' (one bar for the whole run, redrawn in "
        "place), 'lines' (one plain line per --log_every_steps, for logs and "
        "schedulers), 'none', or 'auto' = bar on a terminal, lines otherwise.",
        ("auto", "bar", "lines", "none"))
    eval_wait_secs: int = _eval(
        0, "With --mode=eval: 0 evaluates the latest checkpoint once; > 0 keeps "
        "evaluating each new checkpoint until none appears for this many seconds.",
        checks=(bounds.at_least(0),))
    seed: int = _run(0, "Seed of weights, data order and augmentations.")
    label_fraction: float = _data(
        1.0, "Use a deterministic stratified subset of this fraction of the labelled "
        "training split (e.g. 0.01 or 0.1) for fine-tuning, or as the labelled "
        "examples of distillation with --distill_alpha < 1; ids written to model_dir.",
        checks=(bounds.rule(rules.check_label_fraction),), applies=train_modes.LABELLED)
    teacher: Optional[str] = _distill(
        None, "--train_mode=distill: the fixed teacher, a model with a supervised head: "
        "a fine-tuning run directory or checkpoint of ours, one of our SavedModel "
        "exports (run/saved_model/<step>) or an authors' released fine-tuned model. It "
        "runs in inference mode on the student's view and is never trained. Without "
        "architecture flags (and --checkpoint) the student is the teacher's "
        "architecture (self-distillation).")
    distill_temperature: float = _distill(
        1.0, "tau of the teacher's and the student's softmax in the distillation loss "
        "-sum_y P_T(y|x; tau) log P_S(y|x; tau) (SimCLR v2, eq. 2; no tau^2 factor: "
        "docs/distillation.md). The paper: 0.1 for self-distillation, 1.0 (the "
        "default, and the authors' colab's) for a smaller student.",
        checks=(bounds.rule(rules.check_distill_temperature),))
    distill_alpha: float = _distill(
        1.0, "Weight of the distillation loss; 1 - alpha weighs the cross-entropy on "
        "the labelled examples (--label_fraction of --train_split; the others count "
        "as unlabelled), both summed over the batch and divided by its size (SimCLR "
        "v2, eq. 3). 1.0 = distillation with no labels, the paper's default.",
        checks=(bounds.rule(rules.check_distill_alpha),))
    final_linear_probe: bool = _eval(
        False, "After training, fit an L-BFGS logistic-regression probe on frozen h "
        "(train split) and report its eval-split accuracy next to the same probe on a "
        "randomly initialised encoder.")
    allow_eval_overlap: bool = _eval(
        False, "Evaluate on a split that shares examples with the split the weights "
        "were trained on (or any run they started from: a fine-tune's pretraining, as "
        "flags.json records it), or a kNN bank or probe training split that shares examples "
        "with the split it is evaluated on (e.g. --train_split=test --eval_split=test, "
        "or train[:60%] and train[50%:]; for image folders, the same file or a "
        "byte-identical copy in both). Without this flag such a run is refused before "
        "anything is built, naming both flags and the number of shared examples; with "
        "it, result.json records eval_overlaps_train: true and each overlap.")
    evaluators: str = _eval(
        "", "Comma-separated evaluators to run (names of simclr_tf.evaluation.registry: "
        "supervised, knn, linear_probe, distill, or one registered): a training mode's "
        "monitors of the training model (knn every --knn_eval_every steps, the others "
        "at every checkpoint), or what --mode=eval / --mode=linear_probe measure on "
        "the checkpoint. Empty = the mode's own: pretraining's kNN monitor when "
        "--knn_eval_split is set, distillation's monitor when --eval_split is set; "
        "supervised for --mode=eval (and train_then_eval's eval after training, which "
        "this flag does not change); linear_probe for --mode=linear_probe. Never read "
        "from a record.")
    knn_eval_split: Optional[str] = _eval(
        None, "kNN monitor while pretraining: a labelled split classified by weighted "
        "kNN on h every --knn_eval_every steps (None = off).")
    knn_bank_split: Optional[str] = _eval(
        None, "Labelled split whose h forms the kNN monitor's bank, eval-preprocessed "
        "(None = --train_split).")
    knn_eval_every: int = _eval(
        0, "Steps between kNN evaluations (0 = at every checkpoint).",
        checks=(bounds.at_least(0),))
    knn_k: int = _eval(200, "Neighbours of the weighted kNN classifier.",
                       checks=(bounds.rule(rules.check_knn_k),))
    knn_temperature: float = _eval(
        0.07, "kNN votes are exp(cosine similarity / knn_temperature).",
        checks=(bounds.rule(rules.check_knn_temperature, "knn_temperature", "knn_k"),))
    knn_max_bank: int = _eval(
        10000, "At most this many bank examples (a fixed stratified subset; 0 = all): "
        "bounds the kNN monitor's cost.",
        checks=(bounds.at_least(0),))
    knn_max_queries: int = _eval(
        10000, "At most this many query examples (a fixed stratified subset; 0 = all).",
        checks=(bounds.at_least(0),))
    embed_split: Optional[str] = _eval(
        None, "--mode=embed: the split to embed (None = --eval_split); unlabelled "
        "splits and folders work.")
    embed_output: Optional[str] = _eval(
        None, "--mode=embed: output file, .npz or .parquet (None = "
        "model_dir/embeddings/<split>.npz).")
    embed_projection: bool = _eval(
        False, "--mode=embed: also write z (the projection head output).")
    embed_projector_size: int = _eval(
        1000, "--mode=embed: examples in the TensorBoard projector view with image "
        "sprites, written to model_dir/projector (0 = none).",
        checks=(bounds.at_least(0),))
    deterministic: bool = _run(
        False, "Bit-exact reproducible training: TensorFlow op determinism "
        "(tf.config.experimental.enable_op_determinism) on top of the fixed seeds and "
        "the restored data position, so a resumed run ends with exactly the weights of "
        "an uninterrupted one. Can be slower.")
    export_format: str = _ckpt(
        "saved_model", "Comma-separated formats that --mode=export and the end of "
        "training write, each to model_dir/<format>/<step>/: saved_model (TF Serving; "
        "every signature), onnx and litert (the model on preprocessed images of the "
        "run's image size: embedding, projection, logits; `pip install -e '.[export]'` to "
        "run them), keras_hub (a keras-hub preset of the encoder, with a model card); "
        "none: training ends without an export (sweeps; --mode=export writes one later).",
        checks=(bounds.rule(rules.export_formats),))
    serving_max_pixels: int = _ckpt(
        rules.SERVING_MAX_PIXELS, "Exports: the most pixels (width x height, read from "
        "the header before decoding) of one image sent to serving_default; a larger "
        "one fails with InvalidArgument naming its index in the batch and the limit. "
        "0 = no limit.",
        checks=(bounds.rule(rules.check_serving_max_pixels),))
    skip_corrupt_images: bool = _data(
        True, "Folder datasets: skip (and count) files that are empty, truncated, "
        "corrupt, not images, or too large to decode, named in a summary line and in "
        "result.json (a body damaged behind a valid header is found while reading, and "
        "dropped then); off: every file is decoded once before training (cached) and "
        "the first such file fails the run before training, naming its path.")

    # --- Not a flag: the flags given explicitly (`with_given`, `is_given`); a
    # field, so that `dataclasses.replace` keeps it ---
    _given: Optional[frozenset] = dataclasses.field(default=None, compare=False,
                                                    repr=False)

    # ---------------------------------------------------------------- derived
    @property
    def resolved_stem(self):
        """The stem actually used ('auto' resolved by the authors' image-size rule)."""
        return rules.resolve_stem(self.stem, self.image_size)

    def model_kwargs(self, num_classes=None):
        """Keyword arguments of `simclr_tf.models.SimCLRModel` for this run
        (`architecture.model_kwargs`); `num_classes`: the supervised head's, or None."""
        return architecture.model_kwargs(self, num_classes)

    def encoder_option(self, flag):
        """The value an encoder receives for `flag` (`architecture.encoder_option`)."""
        return architecture.encoder_option(self, flag)

    # ----------------------------------------------------------- validation
    def validate(self):
        """Checks every value and combination (`simclr_tf.config.validation`); returns self
        or raises ConfigError."""
        return validation.validate(self)

    def head_rate_multiplier(self):
        """--head_learning_rate / --learning_rate (1.0 when unset): both go through
        the same batch scaling, warmup and cosine, so their ratio is constant."""
        if self.head_learning_rate is None:
            return 1.0
        return self.head_learning_rate / self.learning_rate

    # -------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, values, given=None):
        """Builds a Config from a mapping of flag values, applying `variant` (here
        only: the one place it is checked and applied).

        Unknown keys raise ConfigError. The variant, when given, fills resnet_depth,
        width_multiplier and sk_ratio; one of them also chosen (`is_given`) must
        agree with it (ConfigError).

        Args:
            values: {flag: value}.
            given: the flags given explicitly (`with_given`), or None (a value that
                differs from the default counts as given).
        """
        names = {f.name for f in cls.flag_fields()}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(unknown[0], "is not a known setting.")
        config = cls(**values)
        if given is not None:
            config = config.with_given(given)
        if config.variant is not None:
            check_variant_flags(config.variant, {
                flag: getattr(config, flag) for flag in VARIANT_FLAGS
                if config.is_given(flag)})
            parsed = variants.parse_variant(config.variant)
            config = dataclasses.replace(
                config, resnet_depth=parsed["depth"],
                width_multiplier=parsed["width_multiplier"], sk_ratio=parsed["sk_ratio"])
        return config

    def to_dict(self):
        values = {f.name: getattr(self, f.name) for f in self.flag_fields()}
        values["resolved_stem"] = self.resolved_stem
        return values

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        values = json.loads(text)
        values.pop("resolved_stem", None)
        return cls.from_dict(values)


# A train mode's option may not take a flag's name (its table cannot import this).
train_modes.reserve_flag_names(field.name for field in Config.flag_fields())
